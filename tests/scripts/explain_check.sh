#!/usr/bin/env bash
# explain_check.sh TRAIN: --explain narrates what it claims (runtime/observe/explain.h).
# Runs on CPU: tp2 with sequence parallelism, pp2 x cp2, Ulysses (cp2), the hybrid (cp4 =
# all-to-alls of 2 x rings of 2), ZeRO-3 hybrid-sharded with hpZ (dp8) and DualPipeV (pp2). Each must print, on rank 0, what every
# rank holds and every rank's communications with group, shapes and the line that issued
# them, each titled with what it carries. (That --explain leaves the numbers alone:
# equivalence.explain_*.)
set -uo pipefail
train=$1
mpirun=${MPIEXEC:-mpirun}
flags=(--device cpu --threads 1 --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2 --seq-len 32
       --micro-batch-size 2 --generate 0 --steps 2 --explain)
fail=0
expect() {  # LOG PATTERN WHAT
  if grep -qE -- "$2" "$1"; then echo "ok: $3"; else echo "MISSING: $3 (pattern: $2)"; fail=1; fi
}
# Every communication of the narration titled: the line above it says what it carries.
every_titled() {  # LOG WHAT
  local n
  n=$(awk '/^  (all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|barrier|send|recv) / {
             if (prev !~ /^  [^ ]/ || prev ~ /^  (all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|barrier|send|recv) /) n++ }
           { prev = $0 } END { print n + 0 }' "$1")
  if [ "$n" = 0 ]; then echo "ok: $2: every communication titled"; else echo "UNTITLED: $2: $n communication(s) without a title"; fail=1; fi
}
log=$(mktemp); trap 'rm -f "$log"' EXIT

$mpirun --oversubscribe --bind-to none -np 2 "$train" "${flags[@]}" --tp 2 --sp >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" '^==== --explain: step 1 on dp 1 x pp 1 x cp 1 x tp 2 ====' "a title naming the step and the mesh"
expect "$log" 'query heads 2-3 of 4, key/value heads 1 of 2; MLP columns 64-127 of 128' "rank 1's heads and MLP columns"
expect "$log" 'vocabulary rows 128-255 of 256' "rank 1's vocabulary rows"
expect "$log" 'between blocks \(sequence parallel\) its local positions 16-31' "rank 1's sequence-parallel chunk"
expect "$log" '^---- rank 1 \(dp 0, pp 0, cp 0, tp 1\) ----' "rank 1's narration"
expect "$log" '^  all_gather over tp \{0,1\}: \[16, 2, 64\] -> \[32, 2, 64\] fp32, 4,096 elements' "sp's all-gather with shapes"
expect "$log" 'at tensor_parallel/tensor_parallel.cpp:[0-9]+ \(reduce_scatter_seq\):  tp.reduce_scatter' "the line that issued it"
expect "$log" '^  all_reduce max over tp \{0,1\}: \[64\] fp32' "the vocabulary-parallel loss's max"
expect "$log" '^micro-batch 1 of 1: backward' "the phases of the step"
expect "$log" '^  \[layer 1, MLP, forward\] sequence parallelism: partial results summed, each tp rank keeping its chunk' "a layer's block, named"
expect "$log" '^  \[layer 0, attention, backward\] sequence parallelism: partial results summed' "a backward communication, named"
expect "$log" '^  \[head, forward\] the loss: each row.s largest logit over the vocabulary shards' "the loss's communications, named"
every_titled "$log" "tp2 with sp"
n=$(grep -c '^==== --explain' "$log"); [ "$n" = 1 ] && echo "ok: one step narrated" || { echo "narrated $n steps, not 1"; fail=1; }

$mpirun --oversubscribe --bind-to none -np 4 "$train" "${flags[@]}" --pp 2 --cp 2 --grad-acc-steps 2 --zero 1 >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" 'decoder layers 1 of 2, final norm and head \(pipeline stage 1 of 2\)' "a stage's layers"
expect "$log" 'sequence positions 8-23 of 32 \(cp 1 of 2, zigzag\)' "a cp rank's positions"
expect "$log" 'ZeRO-1: AdamW moments and master weights of slice 1 of 2' "a ZeRO slice"
expect "$log" '^  send to pp rank 1 \(world 2\): \[2, 16, 64\] fp32' "a pipeline send"
expect "$log" '^  \[micro-batch 1, stage 0 -> 1\] pipeline: an activation$' "a pipeline message's kind and micro-batch"
expect "$log" '^  \[micro-batch 0, stage 1 -> 0\] pipeline: an activation.s gradient$' "a gradient coming back"
expect "$log" '^  the loss of the step, from the stage that computed it$' "the pipeline's loss broadcast, titled"
every_titled "$log" "pp2 x cp2 with ZeRO-1"
expect "$log" 'at context_parallel/context_parallel.cpp:[0-9]+' "the ring step's line"
expect "$log" '^  reduce_scatter avg over cp_dp \{0,1\}' "ZeRO's reduce-scatter"
expect "$log" '^  all_reduce sum over embed \{0,2\}' "the tied embedding's group"
# Every all-to-all of Ulysses titled (no holes): tensor, direction, layer, pass.
titled() {  # LOG TITLE_PATTERN COMM_PATTERN WHAT: each line matching COMM_PATTERN comes right after a TITLE_PATTERN line
  local n_comm n_titled
  n_comm=$(grep -cE -- "$3" "$1")
  n_titled=$(grep -B1 -E -- "$3" "$1" | grep -cE -- "$2")
  if [ "$n_comm" -gt 0 ] && [ "$n_comm" = "$n_titled" ]; then echo "ok: $4 ($n_comm, every one titled)"
  else echo "UNTITLED: $4 ($n_titled of $n_comm titled)"; fail=1; fi
}
$mpirun --oversubscribe --bind-to none -np 2 "$train" "${flags[@]}" --cp 2 --cp-mode ulysses >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" '^  \[layer 1, attention, forward\] Ulysses, sequence -> heads: q, k or v' "a forward all-to-all: its layer, tensors and direction"
expect "$log" '^  \[layer 0, attention, forward\] Ulysses, heads -> sequence: o, the attention output' "the output's way back"
expect "$log" '^  \[layer 1, attention, backward\] Ulysses, sequence -> heads: dO, the attention output.s gradient' "the output's gradient"
expect "$log" '^  \[layer 0, attention, backward\] Ulysses, heads -> sequence: dq, dk or dv' "a backward all-to-all, named backward"
titled "$log" '^  \[layer [0-9]+, attention, (forward|backward)\] Ulysses, ' '^  all_to_all over cp \{0,1\}' "Ulysses' all-to-alls"
every_titled "$log" "Ulysses"

$mpirun --oversubscribe --bind-to none -np 4 "$train" "${flags[@]}" --cp 4 --cp-mode hybrid --cp-ulysses 2 >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" '^cp all-to-all groups \(cp_a2a, 2 ranks\): \[0 1\] \[2 3\]$' "the hybrid's all-to-all groups as world ranks"
expect "$log" '^cp rings \(cp_ring, 2 ranks\): \[0 2\] \[1 3\]$' "the hybrid's rings as world ranks"
expect "$log" '^  all_to_all over cp_a2a \{2,3\}: ' "an all-to-all of the hybrid over its world ranks"
expect "$log" '^  send to cp_ring rank 1 \(world 3\)' "a ring hop to its world rank"
expect "$log" '^  \[layer 0, attention, forward\] ring attention: the K and V block held, one hop on' "a hop, titled"
expect "$log" '^  \[layer 1, attention, backward\] ring attention: the dK, dV summed so far' "a backward hop, titled backward"
titled "$log" '^  \[layer [0-9]+, attention, (forward|backward)\] Ulysses, ' '^  all_to_all over cp_a2a' "the hybrid's all-to-alls"
every_titled "$log" "the hybrid"

# HSDP and hpZ (zero/zero_groups.h): dp 8 in shard groups of 4, replicated twice, hpZ groups of 2;
# each group by its world ranks, the replicas' all-reduce and every hpZ gather titled.
$mpirun --oversubscribe --bind-to none -np 8 "$train" "${flags[@]}" --dp 8 --zero 3 --zero-shard 4 --zero-hpz 2 >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" 'ZeRO-3: .* of slice 0 of 4 .*; HSDP: shard group 1 of 2, the same slice in the other 1' "rank 4's slice: the first of the second shard group"
expect "$log" '^  all_gather over cp_dp_shard \{4,5,6,7\}: ' "stage 3's gather over the shard group's world ranks"
expect "$log" '^  reduce_scatter avg over cp_dp_shard \{0,1,2,3\}: ' "the reduce-scatter over the shard group"
expect "$log" '^  all_reduce avg over cp_dp_replicas \{1,5\}: ' "the replicas' all-reduce over its world ranks"
expect "$log" '^  all_gather over cp_dp_hpz \{6,7\}: ' "an hpZ gather over its world ranks"
titled "$log" '^  HSDP: my slice of the gradient, averaged over the replicas that hold the same slice$' '^  all_reduce avg over cp_dp_replicas' "HSDP's all-reduces"
titled "$log" "^  \[.*\] hpZ: a unit's parameters from the parts kept since its forward" '^  all_gather over cp_dp_hpz' "hpZ's gathers"
expect "$log" "^  \[layer 1, backward\] hpZ: a unit's parameters from the parts kept since its forward" "an hpZ gather, titled backward"
titled "$log" '^  (\[.*\] )?ZeRO-3: a unit.s parameters from every shard' '^  all_gather over cp_dp_shard' "ZeRO-3's gathers"
every_titled "$log" "HSDP and hpZ"

# DualPipeV: every F, B and W narrated (the pairs too), 0-based, in --dry-run's order; both stages of a rank named.
v_flags=(--pp 2 --pp-schedule dualpipev --grad-acc-steps 4 --num-hidden-layers 4)
$mpirun --oversubscribe --bind-to none -np 2 "$train" "${flags[@]}" "${v_flags[@]}" >"$log" 2>&1 || { cat "$log"; echo FAILED; exit 1; }
expect "$log" '^---- rank 0 \(dp 0, pp 0: stages 0 and 3, cp 0, tp 0\) ----' "rank 0 holds both ends of the V"
expect "$log" '^ F0\.1 forward of micro-batch 0 on stage 3$' "an F of chunk 1, 0-based"
expect "$log" '^ F3& forward of micro-batch 3 on stage 0, one slot with the B that follows' "an overlapped F&B pair"
expect "$log" '^ B0\.1 backward of micro-batch 0 on stage 3: the input.s gradient' "a B"
expect "$log" '^ W0 weight gradients of micro-batch 0 on stage 0$' "a W"
for r in 0 1; do
  narrated=$(sed -n "/^---- rank $r /,/^---- rank $((r + 1)) \|^==== end/p" "$log" | grep -oE '^ [FBW][0-9][0-9.&]* ' | tr -d ' ' | tr '\n' ' ')
  program=$("$train" "${flags[@]}" "${v_flags[@]}" --dry-run 2>&1 | sed -n '/^p2p program per step/,$p' | grep "^  pp rank $r: " |
            sed -e "s/^  pp rank $r: //" -e 's/$/ /' -e 's/\[[^]]*\] //g')
  if [ -n "$program" ] && [ "$narrated" = "$program" ]; then echo "ok: rank $r's actions are --dry-run's program"
  else echo "DIFFERENT: rank $r narrated '$narrated', --dry-run's program '$program'"; fail=1; fi
done

[ $fail = 0 ] && echo "EXPLAIN OK" || { cat "$log"; echo FAILED; exit 1; }
