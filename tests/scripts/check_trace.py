#!/usr/bin/env python3
"""check_trace.py TRACE P M STEPS: a --pp-trace file of a zb-h1 run on P ranks (world =
pp) holds, for every rank and every step, one F, one B and one W per micro-batch (M of
each), the first W after as many B's as the schedule lets wait (rank r: r + 1), and
sends/recvs whose peers are pipeline neighbours. Prints "trace ok" or the first problem
(exit 1). Standard library only."""
import json
import sys
from collections import defaultdict

path, P, M, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
doc = json.load(open(path))
events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
compute = defaultdict(list)  # (rank, step) -> [(ts, name, micro)]
for e in events:
    a = e["args"]
    if e["cat"] == "compute":
        compute[(a["rank"], a["step"])].append((e["ts"], e["name"], a["micro"]))
    elif abs(a["peer"] - a["pp_rank"]) not in (1, P - 1):
        sys.exit(f"rank {a['rank']}: {e['name']} with pp rank {a['peer']}, not a neighbour")
for r in range(P):
    for s in range(1, steps + 1):
        got = sorted(compute[(r, s)])
        names = [f"{n}{m}" for _, n, m in got]
        want = sorted(f"{k}{m}" for k in "FBW" for m in range(M))
        if sorted(names) != want:
            sys.exit(f"rank {r} step {s}: {names}")
        # zb-h1: rank r lets r weight passes wait, so its first W comes after r + 1 B's
        first_w = names.index("W0")
        if sum(1 for n in names[:first_w] if n[0] == "B") != min(r, M - 1) + 1:
            sys.exit(f"rank {r} step {s}: W0 after {names[:first_w]}")
assert doc["otherData"]["schedule"] == "zb-h1", doc["otherData"]
print("trace ok")
