#!/usr/bin/env bash
# scripts/resilient_run.sh [--restarts N] [--check TRAIN] -- LAUNCH COMMAND...
#
# Runs a training command; when it fails (a rank killed, a node rebooted, an error),
# relaunches it with --resume on the newest checkpoint of its --save-dir that verifies
# (build/train --check-checkpoint, runtime/checkpoint_check.h), up to N times (default 3),
# and says each time what failed and from which step it goes on:
#
#   scripts/resilient_run.sh --restarts 3 -- mpirun -np 8 build/train --dp 8 \
#       --save-dir ckpt --save-every 100 --steps 10000
#
#   resilient_run: the run failed (exit 137: a process was killed by signal 9, KILL) after 41 s
#   resilient_run: restart 1 of 3: --resume ckpt/step-000300 (step 300; step-000400.tmp is unfinished)
#
# The command must give --save-dir D (checkpoints are what it resumes from). A checkpoint
# that does not verify (a file damaged, a save cut short) is skipped for the one before
# it; with none, the run starts again from step 0. A --resume already in the command is
# replaced. TRAIN, to verify with, defaults to the command's first word ending in /train.
# Exit: 0 when a launch succeeds, else the last launch's exit code.
#
# Test: ctest -R resilient   (tests/resilient_run_test.sh: three ranks killed at random
# steps; the final parameters equal the uninterrupted run's, bit for bit)
set -uo pipefail
restarts=3 check=""
while [ $# -gt 0 ]; do
  case "$1" in
    --restarts) restarts=${2:?--restarts needs a number}; shift 2 ;;
    --check) check=${2:?--check needs the train binary}; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "resilient_run: unknown option '$1' (before --: --restarts N, --check TRAIN)" >&2; exit 2 ;;
  esac
done
[[ $restarts =~ ^[0-9]+$ ]] || { echo "resilient_run: --restarts takes a number >= 0, got '$restarts'" >&2; exit 2; }
[ $# -gt 0 ] || { echo "resilient_run: no launch command after --" >&2; exit 2; }
cmd=("$@")

# The command's --save-dir and train binary; the command without any --resume.
save_dir="" base=() steps=0 stop_at=0
for ((i = 0; i < ${#cmd[@]}; i++)); do
  a=${cmd[i]}
  case "$a" in
    --save-dir) save_dir=${cmd[i+1]:-}; base+=("$a" "$save_dir"); ((i++)) ;;
    --save-dir=*) save_dir=${a#--save-dir=}; base+=("$a") ;;
    --steps|--stop-at-step) [ "$a" = --steps ] && steps=${cmd[i+1]:-0} || stop_at=${cmd[i+1]:-0}
                            base+=("$a" "${cmd[i+1]:-}"); ((i++)) ;;
    --resume) ((i++)) ;;
    --resume=*) ;;
    *) base+=("$a"); [ -z "$check" ] && [[ $a == */train || $a == train ]] && [ -x "$a" ] && check=$a ;;
  esac
done
[ -n "$save_dir" ] || { echo "resilient_run: the command gives no --save-dir: there would be nothing to resume from" >&2; exit 2; }
[ -n "$check" ] || { echo "resilient_run: no build/train in the command to verify checkpoints with: give --check TRAIN" >&2; exit 2; }
end=$stop_at; [[ $end =~ ^[0-9]+$ ]] && [ "$end" -gt 0 ] || end=$steps  # the step the run stops after

# The newest step-NNNNNN of the save dir that --check-checkpoint accepts ("" if none). One
# at the run's last step is passed over: the run was killed after its last save, in what
# comes after it (--save-params, --export-hf), which the checkpoint before it redoes.
checked=$(mktemp) && trap 'rm -f "$checked"' EXIT
newest_good() {
  local d
  for d in $(ls -d "$save_dir"/step-* 2>/dev/null | grep -E '/step-[0-9]+$' | awk -F'/step-' '{print $NF, $0}' |
             sort -n -r | cut -d' ' -f2-); do
    if [[ $end =~ ^[0-9]+$ ]] && [ "$end" -gt 0 ] && [ $((10#${d##*step-})) -ge "$end" ]; then
      echo "resilient_run: passing over $d: the run's last step (what came after it is redone)" >&2; continue
    fi
    if "$check" --check-checkpoint "$d" >/dev/null 2>"$checked"; then echo "$d"; return; fi
    echo "resilient_run: skipping $d: $(grep -m1 'error' "$checked")" >&2
  done
}

why() {  # a launch's exit code in words
  local rc=$1
  if [ "$rc" -gt 128 ]; then echo "exit $rc: a process was killed by signal $((rc - 128)), $(kill -l $((rc - 128)) 2>/dev/null)"
  else echo "exit $rc"; fi
}

attempt=0 launch=("${cmd[@]}")
while true; do
  start=$(date +%s)
  "${launch[@]}"
  rc=$?
  [ $rc -eq 0 ] && { [ $attempt -gt 0 ] && echo "resilient_run: finished after $attempt restart(s)"; exit 0; }
  echo "resilient_run: the run failed ($(why $rc)) after $(( $(date +%s) - start )) s" >&2
  if [ $attempt -ge "$restarts" ]; then
    echo "resilient_run: giving up after $attempt restart(s) (--restarts $restarts)" >&2
    exit $rc
  fi
  attempt=$((attempt + 1))
  good=$(newest_good)
  unfinished=$(ls -d "$save_dir"/step-*.tmp 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')
  if [ -n "$good" ]; then
    step=$((10#${good##*step-}))
    echo "resilient_run: restart $attempt of $restarts: --resume $good (step $step${unfinished:+; unfinished: ${unfinished% }})" >&2
    launch=("${base[@]}" --resume "$good")
  elif ls -d "$save_dir"/step-* 2>/dev/null | grep -qE '/step-[0-9]+$'; then
    echo "resilient_run: no checkpoint in $save_dir verifies (see the lines above): not restarting" >&2
    exit $rc
  else
    echo "resilient_run: restart $attempt of $restarts: from step 0 (no checkpoint in $save_dir yet)" >&2
    launch=("${base[@]}")
  fi
done
