# build/train --plan (runtime/planner/layout_search.h): the search runs without launching anything
# or allocating a tensor (a 6 GiB address-space limit, as the dry runs), prints its counts
# and the best layouts with their command lines; the cheatsheet's answers for an 8B model
# on one node (one technique), 70B on 64 GPUs (TP in the node with PP or ZeRO-3, or ZeRO-3
# alone), a GPU-poor single GPU (the optimizer offloaded; at 4096 tokens the fused loss too),
# 70B on one GPU (what would fit), and Mixtral 8x7B on 64 GPUs (expert parallelism in the list). The unit tests check the same cases in detail: unit_tests "[plan]".
set(PLAN_TRAIN $<TARGET_FILE:train>)
# (TIMEOUT 120: the largest search, mixtral-8x7b over 64 GPUs, six schedules and four ep sizes,
# took about 2 minutes before each stage's shard plan was derived once (StageShapes in
# runtime/planner/layout_search.cpp); now about 15 s on the 2-core development machine with other builds beside it)
function(picotron_plan_test name regex)
  string(JOIN " " flags ${ARGN})
  add_test(NAME ${name} COMMAND sh -c "ulimit -v 6291456 && ${PLAN_TRAIN} --plan ${flags}")
  set_tests_properties(${name} PROPERTIES LABELS cli TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1"
    PASS_REGULAR_EXPRESSION "${regex}")
endfunction()
picotron_plan_test(cli.plan_llama3_8b_8gpus
  "considered [0-9,]+ layouts: [0-9,]+ pass the flag rules, [0-9,]+ fit in 80 GB.* 1\\. dp 8 x tp 1 x pp 1 x cp 1, zero [1-3].*\n    rule: [^\n]*\n    mpirun -np 8 build/train --device cuda --model llama3-8b --dtype bf16 --seq-len 4096 --micro-batch-size [0-9]+ --grad-acc-steps [0-9]+ --dp 8 --zero [1-3]"
  --model llama3-8b --gpus 8 --seq-len 4096)
picotron_plan_test(cli.plan_llama3_8b_defaults "best 5 by predicted tokens/s per GPU.* 5\\. .*mpirun -np 8 build/train --device cuda --model llama3-8b"
  --model llama3-8b --gpus 8)
picotron_plan_test(cli.plan_llama3_70b_64gpus
  " 1\\. dp [0-9]+ x tp [1-8] x pp [0-9]+ x cp 1[^\n]*\n[^\n]*\n    rule: (TP within the node|ZeRO-3 alone)[^\n]*\n    mpirun -np 64 build/train --device cuda --model llama3-70b"
  --model llama3-70b --gpus 64 --seq-len 4096)
picotron_plan_test(cli.plan_gpu_poor
  " 1\\. dp 1 x tp 1 x pp 1 x cp 1, zero 1 \\+offload, recompute none, micro-batch [0-9]+ x grad-acc [0-9]+[^\n]*\n[^\n]*\n    rule: one GPU, ZeRO-Offload: the optimizer state in CPU memory[^\n]*\n    mpirun -np 1 [^\n]* --zero 1 --zero-offload --kernels fused\n"
  --model llama3.2-1b --gpus 1 --gpu-memory 24 --seq-len 1024)
# At 4096 tokens nothing fits with the optimizer on the GPU (28.9 GB at least: its 18 bytes
# a parameter and ATen's [T, V] logits); offloaded it does, with the fused kernels.
picotron_plan_test(cli.plan_gpu_poor_4096
  " 1\\. dp 1 x tp 1 x pp 1 x cp 1, zero 1 \\+offload, [^\n]*\n    memory [0-9.]+ GB \\|[^\n]* \\+ offload [0-9]+ \\|[^\n]*\n[^\n]*\n    mpirun -np 1 build/train --device cuda --model llama3.2-1b [^\n]* --zero 1 --zero-offload --kernels fused\n"
  --model llama3.2-1b --gpus 1 --gpu-memory 24 --seq-len 4096)
# A mixture of experts: --ep is searched too (the experts over ep ranks of dp; their
# all-to-alls in the step's split), and the command line carries it.
picotron_plan_test(cli.plan_mixtral_64gpus
  "\\(tp 0, cp 0, pp [0-9]+, dp [0-9]+, ep [1-9][0-9]*\\)[^\n]*\n    rule: [^\n]*EP: the experts over [248] dp ranks[^\n]*\n    mpirun -np 64 build/train --device cuda --model mixtral-8x7b [^\n]* --ep [248]"
  --model mixtral-8x7b --gpus 64)
# The largest search (the ep sizes multiply it): more room when the suite runs beside it.
set_tests_properties(cli.plan_mixtral_64gpus PROPERTIES TIMEOUT 180)
# The asked global batch: a schedule that needs more micro-batches than the batch has is set
# aside (counted), not ranked with a 4x batch beside the asked one.
add_test(NAME cli.plan_asked_batch COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/plan_asked_batch.sh ${PLAN_TRAIN})
set_tests_properties(cli.plan_asked_batch PROPERTIES LABELS cli TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1"
  PASS_REGULAR_EXPRESSION "ASKED BATCH ONLY")
picotron_plan_test(cli.plan_nothing_fits
  "nothing fits: the least any layout needs is [0-9.]+ GB per GPU, above --gpu-memory 80\nwhat would fit .*more GPUs: --gpus [0-9]+ .*more memory: a GPU of [0-9.]+ GB.*a shorter sequence: none"
  --model llama3-70b --gpus 1 --seq-len 4096)

# --plan-layout: one layout's prediction, launched as its run would be (the mesh is checked
# against the ranks), as bench/plan_vs_measured.sh asks for it: stage 0's peak is the bytes
# --dry-run estimates for rank 0, stage 1 has its own, and the step time is split.
set(PLAN_LAYOUT --model tiny --seq-len 128 --device cpu --dtype fp32 --pp 2 --micro-batch-size 2 --grad-acc-steps 4)
string(JOIN " " PLAN_LAYOUT_LINE ${PLAN_LAYOUT})
string(JOIN " " PLAN_MPIRUN ${PICOTRON_MPIRUN})
add_test(NAME cli.plan_layout_pp2 COMMAND sh -c "\
dry=$(${PLAN_TRAIN} --dry-run ${PLAN_LAYOUT_LINE} | sed -n 's/^  total at the peak .* \\([0-9,]*\\) B$/\\1/p' | head -n 1) && \
${PLAN_MPIRUN} -np 2 ${PLAN_TRAIN} --plan-layout ${PLAN_LAYOUT_LINE} > plan_layout_pp2.txt && cat plan_layout_pp2.txt && \
grep -q \"^  memory of stage 0 at its peak: $dry B \" plan_layout_pp2.txt && echo \"dry-run rank 0: $dry B: layout ok\"")
set_tests_properties(cli.plan_layout_pp2 PROPERTIES LABELS "cli;mpi" TIMEOUT 60 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "memory of stage 1 at its peak: [0-9,]+ B.*\n  step [0-9.]+ ms = compute [0-9.]+ \\+ communication [0-9.]+ \\(tp 0.0, cp 0.0, pp [0-9.]+, dp 0.0\\) \\+ bubble [0-9.]+ .*layout ok")
# DualPipeV: the V's rank 0 holds the embedding, layers 0 and 3 and the head, with two
# chunks' activations in flight; --dry-run's estimate for rank 0 is --plan-layout's stage 0.
string(JOIN " " PLAN_LAYOUT_DPV ${PLAN_LAYOUT} --pp-schedule dualpipev)
add_test(NAME cli.plan_layout_pp2_dualpipev COMMAND sh -c "\
dry=$(${PLAN_TRAIN} --dry-run ${PLAN_LAYOUT_DPV} | sed -n 's/^  total at the peak .* \\([0-9,]*\\) B$/\\1/p' | head -n 1) && \
${PLAN_MPIRUN} -np 2 ${PLAN_TRAIN} --plan-layout ${PLAN_LAYOUT_DPV} > plan_layout_pp2_dualpipev.txt && cat plan_layout_pp2_dualpipev.txt && \
grep -q \"^  memory of stage 0 at its peak: $dry B \" plan_layout_pp2_dualpipev.txt && echo \"dry-run rank 0: $dry B: layout ok\"")
set_tests_properties(cli.plan_layout_pp2_dualpipev PROPERTIES LABELS "cli;mpi" TIMEOUT 60 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "dualpipev v2, micro-batch 2 x grad-acc 4.*layout ok")
# Context parallelism's modes (context_parallel/README.md, "All-to-all: Ulysses, and the hybrid (USP)"): llama2-7b
# (nH = nKV = 32) at 4096 tokens on two nodes of 8: the ring's 22 hops of every kv head are
# not hidden by so short an attention, and the search picks an all-to-all mode for its cp
# layouts, saying each mode's exposed cp time.
picotron_plan_test(cli.plan_cp_modes
  "CP \\((ulysses|hybrid [0-9]+)\\) to split the sequence[^\n]*\n    cp mode: (ulysses|hybrid [0-9]+): cp communication exposed [0-9.]+ ms \\(ring [0-9.]+[^\n]*\n    mpirun [^\n]* --cp 8 --cp-mode (ulysses|hybrid --cp-ulysses [0-9]+)"
  --model llama2-7b --gpus 16 --gpus-per-node 8 --seq-len 4096 --global-batch-tokens 65536 --plan-top 5)
