# The equivalence contract (../shared/DESIGN.md): every layout reproduces the
# single-process run of the same seed, config and global batch — per-step loss, grad
# norm and final parameters. The reference takes the whole global batch as one
# micro-batch (tests/scripts/equivalence.sh), so every case also checks gradient accumulation. Grad-norm clipping is active (--grad-clip 0.5 is below the
# norms these runs see), so a wrong gradient norm would show.
#
# Tolerances: float64 1e-9 relative. The parallel run adds the same numbers in another
# order (all-reduce, micro-batch accumulation), which changes results at the 1e-16 level;
# Adam then carries those differences through a few steps. A real bug (a missing
# average, a wrong batch slice, a lost bucket) gives errors of 1e-3 and more.
# float32: 1e-5 — the same reordering at float32's 6e-8 roundoff, with headroom.
#
# Adding a layout is one line: picotron_equivalence(NAME NP <ranks> [RTOL r] [SAME_MICRO_BATCHES] ARGS <flags>).
add_executable(compare_runs tools/compare_runs.cpp)
target_link_libraries(compare_runs PRIVATE nlohmann_json::nlohmann_json)  # no LibTorch: it starts in milliseconds
target_link_options(compare_runs PRIVATE ${PICOTRON_LINK_FLAGS})

set(EQUIVALENCE_FLAGS --device cpu --model tiny --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2
    --seq-len 32 --micro-batch-size 2 --steps 6 --warmup-steps 2 --lr 3e-3 --min-lr 3e-4 --grad-clip 0.5
    --generate 0 --log-every 1 --threads 1)

function(picotron_equivalence name)
  cmake_parse_arguments(E "SAME_MICRO_BATCHES" "NP;RTOL;DTYPE" "ARGS" ${ARGN})
  if(NOT E_RTOL)
    set(E_RTOL 1e-9)
  endif()
  if(NOT E_DTYPE)
    set(E_DTYPE fp64)
  endif()
  add_test(NAME equivalence.${name}
    COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/equivalence.sh ${CMAKE_CURRENT_BINARY_DIR}/equivalence/${name} ${E_RTOL} ${E_NP}
            -- $<TARGET_FILE:train> ${EQUIVALENCE_FLAGS} --dtype ${E_DTYPE} ${E_ARGS})
  set(env ${PICOTRON_TEST_ENV})
  set(same whole)
  if(E_SAME_MICRO_BATCHES)  # the reference runs the same micro-batches (a mixture of experts)
    set(same same)
    list(APPEND env REF_MICRO_BATCHES=same)
  endif()
  # After the batches that make its runs (tests/scripts/equivalence_batch.sh), it only compares:
  # one processor. A case whose runs they did not make (a batch stopped at a failing run;
  # ctest -R picked the case without its batches) runs them itself, as before.
  set_tests_properties(equivalence.${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "${env}"
    LABELS "equivalence;mpi" PROCESSORS 1 PASS_REGULAR_EXPRESSION "EQUIVALENT" FAIL_REGULAR_EXPRESSION "FAILED"
    DEPENDS "equivalence.batch.references;equivalence.batch.np${E_NP}")
  picotron_batch_case(equivalence ${E_NP} ${same} ${CMAKE_SOURCE_DIR}/tests/scripts/equivalence.sh
    ${CMAKE_CURRENT_BINARY_DIR}/equivalence/${name} ${E_RTOL} ${E_NP} -- ${EQUIVALENCE_FLAGS} --dtype ${E_DTYPE} ${E_ARGS})
endfunction()

# A case for the batches (tests/scripts/equivalence_batch.sh; the equivalence ones at the end of this
# file): a line NPS REF_MICRO_BATCHES SCRIPT ARGS... -- FLAGS..., tab-separated, in the list
# named GROUP (NPS: the rank counts its runs use, comma-separated).
function(picotron_batch_case group nps same)
  list(JOIN ARGN "\t" line)
  list(JOIN nps "," np_list)
  set_property(GLOBAL APPEND_STRING PROPERTY PICOTRON_BATCH_CASES_${group} "${np_list}\t${same}\t${line}\n")
  set_property(GLOBAL APPEND PROPERTY PICOTRON_BATCH_NPS_${group} ${nps})
endfunction()
# The batches of GROUP: one ctest entry per KIND (named NAME followed by the rank count; the
# references: NAME alone), each after the tests AFTER.
function(picotron_batches group cases)
  get_property(lines GLOBAL PROPERTY PICOTRON_BATCH_CASES_${group})
  file(WRITE ${cases} "${lines}")
  get_property(nps GLOBAL PROPERTY PICOTRON_BATCH_NPS_${group})
  list(REMOVE_DUPLICATES nps)
  list(SORT nps COMPARE NATURAL)
  cmake_parse_arguments(B "" "" "KINDS;NAMES;AFTER" ${ARGN})
  foreach(kind name IN ZIP_LISTS B_KINDS B_NAMES)
    set(these ${nps})
    if(kind STREQUAL "ref")
      set(these 1)
    endif()
    foreach(np ${these})
      set(test ${group}.batch.${name}${np})
      if(kind STREQUAL "ref")
        set(test ${group}.batch.references)
      endif()
      add_test(NAME ${test} COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/equivalence_batch.sh ${cases} $<TARGET_FILE:train> ${kind} ${np})
      set(procs 2)
      if(np EQUAL 1)
        set(procs 1)
      endif()
      set_tests_properties(${test} PROPERTIES TIMEOUT 900 ENVIRONMENT "${PICOTRON_TEST_ENV}"
        LABELS "${group};mpi" PROCESSORS ${procs} PASS_REGULAR_EXPRESSION "BATCH OK" FAIL_REGULAR_EXPRESSION "FAILED"
        DEPENDS "${B_AFTER}")
      set_property(GLOBAL APPEND PROPERTY PICOTRON_BATCH_TESTS_${group}_${kind} ${test})
    endforeach()
  endforeach()
endfunction()

# The batch driver: train.cpp's own main run for many argument sets in one launch
# (tests/tools/train_batch.cpp), so that a case does not pay for starting processes and LibTorch.
add_executable(train_batch tools/train_batch.cpp)
target_link_libraries(train_batch PRIVATE picotron_core)
target_link_options(train_batch PRIVATE ${PICOTRON_LINK_FLAGS})
target_precompile_headers(train_batch REUSE_FROM picotron_step)

# Gradient accumulation alone: 1 rank, 4 micro-batches of 1 against one micro-batch of 4.
picotron_equivalence(grad_acc_1rank NP 1 ARGS --grad-acc-steps 4 --micro-batch-size 1)

# Data parallelism: dp in {2, 4} x {naive, bucketed with several buckets} x grad-acc in {1, 4}.
foreach(dp 2 4)
  foreach(acc 1 4)
    picotron_equivalence(dp${dp}_naive_acc${acc} NP ${dp} ARGS --dp ${dp} --dp-mode naive --grad-acc-steps ${acc})
    picotron_equivalence(dp${dp}_bucketed_acc${acc} NP ${dp} ARGS --dp ${dp} --dp-mode bucketed --dp-bucket-mb 0.05 --grad-acc-steps ${acc})
  endforeach()
endforeach()
# A bucket size that does not divide the parameters evenly (and splits inside no tensor).
picotron_equivalence(dp2_bucketed_uneven NP 2 ARGS --dp 2 --dp-mode bucketed --dp-bucket-mb 0.037 --grad-acc-steps 2)
# float32 with one big bucket.
picotron_equivalence(dp2_bucketed_fp32 NP 2 RTOL 1e-5 DTYPE fp32 ARGS --dp 2 --dp-mode bucketed --grad-acc-steps 2)

# Overlap: bucketed DP launches a bucket's all-reduce before backward ends; naive launches none.
add_executable(dp_overlap_test mpi/test_data_parallel.cpp)
target_link_libraries(dp_overlap_test PRIVATE picotron_core)
target_link_options(dp_overlap_test PRIVATE ${PICOTRON_LINK_FLAGS})
target_precompile_headers(dp_overlap_test REUSE_FROM picotron_step)
picotron_mpi_test(NAME data_parallel.overlap NP 2 TIMEOUT 120 COMMAND $<TARGET_FILE:dp_overlap_test>
  PASS_REGEX "[1-9][0-9]* passed, 0 failed")
# Its parts alone, for the assignment tasks (tests/cmake/assignments.cmake) that each one grades.
foreach(part bucketed naive)
  picotron_mpi_test(NAME data_parallel.overlap_${part} NP 2 TIMEOUT 120 COMMAND $<TARGET_FILE:dp_overlap_test> ${part}
    PASS_REGEX "[1-9][0-9]* passed, 0 failed")
endforeach()

# Tensor parallelism (tensor_parallel/): tp2; tp4 (4 kv heads, so every rank holds one);
# tp2 x dp2 with grad-acc 2; an untied lm_head; float32 with naive data parallelism.
# The float32 case uses --adam-eps 1e-6: float32 reordering noise is ~1e-7 of the
# largest gradient, and Adam turns an element whose gradient is below that noise into a
# full-size step of either sign (its update is g / (|g| + eps)); with the default 1e-8
# that gives parameter errors of ~4e-5 at tp2 (and 9e-6 already at dp2), with 1e-6 the
# comparison sees tensor parallelism's arithmetic (4e-6), not Adam's sign amplification.
picotron_equivalence(tp2 NP 2 ARGS --tp 2)
picotron_equivalence(tp4 NP 4 ARGS --tp 4 --num-key-value-heads 4)
picotron_equivalence(tp2_dp2_acc2 NP 4 ARGS --tp 2 --dp 2 --grad-acc-steps 2)
picotron_equivalence(tp2_untied NP 2 ARGS --tp 2 --tie-word-embeddings=false)
picotron_equivalence(tp2_dp2_fp32 NP 4 RTOL 1e-5 DTYPE fp32 ARGS --tp 2 --dp 2 --dp-mode naive --adam-eps 1e-6)
# Sequence parallelism: tp2+sp, tp4+sp, tp2+sp x dp2 (bucketed, grad-acc 2). Without the
# sum of the norm gains' gradients over tp these fail (tried).
picotron_equivalence(tp2_sp NP 2 ARGS --tp 2 --sp)
picotron_equivalence(tp4_sp NP 4 ARGS --tp 4 --sp --num-key-value-heads 4)
picotron_equivalence(tp2_sp_untied NP 2 ARGS --tp 2 --sp --tie-word-embeddings=false)
picotron_equivalence(tp2_sp_dp2_acc2 NP 4 ARGS --tp 2 --sp --dp 2 --grad-acc-steps 2 --dp-bucket-mb 0.05)

# Pipeline parallelism (pipeline_parallel/): pp2 and pp4 x every schedule x grad-acc 4 and
# 8, on 8 layers (interleaved: v = 2, so pp4 has 8 virtual stages of one layer); 5 layers
# over pp2 and pp4 (an uneven split); untied heads; pp2 x dp2; pp2 x tp2 (+sp).
# Without the tied embedding's gradient sum these fail (tried: 0.23 parameter error).
set(PP_LAYERS --num-hidden-layers 8)
foreach(pp 2 4)
  foreach(schedule afab 1f1b interleaved zb-h1)
    set(extra "")
    if(schedule STREQUAL "interleaved")
      set(extra --pp-virtual-stages 2)
    endif()
    foreach(acc 4 8)
      picotron_equivalence(pp${pp}_${schedule}_acc${acc} NP ${pp} ARGS ${PP_LAYERS} --pp ${pp} --pp-schedule ${schedule}
        --grad-acc-steps ${acc} ${extra})
    endforeach()
  endforeach()
endforeach()
picotron_equivalence(pp2_uneven_5_layers NP 2 ARGS --num-hidden-layers 5 --pp 2 --pp-schedule 1f1b --grad-acc-steps 4)
picotron_equivalence(pp4_uneven_5_layers_zb NP 4 ARGS --num-hidden-layers 5 --pp 4 --pp-schedule zb-h1 --grad-acc-steps 4)
picotron_equivalence(pp2_untied NP 2 ARGS ${PP_LAYERS} --pp 2 --grad-acc-steps 4 --tie-word-embeddings=false)
picotron_equivalence(pp4_interleaved_untied NP 4 ARGS ${PP_LAYERS} --pp 4 --pp-schedule interleaved
  --pp-virtual-stages 2 --grad-acc-steps 4 --tie-word-embeddings=false)
picotron_equivalence(pp2_dp2_1f1b NP 4 ARGS ${PP_LAYERS} --pp 2 --dp 2 --grad-acc-steps 4 --dp-mode naive)
picotron_equivalence(pp2_dp2_zb NP 4 ARGS ${PP_LAYERS} --pp 2 --dp 2 --pp-schedule zb-h1 --grad-acc-steps 4 --dp-bucket-mb 0.05)
picotron_equivalence(pp2_tp2 NP 4 ARGS ${PP_LAYERS} --pp 2 --tp 2 --grad-acc-steps 4)
picotron_equivalence(pp2_tp2_sp_interleaved NP 4 ARGS ${PP_LAYERS} --pp 2 --tp 2 --sp --pp-schedule interleaved
  --pp-virtual-stages 2 --grad-acc-steps 4)
# DualPipeV (pipeline_parallel/dualpipev.h): the V puts the embedding and the head on
# rank 0 (one tied matrix, no embedding group); m >= 2P. pp2, pp4 (8 layers: one per
# stage), untied, x dp2, x tp2 (+sp), x ZeRO-1, and a mixture of experts (its statistics
# go down the V and back up; 4 layers for 2 x 2 stages).
picotron_equivalence(pp2_dualpipev_acc4 NP 2 ARGS ${PP_LAYERS} --pp 2 --pp-schedule dualpipev --grad-acc-steps 4)
picotron_equivalence(pp4_dualpipev_acc8 NP 4 ARGS ${PP_LAYERS} --pp 4 --pp-schedule dualpipev --grad-acc-steps 8)
picotron_equivalence(pp2_dualpipev_untied NP 2 ARGS ${PP_LAYERS} --pp 2 --pp-schedule dualpipev --grad-acc-steps 4
  --tie-word-embeddings=false)
picotron_equivalence(pp2_dp2_dualpipev NP 4 ARGS ${PP_LAYERS} --pp 2 --dp 2 --pp-schedule dualpipev --grad-acc-steps 4
  --dp-bucket-mb 0.05)
picotron_equivalence(pp2_tp2_sp_dualpipev NP 4 ARGS ${PP_LAYERS} --pp 2 --tp 2 --sp --pp-schedule dualpipev --grad-acc-steps 4)
picotron_equivalence(zero1_dp2_pp2_dualpipev NP 4 ARGS ${PP_LAYERS} --zero 1 --dp 2 --pp 2 --pp-schedule dualpipev
  --grad-acc-steps 4)

# ZeRO-1 and ZeRO-2 (zero/). ZeRO-1: dp 2 and 4 x grad-acc 1 and 4; dp 3 with a vocabulary of 257 (the flat
# buffer, 90,496 elements, is padded to a multiple of 3 and parameters straddle the
# slices); float32; with tp2 and with pp2 (zb-h1). Reduce-scattering a sum instead of
# an average, or counting tp copies of the norm gains twice, fails them (tried).
# (dp 2 and 4 x grad-acc 1 and 4: with ZeRO-3's, below.)
picotron_equivalence(zero1_dp3_uneven NP 3 ARGS --zero 1 --dp 3 --vocab-size 257 --grad-acc-steps 2)
picotron_equivalence(zero1_dp2_fp32 NP 2 RTOL 1e-5 DTYPE fp32 ARGS --zero 1 --dp 2 --grad-acc-steps 2)
picotron_equivalence(zero1_dp2_tp2 NP 4 ARGS --zero 1 --dp 2 --tp 2 --sp)
picotron_equivalence(zero1_dp2_pp2_zb NP 4 ARGS --zero 1 --dp 2 --pp 2 --pp-schedule zb-h1 --grad-acc-steps 4)
# ZeRO-2: dp 2 and 4 x grad-acc 1 and 4 with several buckets (0.05 MiB); dp 3 with uneven
# buckets and padding; float32; with tp2.
foreach(dp 2 4)
  foreach(acc 1 4)
    picotron_equivalence(zero2_dp${dp}_acc${acc} NP ${dp} ARGS --zero 2 --dp ${dp} --grad-acc-steps ${acc} --dp-bucket-mb 0.05)
  endforeach()
endforeach()
picotron_equivalence(zero2_dp3_uneven NP 3 ARGS --zero 2 --dp 3 --vocab-size 257 --dp-bucket-mb 0.037 --grad-acc-steps 2)
picotron_equivalence(zero2_dp2_fp32 NP 2 RTOL 1e-5 DTYPE fp32 ARGS --zero 2 --dp 2 --grad-acc-steps 2 --dp-bucket-mb 0.05)
picotron_equivalence(zero2_dp2_tp2 NP 4 ARGS --zero 2 --dp 2 --tp 2 --dp-bucket-mb 0.05)
# ZeRO-3: dp 2 and 4 x grad-acc 1 and 4; dp 3 with a vocabulary of 257 (every unit padded
# to a multiple of 3); float32; untied (the head is its own unit, not the embedding);
# with tp2. Skipping the gather before backward fails them (tried).
foreach(stage 1 3)  # ZeRO-1's and ZeRO-3's dp x grad-acc grid (ZeRO-2's has buckets: above)
  foreach(dp 2 4)
    foreach(acc 1 4)
      picotron_equivalence(zero${stage}_dp${dp}_acc${acc} NP ${dp} ARGS --zero ${stage} --dp ${dp} --grad-acc-steps ${acc})
    endforeach()
  endforeach()
endforeach()
picotron_equivalence(zero3_dp3_uneven NP 3 ARGS --zero 3 --dp 3 --vocab-size 257 --grad-acc-steps 2)
picotron_equivalence(zero3_dp2_fp32 NP 2 RTOL 1e-5 DTYPE fp32 ARGS --zero 3 --dp 2 --grad-acc-steps 2)
picotron_equivalence(zero3_dp2_untied NP 2 ARGS --zero 3 --dp 2 --tie-word-embeddings=false --grad-acc-steps 2)
picotron_equivalence(zero3_dp2_tp2 NP 4 ARGS --zero 3 --dp 2 --tp 2)
# ZeRO-2 and ZeRO-3 with sequence parallelism (the norm gains summed over tp on my slice)
# and with a pipeline (the tied embedding, a bucket of its own, summed over the two ends
# on my slice; zb-h1's deferred weight gradients picked up after W; stage 3 gathering a
# stage's layers per micro-batch). Skipping the slice sums, or leaving zb-h1's dW behind,
# fails them (tried: 0.013 and 0.26 parameter error).
picotron_equivalence(zero2_dp2_tp2_sp NP 4 ARGS --zero 2 --dp 2 --tp 2 --sp --dp-bucket-mb 0.05 --grad-acc-steps 2)
picotron_equivalence(zero3_dp2_tp2_sp NP 4 ARGS --zero 3 --dp 2 --tp 2 --sp --grad-acc-steps 2)
picotron_equivalence(zero2_dp2_pp2 NP 4 ARGS ${PP_LAYERS} --zero 2 --dp 2 --pp 2 --grad-acc-steps 4 --dp-bucket-mb 0.05)
picotron_equivalence(zero2_dp2_pp2_zb NP 4 ARGS ${PP_LAYERS} --zero 2 --dp 2 --pp 2 --pp-schedule zb-h1 --grad-acc-steps 4
  --dp-bucket-mb 0.05)
picotron_equivalence(zero3_dp2_pp2 NP 4 ARGS ${PP_LAYERS} --zero 3 --dp 2 --pp 2 --grad-acc-steps 4)
picotron_equivalence(zero3_dp2_pp2_zb NP 4 ARGS ${PP_LAYERS} --zero 3 --dp 2 --pp 2 --pp-schedule zb-h1 --grad-acc-steps 4)
picotron_equivalence(zero3_dp2_pp2_interleaved NP 4 ARGS ${PP_LAYERS} --zero 3 --dp 2 --pp 2 --pp-schedule interleaved
  --pp-virtual-stages 2 --grad-acc-steps 4)

# The 4D mesh on 8 ranks (4 layers, grad-acc 2; each about 4 s here): every pair of axes
# meets in at least one case, with sp and each ZeRO stage; one float32 case.
set(MESH8 NP 8 ARGS --num-hidden-layers 4 --grad-acc-steps 2)
picotron_equivalence(mesh8_dp2_tp2_pp2_sp_zero1 ${MESH8} --dp 2 --tp 2 --pp 2 --sp --zero 1)
picotron_equivalence(mesh8_tp2_pp2_cp2 ${MESH8} --tp 2 --pp 2 --cp 2)
picotron_equivalence(mesh8_dp2_cp2_tp2_sp ${MESH8} --dp 2 --cp 2 --tp 2 --sp)
picotron_equivalence(mesh8_dp2_pp2_cp2_interleaved ${MESH8} --dp 2 --pp 2 --cp 2 --pp-schedule interleaved --pp-virtual-stages 2)
picotron_equivalence(mesh8_dp2_tp2_pp2_sp_zero3 ${MESH8} --dp 2 --tp 2 --pp 2 --sp --zero 3)
picotron_equivalence(mesh8_dp2_tp2_pp2_sp_zero2_zb ${MESH8} --dp 2 --tp 2 --pp 2 --sp --zero 2 --pp-schedule zb-h1 --dp-bucket-mb 0.05)
picotron_equivalence(mesh8_dp2_cp2_pp2_zero3 ${MESH8} --dp 2 --cp 2 --pp 2 --zero 3)
picotron_equivalence(mesh8_dp2_tp2_pp2_sp_fp32 NP 8 RTOL 1e-5 DTYPE fp32 ARGS --num-hidden-layers 4 --grad-acc-steps 2
  --dp 2 --tp 2 --pp 2 --sp --zero 1 --adam-eps 1e-6)

# HSDP (--zero-shard, zero/zero_groups.h): ZeRO's slices over 2 dp ranks, replicated over the
# other 2, one all-reduce across the replicas per step; each stage, and with tp + sp, pp,
# cp (the shard group a dp rank's cp pair), ep, recompute and gradient accumulation. hpZ
# (--zero-hpz): stage 3's backward gathers over 2 ranks of a shard group of 4 (and of 2: hpZ
# 1 keeps the whole unit). With the replicas' all-reduce summing instead of averaging all 9
# HSDP cases failed; with rank 0's part kept on every hpZ rank both hpZ 2 cases did (tried,
# when hpZ 2 also ran with pp2, dropped since; zero/README.md, "HSDP and hpZ").
picotron_equivalence(hsdp_zero1_dp4 NP 4 ARGS --zero 1 --dp 4 --zero-shard 2 --grad-acc-steps 2)
picotron_equivalence(hsdp_zero2_dp4 NP 4 ARGS --zero 2 --dp 4 --zero-shard 2 --dp-bucket-mb 0.05 --grad-acc-steps 2)
picotron_equivalence(hsdp_zero3_dp4_acc4 NP 4 ARGS --zero 3 --dp 4 --zero-shard 2 --grad-acc-steps 4)
picotron_equivalence(hsdp_zero3_dp4_recompute NP 4 ARGS --zero 3 --dp 4 --zero-shard 2 --recompute full)
picotron_equivalence(hpz_zero3_dp4 NP 4 ARGS --zero 3 --dp 4 --zero-hpz 2 --grad-acc-steps 2)
picotron_equivalence(hpz_zero3_dp4_shard2 NP 4 ARGS --zero 3 --dp 4 --zero-shard 2 --zero-hpz 1 --grad-acc-steps 2)
picotron_equivalence(hsdp_zero3_dp4_tp2_sp ${MESH8} --dp 4 --tp 2 --sp --zero 3 --zero-shard 2)
picotron_equivalence(hsdp_zero2_dp4_pp2 ${MESH8} --dp 4 --pp 2 --zero 2 --zero-shard 2 --dp-bucket-mb 0.05)
picotron_equivalence(hsdp_zero1_dp2_cp2 NP 4 ARGS --zero 1 --dp 2 --cp 2 --zero-shard 1 --grad-acc-steps 2)  # shard group: the cp pair

# f, g, the vocab-parallel embedding and cross-entropy against the full ops (fp64), tp 2 and 4.
add_executable(tensor_parallel_tests mpi/test_tensor_parallel.cpp)
target_link_libraries(tensor_parallel_tests PRIVATE picotron_core)
target_link_options(tensor_parallel_tests PRIVATE ${PICOTRON_LINK_FLAGS})
target_precompile_headers(tensor_parallel_tests REUSE_FROM picotron_step)
picotron_mpi_test(NAME tensor_parallel.np4 NP 4 TIMEOUT 120 COMMAND $<TARGET_FILE:tensor_parallel_tests>
  PASS_REGEX "[1-9][0-9]* passed, 0 failed")

# Context parallelism (context_parallel/). Ring attention alone, on 2 and 4 ranks: output
# and dQ, dK, dV equal full causal attention (fp64 1e-12), both layouts, GQA, large logits.
add_executable(cp_ring_test mpi/test_context_parallel.cpp)
target_link_libraries(cp_ring_test PRIVATE picotron_core)
target_link_options(cp_ring_test PRIVATE ${PICOTRON_LINK_FLAGS})
target_precompile_headers(cp_ring_test REUSE_FROM picotron_step)
foreach(np 2 4)
  picotron_mpi_test(NAME context_parallel.ring_${np} NP ${np} TIMEOUT 120 COMMAND $<TARGET_FILE:cp_ring_test>
    PASS_REGEX "[1-9][0-9]* passed, 0 failed")
endforeach()
# Ulysses and the hybrid alone (tests/mpi/test_ulysses.cpp): output and dQ, dK, dV equal full causal
# attention (fp64 1e-12), both layouts, nKV < U, and the ledger's all-to-all and ring elements.
add_executable(cp_ulysses_test mpi/test_ulysses.cpp)
target_link_libraries(cp_ulysses_test PRIVATE picotron_core)
target_link_options(cp_ulysses_test PRIVATE ${PICOTRON_LINK_FLAGS})
target_precompile_headers(cp_ulysses_test REUSE_FROM picotron_step)
foreach(np 2 4)
  picotron_mpi_test(NAME context_parallel.ulysses_${np} NP ${np} TIMEOUT 120 COMMAND $<TARGET_FILE:cp_ulysses_test>
    PASS_REGEX "[1-9][0-9]* passed, 0 failed")
endforeach()
# Training: cp 2 and 4 x both layouts; cp2 x dp2 with grad-acc 2; float32 (--adam-eps 1e-6,
# as tensor parallelism's float32 case explains); cp2 x tp2 with and without sp; cp2 x
# pp2; ZeRO-1, 2 and 3 over cp x dp. Dropping a block's dK on its way round fails them (tried).
foreach(cp 2 4)
  foreach(layout contiguous zigzag)
    picotron_equivalence(cp${cp}_${layout} NP ${cp} ARGS --cp ${cp} --cp-layout ${layout})
  endforeach()
endforeach()
picotron_equivalence(cp2_dp2_acc2 NP 4 ARGS --cp 2 --dp 2 --grad-acc-steps 2)
picotron_equivalence(cp2_fp32 NP 2 RTOL 1e-5 DTYPE fp32 ARGS --cp 2 --adam-eps 1e-6)
picotron_equivalence(cp2_tp2 NP 4 ARGS --cp 2 --tp 2)
picotron_equivalence(cp2_tp2_sp NP 4 ARGS --cp 2 --tp 2 --sp)
picotron_equivalence(cp2_pp2 NP 4 ARGS --cp 2 --pp 2 --grad-acc-steps 2)
picotron_equivalence(cp2_dp2_zero1 NP 4 ARGS --cp 2 --dp 2 --zero 1)
picotron_equivalence(cp2_dp2_zero2 NP 4 ARGS --cp 2 --dp 2 --zero 2 --dp-bucket-mb 0.05)
picotron_equivalence(cp2_dp2_zero3 NP 4 ARGS --cp 2 --dp 2 --zero 3)
# Ulysses (--cp-mode ulysses) and the hybrid (--cp-mode hybrid --cp-ulysses 2 on cp 4: all-to-all
# over 2, rings of 2), tiny model nH 4, nKV 2: cp 2 and 4 x both layouts (cp 4: nKV 2 < 4, the
# kv heads repeated); with dp + grad-acc, tp2 (+sp: nH/tp 2, nKV/tp 1 < 2), pp2, ZeRO-1 and -3,
# recomputation, MoE. Skipping the permutation back to the true positions, or returning O in
# the wrong head order, fails them (tried: see context_parallel/README.md).
foreach(layout contiguous zigzag)
  picotron_equivalence(cp2_ulysses_${layout} NP 2 ARGS --cp 2 --cp-mode ulysses --cp-layout ${layout})
  picotron_equivalence(cp4_ulysses_${layout} NP 4 ARGS --cp 4 --cp-mode ulysses --cp-layout ${layout})
  picotron_equivalence(cp4_hybrid_${layout} NP 4 ARGS --cp 4 --cp-mode hybrid --cp-ulysses 2 --cp-layout ${layout})
endforeach()
picotron_equivalence(cp2_ulysses_dp2_acc2 NP 4 ARGS --cp 2 --cp-mode ulysses --dp 2 --grad-acc-steps 2)
picotron_equivalence(cp2_ulysses_tp2_sp NP 4 ARGS --cp 2 --cp-mode ulysses --tp 2 --sp)
picotron_equivalence(cp2_ulysses_pp2 NP 4 ARGS --cp 2 --cp-mode ulysses --pp 2 --grad-acc-steps 2)
picotron_equivalence(cp2_ulysses_dp2_zero1 NP 4 ARGS --cp 2 --cp-mode ulysses --dp 2 --zero 1)
picotron_equivalence(cp2_ulysses_dp2_zero3 NP 4 ARGS --cp 2 --cp-mode ulysses --dp 2 --zero 3)
picotron_equivalence(cp2_ulysses_recompute_full NP 2 ARGS --cp 2 --cp-mode ulysses --recompute full)
picotron_equivalence(cp2_ulysses_recompute_selective NP 2 ARGS --cp 2 --cp-mode ulysses --recompute selective)
picotron_equivalence(cp4_hybrid_dp2_acc2 NP 8 ARGS --cp 4 --cp-mode hybrid --cp-ulysses 2 --dp 2 --grad-acc-steps 2)
picotron_equivalence(cp4_hybrid_tp2_sp NP 8 ARGS --cp 4 --cp-mode hybrid --cp-ulysses 2 --tp 2 --sp)
picotron_equivalence(cp4_hybrid_pp2_zero1 NP 8 ARGS --cp 4 --cp-mode hybrid --cp-ulysses 2 --pp 2 --zero 1 --grad-acc-steps 2)
picotron_equivalence(cp4_hybrid_recompute_full NP 4 ARGS --cp 4 --cp-mode hybrid --cp-ulysses 2 --recompute full)

# Mixture of experts (expert_parallel/moe.h) and expert parallelism (expert_parallel/). The
# load-balancing loss is computed per micro-batch, so the reference runs the same
# micro-batches one after another (SAME_MICRO_BATCHES); the aux loss is on (0.02). Tiny
# MoE: H 64, 4 experts of I 96, top-2, 2 layers. Plain dp2 and ZeRO-1 (every rank holds
# every expert); ep2 (dp2), ep4 (dp4), ep2 within dp4 (each expert on two ranks, its
# gradient summed over them), with accumulation. Dropping the gate weights from the
# combine, sending pairs to the wrong rank, or skipping the experts' gradient sum over
# their copies fails them (tried).
set(MOE ARGS --model tiny-moe --hidden-size 64 --intermediate-size 96 --num-hidden-layers 2)
picotron_equivalence(moe_dp2_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --grad-acc-steps 2)
picotron_equivalence(moe_dp2_zero1 NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --zero 1 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --grad-acc-steps 2)
picotron_equivalence(moe_ep4 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 4 --ep 4)
picotron_equivalence(moe_ep2_dp4_acc2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 4 --ep 2 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_naive NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --dp-mode naive --grad-acc-steps 2)
# With context parallelism the balancing statistics of a micro-batch are summed over the
# cp ranks (router_stats_sum: sum forward and backward). Without the sum, or with a plain
# backward, these fail (tried: 0.09 and 0.16 parameter error).
picotron_equivalence(moe_cp2 NP 2 SAME_MICRO_BATCHES ${MOE} --cp 2)
picotron_equivalence(moe_cp2_dp2_acc2 NP 4 SAME_MICRO_BATCHES ${MOE} --cp 2 --dp 2 --grad-acc-steps 2)
picotron_equivalence(moe_cp2_ulysses NP 2 SAME_MICRO_BATCHES ${MOE} --cp 2 --cp-mode ulysses)
picotron_equivalence(moe_ep2_cp4_hybrid NP 8 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --cp 4 --cp-mode hybrid --cp-ulysses 2)
# ep's groups within one cp rank (expert_parallel.cpp); cutting them across cp ranks fails
# (tried: 0.27).
picotron_equivalence(moe_ep2_cp2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --cp 2)
# Tensor parallelism keeps the experts whole: on every token (the same on each tp rank), or
# under SP on S/tp of them, the statistics summed over tp forward only (a summed backward
# fails, tried: 0.19) and the router's and experts' gradients summed like the norms'.
picotron_equivalence(moe_tp2 NP 2 SAME_MICRO_BATCHES ${MOE} --tp 2)
picotron_equivalence(moe_tp2_sp_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --tp 2 --sp --grad-acc-steps 2)
picotron_equivalence(moe_ep2_tp2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --tp 2)
picotron_equivalence(moe_ep2_tp2_sp_acc2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --tp 2 --sp --grad-acc-steps 2)
# ZeRO-1 with ep: the dense parameters sliced over cp x dp, the experts over the ranks
# holding the same experts after ÷ep (DenseAndExperts); without the ÷ep it fails (tried: 0.03).
picotron_equivalence(moe_ep2_zero1_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --zero 1 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_dp4_zero1 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 4 --ep 2 --zero 1)
picotron_equivalence(moe_ep2_cp2_zero1 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --cp 2 --zero 1)
# ZeRO-2 the same way; the other techniques' sums run in each optimizer's sync on its own
# pieces (without them in the experts' sync, tp2 + sp fails: 0.29).
picotron_equivalence(moe_ep2_zero2_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --zero 2 --dp-bucket-mb 0.05 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_tp2_sp_zero2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --tp 2 --sp --zero 2 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_pp2_zero2_zb NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --pp 2 --zero 2 --pp-schedule zb-h1 --grad-acc-steps 2)
# ZeRO-3: each optimizer gathers its own units around a layer (two wrappers, "zero-3 cp_dp" and
# "zero-3 ep_replicas"), the experts' over their replica group.
picotron_equivalence(moe_ep2_dp4_zero3 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 4 --ep 2 --zero 3)
picotron_equivalence(moe_ep2_tp2_sp_zero3 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --tp 2 --sp --zero 3 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_pp2_zero3 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --pp 2 --zero 3 --grad-acc-steps 2)
picotron_equivalence(moe_ep2_zero3_recompute_full NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --zero 3 --recompute full --grad-acc-steps 2)
# HSDP with ep (zero/zero_groups.h): the dense slices over 2 dp ranks; each shard group holds one
# rank of each expert set, so the experts are replicated over their 2 copies, averaged by the all-reduce.
picotron_equivalence(hsdp_zero3_moe_ep2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 4 --ep 2 --zero 3 --zero-shard 2 --grad-acc-steps 2)
# Pipeline parallelism: the balancing statistics [2E + 1] travel with each activation and
# their gradient with each activation gradient (pipeline_parallel.cpp), so the last stage's
# loss sees every layer's routing. Without them forward (0.26) or backward (0.26) it fails.
# compare_runs also compares the step line's tokens per expert, which the stage holding the loss
# tells the others (pp rank P-1; in DualPipeV's V rank 0: from P-1 the V's figure was zeros).
picotron_equivalence(moe_pp2_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --pp 2 --grad-acc-steps 2)
picotron_equivalence(moe_pp2_afab_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --pp 2 --pp-schedule afab --grad-acc-steps 2)
picotron_equivalence(moe_pp2_zb_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --pp 2 --pp-schedule zb-h1 --grad-acc-steps 2)
picotron_equivalence(moe_pp2_interleaved NP 2 SAME_MICRO_BATCHES ${MOE} --pp 2 --pp-schedule interleaved --pp-virtual-stages 2 --num-hidden-layers 4 --grad-acc-steps 2)
picotron_equivalence(moe_pp2_dualpipev NP 2 SAME_MICRO_BATCHES ${MOE} --pp 2 --pp-schedule dualpipev --num-hidden-layers 4 --grad-acc-steps 4)
picotron_equivalence(moe_ep2_pp2_acc2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --pp 2 --grad-acc-steps 2)
picotron_equivalence(moe_pp2_tp2_sp_acc2 NP 4 SAME_MICRO_BATCHES ${MOE} --pp 2 --tp 2 --sp --grad-acc-steps 2)
picotron_equivalence(moe_ep2_pp2_cp2_zero1 NP 8 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --pp 2 --cp 2 --zero 1 --grad-acc-steps 2)
# Full recomputation: a MoE layer's routing probabilities leave the checkpoint as a second
# output (picotron/recompute.cpp); with the layer output alone it fails (tried: 0.29).
picotron_equivalence(moe_recompute_full_ep2_acc2 NP 2 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --recompute full --grad-acc-steps 2)
picotron_equivalence(moe_recompute_full_ep2_pp2 NP 4 SAME_MICRO_BATCHES ${MOE} --dp 2 --ep 2 --pp 2 --recompute full --grad-acc-steps 2)

# Expert parallelism's pieces on 2 and 4 ranks (tests/mpi/test_expert_parallel.cpp): the
# dispatch order, the all-to-all against a gather, one MoE layer against the whole one.
add_executable(expert_parallel_test mpi/test_expert_parallel.cpp)
target_link_libraries(expert_parallel_test PRIVATE picotron_core)
target_link_options(expert_parallel_test PRIVATE ${PICOTRON_LINK_FLAGS})
target_precompile_headers(expert_parallel_test REUSE_FROM picotron_step)
foreach(np 2 4)
  picotron_mpi_test(NAME expert_parallel.np${np} NP ${np} TIMEOUT 120 COMMAND $<TARGET_FILE:expert_parallel_test>
    PASS_REGEX "[1-9][0-9]* passed, 0 failed")
endforeach()

# Activation recomputation (picotron/recompute.h): --recompute selective and full give the
# losses, grad norms and final parameters of --recompute none on the same mesh within
# 1e-12 (fp64): 1 rank, dp2, tp2 (+sp), pp2 (1f1b and zb-h1), cp2, zero-3. The 1-process
# equivalence lines below also hold (1e-9).
function(picotron_recompute name np mode)
  add_test(NAME recompute.${name} COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/recompute_vs_none.sh
    ${CMAKE_CURRENT_BINARY_DIR}/recompute/${name} ${np} ${mode} -- $<TARGET_FILE:train> ${EQUIVALENCE_FLAGS} --dtype fp64 ${ARGN})
  set_tests_properties(recompute.${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "${PICOTRON_TEST_ENV}"
    LABELS "equivalence;mpi" PROCESSORS 1 PASS_REGULAR_EXPRESSION "EQUIVALENT" FAIL_REGULAR_EXPRESSION "FAILED"
    DEPENDS equivalence.batch.np${np})
  picotron_batch_case(equivalence ${np} whole ${CMAKE_SOURCE_DIR}/tests/scripts/recompute_vs_none.sh
    ${CMAKE_CURRENT_BINARY_DIR}/recompute/${name} ${np} ${mode} -- ${EQUIVALENCE_FLAGS} --dtype fp64 ${ARGN})
endfunction()
foreach(mode selective full)
  picotron_recompute(${mode}_1rank 1 ${mode})
  picotron_recompute(${mode}_dp2 2 ${mode} --dp 2 --grad-acc-steps 2)
  picotron_recompute(${mode}_tp2_sp 2 ${mode} --tp 2 --sp)
  picotron_recompute(${mode}_pp2 2 ${mode} --pp 2 --grad-acc-steps 2)
  picotron_recompute(${mode}_cp2 2 ${mode} --cp 2)
endforeach()
picotron_recompute(full_pp2_zb 2 full --pp 2 --grad-acc-steps 2 --pp-schedule zb-h1)
picotron_recompute(full_zero3 2 full --dp 2 --zero 3)
picotron_equivalence(recompute_full_dp2 NP 2 ARGS --recompute full --dp 2)
picotron_equivalence(recompute_selective_tp2 NP 2 ARGS --recompute selective --tp 2)

# --explain narrates the first step (runtime/observe/explain.h) and must leave the numbers
# alone; explain.narration checks what it prints.
picotron_equivalence(explain_dp2_tp2_sp_zero1 NP 4 ARGS --dp 2 --tp 2 --sp --zero 1 --grad-acc-steps 2 --explain)
add_test(NAME explain.narration COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/explain_check.sh $<TARGET_FILE:train>)
set_tests_properties(explain.narration PROPERTIES TIMEOUT 300 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  LABELS "mpi" PROCESSORS 2 PASS_REGULAR_EXPRESSION "EXPLAIN OK" FAIL_REGULAR_EXPRESSION "FAILED")
# The ledger hears every group a run makes (picotron/comm_listener.h): one layout per technique
# family, its narrated step against its --comm-report, group by group; every communication titled.
add_test(NAME ledger.every_group COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_ledger_groups.py $<TARGET_FILE:train>)
set_tests_properties(ledger.every_group PROPERTIES TIMEOUT 600 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  LABELS "mpi" PROCESSORS 2 PASS_REGULAR_EXPRESSION "LEDGER OK" FAIL_REGULAR_EXPRESSION "FAILED|MISMATCH")

# scripts/gpu_check.sh on a machine without a GPU: one line and exit 2, its arguments,
# and its report writer on real outputs of this machine (tests/scripts/gpu_check_cpu.sh).
add_test(NAME gpu_check.cpu_side COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/gpu_check_cpu.sh $<TARGET_FILE:train> $<TARGET_FILE:unit_tests>)
set_tests_properties(gpu_check.cpu_side PROPERTIES TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  LABELS "mpi;cli" PROCESSORS 2 PASS_REGULAR_EXPRESSION "GPU CHECK CPU SIDE OK" FAIL_REGULAR_EXPRESSION "FAILED|MISSING")

# --val-data: the validation loss is computed as the training loss is (forward only; a
# pipeline runs its schedule's forwards), so it must be equal across layouts too
# (runtime/observe/validation.h); compare_runs compares it on the steps that have one.
set(VAL_FLAGS --val-data ${CMAKE_SOURCE_DIR}/docs/testing.md --eval-every 3 --eval-batches 2)
picotron_equivalence(val_dp2_pp2 NP 4 ARGS --dp 2 --pp 2 --grad-acc-steps 2 ${VAL_FLAGS})
picotron_equivalence(val_tp2_cp2_sp NP 4 ARGS --tp 2 --cp 2 --sp ${VAL_FLAGS})
picotron_equivalence(val_zero3_dp2_recompute NP 2 ARGS --dp 2 --zero 3 --recompute full ${VAL_FLAGS})
picotron_equivalence(val_pp2_interleaved NP 2 ARGS --num-hidden-layers 4 --pp 2 --pp-schedule interleaved --pp-virtual-stages 2 --grad-acc-steps 2 ${VAL_FLAGS})

# FP8 linears (kernels/fp8.h): fp64 compute with the fp8 casts emulated, so a layout's run
# equals the fp8 single process to fp64 rounding: the scales are the same numbers on
# every mesh only because each amax is max-reduced over the ranks holding the tensor's
# pieces (tp: sharded W, x of o/down, dY of q/k/v/gate/up; cp: every x and dY). Dynamic
# scaling scales each micro-batch by itself, so the reference runs the same micro-batches
# (SAME_MICRO_BATCHES), not one big one. A rounding flip (a value within 1e-16 of an fp8
# rounding boundary) would show as a jump; none happens in these runs at 1e-9.
picotron_equivalence(fp8_dp2 NP 2 SAME_MICRO_BATCHES ARGS --fp8 --dp 2 --grad-acc-steps 2)
picotron_equivalence(fp8_tp2 NP 2 SAME_MICRO_BATCHES ARGS --fp8 --tp 2)
picotron_equivalence(fp8_tp2_sp NP 2 SAME_MICRO_BATCHES ARGS --fp8 --tp 2 --sp)
picotron_equivalence(fp8_cp2 NP 2 SAME_MICRO_BATCHES ARGS --fp8 --cp 2)
picotron_equivalence(fp8_zero3_dp2 NP 2 SAME_MICRO_BATCHES ARGS --fp8 --zero 3 --dp 2)
picotron_equivalence(fp8_pp2 NP 2 SAME_MICRO_BATCHES ARGS --fp8 --pp 2 --grad-acc-steps 2)

# The batches (tests/scripts/equivalence_batch.sh): every reference in one process, and the
# parallel runs of each rank count in one mpirun; each case above then compares its own
# runs (DEPENDS orders them; it does not add the batches to a ctest -R selection). Before
# the batches, the 165 cases took 463 s of one fresh-clone run of scripts/test.sh
# (docs/testing.md): about 3 s each, most of it starting processes and LibTorch.
picotron_batches(equivalence ${CMAKE_CURRENT_BINARY_DIR}/equivalence/cases.tsv KINDS ref par NAMES references np)
