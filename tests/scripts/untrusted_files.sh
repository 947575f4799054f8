#!/usr/bin/env bash
# shellcheck disable=SC2086  # one word per value
# untrusted_files.sh — a campaign against the files build/train reads and writes that
# tests/scripts/bad_inputs.sh (the flags) does not reach: outputs landing on inputs, planted
# symlinks, JSON from nobody (nested, FIFOs, dangling links), checkpoints edited or
# mixed, Hugging Face folders that lie, a data file changed under the run.
#
#   tests/scripts/untrusted_files.sh build/train [outdir]        (outdir default: /tmp/untrusted_files)
#
# Each case: a name, an expectation and a needle (an ERE), and a bash command.
#   fail   must exit non-zero with an "error:" line matching the needle, within 60 s
#   ok     must exit 0 (and pass the case's own check, if any)
# Results: correct, clear (fail as expected), unclear (non-zero, no matching line),
# crash (killed by a signal), hang (timeout), silent (a fail case that exited 0, or an ok
# case whose check failed), refused (an ok case that failed). OUTDIR/results.txt has one
# line a case, OUTDIR/logs/ each case's output. ONLY=REGEX runs some. About a minute.
set -u
[ $# -ge 1 ] || { echo "usage: $0 build/train [outdir]" >&2; exit 2; }
T=$(realpath "$1"); OUT=$(realpath -m "${2:-/tmp/untrusted_files}")
W=$OUT/work L=$OUT/logs
rm -rf "$W" "$L" && mkdir -p "$W" "$L" || exit 2
PY=${PYTHON:-python3}
H=$(dirname "$(realpath "$0")")/edit_safetensors_header.py  # a header field rewritten, the bytes kept
B="--device cpu --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1"  # the base flags (no --model)
NAMES=() EXPECTS=() NEEDLES=() CMDS=()
add() { NAMES+=("$1"); EXPECTS+=("$2"); NEEDLES+=("$3"); CMDS+=("$4"); }

# ---- fixtures ---------------------------------------------------------------------------
cd "$W" || exit 2
seq 1 3000 >corpus.txt
echo '{"input_ids": [[1, 2, 3, 4]]}' >batch.json
"$T" $B --steps 2 --export-hf hf >/dev/null 2>&1 || { echo "fixture: --export-hf failed"; exit 2; }
"$T" $B --steps 2 --save-dir ck >/dev/null 2>&1 || { echo "fixture: --save-dir failed"; exit 2; }
deep() { $PY -c "print('[' * 1000000 + ']' * 1000000)"; }
copy_ck() { rm -rf "$1" && cp -r ck "$1"; }
copy_hf() { rm -rf "$1" && cp -r hf "$1"; }
medit() {  # DIR PYTHON-EDIT: edit DIR/step-000002/manifest.json as json m
  $PY -c "import json,sys; p=sys.argv[1]; m=json.load(open(p)); $2; json.dump(m, open(p, 'w'))" "$1/step-000002/manifest.json"
}

# ---- outputs over inputs ----------------------------------------------------------------
add out_symlink_to_eval fail "--metrics-file .*is the --eval input" \
  "ln -sf batch.json link.json && $T $B --steps 1 --eval batch.json --metrics-file link.json"
add out_export_dot_init fail "--export-hf h1/\\.: is the --init-from input" \
  "copy_hf h1 && $T $B --steps 1 --init-from h1 --export-hf h1/."
add out_export_symlink_init fail "--export-hf .*: is the --init-from input" \
  "ln -sfn hf hf_link && $T $B --steps 1 --init-from hf --export-hf hf_link"
add out_params_into_init fail "--save-params hf/model.safetensors: is a file of the --init-from folder" \
  "$T $B --steps 1 --init-from hf --save-params hf/model.safetensors"
add out_trace_into_init fail "--memory-trace hf/config.json: is a file of the --init-from folder" \
  "$T $B --steps 1 --init-from hf --memory-trace hf/config.json"
add out_metrics_onto_checkpoint fail "--metrics-file .*manifest.json: is a file of the --resume folder" \
  "copy_ck c1 && $T $B --steps 4 --resume c1 --metrics-file c1/step-000002/manifest.json"
add out_metrics_onto_shard fail "--metrics-file shards/000000.bin: is a file of the --data folder" \
  "mkdir -p shards && $PY -c \"import struct; open('shards/000000.bin', 'wb').write(b'PICOTOK1' + struct.pack('<IIQ', 2, 0, 500) + bytes(1000))\" && $T $B --steps 1 --data shards --metrics-file shards/000000.bin"
add out_params_into_export fail "--save-params d1/model.safetensors: is the file model.safetensors that --export-hf .*d1 writes" \
  "mkdir -p d1 && $T $B --steps 1 --save-params d1/model.safetensors --export-hf d1"
add out_metrics_into_save_dir fail "--metrics-file d2/step-000001: is the file step-000001 that --save-dir .*d2 writes" \
  "mkdir -p d2 && $T $B --steps 1 --metrics-file d2/step-000001 --save-dir d2"
add out_new_file_beside_input ok "" \
  "$T $B --steps 1 --init-from hf --metrics-file hf/metrics.jsonl && test -s hf/metrics.jsonl && rm hf/metrics.jsonl"
add out_tmp_symlink_planted ok "" \
  "echo precious >victim && ln -sf victim m.jsonl.tmp && $T $B --steps 2 --metrics-file m.jsonl && grep -qx precious victim && grep -q '\"step\":2' m.jsonl"
add resume_in_place ok "" \
  "copy_ck c2 && $T $B --steps 4 --resume c2 --save-dir c2 && test -f c2/step-000004/manifest.json"

# ---- JSON inputs: nested, FIFOs, dangling links ---------------------------------------
add json_deep_eval fail "--eval .*deep.json: JSON nested deeper than 64" "deep >deep.json && $T $B --steps 1 --eval deep.json"
add json_deep_config fail "config.json.*JSON nested deeper than 64" "copy_hf h2 && deep >h2/config.json && $T $B --steps 0 --init-from h2"
add json_deep_index fail "index.json.*JSON nested deeper than 64" \
  "copy_hf h3 && deep >h3/model.safetensors.index.json && $T $B --steps 0 --init-from h3"
add json_deep_manifest fail "manifest.json.*JSON nested deeper than 64" \
  "copy_ck c3 && deep >c3/step-000002/manifest.json && $T $B --steps 4 --resume c3"
add json_deep_tokenizer fail "tokenizer.json.*JSON nested deeper than 64" \
  "mkdir -p tk && deep >tk/tokenizer.json && $T $B --steps 1 --tokenizer tk"
add json_huge_eval fail "--eval huge.json: [0-9]+ MiB, more than the 1 GiB a JSON input may have" \
  "truncate -s 2G huge.json && $T $B --steps 1 --eval huge.json; rc=\$?; rm -f huge.json; exit \$rc"
add json_fifo_config fail "config.json: not a regular file" "copy_hf h4 && rm h4/config.json && mkfifo h4/config.json && $T $B --steps 0 --init-from h4"
add json_fifo_eval fail "--eval fifo.json.*not a regular file" "mkfifo fifo.json && $T $B --steps 1 --eval fifo.json"
add json_dangling_eval fail "--eval .*a symbolic link to nowhere.json, which does not exist" \
  "ln -sfn nowhere.json dangling.json && $T $B --steps 1 --eval dangling.json"
add data_dangling fail "--data .*a symbolic link to nowhere.txt, which does not exist" \
  "ln -sfn nowhere.txt dangling.txt && $T $B --steps 1 --data dangling.txt"

# ---- checkpoints --------------------------------------------------------------------------
add ck_dtype_edited fail "checksum mismatch: the manifest was edited" \
  "copy_ck c4 && medit c4 \"[t.__setitem__('dtype', 'I32') for t in m['tensors'].values()]\" && $T $B --steps 4 --resume c4"
add ck_step_edited fail "checksum mismatch: the manifest was edited" "copy_ck c5 && medit c5 \"m['step'] = 1\" && $T $B --steps 4 --resume c5"
add ck_adam_edited fail "checksum mismatch: the manifest was edited" "copy_ck c6 && medit c6 \"m['adam_steps'] = 0\" && $T $B --steps 4 --resume c6"
add ck_renamed_dir fail "step 2 is not the directory's \\(step-000003\\)" \
  "copy_ck c7 && mv c7/step-000002 c7/step-000003 && $T $B --steps 6 --resume c7"
add ck_other_run_in_save_dir fail "--save-dir ck9: holds the checkpoints of another run" \
  "copy_ck ck9 && $T $B --steps 2 --save-dir ck9"
add ck_header_dtype fail "rank-00000.safetensors: tensor '.*' is I32 in the file's header, F32 in the manifest" \
  "copy_ck c8 && $PY $H c8/step-000002/rank-00000.safetensors first dtype '\"I32\"' && $T $B --steps 4 --resume c8"
add ck_header_negative fail "impossible shape \\[-1, -[0-9]+\\]: a negative dimension" \
  "copy_ck c10 && $PY $H c10/step-000002/rank-00000.safetensors first shape '[-1, -128]' && $T $B --steps 4 --resume c10"
add ck_check_bad_header fail "rank-00000.safetensors: tensor '.*' is I32 in the file's header" \
  "copy_ck c11 && $PY $H c11/step-000002/rank-00000.safetensors first dtype '\"I32\"' && $T --check-checkpoint c11"
add ck_check_ok ok "" "$T --check-checkpoint ck | grep -q 'step-000002: ok'"
add ck_two_runs_at_once fail "another run is saving checkpoints there" \
  "rm -rf cklock && ($T $B --steps 100000 --save-dir cklock --save-every 100000 >first.log 2>&1 & echo \$! >first.pid) ; for i in \$(seq 100); do grep -q '^step' first.log && break; sleep 0.1; done; $T $B --steps 2 --save-dir cklock; rc=\$?; kill \$(cat first.pid); exit \$rc"

# ---- Hugging Face folders ---------------------------------------------------------------------
hf_index() {  # DIR TARGET: a sharded index whose model.norm.weight lives in TARGET
  copy_hf "$1" && mv "$1/model.safetensors" "$1/shard.safetensors" &&
  $PY -c "import json,sys; from safetensors.torch import load_file; w=load_file(sys.argv[1]+'/shard.safetensors'); m={k: 'shard.safetensors' for k in w}; m['model.norm.weight']=sys.argv[2]; json.dump({'weight_map': m}, open(sys.argv[1]+'/model.safetensors.index.json','w'))" "$1" "$2"
}
hf_tensor() {  # DIR PYTHON-EDIT on w (the tensors)
  copy_hf "$1" && $PY -c "import sys, torch; from safetensors.torch import load_file, save_file; p=sys.argv[1]+'/model.safetensors'; w=load_file(p); $2; save_file(w, p, metadata={'format': 'pt'})" "$1"
}
add hf_index_parent fail "not a file of the folder" "hf_index h5 ../hf/model.safetensors && $T $B --steps 0 --init-from h5"
add hf_index_absolute fail "not a file of the folder" "hf_index h6 $W/hf/model.safetensors && $T $B --steps 0 --init-from h6"
add hf_lm_head_tied fail "'lm_head.weight' .*is not part of the model" \
  "hf_tensor h7 \"w['lm_head.weight'] = w['model.embed_tokens.weight'].clone()\" && $T $B --steps 0 --init-from h7"
add hf_extra_layer fail "'model.layers.7.input_layernorm.weight' .*is not part of the model" \
  "hf_tensor h8 \"w['model.layers.7.input_layernorm.weight'] = w['model.norm.weight'].clone()\" && $T $B --steps 0 --init-from h8"
add hf_nan fail "holds non-finite values" "hf_tensor h9 \"w['model.norm.weight'][0] = float('nan')\" && $T $B --steps 0 --init-from h9"
add hf_bad_rope_theta fail "config.json: rope_theta must be a positive number, got 0" \
  "copy_hf h10 && sed -i 's/\"rope_theta\": [0-9.e+]*/\"rope_theta\": 0/' h10/config.json && $T $B --steps 0 --init-from h10"

# ---- data changed under the run --------------------------------------------------------------
add data_shortened_mid_run fail "--data .*big.txt: the file changed under the run" \
  "seq 1 400000 >big.txt && ($T $B --steps 1000000 --log-every 1 --data big.txt >run.log 2>&1 & echo \$! >pid) && for i in \$(seq 300); do grep -q '^step' run.log && break; sleep 0.1; done; truncate -s 1000 big.txt; while kill -0 \$(cat pid) 2>/dev/null; do sleep 0.1; done; cat run.log; grep -q 'changed under the run' run.log && exit 1"

# ---- run ------------------------------------------------------------------------------------------
export -f copy_ck copy_hf medit deep hf_index hf_tensor
export T B PY W H
declare -A COUNT=()
: >"$OUT/results.txt"
for i in "${!NAMES[@]}"; do
  name=${NAMES[i]}
  [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]] && continue
  log=$L/$name.log
  (cd "$W" && timeout -s KILL 60 bash -c "${CMDS[i]}") >"$log" 2>&1 </dev/null
  rc=$?
  if [ $rc -eq 137 ] && ! grep -q "error:" "$log"; then result=hang
  elif [ $rc -gt 128 ] || grep -qE "Segmentation fault|Aborted|core dumped|terminate called" "$log"; then result=crash
  elif [ "${EXPECTS[i]}" = ok ]; then [ $rc -eq 0 ] && result=correct || result=refused
  elif [ $rc -eq 0 ]; then result=silent
  elif grep -E "error:" "$log" | grep -qE -- "${NEEDLES[i]}"; then result=clear
  else result=unclear
  fi
  COUNT[$result]=$((${COUNT[$result]:-0} + 1))
  printf '%-28s %-8s %s\n' "$name" "$result" "$(grep -m1 'error:' "$log" | cut -c1-150)" | tee -a "$OUT/results.txt"
done
summary=""
for k in correct clear unclear crash hang silent refused; do summary+="$k ${COUNT[$k]:-0}, "; done
echo "untrusted files: ${summary%, } (results: $OUT/results.txt)"
