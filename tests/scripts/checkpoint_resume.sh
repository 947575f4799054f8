#!/usr/bin/env bash
# shellcheck disable=SC2206  # the flags' words, on purpose
# checkpoint_resume.sh WORKDIR RTOL SAVE_NP "SAVE_FLAGS" LOAD_NP "LOAD_FLAGS" -- TRAIN FLAGS...
#
# Save on one layout, resume on another (or the same), against the uninterrupted run:
#   A: LOAD layout, all --steps straight                    (the reference)
#   B: SAVE layout, --stop-at-step K with --save-dir        (a checkpoint at step K = steps/2)
#   C: LOAD layout, --resume from B's checkpoint to --steps
# C's per-step losses and grad norms (steps K+1..) and final parameters must match A's:
# RTOL "exact" compares the bits (the same layout: the same arithmetic), a number is the
# equivalence tolerance (another layout adds in another order). Prints EQUIVALENT/FAILED.
#
# Batched as tests/scripts/equivalence.sh is (its header): under ctest, A and B of every case run in
# one launch per rank count, then every C (tests/scripts/equivalence_batch.sh, kinds shared and
# resume); a run whose files a batch made for exactly its command (its KEY: the command,
# the size and time of the binaries) is not run again here. --plan prints the three runs
# ("KIND<TAB>NP<TAB>LOG<TAB>MARKER<TAB>KEY<TAB>ARGS...") and runs nothing.
set -euo pipefail
plan=0; [ "$1" = "--plan" ] && { plan=1; shift; }
work=$1 rtol=$2 save_np=$3 save_flags=$4 load_np=$5 load_flags=$6; shift 6; [ "$1" = "--" ] && shift
train=$1; shift
compare=$(dirname "$train")/tests/compare_runs
batch=$(dirname "$train")/tests/train_batch
steps=$(echo "$@" | sed -n 's/.*--steps \([0-9]*\).*/\1/p')
k=$((steps / 2))
key_of() {  # NP WORDS...: the command's key, with the trainer's and the batch driver's size and time
  { stat -L -c '%s %Y' "$train"; [ -f "$batch" ] && stat -L -c '%s %Y' "$batch"; printf '%s\n' "$@"; } |
    sha1sum | cut -c1-16
}
plan_line() {  # KIND NP LOG MARKER KEY ARGS...
  (IFS=$'\t'; echo "$*")
}
if [ $plan = 0 ]; then mkdir -p "$work"; find "$work" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} +; fi
run() {  # run NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  if ! ${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np "$np" "$train" "$@" > "$work/$name.log" 2>&1; then
    cat "$work/$name.log"; echo "FAILED: run $name"; exit 1
  fi
}
# A and B are shared by the cases that run them alike (the same ranks, flags and trainer:
# "to 1" cases share their A, bit-exact ones their layout): each runs once per ctest run,
# kept under a key of its command (as tests/scripts/equivalence.sh keeps its references), a lock
# making a concurrent case wait. CHECKPOINT_NO_RUN_CACHE=1 runs both in WORKDIR every time.
shared() {  # shared NAME NP FLAGS... (@DIR@ in them: its output folder): run once; sets $dir
  local name=$1 np=$2; shift 2
  local key
  key=$(key_of "$np" "$@")
  dir=$(dirname "$work")/shared_runs/$key
  [ "${CHECKPOINT_NO_RUN_CACHE:-0}" = 1 ] && dir=$work/$name
  local args=("${@//@DIR@/$dir}")
  if [ $plan = 1 ]; then
    [ -e "$dir/done" ] || [ "${CHECKPOINT_NO_RUN_CACHE:-0}" = 1 ] ||
      { mkdir -p "$dir"; plan_line shared "$np" "$dir/run.log" "$dir/done" "$key" "${args[@]}"; }
    return
  fi
  mkdir -p "$dir"
  (
    flock 9
    if [ ! -e "$dir/done" ]; then
      run "$name" "$np" "${args[@]}"; cp "$work/$name.log" "$dir/run.log"; touch "$dir/done"
    else echo "(run $name ran already for another case: $dir)"; fi
  ) 9>"$dir.lock"
}
# shellcheck disable=SC2086
shared A "$load_np" "$@" $load_flags --metrics-file @DIR@/A.jsonl --save-params @DIR@/A.params; A=$dir
# shellcheck disable=SC2086
shared B "$save_np" "$@" $save_flags --stop-at-step "$k" --save-dir @DIR@/ckpt; B=$dir
# shellcheck disable=SC2086
c_cmd=("$@" $load_flags --resume "$B/ckpt")
c_key=$(key_of "$load_np" "${c_cmd[@]}")
if [ $plan = 1 ]; then
  [ "${CHECKPOINT_NO_RUN_CACHE:-0}" = 1 ] ||
    { mkdir -p "$work"; plan_line resume "$load_np" "$work/C.log" "$work/C.key" "$c_key" "${c_cmd[@]}" \
        --metrics-file "$work/C.jsonl" --save-params "$work/C.params"; }
  exit 0
fi
cp "$A/A.jsonl" "$A/A.params" "$work/"
if [ "$(cat "$work/C.key" 2>/dev/null)" = "$c_key" ] && [ -s "$work/C.params" ]; then
  echo "(run C ran in a batch, tests/scripts/equivalence_batch.sh: $work/C.log)"
else
  rm -f "$work"/C.*
  run C "$load_np" "${c_cmd[@]}" --metrics-file "$work/C.jsonl" --save-params "$work/C.params"
fi
grep -h "resumed from" "$work/C.log"
tail -n +$((k + 1)) "$work/A.jsonl" > "$work/A_after.jsonl"
if [ "$rtol" = exact ]; then
  if ! python3 - "$work/A_after.jsonl" "$work/C.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
c = [json.loads(l) for l in open(sys.argv[2])]
bad = len(a) != len(c) or any(x[f] != y[f] for x, y in zip(a, c) for f in ("step", "loss", "grad_norm", "lr"))
for x, y in zip(a, c):
    print(f"step {x['step']}: loss {x['loss']!r} vs {y['loss']!r}, grad norm {x['grad_norm']!r} vs {y['grad_norm']!r}")
sys.exit(1 if bad else 0)
PY
  then echo "FAILED: the resumed steps differ"; exit 1; fi
  cmp "$work/A.params" "$work/C.params" || { echo "FAILED: the final parameters differ"; exit 1; }
  echo "bit-identical: $((steps - k)) resumed steps and every byte of the final parameters"
  echo EQUIVALENT
else
  "$compare" "$work/A_after.jsonl" "$work/C.jsonl" "$work/A.params" "$work/C.params" "$rtol"
fi
