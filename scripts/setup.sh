#!/usr/bin/env bash
# scripts/setup.sh — install what picotron needs, once per machine; print the CMake
# prefix of LibTorch on the last line of stdout (messages go to stderr).
#
#   Debian packages: build tools, OpenMPI, cxxopts, nlohmann-json, Catch2, PCRE2, ccache, gdb, tmux, shellcheck,
#   chromium (the run report's browser test, tests/scripts/report_browser.py) (apt-get, as root or via sudo)
#   LibTorch: reused if you already have it, in this order:
#     1. Torch_DIR or CMAKE_PREFIX_PATH in the environment (a LibTorch you unpacked)
#     2. a python3 that can `import torch`
#     3. otherwise torch==2.11.0 from PyPI into a virtualenv OUTSIDE the clone, at
#        $PICOTRON_CACHE/torch-2.11.0 (default ~/.cache/picotron), so every later
#        clone on this machine reuses it instead of downloading gigabytes again.
#   Into that virtualenv also matplotlib and transformers, for the tests (the plots, the
#   Hugging Face round trips); PICOTRON_EXTRAS=0 skips them (scripts/quickstart.sh, which
#   runs neither; scripts/test.sh adds them later).
set -euo pipefail
log() { echo "[setup] $*" >&2; }

# ---- Debian packages -------------------------------------------------------------
packages=(build-essential cmake ccache python3-venv libopenmpi-dev openmpi-bin libcxxopts-dev nlohmann-json3-dev catch2 libpcre2-dev gdb tmux shellcheck chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  log "Debian packages present"
fi

# ---- LibTorch --------------------------------------------------------------------
torch_version=2.11.0
find_config() {  # a directory that holds TorchConfig.cmake, below one of the given prefixes
  for d in "$@"; do
    [ -n "$d" ] || continue
    for c in "$d" "$d/share/cmake/Torch" "$d/Torch"; do
      [ -f "$c/TorchConfig.cmake" ] && { echo "$d"; return 0; }
    done
  done
  return 1
}
if [ -n "${Torch_DIR:-}" ] && [ -f "$Torch_DIR/TorchConfig.cmake" ]; then
  log "using LibTorch from Torch_DIR=$Torch_DIR"
  echo "$Torch_DIR"; exit 0
fi
prefix_path=${CMAKE_PREFIX_PATH:-}  # may be unset on a fresh machine (set -u)
# shellcheck disable=SC2086  # one folder a word: the path's entries
if prefix=$(find_config ${prefix_path//:/ }); then
  log "using LibTorch from CMAKE_PREFIX_PATH ($prefix)"
  echo "$prefix"; exit 0
fi
if prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null); then
  log "using the torch of $(command -v python3) ($(python3 -c 'import torch; print(torch.__version__)'))"
  echo "$prefix"; exit 0
fi
cache=${PICOTRON_CACHE:-$HOME/.cache/picotron}
venv=$cache/torch-$torch_version
index=()
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  # The PyPI wheel is built for CUDA 13 and its CMake config needs a CUDA toolkit to
  # build against. Without one, take the CPU-only build of the same version.
  venv=$cache/torch-$torch_version-cpu
  index=(--index-url https://download.pytorch.org/whl/cpu)
  log "no CUDA toolkit (nvcc) found: using the CPU-only torch build"
fi
# --no-compile: no .pyc files at install time (a third of torch's install on 2 cores;
# Python writes those it needs when it first imports a module).
pip_install() { "$venv/bin/pip" install -q --progress-bar off --no-compile --disable-pip-version-check "$@" >&2; }
# Whether modules are installed, without importing them (importing torch, matplotlib and
# transformers took 23 s of every build on 2 cores).
has() { "$venv/bin/python" -c 'import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)' "$@" 2>/dev/null; }
if ! has torch; then
  log "installing torch==$torch_version into $venv (a few GB, once per machine)"
  mkdir -p "$cache"
  python3 -m venv "$venv" >&2
  pip_install "${index[@]}" "torch==$torch_version" || {
    log "could not install torch==$torch_version; install LibTorch yourself and set Torch_DIR"; exit 1; }
fi
extras=${PICOTRON_EXTRAS:-1}
# matplotlib draws the pictures (scripts/plot_*.py); their tests run when it is there.
if [ "$extras" != 0 ] && ! has matplotlib; then
  log "installing matplotlib into $venv (for scripts/plot_*.py)"
  pip_install matplotlib || log "could not install matplotlib: the plot tests are skipped"
fi
# transformers and safetensors: the tests that import and export Hugging Face folders
# (tests/scripts/hf_roundtrip.py) check picotron against the real library.
if [ "$extras" != 0 ] && ! has transformers safetensors; then
  log "installing transformers and safetensors into $venv (for tests/scripts/hf_roundtrip.py)"
  pip_install "transformers==4.57.6" "safetensors" ||
    log "could not install transformers: the Hugging Face tests are skipped"
fi
log "using torch $torch_version from $venv"
# torch.utils.cmake_prefix_path, without importing torch: <the torch package>/share/cmake
"$venv/bin/python" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "share", "cmake"))' 
