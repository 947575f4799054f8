#!/usr/bin/env bash
# scripts/test.sh [ctest args] — install what is missing, build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
echo "[test] build + tests in $(( $(date +%s) - start )) s"
