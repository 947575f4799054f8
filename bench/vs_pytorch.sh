#!/usr/bin/env bash
# bench/vs_pytorch.sh — training throughput of picotron (build/train) against the same
# training written in PyTorch eager Python (bench/vs_pytorch.py), on the CPU, fp32:
# same LLaMA shape, batch, threads, data (uniform random tokens), AdamW and clipping.
#
#   bench/vs_pytorch.sh                          # 3 rounds x 30 steps, 2 threads, B=4, S=128
#   ROUNDS=5 STEPS=50 THREADS=1 bench/vs_pytorch.sh
#
# The two programs run ALTERNATELY (picotron, pytorch, picotron, ...), ROUNDS rounds, so
# a change of machine load hits both. Each run's figure is the median tokens/s of its
# steps after the first SKIP (warm-up); the result is the median over rounds of the
# per-round ratio picotron / pytorch (> 1: picotron is faster). Step times include the
# batch, forward, backward, clipping and the AdamW step on both sides. Each round line
# ends with the 1-minute load average: on a machine shared with other work (a build),
# threads wait for each other and the figures mean little; use an idle machine.
#
# Settings (environment):
#   TRAIN    the C++ trainer (default build/train of this repository)
#   PYTHON   a python that can `import torch` (default: $PICOTRON_CACHE/torch-2.11.0
#            venv, its -cpu twin, then python3)
#   ROUNDS 3   STEPS 30   SKIP 5   THREADS 2   BATCH 4   SEQ 128
#   model shape (default 11,654,208 parameters: SmolLM-135M's width and heads, 4 layers,
#   byte vocabulary): HIDDEN 576  INTER 1152  LAYERS 4  HEADS 9  KV_HEADS 3  VOCAB 256
#
# GPU mode, DEVICE=cuda: the comparison of the GPU speed issue, in one call, on one GPU, bf16,
# seq 2048, synthetic data, STEPS (20) steps each, one run per program (ROUNDS 1):
#   picotron aten      build/train --kernels aten
#   picotron fused     build/train --kernels fused (attention through SDPA)
#   minimal eager      bench/vs_pytorch.py --impl minimal: a LLaMA as a student writes it for
#                      a GPU (one GEMM for q/k/v and for gate/up, SDPA, autocast, fused AdamW)
#   minimal compile    the same under torch.compile
#   transformers       LlamaForCausalLM (sdpa), autocast, fused AdamW
# for each CASES entry MODEL:MICRO_BATCH (default "smollm-1.7b:4 smollm-360m:8"), then a
# table: tokens/s (median of the steps after SKIP), MFU (picotron's FLOPs per token and
# peak: the same model on every side), peak memory, and the ratios to minimal eager and
# minimal compile. PROFILE=DIR adds --profile DIR to the first case's picotron fused run
# (steps 3:4, before the measured ones). PRINT_ONLY=1 prints the commands and runs none
# (it needs no GPU: ctest -R cli.vs_pytorch_gpu_commands checks it on the CPU).
#   DEVICE=cuda bench/vs_pytorch.sh          # scripts/gpu_check.sh --long runs this
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "vs_pytorch: error: $*" >&2; exit 1; }

TRAIN=${TRAIN:-build/train}
DEVICE=${DEVICE:-cpu}
[ "$DEVICE" = cpu ] || [ "$DEVICE" = cuda ] || die "DEVICE must be cpu or cuda, got '$DEVICE'"
if [ "$DEVICE" = cuda ]; then
  SEQ=${SEQ:-2048} STEPS=${STEPS:-20}  # (the micro-batch comes with each of CASES)
fi
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-30} SKIP=${SKIP:-5} THREADS=${THREADS:-2} BATCH=${BATCH:-4} SEQ=${SEQ:-128}
for v in ROUNDS STEPS THREADS BATCH SEQ; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $SKIP =~ ^[0-9]+$ ]] || die "SKIP must be a non-negative integer, got '$SKIP'"
[ "$STEPS" -gt "$SKIP" ] || die "STEPS ($STEPS) must be larger than SKIP ($SKIP): no step would be measured"
[ -x "$TRAIN" ] || die "$TRAIN: no such executable (build it with scripts/build.sh, or set TRAIN=path/to/train)"

# A python that can import torch: $PYTHON, else the venv scripts/setup.sh makes, else python3.
cache=${PICOTRON_CACHE:-$HOME/.cache/picotron}
if [ -n "${PYTHON:-}" ]; then
  "$PYTHON" -c 'import torch' 2>/dev/null || die "PYTHON=$PYTHON cannot 'import torch'"
else
  for c in "$cache/torch-2.11.0/bin/python" "$cache/torch-2.11.0-cpu/bin/python" python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' 2>/dev/null; then PYTHON=$c; break; fi
  done
  [ -n "${PYTHON:-}" ] || die "no python that can 'import torch' (tried $cache/torch-2.11.0{,-cpu}/bin/python, python3); set PYTHON=..."
fi

common=(--threads "$THREADS" --steps "$STEPS" --warmup-steps 1 --seq-len "$SEQ" --micro-batch-size "$BATCH")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME LOG CMD...: run a program, its output to LOG; on failure show the end of LOG.
run() {
  local name=$1 log=$2; shift 2
  "$@" >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "$name failed: $*"; }
}
params() { awk '/total parameters/ { print $3; exit }' "$1"; }
# Median tokens/s of a metrics file (JSON lines), over the steps after the first SKIP.
median_tps() {
  "$PYTHON" -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(round(statistics.median(r["tokens_per_s"] for r in rows if r["step"] > int(sys.argv[2]))))' "$1" "$SKIP"
}

# compare LABEL: time cpp=(...) against py=(...), ROUNDS rounds, alternately.
compare() {
  local label=$1 n_cpp n_py r a b ratio load
  # The same model on both sides: compare the exact parameter counts before timing anything.
  run picotron "$tmp/cpp-dry.log" "${cpp[@]}" --dry-run
  run pytorch "$tmp/py-dry.log" "${py[@]}" --dry-run
  n_cpp=$(params "$tmp/cpp-dry.log"); n_py=$(params "$tmp/py-dry.log")
  [ -n "$n_cpp" ] && [ "$n_cpp" = "$n_py" ] || die "parameter counts differ: picotron ${n_cpp:-?}, pytorch ${n_py:-?}"
  echo "model: $label -> $n_cpp parameters (both sides)"
  echo "batch $BATCH x $SEQ tokens, $THREADS thread(s), $precision, $STEPS steps per run (median of steps > $SKIP)"
  echo "picotron: ${cpp[*]:0:6} ..."
  echo "pytorch:  $PYTHON ($("$PYTHON" -c 'import warnings; warnings.simplefilter("ignore"); import torch; print(torch.__version__)' 2>/dev/null))"
  ratios=() cpp_tps=() py_tps=()
  for r in $(seq 1 "$ROUNDS"); do
    run picotron "$tmp/cpp-$r.log" "${cpp[@]}" --metrics-file "$tmp/cpp-$r.jsonl"
    [ "$(params "$tmp/cpp-$r.log")" = "$n_cpp" ] || die "picotron run $r: unexpected parameter count"
    run pytorch "$tmp/py-$r.log" "${py[@]}" --metrics-file "$tmp/py-$r.jsonl"
    a=$(median_tps "$tmp/cpp-$r.jsonl"); b=$(median_tps "$tmp/py-$r.jsonl")
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
    cpp_tps+=("$a"); py_tps+=("$b"); ratios+=("$ratio")
    load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")  # 1-min load (ours included): other work skews the round
    printf "round %d/%d: picotron %8d tok/s | pytorch %8d tok/s | ratio %.2f | load %s\n" "$r" "$ROUNDS" "$a" "$b" "$ratio" "$load"
  done
  printf "picotron median: %.0f tok/s | pytorch median: %.0f tok/s\n" "$(median "${cpp_tps[@]}")" "$(median "${py_tps[@]}")"
  printf "tokens/s ratio (picotron / pytorch): %.2f (median of %d rounds)\n" "$(median "${ratios[@]}")" "$ROUNDS"
}
median() { printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

if [ "$DEVICE" = cpu ]; then
  shape=(--hidden-size "${HIDDEN:-576}" --intermediate-size "${INTER:-1152}" --num-hidden-layers "${LAYERS:-4}"
         --num-attention-heads "${HEADS:-9}" --num-key-value-heads "${KV_HEADS:-3}" --vocab-size "${VOCAB:-256}")
  precision=fp32
  cpp=("$TRAIN" --device cpu --dtype fp32 --data synthetic "${common[@]}" --generate 0 --log-every 1000 "${shape[@]}")
  py=("$PYTHON" bench/vs_pytorch.py "${common[@]}" "${shape[@]}")
  compare "${shape[*]}"
  exit 0
fi
# ---- GPU mode -----------------------------------------------------------------------------
CASES=${CASES:-"smollm-1.7b:4 smollm-360m:8"}
ROUNDS=${GPU_ROUNDS:-1}
# gpu_row LABEL METRICS LOG: "tokens/s peak_GiB mfu" of one run (mfu "-" for the python side)
gpu_row() {
  "$PYTHON" - "$1" "$SKIP" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
after = [r for r in rows if r["step"] > int(sys.argv[2])] or rows
tps = statistics.median(r["tokens_per_s"] for r in after)
peak = max(r.get("peak_mem_bytes", 0) for r in rows) / 2**30
mfu = [r["mfu"] for r in after if r.get("mfu") is not None and r["mfu"] >= 0]
print(f"{tps:.0f} {peak:.2f} {statistics.median(mfu) if mfu else '-'}")
PY
}
first_case=1
for case in $CASES; do
  model=${case%%:*} batch=${case#*:}
  [[ $batch =~ ^[1-9][0-9]*$ ]] && [ "$model" != "$case" ] || die "CASES entries are MODEL:MICRO_BATCH, got '$case'"
  # "model smollm-360m: H=960 I=2560 L=32 nH=15 nKV=5 Hd=64 V=49152 rope_theta=10000 tied=yes"
  # (the whole output first, then the line: grep -m1 in a pipe would close it early, and
  # train, killed by SIGPIPE, would fail the pipeline under pipefail)
  dry=$("$TRAIN" --model "$model" --dry-run 2>&1) || die "$TRAIN --model $model --dry-run failed: $(tail -n 1 <<<"$dry")"
  line=$(grep -m1 "^model " <<<"$dry") || die "$TRAIN --model $model --dry-run printed no model line"
  field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
  shape=(--hidden-size "$(field H)" --intermediate-size "$(field I)" --num-hidden-layers "$(field L)"
         --num-attention-heads "$(field nH)" --num-key-value-heads "$(field nKV)" --vocab-size "$(field V)"
         --rope-theta "$(field rope_theta)")
  gpu_common=(--steps "$STEPS" --warmup-steps 1 --seq-len "$SEQ" --micro-batch-size "$batch")
  cpp=("$TRAIN" --device cuda --dtype bf16 --model "$model" --data synthetic "${gpu_common[@]}" --generate 0 --log-every 1000)
  py=("$PYTHON" bench/vs_pytorch.py --device cuda "${gpu_common[@]}" "${shape[@]}")
  profile=()
  [ -n "${PROFILE:-}" ] && [ $first_case -eq 1 ] && profile=(--profile "$PROFILE" --profile-steps 3:4)
  first_case=0
  names=("picotron aten" "picotron fused" "minimal eager" "minimal compile" "transformers")
  commands=("${cpp[*]} --kernels aten" "${cpp[*]} --kernels fused ${profile[*]}" "${py[*]} --impl minimal"
            "${py[*]} --impl minimal --compile" "${py[*]} --impl transformers")
  echo "== $model, B=$batch x S=$SEQ, bf16, $STEPS steps (median after step $SKIP), $ROUNDS round(s)"
  if [ -n "${PRINT_ONLY:-}" ]; then
    for i in "${!names[@]}"; do echo "${names[$i]}: ${commands[$i]}"; done
    continue
  fi
  declare -A tps=() peak=() mfu=()
  params=""
  for r in $(seq 1 "$ROUNDS"); do
    for i in "${!names[@]}"; do
      log=$tmp/run-$r-$i.log metrics=$tmp/run-$r-$i.jsonl
      # shellcheck disable=SC2086  # a command line of words
      if ! ${commands[$i]} --metrics-file "$metrics" >"$log" 2>&1; then
        echo "${names[$i]}: failed (last lines below)"; tail -n 5 "$log"; continue
      fi
      n=$(params "$log")
      [ -z "$params" ] && params=$n
      [ "$n" = "$params" ] || die "${names[$i]}: $n parameters, picotron aten had $params: not the same model"
      read -r t p m <<<"$(gpu_row "$metrics")"
      tps[$i]=$t peak[$i]=$p
      [ "$m" != "-" ] && mfu[$i]=$m
    done
  done
  # MFU of the python programs: the same FLOPs per token as picotron's, so MFU scales with tokens/s.
  per_tps=""
  for i in 0 1; do [ -n "${mfu[$i]:-}" ] && [ -n "${tps[$i]:-}" ] && per_tps=$(awk -v m="${mfu[$i]}" -v t="${tps[$i]}" 'BEGIN { print m / t }'); done
  printf "%-16s %10s %7s %10s %9s %11s\n" program "tokens/s" MFU "peak" "vs eager" "vs compile"
  for i in "${!names[@]}"; do
    [ -n "${tps[$i]:-}" ] || { printf "%-16s %10s\n" "${names[$i]}" failed; continue; }
    m=${mfu[$i]:-}; [ -z "$m" ] && [ -n "$per_tps" ] && m=$(awk -v p="$per_tps" -v t="${tps[$i]}" 'BEGIN { print p * t }')
    ratio() { [ -n "${tps[$1]:-}" ] && awk -v a="${tps[$i]}" -v b="${tps[$1]}" 'BEGIN { printf "%.2fx", a / b }' || echo "-"; }
    printf "%-16s %10s %7s %7s GiB %9s %11s\n" "${names[$i]}" "$(printf "%'d" "${tps[$i]}")" \
      "$([ -n "$m" ] && awk -v m="$m" 'BEGIN { printf "%.1f%%", 100 * m }' || echo -)" "${peak[$i]}" "$(ratio 2)" "$(ratio 3)"
  done
  unset tps peak mfu
done
