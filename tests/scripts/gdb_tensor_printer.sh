#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2086  # regular expressions with a literal $; a number
# tests/scripts/gdb_tensor_printer.sh GDB_TENSOR_DEMO — gdb in batch mode with
# scripts/picotron_gdb.py and `set may-call-functions off` (gdb refuses any call into the
# program) stops tests/tools/gdb_tensor_demo.cpp's show() at every tensor and prints it; each
# line must equal the program's own runtime/observe/debug_text.cpp line (ctest:
# debug.gdb_tensor_printer). Three ways: member offsets from the demo's DWARF (it is built
# with -femit-class-debug-always, so it holds LibTorch's classes), from the printer's
# LAYOUT table (what build-debug/train needs: its DWARF only declares c10::TensorImpl),
# and from a core file. The table must match the DWARF, offset by offset.
set -u
[ -x "${1:-}" ] || { echo "FAILED: usage: $0 path/to/gdb_tensor_demo (built by: cmake --build build --target gdb_tensor_demo)"; exit 1; }
demo=$1
here=$(cd "$(dirname "$0")" && pwd)
printer=$here/../../scripts/picotron_gdb.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# At every stop, print x twice: member offsets from the DWARF, then from LAYOUT. The first
# stop also writes a core file (read at the end).
printf '%s\n' "break show" "commands" "silent" "print x" "python use_dwarf = False" "print x" \
  "python use_dwarf = True" "continue" "end" >"$tmp/every_stop.gdb"
out=$(gdb -batch -nx -ex "set may-call-functions off" -x "$printer" -ex "break show" -ex run \
  -ex "generate-core-file $tmp/demo.core" -ex delete -x "$tmp/every_stop.gdb" \
  -ex "print x" -ex "python use_dwarf = False" -ex "print x" -ex "python use_dwarf = True" -ex continue "$demo" 2>&1)
echo "$out" | grep -E '^(want: |\$[0-9]+ = )'
sed -n 's/^want: //p' <<<"$out" >"$tmp/want"
for way in dwarf layout; do
  n=$([ $way = dwarf ] && echo 1 || echo 0)  # odd prints: DWARF; even: LAYOUT
  sed -n -E 's/^\$([0-9]+) = (.*)/\1 \2/p' <<<"$out" | awk -v n=$n '$1 % 2 == n { sub(/^[0-9]+ /, ""); print }' >"$tmp/got"
  if ! [ -s "$tmp/want" ] || ! diff "$tmp/want" "$tmp/got" >"$tmp/diff"; then
    echo "$out" | tail -20; echo "FAILED: offsets from $way: gdb's lines (>) differ from the program's (<):"; cat "$tmp/diff"; exit 1
  fi
  echo "offsets from $way: $(wc -l <"$tmp/got") tensors printed as the program prints them"
done
# The walkthrough's two examples, spelled out (docs/stepping.md, scripts/picotron_gdb.py).
want1='[2, 3, 4] Float cpu strides (12, 4, 1) {0, 1, 2, 3, 4, 5, ...}'
want2='[2, 4, 3] Float cpu strides (12, 1, 4) {0, 4, 8, 1, 5, 9, ...}'
for want in "$want1" "$want2"; do
  grep -qF "= $want" <<<"$out" || { echo "FAILED: gdb did not print: $want"; exit 1; }
done

layout=$(gdb -batch -nx -x "$printer" -ex "python print(layout_check())" "$demo" 2>&1)
echo "$layout"
grep -q "LAYOUT MATCHES THE DWARF" <<<"$layout" || { echo "FAILED: scripts/picotron_gdb.py's LAYOUT is not this LibTorch's"; exit 1; }

# The core file of the first stop: no process at all, the same line.
core=$(gdb -batch -nx -x "$printer" -ex "print x" "$demo" "$tmp/demo.core" 2>&1)
grep -qF "\$1 = $want1" <<<"$core" || { echo "$core"; echo "FAILED: from the core file, gdb did not print: $want1"; exit 1; }
echo "from a core file: $want1"
echo "gdb printed every tensor readably, calling nothing in the program"
