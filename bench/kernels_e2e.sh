#!/usr/bin/env bash
# bench/kernels_e2e.sh — end to end on one GPU: --kernels aten against --kernels fused, for
# smollm-360m and smollm-1.7b at seq 2048, bf16, synthetic data, STEPS steps each, at the
# largest micro-batch that fits (tried from MICRO_BATCHES down, first that trains wins;
# the same micro-batch for both kernel settings of a model, the one aten fits, so the
# comparison is like for like). Prints one table: tokens/s (median of the steps after
# the first 5), MFU (H100/H200 dense bf16 peak, as build/train reports it) and peak memory.
#
#   bench/kernels_e2e.sh                     # both models, 20 steps
#   MODELS=smollm-360m STEPS=50 bench/kernels_e2e.sh
#
# Also the bf16 agreement of the two: the largest |loss_fused - loss_aten| over the steps.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-build/train}
MODELS=${MODELS:-"smollm-360m smollm-1.7b"}
STEPS=${STEPS:-20}
MICRO_BATCHES=${MICRO_BATCHES:-"32 16 8 4 2 1"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -x "$TRAIN" ] || { echo "kernels_e2e: error: $TRAIN not built" >&2; exit 1; }

run() {  # model kernels micro-batch -> metrics file; non-zero when it did not train
  "$TRAIN" --device cuda --dtype bf16 --model "$1" --kernels "$2" --micro-batch-size "$3" --seq-len 2048 \
    --data synthetic --steps "$STEPS" --generate 0 --log-every 5 --metrics-file "$out/$1-$2.jsonl" \
    > "$out/$1-$2.log" 2>&1
}
summary() {  # metrics file -> "tokens/s mfu% peak"
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
after = rows[5:] or rows
tok = statistics.median(r["tokens_per_s"] for r in after)
mfu = statistics.median(r["mfu"] for r in after if r.get("mfu") is not None) * 100
peak = max(r["peak_mem_bytes"] for r in rows) / 2**30
print(f"{tok:12,.0f} {mfu:6.1f}% {peak:8.2f} GiB")
PY
}
printf "%-12s %-6s %4s %12s %7s %12s\n" model kernels B "tokens/s" MFU "peak mem"
for model in $MODELS; do
  chosen=""
  for b in $MICRO_BATCHES; do
    if run "$model" aten "$b"; then chosen=$b; break; fi
  done
  [ -n "$chosen" ] || { echo "$model: no micro-batch trained (see $out/$model-aten.log)"; tail -3 "$out/$model-aten.log"; continue; }
  printf "%-12s %-6s %4s %s\n" "$model" aten "$chosen" "$(summary "$out/$model-aten.jsonl")"
  if run "$model" fused "$chosen"; then
    printf "%-12s %-6s %4s %s\n" "$model" fused "$chosen" "$(summary "$out/$model-fused.jsonl")"
    python3 - "$out/$model-aten.jsonl" "$out/$model-fused.jsonl" <<'PY'
import json, sys
a, f = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:3])
print(f"  bf16 agreement over {len(a)} steps: max |loss fused - loss aten| = {max(abs(x - y) for x, y in zip(a, f)):.4f}")
PY
  else
    echo "$model fused: failed:"; tail -3 "$out/$model-fused.log"
  fi
done
