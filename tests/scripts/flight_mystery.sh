#!/usr/bin/env bash
# tests/scripts/flight_mystery.sh DIR FLIGHT_CASES — the flight recorder assignment's hung job
# (ctest: flight.mystery): three ranks of `FLIGHT_CASES mystery` write their files in DIR.
set -uo pipefail
dir=$1 cases=$2
rm -rf "$dir"
timeout -s KILL 60 "${MPIEXEC:-mpirun}" --oversubscribe --bind-to none -np 3 "$cases" mystery "$dir" --timeout-s 2
ls "$dir"
