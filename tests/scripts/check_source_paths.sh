#!/usr/bin/env bash
# tests/scripts/check_source_paths.sh SOURCE_DIR BUILD_DIR — every file path the program prints is
# relative to the repository root and names a file of the checkout that built it, also when
# the compiler cache serves an object made in another checkout (CMakeLists.txt:
# -fmacro-prefix-map; scripts/build.sh shares ccache between checkouts: CCACHE_BASEDIR,
# CCACHE_NOHASHDIR).
#
# 1. Every C++ compile command of the build carries -fmacro-prefix-map=SOURCE_DIR/=.
# 2. Two clones, one compiler cache: a probe that prints __FILE__ and a CallSite-style
#    __builtin_FILE() default argument (a probe source, written into each clone) is compiled
#    in clone A, then in clone B (a cache hit), both as a file of its own and through a
#    unity file that #includes it by its absolute path (PICOTRON_FAST_BUILD), with the
#    flags of step 1. B's program must print B's relative path, never A's folder, never an
#    absolute one.
set -uo pipefail
src=$1 build=$2
fail=0
python3 - "$src" "$build/compile_commands.json" <<'PY' || fail=1
import json, sys
src, db = sys.argv[1].rstrip("/"), json.load(open(sys.argv[2]))
want = f"-fmacro-prefix-map={src}/="
cxx = [c for c in db if c["file"].endswith((".cpp", ".cxx", ".cc"))]
missing = [c["file"] for c in cxx if want not in c.get("command", " ".join(c.get("arguments", [])))]
print(f"{len(cxx)} C++ compile commands, {len(missing)} without {want}")
for f in missing[:5]: print("  missing in", f)
sys.exit(1 if missing or not cxx else 0)
PY
ccache=$(command -v ccache) || { echo "no ccache here: step 2 needs it"; echo FAILED; exit 1; }
probe=site_probe.cpp  # the same file in both clones
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for clone in A B; do
  mkdir -p "$work/$clone/tests" "$work/$clone/build"
  cat > "$work/$clone/tests/$probe" <<'CPP'
#include <cstdio>
static const char* site(const char* file = __builtin_FILE()) { return file; }  // as CallSite::here()
int main() { std::printf("%s %s\n", site(), __FILE__); }
CPP
  echo "#include \"$work/$clone/tests/$probe\"" > "$work/$clone/build/unity_0_cxx.cxx"
done
export CCACHE_DIR=$work/cache CCACHE_NOHASHDIR=1
for form in unity_0_cxx.cxx "../tests/$probe"; do
  for clone in A B; do
    file=$work/$clone/build/$form
    (cd "$work/$clone/build" && CCACHE_BASEDIR=$work/$clone "$ccache" g++ -fmacro-prefix-map="$work/$clone/=" \
       -c "$(realpath "$file")" -o probe.o && g++ probe.o -o probe) || { echo "could not build the probe"; fail=1; continue; }
    printed=$("$work/$clone/build/probe")
    for path in $printed; do
      rel=${path#../}
      if [ "${path:0:1}" = / ] || [ ! -f "$work/$clone/$rel" ]; then
        echo "WRONG: clone $clone ($form) printed $path: not a path of its own checkout relative to its root"; fail=1
      fi
    done
    echo "clone $clone, $(basename "$form"): prints $printed"
  done
done
echo "compiler cache: $("$ccache" --print-stats 2>/dev/null | awk -F'\t' '$1 ~ /^(direct|preprocessed)_cache_hit$/ {h += $2} END {print h + 0}') hits of 4 compiles"
[ $fail = 0 ] && echo "SOURCE PATHS OK" || { echo FAILED; exit 1; }
