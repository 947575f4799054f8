# Comm under mpirun (label mpi):
#   comm.npN              tests/mpi/comm_test.cpp at 1, 2, 3, 4 and 8 ranks: every collective and
#                         dtype against closed forms, every group of every mesh, pp/cp ring
#                         neighbours as group ranks, async overlap, the ledger and comm_report
#   (the NCCL watchdog is tested in unit_tests "[gpu]": test_gpu.cpp, skipped without a GPU)
#   comm_failure.MODE.npN tests/mpi/comm_failure.cpp: a rank that throws, hangs or is killed ends
#                         the job with a non-zero exit and a message, well before TIMEOUT
add_executable(comm_tests mpi/comm_test.cpp)
add_executable(comm_failure mpi/comm_failure.cpp)
foreach(target comm_tests comm_failure)
  target_link_libraries(${target} PRIVATE picotron_step picotron_runtime_launch)  # (detect_launch)
  target_link_options(${target} PRIVATE ${PICOTRON_LINK_FLAGS})
  target_compile_options(${target} PRIVATE ${PICOTRON_WARNINGS})
  target_precompile_headers(${target} REUSE_FROM picotron_step)
endforeach()

foreach(np 1 2 3 4 8)
  picotron_mpi_test(NAME comm.np${np} NP ${np} TIMEOUT 300 LABELS comm
    COMMAND $<TARGET_FILE:comm_tests> --timeout-s 60
    PASS_REGEX "[0-9]+ passed, 0 failed")
endforeach()

# comm_failure_test(<mode> <ranks> <regex>): passes when mpirun exits non-zero and its
# output matches <regex> (expect_failure.sh). Rank 1 hangs for 600 s in "hang" mode, so
# finishing inside TIMEOUT 60 proves the others gave up after --timeout-s 3.
function(comm_failure_test mode np regex)
  add_test(NAME comm_failure.${mode}.np${np}
    COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/expect_failure.sh "${regex}" --
            ${PICOTRON_MPIRUN} -np ${np} $<TARGET_FILE:comm_failure> ${mode} --timeout-s 3)
  set_tests_properties(comm_failure.${mode}.np${np} PROPERTIES TIMEOUT 60
    ENVIRONMENT "${PICOTRON_TEST_ENV}" LABELS "mpi;comm" PROCESSORS 2)
endfunction()

comm_failure_test(throw 2 "\\[rank 1\\] error: rank 1 failed on purpose at step 5")
comm_failure_test(throw 4 "\\[rank 1\\] error: rank 1 failed on purpose at step 5")
comm_failure_test(hang 2 "\\[rank 0\\] error: \\[rank 0\\] all_reduce timed out after 3 s: a peer died or stopped answering")
comm_failure_test(hang 4 "error: \\[rank [023]\\] all_reduce timed out after 3 s: a peer died or stopped answering")
comm_failure_test(kill 2 "exited on signal 9|timed out after 3 s")
