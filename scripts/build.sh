#!/usr/bin/env bash
# scripts/build.sh [--debug] [--target T]... [extra cmake args] — set up (once) and build.
#
#   scripts/build.sh                    everything (train, tests, benches) into build/
#   scripts/build.sh --target train     only build/train (what scripts/quickstart.sh runs)
#   scripts/build.sh --debug            a debug build into build-debug/ (symbols, no
#                                       optimisation of the project's code; LibTorch stays
#                                       as shipped), beside the release build/, for gdb
#   scripts/build.sh -DPICOTRON_CUDA=OFF   any other argument goes to cmake's configure
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build type=Release targets=() cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) dir=build-debug type=Debug ;;
    --target) [ $# -ge 2 ] || { echo "scripts/build.sh: --target needs a target name (train, unit_tests, ...)" >&2; exit 2; }
              targets+=(--target "$2"); shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) cmake_args+=("$1") ;;
  esac
  shift
done
prefix=$(scripts/setup.sh | tail -n 1)
# ccache: paths relative to the checkout, so another copy of the repository (a course copy
# made by scripts/assignment) reuses the objects of every file it did not change.
# The debug build too: its debug info names the sources /picotron-src/... (CMakeLists.txt),
# not this checkout's folder, so the directory need not be in the hash.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# Room for several builds (release, debug, course copies, worktrees: each precompiled header
# alone is ~0.7 GB): at ccache's default 5 GB, a session's builds evicted each other and a
# fresh clone's release build missed most of the cache (619 s instead of ~155 s).
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-20G}
# Compile for Hopper (sm_90) unless the user chose: TorchConfig otherwise targets many GPUs.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
cmake -S . -B "$dir" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE="$type" ${cmake_args[@]+"${cmake_args[@]}"} \
  >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
grep -E "picotron:" "$dir.configure.log" || true
start=$(date +%s)
cmake --build "$dir" -j "$(nproc)" ${targets[@]+"${targets[@]}"}
echo "[build] $type build in $dir/ done in $(( $(date +%s) - start )) s"
