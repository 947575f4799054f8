# The flight recorder (runtime/observe/flight_recorder.h, runtime/observe/flight_dump.h) and the
# hang report (scripts/hang_report.py), label flight. Each case runs a two-rank job that
# goes wrong in one way, lets every rank write DIR/comms-rank<R>.json, and checks the line
# the report puts first (tests/scripts/flight_case.sh). --timeout-s 2 keeps each case ~5 s.
#   flight.pipeline_m      two pipeline stages run 1F1B for 4 and for 2 micro-batches
#   flight.sends_first     both stages send before they receive (tests/mpi/flight_cases.cpp)
#   flight.skipped         rank 1 skips one all-reduce
#   flight.rank_stopped    build/train --dp 2: rank 1 is stopped (SIGSTOP) mid-run
#   flight.rank_killed     build/train --dp 2: rank 1 is killed (SIGKILL): no file
#   flight.clean           build/train --pp 2 --flight-dump-at-end: nothing wrong
#   flight.grade_verdict   scripts/assignment grade shows the report's verdict for a hung fill
add_executable(flight_cases mpi/flight_cases.cpp)
target_link_libraries(flight_cases PRIVATE picotron_core)
target_link_options(flight_cases PRIVATE ${PICOTRON_LINK_FLAGS})
target_compile_options(flight_cases PRIVATE ${PICOTRON_WARNINGS})
target_precompile_headers(flight_cases REUSE_FROM picotron_step)

set(FLIGHT_DIR ${CMAKE_CURRENT_BINARY_DIR}/flight)
set(FLIGHT_TRAIN $<TARGET_FILE:train> --device cpu --model tiny --seq-len 32 --micro-batch-size 1 --generate 0
  --threads 1 --timeout-s 2)
# flight_test(<name> <regex the report must match> [stop|kill DELAY] -- <command>...)
function(flight_test name regex)
  add_test(NAME flight.${name} COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/flight_case.sh ${FLIGHT_DIR}/${name} "${regex}"
    ${ARGN})
  set_tests_properties(flight.${name} PROPERTIES LABELS "flight;mpi;reliability" TIMEOUT 90 PROCESSORS 2
    ENVIRONMENT "${PICOTRON_TEST_ENV}" PASS_REGULAR_EXPRESSION "flight ok" FAIL_REGULAR_EXPRESSION "FAILED")
endfunction()

flight_test(pipeline_m "rank 0 (waits for|sends) message #[0-9]+ (from|to) rank 1, but rank 1 (sent it|posted) only [0-9]+"
  -- ${PICOTRON_MPIRUN} -np 2 $<TARGET_FILE:flight_cases> pipeline_m ${FLIGHT_DIR}/pipeline_m --timeout-s 2)
flight_test(sends_first "ranks 0 and 1 both send first, and neither receives"
  -- ${PICOTRON_MPIRUN} -np 2 $<TARGET_FILE:flight_cases> sends_first ${FLIGHT_DIR}/sends_first --timeout-s 2)
flight_test(skipped "the ranks disagree at collective #3"
  -- ${PICOTRON_MPIRUN} -np 2 $<TARGET_FILE:flight_cases> skip ${FLIGHT_DIR}/skipped --timeout-s 2)
flight_test(rank_stopped "rank 1 (most likely )?stopped answering"
  stop 1 -- ${PICOTRON_MPIRUN} -np 2 -- ${FLIGHT_TRAIN} --dp 2 --steps 100000 --flight-recorder ${FLIGHT_DIR}/rank_stopped)
flight_test(rank_killed "rank 1 left no file: it died"
  kill 1 -- ${PICOTRON_MPIRUN} -np 2 -- ${FLIGHT_TRAIN} --dp 2 --steps 100000 --flight-recorder ${FLIGHT_DIR}/rank_killed)
flight_test(clean "^No problem found"
  -- ${PICOTRON_MPIRUN} -np 2 ${FLIGHT_TRAIN} --pp 2 --grad-acc-steps 2 --steps 3 --flight-recorder ${FLIGHT_DIR}/clean
  --flight-dump-at-end)

# scripts/assignment grade shows the report's verdict when a fill hangs (on flight.sends_first's files).
add_test(NAME flight.grade_verdict COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/flight_grade_check.py ${FLIGHT_DIR}/sends_first)
set_tests_properties(flight.sends_first PROPERTIES FIXTURES_SETUP flight_sends_first)
set_tests_properties(flight.grade_verdict PROPERTIES LABELS "flight;reliability" TIMEOUT 30
  FIXTURES_REQUIRED flight_sends_first PASS_REGULAR_EXPRESSION "grade verdict ok")

# scripts/hang_report.py on folders no healthy run writes (tests/scripts/flight_report_cases.py): an
# earlier run's file beside this run's, three kinds of files that disagree, five kinds of
# damaged file, a FIFO, and its time on 2, 4 and 8 full default rings.
add_test(NAME flight.report_cases COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/flight_report_cases.py)
set_tests_properties(flight.report_cases PROPERTIES LABELS "flight;reliability" TIMEOUT 120
  PASS_REGULAR_EXPRESSION "flight report cases ok" FAIL_REGULAR_EXPRESSION "FAILED")
# The timeout line names the files only when they were written (tests/scripts/flight_unwritable.sh).
add_test(NAME flight.unwritable_folder COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/flight_unwritable.sh $<TARGET_FILE:flight_cases>)
set_tests_properties(flight.unwritable_folder PROPERTIES LABELS "flight;mpi;reliability" TIMEOUT 90 PROCESSORS 2
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PASS_REGULAR_EXPRESSION "flight unwritable ok" FAIL_REGULAR_EXPRESSION "FAILED")
# SIGTERM to one of two ranks (a preempted node, an OOM killer's warning): named first, not a network.
flight_test(rank_term "rank 1 was ended by a signal \\(signal SIGTERM"
  term 1 -- ${PICOTRON_MPIRUN} -np 2 -- ${FLIGHT_TRAIN} --dp 2 --steps 100000 --flight-recorder ${FLIGHT_DIR}/rank_term)
# A file an earlier run left in the folder (flight.clean's) beside this run's: set aside, and the
# killed rank of this run is the one that left no file.
flight_test(stale_file "rank 1 left no file"
  seed ${FLIGHT_DIR}/clean kill 1 -- ${PICOTRON_MPIRUN} -np 2 -- ${FLIGHT_TRAIN} --dp 2 --steps 100000 --flight-recorder ${FLIGHT_DIR}/stale_file)
set_tests_properties(flight.clean PROPERTIES FIXTURES_SETUP flight_clean)
set_tests_properties(flight.stale_file PROPERTIES FIXTURES_REQUIRED flight_clean)
# A crash is evidence too: SIGSEGV to rank 1 (as a fault inside a library would); its file is
# written from the signal handler and the report names it first.
flight_test(rank_crashed "rank 1 crashed \\(crash: SIGSEGV"
  segv 1 -- ${PICOTRON_MPIRUN} -np 2 -- ${FLIGHT_TRAIN} --dp 2 --steps 100000 --flight-recorder ${FLIGHT_DIR}/rank_crashed)
# The flight recorder assignment (task flight.diagnose, docs/assignments/flight_recorder.md):
# a three-rank ring hangs (flight.mystery writes the files); the student's diagnosis, in
# tests/mpi/flight_cases.cpp, is graded against those files (tests/scripts/flight_diagnosis_check.py).
add_test(NAME flight.mystery COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/flight_mystery.sh ${FLIGHT_DIR}/mystery $<TARGET_FILE:flight_cases>)
set_tests_properties(flight.mystery PROPERTIES LABELS "flight;mpi" TIMEOUT 90 PROCESSORS 2 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  FIXTURES_SETUP flight_mystery PASS_REGULAR_EXPRESSION "comms-rank0.json\ncomms-rank1.json\ncomms-rank2.json")
add_test(NAME flight.diagnose COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/flight_diagnosis_check.py ${FLIGHT_DIR}/mystery $<TARGET_FILE:flight_cases>)
set_tests_properties(flight.diagnose PROPERTIES LABELS "flight" TIMEOUT 30 FIXTURES_REQUIRED flight_mystery
  PASS_REGULAR_EXPRESSION "diagnosis right" FAIL_REGULAR_EXPRESSION "FAILED")
