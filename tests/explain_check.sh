#!/usr/bin/env bash
# explain_check.sh TRAIN: --explain narrates what it claims (runtime/explain.h).
# Two runs on CPU: tp2 with sequence parallelism, and pp2 x cp2. Each must print, on rank 0,
# what every rank holds and every rank's communications with group, shapes and the line
# that issued them. (That --explain leaves the numbers alone: equivalence.explain_*.)
set -uo pipefail
train=$1
mpirun=${MPIEXEC:-mpirun}
flags=(--device cpu --threads 1 --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2 --seq-len 32
       --micro-batch-size 2 --generate 0 --steps 2 --explain)
fail=0
expect() {  # LOG PATTERN WHAT
  if grep -qE -- "$2" "$1"; then echo "ok: $3"; else echo "MISSING: $3 (pattern: $2)"; fail=1; fi
}
log=$(mktemp); trap 'rm -f "$log"' EXIT

$mpirun --oversubscribe --bind-to none -np 2 "$train" "${flags[@]}" --tp 2 --sp >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" '^==== --explain: step 1 on dp 1 x pp 1 x cp 1 x tp 2 ====' "a title naming the step and the mesh"
expect "$log" 'query heads 2-3 of 4, key/value heads 1 of 2; MLP columns 64-127 of 128' "rank 1's heads and MLP columns"
expect "$log" 'vocabulary rows 128-255 of 256' "rank 1's vocabulary rows"
expect "$log" 'between blocks \(sequence parallel\) its local positions 16-31' "rank 1's sequence-parallel chunk"
expect "$log" '^---- rank 1 \(dp 0, pp 0, cp 0, tp 1\) ----' "rank 1's narration"
expect "$log" '^  all_gather over tp \{0,1\}: \[16, 2, 64\] -> \[32, 2, 64\] fp32, 4,096 elements' "sp's all-gather with shapes"
expect "$log" 'at tensor_parallel/tensor_parallel.cpp:[0-9]+ \(forward\):  return reduce_scatter_seq' "the line that issued it"
expect "$log" '^  all_reduce max over tp \{0,1\}: \[64\] fp32' "the vocabulary-parallel loss's max"
expect "$log" '^micro-batch 1 of 1: backward' "the phases of the step"
expect "$log" '^  \[layer 1, MLP\] forward out of down_proj: the partial outputs \(g, sequence parallel\)' "a layer's block, named"
expect "$log" '^  \[layer 0, attention\] backward into q/k/v: the input.s gradient \(f, sequence parallel\)' "a backward communication, named"
expect "$log" '^  \[loss\] vocabulary-parallel cross-entropy' "the loss's communications, named"
n=$(grep -c '^==== --explain' "$log"); [ "$n" = 1 ] && echo "ok: one step narrated" || { echo "narrated $n steps, not 1"; fail=1; }

$mpirun --oversubscribe --bind-to none -np 4 "$train" "${flags[@]}" --pp 2 --cp 2 --grad-acc-steps 2 --zero 1 >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" 'decoder layers 1 of 2, final norm and head \(pipeline stage 1 of 2\)' "a stage's layers"
expect "$log" 'sequence positions 8-23 of 32 \(cp 1 of 2, zigzag\)' "a cp rank's positions"
expect "$log" 'ZeRO-1: AdamW moments and master weights of slice 1 of 2' "a ZeRO slice"
expect "$log" '^  send to pp rank 1 \(world 2\): \[2, 16, 64\] fp32' "a pipeline send"
expect "$log" '^  \[pipeline\] send activation a1 of micro-batch 1 \(0-based; stage 0 -> 1\)' "a pipeline message's kind and micro-batch"
expect "$log" '^  \[pipeline\] .*receive gradient g0 of micro-batch 0 \(0-based; stage 1 -> 0\)' "a gradient coming back"
expect "$log" 'at context_parallel/context_parallel.cpp:[0-9]+' "the ring step's line"
expect "$log" '^  reduce_scatter avg over cp_dp \{0,1\}' "ZeRO's reduce-scatter"
expect "$log" '^  all_reduce sum over embed \{0,2\}' "the tied embedding's group"
[ $fail = 0 ] && echo "EXPLAIN OK" || { cat "$log"; echo FAILED; exit 1; }
