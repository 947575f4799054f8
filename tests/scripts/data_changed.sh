#!/usr/bin/env bash
# data_changed.sh TRAIN WORK: a --data file shortened while the run trains on it (its memory
# map would raise SIGBUS on the next read past the new end): one line naming the file, a
# non-zero exit, no hang (picotron/data.cpp: the size check before each batch, and the
# SIGBUS handler for the instant after it).
set -uo pipefail
train=$1 work=$2
rm -rf "$work" && mkdir -p "$work" || exit 1
seq 1 400000 >"$work/corpus.txt"  # 2.6 MB of text, byte tokens
"$train" --device cpu --data "$work/corpus.txt" --steps 1000000 --seq-len 64 --micro-batch-size 4 --threads 1 \
  --generate 0 --log-every 1 >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q '^step' "$work/log" && break; sleep 0.1; done
grep -q '^step' "$work/log" || { kill $pid; cat "$work/log"; echo "FAILED: no step before the change"; exit 1; }
truncate -s 1000 "$work/corpus.txt"
for _ in $(seq 1 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then kill -9 $pid; echo "FAILED: still training 30 s after the file was shortened"; exit 1; fi
wait $pid
rc=$?
tail -n 3 "$work/log"
[ $rc -ne 0 ] || { echo "FAILED: exit 0"; exit 1; }
grep -qE "error: --data .*corpus.txt: the file changed under the run" "$work/log" || { echo "FAILED: no line naming the file"; exit 1; }
echo "changed data ok"
