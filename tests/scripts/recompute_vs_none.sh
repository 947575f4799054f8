#!/usr/bin/env bash
# recompute_vs_none.sh [--plan] WORKDIR NP MODE -- TRAIN FLAGS...
#
# Recomputation must not change the arithmetic: the same run (same mesh, same flags) with
# --recompute none and with --recompute MODE gives the same per-step losses and grad
# norms and the same final parameters within 1e-12 (fp64). Prints EQUIVALENT or FAILED.
# Batched as tests/scripts/equivalence.sh is (its header): the two runs are made by the suite's
# batch of NP-rank runs (tests/scripts/equivalence_batch.sh) when ctest runs it, and here
# otherwise; --plan prints them ("par<TAB>NP<TAB>LOG<TAB>MARKER<TAB>KEY<TAB>ARGS...").
set -euo pipefail
plan=0; [ "$1" = "--plan" ] && { plan=1; shift; }
work=$1 np=$2 mode=$3; shift 3; [ "$1" = "--" ] && shift
train=$1; shift
compare=$(dirname "$train")/tests/compare_runs
batch=$(dirname "$train")/tests/train_batch
mkdir -p "$work"
for m in none "$mode"; do
  cmd=("$train" "$@" --recompute "$m")
  key=$({ for a in "${cmd[@]}" "$batch"; do [ -f "$a" ] && stat -L -c '%n %s %Y' "$a"; done
          printf '%s\n' "$np" "${cmd[@]}"; } | sha1sum | cut -c1-16)
  if [ $plan = 1 ]; then
    (IFS=$'\t'; echo "par	$np	$work/$m.log	$work/$m.key	$key	${cmd[*]:1}	--metrics-file	$work/$m.jsonl	--save-params	$work/$m.params")
  elif [ "$(cat "$work/$m.key" 2>/dev/null)" = "$key" ] && [ -s "$work/$m.params" ]; then
    echo "--recompute $m: ran in a batch, tests/scripts/equivalence_batch.sh ($work/$m.log)"
  else
    rm -f "$work/$m.key"
    if ! ${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np "$np" "${cmd[@]}" \
         --metrics-file "$work/$m.jsonl" --save-params "$work/$m.params" > "$work/$m.log" 2>&1; then
      cat "$work/$m.log"; echo "FAILED: --recompute $m"; exit 1
    fi
  fi
done
[ $plan = 1 ] && exit 0
"$compare" "$work/none.jsonl" "$work/$mode.jsonl" "$work/none.params" "$work/$mode.params" 1e-12
