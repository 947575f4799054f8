#!/usr/bin/env bash
# scripts/quickstart.sh [train flags] — install what is missing, build, and train the
# default tiny LLaMA on the generated arithmetic data (CPU, or the GPU when present),
# then print samples and how many arithmetic problems the model now answers exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what it runs (the tests build with scripts/test.sh). Without a GPU, without the
# CUDA parts (NCCL, the fused kernels: a third of the build, never run on a CPU); a GPU
# machine builds them (scripts/test.sh and scripts/build.sh build them wherever a CUDA
# toolkit is found).
cuda=ON
if ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=OFF
  echo "[quickstart] no GPU found: building build/train without the CUDA parts (-DPICOTRON_CUDA=OFF)"
fi
scripts/build.sh --target train -DPICOTRON_CUDA=$cuda
exec build/train "$@"
