# Command-line tests of build/train: help, dry runs, a short training run with a
# metrics file, other data sources, and bad input (non-zero exit + a one-line error).
set(TRAIN $<TARGET_FILE:train>)
set(EXPECT_FAIL ${CMAKE_SOURCE_DIR}/tests/scripts/expect_failure.sh)
set(CLI_ENV "OMP_NUM_THREADS=1")

function(picotron_cli_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS cli TIMEOUT 120 ENVIRONMENT "${CLI_ENV}")
endfunction()

picotron_cli_test(cli.help ${TRAIN} --help)
set_tests_properties(cli.help PROPERTIES PASS_REGULAR_EXPRESSION
  "--model.*--hidden-size.*--device.*--dtype.*--seq-len.*--micro-batch-size.*--grad-acc-steps.*--steps.*--lr.*--warmup-steps.*--min-lr.*--weight-decay.*--grad-clip.*--seed.*--data.*--dp.*--metrics-file.*--log-every")

# Exact published counts; the 8B dry run must not allocate its 32 GB of fp32 weights:
# it runs under a 6 GiB address-space limit.
# The checksums in a parameter file are standard FNV-1a 64: an independent implementation
# (tests/scripts/fnv_independent.py) recomputes each from the tensor's bytes.
picotron_cli_test(cli.checksums_standard_fnv1a sh -c "${TRAIN} --device cpu --model tiny --hidden-size 32 --intermediate-size 64 --num-hidden-layers 1 --vocab-size 256 --steps 1 --seq-len 16 --micro-batch-size 1 \
--save-params ${CMAKE_CURRENT_BINARY_DIR}/fnv_check.safetensors >/dev/null && python3 ${CMAKE_SOURCE_DIR}/tests/scripts/fnv_independent.py ${CMAKE_CURRENT_BINARY_DIR}/fnv_check.safetensors")
set_tests_properties(cli.checksums_standard_fnv1a PROPERTIES PASS_REGULAR_EXPRESSION "FNV-1a 64 STANDARD")
picotron_cli_test(cli.dry_run_llama3_8b sh -c "ulimit -v 6291456 && ${TRAIN} --model llama3-8b --dry-run")
set_tests_properties(cli.dry_run_llama3_8b PROPERTIES PASS_REGULAR_EXPRESSION "total parameters   8030261248 ")
picotron_cli_test(cli.dry_run_smollm_135m ${TRAIN} --model smollm-135m --dry-run)
set_tests_properties(cli.dry_run_smollm_135m PROPERTIES PASS_REGULAR_EXPRESSION "total parameters   134515008 ")

# A short run: metrics file has every key and the loss falls; samples are printed.
picotron_cli_test(cli.train_metrics sh -c
  "${TRAIN} --device cpu --steps 30 --seq-len 32 --micro-batch-size 8 --warmup-steps 5 --generate 2 --metrics-file ${CMAKE_CURRENT_BINARY_DIR}/cli_metrics.jsonl && ${CMAKE_SOURCE_DIR}/tests/scripts/check_metrics.sh ${CMAKE_CURRENT_BINARY_DIR}/cli_metrics.jsonl 30")
set_tests_properties(cli.train_metrics PROPERTIES PASS_REGULAR_EXPRESSION "arithmetic accuracy: [0-9]+/100.*ok: 30 steps")

# Other data sources: a text file (bytes) and a token file (.bin), grad accumulation, fp64.
picotron_cli_test(cli.train_text_file sh -c
  "${TRAIN} --help > ${CMAKE_CURRENT_BINARY_DIR}/help.txt && ${TRAIN} --device cpu --data ${CMAKE_CURRENT_BINARY_DIR}/help.txt --steps 3 --warmup-steps 1 --seq-len 32 --micro-batch-size 2 --grad-acc-steps 2 --dtype fp64 --generate 1")
set_tests_properties(cli.train_text_file PROPERTIES PASS_REGULAR_EXPRESSION "step +3/3.*samples")
picotron_cli_test(cli.train_synthetic ${TRAIN} --device cpu --data synthetic --model tiny --vocab-size 1000 --steps 2 --warmup-steps 1 --seq-len 16 --micro-batch-size 2)
set_tests_properties(cli.train_synthetic PROPERTIES PASS_REGULAR_EXPRESSION "step +2/2")

# Bad input: one line naming the flag or file, non-zero exit.
picotron_cli_test(cli.bad_preset ${EXPECT_FAIL} "error: --model: unknown preset 'gpt5'" -- ${TRAIN} --model gpt5)
picotron_cli_test(cli.bad_zero_size ${EXPECT_FAIL} "error: --hidden-size must be > 0, got 0" -- ${TRAIN} --hidden-size 0)
picotron_cli_test(cli.bad_negative_batch ${EXPECT_FAIL} "error: --micro-batch-size must be > 0, got -4" -- ${TRAIN} --micro-batch-size -4)
picotron_cli_test(cli.bad_heads ${EXPECT_FAIL} "error: --hidden-size 128 is not divisible by --num-attention-heads 5" -- ${TRAIN} --num-attention-heads 5 --num-key-value-heads 5)
picotron_cli_test(cli.bad_kv_heads ${EXPECT_FAIL} "error: --num-attention-heads 4 is not divisible by --num-key-value-heads 3" -- ${TRAIN} --num-key-value-heads 3)
picotron_cli_test(cli.bad_ep_experts ${EXPECT_FAIL} "error: --num-local-experts 4 is not divisible by --ep 3" -- ${TRAIN} --model tiny-moe --dp 3 --ep 3 --dry-run)
picotron_cli_test(cli.bad_ep_dp ${EXPECT_FAIL} "error: --ep 2 does not divide --dp 3" -- ${TRAIN} --model tiny-moe --dp 3 --ep 2 --dry-run)
picotron_cli_test(cli.bad_ep_dense ${EXPECT_FAIL} "error: --ep 2 needs a mixture of experts" -- ${TRAIN} --dp 2 --ep 2 --dry-run)
picotron_cli_test(cli.bad_flag_value ${EXPECT_FAIL} "error: --steps: .many. is not a valid value" -- ${TRAIN} --steps many)
picotron_cli_test(cli.bad_device ${EXPECT_FAIL} "error: --device must be cpu, cuda or auto" -- ${TRAIN} --device tpu)
picotron_cli_test(cli.missing_data ${EXPECT_FAIL} "error: --data /nonexistent/corpus.txt: no such file" -- ${TRAIN} --data /nonexistent/corpus.txt)
picotron_cli_test(cli.empty_data ${EXPECT_FAIL} "error: --data .*empty.txt: file is empty" --
  sh -c "rm -f ${CMAKE_CURRENT_BINARY_DIR}/empty.txt && touch ${CMAKE_CURRENT_BINARY_DIR}/empty.txt && ${TRAIN} --data ${CMAKE_CURRENT_BINARY_DIR}/empty.txt")
picotron_cli_test(cli.truncated_data ${EXPECT_FAIL} "error: --data .*trunc.bin: truncated" --
  sh -c "printf 'PICOTOK1\\002\\000\\000\\000\\000\\000\\000\\000\\144\\000\\000\\000\\000\\000\\000\\000abcd' > ${CMAKE_CURRENT_BINARY_DIR}/trunc.bin && ${TRAIN} --data ${CMAKE_CURRENT_BINARY_DIR}/trunc.bin")
picotron_cli_test(cli.bad_mesh ${EXPECT_FAIL} "error: --dp 2 x --pp 1 x --cp 1 x --tp 1 = 2 ranks, but the job has 1 processes" -- ${TRAIN} --dp 2)

# The same under mpirun: every rank prints the error and the job exits non-zero, no hang.
function(picotron_mpi_cli_test name np regex)
  add_test(NAME ${name} COMMAND ${EXPECT_FAIL} "${regex}" -- ${PICOTRON_MPIRUN} -np ${np} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "cli;mpi" TIMEOUT 60 ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2)
endfunction()
picotron_mpi_cli_test(cli.mpi_bad_mesh 4
  "\\[rank 3\\] error: --dp 2 x --pp 1 x --cp 1 x --tp 3 = 6 ranks, but the job has 4 processes" ${TRAIN} --dp 2 --tp 3)
picotron_mpi_cli_test(cli.mpi_cp_seq_len 4 "\\[rank 3\\] error: --seq-len 30 is not divisible by 2 x --cp = 4" ${TRAIN} --dp 2 --cp 2 --seq-len 30)
# Pipeline parallelism: bad combinations, one line on every rank.
picotron_mpi_cli_test(cli.mpi_pp_interleaved_acc 2
  "\\[rank 1\\] error: --pp 2 --pp-schedule interleaved needs --grad-acc-steps divisible by --pp" ${TRAIN} --pp 2
  --pp-schedule interleaved --pp-virtual-stages 2 --grad-acc-steps 3)
picotron_mpi_cli_test(cli.mpi_pp_dualpipev_few_micro_batches 2
  "\\[rank 1\\] error: --pp 2 --pp-schedule dualpipev needs --grad-acc-steps >= 2 x --pp" ${TRAIN} --pp 2
  --pp-schedule dualpipev --grad-acc-steps 3)
picotron_mpi_cli_test(cli.mpi_pp_dualpipev_few_layers 2
  "\\[rank 1\\] error: --num-hidden-layers 3 is fewer than 2 x --pp 2 \\(dualpipev" ${TRAIN} --pp 2
  --pp-schedule dualpipev --num-hidden-layers 3 --grad-acc-steps 4)
picotron_mpi_cli_test(cli.mpi_pp_too_few_layers 4
  "\\[rank 3\\] error: --num-hidden-layers 4 is fewer than --pp 4 x --pp-virtual-stages 2" ${TRAIN} --pp 4
  --pp-schedule interleaved --pp-virtual-stages 2 --grad-acc-steps 4)
picotron_mpi_cli_test(cli.mpi_pp_virtual_needs_interleaved 2
  "\\[rank 0\\] error: --pp-virtual-stages 2 needs --pp-schedule interleaved, got 1f1b" ${TRAIN} --pp 2 --pp-virtual-stages 2)
picotron_cli_test(cli.bad_pp_schedule ${EXPECT_FAIL} "error: --pp-schedule must be afab, 1f1b, interleaved, zb-h1 or dualpipev, got 'gpipe'" --
  ${TRAIN} --pp-schedule gpipe)
picotron_cli_test(cli.pp_trace_needs_pp ${EXPECT_FAIL} "error: --pp-trace needs --pp > 1" -- ${TRAIN} --pp-trace t.json)
picotron_cli_test(cli.pp_schedule_needs_pp ${EXPECT_FAIL} "error: --pp-schedule needs --pp > 1" -- ${TRAIN} --pp-schedule afab)
# Pipelines are no longer refused on CUDA (their p2p follows NCCL's rules): the plan is accepted.
picotron_cli_test(cli.pp_cuda_accepted ${TRAIN} --device cuda --pp 2 --dry-run)
set_tests_properties(cli.pp_cuda_accepted PROPERTIES PASS_REGULAR_EXPRESSION "pp rank 1: layers 2-3, final norm")
# zb-h1 in fp16 with bucketed data parallelism: W's gradients land in .grad (not the main
# grads) and the loss scaler may skip steps; it trains.
add_test(NAME cli.mpi_pp2_dp2_zb_fp16 COMMAND ${PICOTRON_MPIRUN} -np 4 ${TRAIN} --device cpu --pp 2 --dp 2
  --pp-schedule zb-h1 --grad-acc-steps 2 --dtype fp16 --steps 4 --warmup-steps 1 --seq-len 32 --micro-batch-size 2
  --generate 0 --threads 1)
set_tests_properties(cli.mpi_pp2_dp2_zb_fp16 PROPERTIES LABELS "cli;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "step +4/4 \\| loss [0-9]")
picotron_mpi_cli_test(cli.mpi_missing_data 2 "\\[rank 1\\] error: --data /nonexistent.bin: no such file" ${TRAIN} --dp 2 --data /nonexistent.bin)

# Mixed precision on the CPU: bf16 (fp32 master weights) and fp16 (dynamic loss scaling).
foreach(dtype bf16 fp16)
  picotron_cli_test(cli.train_${dtype} ${TRAIN} --device cpu --dtype ${dtype} --steps 3 --warmup-steps 1 --seq-len 32
    --micro-batch-size 4 --generate 0)
  set_tests_properties(cli.train_${dtype} PROPERTIES PASS_REGULAR_EXPRESSION "step +3/3 \\| loss [0-9]")
endforeach()
# --device cuda without a GPU: one line, before any launch. (Skipped where a GPU is present.)
add_test(NAME cli.no_cuda_device COMMAND sh -c
  "nvidia-smi -L >/dev/null 2>&1 && echo 'SKIPPED: a GPU is present' || ${EXPECT_FAIL} 'error: --device cuda: no CUDA device is visible' -- ${TRAIN} --device cuda")
set_tests_properties(cli.no_cuda_device PROPERTIES LABELS cli TIMEOUT 60 SKIP_REGULAR_EXPRESSION "SKIPPED:")

# The dry run prints what each rank of the mesh allocates under its plan (pure arithmetic).
picotron_cli_test(cli.dry_run_plan sh -c "ulimit -v 6291456 && ${TRAIN} --model llama3-8b --dp 4 --dtype bf16 --dry-run")
set_tests_properties(cli.dry_run_plan PROPERTIES PASS_REGULAR_EXPRESSION
  "parameters per rank \\(bf16 weights.*\n  ranks 0-3: 8,030,261,248 parameters, weights 14.96 GiB")
# Default logging: every step of short runs, ~50 lines otherwise, always the first and last.
picotron_cli_test(cli.log_interval sh -c
  "${TRAIN} --device cpu --steps 100 --seq-len 16 --micro-batch-size 1 --generate 0 --num-hidden-layers 1 | grep -c '^step' | grep -x 51")
# Sampling after training works on every mesh training works on: full weights gathered on rank 0.
add_test(NAME cli.mpi_generate_dp2 COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --dp 2 --steps 3
  --seq-len 32 --micro-batch-size 2 --generate 2 --threads 1)
set_tests_properties(cli.mpi_generate_dp2 PROPERTIES LABELS "cli;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "samples \\(greedy\\):.*arithmetic accuracy: [0-9]+/100")
# The communication ledger against data_parallel/README.md's formula, per step: over cp x dp,
# all-reduces of N + 1 elements (N = 820,352 gradients of the tiny model, + the loss) in
# (buckets + 1) calls, or (parameters + 1) = 39 calls in naive mode; over the world, one
# all-reduce of 1 element (the global gradient norm).
foreach(mode bucketed naive)
  add_test(NAME ledger.dp_${mode} COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --dp 2
    --dp-mode ${mode} --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
  set_tests_properties(ledger.dp_${mode} PROPERTIES LABELS "cli;mpi" TIMEOUT 120
    ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2)
endforeach()
set_tests_properties(ledger.dp_bucketed PROPERTIES PASS_REGULAR_EXPRESSION
  "world +2 +all_reduce +2 +2 +1 +1\ncp_dp +2 +all_reduce +4 +1640706 +2 +820353\n")
set_tests_properties(ledger.dp_naive PROPERTIES PASS_REGULAR_EXPRESSION
  "world +2 +all_reduce +2 +2 +1 +1\ncp_dp +2 +all_reduce +78 +1640706 +39 +820353\n")
# One process: every group has one rank, nothing is communicated.
picotron_cli_test(cli.comm_report_one_rank ${TRAIN} --device cpu --steps 2 --seq-len 16 --micro-batch-size 1 --generate 0 --comm-report)
set_tests_properties(cli.comm_report_one_rank PROPERTIES PASS_REGULAR_EXPRESSION "no communication")
# Tensor parallelism's ledger against tensor_parallel/README.md, per step (tiny model: L 4,
# H 128; one micro-batch of N = 2 x 32 tokens): forward 2L + 1 all-reduces of N*H and 3 of
# N (the loss), backward 2L + 1 of N*H: 21 calls, 18 N H + 3 N = 147,648 elements.
add_test(NAME ledger.tp COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --tp 2
  --steps 2 --seq-len 32 --micro-batch-size 2 --generate 2 --threads 1 --comm-report)
set_tests_properties(ledger.tp PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "world +2 +all_reduce +2 +2 +1 +1\ntp +2 +all_reduce +42 +295296 +21 +147648\n.*arithmetic accuracy")
# With --sp the same volume travels as all-gathers and reduce-scatters: per step 2L + 1 = 9
# of each forward and 9 backward (18 calls of N*H = 8,192: 147,456 elements), the loss's 3
# all-reduces of N and one all-reduce of the norm gains' gradients, (2L + 1) H = 1,152.
add_test(NAME ledger.tp_sp COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --tp 2 --sp
  --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.tp_sp PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "tp +2 +all_reduce +8 +2688 +4 +1344\ntp +2 +all_gather +36 +294912 +18 +147456\ntp +2 +reduce_scatter +36 +294912 +18 +147456\n")
picotron_mpi_cli_test(cli.mpi_bad_sp_seq_len 2
  "\\[rank 1\\] error: --seq-len 33 is not divisible by --tp 2 \\(--sp splits the sequence over tp\\)" ${TRAIN} --tp 2 --sp --seq-len 33)
picotron_mpi_cli_test(cli.mpi_bad_tp_heads 3
  "\\[rank 2\\] error: --num-attention-heads 4 is not divisible by --tp 3" ${TRAIN} --tp 3)
picotron_mpi_cli_test(cli.mpi_bad_tp_kv_heads 4
  "\\[rank 3\\] error: --num-key-value-heads 2 is not divisible by --tp 4 \\(grouped-query attention" ${TRAIN} --tp 4)
# Tensor + sequence parallelism in bf16 (fp32 master weights, fp32 loss): it trains.
add_test(NAME cli.mpi_tp2_sp_bf16 COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --tp 2 --sp --dtype bf16
  --steps 3 --warmup-steps 1 --seq-len 32 --micro-batch-size 4 --generate 0 --threads 1)
set_tests_properties(cli.mpi_tp2_sp_bf16 PROPERTIES LABELS "cli;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "step +3/3 \\| loss [0-9]")

# Pipeline parallelism's ledger against pipeline_parallel/README.md, rank 0 (the first
# stage) per step, tiny model (H 128, V 256, tied), micro-batches of B S = 2 x 32, m = 4:
# 1f1b sends m activations and receives m gradients of B S H = 8,192 elements (32,768 per
# step), receives the loss (a broadcast of 1), and sums the tied embedding's gradient with
# the last stage (V H = 32,768). Interleaved v = 2: rank 0 holds virtual stages 0 and 2,
# so it sends 2m activations and m gradients (3 x 4 = 12 tensors, 98,304 elements).
# The run also samples after training (full weights gathered from both stages).
add_test(NAME ledger.pp_1f1b COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --pp 2 --grad-acc-steps 4
  --steps 2 --seq-len 32 --micro-batch-size 2 --generate 2 --threads 1 --comm-report)
set_tests_properties(ledger.pp_1f1b PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "pp +2 +broadcast +2 +2 +1 +1\npp +2 +send +8 +65536 +4 +32768\npp +2 +recv +8 +65536 +4 +32768\nembed +2 +all_reduce +2 +65536 +1 +32768\n.*arithmetic accuracy")
# A mixture of experts (E 4): beside each tensor its balancing statistics, 2E + 1 = 9
# elements (4 x 8,192 + 4 x 9 sent per step), and the tokens per expert broadcast with the loss.
add_test(NAME ledger.pp_moe COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --model tiny-moe --pp 2
  --grad-acc-steps 4 --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.pp_moe PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "pp +2 +broadcast +4 +10 +2 +5\npp +2 +send +16 +65608 +8 +32804\npp +2 +recv +16 +65608 +8 +32804\n")
add_test(NAME ledger.pp_interleaved COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --pp 2
  --pp-schedule interleaved --pp-virtual-stages 2 --grad-acc-steps 4 --steps 2 --seq-len 32 --micro-batch-size 2
  --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.pp_interleaved PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "pp +2 +send +24 +196608 +12 +98304\npp +2 +recv +24 +196608 +12 +98304\n")
# DualPipeV, m = 4: rank 0 sends stage 0's 4 activations and stage 3's 4 gradients and
# receives as many; the V's bottom (stage 1 -> 2, rank 1) sends nothing to itself, and the
# tied embedding and head are both on rank 0: no embedding all-reduce.
add_test(NAME ledger.pp_dualpipev COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --pp 2
  --pp-schedule dualpipev --grad-acc-steps 4 --steps 2 --seq-len 32 --micro-batch-size 2
  --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.pp_dualpipev PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 FAIL_REGULAR_EXPRESSION "\nembed " PASS_REGULAR_EXPRESSION
  "pp +2 +broadcast +2 +2 +1 +1\npp +2 +send +16 +131072 +8 +65536\npp +2 +recv +16 +131072 +8 +65536\n")
# --pp-trace: one Chrome trace with every rank's F, B, W, send and recv (zb-h1, 4 ranks).
list(JOIN PICOTRON_MPIRUN " " MPIRUN_LINE)
add_test(NAME cli.mpi_pp_trace COMMAND sh -c "${MPIRUN_LINE} -np 4 ${TRAIN} --device cpu --pp 4 --pp-schedule zb-h1 \
--grad-acc-steps 4 --steps 2 --seq-len 16 --micro-batch-size 1 --generate 0 --threads 1 \
--pp-trace ${CMAKE_CURRENT_BINARY_DIR}/pp_trace.json && python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_trace.py \
${CMAKE_CURRENT_BINARY_DIR}/pp_trace.json 4 4 2")
set_tests_properties(cli.mpi_pp_trace PROPERTIES LABELS "cli;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "trace ok")

# ZeRO-1's ledger against zero/README.md (tiny model, 820,352 parameters, dp 2), per
# step: one reduce-scatter and one all-gather of the flat buffer (820,352 elements each,
# the same bytes on the wire as data parallelism's one all-reduce), plus the loss's
# all-reduce of 1; and the memory line of rank 0.
add_test(NAME ledger.zero1 COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --dp 2 --zero 1
  --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.zero1 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "zero-1 over cp_dp = 2 ranks. rank 0 holds parameters 3.13 MiB, gradients 4.69 MiB, master weights \\(the parameters themselves\\), AdamW moments 3.13 MiB.*cp_dp +2 +all_reduce +2 +2 +1 +1\ncp_dp +2 +all_gather +2 +1640704 +1 +820352\ncp_dp +2 +reduce_scatter +2 +1640704 +1 +820352\n")
picotron_cli_test(cli.zero_offload_cpu ${EXPECT_FAIL} "error: --zero-offload moves the optimizer from the GPU to the CPU: it needs --device cuda" -- ${TRAIN} --zero 2 --zero-offload --device cpu)
picotron_cli_test(cli.zero_offload_no_gpu ${EXPECT_FAIL} "error: --zero-offload moves the optimizer from the GPU to the CPU: it needs a GPU, and none is visible" -- ${TRAIN} --zero 3 --zero-offload)
picotron_cli_test(cli.zero_offload_needs_zero ${EXPECT_FAIL} "error: --zero-offload needs --zero 1, 2 or 3" -- ${TRAIN} --zero-offload --device cpu)
# ZeRO-2 (tiny model, dp 2, 1 MiB buckets: 4 of them, grad-acc 2), per step: a reduce-scatter
# per bucket per micro-batch (8 calls, 2 x 820,352 elements), an all-gather per bucket
# (4 calls, 820,352); rank 0 keeps half the fp32 gradient (1.56 MiB).
add_test(NAME ledger.zero2 COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --dp 2 --zero 2
  --dp-bucket-mb 1 --grad-acc-steps 2 --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.zero2 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "zero-2 over cp_dp = 2 ranks. rank 0 holds parameters 3.13 MiB, gradients 1.56 MiB, master weights \\(the parameters themselves\\), AdamW moments 3.13 MiB.*cp_dp +2 +all_gather +8 +1640704 +4 +820352\ncp_dp +2 +reduce_scatter +16 +3281408 +8 +1640704\n")
# ZeRO-3 (tiny model: embedding 32,768, 4 layers of 196,864, head = final norm 128, tied;
# Ψ = 820,352; dp 2, grad-acc 2), per micro-batch: every unit gathered before its forward
# (the tied embedding twice: the lookup and the head) and every layer again before its
# backward, the head kept: 11 all-gathers of 2Ψ - 128 = 1,640,576 elements; one
# reduce-scatter per unit, 6 of Ψ. Per step x 2. No all-gather after the step.
add_test(NAME ledger.zero3 COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --dp 2 --zero 3
  --grad-acc-steps 2 --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.zero3 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "zero-3 over cp_dp = 2 ranks. rank 0 holds parameters 1.56 MiB, gradients 1.56 MiB, master weights \\(the parameters themselves\\), AdamW moments 3.13 MiB.*cp_dp +2 +all_gather +44 +6562304 +22 +3281152\ncp_dp +2 +reduce_scatter +24 +3281408 +12 +1640704\n")
# ZeRO-3 over a pipeline stage (tiny model, dp 2 x pp 2, 1f1b, grad-acc 2; rank 0 = stage 0:
# embedding 32,768 + layers 0-1 of 196,864 = 426,496 elements), per micro-batch: each unit
# gathered before its forward, and again before its backward but for the stage's last
# layer, kept from its forward to its backward: 5 all-gathers of 2 x 426,496 - 196,864 =
# 656,128 elements; one reduce-scatter per unit (3, of 426,496). Per step x 2. The tied
# embedding's sum over the pipeline's two ends runs on my half of it: 16,384 elements.
add_test(NAME ledger.zero3_pp2 COMMAND ${PICOTRON_MPIRUN} -np 4 ${TRAIN} --device cpu --dp 2 --pp 2 --zero 3
  --grad-acc-steps 2 --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.zero3_pp2 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "cp_dp +2 +all_gather +20 +2624512 +10 +1312256\ncp_dp +2 +reduce_scatter +12 +1705984 +6 +852992\nembed +2 +all_reduce +2 +32768 +1 +16384\n")
# HSDP and hpZ at dp 4 (zero/README.md, "HSDP and hpZ": the formulas), tiny model, grad-acc 2,
# P_pad = 820,352 (every unit a multiple of 4). Full ZeRO-3 over 4: per step 22 all-gathers of
# 2 x 820,352 - 128 = 1,640,576 elements per micro-batch, 12 reduce-scatters of 2 x 820,352.
# --zero-shard 2: the same over the shard group of 2, plus ONE all-reduce of my slice,
# P_pad / 2 = 410,176, over the replicas per step. --zero-hpz 2 (shard group 4): each unit's
# first gather of a micro-batch over cp_dp (embedding, 4 layers, head: 6 x 2 = 12 per step,
# 2 x 820,352 = 1,640,704), every re-gather (the tied embedding for the head, the 4 layers'
# backward: 5 x 2 = 10, 2 x (32,768 + 4 x 196,864) = 1,640,448) over the hpZ group of 2.
set(LEDGER4 --device cpu --dp 4 --zero 3 --grad-acc-steps 2 --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0
    --threads 1 --comm-report)
add_test(NAME ledger.zero3_dp4 COMMAND ${PICOTRON_MPIRUN} -np 4 ${TRAIN} ${LEDGER4})
set_tests_properties(ledger.zero3_dp4 PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "cp_dp +4 +all_gather +44 +6562304 +22 +3281152\ncp_dp +4 +reduce_scatter +24 +3281408 +12 +1640704\n")
add_test(NAME ledger.hsdp COMMAND ${PICOTRON_MPIRUN} -np 4 ${TRAIN} ${LEDGER4} --zero-shard 2)
set_tests_properties(ledger.hsdp PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "zero-3 over cp_dp, sharded over cp_dp_shard = 2 ranks, replicated over cp_dp_replicas = 2. rank 0 holds parameters 1.56 MiB.*cp_dp_shard +2 +all_gather +44 +6562304 +22 +3281152\ncp_dp_shard +2 +reduce_scatter +24 +3281408 +12 +1640704\ncp_dp_replicas +2 +all_reduce +2 +820352 +1 +410176\n")
add_test(NAME ledger.hpz COMMAND ${PICOTRON_MPIRUN} -np 4 ${TRAIN} ${LEDGER4} --zero-hpz 2)
set_tests_properties(ledger.hpz PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "cp_dp +4 +all_gather +24 +3281408 +12 +1640704\ncp_dp +4 +reduce_scatter +24 +3281408 +12 +1640704\ncp_dp_hpz +2 +all_gather +20 +3280896 +10 +1640448\n")
# Bad input for HSDP and hpZ: one line naming the flags (on every rank, before the first step).
picotron_cli_test(cli.zero_shard_needs_zero ${EXPECT_FAIL} "error: --zero-shard / --zero-hpz need --zero 1, 2 or 3" -- ${TRAIN} --zero-shard 2 --dp 4 --device cpu)
picotron_cli_test(cli.zero_shard_divides_dp ${EXPECT_FAIL} "error: --zero-shard 3 does not divide --dp 4" -- ${TRAIN} --zero 1 --zero-shard 3 --dp 4 --device cpu)
picotron_cli_test(cli.zero_hpz_needs_zero3 ${EXPECT_FAIL} "error: --zero-hpz needs --zero 3" -- ${TRAIN} --zero 2 --zero-hpz 2 --dp 4 --device cpu)
picotron_cli_test(cli.zero_hpz_divides_shard ${EXPECT_FAIL} "error: --zero-hpz 4 does not divide the shard group's 2 dp ranks \\(--zero-shard 2\\)" -- ${TRAIN} --zero 3 --zero-shard 2 --zero-hpz 4 --dp 4 --device cpu)
picotron_cli_test(cli.zero_shard_holds_experts ${EXPECT_FAIL} "error: --zero-shard 2 with --ep 4: the shard group must hold every expert" -- ${TRAIN} --model tiny-moe --zero 1 --zero-shard 2 --ep 4 --dp 4 --device cpu)
# ZeRO-3 in bf16 (fp32 master slices copied into bf16 shards, gathered as bf16): 4 steps
# at dp 2 agree with plain data parallelism's within bf16 rounding (losses 2e-5 apart,
# parameters 7e-3 when measured; a master never copied into the shard fails by far).
set(Z3BF16 --device cpu --dtype bf16 --dp 2 --steps 4 --seq-len 32 --generate 0 --threads 1)
list(JOIN Z3BF16 " " Z3BF16)
add_test(NAME cli.mpi_zero3_bf16 COMMAND sh -c "for z in 0 3; do ${MPIRUN_LINE} -np 2 ${TRAIN} ${Z3BF16} --zero $z \
--metrics-file ${CMAKE_CURRENT_BINARY_DIR}/zero3_bf16_$z.jsonl --save-params ${CMAKE_CURRENT_BINARY_DIR}/zero3_bf16_$z.params \
>/dev/null || exit 1; done; $<TARGET_FILE:compare_runs> ${CMAKE_CURRENT_BINARY_DIR}/zero3_bf16_0.jsonl \
${CMAKE_CURRENT_BINARY_DIR}/zero3_bf16_3.jsonl ${CMAKE_CURRENT_BINARY_DIR}/zero3_bf16_0.params \
${CMAKE_CURRENT_BINARY_DIR}/zero3_bf16_3.params 1e-2")
set_tests_properties(cli.mpi_zero3_bf16 PROPERTIES LABELS "cli;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "EQUIVALENT" FAIL_REGULAR_EXPRESSION "FAILED")
# The measured peak memory of a CPU run falls stage by stage (tests/scripts/check_zero_memory.sh).
add_test(NAME cli.mpi_zero_memory_falls COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/check_zero_memory.sh ${TRAIN} ${PICOTRON_MPIRUN})
set_tests_properties(cli.mpi_zero_memory_falls PROPERTIES LABELS "cli;mpi" TIMEOUT 240
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION "peak memory falls stage by stage")
picotron_cli_test(cli.bad_zero ${EXPECT_FAIL} "error: --zero must be 0, 1, 2 or 3, got 4" -- ${TRAIN} --zero 4)
# ZeRO in --dry-run: smollm-1.7b at dp 8 in bf16, training state per rank (main grad 4Ψ,
# moments 8Ψ, master 4Ψ, Ψ = 1,711,376,384): plain 16Ψ = 25.50 GiB, zero-1 4Ψ + 4Ψ/8 (the
# main grad and its averaged slice) + 12Ψ/8 = 9.56 GiB, zero-2 16Ψ/8 = 3.19 GiB, zero-3 the
# same and weights 2Ψ/8 = 408.02 MiB.
foreach(case "0;3.19 GiB;25.50" "1;3.19 GiB;9.56" "2;3.19 GiB;3.19" "3;408.02 MiB;3.19")
  list(GET case 0 stage)
  list(GET case 1 weights)
  list(GET case 2 gib)
  picotron_cli_test(cli.dry_run_zero${stage} ${TRAIN} --model smollm-1.7b --dp 8 --zero ${stage} --dtype bf16 --dry-run)
  set_tests_properties(cli.dry_run_zero${stage} PROPERTIES PASS_REGULAR_EXPRESSION "ranks 0-7: 1,711,376,384 parameters, weights ${weights}, training state ${gib} GiB")
endforeach()
# The memory estimate (runtime/planner/memory_estimate.h) under HSDP and hpZ (zero/zero_groups.h),
# the same zero-3 run (P_pad = Ψ = 1,711,376,384: every unit divides by 8; rank 0's peak
# 10,937,344,512 B with slices P_pad/8 = 213,922,048):
#  --zero-shard 4: slices over 4 ranks, P_pad/4 = 427,844,096, each state line doubled: the
#    peak grows by 213,922,048 x (2 + 4 + 4 + 8) B (weights, gradients, master, moments) =
#    3,850,596,864 to 14,787,941,376 B;
#  --zero-hpz 2: every unit but the last pass's (the head's: the final norm, 2,048; the tied
#    embedding runs the lookup too, so it is released after it and keeps its part) keeps half
#    of itself from its forward to its backward: (1,711,376,384 - 2,048) / (2 x cp 1) =
#    855,687,168 x e 2 = 1,711,374,336 B more, 12,648,718,848 B.
picotron_cli_test(cli.dry_run_zero3_hsdp ${TRAIN} --model smollm-1.7b --dp 8 --zero 3 --zero-shard 4 --dtype bf16 --dry-run)
set_tests_properties(cli.dry_run_zero3_hsdp PROPERTIES PASS_REGULAR_EXPRESSION
  "weights \\(my slice\\) +816.05 MiB +P_pad/N x e = 427,844,096 x 2\n.*total at the peak +13.77 GiB +14,787,941,376 B\n.*N = cp x --zero-shard = 1 x 4 ranks")
picotron_cli_test(cli.dry_run_zero3_hpz ${TRAIN} --model smollm-1.7b --dp 8 --zero 3 --zero-hpz 2 --dtype bf16 --dry-run)
set_tests_properties(cli.dry_run_zero3_hpz PROPERTIES PASS_REGULAR_EXPRESSION
  "weights \\(my slice\\) +408.02 MiB +P_pad/N x e = 213,922,048 x 2\n.*hpZ parts \\(forward to backward\\) +1.59 GiB +\\(P_pad - the last pass.s units\\)/\\(h x cp\\) x e = 855,687,168 x 2\n.*total at the peak +11.78 GiB +12,648,718,848 B")

# Context parallelism's ledger against context_parallel/README.md (tiny model: 4 layers,
# nKV 2, Hd 32; B 2, S 32, cp 2, so a k/v block is 2·2·16·2·32 = 4,096 elements): per
# layer per micro-batch forward C-1 = 1 k/v block, backward 1 k/v block + C = 2 dk/dv
# blocks: 16 sends (and 16 receives) of 65,536 elements per step on the cp group.
add_test(NAME ledger.cp_ring COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --cp 2 --steps 2
  --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.cp_ring PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "cp +2 +send +32 +131072 +16 +65536\ncp +2 +recv +32 +131072 +16 +65536\n")
picotron_cli_test(cli.bad_cp_layout ${EXPECT_FAIL} "error: --cp-layout must be contiguous or zigzag, got 'ring'" -- ${TRAIN} --cp-layout ring)
picotron_cli_test(cli.cp_seq_len_zigzag ${EXPECT_FAIL} "error: --seq-len 36 is not divisible by 2 x --cp = 8" -- ${TRAIN} --cp 4 --seq-len 36 --dry-run)
picotron_cli_test(cli.cp_seq_len_contiguous ${EXPECT_FAIL} "error: --seq-len 30 is not divisible by --cp 4" -- ${TRAIN} --cp 4 --cp-layout contiguous --seq-len 30 --dry-run)
# Ulysses (context_parallel/README.md): the same layout, 8 all-to-alls per layer of
# (U-1)/U·B·(S/C)·Hd·(2nH + 2f·nKV) elements in all: tiny (4 layers, nH 4, nKV 2, Hd 32), B 2,
# S 32, cp 2: 32 calls and 49,152 elements per step, no ring send; and the refusals.
add_test(NAME ledger.cp_ulysses COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --cp 2 --cp-mode ulysses
  --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.cp_ulysses PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "cp +2 +all_to_all +64 +98304 +32 +49152\n" FAIL_REGULAR_EXPRESSION "cp +2 +send")
# The hybrid (cp 4 = all-to-alls of U 2 x rings of R 2), its two groups in the ledger, per step:
# cp_a2a 2 (U-1)/U B n Hd (2 nH + 2 f nKV) x L = 6,144 x 4 in 8 x 4 calls; cp_ring (3R-2) hops of
# 2 B (U n) (f nKV / U) Hd = 8,192 x 4 layers in 4 x 4 sends (context_parallel/README.md).
add_test(NAME ledger.cp_hybrid COMMAND ${PICOTRON_MPIRUN} -np 4 ${TRAIN} --device cpu --cp 4 --cp-mode hybrid
  --cp-ulysses 2 --steps 2 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --comm-report)
set_tests_properties(ledger.cp_hybrid PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "cp_a2a +2 +all_to_all +64 +49152 +32 +24576\ncp_ring +2 +send +32 +65536 +16 +32768\ncp_ring +2 +recv +32 +65536 +16 +32768\n")
# --explain under Ulysses: which heads and positions each rank attends, and the all-to-alls
# with the line that issues them.
add_test(NAME cli.mpi_explain_cp2_ulysses COMMAND ${PICOTRON_MPIRUN} -np 2 ${TRAIN} --device cpu --cp 2 --cp-mode ulysses
  --steps 1 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --explain)
set_tests_properties(cli.mpi_explain_cp2_ulysses PROPERTIES LABELS "cli;mpi" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION
  "attention \\(--cp-mode ulysses\\): an all-to-all over 2 cp ranks gives it query heads 2-3 of this tp rank's 4 \\(key/value heads 1 of 2\\) at positions 0-31 \\(the whole sequence\\).*all_to_all over cp \\{0,1\\}: \\[2, 2, 2, 16, 32\\] -> \\[2, 2, 2, 16, 32\\] fp32, 2,048 elements\n      at context_parallel/ulysses.cpp")
picotron_cli_test(cli.cp_ulysses_heads ${EXPECT_FAIL} "error: --cp-mode ulysses: the 4 attention heads per tp rank \\(--num-attention-heads / --tp\\) are not divisible by the all-to-all group 8 \\(--cp 8\\)" -- ${TRAIN} --cp 8 --cp-mode ulysses --seq-len 64 --dry-run)
picotron_cli_test(cli.bad_cp_mode ${EXPECT_FAIL} "error: --cp-mode must be ring, ulysses or hybrid, got 'star'" -- ${TRAIN} --cp-mode star)
# Context parallelism's flags without context parallelism: refused, not ignored.
picotron_cli_test(cli.cp_mode_needs_cp ${EXPECT_FAIL} "error: --cp-mode hybrid needs --cp > 1" -- ${TRAIN} --cp-mode hybrid --cp-ulysses 2)
picotron_cli_test(cli.cp_ulysses_needs_cp ${EXPECT_FAIL} "error: --cp-ulysses 5 needs --cp > 1 and --cp-mode hybrid" -- ${TRAIN} --cp-ulysses 5)
picotron_cli_test(cli.keep_checkpoints_needs_save_dir ${EXPECT_FAIL} "error: --keep-checkpoints 5 needs --save-dir" -- ${TRAIN} --keep-checkpoints 5)
picotron_cli_test(cli.cp_layout_needs_cp ${EXPECT_FAIL} "error: --cp-layout contiguous needs --cp > 1" -- ${TRAIN} --cp-layout contiguous)
# fp8 with a schedule that splits the backward (its deferring linear would replace the fp8 one).
picotron_cli_test(cli.fp8_dualpipev_refused ${EXPECT_FAIL} "error: --fp8 and --pp-schedule dualpipev both replace the projections" --
  ${TRAIN} --fp8 --pp 2 --pp-schedule dualpipev --num-hidden-layers 4 --grad-acc-steps 4 --dry-run)
picotron_cli_test(cli.fp8_zb_h1_refused ${EXPECT_FAIL} "error: --fp8 and --pp-schedule zb-h1 both replace the projections" --
  ${TRAIN} --fp8 --pp 2 --pp-schedule zb-h1 --grad-acc-steps 2 --dry-run)
picotron_cli_test(cli.cp_hybrid_needs_group ${EXPECT_FAIL} "error: --cp-mode hybrid needs --cp-ulysses U with 1 < U < --cp 4" -- ${TRAIN} --cp 4 --cp-mode hybrid --dry-run)
picotron_mpi_cli_test(cli.mpi_cp_ulysses_heads 4 "\\[rank 3\\] error: --cp-mode ulysses: the 1 attention heads per tp rank" ${TRAIN} --cp 2 --tp 2 --cp-mode ulysses --num-attention-heads 2 --num-key-value-heads 2 --hidden-size 64)
picotron_cli_test(cli.bad_recompute ${EXPECT_FAIL} "error: --recompute must be none, selective or full, got 'some'" -- ${TRAIN} --recompute some)
# --memory-trace: every phase of every step, as JSON lines; tensor memory rises through
# forward and falls through backward (tests/scripts/check_memory_trace.py).
add_test(NAME cli.memory_trace COMMAND sh -c "${TRAIN} --device cpu --steps 2 --seq-len 64 --grad-acc-steps 2 --generate 0 \
--threads 1 --memory-trace ${CMAKE_CURRENT_BINARY_DIR}/memory_trace.jsonl >/dev/null && python3 \
${CMAKE_SOURCE_DIR}/tests/scripts/check_memory_trace.py ${CMAKE_CURRENT_BINARY_DIR}/memory_trace.jsonl 2 2")
set_tests_properties(cli.memory_trace PROPERTIES LABELS cli TIMEOUT 120 PASS_REGULAR_EXPRESSION "memory trace ok")
# The plot scripts draw a real run's memory trace and metrics, with the Python of the
# torch virtualenv that scripts/setup.sh made (and put matplotlib in); without it they
# are not registered.
get_filename_component(PICOTRON_VENV "${Torch_DIR}/../../../../../../.." ABSOLUTE)
set(PICOTRON_PYTHON "${PICOTRON_VENV}/bin/python")
execute_process(COMMAND "${PICOTRON_PYTHON}" -c "import matplotlib" RESULT_VARIABLE NO_MATPLOTLIB OUTPUT_QUIET ERROR_QUIET)
# Hugging Face folders in and out, against transformers itself (tests/scripts/hf_roundtrip.py):
# registered when the torch virtualenv has transformers (scripts/setup.sh installs it).
execute_process(COMMAND "${PICOTRON_PYTHON}" -c "import transformers, safetensors" RESULT_VARIABLE NO_TRANSFORMERS
  OUTPUT_QUIET ERROR_QUIET)
if(NO_TRANSFORMERS EQUAL 0)
  add_test(NAME hf.roundtrip COMMAND "${PICOTRON_PYTHON}" ${CMAKE_SOURCE_DIR}/tests/scripts/hf_roundtrip.py
    ${CMAKE_CURRENT_BINARY_DIR}/hf ${TRAIN} ${PICOTRON_MPIRUN})
  set_tests_properties(hf.roundtrip PROPERTIES LABELS "cli;mpi;hf" TIMEOUT 600 ENVIRONMENT "${PICOTRON_TEST_ENV}"
    PROCESSORS 2 PASS_REGULAR_EXPRESSION "hf ok" FAIL_REGULAR_EXPRESSION "FAILED")
  # Mixtral folders (a mixture of experts) in and out: logits, the loss with the
  # load-balancing term and one AdamW step against MixtralForCausalLM (tests/scripts/hf_mixtral.py).
  add_test(NAME hf.mixtral COMMAND "${PICOTRON_PYTHON}" ${CMAKE_SOURCE_DIR}/tests/scripts/hf_mixtral.py
    ${CMAKE_CURRENT_BINARY_DIR}/hf_mixtral ${TRAIN})
  set_tests_properties(hf.mixtral PROPERTIES LABELS "cli;hf" TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1"
    PASS_REGULAR_EXPRESSION "hf mixtral ok" FAIL_REGULAR_EXPRESSION "FAILED")
  # Untrusted folders: a shard outside the folder, an extra tensor, NaN weights, overlapping bytes.
  add_test(NAME hf.untrusted_folders COMMAND "${PICOTRON_PYTHON}" ${CMAKE_SOURCE_DIR}/tests/scripts/hf_untrusted.py
    ${CMAKE_CURRENT_BINARY_DIR}/hf_untrusted ${TRAIN})
  set_tests_properties(hf.untrusted_folders PROPERTIES LABELS "cli;reliability;hf" TIMEOUT 120
    ENVIRONMENT "OMP_NUM_THREADS=1" PASS_REGULAR_EXPRESSION "hf untrusted ok" FAIL_REGULAR_EXPRESSION "FAILED")
else()
  message(STATUS "transformers not found in ${PICOTRON_PYTHON}: hf.roundtrip, hf.mixtral and hf.untrusted_folders are not registered (scripts/setup.sh installs it)")
endif()
# The C++ tokenizer (runtime/text/tokenizer.h) against the tokenizers library: three byte-level
# BPE styles (GPT-2, Llama-3, SmolLM) trained on the project's docs, the same ids on every
# paragraph and on hard cases, and decoding back to the text.
add_executable(tokenizer_check tools/tokenizer_check.cpp)
target_link_libraries(tokenizer_check PRIVATE picotron_core)
target_link_options(tokenizer_check PRIVATE ${PICOTRON_LINK_FLAGS})
if(NO_TRANSFORMERS EQUAL 0)
  add_test(NAME data.tokenizer_vs_library COMMAND "${PICOTRON_PYTHON}" ${CMAKE_SOURCE_DIR}/tests/scripts/tokenizer_cases.py
    ${CMAKE_CURRENT_BINARY_DIR}/tokenizers $<TARGET_FILE:tokenizer_check> ${CMAKE_SOURCE_DIR}/README.md
    ${CMAKE_SOURCE_DIR}/docs/testing.md ${CMAKE_SOURCE_DIR}/pipeline_parallel/README.md)
  set_tests_properties(data.tokenizer_vs_library PROPERTIES LABELS cli TIMEOUT 120 PASS_REGULAR_EXPRESSION "tokenizers ok"
    FAIL_REGULAR_EXPRESSION "FAILED")
endif()
picotron_cli_test(hf.bad_init_from ${EXPECT_FAIL} "error: --init-from /nonexistent/llama: .*config.json: no such file" --
  ${TRAIN} --init-from /nonexistent/llama)
set(HF_DIR ${CMAKE_CURRENT_BINARY_DIR}/hf_export_flags)
picotron_cli_test(hf.conflicting_shape_flag ${EXPECT_FAIL}
  "error: --hidden-size 32 disagrees with .*config.json \\(hidden_size 128\\)" -- sh -c
  "rm -rf ${HF_DIR} && ${TRAIN} --device cpu --steps 1 --seq-len 16 --micro-batch-size 2 --generate 0 --export-hf ${HF_DIR} >/dev/null && ${TRAIN} --device cpu --init-from ${HF_DIR} --hidden-size 32")
picotron_cli_test(hf.bad_prompt_ids ${EXPECT_FAIL} "error: --prompt-ids: 'x' is not a token id" -- ${TRAIN} --prompt-ids 1,x)
if(NO_MATPLOTLIB EQUAL 0)
  add_test(NAME cli.plot_scripts COMMAND sh -c "${TRAIN} --device cpu --steps 3 --seq-len 32 --grad-acc-steps 2 --generate 0 \
--threads 1 --memory-trace ${CMAKE_CURRENT_BINARY_DIR}/plot_trace.jsonl --metrics-file ${CMAKE_CURRENT_BINARY_DIR}/plot_metrics.jsonl \
>/dev/null && ${PICOTRON_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/plot_memory.py ${CMAKE_CURRENT_BINARY_DIR}/plot_trace.jsonl \
-o ${CMAKE_CURRENT_BINARY_DIR}/plot_memory.png && ${PICOTRON_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/plot_metrics.py \
${CMAKE_CURRENT_BINARY_DIR}/plot_metrics.jsonl -o ${CMAKE_CURRENT_BINARY_DIR}/plot_metrics.png && test -s \
${CMAKE_CURRENT_BINARY_DIR}/plot_memory.png && test -s ${CMAKE_CURRENT_BINARY_DIR}/plot_metrics.png && echo plots ok")
  set_tests_properties(cli.plot_scripts PROPERTIES LABELS cli TIMEOUT 120 PASS_REGULAR_EXPRESSION "plots ok")
else()
  message(STATUS "no matplotlib in ${PICOTRON_PYTHON}: the plot-script test is not registered")
endif()

# The memory estimator of --dry-run (runtime/planner/memory_estimate.h) against the measured peak
# of two real steps (rank 0, CPU counting allocator), one line per case: within 2%
# (the issue asks for 10%; at 2% dropping any one term of the estimate fails some case).
# Tiny and a 25.3M model (H 512, I 1536, 8 layers), seq 128 and 512, micro-batch 1 and 8,
# each recompute mode, fp32/bf16/fp64, grad accumulation, tp2, pp2, zero 1/2/3, cp2, zero 2/3 x pp2;
# tiny-moe (the router, the experts' rows, the all-to-all buffers under --ep). The estimate
# assumes balanced routing: the ep case routes every token to all E experts (k = E), which
# balances it by construction; with k = 2 of 4 the first steps' routing is uneven (rank 0's
# experts get up to 1.36x their share in tiny-moe --dp 2 --ep 2: -2.0%).
set(M25 --hidden-size 512 --intermediate-size 1536 --num-hidden-layers 8)
function(picotron_memory_estimate name np)
  add_test(NAME memory_estimate.${name} COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/check_memory_estimate.sh
    ${CMAKE_CURRENT_BINARY_DIR}/memory_estimate/${name} ${np} 0.02 -- ${TRAIN} ${ARGN})
  set(processors 2)
  if(np EQUAL 1)  # one process: ctest runs another test beside it
    set(processors 1)
  endif()
  set_tests_properties(memory_estimate.${name} PROPERTIES LABELS "cli;mpi" TIMEOUT 300 ENVIRONMENT "${PICOTRON_TEST_ENV}"
    PROCESSORS ${processors} PASS_REGULAR_EXPRESSION "estimate ok" FAIL_REGULAR_EXPRESSION "FAILED")
endfunction()
picotron_memory_estimate(tiny_s128_b1 1 --seq-len 128 --micro-batch-size 1)
picotron_memory_estimate(tiny_s128_b8 1 --seq-len 128 --micro-batch-size 8)
picotron_memory_estimate(tiny_s512_b8 1 --seq-len 512 --micro-batch-size 8)
picotron_memory_estimate(tiny_selective 1 --seq-len 128 --micro-batch-size 8 --recompute selective)
picotron_memory_estimate(tiny_full 1 --seq-len 128 --micro-batch-size 8 --recompute full)
picotron_memory_estimate(tiny_bf16 1 --seq-len 128 --micro-batch-size 8 --dtype bf16)
picotron_memory_estimate(tiny_fp64_untied_acc2 1 --seq-len 128 --micro-batch-size 4 --grad-acc-steps 2 --dtype fp64 --tie-word-embeddings=false)
picotron_memory_estimate(m25_s512_b1 1 ${M25} --seq-len 512 --micro-batch-size 1)
picotron_memory_estimate(m25_s512_b1_selective 1 ${M25} --seq-len 512 --micro-batch-size 1 --recompute selective)
picotron_memory_estimate(m25_s512_b1_full 1 ${M25} --seq-len 512 --micro-batch-size 1 --recompute full)
picotron_memory_estimate(m25_s128_b8 1 ${M25} --seq-len 128 --micro-batch-size 8)
picotron_memory_estimate(tiny_tp2 2 --seq-len 128 --micro-batch-size 8 --tp 2)
picotron_memory_estimate(tiny_pp2 2 --seq-len 128 --micro-batch-size 8 --pp 2 --grad-acc-steps 4)
picotron_memory_estimate(tiny_pp2_afab 2 --seq-len 128 --micro-batch-size 8 --pp 2 --grad-acc-steps 4 --pp-schedule afab)
picotron_memory_estimate(tiny_zero1 2 --seq-len 128 --micro-batch-size 8 --dp 2 --zero 1)
picotron_memory_estimate(tiny_zero2 2 --seq-len 128 --micro-batch-size 8 --dp 2 --zero 2)
picotron_memory_estimate(tiny_zero3 2 --seq-len 128 --micro-batch-size 8 --dp 2 --zero 3)
picotron_memory_estimate(tiny_cp2 2 --seq-len 128 --micro-batch-size 8 --cp 2)
picotron_memory_estimate(tiny_zero2_pp2 4 --seq-len 128 --micro-batch-size 8 --dp 2 --pp 2 --grad-acc-steps 4 --zero 2)
picotron_memory_estimate(tiny_zero3_pp2 4 --seq-len 128 --micro-batch-size 8 --dp 2 --pp 2 --grad-acc-steps 4 --zero 3)
picotron_memory_estimate(tiny_moe 1 --model tiny-moe --seq-len 128 --micro-batch-size 8)
picotron_memory_estimate(tiny_moe_bf16_selective 1 --model tiny-moe --seq-len 128 --micro-batch-size 8 --dtype bf16 --recompute selective)
picotron_memory_estimate(tiny_moe_fp64_acc2 1 --model tiny-moe --seq-len 128 --micro-batch-size 4 --grad-acc-steps 2 --dtype fp64)
picotron_memory_estimate(tiny_moe_ep2 2 --model tiny-moe --num-experts-per-tok 4 --seq-len 128 --micro-batch-size 8 --dp 2 --ep 2)
picotron_memory_estimate(tiny_moe_full 1 --model tiny-moe --seq-len 128 --micro-batch-size 8 --recompute full)
picotron_memory_estimate(tiny_moe_tp2 2 --model tiny-moe --num-experts-per-tok 4 --seq-len 128 --micro-batch-size 8 --tp 2)

# Divergence: a non-finite loss or grad norm is reported on its step; after --max-bad-steps
# the run stops with one line and exit 3 (every rank alike: the loss and norm are global);
# the metrics stay valid JSON; sampling a diverged model does not abort.
set(DIVERGE --device cpu --steps 8 --seq-len 32 --lr 1e12 --warmup-steps 0 --threads 1)
list(JOIN DIVERGE " " DIVERGE_LINE)
picotron_cli_test(cli.diverged ${EXPECT_FAIL}
  "error: the run diverged: 2 steps had a non-finite loss or gradient norm \\(--max-bad-steps 2\\). the last finite loss was [0-9.]+ at step 1" --
  sh -c "${TRAIN} ${DIVERGE_LINE} --micro-batch-size 2 --max-bad-steps 2 --metrics-file ${CMAKE_CURRENT_BINARY_DIR}/diverged.jsonl \
|| (python3 -c \"[__import__('json').loads(l) for l in open('${CMAKE_CURRENT_BINARY_DIR}/diverged.jsonl')]\" && exit 3 || exit 0)")
picotron_mpi_cli_test(cli.mpi_diverged 2 "error: the run diverged" ${TRAIN} ${DIVERGE} --dp 2 --micro-batch-size 1)
add_test(NAME cli.diverged_samples COMMAND ${TRAIN} ${DIVERGE} --micro-batch-size 2 --data synthetic --max-bad-steps 100 --generate 2)
set_tests_properties(cli.diverged_samples PROPERTIES LABELS cli TIMEOUT 120 PASS_REGULAR_EXPRESSION "samples .*step +8/8|step +8/8.*samples")
picotron_cli_test(cli.bad_max_bad_steps ${EXPECT_FAIL} "error: --max-bad-steps must be >= 1, got 0" -- ${TRAIN} --max-bad-steps 0)

# Real text end to end (tests/scripts/text_data_check.py): scripts/prepare_data.py's round trip
# text -> ids -> text by document, training with --val-data --tokenizer --prompt, and the
# bad inputs (one line each, nothing left behind).
if(NO_TRANSFORMERS EQUAL 0)
  add_test(NAME data.text_end_to_end COMMAND "${PICOTRON_PYTHON}" ${CMAKE_SOURCE_DIR}/tests/scripts/text_data_check.py
    ${CMAKE_CURRENT_BINARY_DIR}/text_data ${TRAIN})
  set_tests_properties(data.text_end_to_end PROPERTIES LABELS cli TIMEOUT 180 ENVIRONMENT "OMP_NUM_THREADS=1"
    PASS_REGULAR_EXPRESSION "text data ok" FAIL_REGULAR_EXPRESSION "FAILED")
endif()

# --profile: LibTorch's profiler around steps 2-3 of a CPU run, on 2 ranks: each rank's
# Chrome trace holds train.cpp's phases and ATen operators; rank 0 prints its table.
add_test(NAME cli.mpi_profile COMMAND sh -c "rm -rf ${CMAKE_CURRENT_BINARY_DIR}/profile && ${MPIRUN_LINE} -np 2 ${TRAIN} \
--device cpu --dp 2 --steps 4 --seq-len 16 --micro-batch-size 2 --generate 0 --threads 1 \
--profile ${CMAKE_CURRENT_BINARY_DIR}/profile --profile-steps 2:3 > ${CMAKE_CURRENT_BINARY_DIR}/profile.log 2>&1 \
&& python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_profile.py ${CMAKE_CURRENT_BINARY_DIR}/profile 2 ${CMAKE_CURRENT_BINARY_DIR}/profile.log")
set_tests_properties(cli.mpi_profile PROPERTIES LABELS "cli;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "profile ok")
picotron_cli_test(cli.bad_profile_steps ${EXPECT_FAIL} "error: --profile-steps: '3' is not A:B" -- ${TRAIN} --profile p --profile-steps 3)
picotron_cli_test(cli.bad_profile_range ${EXPECT_FAIL} "error: --profile-steps 4:9 ends after the last step \\(--steps 5\\)" --
  ${TRAIN} --steps 5 --profile p --profile-steps 4:9)
picotron_cli_test(cli.bad_profile_steps_alone ${EXPECT_FAIL} "error: --profile-steps needs --profile DIR" -- ${TRAIN} --profile-steps 1:2)
picotron_cli_test(cli.bad_attention_aten ${EXPECT_FAIL} "error: --attention flash-mma is a kernel of kernels/: it needs --kernels fused" --
  ${TRAIN} --attention flash-mma)
picotron_cli_test(cli.bad_attention_name ${EXPECT_FAIL} "error: --attention must be sdpa, naive, flash-wmma or flash-mma, got 'flash3'" --
  ${TRAIN} --kernels fused --attention flash3)

# bench/vs_pytorch.sh's GPU mode, its commands printed (no GPU needed): the model shapes come
# from train --dry-run (read whole: a grep -m1 in a pipe killed train with SIGPIPE, and the
# script exited 141 under pipefail before measuring anything).
picotron_cli_test(cli.vs_pytorch_gpu_commands sh -c "DEVICE=cuda PRINT_ONLY=1 PROFILE=${CMAKE_CURRENT_BINARY_DIR}/vs_profile TRAIN=${TRAIN} ${CMAKE_SOURCE_DIR}/bench/vs_pytorch.sh")
set_tests_properties(cli.vs_pytorch_gpu_commands PROPERTIES PASS_REGULAR_EXPRESSION
  "== smollm-1.7b, B=4 .*picotron fused: [^\n]*--kernels fused --profile[^\n]*\nminimal eager: [^\n]*--hidden-size 2048 --intermediate-size 8192 --num-hidden-layers 24 --num-attention-heads 32 --num-key-value-heads 32 --vocab-size 49152.*minimal compile: [^\n]*--compile.*== smollm-360m, B=8.*transformers: [^\n]*--impl transformers")

# Every pipeline schedule x {fp8, tp, ep, recompute}: each projection is what the flags ask,
# read from the model (--explain's projection lines, runtime/observe/projections.h), or the
# combination is refused in one line (fp8 with a schedule that defers dW).
add_test(NAME cli.projections_every_schedule COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/projections_matrix.sh ${TRAIN})
set_tests_properties(cli.projections_every_schedule PROPERTIES LABELS "cli;mpi" TIMEOUT 300 PROCESSORS 2
  PASS_REGULAR_EXPRESSION "PROJECTIONS OK" FAIL_REGULAR_EXPRESSION "FAIL")

# --dry-run --pp-trace: the schedule's unit-time simulation as a trace (the picture in
# pipeline_parallel/README.md): each rank's boxes are its --dry-run program, the idle units
# the formula's (dualpipev and 1f1b, P = 4, m = 8).
add_test(NAME cli.pp_trace_simulated COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_simulated_trace.py ${TRAIN})
set_tests_properties(cli.pp_trace_simulated PROPERTIES LABELS cli TIMEOUT 60 PASS_REGULAR_EXPRESSION "simulated trace ok")
