# Labels by technique: `ctest -L zero` runs every test of ZeRO, wherever it is registered
# (its unit tests, its equivalence cases, its ledger checks, its checkpoints, its memory
# estimates, its bad flags). A test carries a technique's label when its command line uses
# the technique's flags or its name names the technique; a test may carry several. The
# labels a test is given where it is registered (unit, mpi, cli, equivalence, docs, ...)
# stay: they say what kind of test it is.
#
#   label       technique (folder)                        a test's command or name
#   dp          data parallelism (data_parallel/)         --dp N>1, --dp-mode, --dp-bucket-mb; dpN, data_parallel
#   tp          tensor + sequence parallelism (tensor_parallel/)   --tp N>1, --sp; tpN, _sp, tensor_parallel
#   pp          pipeline parallelism (pipeline_parallel/)  --pp N>1, --pp-*; ppN, pp_, a schedule's name
#   cp          context parallelism (context_parallel/)    --cp N>1, --cp-*; cpN, cp_, ulysses, hybrid
#   ep          experts: MoE and expert parallelism (expert_parallel/)  --ep N>1, tiny-moe, mixtral, --num-*experts*; epN, moe
#   zero        ZeRO 1/2/3, HSDP, hpZ (zero/)              --zero*; zeroN, hsdp, hpz, data_parallel.overlap (its ZeRO part)
#   fp8         fp8 training (kernels/fp8.h)               --fp8; fp8
#   kernels     fused kernels, flash attention (kernels/)  --kernels fused|auto, --attention naive|flash-*; kernels, flash
#   recompute   activation recomputation                   --recompute selective|full; recompute
#   checkpoint  checkpoints and resume (runtime/checkpoint/)  --save-dir, --resume, --save-every, --keep-checkpoints; checkpoint
#
# The unit tests (one Catch2 binary, tests/unit/) take the label of their file: the table
# PICOTRON_UNIT_TECHNIQUES below (a file not in it has only the label unit).
#
# CMake keeps no property with a test's command, so add_test is wrapped: the builtin
# (_add_test) gets every argument unchanged, and the command is kept for the rules.
# (tests/scripts/check_labels.py, ctest labels.every_test: every test has a kind or a technique.)

set(PICOTRON_TECHNIQUES dp tp pp cp ep zero fp8 kernels recompute checkpoint)
# One rule per technique: a regex over the command line (flags, with a space before) and
# one over the test's name.
set(PICOTRON_RULE_CMD_dp " --dp[ =]*[2-9]| --dp-(mode|bucket-mb)")
set(PICOTRON_RULE_NAME_dp "[._]dp[0-9]|data_parallel|^dp\\.|^task\\.dp\\.")
set(PICOTRON_RULE_CMD_tp " --tp[ =]*[2-9]| --sp( |$)")
set(PICOTRON_RULE_NAME_tp "[._]tp[0-9]|[._]sp([._]|$)|tensor_parallel|^tp\\.|^task\\.tp\\.")
set(PICOTRON_RULE_CMD_pp " --pp[ =]*[2-9]| --pp-(schedule|virtual-stages|trace)")
set(PICOTRON_RULE_NAME_pp "[._]pp[0-9]|[._]pp_|pipeline_parallel|dualpipev|1f1b|afab|zb-h1|[._]zb([._]|$)|interleaved|p2p_program|^pp\\.|^task\\.pp\\.")
set(PICOTRON_RULE_CMD_cp " --cp[ =]*[2-9]| --cp-(mode|layout|ulysses)")
set(PICOTRON_RULE_NAME_cp "[._]cp[0-9]|[._]cp_|context_parallel|ulysses|hybrid|^cp\\.|^task\\.cp\\.")
set(PICOTRON_RULE_CMD_ep " --ep[ =]*[2-9]|tiny-moe|mixtral| --num-local-experts| --num-experts-per-tok")
set(PICOTRON_RULE_NAME_ep "[._]ep[0-9]|[._]ep_|moe|mixtral|expert_parallel|^ep\\.|^task\\.(ep|moe)\\.")
set(PICOTRON_RULE_CMD_zero " --zero([ =]|-shard|-hpz|-offload)|check_zero_memory")
set(PICOTRON_RULE_NAME_zero "[._]zero[0-9]|[._]zero$|hsdp|hpz|^zero\\.|^task\\.zero\\.|^data_parallel\\.overlap$")
set(PICOTRON_RULE_CMD_fp8 " --fp8( |$)")
set(PICOTRON_RULE_NAME_fp8 "fp8")
set(PICOTRON_RULE_CMD_kernels " --kernels[ =]*(fused|auto)| --attention[ =]*(naive|flash)")
set(PICOTRON_RULE_NAME_kernels "kernels|flash_|^task\\.kernels\\.")
set(PICOTRON_RULE_CMD_recompute " --recompute[ =]*(selective|full)")
set(PICOTRON_RULE_NAME_recompute "recompute|^task\\.memory\\.recompute")
set(PICOTRON_RULE_CMD_checkpoint " --(save-dir|resume|save-every|keep-checkpoints)( |=|$)")
set(PICOTRON_RULE_NAME_checkpoint "checkpoint")

# The unit tests' files and their labels: FILE:LABEL (FILE:LABEL:LABEL for several).
set(PICOTRON_UNIT_TECHNIQUES
  "test_zero:zero" "test_context_parallel_layout:cp" "test_pipeline:pp" "test_p2p_program:pp"
  "test_dualpipev:pp" "test_moe:ep" "test_fp8:fp8" "test_kernels:kernels" "test_flash_mma:kernels"
  "test_checkpoint:checkpoint")

function(add_test)
  if(NOT ARGV0 STREQUAL "NAME")
    message(FATAL_ERROR "add_test(${ARGV0} ...): tests/ registers tests as add_test(NAME name COMMAND ...)")
  endif()
  # Each argument as a bracket argument: passed on exactly (a ';' or an unmatched '[' inside
  # it would otherwise split or merge arguments when a list of them is expanded).
  set(call "_add_test(")
  set(line "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE ${last})
    string(APPEND call " [=====[${ARGV${i}}]=====]")
    if(i GREATER 2)
      string(APPEND line " ${ARGV${i}}")
    endif()
  endforeach()
  cmake_language(EVAL CODE "${call})")
  set_property(GLOBAL PROPERTY PICOTRON_TEST_COMMAND_${ARGV1} "${line}")
endfunction()

# The unit tests: one Catch2 discovery per label set, each selecting its files' test cases
# (-# tags every case with its file's name, "[#test_zero]"; a comma means "or", "~" "not").
# The spec only selects at discovery: each test's command is unit_tests "its name", as
# before. Each discovery lists its tests (TEST_LIST); a file ctest reads after them gives
# those tests their labels.
function(picotron_discover_unit_tests target)
  set(sets "")
  set(labelled "")
  foreach(entry ${PICOTRON_UNIT_TECHNIQUES})
    string(REPLACE ":" ";" entry "${entry}")
    list(GET entry 0 file)
    list(SUBLIST entry 1 -1 labels)
    string(REPLACE ";" "_" key "${labels}")
    list(APPEND sets ${key})
    list(APPEND files_${key} "[#${file}]")
    list(APPEND labelled "[#${file}]")
  endforeach()
  list(REMOVE_DUPLICATES sets)
  list(JOIN labelled "~" others)
  set(script "")
  foreach(key ${sets} unit)
    if(key STREQUAL "unit")  # every other file: unit alone
      set(spec "~${others}")
      set(labels unit)
    else()
      list(JOIN files_${key} "," spec)
      string(REPLACE "_" ";" labels "unit_${key}")
    endif()
    catch_discover_tests(${target} TEST_SPEC "-#;${spec}" TEST_LIST ${target}_${key} ${ARGN})
    string(APPEND script "foreach(t IN LISTS ${target}_${key})\n"
      "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${labels}\")\nendforeach()\n")
  endforeach()
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake "${script}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake)
endfunction()

# After every test is registered: each technique's label on the tests its rules match.
function(picotron_label_techniques)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test ${tests})
    get_property(line GLOBAL PROPERTY PICOTRON_TEST_COMMAND_${test})
    foreach(technique ${PICOTRON_TECHNIQUES})
      if(line MATCHES "${PICOTRON_RULE_CMD_${technique}}" OR test MATCHES "${PICOTRON_RULE_NAME_${technique}}")
        set_property(TEST ${test} APPEND PROPERTY LABELS ${technique})
      endif()
    endforeach()
  endforeach()
endfunction()
