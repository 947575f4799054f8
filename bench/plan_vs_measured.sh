#!/usr/bin/env bash
# bench/plan_vs_measured.sh [WORKDIR] — the planner's predictions (build/train --plan-layout,
# runtime/planner/layout_search.h) against real CPU runs of the same layouts: the peak memory of
# rank 0 and the step time, on one small model with the same global batch (1,024 tokens).
#
#   flock /tmp/picotron-build.lock bench/plan_vs_measured.sh
#
# The hardware constants the cost model needs are taken once, never per layout:
#   --peak-tflops      from the 1-rank run: the planner's compute time for that layout at
#                      1 TFLOP/s over the measured step (so the 1-rank prediction is exact)
#   --intra-node-gbps  build/bench/bench_comm's busbw of a 16 MiB all-reduce on 2 ranks
#                      (the size of the gradients); LINK_GBPS=x skips the measurement
#   --gpu-memory 24    this machine's memory; --gpus-per-node 8: every rank on one node
# Each layout runs STEPS (default 10) steps with --threads 1; the step time is the median of
# steps 3..STEPS (steps 1-2 warm up), the memory rank 0's peak (--metrics-file). Then
# bench/plan_vs_measured.py prints the table, the Spearman rank correlation of the step
# times and the largest memory error. About a minute on 2 cores; 4-rank layouts
# oversubscribe them. Settings (environment): STEPS, TRAIN (default build/train).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-build/train}
[ -x "$TRAIN" ] || { echo "plan_vs_measured: error: $TRAIN: no such executable (scripts/build.sh --target train)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
steps=${STEPS:-10}
work=${1:-$(mktemp -d)}
mkdir -p "$work"
run() { mpirun --oversubscribe --bind-to none -np "$@"; }

model=(--model tiny --hidden-size 256 --intermediate-size 768 --num-hidden-layers 4 --seq-len 256 --dtype fp32
       --device cpu)
# name | ranks | layout flags; every one 1,024 tokens a step (micro-batch x grad-acc x dp x 256)
layouts=(
  "1 rank|1|--micro-batch-size 4"
  "dp2|2|--dp 2 --micro-batch-size 2"
  "dp2 zero1|2|--dp 2 --zero 1 --micro-batch-size 2"
  "dp2 zero3|2|--dp 2 --zero 3 --micro-batch-size 2"
  "dp2 recompute full|2|--dp 2 --recompute full --micro-batch-size 2"
  "tp2|2|--tp 2 --micro-batch-size 4"
  "tp2 sp|2|--tp 2 --sp --micro-batch-size 4"
  "pp2 1f1b m4|2|--pp 2 --pp-schedule 1f1b --micro-batch-size 1 --grad-acc-steps 4"
  "cp2|2|--cp 2 --micro-batch-size 4"
  "dp2 x tp2 (4 ranks)|4|--dp 2 --tp 2 --micro-batch-size 2"
)

measure() {  # i ranks flags...: steps of the layout, its metrics in $work/i.jsonl
  local i=$1 n=$2; shift 2
  if ! run "$n" "$TRAIN" "${model[@]}" "$@" --threads 1 --steps "$steps" --generate 0 --log-every 100 \
       --metrics-file "$work/$i.jsonl" > "$work/$i.log" 2>&1; then
    cat "$work/$i.log" >&2; echo "plan_vs_measured: error: layout $i failed" >&2; exit 1
  fi
}
predict() {  # i ranks flags...: the planner's prediction for the layout in $work/i.plan
  local i=$1 n=$2; shift 2
  run "$n" "$TRAIN" --plan-layout "${model[@]}" "$@" --gpu-memory 24 --gpus-per-node 8 \
    --peak-tflops "$peak" --intra-node-gbps "$link" > "$work/$i.plan"
}
step_ms() {  # metrics file -> the median step time in ms over steps 3..N (1,024 tokens a step)
  awk -F'"tokens_per_s": *' 'NR > 2 { split($2, a, ","); print 1024e3 / a[1] }' "$1" | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

echo "load average before: $(cut -d" " -f1-3 /proc/loadavg) (other work on the 2 cores skews the timings)"
# ---- calibration, once: the link, then the peak from the 1-rank run ----
if [ -n "${LINK_GBPS:-}" ]; then
  link=$LINK_GBPS
  echo "link: $link GB/s (LINK_GBPS)"
else
  bench=$(dirname "$TRAIN")/bench/bench_comm
  [ -x "$bench" ] || { echo "plan_vs_measured: error: $bench missing (scripts/build.sh --target bench_comm, or set LINK_GBPS)" >&2; exit 1; }
  run 2 "$bench" --min-bytes 16M --max-bytes 16M --iters 10 --latency-iters 2 > "$work/bench_comm.txt"
  link=$(awk '!/^#/ && NF == 5 { print $5 }' "$work/bench_comm.txt")
  echo "link: $link GB/s, bench_comm busbw of a 16 MiB all-reduce on 2 ranks"
fi
IFS='|' read -r _ n flags <<< "${layouts[0]}"
measure 0 "$n" $flags
t1=$(step_ms "$work/0.jsonl")
peak=1 predict 0 "$n" $flags  # compute at 1 TFLOP/s, in ms
p1=$(sed -n 's/^  step \([0-9.]*\) ms = compute.*/\1/p' "$work/0.plan")
peak=$(awk -v p="$p1" -v t="$t1" 'BEGIN { printf "%.5g", p / t }')
echo "peak: $peak TFLOP/s = the 1-rank prediction at 1 TFLOP/s ($p1 ms) / its measured step ($t1 ms)"

# ---- every layout: predicted, then measured ----
: > "$work/layouts.tsv"
for i in "${!layouts[@]}"; do
  IFS='|' read -r name n flags <<< "${layouts[$i]}"
  predict "$i" "$n" $flags
  [ "$i" = 0 ] || measure "$i" "$n" $flags
  printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$name" "$n" "$flags" "$(step_ms "$work/$i.jsonl")" >> "$work/layouts.tsv"
  echo "  measured $name" >&2
done
python3 bench/plan_vs_measured.py "$work" --peak-tflops "$peak" --link-gbps "$link"
