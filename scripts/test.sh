#!/usr/bin/env bash
# scripts/test.sh [ctest args] — install what is missing, build (release, and the debug
# trainer), and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/build.sh -DPICOTRON_CUDA=ON -DPICOTRON_FAST_BUILD=ON  # the CUDA parts wherever a toolkit is found (quickstart.sh may have left them off); the fast cold build (CMakeLists.txt)
# The debug build of the trainer (build-debug/train): ctest -L debug steps through it in gdb
# (docs/stepping.md), on the CPU, so without the CUDA parts (with them it took 725 s cold
# on 2 cores; ccache makes a rebuild short).
scripts/build.sh --debug --target train -DPICOTRON_CUDA=OFF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# (-LE assignments_build: the course-copy build of tests/assignment_wrong_fills.py, ~10 minutes.)
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE assignments_build "$@"
echo "[test] build + tests in $(( $(date +%s) - start )) s"
