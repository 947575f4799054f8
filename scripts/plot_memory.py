"""Draw a --memory-trace file as the Ultra-Scale Playbook draws a training step's memory.

`train --memory-trace FILE` writes one JSON line per phase of each step (rank 0's
tensor memory: counted exactly on the CPU, the caching allocator's on a GPU):
start, each micro-batch's forward and backward, the gradient sync, the optimizer step.
This script draws the bytes over time: they rise through each forward (activations
kept for backward), fall through its backward, and the state of parameters, gradients
and optimizer is the floor they stand on. The dotted line is the running peak.

Usage:
    python scripts/plot_memory.py TRACE.jsonl [TRACE2.jsonl ...] -o OUT.png [--title T]

Several traces (e.g. --recompute none, selective, full) share one plot, labelled by
their file names; the phases are marked on the first.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"forward": "tab:orange", "backward": "tab:blue", "sync": "tab:purple", "optimizer": "tab:green",
           "start": "grey", "pipeline": "tab:red"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="--memory-trace files, drawn on the same axes")
    parser.add_argument("-o", "--out", default="memory.png")
    parser.add_argument("--title", default="memory of a training step")
    args = parser.parse_args()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    mib = 1024 * 1024
    for i, path in enumerate(args.traces):
        rows = [json.loads(line) for line in open(path)]
        if not rows:
            raise SystemExit(f"{path}: no lines (was it written by train --memory-trace?)")
        t = [r["t"] for r in rows]
        line, = ax.plot(t, [r["bytes"] / mib for r in rows], "-", lw=1.5,
                        label=os.path.basename(path) if len(args.traces) > 1 else "tensor memory")
        ax.plot(t, [r["peak"] / mib for r in rows], ":", lw=1, color=line.get_color())
        if i == 0:  # mark the phases of the first trace
            for r in rows:
                ax.plot(r["t"], r["bytes"] / mib, "o", ms=4, color=COLOURS.get(r["phase"], "black"))
            for phase, colour in COLOURS.items():
                if any(r["phase"] == phase for r in rows):
                    ax.plot([], [], "o", color=colour, label=phase)
            for r in rows:
                if r["phase"] == "start":
                    ax.axvline(r["t"], color="grey", lw=0.5)
                    ax.text(r["t"], 0, f" step {r['step']}", fontsize=8, va="bottom", color="grey")
    ax.set_xlabel("seconds since training began")
    ax.set_ylabel("MiB (dotted: the step's peak)")
    ax.set_ylim(bottom=0)
    ax.set_title(args.title)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
