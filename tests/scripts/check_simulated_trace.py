#!/usr/bin/env python3
"""check_simulated_trace.py TRAIN: `--dry-run --pp-trace` writes the schedule's unit-time
simulation (pipeline_parallel/pipeline_trace.cpp, write_simulated_trace) for DualPipeV on
P = 4, m = 8 and for 1f1b on P = 4, m = 8. Each rank's boxes must be its program's actions
in order (the F/B/W of `--dry-run`'s "p2p program" lines, without the sends and receives),
never overlap, and leave exactly the idle time the schedule's formula says: P - 1 units
against 6m busy for dualpipev (F = B = W = 1), (P - 1) x 3 against 3m for 1f1b (F = 1,
B = 2). Prints "simulated trace ok" or the first problem (exit 1). Standard library only."""
import json
import os
import re
import subprocess
import sys
import tempfile

train = sys.argv[1]
P, m = 4, 8
for schedule, busy, idle in (("dualpipev", 6 * m, P - 1), ("1f1b", 3 * m, 3 * (P - 1))):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sim.json")
        out = subprocess.run([train, "--pp", str(P), "--pp-schedule", schedule, "--num-hidden-layers", "8",
                              "--grad-acc-steps", str(m), "--dry-run", "--pp-trace", path],
                             capture_output=True, text=True)
        if out.returncode != 0 or not os.path.exists(path):
            sys.exit(f"{schedule}: --dry-run --pp-trace failed:\n{out.stdout}{out.stderr}")
        doc = json.load(open(path))
    programs = dict(re.findall(r"^  pp rank (\d+): (.*)$", out.stdout, re.M))
    boxes = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            boxes.setdefault(e["tid"], []).append(e)
    makespan = max(e["ts"] + e["dur"] for es in boxes.values() for e in es) / 1000
    for r in range(P):
        es = sorted(boxes.get(r, []), key=lambda e: e["ts"])
        want = re.sub(r"\[[^\]]*\]", " ", programs[str(r)]).split()
        got = [f"{e['name']}{e['args']['micro']}" + (f".{e['args']['chunk']}" if e["args"]["chunk"] else "")
               + ("&" if e["args"].get("paired") else "") for e in es]
        if got != want:
            sys.exit(f"{schedule} rank {r}: the boxes {got[:8]}... are not the program {want[:8]}...")
        if any(a["ts"] + a["dur"] > b["ts"] for a, b in zip(es, es[1:])):
            sys.exit(f"{schedule} rank {r}: two boxes overlap")
        work = sum(e["dur"] for e in es) / 1000
        if work != busy or makespan - work != idle:
            sys.exit(f"{schedule} rank {r}: busy {work}, idle {makespan - work} units; want {busy} and {idle}")
    print(f"{schedule}: P = {P}, m = {m}: every rank's boxes are its program, busy {busy}, idle {idle} units")
print("simulated trace ok")
