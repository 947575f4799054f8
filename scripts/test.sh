#!/usr/bin/env bash
# scripts/test.sh [ctest args] — install what is missing, build, and run every test; at the
# end, the build and test times and the ten slowest tests (docs/testing.md keeps the figures).
#
# One build serves every test: build-debug/, the debug build (-O0 with symbols) that the
# stepping tests walk through in gdb, built whole (train, tests, benches) as a unity build.
# The other tests run its train too: a step of the tiny models takes ~28% longer than at -O1,
# and one build replaces two (a release build of everything and a debug trainer: 904 s and
# 473 s cold on 2 cores, against 432 s; docs/testing.md).
# The CUDA parts follow the machine. With a GPU they are built and the GPU tests run. Without
# one they are left out of the programs (which then load LibTorch's CPU library alone, not
# cuBLAS and cuDNN: 0.4 s less for every process, 4-5 s for every gdb) and, where a CUDA
# toolkit is found, compiled all the same, linked into nothing (PICOTRON_CUDA_CHECK: the
# kernels, the NCCL path, the CUDA code of the step, the kernels' ops, startup, the GPU tests).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
cuda=OFF
if nvidia-smi -L >/dev/null 2>&1; then cuda=ON; fi
scripts/build.sh --debug -DPICOTRON_CUDA=$cuda -DPICOTRON_CUDA_CHECK=ON -DPICOTRON_FAST_BUILD=ON
if [ $cuda = OFF ]; then
  if grep -q "compiled, not linked (PICOTRON_CUDA_CHECK): ON" build-debug.configure.log; then
    echo "[test] no GPU here: the CUDA parts were compiled, not linked, and their tests do not run"
  else
    echo "[test] no GPU and no CUDA toolkit (with NCCL and a CUDA LibTorch) here: the CUDA parts were not compiled"
  fi
fi
built=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# (-LE assignments_build: the course-copy builds of tests/scripts/assignment_wrong_fills.py, ~15 minutes.)
rc=0
ctest --test-dir build-debug --output-on-failure -j "$(nproc)" -LE assignments_build \
  --output-junit "$PWD/build-debug/ctest-junit.xml" "$@" || rc=$?
end=$(date +%s)
python3 - build-debug/ctest-junit.xml <<'PY' || true
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time", 0) or 0), c.get("name")) for c in ET.parse(sys.argv[1]).getroot().iter("testcase")]
print(f"[test] the ten slowest of {len(cases)} tests (seconds):")
for t, name in sorted(cases, reverse=True)[:10]:
    print(f"  {t:7.1f}  {name}")
PY
echo "[test] builds $(( built - start )) s, tests $(( end - built )) s: $(( end - start )) s in all"
exit $rc
