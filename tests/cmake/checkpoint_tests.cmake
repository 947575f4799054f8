# Checkpoints (runtime/checkpoint/resume.h). Three kinds of case:
#  - bit-exact resume: k steps + save + resume + k steps on the same layout gives the bits
#    of 2k steps straight (losses, grad norms, every byte of the final parameters);
#  - the table: save on layout X, resume on layout Y, against Y's uninterrupted run within
#    the equivalence tolerance (fp64 1e-9). Each technique adds its line here. The global
#    batch is 4 sequences on every layout;
#  - bad checkpoints and killed saves: one line naming the file and the problem, non-zero
#    exit, on every rank.
set(CHECKPOINT_FLAGS --device cpu --model tiny --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2
    --seq-len 32 --steps 6 --warmup-steps 2 --lr 3e-3 --min-lr 3e-4 --grad-clip 0.5 --generate 0 --log-every 1
    --threads 1)
function(picotron_checkpoint name rtol save_np save_flags load_np load_flags)
  add_test(NAME checkpoint.${name} COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/checkpoint_resume.sh
    ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/${name} ${rtol} ${save_np} "${save_flags}" ${load_np} "${load_flags}"
    -- $<TARGET_FILE:train> ${CHECKPOINT_FLAGS} ${ARGN})
  set_tests_properties(checkpoint.${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "${PICOTRON_TEST_ENV}"
    LABELS "checkpoint;mpi" PROCESSORS 1 PASS_REGULAR_EXPRESSION "EQUIVALENT" FAIL_REGULAR_EXPRESSION "FAILED")
  set_property(GLOBAL APPEND PROPERTY PICOTRON_CHECKPOINT_CASES checkpoint.${name})  # (after the batches: it compares)
  picotron_batch_case(checkpoint "${save_np};${load_np}" whole ${CMAKE_SOURCE_DIR}/tests/scripts/checkpoint_resume.sh
    ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/${name} ${rtol} ${save_np} "${save_flags}" ${load_np} "${load_flags}"
    -- ${CHECKPOINT_FLAGS} ${ARGN})
endfunction()

# Bit-exact resume on the same layout: 1 rank and dp 2, fp32 and bf16 (and fp16: the loss
# scale travels; ZeRO: the slices).
set(ONE "--micro-batch-size 4")
set(DP2 "--dp 2 --micro-batch-size 2")
picotron_checkpoint(bitexact_1rank_fp32 exact 1 "${ONE}" 1 "${ONE}" --dtype fp32)
picotron_checkpoint(bitexact_1rank_bf16 exact 1 "${ONE}" 1 "${ONE}" --dtype bf16)
picotron_checkpoint(bitexact_1rank_fp16 exact 1 "${ONE}" 1 "${ONE}" --dtype fp16)
picotron_checkpoint(bitexact_dp2_fp32 exact 2 "${DP2}" 2 "${DP2}" --dtype fp32)
picotron_checkpoint(bitexact_dp2_bf16 exact 2 "${DP2}" 2 "${DP2}" --dtype bf16)
picotron_checkpoint(bitexact_dp2_zero1_bf16 exact 2 "${DP2} --zero 1" 2 "${DP2} --zero 1" --dtype bf16)
picotron_checkpoint(bitexact_dp2_zero3_fp32 exact 2 "${DP2} --zero 3" 2 "${DP2} --zero 3" --dtype fp32)

# The table: save on X, resume on Y (fp64, 1e-9).
#                    name             save ranks, layout                          resume ranks, layout
picotron_checkpoint(dp2_to_1          1e-9 2 "${DP2}"                             1 "${ONE}" --dtype fp64)
picotron_checkpoint(1_to_dp2          1e-9 1 "${ONE}"                             2 "${DP2}" --dtype fp64)
picotron_checkpoint(tp2_to_1          1e-9 2 "--tp 2 --micro-batch-size 4"        1 "${ONE}" --dtype fp64)
picotron_checkpoint(1_to_tp2_sp       1e-9 1 "${ONE}"                             2 "--tp 2 --sp --micro-batch-size 4" --dtype fp64)
picotron_checkpoint(pp2_to_1          1e-9 2 "--pp 2 --micro-batch-size 2 --grad-acc-steps 2" 1 "${ONE}" --dtype fp64)
picotron_checkpoint(cp2_to_1          1e-9 2 "--cp 2 --micro-batch-size 4"        1 "${ONE}" --dtype fp64)
picotron_checkpoint(zero1_dp2_to_1    1e-9 2 "${DP2} --zero 1"                    1 "${ONE}" --dtype fp64)
picotron_checkpoint(zero3_dp2_to_1    1e-9 2 "${DP2} --zero 3"                    1 "${ONE}" --dtype fp64)
picotron_checkpoint(1_to_zero3_dp2    1e-9 1 "${ONE}"                             2 "${DP2} --zero 3" --dtype fp64)
picotron_checkpoint(tp2_to_pp2        1e-9 2 "--tp 2 --micro-batch-size 4"        2 "--pp 2 --micro-batch-size 2 --grad-acc-steps 2" --dtype fp64)
# HSDP (zero/zero_groups.h): only replica 0 of each slice writes it. Saved as shard 2 x
# replicate 2, resumed as full ZeRO over 4 (and hpZ), on plain ZeRO-1 over 2, and back.
set(DP4 "--dp 4 --micro-batch-size 1")
picotron_checkpoint(hsdp_zero3_to_zero3_hpz 1e-9 4 "${DP4} --zero 3 --zero-shard 2" 4 "${DP4} --zero 3 --zero-hpz 2" --dtype fp64)
picotron_checkpoint(hsdp_zero1_to_zero1_dp2 1e-9 4 "${DP4} --zero 1 --zero-shard 2" 2 "${DP2} --zero 1" --dtype fp64)
picotron_checkpoint(zero2_dp2_to_hsdp_zero2 1e-9 2 "${DP2} --zero 2"                 4 "${DP4} --zero 2 --zero-shard 2" --dtype fp64)
# The 4D mesh: saved on dp2 x tp2 x pp2 (sp, ZeRO-1; ZeRO-3), resumed on the same layout
# (bit-exact), on tp2 x cp2 and on one rank (4 layers: a pipeline stage holds 2).
set(MESH8 "--dp 2 --tp 2 --pp 2 --sp --micro-batch-size 1 --grad-acc-steps 2")
picotron_checkpoint(bitexact_dp2_tp2_pp2  exact 8 "${MESH8} --zero 1"              8 "${MESH8} --zero 1" --dtype fp64 --num-hidden-layers 4)
picotron_checkpoint(dp2_tp2_pp2_to_tp2_cp2 1e-9 8 "${MESH8} --zero 1"              4 "--tp 2 --cp 2 --micro-batch-size 4" --dtype fp64 --num-hidden-layers 4)
picotron_checkpoint(dp2_tp2_pp2_to_1      1e-9 8 "${MESH8} --zero 1"              1 "${ONE}" --dtype fp64 --num-hidden-layers 4)
picotron_checkpoint(zero3_dp2_tp2_pp2_to_1 1e-9 8 "${MESH8} --zero 3"             1 "${ONE}" --dtype fp64 --num-hidden-layers 4)

# A mixture of experts: saved with its experts split over ep2, resumed on one rank, and
# back (the same micro-batches on both layouts: the balancing loss is per micro-batch).
set(MOE1 "--model tiny-moe --micro-batch-size 2 --grad-acc-steps 2")
set(MOE_EP2 "--model tiny-moe --dp 2 --ep 2 --micro-batch-size 2")
picotron_checkpoint(moe_ep2_to_1          1e-9 2 "${MOE_EP2}"                         1 "${MOE1}" --dtype fp64)
picotron_checkpoint(moe_1_to_ep2          1e-9 1 "${MOE1}"                            2 "${MOE_EP2}" --dtype fp64)
# ZeRO-1 with ep (dense state over cp x dp, the experts' over their replicas) to tp2+sp
# (experts whole on each tp rank), and one rank to ep2 x cp2 with ZeRO-1.
picotron_checkpoint(moe_ep2_zero1_to_tp2_sp 1e-9 2 "${MOE_EP2} --zero 1"             2 "${MOE1} --tp 2 --sp" --dtype fp64)
picotron_checkpoint(moe_1_to_ep2_cp2_zero1 1e-9 1 "${MOE1}"                           4 "${MOE_EP2} --cp 2 --zero 1" --dtype fp64)
picotron_checkpoint(moe_1_to_ep2_zero2    1e-9 1 "${MOE1}"                            2 "${MOE_EP2} --zero 2" --dtype fp64)
picotron_checkpoint(moe_ep2_zero3_to_1    1e-9 2 "${MOE_EP2} --zero 3"                1 "${MOE1}" --dtype fp64)
picotron_checkpoint(moe_ep2_pp2_zero1_to_1 1e-9 4 "${MOE_EP2} --pp 2 --zero 1 --grad-acc-steps 2" 1 "--model tiny-moe --micro-batch-size 2 --grad-acc-steps 4" --dtype fp64)

# A fixture checkpoint (1 rank, 2 steps), then broken copies of it.
set(CKPT ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/fixture)
list(JOIN CHECKPOINT_FLAGS " " CHECKPOINT_FLAGS_LINE)
set(CKPT_RUN "${TRAIN} ${CHECKPOINT_FLAGS_LINE} --micro-batch-size 4")
list(JOIN PICOTRON_MPIRUN " " PICOTRON_MPIRUN_LINE)
add_test(NAME checkpoint.fixture COMMAND sh -c "rm -rf ${CKPT} && ${TRAIN} --device cpu --model tiny --hidden-size 64 \
--intermediate-size 128 --num-hidden-layers 2 --seq-len 32 --steps 6 --warmup-steps 2 --generate 0 --threads 1 \
--micro-batch-size 4 --stop-at-step 2 --save-dir ${CKPT}")
set_tests_properties(checkpoint.fixture PROPERTIES FIXTURES_SETUP checkpoint_fixture LABELS checkpoint TIMEOUT 120
  PASS_REGULAR_EXPRESSION "saved checkpoint .*step-000002")
# break NAME REGEX SHELL-COMMAND (run in a fresh copy of the fixture, $B) -- extra train flags
function(picotron_bad_checkpoint name regex breakage)
  set(B ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/bad_${name})
  list(JOIN ARGN " " extra)
  string(REPLACE "$B" "${B}" breakage "${breakage}")
  add_test(NAME checkpoint.bad_${name} COMMAND ${EXPECT_FAIL} "${regex}" -- sh -c
    "rm -rf ${B} && cp -r ${CKPT} ${B} && ${breakage} && ${TRAIN} --device cpu --model tiny --hidden-size 64 \
--intermediate-size 128 --num-hidden-layers 2 --seq-len 32 --steps 6 --warmup-steps 2 --generate 0 --threads 1 \
--micro-batch-size 4 --resume ${B} ${extra}")
  set_tests_properties(checkpoint.bad_${name} PROPERTIES FIXTURES_REQUIRED checkpoint_fixture LABELS checkpoint TIMEOUT 60)
endfunction()
set(FILE0 "$B/step-000002/rank-00000.safetensors")
# A profile of steps this resumed run never executes is refused before its first step.
picotron_bad_checkpoint(profile_before_resume "error: --profile-steps 1:2: this run resumes after step 2" "true"
  --profile ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/profile_before_resume --profile-steps 1:2)
picotron_bad_checkpoint(missing_file "error: .*rank-00000.safetensors: no such file" "rm ${FILE0}")
picotron_bad_checkpoint(truncated "error: .*rank-00000.safetensors: tensor .*truncated: its data ends at byte" "truncate -s 100000 ${FILE0}")
picotron_bad_checkpoint(checksum "error: .*rank-00000.safetensors: checksum mismatch in tensor"
  "printf 'XXXXXXXX' | dd of=${FILE0} bs=1 seek=20000 conv=notrunc 2>/dev/null")
# The manifest carries its own checksum (manifest_fnv1a64): a tensor dropped from it, a
# dtype edited (F32 -> I32 resumed with losses of 1e11 before) or a counter changed is refused.
picotron_bad_checkpoint(manifest_lacks_tensor "error: .*manifest.json: corrupt: checksum mismatch: the manifest was edited"
  "python3 -c \"import json,sys; p=sys.argv[1]; m=json.load(open(p)); del m['tensors']['model.norm.weight/exp_avg']; json.dump(m, open(p, 'w'))\" $B/step-000002/manifest.json")
picotron_bad_checkpoint(manifest_dtype_edited "error: .*manifest.json: corrupt: checksum mismatch: the manifest was edited"
  "python3 -c \"import json,sys; p=sys.argv[1]; m=json.load(open(p)); t=m['tensors']['model.norm.weight/exp_avg']; t['dtype']='I32'; json.dump(m, open(p, 'w'))\" $B/step-000002/manifest.json")
picotron_bad_checkpoint(manifest_step_edited "error: .*manifest.json: corrupt: checksum mismatch: the manifest was edited"
  "python3 -c \"import json,sys; p=sys.argv[1]; m=json.load(open(p)); m['adam_steps']=1; json.dump(m, open(p, 'w'))\" $B/step-000002/manifest.json")
# A manifest whose config disagrees with its own tensors, resealed (tests/scripts/reseal_manifest.py):
# --check-checkpoint said "ok" and --resume refused it; now the check names it too. The
# resealed but unedited manifest passes (the reseal is picotron's own checksum).
add_test(NAME checkpoint.check_resealed_passes COMMAND sh -c "rm -rf ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/resealed && \
cp -r ${CKPT} ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/resealed && python3 ${CMAKE_SOURCE_DIR}/tests/scripts/reseal_manifest.py \
${CMAKE_CURRENT_BINARY_DIR}/checkpoint/resealed/step-000002/manifest.json pass && \
${TRAIN} --check-checkpoint ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/resealed/step-000002")
set_tests_properties(checkpoint.check_resealed_passes PROPERTIES FIXTURES_REQUIRED checkpoint_fixture LABELS checkpoint
  TIMEOUT 60 PASS_REGULAR_EXPRESSION "step-000002: ok")
add_test(NAME checkpoint.check_config_disagrees COMMAND ${EXPECT_FAIL}
  "error: checkpoint .*manifest.json: tensor '.*' is \\[.*\\], but the config's model \\(hidden_size 32, .* makes it \\[" -- sh -c
  "rm -rf ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/config_lies && cp -r ${CKPT} ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/config_lies && \
python3 ${CMAKE_SOURCE_DIR}/tests/scripts/reseal_manifest.py ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/config_lies/step-000002/manifest.json \
'm[\"config\"][\"hidden_size\"] = 32' && ${TRAIN} --check-checkpoint ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/config_lies/step-000002")
set_tests_properties(checkpoint.check_config_disagrees PROPERTIES FIXTURES_REQUIRED checkpoint_fixture LABELS checkpoint TIMEOUT 60)
# A rank file's header that disagrees with the manifest, the bytes untouched (so their
# checksum still matches): an I32 over F32 bytes resumed and trained at loss 1.3e11 before
# (runtime/checkpoint/checkpoint_check.h); impossible shapes are named before LibTorch sees them.
set(EDIT_HEADER "python3 ${CMAKE_SOURCE_DIR}/tests/scripts/edit_safetensors_header.py ${FILE0}")
picotron_bad_checkpoint(header_dtype "error: checkpoint .*step-000002: rank-00000.safetensors: tensor '.*' is I32 in the file's header, F32 in the manifest"
  "${EDIT_HEADER} first dtype '\"I32\"'")
picotron_bad_checkpoint(header_shape "error: checkpoint .*step-000002: rank-00000.safetensors: tensor '.*' is \\[2, [0-9]+\\] in the file's header, \\[[0-9]+\\] in the manifest"
  "python3 -c \"import json,struct,sys; p=sys.argv[1]; d=open(p,'rb').read(); n=struct.unpack('<Q',d[:8])[0]; h=json.loads(d[8:8+n]); k=[x for x in h if x!='__metadata__'][0]; s=h[k]['shape'][0]; assert s%2==0; h[k]['shape']=[2,s//2]; t=json.dumps(h).encode(); t+=b' '*((8-len(t)%8)%8); open(p,'wb').write(struct.pack('<Q',len(t))+t+d[8+n:])\" ${FILE0}")
picotron_bad_checkpoint(header_negative_dim "error: .*rank-00000.safetensors: tensor '.*': impossible shape \\[-1, -[0-9]+\\]: a negative dimension"
  "${EDIT_HEADER} first shape '[-1, -128]'")
picotron_bad_checkpoint(header_overflow "error: .*rank-00000.safetensors: tensor '.*': impossible shape \\[4611686018427387904, 4\\]: more than 2\\^63"
  "${EDIT_HEADER} first shape '[4611686018427387904, 4]'")
picotron_bad_checkpoint(corrupt_manifest "error: .*manifest.json: corrupt" "echo '{not json' > $B/step-000002/manifest.json")
picotron_bad_checkpoint(model_shape "error: checkpoint .* has hidden_size 64, the flags ask for 32" "true" --hidden-size 32)
picotron_bad_checkpoint(vocab "error: checkpoint .* has vocab_size 256, the flags ask for 300" "true" --vocab-size 300)
picotron_bad_checkpoint(nothing_left "error: --resume .* is at step 2, and this run stops at step 2" "true" --stop-at-step 2)
picotron_bad_checkpoint(no_checkpoint "error: --resume .*: no checkpoint there" "rm -rf $B/step-000002")
picotron_cli_test(checkpoint.bad_no_dir ${EXPECT_FAIL} "error: --resume /nonexistent/ckpt: no such directory" --
  ${TRAIN} --device cpu --resume /nonexistent/ckpt)
picotron_cli_test(checkpoint.bad_save_every ${EXPECT_FAIL} "error: --save-every 5 needs --save-dir" -- ${TRAIN} --save-every 5)
# A different learning rate is allowed, with a warning line.
add_test(NAME checkpoint.warn_lr COMMAND sh -c "rm -rf ${CKPT}_lr && cp -r ${CKPT} ${CKPT}_lr && ${CKPT_RUN} --lr 1e-3 --resume ${CKPT}_lr")
set_tests_properties(checkpoint.warn_lr PROPERTIES FIXTURES_REQUIRED checkpoint_fixture LABELS checkpoint TIMEOUT 60
  PASS_REGULAR_EXPRESSION "warning: the checkpoint was trained with lr 0.003, this run uses 0.001.*resumed from .*step 2 of 6.*step +6/6")
# Under mpirun every rank names the problem (rank 1's ZeRO slice is missing: rank 0 needs it too).
add_test(NAME checkpoint.mpi_bad_missing_rank_file COMMAND ${EXPECT_FAIL} "\\[rank 1\\] error: .*rank-00001.safetensors: no such file" --
  sh -c "rm -rf ${CKPT}_dp2 && ${PICOTRON_MPIRUN_LINE} -np 2 ${CKPT_RUN} --dp 2 --zero 1 --micro-batch-size 2 --stop-at-step 2 --save-dir ${CKPT}_dp2 >/dev/null \
&& rm ${CKPT}_dp2/step-000002/rank-00001.safetensors && ${PICOTRON_MPIRUN_LINE} -np 2 ${CKPT_RUN} --dp 2 --zero 1 --micro-batch-size 2 --resume ${CKPT}_dp2")
set_tests_properties(checkpoint.mpi_bad_missing_rank_file PROPERTIES LABELS "checkpoint;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 FAIL_REGULAR_EXPRESSION "FAIL:" PASS_REGULAR_EXPRESSION "\\[rank 0\\] error: .*rank-00001.safetensors: no such file")
# Keep the newest K; a rank killed while it writes step 3 leaves step 2 loadable.
add_test(NAME checkpoint.keep_and_killed_save COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/checkpoint_killed_save.sh
  ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/killed -- ${TRAIN} ${CHECKPOINT_FLAGS} --dp 2 --micro-batch-size 2)
set_tests_properties(checkpoint.keep_and_killed_save PROPERTIES LABELS "checkpoint;mpi" TIMEOUT 180
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION "killed save ok" FAIL_REGULAR_EXPRESSION "FAILED")

# --check-checkpoint: a checkpoint verified without training (what it holds, or what is wrong).
picotron_cli_test(checkpoint.check_ok sh -c "${TRAIN} --check-checkpoint ${CKPT}")
set_tests_properties(checkpoint.check_ok PROPERTIES FIXTURES_REQUIRED checkpoint_fixture LABELS "checkpoint;cli"
  PASS_REGULAR_EXPRESSION "checkpoint .*step-000002: ok \\([0-9]+ tensors in 1 file\\(s\\) match the manifest.*step 2 of 6.*mesh: dp 1, tp 1.*model: tiny \\(hidden_size 64.*rank-00000.safetensors +[0-9.]+ MiB")
set(B ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/check_bad)
add_test(NAME checkpoint.check_bad COMMAND ${EXPECT_FAIL} "error: checkpoint .*rank-00000.safetensors: tensor .* is I32 in the file's header, F32 in the manifest" --
  sh -c "rm -rf ${B} && cp -r ${CKPT} ${B} && python3 ${CMAKE_SOURCE_DIR}/tests/scripts/edit_safetensors_header.py ${B}/step-000002/rank-00000.safetensors first dtype '\"I32\"' && ${TRAIN} --check-checkpoint ${B}")
set_tests_properties(checkpoint.check_bad PROPERTIES FIXTURES_REQUIRED checkpoint_fixture LABELS "checkpoint;cli" TIMEOUT 60)
# Under mpirun a damage only rank 1 reads and hashes (its tp slices in rank-00001) is named
# on rank 0 too (problem_of_any_rank), and both stop before any step.
add_test(NAME checkpoint.mpi_bad_header_every_rank COMMAND ${EXPECT_FAIL} "\\[rank 0\\] error: .*rank-00001.safetensors: checksum mismatch in tensor" --
  sh -c "rm -rf ${CKPT}_tp2 && ${PICOTRON_MPIRUN_LINE} -np 2 ${CKPT_RUN} --tp 2 --stop-at-step 2 --save-dir ${CKPT}_tp2 >/dev/null \
&& printf 'XXXXXXXX' | dd of=${CKPT}_tp2/step-000002/rank-00001.safetensors bs=1 seek=200000 conv=notrunc 2>/dev/null && ${PICOTRON_MPIRUN_LINE} -np 2 ${CKPT_RUN} --tp 2 --resume ${CKPT}_tp2")
set_tests_properties(checkpoint.mpi_bad_header_every_rank PROPERTIES LABELS "checkpoint;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 FAIL_REGULAR_EXPRESSION "FAIL:" PASS_REGULAR_EXPRESSION "\\[rank 1\\] error: .*rank-00001.safetensors: checksum mismatch in tensor")

# --async-save (runtime/checkpoint/async_save.h): saved every step in the background, resumed
# bit-exactly; a rank killed during a background write leaves the previous checkpoint.
picotron_checkpoint(bitexact_async_dp2_fp32 exact 2 "${DP2} --async-save --save-every 1" 2 "${DP2}" --dtype fp32)
add_test(NAME checkpoint.async_killed_save COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/checkpoint_killed_save.sh
  ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/async_killed -- ${TRAIN} ${CHECKPOINT_FLAGS} --dp 2 --micro-batch-size 2 --async-save)
set_tests_properties(checkpoint.async_killed_save PROPERTIES LABELS "checkpoint;mpi" TIMEOUT 180
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION "killed save ok" FAIL_REGULAR_EXPRESSION "FAILED")

# scripts/resilient_run.sh: three ranks killed at random steps (the seed is printed), three
# restarts from the newest checkpoint that verifies; the final parameters are bit-exact.
add_test(NAME checkpoint.resilient_run_three_kills COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/resilient_run_test.sh
  ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/resilient -- ${TRAIN} --device cpu --model tiny --hidden-size 64
  --intermediate-size 128 --num-hidden-layers 2 --seq-len 128 --steps 24 --warmup-steps 2 --lr 3e-3 --grad-clip 0.5
  --generate 0 --threads 1 --dp 2 --micro-batch-size 16 --dtype fp32)
set_tests_properties(checkpoint.resilient_run_three_kills PROPERTIES LABELS "checkpoint;mpi;reliability" TIMEOUT 120
  ENVIRONMENT "${PICOTRON_TEST_ENV}" PROCESSORS 2 PASS_REGULAR_EXPRESSION "resilient run ok" FAIL_REGULAR_EXPRESSION "FAILED")
# A background write holds the state of its step, not of the steps that train meanwhile:
# the files of checkpoints written in the background equal those written in the step, byte
# for byte (step 2's write overlaps step 3's update; the test hook PICOTRON_FAULT_SLOW_SAVE_MS
# delays each background write by 300 ms, as a slow disk would, so that the steps after it
# run their updates first).
set(ASYNC ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/async_bytes)
add_test(NAME checkpoint.async_same_bytes COMMAND sh -c "rm -rf ${ASYNC} && \
${PICOTRON_MPIRUN_LINE} -np 2 ${CKPT_RUN} --dp 2 --zero 1 --micro-batch-size 2 --stop-at-step 4 --save-every 1 --keep-checkpoints 4 --save-dir ${ASYNC}/sync >/dev/null && \
PICOTRON_FAULT_SLOW_SAVE_MS=300 ${PICOTRON_MPIRUN_LINE} -np 2 -x PICOTRON_FAULT_SLOW_SAVE_MS ${CKPT_RUN} --dp 2 --zero 1 --micro-batch-size 2 --stop-at-step 4 --save-every 1 --keep-checkpoints 4 --save-dir ${ASYNC}/async --async-save && \
for s in 1 2 3 4; do for r in 0 1; do f=step-00000$s/rank-0000$r.safetensors; cmp ${ASYNC}/sync/$f ${ASYNC}/async/$f || exit 1; done; done && echo 'async bytes equal'")
set_tests_properties(checkpoint.async_same_bytes PROPERTIES LABELS "checkpoint;mpi" TIMEOUT 120 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "async bytes equal")

# The cases' runs in a few launches (tests/scripts/equivalence_batch.sh, as the equivalence cases'):
# the uninterrupted and the saving runs of every case, one mpirun per rank count
# (checkpoint.batch.saves_npN), then the resumed ones (checkpoint.batch.resumes_npN); each
# case then compares its own files, or runs what the batches did not make.
picotron_batches(checkpoint ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/cases.tsv KINDS shared NAMES saves_np)
get_property(saves GLOBAL PROPERTY PICOTRON_BATCH_TESTS_checkpoint_shared)
picotron_batches(checkpoint ${CMAKE_CURRENT_BINARY_DIR}/checkpoint/cases.tsv KINDS resume NAMES resumes_np AFTER ${saves})
get_property(resumes GLOBAL PROPERTY PICOTRON_BATCH_TESTS_checkpoint_resume)
get_property(cases GLOBAL PROPERTY PICOTRON_CHECKPOINT_CASES)
set_tests_properties(${cases} PROPERTIES DEPENDS "${saves};${resumes}")
