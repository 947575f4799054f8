#!/usr/bin/env bash
# scripts/debug.sh — one rank of a run under gdb, the others running normally.
#
#   scripts/debug.sh [-np N] [--rank R | --all] [--stop TECHNIQUE|FILE.gdb] [--ex CMD]... [--no-calls] [--lib-symbols] -- [train flags]
#
#   scripts/debug.sh -np 2 --stop tensor_parallel -- --tp 2 --steps 1
#       rank 0 stops at the row-parallel all-reduce (scripts/gdb/tensor_parallel.gdb says
#       what to print there); type gdb commands; rank 1 waits in the collective meanwhile
#   scripts/debug.sh -np 2 --stop tensor_parallel --ex "print x" --ex finish -- --tp 2 --steps 1
#       the same in batch mode: gdb runs the commands, prints, and lets the run finish
#   scripts/debug.sh -np 2 --all --stop tensor_parallel -- --tp 2 --steps 1
#       every rank under its own gdb, one tmux pane each (the run's output in the first);
#       each stops at the same place (tmux: Ctrl-b o moves between panes)
#
# TECHNIQUE is a file of scripts/gdb/ (data_parallel, tensor_parallel, pipeline_parallel,
# pipeline_parallel_dualpipev, context_parallel, context_parallel_ulysses, zero, zero_hsdp, expert_parallel, fp8): a breakpoint where the Playbook's picture happens and a note of
# what to inspect. Tensors print readably (scripts/picotron_gdb.py). The build is the
# debug build (scripts/build.sh --debug, made if missing). The ranks run with
# --timeout-s 86400 and --threads 1, so that a rank paused in the debugger does not time
# the others out. mpirun gives the debugged rank the terminal's input (--stdin R).
# --no-calls: gdb may not call functions in the program (set may-call-functions off), as
# on a machine where such calls fail; tensors still print, and the tests run this way.
# gdb reads the symbols of the program and of the small libraries only (ReadSmallLibraries in
# scripts/picotron_gdb.py): LibTorch's and CUDA's ~1 million symbols took 20 s of each
# session's 25. --lib-symbols reads them too (backtraces name LibTorch's frames).
# Walkthrough: docs/stepping.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=1 rank=0 all=0 stop="" batch=() train_args=() calls=() symbols=(-iex "set auto-solib-add off")
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -np|--np) np=$2; shift ;;
    --rank) rank=$2; shift ;;
    --all) all=1 ;;
    --stop) stop=$2; shift ;;
    --ex) batch+=(-ex "$2"); shift ;;
    --no-calls) calls=(-iex "set may-call-functions off") ;;
    --lib-symbols) symbols=() ;;
    -h|--help) usage; exit 0 ;;
    --) shift; train_args=("$@"); break ;;
    *) echo "scripts/debug.sh: unknown option '$1' (the train flags go after --; see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "scripts/debug.sh: -np must be a positive number, got '$np'" >&2; exit 2; }
[[ $rank =~ ^[0-9]+$ ]] && [ "$rank" -lt "$np" ] ||
  { echo "scripts/debug.sh: --rank must be in [0, -np $np), got '$rank'" >&2; exit 2; }
command -v gdb >/dev/null || { echo "scripts/debug.sh: gdb is not installed (scripts/setup.sh installs it)" >&2; exit 2; }

gdb_args=(-q -nx ${calls[@]+"${calls[@]}"} ${symbols[@]+"${symbols[@]}"} -x "$root/scripts/picotron_gdb.py")
if [ -n "$stop" ]; then
  file=$stop
  [ -f "$file" ] || file=$root/scripts/gdb/$stop.gdb
  if [ ! -f "$file" ]; then
    known=""; for g in "$root"/scripts/gdb/*.gdb; do known+="$(basename "$g" .gdb) "; done
    echo "scripts/debug.sh: --stop $stop: no such file, nor scripts/gdb/$stop.gdb ($known)" >&2; exit 2
  fi
  gdb_args+=(-x "$file")
  grep '^#' "$file" | sed 's/^# \{0,1\}/[debug] /' >&2
fi
if [ "$all" = 1 ]; then
  [ ${#batch[@]} -eq 0 ] || { echo "scripts/debug.sh: --ex is for one rank (--rank), not --all" >&2; exit 2; }
  command -v tmux >/dev/null || { echo "scripts/debug.sh: --all needs tmux (scripts/setup.sh installs it)" >&2; exit 2; }
  gdb_args=(-iex "set pagination off" "${gdb_args[@]}" -ex continue)  # each gdb attaches to a waiting rank (--wait-for-debugger all), then lets it run
elif [ ${#batch[@]} -gt 0 ]; then
  # Batch: run to the first stop, the commands, then no more stops and the run finishes.
  gdb_args+=(-batch -ex run "${batch[@]}" -ex "delete" -ex continue)
else
  gdb_args+=(-ex run)
fi

train=$root/build-debug/train
if [ ! -x "$train" ]; then
  echo "[debug] no debug build yet: scripts/build.sh --debug --target train" >&2
  "$root/scripts/build.sh" --debug --target train >&2
fi
flags=(--device cpu --timeout-s 86400 --threads 1 ${train_args[@]+"${train_args[@]}"})
if [ "$np" -eq 1 ]; then
  exec gdb "${gdb_args[@]}" --args "$train" "${flags[@]}"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
if [ "$all" = 1 ]; then
  # Every rank prints its pid and waits for a debugger; one tmux pane per rank attaches gdb.
  log=$(mktemp /tmp/picotron-debug.XXXXXX.log)
  mpirun --oversubscribe --bind-to none -np "$np" "$train" "${flags[@]}" --wait-for-debugger all >"$log" 2>&1 &
  for _ in $(seq 600); do
    [ "$(grep -c 'waits for a debugger' "$log")" -ge "$np" ] && break
    kill -0 $! 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  session=picotron-debug-$$
  tmux new-session -d -s "$session" -n ranks "tail -n +1 -f $(printf %q "$log")"
  for r in $(seq 0 $((np - 1))); do
    pid=$(sed -n "s/^\[rank $r\] pid \([0-9]*\) waits.*/\1/p" "$log")
    tmux split-window -t "$session" "$(printf '%q ' gdb "${gdb_args[@]}" -p "$pid")"
    tmux select-layout -t "$session" tiled >/dev/null
  done
  echo "[debug] tmux session $session: rank r's gdb in pane r+1; the run's output in $log" >&2
  [ -n "${PICOTRON_DEBUG_NO_ATTACH:-}" ] && exit 0  # (tests: leave the session detached)
  exec tmux attach -t "$session"
fi
# Each rank runs this line: the chosen one under gdb, the others as they are.
# shellcheck disable=SC2016  # the $ words are the inner shell's
exec mpirun --oversubscribe --bind-to none -np "$np" --stdin "$rank" \
  env PICOTRON_DEBUG_RANK="$rank" sh -c '
    if [ "$OMPI_COMM_WORLD_RANK" = "$PICOTRON_DEBUG_RANK" ]; then exec "$@"; fi
    while [ "$1" != "--args" ]; do shift; done; shift; exec "$@"' \
  sh gdb "${gdb_args[@]}" --args "$train" "${flags[@]}"
