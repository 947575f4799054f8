#!/usr/bin/env bash
# check_memory_estimate.sh WORKDIR NP TOLERANCE -- TRAIN FLAGS...
#
# The estimator (--dry-run, runtime/planner/memory_estimate.h) against a real run: two steps on
# the CPU with --memory-trace, whose rank-0 peak is the counting allocator's exact tensor
# bytes; the estimate for rank 0 must lie within TOLERANCE (relative) of it. Prints
# "estimate ok" or "FAILED".
set -euo pipefail
work=$1 np=$2 tol=$3; shift 3; [ "$1" = "--" ] && shift
train=$1; shift
mkdir -p "$work"
if ! ${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np "$np" "$train" --device cpu --threads 1 --steps 2 \
     --generate 0 "$@" --memory-trace "$work/trace.jsonl" > "$work/run.log" 2>&1; then
  cat "$work/run.log"; echo "FAILED: the run"; exit 1
fi
"$train" --dry-run "$@" > "$work/dry_run.log"
estimate=$(sed -n 's/^  total at the peak .* \([0-9,]*\) B$/\1/p' "$work/dry_run.log" | tr -d ,)
[ -n "$estimate" ] || { cat "$work/dry_run.log"; echo "FAILED: no 'total at the peak' line"; exit 1; }
python3 - "$work/trace.jsonl" "$estimate" "$tol" <<'PY'
import json, sys
measured = max(json.loads(line)["peak"] for line in open(sys.argv[1]))
estimate, tol = int(sys.argv[2]), float(sys.argv[3])
error = (estimate - measured) / measured
print(f"measured peak {measured:,} B, estimate {estimate:,} B, error {100 * error:+.2f}%")
print("estimate ok" if abs(error) <= tol else f"FAILED: error above {100 * tol:g}%")
PY
