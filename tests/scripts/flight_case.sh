#!/usr/bin/env bash
# tests/scripts/flight_case.sh — one flight recorder case: run a job that goes wrong (or not), then
# scripts/hang_report.py on the files its ranks wrote, and check what the report says.
#
#   flight_case.sh DIR REGEX [seed SRC] [stop|kill|term DELAY_S] -- mpirun ... COMMAND...
#
# seed SRC: SRC's comms-rank*.json are copied into DIR first (files an earlier run left
# there); the report must then also say it set them aside.
# stop / kill / term / segv: rank 1 is stopped (SIGSTOP), killed (SIGKILL), ended (SIGTERM) or
# crashed (SIGSEGV, as a fault would) DELAY_S seconds after the job's
# first step (rank 0's "step 1" line: loading LibTorch alone can take seconds on a loaded
# machine, and a rank killed before the others set up their recorder leaves nothing to read).
# A killed rank's wrapper then stays (at most 20 s), as a node whose process died would: the
# other ranks find out through their own watchdog (--timeout-s), not because mpirun ends them.
# Passes ("flight ok") when the report's output matches REGEX (grep -E); prints FAILED
# otherwise. The job itself is bounded (timeout -s KILL 60).
set -u
dir=$1 regex=$2; shift 2
signal="" delay=0 seed=""
if [ "$1" = seed ]; then seed=$2; shift 2; fi
if [ "$1" = stop ] || [ "$1" = kill ] || [ "$1" = term ] || [ "$1" = segv ]; then signal=$1 delay=$2; shift 2; fi
[ "$1" = "--" ] && shift
rm -rf "$dir" "$dir".rank*.log; mkdir -p "$(dirname "$dir")"
if [ -n "$seed" ]; then
  mkdir -p "$dir" && cp "$seed"/comms-rank*.json "$dir"/ || { echo "FAILED: no files to seed from in $seed"; exit 1; }
fi
wrap=()
if [ -n "$signal" ]; then
  case $signal in stop) sig=STOP ;; kill) sig=KILL ;; segv) sig=SEGV ;; *) sig=TERM ;; esac
  wrap=("$dir.rank1.sh")
  cat > "$dir.rank1.sh" <<WRAP
#!/bin/sh
# One rank of the job, its output in $dir.rank<R>.log: rank 1 gets SIG$sig $delay s after
# rank 0 printed its first step (waiting at most 45 s for it).
r=\${OMPI_COMM_WORLD_RANK:-0}
# The other ranks: the command itself (exec), so that mpirun's signals reach it, as in a real job.
[ "\$r" = 1 ] || exec "\$@" > "$dir.rank\$r.log" 2>&1
"\$@" > "$dir.rank\$r.log" 2>&1 &
pid=\$!
if [ "\$r" = 1 ]; then
  i=0
  until grep -q "^step " "$dir.rank0.log" 2>/dev/null || [ \$i -ge 450 ]; do sleep 0.1; i=\$((i + 1)); done
  sleep $delay; kill -$sig \$pid
  [ $sig = KILL ] && sleep 20
fi
wait \$pid
WRAP
  chmod +x "$dir.rank1.sh"
fi
# Split "mpirun ... -np 2" from the command: the wrapper goes in front of the command.
mpirun=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do mpirun+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
start=$(date +%s)
timeout -s KILL 60 "${mpirun[@]}" "${wrap[@]}" "$@" > "$dir.out" 2>&1
rc=$?
echo "job: exit $rc after $(( $(date +%s) - start )) s; its error lines:"
cat "$dir".rank*.log >> "$dir.out" 2>/dev/null
grep -a "error:\|flight recorder" "$dir.out" | head -6
echo "---- scripts/hang_report.py $dir"
report=$(python3 "$(dirname "$0")/../../scripts/hang_report.py" "$dir" 2>&1)
echo "$report"
echo "----"
if ! grep -Eq -- "$regex" <<<"$report"; then echo "FAILED: the report does not match /$regex/"; exit 1; fi
if [ -n "$seed" ] && ! grep -q "set aside, another run's" <<<"$report"; then
  echo "FAILED: the earlier run's files were not set aside"; exit 1
fi
echo "flight ok: the report matches /$regex/"
