#!/usr/bin/env bash
# tests/scripts/plan_asked_batch.sh TRAIN — --plan ranks only layouts that run the asked global batch.
#
# 65,536 tokens at --seq-len 4096 are 16 sequences. On 16 GPUs a pipeline over dp 8 reaches
# them in 2 micro-batches, but zb-h1 needs m >= P and DualPipeV m >= 2P: such a layout runs a
# larger batch, another experiment, and must not be ranked beside the asked one (it was: five
# layouts of 262,144 tokens). Every listed layout must say 65,536 tokens/step, and the counts
# must say how many were set aside.
set -uo pipefail
train=$1
out=$(ulimit -v 6291456; "$train" --plan --model llama3-8b --gpus 16 --seq-len 4096 --global-batch-tokens 65536 --plan-top 8 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAILED: --plan exited $rc"; exit 1; }
listed=$(grep -E '^ [0-9]+\. .* = [0-9,]+ tokens/step$' <<<"$out")
[ -n "$listed" ] || { echo "FAILED: no ranked layout"; exit 1; }
other=$(grep -v ' = 65,536 tokens/step$' <<<"$listed")
[ -z "$other" ] || { echo "FAILED: ranked with another batch than the asked 65,536 tokens:"; echo "$other"; exit 1; }
grep -qE 'of those that pass need a larger batch than asked' <<<"$out" ||
  { echo "FAILED: the counts do not say which layouts needed a larger batch"; exit 1; }
echo "ASKED BATCH ONLY: $(wc -l <<<"$listed") layouts ranked, all at 65,536 tokens/step"
