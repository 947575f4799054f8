#!/usr/bin/env bash
# shellcheck disable=SC2016  # regular expressions with a literal $
# tests/scripts/debug_attach.sh ROOT — attaching a debugger to a rank that is already running, the
# way VS Code's "attach to a rank" (scripts/vscode/launch.json) and scripts/debug.sh --all
# work (ctest: debug.attach_to_rank): rank 1 of a --tp 2 run waits (--wait-for-debugger 1);
# gdb attaches by pid in batch mode, stops at the tensor-parallel breakpoint, prints the
# partial output, detaches; then the run must finish normally. As scripts/debug.sh --all
# attaches: only the small libraries' symbols (scripts/picotron_gdb.py reads them at attach). gdb may not call into the
# program (set may-call-functions off): the printer reads the tensor itself.
# Needs the debug build (scripts/build.sh --debug --target train): SKIPPED without it.
set -u
root=$1
train=$root/build-debug/train
[ -x "$train" ] || { echo "SKIPPED: no debug build (scripts/build.sh --debug --target train)"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
log=debug_attach_run.log
mpirun --oversubscribe --bind-to none -np 2 "$train" --device cpu --threads 1 --tp 2 --steps 1 --generate 0 \
  --timeout-s 600 --wait-for-debugger 1 >"$log" 2>&1 &
run=$!
pid=""
for _ in $(seq 600); do
  pid=$(sed -n 's/^\[rank 1\] pid \([0-9]*\) waits for a debugger.*/\1/p' "$log")
  [ -n "$pid" ] && break
  kill -0 $run 2>/dev/null || break
  sleep 0.1
done
[ -n "$pid" ] || { cat "$log"; echo "FAILED: rank 1 never said it waits for a debugger"; exit 1; }
echo "rank 1 waits with pid $pid; attaching gdb"
gdb -q -nx -batch -iex "set may-call-functions off" -iex "set auto-solib-add off" -p "$pid" -x "$root/scripts/picotron_gdb.py" -x "$root/scripts/gdb/tensor_parallel.gdb" \
  -ex continue -ex "print x" -ex delete -ex detach >debug_attach_gdb.log 2>&1
wait $run
rc=$?
grep -E '^\$1|Breakpoint 1,' debug_attach_gdb.log || true
[ $rc = 0 ] || { cat "$log"; echo "FAILED: the run ended with $rc after the debugger detached"; exit 1; }
grep -q 'debugger attached' "$log" || { cat "$log"; echo "FAILED: rank 1 did not see the debugger"; exit 1; }
grep -qE '^\$1 = \[16, 128, 128\] Float cpu' debug_attach_gdb.log ||
  { cat debug_attach_gdb.log; echo "FAILED: no partial output printed at the breakpoint"; exit 1; }
echo "attached to rank 1, stopped at the all-reduce, printed its partial output; the run finished"
