#!/usr/bin/env bash
# check_metrics.sh FILE STEPS — the metrics file has STEPS JSON lines with every key,
# and the last loss is below the first.
f=$1; steps=$2
[ -f "$f" ] || { echo "FAIL: $f missing"; exit 1; }
n=$(wc -l <"$f")
[ "$n" -eq "$steps" ] || { echo "FAIL: $n lines, expected $steps"; exit 1; }
for key in step loss lr grad_norm tokens_per_s mfu peak_mem_bytes; do
  grep -q "\"$key\": *" "$f" || { echo "FAIL: key $key missing"; exit 1; }
done
first=$(head -1 "$f" | sed -E 's/.*"loss": *([^,]*),.*/\1/')
last=$(tail -1 "$f" | sed -E 's/.*"loss": *([^,]*),.*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "FAIL: loss did not fall ($first -> $last)"; exit 1; }
echo "ok: $n steps, loss $first -> $last"
