# The run report (issue 67): build/train --run-dir DIR, then scripts/run_report.py DIR, opened
# in headless Chromium by tests/scripts/report_browser.py (the page loads offline with no console
# error and no request outside the file, shows the expected panels, and its numbers equal
# the run's files). One example per technique family; each writes its screenshot into
# docs/ (the pictures the technique READMEs and docs/running.md show; nothing compares
# pixels). Without chromium on PATH the browser step prints "SKIPPED:" and ctest counts
# the test as skipped (scripts/setup.sh installs Debian's chromium).
#
#   ctest --test-dir build -L report
set(REPORT_DIR ${CMAKE_CURRENT_BINARY_DIR}/report)
file(MAKE_DIRECTORY ${REPORT_DIR})
set(REPORT_CASE ${CMAKE_SOURCE_DIR}/tests/scripts/report_case.sh)
set(REPORT_RUN --device cpu --steps 3 --seq-len 32 --micro-batch-size 2 --warmup-steps 1 --generate 0 --threads 1 --explain)
set(REPORT_DOCS ${CMAKE_SOURCE_DIR}/docs)

# report_test(NAME name NP ranks PANELS a,b SCREENSHOT png|- [REFERENCE dir] ARGS train flags...)
function(report_test)
  cmake_parse_arguments(R "" "NAME;NP;PANELS;SCREENSHOT;REFERENCE" "ARGS" ${ARGN})
  add_test(NAME report.${R_NAME} COMMAND ${REPORT_CASE} ${REPORT_DIR}/${R_NAME} ${R_PANELS} ${R_SCREENSHOT} ${R_REFERENCE}
    -- ${PICOTRON_MPIRUN} -np ${R_NP} $<TARGET_FILE:train> ${REPORT_RUN} ${R_ARGS})
  set_tests_properties(report.${R_NAME} PROPERTIES LABELS "report;mpi" TIMEOUT 240 ENVIRONMENT "${PICOTRON_TEST_ENV}"
    PROCESSORS 2 SKIP_REGULAR_EXPRESSION "SKIPPED:" PASS_REGULAR_EXPRESSION "ok: .*report.html in headless")
endfunction()

set(REPORT_ALL run,loss,timeline,ledger,memory,narration,hang)
# Pipeline (and data) parallelism: dp 2 x pp 2, the timeline of a 1F1B step.
report_test(NAME pipeline_dp2_pp2 NP 4 PANELS ${REPORT_ALL}
  SCREENSHOT ${REPORT_DOCS}/report_pipeline.png ARGS --dp 2 --pp 2 --grad-acc-steps 2)
# The single-process run, the reference of the next: the same global batch, one rank.
report_test(NAME single NP 1 PANELS run,loss,memory,narration,hang SCREENSHOT - ARGS)  # (no communication: no ledger)
set_tests_properties(report.single PROPERTIES FIXTURES_SETUP report_single)
# Context parallelism, hybrid (all-to-all over 2, a ring over 2), against the single run.
report_test(NAME context_hybrid NP 4 PANELS ${REPORT_ALL} SCREENSHOT ${REPORT_DOCS}/report_context_hybrid.png
  REFERENCE ${REPORT_DIR}/single ARGS --cp 4 --cp-mode hybrid --cp-ulysses 2)
set_tests_properties(report.context_hybrid PROPERTIES FIXTURES_REQUIRED report_single)
# Tensor parallelism with ZeRO-1 over dp.
report_test(NAME tensor_zero NP 4 PANELS ${REPORT_ALL} SCREENSHOT ${REPORT_DOCS}/report_tensor_zero.png
  ARGS --tp 2 --dp 2 --zero 1)
# Expert parallelism: four experts over ep 2.
report_test(NAME experts NP 2 PANELS ${REPORT_ALL} SCREENSHOT ${REPORT_DOCS}/report_experts.png
  ARGS --dp 2 --ep 2 --num-local-experts 4 --num-experts-per-tok 2)

string(REPLACE ";" " " REPORT_MPIRUN "${PICOTRON_MPIRUN}")  # (inside sh -c: one string)
# A bad --run-dir: one line on every rank, a non-zero exit, no hang, and the file that was
# there is left as it was.
add_test(NAME report.bad_run_dir COMMAND ${EXPECT_FAIL} "\\[rank 1\\] error: --run-dir .*is a file, not a folder" --
  sh -c "printf keep > ${REPORT_DIR}/a_file && ${REPORT_MPIRUN} -np 2 $<TARGET_FILE:train> --device cpu --dp 2 --run-dir ${REPORT_DIR}/a_file; rc=$?; grep -qx keep ${REPORT_DIR}/a_file && exit $rc")
add_test(NAME report.run_dir_under_a_file COMMAND ${EXPECT_FAIL} "\\[rank 1\\] error: --run-dir .*a_file/run: cannot create the folder" --
  sh -c "printf keep > ${REPORT_DIR}/a_file && ${REPORT_MPIRUN} -np 2 $<TARGET_FILE:train> --device cpu --dp 2 --run-dir ${REPORT_DIR}/a_file/run")
set_tests_properties(report.bad_run_dir report.run_dir_under_a_file PROPERTIES LABELS "report;mpi" TIMEOUT 60
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2)
