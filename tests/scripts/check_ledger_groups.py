#!/usr/bin/env python3
"""tests/scripts/check_ledger_groups.py TRAIN — the ledger sees every group a run makes.

One composed layout per technique family runs one step with --explain and --comm-report.
--explain lists every communication rank 0 issued in that step, with its group (its
listener hears every group split from the world: picotron/comm_listener.h); --comm-report
prints rank 0's ledger for the same step. For every (group, kind) the narration's calls and
elements must be the ledger's, and no group may be missing from either: a group made by a
technique (the pipeline's embed, the hybrid's cp_a2a and cp_ring, HSDP's and hpZ's, the
experts' ep and ep_replicas) that did not report to the ledger would show in the narration
and not in the report. Every communication of the narration must also be titled (the line
above it says what it carries: runtime/observe/comm_title.h).

Run by ctest (ledger.every_group); takes about a minute on 2 cores.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

COMM = re.compile(r"^  (all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|barrier)(?: (?:sum|avg|max))? over (\S+)"
                  r"|^  (send|recv) (?:to|from) (\S+) rank")
ELEMENTS = re.compile(r", ([\d,]+) elements")
ROW = re.compile(r"^(\S+)\s+(\d+)\s+(all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|send|recv|barrier)\s+(\d+)\s+(\d+)\s")

BASE = ["--device", "cpu", "--threads", "1", "--hidden-size", "64", "--intermediate-size", "128",
        "--num-hidden-layers", "2", "--seq-len", "32", "--micro-batch-size", "2", "--generate", "0",
        "--steps", "1", "--explain", "--comm-report"]
LAYOUTS = [  # (name, ranks, flags): one per family; each group named is expected in the report
    ("tp2 + sp + dp2 + fp8", 4, ["--tp", "2", "--sp", "--dp", "2", "--fp8"], {"tp", "cp_dp"}),
    ("pp2 (1F1B, tied) + cp2 ring + ZeRO-1", 4, ["--pp", "2", "--cp", "2", "--grad-acc-steps", "2", "--zero", "1"],
     {"pp", "embed", "cp", "cp_dp"}),
    ("cp4 hybrid (all-to-alls of 2, rings of 2)", 4, ["--cp", "4", "--cp-mode", "hybrid", "--cp-ulysses", "2"],
     {"cp_a2a", "cp_ring"}),
    ("dp4 ZeRO-3, HSDP shards of 2, hpZ 1", 4, ["--dp", "4", "--zero", "3", "--zero-shard", "2", "--zero-hpz", "1"],
     {"cp_dp_shard", "cp_dp_replicas"}),
    ("tiny-moe, ep2 x dp4", 4, ["--model", "tiny-moe", "--dp", "4", "--ep", "2"], {"ep", "ep_replicas", "cp_dp"}),
    ("tiny-moe, DualPipeV pp2 x dp2", 4, ["--model", "tiny-moe", "--dp", "2", "--pp", "2", "--pp-schedule", "dualpipev",
                                          "--grad-acc-steps", "4", "--num-hidden-layers", "4"], {"pp", "cp_dp"}),
]


def rank0_narration(log):
    lines, inside = [], False
    for line in log.splitlines():
        if line.startswith("---- rank 0 "):
            inside = True
            continue
        if inside and (line.startswith("---- rank ") or line.startswith("==== end")):
            break
        if inside:
            lines.append(line)
    return lines


def main():
    train = sys.argv[1]
    mpirun = os.environ.get("MPIEXEC", "mpirun")
    failures = 0
    for name, n, flags, expected in LAYOUTS:
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(n), train] + BASE + flags
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        log = run.stdout + run.stderr
        if run.returncode != 0:
            print(f"FAILED to run {name}: {' '.join(cmd)}\n{log[-3000:]}")
            failures += 1
            continue
        narrated = defaultdict(lambda: [0, 0])
        untitled = []
        lines = rank0_narration(log)
        for i, line in enumerate(lines):
            m = COMM.match(line)
            if not m:
                continue
            kind, group = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            e = ELEMENTS.search(line)
            narrated[(group, kind)][0] += 1
            narrated[(group, kind)][1] += int(e.group(1).replace(",", "")) if e else 0
            above = lines[i - 1] if i else ""
            if not above.startswith("  ") or above.startswith("      ") or COMM.match(above):
                untitled.append(line.strip())
        report, in_report = {}, False
        for line in log.splitlines():
            if line.startswith("communication of rank 0 over 1 step"):
                in_report = True
                continue
            if in_report:
                r = ROW.match(line)
                if r:
                    report[(r.group(1), r.group(3))] = [int(r.group(4)), int(r.group(5))]
                elif not line.startswith("group"):
                    in_report = False
        problems = []
        for key in sorted(set(narrated) | set(report)):
            if narrated.get(key) != report.get(key):
                problems.append(f"{key[0]} {key[1]}: narrated {narrated.get(key)}, ledger {report.get(key)} (calls, elements)")
        groups = {g for g, _ in report}
        for g in sorted(expected - groups):
            problems.append(f"group {g} moved nothing in the ledger (expected it to)")
        for u in untitled[:5]:
            problems.append(f"untitled communication: {u}")
        if problems:
            failures += 1
            print(f"MISMATCH {name}:\n  " + "\n  ".join(problems))
        else:
            print(f"ok: {name}: {len(report)} (group, kind) rows, the ledger's calls and elements are the narration's; "
                  f"groups {', '.join(sorted(groups))}; every communication titled")
    print("LEDGER OK" if failures == 0 else f"{failures} layout(s) FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
