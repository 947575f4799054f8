#!/usr/bin/env python3
"""tests/scripts/check_labels.py BUILD — every test carries a kind or a technique label.

    python3 tests/scripts/check_labels.py build-debug

ctest runs it as `labels.every_test`. A test says what kind it is (unit, mpi, cli,
equivalence, ...: given where it is registered) and which techniques it exercises (dp, tp,
pp, cp, ep, zero, ...: tests/cmake/labels.cmake reads them from its flags and name), so
that `ctest -L zero` runs everything about ZeRO. A test with neither would be run by
`ctest` alone and by no label. Every technique must also select some test. Prints the
number of tests of each label. Standard library only.
"""
import json
import os
import re
import subprocess
import sys

KINDS = {"unit", "mpi", "cli", "equivalence", "checkpoint", "reliability", "flight", "comm", "hf",
         "docs", "debug", "assignments", "assignments_build", "labs", "report"}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    here = os.path.dirname(os.path.abspath(__file__))
    rules = open(os.path.join(here, "..", "cmake", "labels.cmake"), encoding="utf-8").read()
    techniques = re.search(r"^set\(PICOTRON_TECHNIQUES ([a-z0-9_ ]+)\)", rules, re.M).group(1).split()
    listing = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True,
                             text=True, check=True).stdout
    tests = json.loads(listing)["tests"]
    problems, count = [], {}
    for t in tests:
        labels = [v for p in t.get("properties", []) if p["name"] == "LABELS" for v in p["value"]]
        for label in labels:
            count[label] = count.get(label, 0) + 1
        if not set(labels) & (KINDS | set(techniques)):
            problems.append(f"FAILED {t['name']}: no kind ({', '.join(sorted(KINDS))}) and no technique label")
    for technique in techniques:
        if not count.get(technique):
            problems.append(f"FAILED the technique label {technique} selects no test")
    for label in techniques + sorted(KINDS - set(techniques)):
        print(f"  {label:18} {count.get(label, 0):4} tests")
    for p in problems:
        print(p)
    print(f"labels: {len(tests)} tests checked, {len(problems)} problem(s)")
    if not problems:
        print("labels ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
