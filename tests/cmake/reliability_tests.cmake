# Reliability: what a careless or hostile user, a full disk or a diverging run does to
# build/train. Every case: one line naming the flag or file, a non-zero exit, no hang,
# no partial file under a final name (runtime/output/output_file.h). Divergence: cli.diverged*.
set(R_FLAGS --device cpu --model tiny --steps 3 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1)
list(JOIN R_FLAGS " " R_FLAGS_LINE)  # the same, inside sh -c strings
function(picotron_reliability name regex)
  add_test(NAME reliability.${name} COMMAND ${EXPECT_FAIL} "${regex}" -- ${ARGN})
  set_tests_properties(reliability.${name} PROPERTIES LABELS "reliability;cli" TIMEOUT 60 ENVIRONMENT "${CLI_ENV}")
endfunction()
# Output paths, checked at start-up (before any training).
picotron_reliability(output_device "error: --save-params /dev/full: not a regular file" ${TRAIN} ${R_FLAGS} --save-params /dev/full)
picotron_reliability(output_directory "error: --metrics-file /tmp: is a directory" ${TRAIN} ${R_FLAGS} --metrics-file /tmp)
picotron_reliability(output_no_dir "error: --save-params /nonexistent/d/p.safetensors: directory /nonexistent/d does not exist"
  ${TRAIN} ${R_FLAGS} --save-params /nonexistent/d/p.safetensors)
picotron_reliability(output_empty "error: --metrics-file: empty value" sh -c "$<TARGET_FILE:train> --device cpu --metrics-file ''")
picotron_reliability(empty_number "error: --steps: empty value" sh -c "$<TARGET_FILE:train> --steps ''")
picotron_reliability(save_dir_is_file "error: --save-dir /etc/passwd: exists and is not a directory" ${TRAIN} ${R_FLAGS} --save-dir /etc/passwd)
picotron_reliability(output_is_data "error: --save-params .*corpus.txt: is the --data file, which it would overwrite" sh -c
  "echo 'some text to train on' > ${CMAKE_CURRENT_BINARY_DIR}/corpus.txt && $<TARGET_FILE:train> --device cpu --data ${CMAKE_CURRENT_BINARY_DIR}/corpus.txt --save-params ${CMAKE_CURRENT_BINARY_DIR}/corpus.txt")
picotron_mpi_cli_test(reliability.mpi_output_device 2 "\\[rank 1\\] error: --metrics-file /dev/full: not a regular file"
  ${TRAIN} ${R_FLAGS} --dp 2 --micro-batch-size 1 --metrics-file /dev/full)
# A full disk (a 256 KiB tmpfs; skipped without root): --save-params, --metrics-file mid-run
# and a checkpoint each fail with one line and leave no partial file.
add_test(NAME reliability.full_disk COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/full_disk.sh
  ${CMAKE_CURRENT_BINARY_DIR}/full_disk -- ${TRAIN} ${R_FLAGS})
set_tests_properties(reliability.full_disk PROPERTIES LABELS "reliability;cli" TIMEOUT 120 SKIP_RETURN_CODE 77
  PASS_REGULAR_EXPRESSION "full disk ok" FAIL_REGULAR_EXPRESSION "FAILED")
# Sizes: documented upper bounds, and the product of a step's sizes checked for overflow.
picotron_reliability(huge_grad_acc "error: --grad-acc-steps must be <= 1048576, got 4611686018427387905"
  ${TRAIN} --micro-batch-size 4 --grad-acc-steps 4611686018427387905)
picotron_reliability(huge_hidden "error: --hidden-size must be <= 65536, got 4294967296" ${TRAIN} --hidden-size 4294967296 --dry-run)
picotron_reliability(huge_vocab "error: --vocab-size must be <= 16777216" ${TRAIN} --vocab-size 9223372036854775807 --dry-run)
picotron_reliability(huge_threads "error: --threads must be <= 4096, got 2147483647" ${TRAIN} --threads 2147483647)
picotron_reliability(huge_step "error: --micro-batch-size x --grad-acc-steps x --dp x --seq-len = the tokens of a step must be <= 2\\^40"
  ${TRAIN} --micro-batch-size 1048576 --grad-acc-steps 1048576 --seq-len 2048)
# --data: a FIFO (or device) is refused instead of blocking; a directory entry x.bin that
# is a directory, and a PICOTOK1 header whose count x width overflows, are named.
set(RD ${CMAKE_CURRENT_BINARY_DIR}/reliability_data)
picotron_reliability(data_fifo "error: --data .*fifo.txt: not a regular file \\(a FIFO, device or socket\\)" sh -c
  "mkdir -p ${RD} && rm -f ${RD}/fifo.txt && mkfifo ${RD}/fifo.txt && $<TARGET_FILE:train> --device cpu --data ${RD}/fifo.txt")
# The same for the JSON inputs: opening a FIFO would block until a writer appears.
picotron_reliability(init_from_config_fifo "error: --init-from .*hf_fifo: .*hf_fifo/config.json: not a regular file" sh -c
  "rm -rf ${RD}/hf_fifo && mkdir -p ${RD}/hf_fifo && mkfifo ${RD}/hf_fifo/config.json && $<TARGET_FILE:train> --device cpu --init-from ${RD}/hf_fifo")
picotron_reliability(eval_fifo "error: --eval .*eval_fifo.json: not a regular file" sh -c
  "mkdir -p ${RD} && rm -f ${RD}/eval_fifo.json && mkfifo ${RD}/eval_fifo.json && $<TARGET_FILE:train> --device cpu --steps 1 --eval ${RD}/eval_fifo.json")
picotron_reliability(manifest_fifo "error: checkpoint .*step-000002: manifest.json: not a regular file" sh -c
  "rm -rf ${RD}/ck_fifo && $<TARGET_FILE:train> --device cpu --steps 2 --generate 0 --threads 1 --save-dir ${RD}/ck_fifo --save-every 2 >/dev/null && rm ${RD}/ck_fifo/step-000002/manifest.json && mkfifo ${RD}/ck_fifo/step-000002/manifest.json && $<TARGET_FILE:train> --device cpu --steps 4 --resume ${RD}/ck_fifo")
picotron_reliability(data_device "error: --data /dev/zero: not a regular file" ${TRAIN} --device cpu --data /dev/zero)
picotron_reliability(data_dir_entry_is_dir "error: --data .*shards/b.bin: is a directory, not a token file" sh -c
  "rm -rf ${RD}/shards && mkdir -p ${RD}/shards/b.bin && printf 'PICOTOK1\\002\\000\\000\\000\\000\\000\\000\\000\\004\\000\\000\\000\\000\\000\\000\\000abcdefgh' > ${RD}/shards/a.bin && $<TARGET_FILE:train> --device cpu --data ${RD}/shards")
picotron_reliability(data_header_overflow "error: --data .*overflow.bin: truncated or corrupt: header says 9223372036854775807 tokens" sh -c
  "mkdir -p ${RD} && printf 'PICOTOK1\\004\\000\\000\\000\\000\\000\\000\\000\\377\\377\\377\\377\\377\\377\\377\\177abcd' > ${RD}/overflow.bin && $<TARGET_FILE:train> --device cpu --data ${RD}/overflow.bin")
# Memory-mapped data: a 4 GiB sparse file trains with the peak resident memory of a 1 MiB one.
add_test(NAME reliability.data_mmap COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/data_mmap.py
  ${CMAKE_CURRENT_BINARY_DIR}/data_mmap ${TRAIN})
set_tests_properties(reliability.data_mmap PROPERTIES LABELS "reliability;cli" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "mmap ok" FAIL_REGULAR_EXPRESSION "FAILED")
# Memory before allocating: llama3-8b needs ~120 GiB of AdamW state on one CPU rank; the
# run is refused at once with both numbers, instead of dying in the allocator.
picotron_reliability(memory_check "error: this rank needs about [0-9.]+ GiB of memory .* but [0-9.]+ [GM]iB is available to it"
  ${TRAIN} --model llama3-8b --device cpu)
# The ranks compare their configurations at start (one all-gather of every setting's
# hash): a rank given another --hidden-size is named, on every rank, instead of crashing MPI.
set(R_DP2 ${TRAIN} ${R_FLAGS} --dp 2 --micro-batch-size 1)
add_test(NAME reliability.mpi_config_mismatch COMMAND ${EXPECT_FAIL}
  "\\[rank 0\\] error: the ranks were given different configurations: --hidden-size is '64' on rank 0 but not on rank 1"
  -- ${PICOTRON_MPIRUN} -np 1 ${R_DP2} --hidden-size 64 : -np 1 ${R_DP2} --hidden-size 32)
set_tests_properties(reliability.mpi_config_mismatch PROPERTIES LABELS "reliability;mpi" TIMEOUT 60
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION "\\[rank 1\\] error: the ranks were given different configurations: --hidden-size is '32'"
  FAIL_REGULAR_EXPRESSION "FAIL:")
# A rank stopped (SIGSTOP) before MPI_Init and 0.1 s after starting: the others end
# within --timeout-s with one line (training collectives: comm.* failure tests).
foreach(delay 0 0.1)
  add_test(NAME reliability.rank_stopped_after_${delay}s COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/rank_stopped.sh ${delay} 5 --
    ${PICOTRON_MPIRUN} -np 2 -- ${TRAIN} ${R_FLAGS} --dp 2 --steps 1000)
  set_tests_properties(reliability.rank_stopped_after_${delay}s PROPERTIES LABELS "reliability;mpi" TIMEOUT 90
    PASS_REGULAR_EXPRESSION "stopped rank ok" FAIL_REGULAR_EXPRESSION "FAILED" ENVIRONMENT "${PICOTRON_TEST_ENV}"
    PROCESSORS 2)
endforeach()
# An out-of-memory during training (an address-space limit below the activations of a
# batch that --dry-run puts at 6 GiB): one line naming the flags, not the allocator's text.
picotron_reliability(out_of_memory "error: out of memory on cpu: an allocation of .* failed. .*lower --micro-batch-size \\(64\\) or --seq-len \\(2048\\)"
  sh -c "ulimit -v 5000000 && $<TARGET_FILE:train> --device cpu --model tiny --seq-len 2048 --micro-batch-size 64 --steps 2 --generate 0 --threads 1")
# Flags: the malformed value is named with its flag (not an earlier flag whose value is a
# substring of it), real numbers are read whole, --help wins, one-dash long flags are named.
picotron_reliability(flag_named_exactly "error: --seq-len: '1.5' is not a valid value" ${TRAIN} --threads 1 --seq-len 1.5)
picotron_reliability(real_with_garbage "error: --lr: '1e-3x' is not a finite number" ${TRAIN} ${R_FLAGS} --lr 1e-3x)
picotron_reliability(one_dash_flag "error: -steps: long flags take two dashes \\(--steps\\)" ${TRAIN} -steps 3)
picotron_reliability(prompt_ids_trailing_comma "error: --prompt-ids: '1,' has an empty id" ${TRAIN} ${R_FLAGS} --prompt-ids 1,)
add_test(NAME reliability.help_wins COMMAND ${TRAIN} --steps abc --help)
set_tests_properties(reliability.help_wins PROPERTIES LABELS "reliability;cli" TIMEOUT 60 PASS_REGULAR_EXPRESSION "Usage:")
# Two outputs on one path, or an output on an input, are refused before training.
picotron_reliability(outputs_same_path "error: --save-params .*same.out: is also the --metrics-file path"
  ${TRAIN} ${R_FLAGS} --metrics-file ${RD}/same.out --save-params ${RD}/same.out)
picotron_reliability(output_is_eval_input "error: --eval-logits .*eval.json: is the --eval input, which it would overwrite" sh -c
  "mkdir -p ${RD} && echo '{\"input_ids\": [[1, 2, 3]]}' > ${RD}/eval.json && $<TARGET_FILE:train> ${R_FLAGS_LINE} --eval ${RD}/eval.json --eval-logits ${RD}/eval.json")
# --init-from: a config.json that is not an object, or a size that is not a positive integer.
picotron_reliability(hf_config_array "error: .*hf_array/config.json: not a JSON object" sh -c
  "mkdir -p ${RD}/hf_array && echo '[]' > ${RD}/hf_array/config.json && $<TARGET_FILE:train> --device cpu --init-from ${RD}/hf_array")
picotron_reliability(hf_config_float_size "error: .*hf_float/config.json: vocab_size must be a positive integer, got 1e\\+30" sh -c
  "mkdir -p ${RD}/hf_float && echo '{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1e30}' > ${RD}/hf_float/config.json && $<TARGET_FILE:train> --device cpu --init-from ${RD}/hf_float")
# A file-size limit (ulimit -f): EFBIG reported as one line, not death by SIGXFSZ.
# (PMIX_MCA_gds=hash: Open MPI's own shared-memory store would otherwise hit the limit in MPI_Init.)
picotron_reliability(file_size_limit "error: --save-params .*limit.safetensors: write failed: File too large" sh -c
  "mkdir -p ${RD} && ulimit -f 1 && PMIX_MCA_gds=hash $<TARGET_FILE:train> ${R_FLAGS_LINE} --save-params ${RD}/limit.safetensors")

# Outputs checked where the paths really lead (runtime/preflight/startup.cpp, output_problems):
# through a symlink, "dir/." and into an input folder; and a planted <output>.tmp symlink
# is removed, not followed (runtime/output/output_file.cpp).
set(RL ${CMAKE_CURRENT_BINARY_DIR}/reliability_links)
picotron_reliability(output_symlink_to_input "error: --metrics-file .*link.jsonl: is the --eval input, which it would overwrite" sh -c
  "rm -rf ${RL} && mkdir -p ${RL} && echo '{\"input_ids\": [[1, 2, 3]]}' > ${RL}/batch.json && ln -s batch.json ${RL}/link.jsonl && $<TARGET_FILE:train> ${R_FLAGS_LINE} --eval ${RL}/batch.json --metrics-file ${RL}/link.jsonl")
picotron_reliability(output_dot_is_input "error: --export-hf .*hf/\\.: is the --init-from input, which it would overwrite" sh -c
  "rm -rf ${RL}_hf && mkdir -p ${RL}_hf && $<TARGET_FILE:train> ${R_FLAGS_LINE} --export-hf ${RL}_hf/hf >/dev/null && $<TARGET_FILE:train> --device cpu --steps 1 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --init-from ${RL}_hf/hf --export-hf ${RL}_hf/hf/.")
picotron_reliability(output_file_of_input_folder "error: --save-params .*config.json: is a file of the --init-from folder" sh -c
  "rm -rf ${RL}_in && mkdir -p ${RL}_in && $<TARGET_FILE:train> ${R_FLAGS_LINE} --export-hf ${RL}_in/hf >/dev/null && $<TARGET_FILE:train> --device cpu --steps 1 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --init-from ${RL}_in/hf --save-params ${RL}_in/hf/config.json")
add_test(NAME reliability.tmp_symlink_not_followed COMMAND sh -c
  "rm -rf ${RL}_tmp && mkdir -p ${RL}_tmp && echo precious > ${RL}_tmp/victim && ln -s victim ${RL}_tmp/m.jsonl.tmp && $<TARGET_FILE:train> ${R_FLAGS_LINE} --metrics-file ${RL}_tmp/m.jsonl >/dev/null && grep -qx precious ${RL}_tmp/victim && test ! -L ${RL}_tmp/m.jsonl && grep -q '\"step\":3' ${RL}_tmp/m.jsonl && echo 'tmp symlink ok'")
set_tests_properties(reliability.tmp_symlink_not_followed PROPERTIES LABELS "reliability;cli" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "tmp symlink ok")
# Checkpoints: --resume D --save-dir D goes on in place, bit-exact with the run that did
# not stop (steps past 999,999: unit_tests "checkpoint names*").
add_test(NAME checkpoint.resume_in_place COMMAND sh -c
  "rm -rf ${RL}_ck && mkdir -p ${RL}_ck && $<TARGET_FILE:train> ${R_FLAGS_LINE} --steps 4 --save-params ${RL}_ck/straight.safetensors >/dev/null && $<TARGET_FILE:train> ${R_FLAGS_LINE} --steps 4 --stop-at-step 2 --save-dir ${RL}_ck/d >/dev/null && $<TARGET_FILE:train> ${R_FLAGS_LINE} --steps 4 --resume ${RL}_ck/d --save-dir ${RL}_ck/d --save-params ${RL}_ck/resumed.safetensors >/dev/null && test -f ${RL}_ck/d/step-000004/manifest.json && cmp ${RL}_ck/straight.safetensors ${RL}_ck/resumed.safetensors && echo 'resume in place ok'")
set_tests_properties(checkpoint.resume_in_place PROPERTIES LABELS "checkpoint;cli" TIMEOUT 120
  PASS_REGULAR_EXPRESSION "resume in place ok")
# JSON nested a million deep (config.json, an --eval batch): refused while it is read, one
# line, instead of a stack overflow when the bad value is printed or freed.
picotron_reliability(json_nested_deep "error: --eval .*deep.json: JSON nested deeper than 64 levels" sh -c
  "mkdir -p ${RL}_deep && python3 -c \"print('[' * 1000000 + ']' * 1000000)\" > ${RL}_deep/deep.json && $<TARGET_FILE:train> ${R_FLAGS_LINE} --eval ${RL}_deep/deep.json")
# A --data file shortened while training (tests/scripts/data_changed.sh): one line naming it, no SIGBUS.
add_test(NAME reliability.data_changed_under_the_run COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/data_changed.sh ${TRAIN}
  ${CMAKE_CURRENT_BINARY_DIR}/data_changed)
set_tests_properties(reliability.data_changed_under_the_run PROPERTIES LABELS "reliability;cli" TIMEOUT 120
  ENVIRONMENT "${CLI_ENV}" PASS_REGULAR_EXPRESSION "changed data ok" FAIL_REGULAR_EXPRESSION "FAILED")
# Two runs saving into one --save-dir at once (tests/scripts/save_dir_lock.sh): the second is one line.
add_test(NAME checkpoint.two_runs_one_save_dir COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/save_dir_lock.sh ${TRAIN}
  ${CMAKE_CURRENT_BINARY_DIR}/save_dir_lock)
set_tests_properties(checkpoint.two_runs_one_save_dir PROPERTIES LABELS "checkpoint;cli" TIMEOUT 120
  ENVIRONMENT "${CLI_ENV}" PASS_REGULAR_EXPRESSION "save dir lock ok" FAIL_REGULAR_EXPRESSION "FAILED")
# A dangling symlink as --data, and config.json values named as config.json's.
picotron_reliability(data_dangling_symlink "error: --data .*dangling.txt: a symbolic link to nowhere.txt, which does not exist" sh -c
  "mkdir -p ${RL}_dangling && ln -sfn nowhere.txt ${RL}_dangling/dangling.txt && $<TARGET_FILE:train> ${R_FLAGS_LINE} --data ${RL}_dangling/dangling.txt")
picotron_reliability(hf_config_bad_real "error: .*config.json: rope_theta must be a positive number, got 0" sh -c
  "rm -rf ${RL}_cfg && mkdir -p ${RL}_cfg && $<TARGET_FILE:train> ${R_FLAGS_LINE} --export-hf ${RL}_cfg/hf >/dev/null && sed -i 's/\"rope_theta\": [0-9.e+]*/\"rope_theta\": 0/' ${RL}_cfg/hf/config.json && $<TARGET_FILE:train> --device cpu --steps 0 --init-from ${RL}_cfg/hf")
# A --save-dir that holds another run's checkpoints: refused unless this run resumes from it.
picotron_reliability(save_dir_of_another_run "error: --save-dir .*other: holds the checkpoints of another run \\(newest step-000002\\)" sh -c
  "rm -rf ${RL}_other && $<TARGET_FILE:train> ${R_FLAGS_LINE} --steps 2 --save-dir ${RL}_other >/dev/null && $<TARGET_FILE:train> ${R_FLAGS_LINE} --steps 2 --save-dir ${RL}_other")
# The campaign against the files build/train reads and writes (tests/scripts/untrusted_files.sh,
# 39 cases, about a minute): 0 unclear, crash, hang, silent or refused results.
if(NO_TRANSFORMERS EQUAL 0)
  add_test(NAME reliability.untrusted_files_campaign COMMAND env PYTHON=${PICOTRON_PYTHON}
    ${CMAKE_SOURCE_DIR}/tests/scripts/untrusted_files.sh ${TRAIN} ${CMAKE_CURRENT_BINARY_DIR}/untrusted_files)
  set_tests_properties(reliability.untrusted_files_campaign PROPERTIES LABELS "reliability;cli" TIMEOUT 300
    ENVIRONMENT "${CLI_ENV}" PASS_REGULAR_EXPRESSION "unclear 0, crash 0, hang 0, silent 0, refused 0")
endif()
# scripts/resilient_run.sh told to stop (tests/scripts/resilient_run_signals.sh, 2 ranks under
# mpirun): SIGINT, SIGTERM and SIGHUP, each to its process group and to it alone, end it
# with 128 + the signal, no restart and no rank left (nor after mpirun is SIGKILLed); and
# what it does not restart: a refused flag, and a checkpoint that verifies but that
# --resume refuses (set aside after one try).
set(RESILIENT_FLAGS --device cpu --model tiny --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2
  --seq-len 32 --steps 1000 --warmup-steps 2 --log-every 1 --generate 0 --threads 1 --dp 2 --micro-batch-size 2 --dtype fp32)
foreach(part signals refusals)
  add_test(NAME reliability.resilient_run_${part} COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/resilient_run_signals.sh
    ${CMAKE_CURRENT_BINARY_DIR}/resilient_${part} ${part} -- ${TRAIN} ${RESILIENT_FLAGS})
  set_tests_properties(reliability.resilient_run_${part} PROPERTIES LABELS "reliability;mpi" TIMEOUT 120
    ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION "resilient ${part} ok"
    FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()
# scripts/resilient_run.sh on a save dir with a space, quotes and glob characters in its path:
# restarts from the newest good checkpoint; its argument errors are its own line and exit 2.
add_test(NAME reliability.resilient_paths COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/resilient_run_paths.sh $<TARGET_FILE:train>)
set_tests_properties(reliability.resilient_paths PROPERTIES LABELS "reliability" TIMEOUT 180
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PASS_REGULAR_EXPRESSION "RESILIENT PATHS OK" FAIL_REGULAR_EXPRESSION "FAILED|WRONG")
