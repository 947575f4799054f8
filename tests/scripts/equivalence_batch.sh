#!/usr/bin/env bash
# equivalence_batch.sh CASES TRAIN KIND NP — the runs of many cases in one launch.
#
#   KIND ref     every equivalence reference not made yet, one after another in one process
#   KIND par     the parallel runs of the NP-rank equivalence and recompute cases
#   KIND shared  checkpoint cases: the uninterrupted and the saving runs on NP ranks
#   KIND resume  checkpoint cases: the resumed runs on NP ranks (after every shared batch)
#   each in one mpirun of NP ranks (ref: no mpirun, as the references run)
#
# CASES (build/tests/equivalence/cases.tsv, build/tests/checkpoint/cases.tsv, written by
# tests/cmake/equivalence_tests.cmake and tests/cmake/checkpoint_tests.cmake): one case a line,
# tab-separated: NPS REF_MICRO_BATCHES SCRIPT ARGS... -- FLAGS..., its rank counts
# (comma-separated) and its ctest entry's command (SCRIPT: tests/scripts/equivalence.sh,
# recompute_vs_none.sh or checkpoint_resume.sh) without TRAIN (as the cases name it),
# which comes after the --. `SCRIPT --plan ...` prints each run of the case as
# "KIND<TAB>NP<TAB>LOG<TAB>MARKER<TAB>KEY<TAB>ARGS..."; tests/tools/train_batch.cpp runs those of
# this KIND and NP, writing KEY to MARKER after each, and the files land where the case
# looks for them. Each case (a ctest entry after this one: DEPENDS) then compares its own
# files and says EQUIVALENT or FAILED, as before; a case whose runs the batch did not make
# (it stopped at a failing run, or ctest -R chose the case alone) runs its own launches.
# Prints "BATCH OK" when every run of the list finished.
set -euo pipefail
cases=$1 train=$2 kind=$3 np=$4
batch=$(dirname "$train")/tests/train_batch
list=$(dirname "$cases")/batch.$kind.np$np.list
while IFS=$'\t' read -r -a f; do
  [ "$kind" = ref ] || [[ ",${f[0]}," == *",$np,"* ]] || continue
  args=()
  for a in "${f[@]:3}"; do
    args+=("$a")
    [ "$a" = "--" ] && args+=("$train")
  done
  REF_MICRO_BATCHES=${f[1]} "${f[2]}" --plan "${args[@]}" | { grep "^$kind	$np	" || true; } | cut -f3-
done <"$cases" | awk '!seen[$0]++' >"$list"  # runs that cases share (a reference, an uninterrupted run): once
n=$(wc -l <"$list")
echo "batch of $kind runs on $np ranks: $n runs ($list)"
start=$(date +%s.%N)
rc=0
if [ "$n" -gt 0 ]; then
  if [ "$kind" = ref ]; then
    "$batch" "$list" || rc=$?
  else
    ${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np "$np" "$batch" "$list" || rc=$?
  fi
fi
done=0
while IFS=$'\t' read -r log marker key _; do
  if [ "$(cat "$marker" 2>/dev/null)" = "$key" ]; then
    done=$((done + 1))
  else  # the run that stopped the batch (those after it never started): their cases run alone
    echo "not run in the batch: $log"; [ -f "$log" ] && tail -n 20 "$log"
    break
  fi
done <"$list"
awk -v k="$kind" -v d="$done" -v n="$n" -v a="$start" -v b="$(date +%s.%N)" \
  'BEGIN { printf "batch of %s runs: %d of %d runs in %.1f s\n", k, d, n, b - a }'
[ "$rc" = 0 ] && [ "$done" = "$n" ] && echo "BATCH OK" || { echo "FAILED: the batch stopped (exit $rc)"; exit 1; }
