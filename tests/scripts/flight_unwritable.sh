#!/usr/bin/env bash
# tests/scripts/flight_unwritable.sh FLIGHT_CASES — the timeout line names the flight recorder's files
# only when they were written: a hang (both ranks send first) with --flight-recorder in a
# folder that cannot be made (under a regular file) says that the file could not be written,
# and never "every rank's last communications are in DIR" (ctest: flight.unwritable_folder).
set -uo pipefail
cases=$1
mpirun=${MPIEXEC:-mpirun}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
touch "$work/a_file"
timeout -s KILL 60 "$mpirun" --oversubscribe --bind-to none -np 2 "$cases" sends_first "$work/a_file/flight" --timeout-s 2 \
  >"$work/out" 2>&1
grep -a "error:\|flight recorder" "$work/out" | head -6
if grep -q "communications are in $work/a_file/flight" "$work/out"; then
  echo "FAILED: the timeout line points at files that were not written"; exit 1
fi
if grep -q "could not write its file in $work/a_file/flight" "$work/out" && grep -q "flight recorder: could not write" "$work/out"; then
  echo "flight unwritable ok"
else
  echo "FAILED: no line says the flight recorder could not write its file"; cat "$work/out"; exit 1
fi
