#!/usr/bin/env bash
# expect_failure.sh REGEX -- COMMAND...
# Passes when COMMAND exits non-zero AND its output (stdout+stderr) matches REGEX.
# (ctest's PASS_REGULAR_EXPRESSION alone would ignore the exit code.)
regex=$1; shift; [ "$1" = "--" ] && shift
out=$("$@" 2>&1); rc=$?
echo "$out"
if [ $rc -eq 0 ]; then echo "FAIL: expected a non-zero exit, got 0"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: output does not match /$regex/ (exit $rc)"; exit 1; fi
echo "ok: exit $rc and the message matches /$regex/"
