#!/usr/bin/env bash
# bench/checkpoint_stall.sh [TRAIN] [WORKDIR] — what a checkpoint save makes training wait,
# with and without --async-save (docs/checkpoints.md, "Saving in the background"), and
# what the checks before a resume cost on a smollm-360m checkpoint.
#
#   smollm-135m, 1 rank, fp32, 8 steps of 32 tokens: no save, a save every 2 steps in the
#   step, the same with --async-save ("saved checkpoint" lines: the wait of each save);
#   then a smollm-360m checkpoint (4 GiB), its --resume ("of which checking every file")
#   and --check-checkpoint. Needs about 10 GiB of disk and 8 GiB of memory; minutes on a CPU.
set -uo pipefail
T=$(realpath "${1:-build/train}"); W=${2:-/tmp/checkpoint_stall}
mkdir -p "$W" && cd "$W" && rm -rf none sync async ck360
F="--device cpu --model smollm-135m --seq-len 32 --micro-batch-size 1 --steps 8 --warmup-steps 1 --log-every 1 --generate 0"
for mode in none sync async; do
  extra=""
  [ $mode = sync ] && extra="--save-dir sync --save-every 2"
  [ $mode = async ] && extra="--save-dir async --save-every 2 --async-save"
  echo "== $mode: $T $F $extra"
  start=$(date +%s.%N)
  "$T" $F $extra 2>&1 | grep -E "^step|saved"
  echo "wall $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$start" "$(date +%s.%N)") s"
done
echo "== smollm-360m: a checkpoint, its resume and --check-checkpoint"
S="--device cpu --model smollm-360m --seq-len 32 --micro-batch-size 1 --steps 2 --generate 0"
"$T" $S --stop-at-step 1 --save-dir ck360 2>&1 | grep -E "^step|saved"
"$T" $S --resume ck360 --save-dir ck360 2>&1 | grep -E "^step|resumed|saved"
"$T" --check-checkpoint ck360
