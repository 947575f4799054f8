#!/usr/bin/env bash
# check_zero_memory.sh TRAIN MPIRUN...: the measured peak memory of a CPU training run
# falls stage by stage, --zero 0 > 1 > 2 > 3 (dp 2; a 55M-parameter model of 32 thin
# layers, so that a layer, which ZeRO-3 gathers whole, is small next to the model).
#
# "mem" is the step's peak of CPU tensor memory, counted exactly by picotron's wrapper
# around LibTorch's CPU allocator (runtime/observe/measure.h).
set -euo pipefail
train=$1; shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--model tiny --hidden-size 384 --intermediate-size 1152 --num-hidden-layers 32 --num-attention-heads 6
       --num-key-value-heads 2 --device cpu --dtype fp32 --seq-len 16 --micro-batch-size 1 --steps 2 --generate 0
       --threads 1 --dp-bucket-mb 2 --dp 2)
previous=0
for stage in 0 1 2 3; do
  if ! "$@" -np 2 "$train" "${model[@]}" --zero "$stage" \
       --metrics-file "$work/zero$stage.jsonl" > "$work/zero$stage.log" 2>&1; then
    cat "$work/zero$stage.log"; echo "FAILED: the --zero $stage run"; exit 1
  fi
  peak=$(tail -n 1 "$work/zero$stage.jsonl" | sed -E 's/.*"peak_mem_bytes": *([0-9]+).*/\1/')
  echo "zero $stage: peak memory of rank 0 $((peak / 1048576)) MiB"
  if [ "$stage" -gt 0 ] && [ "$peak" -ge "$previous" ]; then
    echo "FAILED: --zero $stage does not use less memory than --zero $((stage - 1))"; exit 1
  fi
  previous=$peak
done
echo "peak memory falls stage by stage"
