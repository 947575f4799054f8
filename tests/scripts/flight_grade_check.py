#!/usr/bin/env python3
"""tests/scripts/flight_grade_check.py DIR — scripts/assignment grade puts the hang report's verdict in
the grade table when a student's fill hangs: a failed test whose output has the timeout
line's "read them with: scripts/hang_report.py DIR" gets "hung: <what went wrong first>".

DIR: a folder of flight recorder files (flight.sends_first's, which ctest runs first).
Prints "grade verdict ok" or exits 1 naming what the grader showed instead.
"""
import importlib.machinery
import importlib.util
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
loader = importlib.machinery.SourceFileLoader("assignment", str(root / "scripts" / "assignment"))
spec = importlib.util.spec_from_loader("assignment", loader)
assignment = importlib.util.module_from_spec(spec)
loader.exec_module(assignment)

timeout_line = ("[rank 0] error: send timed out after 2 s: a peer died or stopped answering (16384 float32 elements, "
                "group rank 0 of 2). Flight recorder: every rank's last communications are in %s/comms-rank*.json; "
                "read them with: scripts/hang_report.py %s\n" % (sys.argv[1], sys.argv[1]))
shown = assignment.first_difference("some test output\n" + timeout_line, None)
want = "hung: group pp (world ranks 0,1): ranks 0 and 1 both send first"
if not shown.startswith(want):
    print("FAILED: the grade table would show %r, not the hang report's verdict (%r...)" % (shown, want))
    sys.exit(1)
print("grade verdict ok: " + shown)
