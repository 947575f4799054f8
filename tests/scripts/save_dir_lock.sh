#!/usr/bin/env bash
# save_dir_lock.sh TRAIN WORK: two runs saving into one --save-dir at once: the second stops
# at start with one line naming the first (runtime/checkpoint/resume.h, lock_save_dir); once
# the first has ended, the folder is free again.
set -uo pipefail
train=$1 work=$2
rm -rf "$work" && mkdir -p "$work" || exit 1
flags=(--device cpu --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1 --log-every 1)
"$train" "${flags[@]}" --steps 1000000 --save-dir "$work/d" --save-every 1000 >"$work/first.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q '^step' "$work/first.log" && break; sleep 0.1; done
"$train" "${flags[@]}" --steps 2 --save-dir "$work/d" >"$work/second.log" 2>&1
rc=$?
kill $pid; wait $pid 2>/dev/null
grep error "$work/second.log"
[ $rc -ne 0 ] && grep -qE "error: --save-dir .*/d: another run is saving checkpoints there \(pid $pid\)" "$work/second.log" ||
  { echo "FAILED: the second run was not refused"; exit 1; }
"$train" "${flags[@]}" --steps 2 --save-dir "$work/d" >"$work/third.log" 2>&1 || { cat "$work/third.log"; echo "FAILED: the folder stayed locked"; exit 1; }
echo "save dir lock ok"
