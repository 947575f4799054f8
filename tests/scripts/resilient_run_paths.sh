#!/usr/bin/env bash
# tests/scripts/resilient_run_paths.sh TRAIN — scripts/resilient_run.sh with a save dir whose path
# has a space, quotes and glob characters: after a failed launch it restarts from the newest
# checkpoint that verifies (step-000008 of 4 and 8), the run finishes, and the launcher's own
# argument errors are one line of its own and exit 2 (ctest: reliability.resilient_paths).
#
# The command fails once on purpose (a wrapper exits 1 the first time), so the test needs no
# killed rank: one process, the tiny model, 12 steps.
set -uo pipefail
train=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
launcher=$root/scripts/resilient_run.sh
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
save="$work/a b'c\"d [x]*/ck"
flags=(--device cpu --threads 1 --seq-len 32 --micro-batch-size 2 --generate 0 --save-every 4 --save-dir "$save")
fail=0
ok() { echo "ok: $1"; }
bad() { echo "WRONG: $1"; fail=1; }

# Two checkpoints to start from: step-000004 and step-000008.
"$train" "${flags[@]}" --steps 8 >"$work/first.log" 2>&1 || { cat "$work/first.log"; echo FAILED; exit 1; }
[ -d "$save/step-000004" ] && [ -d "$save/step-000008" ] && ok "a run saved step-000004 and step-000008 in '$save'" \
  || bad "the first run saved no checkpoints in '$save'"

# A command that fails the first time it runs, then runs TRAIN with its arguments.
cat > "$work/fail_once.sh" <<'SH'
#!/usr/bin/env bash
marker=$1; shift
if [ ! -e "$marker" ]; then touch "$marker"; echo "fail_once: failing on purpose"; exit 1; fi
exec "$@"
SH
chmod +x "$work/fail_once.sh"
"$launcher" --restarts 1 --check "$train" -- "$work/fail_once.sh" "$work/marker" "$train" "${flags[@]}" --steps 12 \
  >"$work/launch.log" 2>&1
rc=$?
grep -F -- "--resume $save/step-000008 (step 8" "$work/launch.log" >/dev/null \
  && ok "restarted from '$save/step-000008'" || bad "did not restart from step-000008"
[ $rc = 0 ] && grep -q "finished after 1 restart" "$work/launch.log" && ok "the resumed run finished (exit 0)" \
  || bad "the resumed run did not finish (exit $rc)"
grep -q "invalid integer\|no checkpoint verifies" "$work/launch.log" && bad "the launcher misread the path"
[ -d "$save/step-000012" ] && ok "step-000012 saved by the resumed run" || bad "no step-000012"

# The launcher's argument errors: its own line, exit 2.
for args in "--restarts" "--grace" "--check" "--restarts x --" "--bogus --"; do
  # shellcheck disable=SC2086  # the words of each case, on purpose
  out=$("$launcher" $args 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && [[ $out == resilient_run:* ]]; then ok "'$args': $out"
  else bad "'$args': exit $rc, said: $out"; fi
done

if [ $fail = 0 ]; then echo "RESILIENT PATHS OK"; else cat "$work/launch.log"; echo FAILED; exit 1; fi
