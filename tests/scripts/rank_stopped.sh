#!/usr/bin/env bash
# tests/scripts/rank_stopped.sh — a rank that stops (SIGSTOP) at a given moment must not hang the
# job: start-up rendezvous (MPI_Init, communicator set-up) are bounded by --timeout-s
# (RendezvousDeadline, picotron/distributed.h) and training collectives by Comm's timeout.
#
#   rank_stopped.sh DELAY_S TIMEOUT_S -- mpirun ... -- build/train FLAGS...
#   (rank 1 is stopped DELAY_S seconds after it starts; DELAY_S 0 = before MPI_Init)
# Passes ("stopped rank ok") when the job ends non-zero within TIMEOUT_S + 30 s with an
# error line naming the timeout; prints FAILED otherwise.
set -u
delay=$1 timeout_s=$2; shift 3
mpirun=(); while [ "$1" != "--" ]; do mpirun+=("$1"); shift; done; shift
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat > "$dir/stop_rank_1.sh" <<'WRAP'
#!/bin/sh
# One rank of the job: rank 1 is stopped after STOP_AFTER seconds (0: at once).
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && [ "$STOP_AFTER" = 0 ]; then kill -STOP $$; fi
"$@" &
pid=$!
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then sleep "$STOP_AFTER"; kill -STOP $pid; fi
wait $pid
WRAP
chmod +x "$dir/stop_rank_1.sh"
limit=$((timeout_s + 30))
start=$(date +%s)
STOP_AFTER=$delay timeout -s KILL $limit "${mpirun[@]}" -x STOP_AFTER "$dir/stop_rank_1.sh" "$@" --timeout-s "$timeout_s" \
  > "$dir/out" 2> "$dir/err"
rc=$? elapsed=$(( $(date +%s) - start ))
grep -h "error:" "$dir/err" | head -3
if [ $rc -eq 137 ]; then echo "FAILED: the job hung (killed after $limit s)"; exit 1; fi
if [ $rc -eq 0 ]; then echo "FAILED: exit 0 although rank 1 was stopped"; exit 1; fi
if ! grep -q "timed out after $timeout_s s\|within $timeout_s s (--timeout-s)" "$dir/err"; then
  echo "FAILED: no error line naming the $timeout_s s timeout"; cat "$dir/err"; exit 1
fi
echo "stopped rank ok: exit $rc after $elapsed s"
