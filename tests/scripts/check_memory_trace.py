#!/usr/bin/env python3
"""check_memory_trace.py TRACE STEPS MICRO: a --memory-trace file has, for each step,
start, forward/backward per micro-batch, sync and optimizer, in that order; every line
is JSON with bytes <= peak; and each forward holds more memory than the backward after
it (the activations kept for backward are freed by it). Prints "memory trace ok"."""
import json
import sys

path, steps, micro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(line) for line in open(path)]
want = []
for s in range(1, steps + 1):
    want.append((s, "start", -1))
    for m in range(micro):
        want += [(s, "forward", m), (s, "backward", m)]
    want += [(s, "sync", -1), (s, "optimizer", -1)]
got = [(r["step"], r["phase"], r["micro"]) for r in rows]
assert got == want, f"phases {got} != {want}"
for r in rows:
    assert 0 < r["bytes"] <= r["peak"], r
for a, b in zip(rows, rows[1:]):
    if a["phase"] == "forward":
        assert a["bytes"] > b["bytes"], (a, b)
        assert b["t"] >= a["t"], (a, b)
print("memory trace ok")
