#!/usr/bin/env bash
# scripts/resilient_run.sh [--restarts N] [--grace S] [--check TRAIN] -- LAUNCH COMMAND...
#
# Runs a training command; when it fails (a rank killed, a node rebooted, an error),
# relaunches it with --resume on the newest checkpoint of its --save-dir that verifies
# (build/train --check-checkpoint, runtime/checkpoint/checkpoint_check.h), up to N times (default 3),
# and says each time what failed and from which step it goes on, or why it stops:
#
#   scripts/resilient_run.sh --restarts 3 -- mpirun -np 8 build/train --dp 8 \
#       --save-dir ckpt --save-every 100 --steps 10000
#
#   resilient_run: the run failed (exit 137: a process was killed by signal 9, KILL) after 41 s
#   resilient_run: restart 1 of 3: --resume ckpt/step-000300 (step 300; unfinished: step-000400.tmp)
#
# The command must give --save-dir D (checkpoints are what it resumes from). A checkpoint
# that does not verify (a file damaged, a save cut short) is skipped for the one before
# it; with no checkpoint yet, the run starts again from step 0; with checkpoints but none
# that verifies, it stops. A checkpoint that verifies but whose run exits with an error
# (not killed by a signal) before its first step line (--resume refused it, or the run
# died loading it) is set aside, and the next launch takes the one before it. A --resume
# already in the command is replaced. TRAIN, to verify with, defaults to the command's
# first word ending in /train. Every other failure is restarted, among them mpirun's exit
# 1 (a rank's error, or mpirun's own) and 128+N (a process killed by signal N).
#
# Not restarted, because the same command would fail the same way:
#   exit 2  build/train refused the command before training (a flag, an input, a failed
#           MPI start; every rank exits 2 and mpirun passes it on), unless the launch
#           resumed from a checkpoint chosen here: then that checkpoint is set aside;
#   exit 3  the run diverged (--max-bad-steps): resumed bit-exactly, it would again.
#
# Signals: SIGINT (Ctrl-C), SIGTERM and SIGHUP, to the launcher or to its process group,
# stop it. Each launch runs in a process group of its own (stdin /dev/null); the signal
# is passed to that group (mpirun then ends its ranks), and --grace S seconds later
# (default 30) the group and every process of the launch still alive get SIGKILL. The
# launch's processes are found by a variable in their environment, so ranks that mpirun
# put in process groups of their own, or left behind, are found too; any still alive
# when a launch ends (mpirun killed) get SIGTERM, and SIGKILL 5 s later, before the
# launcher goes on or exits. A run told to stop is never restarted, and no process of it
# on this node outlives the launcher (except when the launcher itself gets SIGKILL).
# A shell starts a background job with SIGINT ignored, and bash cannot trap a signal it
# was started ignoring: start the launcher in the foreground, after `set -m`, or from a
# program that restores SIGINT (tests/scripts/resilient_run_signals.sh does).
#
# Exit: 128+N once signal N came (130 INT, 143 TERM, 129 HUP), however the run ended;
# else 0 when a launch succeeds; 2 for a bad option of its own; else the last launch's.
#
# Test: ctest -R resilient   (tests/scripts/resilient_run_test.sh: three ranks killed at random
# steps; the final parameters equal the uninterrupted run's, bit for bit.
# tests/scripts/resilient_run_signals.sh: each signal, to the group and to the launcher, under
# mpirun with 2 ranks; a refused flag; a checkpoint that verifies but does not resume)
set -uo pipefail
restarts=3 check="" grace=30
needs() {  # OPTION WHAT COUNT: the option's value must follow it
  [ "$3" -ge 2 ] || { echo "resilient_run: $1 needs $2 after it" >&2; exit 2; }
}
while [ $# -gt 0 ]; do
  case "$1" in
    --restarts) needs "$1" "a number" $#; restarts=$2; shift 2 ;;
    --grace) needs "$1" "a number of seconds" $#; grace=$2; shift 2 ;;
    --check) needs "$1" "the train binary" $#; check=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "resilient_run: unknown option '$1' (before --: --restarts N, --grace S, --check TRAIN)" >&2; exit 2 ;;
  esac
done
[[ $restarts =~ ^[0-9]+$ ]] || { echo "resilient_run: --restarts takes a number >= 0, got '$restarts'" >&2; exit 2; }
[[ $grace =~ ^[0-9]+$ ]] || { echo "resilient_run: --grace takes whole seconds >= 0, got '$grace'" >&2; exit 2; }
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

tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT

# --- Signals: remember the first, pass each to the running launch's process group.
stop="" stop_deadline=0 job=""
on_signal() {  # $1: INT, TERM or HUP
  if [ -z "$stop" ]; then
    stop=$1 stop_deadline=$((SECONDS + grace))
    echo "resilient_run: SIG$1: stopping the run (SIGKILL in $grace s if it still runs); it will not be restarted" >&2
  fi
  [ -n "$job" ] && kill -s "$1" -- "-$job" 2>/dev/null
}
# shellcheck disable=SC2064  # $s expands now, on purpose: one trap per signal
for s in INT TERM HUP; do trap "on_signal $s" "$s"; done

# The processes of launch number $attempt: every process whose environment holds the
# variable it was started with (mpirun puts each rank in a process group of its own, and
# a rank whose mpirun died is nobody's child: neither the group nor the tree finds it).
# Open MPI's singleton daemon (orted / prted: a rank run without mpirun starts one) carries the
# variable too and ends by itself once its rank has; it is not one of the run's processes.
job_pids() {
  local pid
  # shellcheck disable=SC2013  # one path a line, no spaces in /proc/N/environ
  for pid in $(grep -lsxzF "RESILIENT_RUN_JOB=$$.$attempt" /proc/[0-9]*/environ | cut -d/ -f3); do
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in orted|prted) ;; *) echo "$pid" ;; esac
  done
}

# Runs "${launch[@]}" in a process group of its own, its stdout through a reader that
# notes the first step line; waits for it (and for the signal's grace period, if one
# came); then ends whatever of it is left. Sets rc and stepped (1 if a step was logged).
launch_once() {
  local out=$tmp/out.$attempt reader left killed=""
  mkfifo "$out" && rm -f "$tmp/stepped"
  set -m  # job control: the two background jobs below each get a process group
  # (sed -u passes each line on as it comes, where mawk would wait for a full buffer; the
  # first step line is also written to $tmp/stepped)
  local step_re='step +[0-9]+/[0-9]+ \| loss'
  sed -u -E -e "0,\%$step_re%{\%$step_re%w $tmp/stepped" -e '}' <"$out" &
  reader=$!
  RESILIENT_RUN_JOB=$$.$attempt "${launch[@]}" </dev/null >"$out" &  # stdin: never stopped by SIGTTIN
  job=$!
  set +m
  [ -n "$stop" ] && kill -s "$stop" -- "-$job" 2>/dev/null  # a signal before $job was known
  while kill -0 "$job" 2>/dev/null; do
    if [ -z "$stop" ]; then wait "$job" 2>/dev/null  # returns early when a trapped signal arrives
    elif [ $SECONDS -lt $stop_deadline ] || [ -n "$killed" ]; then sleep 0.2
    else
      echo "resilient_run: the run still runs $grace s after SIG$stop: SIGKILL to it" >&2
      # shellcheck disable=SC2046  # one pid a word
      kill -KILL -- "-$job" $(job_pids) 2>/dev/null; killed=1
    fi
  done
  wait "$job" 2>/dev/null; rc=$?  # its status (kept by bash after it was reaped)
  job=""
  # Ranks left behind (mpirun killed, or gone before them): SIGTERM, then SIGKILL.
  left=$(job_pids)
  if [ -n "$left" ]; then
    echo "resilient_run: $(echo "$left" | wc -w) process(es) of the run outlived it: SIGTERM, then SIGKILL" >&2
    # shellcheck disable=SC2086  # one pid a word
    kill -TERM $left 2>/dev/null
    local deadline=$((SECONDS + 5))
    while [ -n "$(job_pids)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    left=$(job_pids)
    # shellcheck disable=SC2086  # one pid a word
    [ -n "$left" ] && kill -KILL $left 2>/dev/null
    deadline=$((SECONDS + 10))
    while [ -n "$(job_pids)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  fi
  for _ in $(seq 50); do kill -0 "$reader" 2>/dev/null || break; sleep 0.1; done
  kill "$reader" 2>/dev/null; wait "$reader" 2>/dev/null
  rm -f "$out"
  stepped=0; [ -s "$tmp/stepped" ] && stepped=1
}

# Checkpoints set aside: their run ended in an error before its first step. Known by
# device and inode (a checkpoint saved again under the same name is a new one).
set_aside=" "
identity() { stat -c '%d:%i' "$1" 2>/dev/null; }

# The save dir's checkpoints, newest first, one path a line: step-NNNNNN folders only (a
# glob, so any path works: spaces, quotes, glob characters, a leading dash).
checkpoints() {
  local d
  for d in "$save_dir"/step-*; do
    [[ ${d##*/} =~ ^step-([0-9]+)$ ]] && [ -d "$d" ] && printf '%d\t%s\n' "$((10#${BASH_REMATCH[1]}))" "$d"
  done | sort -n -r -k1,1 | cut -f2-
}

# The newest step-NNNNNN of the save dir that --check-checkpoint accepts ("" if none). One
# at the run's last step is passed over: the run was killed after its last save, in what
# comes after it (--save-params, --export-hf), which the checkpoint before it redoes.
newest_good() {
  local d
  while IFS= read -r d; do
    if [[ $end =~ ^[0-9]+$ ]] && [ "$end" -gt 0 ] && [ $((10#${d##*step-})) -ge "$end" ]; then
      echo "resilient_run: passing over $d: the run's last step (what came after it is redone)" >&2; continue
    fi
    if [[ $set_aside == *" $(identity "$d") "* ]]; then
      echo "resilient_run: passing over $d: set aside (its run ended before its first step)" >&2; continue
    fi
    if "$check" --check-checkpoint "$(safe_path "$d")" >/dev/null 2>"$tmp/check"; then echo "$d"; return; fi
    echo "resilient_run: skipping $d: $(grep -m1 'error' "$tmp/check")" >&2
  done < <(checkpoints)
}

# A path a flag's value can take: one that starts with a dash gets ./ (else it reads as a flag).
safe_path() { case "$1" in -*) echo "./$1" ;; *) echo "$1" ;; esac; }

why() {  # a launch's exit code in words
  local rc=$1
  if [ "$rc" -gt 128 ]; then echo "exit $rc: a process was killed by signal $((rc - 128)), $(kill -l $((rc - 128)) 2>/dev/null)"
  else echo "exit $rc"; fi
}

stopped() {  # exit as the signal asked: 128 + its number
  echo "resilient_run: stopped by SIG$stop: $1; not restarting" >&2
  exit $((128 + $(kill -l "$stop")))
}

attempt=0 launch=("${cmd[@]}") from=""  # from: the checkpoint this launch resumes, chosen here
while true; do
  [ -n "$stop" ] && stopped "before launch $((attempt + 1))"
  start=$SECONDS
  launch_once
  [ -n "$stop" ] && stopped "the run ended after $((SECONDS - start)) s ($(why $rc))"
  [ $rc -eq 0 ] && { [ $attempt -gt 0 ] && echo "resilient_run: finished after $attempt restart(s)"; exit 0; }
  echo "resilient_run: the run failed ($(why $rc)) after $((SECONDS - start)) s" >&2
  if [ -n "$from" ] && [ $stepped -eq 0 ] && [ $rc -le 128 ]; then
    echo "resilient_run: setting $from aside: the run from it ended in an error before its first step" >&2
    set_aside+="$(identity "$from") "
  elif [ $rc -eq 2 ]; then
    echo "resilient_run: not restarting: exit 2 is build/train refusing the command before training (see its error above); it would refuse it again" >&2
    exit $rc
  elif [ $rc -eq 3 ]; then
    echo "resilient_run: not restarting: exit 3 is a diverged run (--max-bad-steps); resumed bit-exactly, it would diverge again" >&2
    exit $rc
  fi
  if [ $attempt -ge "$restarts" ]; then
    echo "resilient_run: giving up after $attempt restart(s) (--restarts $restarts)" >&2
    exit $rc
  fi
  attempt=$((attempt + 1))
  good=$(newest_good)
  [ -n "$stop" ] && stopped "before launch $((attempt + 1))"
  unfinished=""
  for d in "$save_dir"/step-*.tmp; do [ -e "$d" ] && unfinished+="${d##*/} "; done
  if [ -n "$good" ]; then
    step=$((10#${good##*step-}))
    echo "resilient_run: restart $attempt of $restarts: --resume $good (step $step${unfinished:+; unfinished: ${unfinished% }})" >&2
    launch=("${base[@]}" --resume "$(safe_path "$good")") from=$good
  elif [ -n "$(checkpoints)" ]; then
    echo "resilient_run: no checkpoint in $save_dir verifies and resumes (see the lines above): not restarting" >&2
    exit $rc
  else
    echo "resilient_run: restart $attempt of $restarts: from step 0 (no checkpoint in $save_dir yet)" >&2
    launch=("${base[@]}") from=""
  fi
done
