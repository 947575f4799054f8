#!/usr/bin/env python3
"""bench/plan_vs_measured.py WORKDIR [--peak-tflops P --link-gbps L] [--max-memory-error F]

The table of bench/plan_vs_measured.sh, from the files it leaves in WORKDIR: layouts.tsv
(index, name, ranks, flags, measured median step in ms), i.plan (build/train --plan-layout's
text) and i.jsonl (--metrics-file: rank 0's peak_mem_bytes). Prints each layout's predicted
and measured peak memory of rank 0 (pipeline stage 0) and step time, their ranks (1 = the
fastest), the Spearman rank correlation of the step times (ties: mean ranks) and the largest
memory error. Exits 1 when a memory error is above --max-memory-error (default 0.10: the
bound tests/scripts/check_memory_estimate.sh holds the estimator to). Standard library only.
"""
import argparse
import json
import math
import os
import re
import sys


def ranks(values):
    """1 = the smallest; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y):
    """Pearson's correlation of the ranks."""
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx > 0 and sy > 0 else float("nan")


def prediction(path):
    text = open(path).read()
    stage0 = re.search(r"memory of stage 0 at its peak: ([0-9,]+) B", text)
    step = re.search(r"step ([0-9.]+) ms = compute ([0-9.]+) \+ communication ([0-9.]+) .*\+ bubble ([0-9.]+)", text)
    if not stage0 or not step:
        sys.exit(f"plan_vs_measured: no prediction in {path}:\n{text}")
    return int(stage0.group(1).replace(",", "")), [float(v) for v in step.groups()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("workdir")
    ap.add_argument("--peak-tflops", default="?")
    ap.add_argument("--link-gbps", default="?")
    ap.add_argument("--max-memory-error", type=float, default=0.10)
    args = ap.parse_args()
    rows = []
    for line in open(os.path.join(args.workdir, "layouts.tsv")):
        i, name, n, flags, measured_ms = line.rstrip("\n").split("\t")
        mem_pred, (step, compute, comm, bubble) = prediction(os.path.join(args.workdir, f"{i}.plan"))
        metrics = [json.loads(l) for l in open(os.path.join(args.workdir, f"{i}.jsonl"))]
        mem_meas = max(m["peak_mem_bytes"] for m in metrics)
        rows.append(dict(name=name, n=int(n), mem_pred=mem_pred, mem_meas=mem_meas,
                         err=(mem_pred - mem_meas) / mem_meas, step_pred=step, compute=compute, comm=comm,
                         bubble=bubble, step_meas=float(measured_ms)))
    rp = ranks([r["step_pred"] for r in rows])
    rm = ranks([r["step_meas"] for r in rows])
    mib = 1024 * 1024
    print(f"\npeak {args.peak_tflops} TFLOP/s, link {args.link_gbps} GB/s; rank 0's memory, 1,024 tokens a step")
    head = ("layout", "ranks", "pred MiB", "meas MiB", "error", "pred ms", "(comp+comm+bubble)", "meas ms",
            "pred rank", "meas rank")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r, a, b in zip(rows, rp, rm):
        split = f"{r['compute']:.1f}+{r['comm']:.1f}+{r['bubble']:.1f}"
        print(f"| {r['name']} | {r['n']} | {r['mem_pred'] / mib:.2f} | {r['mem_meas'] / mib:.2f} | {100 * r['err']:+.2f}% "
              f"| {r['step_pred']:.1f} | {split} | {r['step_meas']:.1f} | {a:g} | {b:g} |")
    rho = spearman([r["step_pred"] for r in rows], [r["step_meas"] for r in rows])
    two = [r for r in rows if r["n"] <= 2]  # the layouts that do not oversubscribe the 2 cores
    rho2 = spearman([r["step_pred"] for r in two], [r["step_meas"] for r in two])
    worst = max(rows, key=lambda r: abs(r["err"]))
    print(f"\nSpearman rank correlation of the step times: {rho:.2f} over {len(rows)} layouts, "
          f"{rho2:.2f} over the {len(two)} with at most 2 ranks (one per core)")
    print(f"largest memory error: {100 * worst['err']:+.2f}% ({worst['name']})")
    if abs(worst["err"]) > args.max_memory_error:
        print(f"FAILED: a memory error above {100 * args.max_memory_error:g}%")
        return 1
    print(f"memory ok: every error within {100 * args.max_memory_error:g}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
