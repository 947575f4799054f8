#!/usr/bin/env bash
# tests/gdb_tensor_printer.sh GDB_TENSOR_DEMO — gdb in batch mode with
# scripts/picotron_gdb.py stops tests/gdb_tensor_demo.cpp's show() twice and prints its
# tensor argument; both lines must be the readable form (ctest: debug.gdb_tensor_printer).
set -u
[ -x "${1:-}" ] || { echo "FAILED: usage: $0 path/to/gdb_tensor_demo (built by: cmake --build build --target gdb_tensor_demo)"; exit 1; }
demo=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(gdb -batch -nx -x "$here/../scripts/picotron_gdb.py" -ex "break show" -ex run -ex "print x" \
  -ex continue -ex "print x" "$demo" 2>&1)
echo "$out"
want1='[2, 3, 4] Float cpu strides (12, 4, 1) {0, 1, 2, 3, 4, 5, ...}'
want2='[2, 4, 3] Float cpu strides (12, 1, 4) {0, 4, 8, 1, 5, 9, ...}'
for want in "$want1" "$want2"; do
  grep -qF "= $want" <<<"$out" || { echo "FAILED: gdb did not print: $want"; exit 1; }
done
echo "gdb printed both tensors readably"
