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
# GPU mode, DEVICE=cuda: for each preset of MODELS (default "smollm-360m smollm-1.7b"), at
# SEQ 2048, BATCH 2, bf16: build/train --device cuda --dtype bf16 --kernels KERNELS (default
# aten; fused for the CUDA kernels) against the model as the transformers library builds
# it (sdpa attention, bf16 autocast over fp32 weights, fused AdamW: bench/vs_pytorch.py),
# the same GPU, alternately, in the same call; the shape comes from picotron's --dry-run.
#   DEVICE=cuda bench/vs_pytorch.sh          # scripts/gpu_check.sh --long runs this
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "vs_pytorch: error: $*" >&2; exit 1; }

TRAIN=${TRAIN:-build/train}
DEVICE=${DEVICE:-cpu}
[ "$DEVICE" = cpu ] || [ "$DEVICE" = cuda ] || die "DEVICE must be cpu or cuda, got '$DEVICE'"
if [ "$DEVICE" = cuda ]; then
  BATCH=${BATCH:-2} SEQ=${SEQ:-2048} MODELS=${MODELS:-"smollm-360m smollm-1.7b"} KERNELS=${KERNELS:-aten}
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
precision="bf16 (picotron --kernels $KERNELS; pytorch: transformers' LlamaForCausalLM, sdpa, autocast, fused AdamW)"
for model in $MODELS; do
  # "model smollm-360m: H=960 I=2560 L=32 nH=15 nKV=5 Hd=64 V=49152 rope_theta=10000 tied=yes"
  line=$("$TRAIN" --model "$model" --dry-run 2>&1 | grep -m1 "^model ") || die "$TRAIN --model $model --dry-run printed no model line"
  field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
  shape=(--hidden-size "$(field H)" --intermediate-size "$(field I)" --num-hidden-layers "$(field L)"
         --num-attention-heads "$(field nH)" --num-key-value-heads "$(field nKV)" --vocab-size "$(field V)"
         --rope-theta "$(field rope_theta)")
  cpp=("$TRAIN" --device cuda --dtype bf16 --kernels "$KERNELS" --model "$model" --data synthetic "${common[@]}"
       --generate 0 --log-every 1000)
  py=("$PYTHON" bench/vs_pytorch.py --device cuda "${common[@]}" "${shape[@]}")
  compare "$model (${shape[*]})"
done
