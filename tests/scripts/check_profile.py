#!/usr/bin/env python3
"""check_profile.py DIR RANKS LOG: what `build/train --profile DIR` left: for every rank a
Chrome trace (DIR/trace-rank<R>.json) that parses as JSON and holds the named phases of
train.cpp (forward, backward, grad sync, grad norm + optimizer) and ATen operators, and a
table DIR/top-rank<R>.txt naming aten::mm-like GEMMs; rank 0's table also printed in LOG.
Prints "profile ok" or the first problem (exit 1). Standard library only."""
import json
import sys
from pathlib import Path

d, ranks, log = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
for r in range(ranks):
    trace = d / f"trace-rank{r}.json"
    if not trace.is_file():
        sys.exit(f"{trace}: missing")
    doc = json.loads(trace.read_text())
    names = {e.get("name") for e in doc.get("traceEvents", [])}
    for phase in ("forward", "backward", "grad sync", "grad norm + optimizer"):
        if phase not in names:
            sys.exit(f"{trace}: no '{phase}' range (names seen: {sorted(n for n in names if n)[:20]})")
    if not any(n and n.startswith("aten::") for n in names):
        sys.exit(f"{trace}: no ATen operator")
    table = (d / f"top-rank{r}.txt").read_text()
    if "CPU operators by total time" not in table or not any(g in table for g in ("aten::mm", "aten::addmm", "aten::matmul")):
        sys.exit(f"top-rank{r}.txt: no GEMM among the top operators:\n{table}")
text = log.read_text()
if "profile of steps" not in text or "aten::" not in text:
    sys.exit(f"{log}: rank 0's table was not printed")
print("profile ok")
