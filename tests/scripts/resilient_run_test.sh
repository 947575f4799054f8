#!/usr/bin/env bash
# shellcheck disable=SC2206,SC2086  # MPIEXEC may hold words; pid lists, one pid a word
# resilient_run_test.sh WORKDIR -- TRAIN FLAGS...   (2 ranks, dp 2; FLAGS give --steps)
#
# One run under scripts/resilient_run.sh --restarts 3 whose ranks this script kills three
# times from outside (SIGKILL to one train process, found among the launcher's
# descendants by its OMPI_COMM_WORLD_RANK), each at a step it watches for in the step
# lines; the launcher resumes from the newest checkpoint that verifies. The final
# parameters (--save-params) must equal those of an uninterrupted run, bit for bit.
# Which rank and at which step come from a seed printed first: RESILIENT_SEED=S reruns
# the same kills (the step is when the watcher sees it: the same, give or take a step).
# Prints "resilient run ok" or "FAILED: ...".
set -uo pipefail
work=$1; shift; [ "$1" = "--" ] && shift
here=$(cd "$(dirname "$0")/../.." && pwd)
mpirun=(${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np 2)
seed=${RESILIENT_SEED:-$(( $(date +%s%N) % 100000 ))}
echo "resilient test seed: $seed; to rerun these kills: RESILIENT_SEED=$seed ctest -R resilient_run"
RANDOM=$seed
rm -rf "$work" && mkdir -p "$work"

# Three kills: a step in each of three windows, and a rank.
k1=$((3 + RANDOM % 4)); k2=$((k1 + 3 + RANDOM % 4)); k3=$((k2 + 3 + RANDOM % 4))
kills=("$k1:$((RANDOM % 2))" "$k2:$((RANDOM % 2))" "$k3:$((RANDOM % 2))")
echo "plan: kill (step:rank) ${kills[*]}"

"${mpirun[@]}" "$@" --save-params "$work/straight.params" >"$work/straight.log" 2>&1 ||
  { tail -5 "$work/straight.log"; echo "FAILED: the uninterrupted run"; exit 1; }

"$here/scripts/resilient_run.sh" --restarts 3 -- "${mpirun[@]}" "$@" --save-dir "$work/ckpt" --save-every 2 \
  --log-every 1 --save-params "$work/resilient.params" >"$work/resilient.log" 2>&1 &
launcher=$!

descendants() {  # every process below pid $1
  local c
  for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done
}
rank_pid() {  # the train process of rank $1 under the launcher
  local p
  for p in $(descendants $launcher); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = train ] || continue
    tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}

for i in 0 1 2; do
  step=${kills[i]%:*} rank=${kills[i]#*:}
  # the step line of this launch (after the i-th restart line), then that rank's pid
  # (the pid first, so that the kill follows the step line at once)
  pid="" hit="" deadline=$((SECONDS + 40))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 $launcher 2>/dev/null || break
    [ -n "$pid" ] && [ -d /proc/$pid ] || pid=$(rank_pid "$rank")
    seen=$(awk -v n=$i '/^resilient_run: restart/ {r++} r == n && /^step +[0-9]+\// {split($2, s, "/"); last = s[1]} END {print last + 0}' "$work/resilient.log")
    [ -n "$pid" ] && [ "$seen" -ge "$step" ] && { hit=1; break; }
    sleep 0.02
  done
  [ -n "$hit" ] || { tail -20 "$work/resilient.log"; echo "FAILED: launch $((i + 1)) never showed step $step with rank $rank alive"; kill $launcher 2>/dev/null; exit 1; }
  kill -KILL "$pid"
  echo "kill $((i + 1)): rank $rank (pid $pid) with step $seen done (planned: $step)"
  # wait for the launcher to notice and restart (the next launch's line)
  while kill -0 $launcher 2>/dev/null && [ "$(grep -c '^resilient_run: restart' "$work/resilient.log")" -le $i ]; do sleep 0.05; done
done
wait $launcher; rc=$?
grep '^resilient_run:' "$work/resilient.log"
[ $rc -eq 0 ] || { tail -20 "$work/resilient.log"; echo "FAILED: the resilient run exited $rc"; exit 1; }
[ "$(grep -c '^resilient_run: restart' "$work/resilient.log")" -eq 3 ] || { echo "FAILED: not three restarts"; exit 1; }
cmp "$work/straight.params" "$work/resilient.params" ||
  { echo "FAILED: the final parameters differ from the uninterrupted run's"; exit 1; }
echo "final parameters equal the uninterrupted run's, bit for bit ($(stat -c %s "$work/resilient.params") bytes)"
echo "resilient run ok"
