#!/usr/bin/env bash
# bench/dp_step_time.sh [DP...] — step time of naive vs bucketed data parallelism on
# CPU under mpirun, from the same script run, for a model whose gradients are big
# enough that communication is visible (default: 8 layers, H=512, I=1536, V=256:
# 25.4M parameters, 101 MiB of fp32 gradients per all-reduce).
#
#   bench/dp_step_time.sh 2 4
#
# Prints the median step time (steps 3..N; the first steps warm up) per mode and the
# ratio naive / bucketed. Settings (environment): STEPS (default 8), TRAIN (default
# build/train of this repository).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-build/train}
[ -x "$TRAIN" ] || { echo "dp_step_time: error: $TRAIN: no such executable (build it with scripts/build.sh, or set TRAIN=path/to/train)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dps=("$@"); [ ${#dps[@]} -gt 0 ] || dps=(2 4)
steps=${STEPS:-8}
model=(--model tiny --hidden-size 512 --intermediate-size 1536 --num-hidden-layers 8 --num-attention-heads 8
       --num-key-value-heads 4 --seq-len 64 --micro-batch-size 1 --generate 0 --log-every 100 --device cpu)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median_step_s() {  # tokens_per_s -> seconds per step, median over steps 3..N
  # The metrics file is compact JSON: ..."tokens_per_s":4995.11,"mfu":... (no space after the colon).
  awk -v tok="$2" -F'"tokens_per_s": *' 'NR > 2 { split($2, a, ","); print tok / a[1] }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
printf "%-4s %-10s %-14s\n" dp mode "step time (s)"
for dp in "${dps[@]}"; do
  for mode in naive bucketed; do
    mpirun --oversubscribe --bind-to none -np "$dp" "$TRAIN" "${model[@]}" --dp "$dp" --dp-mode "$mode" \
      --steps "$steps" --metrics-file "$out/$dp-$mode.jsonl" >/dev/null
    t=$(median_step_s "$out/$dp-$mode.jsonl" $((64 * dp)))
    printf "%-4s %-10s %-14s\n" "$dp" "$mode" "$t"
    eval "t_${mode}=$t"
  done
  awk -v a="$t_naive" -v b="$t_bucketed" -v dp="$dp" 'BEGIN { printf "dp=%s: naive / bucketed = %.2f\n", dp, a / b }'
done
