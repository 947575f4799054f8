#!/usr/bin/env bash
# full_disk.sh WORKDIR -- TRAIN FLAGS...
#
# Writes that hit a full disk (a 256 KiB tmpfs) must fail loudly: one line naming the
# flag, the path and "No space left on device", a non-zero exit, and no partial file
# under the final name. Needs root to mount the tmpfs; without it the test reports itself
# skipped (exit 77). Prints "full disk ok" or "FAILED: ...".
set -uo pipefail
work=$1; shift; [ "$1" = "--" ] && shift
mnt=$work/mnt
mkdir -p "$mnt"
umount "$mnt" 2>/dev/null
if ! mount -t tmpfs -o size=256k tmpfs "$mnt" 2>/dev/null; then
  echo "skipped: cannot mount a tmpfs here (needs root)"; exit 77
fi
trap 'umount "$mnt"' EXIT

expect() {  # expect NAME REGEX -- COMMAND...: non-zero exit, the message, no final file
  local name=$1 regex=$2 final=$3; shift 4
  out=$("$@" 2>&1); rc=$?
  echo "$out" | grep -E "error" | head -3
  [ $rc -ne 0 ] || { echo "FAILED: $name exited 0"; exit 1; }
  grep -Eq -- "$regex" <<<"$out" || { echo "$out" | tail -5; echo "FAILED: $name: no line matching /$regex/"; exit 1; }
  [ ! -e "$final" ] || { echo "FAILED: $name left a partial $final"; exit 1; }
  echo "ok: $name (exit $rc)"
}

# 1. --save-params: ~3 MiB of parameters onto a 256 KiB disk
expect save_params "error: --save-params $mnt/params.safetensors: write failed: No space left on device" \
  "$mnt/params.safetensors" -- "$@" --steps 2 --save-params "$mnt/params.safetensors"
[ ! -e "$mnt/params.safetensors.tmp" ] || { echo "FAILED: the .tmp file was left behind"; exit 1; }

# 2. --metrics-file: the disk fills in the middle of the run
dd if=/dev/zero of="$mnt/filler" bs=1k count=250 2>/dev/null
expect metrics "error: --metrics-file $mnt/metrics.jsonl: write failed: No space left on device" \
  "$mnt/metrics.jsonl" -- "$@" --steps 200 --metrics-file "$mnt/metrics.jsonl"
rm -f "$mnt/filler"

# 3. --save-dir: a checkpoint that does not fit; no step directory appears
expect checkpoint "error: .*--save-dir $mnt/ckpt.*write failed: No space left on device" \
  "$mnt/ckpt/step-000002" -- "$@" --steps 2 --save-dir "$mnt/ckpt"

# 4. --profile: LibTorch's trace writer only logs a failure; the run checks the trace it
# names (whole JSON) and writes the table through the output files: no success line.
expect profile "error: --profile $mnt/prof: (the trace $mnt/prof/trace-rank0.json (is cut short|was not written|is empty)|.*No space left on device)" \
  "$mnt/prof/top-rank0.txt" -- "$@" --steps 4 --profile "$mnt/prof"
echo "full disk ok"
