"""Plot the loss, tokens/s and peak memory per step of one or more --metrics-file runs.

`train --metrics-file FILE` writes one JSON object per step (step, loss, lr,
grad_norm, tokens_per_s, mfu, peak_mem_bytes, skipped; and val_loss on the steps that
evaluate, with --val-data). This script draws three panels, one line per file, labelled
by file name, to compare runs (a mesh against one process, recompute modes, ZeRO
stages...); a run with a validation loss gets its validation curve (dashed, with
markers) beside its training loss.

Usage:
    python scripts/plot_metrics.py RUN.jsonl [RUN2.jsonl ...] -o OUT.png [--title T]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="--metrics-file files")
    parser.add_argument("-o", "--out", default="metrics.png")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("loss", "loss", 1.0), ("tokens_per_s", "tokens/s", 1.0), ("peak_mem_bytes", "peak memory (MiB)", 2**-20)]
    for path in args.runs:
        rows = [json.loads(line) for line in open(path)]
        if not rows:
            raise SystemExit(f"{path}: no lines (was it written by train --metrics-file?)")
        steps = [r["step"] for r in rows]
        for ax, (key, label, scale) in zip(axes, panels):
            values = [r[key] * scale if r[key] is not None else float("nan") for r in rows]  # null: diverged
            line, = ax.plot(steps, values, label=os.path.basename(path) + (" (train)" if key == "loss" else ""))
            if key == "loss":
                val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
                if val:
                    ax.plot(*zip(*val), "--o", color=line.get_color(), markersize=4,
                            label=os.path.basename(path) + " (validation)")
            ax.set_xlabel("step")
            ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    axes[2].set_ylim(bottom=0)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
