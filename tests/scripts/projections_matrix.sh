#!/usr/bin/env bash
# tests/scripts/projections_matrix.sh build/train — every pipeline schedule x {fp8, tp, ep, recompute}:
# each projection of the model is what the flags ask, read from the model (--explain's
# "projections of layer 0" lines, runtime/observe/projections.h), or the run is refused in one line.
#
#   module  fp8 linear (--fp8) | linear, dW deferred to W (zero bubble) (zb-h1, dualpipev) | linear
#   split   column-parallel over tp (2 slices) for q, k, v, gate, up and row-parallel for o,
#           down (--tp 2) | whole
#   experts a mixture-of-experts layer (--ep) lists only q, k, v, o: its experts are not
#           projections (they stay in the run's dtype)
#   refused --fp8 with a schedule that defers dW (zb-h1, dualpipev): both replace the
#           projections, so the run stops before it starts, naming both flags
#
# About 40 s on 2 cores (17 short runs, rank 0's lines). Prints PROJECTIONS OK.
set -uo pipefail
train=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
base=(--device cpu --model tiny --hidden-size 64 --intermediate-size 128 --num-hidden-layers 4 --seq-len 32
      --micro-batch-size 1 --grad-acc-steps 4 --steps 1 --generate 0 --threads 1 --explain)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# CASE NP SCHEDULE EXTRA_FLAGS: run it and check each projection line of rank 0.
check() {
  local np=$1 schedule=$2; shift 2
  local flags=(--pp 2 --pp-schedule "$schedule" "$@")
  [ "$schedule" = interleaved ] && flags+=(--pp-virtual-stages 2)
  local out module split
  out=$(mpirun --oversubscribe --bind-to none -np "$np" "$train" "${base[@]}" "${flags[@]}" 2>&1)
  local rc=$? fp8=0 tp=1 ep=0 defers=0
  [[ " $* " == *" --fp8 "* ]] && fp8=1
  [[ " $* " == *" --tp 2 "* ]] && tp=2
  [[ " $* " == *" --ep "* ]] && ep=1
  [[ $schedule == zb-h1 || $schedule == dualpipev ]] && defers=1
  local name="$schedule $*"
  if [ $fp8 = 1 ] && [ $defers = 1 ]; then
    [ $rc -ne 0 ] && grep -q "error: --fp8 and --pp-schedule $schedule" <<<"$out" ||
      fail "$name: should be refused naming --fp8 and --pp-schedule $schedule (exit $rc)"
    [ $rc -ne 0 ] && echo "ok   $name: refused"
    return
  fi
  [ $rc -eq 0 ] || { echo "$out" | tail -5; fail "$name: exited $rc"; return; }
  module=linear
  [ $fp8 = 1 ] && module="fp8 linear"
  [ $defers = 1 ] && module="linear, dW deferred to W (zero bubble)"
  local slots=(q_proj k_proj v_proj o_proj gate_proj up_proj down_proj)
  [ $ep = 1 ] && slots=(q_proj k_proj v_proj o_proj)
  for slot in "${slots[@]}"; do
    split=whole
    if [ $tp = 2 ]; then
      split="column-parallel over tp (2 slices)"
      [[ $slot == o_proj || $slot == down_proj ]] && split="row-parallel over tp (2 slices)"
    fi
    local want="  $slot: $module, $split"
    local got
    got=$(grep -m1 "^  $slot: " <<<"$out")
    [ "$got" = "$want" ] || fail "$name: want \"$want\", the model says \"${got:-nothing}\""
  done
  if [ $ep = 1 ] && grep -q "^  gate_proj: " <<<"$out"; then
    fail "$name: an expert's gate_proj listed as a projection"
  fi
  echo "ok   $name"
}

for schedule in afab 1f1b interleaved zb-h1 dualpipev; do
  check 2 "$schedule" --fp8 --recompute full
  check 4 "$schedule" --tp 2 --recompute selective
  check 4 "$schedule" --dp 2 --ep 2 --model tiny-moe
  case $schedule in zb-h1|dualpipev) check 2 "$schedule" --recompute full ;; esac
done
[ $failures = 0 ] && echo "PROJECTIONS OK" || { echo "FAILED: $failures case(s)"; exit 1; }
