#!/usr/bin/env bash
# shellcheck disable=SC2016  # regular expressions with a literal $
# tests/scripts/debug_step.sh ROOT — the stepping workflow of docs/stepping.md, end to end
# (ctest: debug.step_tensor_parallel): scripts/debug.sh stops rank 0, then rank 1, of a
# --tp 2 run at the row-parallel all-reduce (scripts/gdb/tensor_parallel.gdb), prints the
# rank's partial output and, after `finish`, the sum; the two partials must add up to it.
# gdb may not call into the program (--no-calls): the printer reads the tensors itself.
# Needs the debug build (scripts/build.sh --debug --target train): SKIPPED without it.
set -u
root=$1
[ -x "$root/build-debug/train" ] || { echo "SKIPPED: no debug build (scripts/build.sh --debug --target train)"; exit 0; }
first_values() {  # rank -> "partial sum": the first element printed before and after the all-reduce
  "$root/scripts/debug.sh" -np 2 --rank "$1" --no-calls --stop tensor_parallel --ex "print x" --ex finish -- \
    --tp 2 --steps 1 --generate 0 2>&1 | tee "debug_step_rank$1.log" |
    sed -n -E 's/^(\$1|Value returned is \$2) = \[16, 128, 128\] Float cpu [^{]*\{([^,]+),.*/\2/p' | tr '\n' ' '
}
read -r p0 s0 <<<"$(first_values 0)"
read -r p1 s1 <<<"$(first_values 1)"
echo "rank 0: partial $p0, after the all-reduce $s0; rank 1: partial $p1, after $s1"
python3 - "$p0" "$p1" "$s0" "$s1" <<'PY' || exit 1
import sys
p0, p1, s0, s1 = map(float, sys.argv[1:])
assert s0 == s1, f"the ranks disagree after the all-reduce: {s0} vs {s1}"
assert abs(p0 + p1 - s0) <= 1e-3 * max(abs(s0), 1e-6), f"{p0} + {p1} != {s0}"
print(f"the partial outputs add up: {p0} + {p1} = {s0} on both ranks")
PY
