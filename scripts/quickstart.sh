#!/usr/bin/env bash
# scripts/quickstart.sh [train flags] — install what is missing, build, and train the
# default tiny LLaMA on the generated arithmetic data (CPU, or the GPU when present),
# then print samples and how many arithmetic problems the model now answers exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --target train  # only what it runs: the tests build with scripts/test.sh
exec build/train "$@"
