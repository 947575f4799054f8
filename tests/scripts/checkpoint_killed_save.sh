#!/usr/bin/env bash
# shellcheck disable=SC2206,SC2012  # MPIEXEC may hold words; ls of a folder this test made
# checkpoint_killed_save.sh WORKDIR -- TRAIN FLAGS...   (2 ranks; FLAGS must include --steps 6)
#
# 1. --save-every 1 --keep-checkpoints 2 for 4 steps leaves exactly step-000003 and -000004.
# 2. A rank killed while it writes step 3 (the test hook PICOTRON_FAULT_KILL_DURING_SAVE=3:
#    the last rank writes half its file and SIGKILLs itself) takes the job down; step 2
#    stays whole and step 3 never appears (only its .tmp).
# 3. --resume on the directory continues from step 2 to the end (saving in place).
# Prints "killed save ok" or "FAILED: ...".
set -uo pipefail
work=$1; shift; [ "$1" = "--" ] && shift
mpirun=(${MPIEXEC:-mpirun} --oversubscribe --bind-to none -np 2)
rm -rf "$work" && mkdir -p "$work"

"${mpirun[@]}" "$@" --stop-at-step 4 --save-dir "$work/keep" --save-every 1 --keep-checkpoints 2 > "$work/keep.log" 2>&1 ||
  { cat "$work/keep.log"; echo "FAILED: the run with --keep-checkpoints"; exit 1; }
kept=$(ls "$work/keep" | tr '\n' ' ')
[ "$kept" = "step-000003 step-000004 " ] || { echo "FAILED: --keep-checkpoints 2 left: $kept"; exit 1; }
echo "--keep-checkpoints 2 after 4 saves: $kept"

if PICOTRON_FAULT_KILL_DURING_SAVE=3 "${mpirun[@]}" -x PICOTRON_FAULT_KILL_DURING_SAVE "$@" --timeout-s 60 \
     --save-dir "$work/killed" --save-every 1 > "$work/killed.log" 2>&1; then
  echo "FAILED: the job whose rank was killed exited 0"; exit 1
fi
ls -R "$work/killed" | head -20
[ -f "$work/killed/step-000002/manifest.json" ] || { echo "FAILED: step-000002 is not whole"; exit 1; }
[ ! -e "$work/killed/step-000003" ] || { echo "FAILED: a half-written step-000003 was renamed into place"; exit 1; }

"${mpirun[@]}" "$@" --resume "$work/killed" --save-dir "$work/killed" > "$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; echo "FAILED: resuming after the killed save"; exit 1; }
grep "resumed from" "$work/resume.log"
grep -q "resumed from $work/killed/step-000002" "$work/resume.log" || { echo "FAILED: did not resume from step 2"; exit 1; }
grep -q "step     6/6" "$work/resume.log" || { echo "FAILED: the resumed run did not finish"; exit 1; }
echo "killed save ok"
