#!/usr/bin/env bash
# scripts/quickstart.sh [train flags] — install what is missing, build, and train the
# default tiny LLaMA on the generated arithmetic data (CPU, or the GPU when present),
# then print samples and how many arithmetic problems the model now answers exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what it runs, as fast as a cold machine allows:
#  - torch alone into the virtualenv (PICOTRON_EXTRAS=0: the tests' matplotlib and
#    transformers come with scripts/test.sh);
#  - build/train only, in the fast build (-DPICOTRON_FAST_BUILD=ON, CMakeLists.txt: a few
#    large files instead of ~60, each of which would load the precompiled LibTorch header
#    again, at -O1);
#  - without a GPU, without the CUDA parts (NCCL, the fused kernels: a third of the build,
#    never run on a CPU). A GPU machine builds them here too, and scripts/test.sh and
#    scripts/build.sh build them wherever a CUDA toolkit is found.
export PICOTRON_EXTRAS=${PICOTRON_EXTRAS:-0}
cuda=ON
if ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=OFF
  echo "[quickstart] no GPU found: building build/train without the CUDA parts (-DPICOTRON_CUDA=OFF)"
fi
scripts/build.sh --target train -DPICOTRON_CUDA=$cuda -DPICOTRON_FAST_BUILD=ON
exec build/train "$@"
