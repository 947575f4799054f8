# Labs (scripts/lab, docs/labs/README.md): predict a number, then measure it. One test per
# chapter (label labs): tests/scripts/lab_check.py solves the chapter's exercises once (each command
# runs once, --cache), checks that the measured answers pass and that each hint's wrong
# answer (forgetting the backward, bytes for elements, a factor of the group size) fails
# with that hint, and that bad input gets one line. All nine: 140 s on 2 cores
# (docs/labs/README.md, "Tests").
set(PICOTRON_LAB_CHAPTERS
  "data parallelism:dp" "tensor parallelism:tp" "pipeline parallelism:pp" "context parallelism:cp"
  "zero:zero" "expert parallelism:ep" "fp8:fp8" "memory:memory" "planner:planner")
foreach(entry ${PICOTRON_LAB_CHAPTERS})
  string(REPLACE ":" ";" entry "${entry}")
  list(GET entry 0 chapter)
  list(GET entry 1 short)
  add_test(NAME lab.${short} COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/lab_check.py ${CMAKE_BINARY_DIR} "${chapter}")
  set_tests_properties(lab.${short} PROPERTIES LABELS "labs;mpi" TIMEOUT 300 PROCESSORS 2
    ENVIRONMENT "${PICOTRON_TEST_ENV}" PASS_REGULAR_EXPRESSION "LABS OK" FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()
