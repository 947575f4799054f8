#!/usr/bin/env bash
# scripts/build.sh [extra cmake args] — set up (once) and build into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(scripts/setup.sh | tail -n 1)
# Compile for Hopper (sm_90) unless the user chose: TorchConfig otherwise targets many GPUs.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
cmake -S . -B build -DCMAKE_PREFIX_PATH="$prefix" "$@" >build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
grep -E "picotron:" build.configure.log || true
start=$(date +%s)
cmake --build build -j "$(nproc)"
echo "[build] done in $(( $(date +%s) - start )) s"
