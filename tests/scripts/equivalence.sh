#!/usr/bin/env bash
# shellcheck disable=SC2086  # $mpirun and TRAIN_WRAPPER may hold words
# equivalence.sh WORKDIR RTOL NP -- TRAIN FLAGS...
#
# Runs TRAIN FLAGS on NP ranks under mpirun, and the single-process reference with the
# same flags minus the mesh (--dp/--tp/--pp/--cp/--cp-layout/--cp-mode/--cp-ulysses/--sp/--dp-mode/--dp-bucket-mb/--zero/--zero-shard/--zero-hpz/--pp-schedule/
# --pp-virtual-stages, --explain) and the
# whole global batch (micro-batch x grad-acc x dp rows) as ONE micro-batch, so the
# reference involves neither data parallelism nor gradient accumulation. Then
# compare_runs checks every step's loss and grad norm and the final parameters within RTOL.
# Environment: REF_MICRO_BATCHES=same (the reference runs the parallel run's micro-batches
# one after another instead of one big one: a mixture of experts needs it); MPIEXEC (default mpirun); TRAIN_WRAPPER, a command that each parallel rank
# runs TRAIN through (scripts/gpu_check.sh gives each rank its own NCCL_HOSTID with it).
#
# Batched (issue 53): the suite runs the references and the parallel runs of many cases in
# a few launches (tests/scripts/equivalence_batch.sh, tests/tools/train_batch.cpp); a case whose files a
# batch made for exactly its command (the KEY below: the command, and the size and time of
# the binaries and data files it names) only compares them; without them it runs its own,
# as here. `equivalence.sh --plan ...` prints the case's two runs for the batch, and runs
# nothing: "ref<TAB>1<TAB>LOG<TAB>MARKER<TAB>KEY<TAB>ARGS..." (only while the reference is
# not made yet) and "par<TAB>NP<TAB>LOG<TAB>MARKER<TAB>KEY<TAB>ARGS...".
set -euo pipefail
plan=0; [ "$1" = "--plan" ] && { plan=1; shift; }
work=$1 rtol=$2 np=$3; shift 3; [ "$1" = "--" ] && shift
train=$1; shift
compare=$(dirname "$train")/tests/compare_runs
mkdir -p "$work"

ref_args=() par_args=() dp=1 acc=1 micro=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dp) dp=$2; par_args+=("$1" "$2"); shift 2 ;;
    --tp|--ep|--pp|--cp|--cp-layout|--cp-mode|--cp-ulysses|--recompute|--dp-mode|--dp-bucket-mb|--pp-schedule|--pp-virtual-stages|--zero|--zero-shard|--zero-hpz) par_args+=("$1" "$2"); shift 2 ;;
    --sp|--explain) par_args+=("$1"); shift ;;
    --grad-acc-steps) acc=$2; shift 2 ;;
    --micro-batch-size) micro=$2; shift 2 ;;
    *) ref_args+=("$1"); par_args+=("$1"); shift ;;
  esac
done
mpirun=${MPIEXEC:-mpirun}
run() {  # LOG COMMAND...: run it, show its step lines, and stop here if it failed
  local log=$1; shift
  if ! "$@" >"$log" 2>&1; then cat "$log"; echo "FAILED: $*"; exit 1; fi
  grep -E "^step|^mesh" "$log" || true
}
global=$((micro * acc * dp))
if [ "${REF_MICRO_BATCHES:-whole}" = same ]; then
  # A mixture of experts' load-balancing loss is computed per micro-batch (expert_parallel/moe.h),
  # so the reference must run the same micro-batches: dp x acc of them, one after another
  # (BatchLoader: dp rank d's micro-batch j is the reference's micro-batch d x acc + j).
  echo "== reference: 1 process, the same $((acc * dp)) micro-batches of $micro rows: ${ref_args[*]}"
  ref_cmd=("$train" "${ref_args[@]}" --micro-batch-size "$micro" --grad-acc-steps "$((acc * dp))")
else
  echo "== reference: 1 process, one micro-batch of $global rows: ${ref_args[*]}"
  ref_cmd=("$train" "${ref_args[@]}" --micro-batch-size "$global" --grad-acc-steps 1)
fi
# Many cases share a reference (165 cases, 33 references): the reference runs once per
# ctest run and is kept under a key of its command and the files it names (their size and
# time: the trainer, a data file), so a case
# whose reference ran already only runs the parallel side. A lock makes a concurrent case
# wait for the one computing it. EQUIVALENCE_NO_REF_CACHE=1 runs it in WORKDIR every time.
# The batch driver (tests/tools/train_batch.cpp) compiles train.cpp too: a key names both binaries.
batch=$(dirname "$train")/tests/train_batch
key_of() {  # WORDS...: a key of the command and the size and time of the files it names
  { for a in "$@" "$batch"; do [ -f "$a" ] && stat -L -c '%n %s %Y' "$a"; done  # the trainer, data files
    printf '%s\n' "$@" "${TRAIN_WRAPPER:-}"; } | sha1sum | cut -c1-16
}
par_cmd=("$train" "${par_args[@]}" --micro-batch-size "$micro" --grad-acc-steps "$acc")
par_key=$(key_of "$np" "${par_cmd[@]}")
if [ "${EQUIVALENCE_NO_REF_CACHE:-0}" = 1 ]; then
  ref=$work/ref
  [ $plan = 1 ] || run "$ref.log" "${ref_cmd[@]}" --metrics-file "$ref.jsonl" --save-params "$ref.params"
else
  cache=$(dirname "$work")/references; mkdir -p "$cache"
  key=$(key_of "${ref_cmd[@]}")
  ref=$cache/$key
  if [ $plan = 1 ]; then
    [ -e "$ref.done" ] || (IFS=$'\t'; echo "ref	1	$ref.log	$ref.done	$key	${ref_cmd[*]:1}	--metrics-file	$ref.jsonl	--save-params	$ref.params")
  else
    (
      flock 9
      if [ ! -e "$ref.done" ]; then
        run "$ref.log" "${ref_cmd[@]}" --metrics-file "$ref.jsonl" --save-params "$ref.params"
        touch "$ref.done"
      else
        echo "(the reference ran already, for another case or in a batch: $ref.log)"; grep -E "^step" "$ref.log" || true
      fi
    ) 9>"$ref.lock"
  fi
fi
if [ $plan = 1 ]; then
  (IFS=$'\t'; echo "par	$np	$work/run.log	$work/run.key	$par_key	${par_cmd[*]:1}	--metrics-file	$work/run.jsonl	--save-params	$work/run.params")
  exit 0
fi
echo "== parallel: $np processes, --micro-batch-size $micro --grad-acc-steps $acc ${par_args[*]}"
if [ -z "${TRAIN_WRAPPER:-}" ] && [ "$(cat "$work/run.key" 2>/dev/null)" = "$par_key" ] && [ -s "$work/run.params" ]; then
  echo "(ran in a batch, tests/scripts/equivalence_batch.sh: $work/run.log)"; grep -E "^step|^mesh" "$work/run.log" || true
else
  rm -f "$work/run.key"
  run "$work/run.log" $mpirun --oversubscribe --bind-to none -np "$np" ${TRAIN_WRAPPER:-} "${par_cmd[@]}" \
    --metrics-file "$work/run.jsonl" --save-params "$work/run.params"
fi
"$compare" "$ref.jsonl" "$work/run.jsonl" "$ref.params" "$work/run.params" "$rtol"
