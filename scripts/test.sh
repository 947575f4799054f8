#!/usr/bin/env bash
# scripts/test.sh [ctest args] — install what is missing, build (release, and the debug
# trainer), and run every test; at the end, the build and test times and the ten slowest
# tests (docs/testing.md keeps the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/build.sh -DPICOTRON_CUDA=ON -DPICOTRON_FAST_BUILD=ON  # the CUDA parts wherever a toolkit is found (quickstart.sh may have left them off); the fast cold build (CMakeLists.txt)
# The debug build of the trainer (build-debug/train): ctest -L debug steps through it in gdb
# (docs/stepping.md), on the CPU, so without the CUDA parts, and as a unity build (-O0:
# PICOTRON_FAST_BUILD lowers only Release's -O; gdb still sees each source file and line).
# ccache serves it to a fresh clone too (its debug info names /picotron-src, not the folder).
scripts/build.sh --debug --target train -DPICOTRON_CUDA=OFF -DPICOTRON_FAST_BUILD=ON
built=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# (-LE assignments_build: the course-copy builds of tests/assignment_wrong_fills.py, ~15 minutes.)
rc=0
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE assignments_build --output-junit "$PWD/build/ctest-junit.xml" "$@" || rc=$?
end=$(date +%s)
python3 - build/ctest-junit.xml <<'PY' || true
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time", 0) or 0), c.get("name")) for c in ET.parse(sys.argv[1]).getroot().iter("testcase")]
print(f"[test] the ten slowest of {len(cases)} tests (seconds):")
for t, name in sorted(cases, reverse=True)[:10]:
    print(f"  {t:7.1f}  {name}")
PY
echo "[test] builds $(( built - start )) s, tests $(( end - built )) s: $(( end - start )) s in all"
exit $rc
