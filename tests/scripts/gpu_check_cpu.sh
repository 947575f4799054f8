#!/usr/bin/env bash
# gpu_check_cpu.sh TRAIN UNIT_TESTS: the CPU side of scripts/gpu_check.sh, on a machine
# without a GPU: it says so in one line and exits 2; bad arguments are one line and exit 1;
# and the report writer (scripts/gpu_report.py, through --report) turns a results folder
# into the report. The folder is made of real outputs from this machine: the GPU unit
# tests as they run here (skipped), two short training runs, and a two-rank CUDA run that
# fails (no GPU) standing in for NCCL's refusal.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../../scripts/gpu_check.sh
train=$1 unit=$2
mpirun=${MPIEXEC:-mpirun}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "MISSING: $1"; fail=1; }
expect() {  # FILE PATTERN WHAT
  if grep -qE -- "$2" "$1"; then ok "$3"; else bad "$3 (pattern: $2)"; echo "--- $1:"; cat "$1"; fi
}

# 1. No GPU here: one line, exit 2, nothing written.
env OUT= "$check" --out "$tmp/o" >"$tmp/nogpu.log" 2>&1; rc=$?
[ $rc -eq 2 ] && ok "no GPU: exit 2" || bad "no GPU: exit 2 (got $rc)"
[ "$(wc -l <"$tmp/nogpu.log")" -eq 1 ] && ok "no GPU: one line" || bad "no GPU: one line"
expect "$tmp/nogpu.log" '^gpu_check: no GPU on this machine' "no GPU: says so"
[ ! -e "$tmp/o" ] && ok "no GPU: nothing written" || bad "no GPU: nothing written"

# 2. Arguments.
"$check" --bogus >"$tmp/a.log" 2>&1; [ $? -eq 1 ] && expect "$tmp/a.log" "^gpu_check: error: unknown option '--bogus'" "an unknown option" || bad "an unknown option: exit 1"
env -u OUT "$check" >"$tmp/b.log" 2>&1; [ $? -eq 1 ] && expect "$tmp/b.log" "no report folder: give --out DIR" "no --out and no OUT" || bad "no --out: exit 1"
"$check" --out "$tmp/o" --budget soon >"$tmp/c.log" 2>&1; [ $? -eq 1 ] && expect "$tmp/c.log" "--budget needs a number of seconds" "a bad --budget" || bad "a bad --budget: exit 1"
"$check" --report "$tmp/nothing" >"$tmp/d.log" 2>&1; [ $? -eq 1 ] && expect "$tmp/d.log" "no results there" "--report of an empty folder" || bad "--report of an empty folder: exit 1"
"$check" --help >"$tmp/h.log" 2>&1 && expect "$tmp/h.log" "--long: the speed check alone" "--help" || bad "--help: exit 0"

# 3. The report, from real outputs.
r=$tmp/r; mkdir -p "$r/logs"
"$unit" "[gpu]" -r xml -o "$r/unit_gpu.xml" >/dev/null 2>&1
small=(--device cpu --threads 1 --hidden-size 64 --intermediate-size 128 --num-hidden-layers 2 --seq-len 32
       --micro-batch-size 2 --steps 8 --generate 0)
"$train" "${small[@]}" --metrics-file "$r/bf16_aten.jsonl" >"$r/logs/bf16_aten.log" 2>&1
"$train" "${small[@]}" --lr 1e-3 --metrics-file "$r/bf16_fused.jsonl" >"$r/logs/bf16_fused.log" 2>&1
$mpirun --oversubscribe --bind-to none -np 2 "$train" --device cuda --dp 2 --steps 1 >"$r/logs/nccl_two_ranks.log" 2>&1
printf 'unit_gpu\tpassed\t2\texit 0\nbf16_aten\tpassed\t3\texit 0\nbf16_fused\tpassed\t3\texit 0\nnccl_two_ranks\tfailed\t1\texit 1\n' >"$r/steps.tsv"
"$check" --report "$r" >"$tmp/report.log" 2>&1 || { cat "$tmp/report.log"; bad "--report exits 0"; }
expect "$r/report.md" '^\| bf16 forward and backward on the GPU match the fp64 CPU model \| skipped \|$' "a unit test case, skipped here"
[ "$(grep -c '| skipped |$' "$r/report.md")" -eq "$(grep -c '<TestCase ' "$r/unit_gpu.xml")" ] && ok "every GPU test case listed" || bad "every GPU test case listed"
expect "$r/report.md" '^\| aten \| 8 \| [0-9.]+ \| [0-9.]+ \|' "the aten run's row"
expect "$r/report.md" '^Loss agreement over 8 common steps: largest \|fused - aten\| = [0-9.e-]+ at step [0-9]+' "the loss agreement"
expect "$r/report.md" '^Two ranks on one GPU: failed' "the multi-rank attempt"
expect "$r/report.md" 'error' "the failed run's own words"
expect "$r/report.md" '^\| nccl_two_ranks \| failed \| 1 \| exit 1 \|$' "the steps table"
# 4. The staged build (--build-only --stage, then --prebuilt on the GPU machine): this
# machine's build staged, its binaries run from the stage, and --prebuilt's arguments.
build=$(dirname "$train")
"$check" --stage "$tmp/s" --out "$tmp/o" >"$tmp/e.log" 2>&1; [ $? -eq 1 ] && expect "$tmp/e.log" "--stage goes with --build-only" "--stage without --build-only" || bad "--stage without --build-only: exit 1"
"$check" --prebuilt "$tmp/none" --out "$tmp/o" >"$tmp/f.log" 2>&1; [ $? -eq 1 ] && expect "$tmp/f.log" "no staged build there" "--prebuilt of an empty folder" || bad "--prebuilt of an empty folder: exit 1"
if "$here/../../scripts/gpu_stage.sh" "$build" "$tmp/no_deps" "$tmp/stage" >"$tmp/stage.log" 2>&1; then
  ok "gpu_stage.sh: $(tail -n 1 "$tmp/stage.log")"
  for b in train tests/unit_tests tests/compare_runs bench/bench_kernels kernels/attention_rung; do
    [ -x "$tmp/stage/$b" ] && ok "staged $b" || bad "staged $b"
  done
  expect "$tmp/stage/MANIFEST.txt" "^# from the GPU machine's torch wheel .*libtorch" "the manifest names what torch provides"
  LD_LIBRARY_PATH=$tmp/stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$tmp/stage/train" --help >"$tmp/staged_help.log" 2>&1 &&
    expect "$tmp/staged_help.log" "--attention" "the staged train runs" || bad "the staged train runs"
  env OUT= "$check" --prebuilt "$tmp/stage" --out "$tmp/o3" >"$tmp/g.log" 2>&1; rc=$?
  [ $rc -eq 2 ] && expect "$tmp/g.log" "^gpu_check: no GPU on this machine" "--prebuilt without a GPU: exit 2" || bad "--prebuilt without a GPU: exit 2 (got $rc)"
else
  bad "gpu_stage.sh"; cat "$tmp/stage.log"
fi

[ $fail -eq 0 ] && echo "GPU CHECK CPU SIDE OK" || echo "FAILED"
