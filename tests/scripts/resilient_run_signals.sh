#!/usr/bin/env bash
# shellcheck disable=SC2206,SC2086  # MPIEXEC may hold words; pid lists, one pid a word
# resilient_run_signals.sh WORKDIR signals|refusals -- TRAIN FLAGS...
#   (2 ranks, dp 2; FLAGS: a run of many steps that logs every step)
#
# What a scheduler's cancel does to scripts/resilient_run.sh, under mpirun with 2 ranks.
# signals: each of SIGINT, SIGTERM and SIGHUP, sent once to the launcher's process group
#   (as Ctrl-C or a scheduler does) and once to the launcher alone, after the run's first
#   step line: the launcher exits within 20 s with 128 + the signal's number, the run
#   ended on the signal itself (not on the launcher's SIGKILL after --grace), nothing was
#   restarted, and no process whose command line holds the case's own --save-dir is left.
#   And mpirun killed with SIGKILL (its ranks are not told): no rank outlives the launcher.
# refusals: what is not restarted, or not from the same checkpoint again:
#   refused    a refused flag (--lr 1e-3x): exit 2 at once, no restart;
#   set_aside  the newest checkpoint verifies but --resume refuses it (another model's,
#              copied in): after a rank is killed, the launcher tries it once, sets it
#              aside, and finishes from the one before it.
# The launcher is started in a session of its own (pgid = its pid) with INT, TERM and HUP
# at their defaults: a background job of a non-interactive shell starts with SIGINT
# ignored, which bash could not trap. Prints "resilient PART ok" or "FAILED: ...".
#
# Test: ctest -R resilient_run   (reliability.resilient_run_signals, _refusals)
set -uo pipefail
work=$1 part=$2; shift 2; [ "$1" = "--" ] && shift
train=$1
here=$(cd "$(dirname "$0")/../.." && pwd)
mpirun=(${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np 2)
rm -rf "$work" && mkdir -p "$work"
failed=0
fail() { echo "FAILED: $*"; failed=1; }

start() {  # start NAME LAUNCHER-OPTIONS... -- FLAGS...: the launcher, in its own session; sets pid
  local name=$1; shift
  local opts=(); while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
  perl -MPOSIX -e '$SIG{$_} = "DEFAULT" for qw(INT TERM HUP); POSIX::setsid(); exec @ARGV or die "exec: $!"' \
    "$here/scripts/resilient_run.sh" "${opts[@]}" -- "${mpirun[@]}" "$@" --save-dir "$work/$name" \
    >"$work/$name.log" 2>&1 &
  pid=$!
}
left() { pgrep -f -- "--save-dir $work/$1( |\$)" | wc -l; }  # processes of case $1's run
wait_for() {  # wait_for NAME REGEX SECONDS: until the case's log has a line matching REGEX
  local deadline=$((SECONDS + $3))
  while ! grep -qE "$2" "$work/$1.log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}
ended() {  # ended SECONDS: the launcher has exited within SECONDS; sets rc
  local deadline=$((SECONDS + $1))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { kill -KILL "$pid"; wait "$pid" 2>/dev/null; rc=timeout; return 1; }
    sleep 0.05
  done
  wait "$pid"; rc=$?
}

signals() {
  for sig in INT TERM HUP; do
    for to in group launcher; do
      name=${sig}_to_$to
      start "$name" --grace 15 -- "$@"
      wait_for "$name" '^step +1/' 60 || { tail -5 "$work/$name.log"; fail "$name: the run never showed step 1"; continue; }
      t0=$(date +%s%N)
      if [ $to = group ]; then kill -s "$sig" -- "-$pid"; else kill -s "$sig" "$pid"; fi
      ended 20; ms=$((($(date +%s%N) - t0) / 1000000))
      n=$(left "$name")
      echo "SIG$sig to the $to: exit $rc after $ms ms; restarts $(grep -c '^resilient_run: restart' "$work/$name.log"), processes left $n"
      grep '^resilient_run:' "$work/$name.log" | sed 's/^/  /'
      want=$((128 + $(kill -l "$sig")))
      [ "$rc" = "$want" ] || fail "$name: the launcher exited $rc, not $want"
      ! grep -q '^resilient_run: restart' "$work/$name.log" || fail "$name: the launcher restarted the run"
      grep -q "^resilient_run: stopped by SIG$sig" "$work/$name.log" || fail "$name: no line saying it stopped on SIG$sig"
      ! grep -q 'SIGKILL to it' "$work/$name.log" || fail "$name: the run did not end on SIG$sig (it needed the SIGKILL)"
      [ "$n" -eq 0 ] || { pgrep -af -- "--save-dir $work/$name( |\$)"; fail "$name: $n process(es) of the run outlived the launcher"; }
    done
  done
  # mpirun itself killed (SIGKILL, nothing forwarded to its ranks): with --restarts 0 the
  # launcher ends, and the ranks mpirun left behind end with it.
  start mpirun_killed --restarts 0 -- "$@"
  if wait_for mpirun_killed '^step +1/' 60; then
    rank=$(pgrep -f -- "^[^ ]*train .*--save-dir $work/mpirun_killed( |\$)" | head -1)
    parent=$(ps -o ppid= -p "${rank:-0}" | tr -d ' ')  # mpirun (or mpiexec): the rank's parent
    [ -n "$parent" ] && kill -KILL "$parent" || fail "mpirun_killed: no rank found to kill the mpirun of"
    ended 30
    n=$(left mpirun_killed)
    echo "mpirun killed: exit $rc; processes left $n"
    grep '^resilient_run:' "$work/mpirun_killed.log" | sed 's/^/  /'
    [ "$rc" = 137 ] || fail "mpirun_killed: the launcher exited $rc, not 137"
    [ "$n" -eq 0 ] || { pgrep -af -- "--save-dir $work/mpirun_killed( |\$)"; fail "mpirun_killed: $n process(es) of the run outlived the launcher"; }
  else
    tail -5 "$work/mpirun_killed.log"; fail "mpirun_killed: the run never showed step 1"
  fi
}

refusals() {
  # A refused flag: build/train exits 2 on every rank, mpirun passes the 2 on; not restarted.
  start refused -- "$@" --lr 1e-3x
  ended 60
  echo "a refused flag: exit $rc; restarts $(grep -c '^resilient_run: restart' "$work/refused.log")"
  grep '^resilient_run:' "$work/refused.log" | sed 's/^/  /'
  [ "$rc" = 2 ] || fail "refused: the launcher exited $rc, not 2"
  ! grep -q '^resilient_run: restart' "$work/refused.log" || fail "refused: a refused flag was restarted"
  grep -q '^resilient_run: not restarting: exit 2' "$work/refused.log" || fail "refused: no line saying why it stops"

  # A checkpoint that verifies but does not resume: step-000004 of a 3-layer model copied
  # into the save dir of a 2-layer run that has step-000002. The first launch resumes
  # from step-000002 (given by hand) and a rank is killed after its first step; the launcher
  # picks step-000004 (it verifies), the run refuses it before any step, the launcher sets
  # it aside and resumes from step-000002 again, and the run finishes.
  d=$work/set_aside
  "${mpirun[@]}" "$@" --stop-at-step 2 --save-every 2 --save-dir "$d" >"$work/set_aside_prep.log" 2>&1 &&
    "${mpirun[@]}" "$@" --num-hidden-layers 3 --stop-at-step 4 --save-every 4 --save-dir "$work/other" >>"$work/set_aside_prep.log" 2>&1 &&
    cp -r "$work/other/step-000004" "$d/" && "$train" --check-checkpoint "$d/step-000004" >>"$work/set_aside_prep.log" 2>&1 ||
    { tail -5 "$work/set_aside_prep.log"; fail "set_aside: could not make the two checkpoints (or the foreign one does not verify)"; }
  start set_aside --grace 15 -- "$@" --save-every 1000 --resume "$d/step-000002" --stop-at-step 200
  if wait_for set_aside '^step +[0-9]+/' 60; then
    rank=$(pgrep -f -- "^[^ ]*train .*--save-dir $d( |\$)" | head -1)
    [ -n "$rank" ] && kill -KILL "$rank"
  fi
  ended 90
  echo "a checkpoint that verifies but does not resume: exit $rc"
  grep '^resilient_run:' "$work/set_aside.log" | sed 's/^/  /'
  [ "$rc" = 0 ] || fail "set_aside: the launcher exited $rc, not 0"
  grep -q "^resilient_run: setting .*step-000004 aside" "$work/set_aside.log" || fail "set_aside: step-000004 was not set aside"
  [ "$(grep -c '^resilient_run: restart.*--resume .*step-000004' "$work/set_aside.log")" -eq 1 ] || fail "set_aside: step-000004 was not tried exactly once"
  grep -q -- "^resilient_run: restart 2 of 3: --resume .*step-000002" "$work/set_aside.log" || fail "set_aside: no fallback to step-000002"
}

case "$part" in
  signals|refusals) "$part" "$@" ;;
  *) echo "FAILED: PART is signals or refusals, got '$part'"; exit 2 ;;
esac
[ $failed -eq 0 ] && echo "resilient $part ok"
exit $failed
