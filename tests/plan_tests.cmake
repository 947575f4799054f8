# build/train --plan (picotron/runtime/plan.h): the search runs without launching anything
# or allocating a tensor (a 6 GiB address-space limit, as the dry runs), prints its counts
# and the best layouts with their command lines; the cheatsheet's answers for an 8B model
# on one node (one technique), 70B on 64 GPUs (TP in the node with PP or ZeRO-3, or ZeRO-3
# alone), a GPU-poor single GPU (full recompute + accumulation), and 70B on one GPU (what
# would fit). The unit tests check the same cases in detail: unit_tests "[plan]".
set(PLAN_TRAIN $<TARGET_FILE:train>)
function(picotron_plan_test name regex)
  string(JOIN " " flags ${ARGN})
  add_test(NAME ${name} COMMAND sh -c "ulimit -v 6291456 && ${PLAN_TRAIN} --plan ${flags}")
  set_tests_properties(${name} PROPERTIES LABELS cli TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1"
    PASS_REGULAR_EXPRESSION "${regex}")
endfunction()
picotron_plan_test(cli.plan_llama3_8b_8gpus
  "considered [0-9,]+ layouts: [0-9,]+ pass validate\\(\\), [0-9,]+ fit in 80 GB.* 1\\. dp 8 x tp 1 x pp 1 x cp 1, zero [1-3].*\n    rule: [^\n]*\n    mpirun -np 8 build/train --device cuda --model llama3-8b --dtype bf16 --seq-len 4096 --micro-batch-size [0-9]+ --grad-acc-steps [0-9]+ --dp 8 --zero [1-3]"
  --model llama3-8b --gpus 8 --seq-len 4096)
picotron_plan_test(cli.plan_llama3_8b_defaults "best 5 by predicted tokens/s per GPU.* 5\\. .*mpirun -np 8 build/train --device cuda --model llama3-8b"
  --model llama3-8b --gpus 8)
picotron_plan_test(cli.plan_llama3_70b_64gpus
  " 1\\. dp [0-9]+ x tp [1-8] x pp [0-9]+ x cp 1[^\n]*\n[^\n]*\n    rule: (TP within the node|ZeRO-3 alone)[^\n]*\n    mpirun -np 64 build/train --device cuda --model llama3-70b"
  --model llama3-70b --gpus 64 --seq-len 4096)
picotron_plan_test(cli.plan_gpu_poor
  " 1\\. dp 1 x tp 1 x pp 1 x cp 1, zero 0, recompute full, micro-batch [0-9]+ x grad-acc [0-9]+[^\n]*\n[^\n]*\n    rule: one GPU, GPU-poor: full recompute \\+ accumulation"
  --model llama3.2-1b --gpus 1 --gpu-memory 24 --seq-len 1024)
picotron_plan_test(cli.plan_nothing_fits
  "nothing fits: the least any layout needs is [0-9.]+ GB per GPU, above --gpu-memory 80\nwhat would fit .*more GPUs: --gpus [0-9]+ .*more memory: a GPU of [0-9.]+ GB.*a shorter sequence: none"
  --model llama3-70b --gpus 1 --seq-len 4096)
