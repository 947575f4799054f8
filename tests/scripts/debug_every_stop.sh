#!/usr/bin/env bash
# tests/scripts/debug_every_stop.sh ROOT [TECHNIQUE...] — every breakpoint file of scripts/gdb/,
# as docs/stepping.md launches it (its first `--stop NAME` line, its -np too), in gdb batch mode (ctest: debug.every_stop): at the stop
# `info args`, `info locals`, `up`, `info locals` (the pretty-printer must not read through a
# tensor that is not built yet), then every hint the file lists ("#   print x   what it
# is"; "a; b" is two commands), then `finish`. gdb may not call into the program
# (--no-calls): a hint that needs a call fails, as it would where calls fail. The run must
# end normally, and no hint may answer "No symbol" or "Cannot call", nor a tensor print as
# a read error. Needs the debug build (scripts/build.sh --debug --target train): SKIPPED
# without it.
set -u
root=$1; shift
[ -x "$root/build-debug/train" ] || { echo "SKIPPED: no debug build (scripts/build.sh --debug --target train)"; exit 0; }
# The launch of each stop: the first `scripts/debug.sh -np N ... --stop NAME --ex ... -- FLAGS` line
# of docs/stepping.md (every breakpoint file has its section there): its FLAGS and its N.
launch_line() {
  grep -E -- "^scripts/debug.sh .*--stop $1 .*--ex " "$root/docs/stepping.md" | head -1
}
launch_of() { launch_line "$1" | sed -E 's/^.* -- //'; }
ranks_of() { launch_line "$1" | sed -n -E 's/^scripts\/debug.sh -np ([0-9]+) .*/\1/p'; }
techniques=("$@")
[ ${#techniques[@]} -gt 0 ] || for f in "$root"/scripts/gdb/*.gdb; do techniques+=("$(basename "$f" .gdb)"); done
fail=0
for t in "${techniques[@]}"; do
  flags=$(launch_of "$t")
  [ -n "$flags" ] && [ -n "$(ranks_of "$t")" ] || { echo "FAILED: scripts/gdb/$t.gdb has no section in docs/stepping.md (scripts/debug.sh -np N ... --stop $t ... -- FLAGS)"; fail=1; continue; }
  # The hints: "#   COMMAND   what it shows" (continuation lines start with more spaces or "(").
  hints=()
  while IFS= read -r cmd; do
    IFS=';' read -ra parts <<<"$cmd"
    for p in "${parts[@]}"; do p=$(echo "$p" | sed 's/^ *//; s/ *$//'); [ -n "$p" ] && hints+=(--ex "$p"); done
  done < <(sed -n -E 's/^#   ([^ (][^ ]*( [^ ]+)*)  +.*/\1/p' "$root/scripts/gdb/$t.gdb")
  log=$(mktemp)
  # shellcheck disable=SC2086
  timeout 300 "$root/scripts/debug.sh" -np "$(ranks_of "$t")" --no-calls --stop "$t" --ex "info args" --ex "info locals" --ex up \
    --ex "info locals" --ex down "${hints[@]}" --ex finish -- $flags >"$log" 2>&1
  rc=$?
  problems=$(grep -E "No symbol|Cannot call|<tensor |INTERNAL ASSERT|Segmentation fault|exited due to|has exited due|Aborted|signal SIG" "$log" | head -3)
  if [ $rc -ne 0 ] || [ -n "$problems" ] || ! grep -q "exited normally" "$log"; then
    echo "FAILED: $t (exit $rc): ${problems:-the debugged rank did not exit normally}"; tail -30 "$log"; fail=1
  else
    echo "ok: $t: info args/locals safe before and after up, $(( ${#hints[@]} / 2 )) hint command(s), finish"
  fi
  rm -f "$log"
done
[ $fail = 0 ] && echo "EVERY STOP OK" || { echo FAILED; exit 1; }
