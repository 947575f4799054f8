#!/usr/bin/env bash
# recompute_vs_none.sh WORKDIR NP MODE -- TRAIN FLAGS...
#
# Recomputation must not change the arithmetic: the same run (same mesh, same flags) with
# --recompute none and with --recompute MODE gives the same per-step losses and grad
# norms and the same final parameters within 1e-12 (fp64). Prints EQUIVALENT or FAILED.
set -euo pipefail
work=$1 np=$2 mode=$3; shift 3; [ "$1" = "--" ] && shift
train=$1; shift
compare=$(dirname "$train")/tests/compare_runs
mkdir -p "$work"
for m in none "$mode"; do
  if ! ${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np "$np" "$train" "$@" --recompute "$m" \
       --metrics-file "$work/$m.jsonl" --save-params "$work/$m.params" > "$work/$m.log" 2>&1; then
    cat "$work/$m.log"; echo "FAILED: --recompute $m"; exit 1
  fi
done
"$compare" "$work/none.jsonl" "$work/$mode.jsonl" "$work/none.params" "$work/$mode.params" 1e-12
