#!/usr/bin/env bash
# tests/scripts/report_case.sh DIR PANELS SCREENSHOT [REFERENCE] -- COMMAND...   (tests/cmake/report_tests.cmake)
#
# Runs COMMAND --run-dir DIR (a fresh DIR), draws its report with scripts/run_report.py
# (against the run directory REFERENCE when given: the curves overlaid), and opens it in
# headless Chromium (tests/scripts/report_browser.py): the panels PANELS and no others, no console
# error, no request outside the file, the numbers shown equal the run's files; SCREENSHOT
# ("-": none) gets the page's picture. Prints the report's size and the time it took.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1 panels=$2 shot=$3; shift 3
reference=""
if [ "$1" != "--" ]; then reference=$1; shift; fi
[ "$1" = "--" ] && shift
rm -rf "$dir"
"$@" --run-dir "$dir" > "$dir.log" 2>&1 || { cat "$dir.log"; echo "FAIL: the run exited non-zero"; exit 1; }
start=$(date +%s%N)
python3 "$here/../../scripts/run_report.py" "$dir" ${reference:+--reference "$reference"}
echo "report: $(stat -c %s "$dir/report.html") bytes in $(( ($(date +%s%N) - start) / 1000000 )) ms"
args=(--panels "$panels")
[ "$shot" != "-" ] && args+=(--screenshot "$shot")
[ -n "$reference" ] && args+=(--reference "$reference")
python3 "$here/report_browser.py" "$dir" "${args[@]}"
