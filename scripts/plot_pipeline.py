"""Draw a pipeline-parallel schedule as a timeline PNG from a Chrome trace.

Reads the trace that `train --pp-trace FILE` writes and draws one optimizer step
the way the Ultra-Scale Playbook draws pipeline schedules: one row per rank
(rank 0 on top), one box per compute action, coloured by micro-batch.
F (forward) boxes are light, B (backward) boxes full colour, W (deferred
weight-gradient, zero-bubble schedules) boxes hatched. The number in a box is the
micro-batch; with interleaving (virtual_stages > 1) each prime marks one chunk:
3 = micro-batch 3 on chunk 0, 3' = chunk 1, 3'' = chunk 2. Thin grey bars under
a row are its point-to-point send/recv batches. Bubbles are the empty space.

Usage:
    python scripts/plot_pipeline.py TRACE.json OUT.png [--step N] [--title T] [--no-comm]

Measured bubble, for the chosen step (default: the last one, i.e. warm):
    span        = latest end - earliest start over all ranks' compute and comm events
    busy[r]     = sum of rank r's compute durations
    bubble[r]   = (span - busy[r]) / busy[r]      (idle time relative to useful work)
    bubble      = mean over ranks
which is what the textbook formula, e.g. (P-1)/m for GPipe/1F1B, predicts.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

KINDS = {"F": dict(alpha=0.45, hatch=None), "B": dict(alpha=1.0, hatch=None),
         "W": dict(alpha=0.7, hatch="///")}
COLORS = plt.get_cmap("tab10").colors


def fail(msg):
    """Print a one-line error and exit with status 2."""
    print(f"plot_pipeline: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    """Return (duration events, otherData) of a Chrome trace file."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        fail(f"no such file: {path}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(f"{path} is not JSON: {e}")
    if isinstance(data, list):  # the bare-array form of a Chrome trace
        data = {"traceEvents": data}
    if not isinstance(data, dict):
        fail(f"{path}: expected an object with traceEvents")
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    for e in events:
        args = e.setdefault("args", {})
        e["rank"] = int(args.get("rank", e.get("tid", 0)))
        e["step"] = int(args.get("step", 1))
    if not any(e.get("cat") == "compute" for e in events):
        fail(f"{path}: no compute events (cat 'compute', ph 'X')")
    return events, data.get("otherData", {})


def select_step(events, step):
    """Return the chosen step (default: the last) and its events."""
    steps = sorted({e["step"] for e in events if e.get("cat") == "compute"})
    if step is None:
        step = steps[-1]
    elif step not in steps:
        fail(f"step {step} not in trace; available steps: {' '.join(map(str, steps))}")
    return step, [e for e in events if e["step"] == step]


def measure(events, ranks):
    """Return (t0 in us, span in us, per-rank bubble fractions) of one step."""
    t0 = min(e["ts"] for e in events)
    span = max(e["ts"] + e["dur"] for e in events) - t0
    busy = {r: 0.0 for r in ranks}
    for e in events:
        if e.get("cat") == "compute":
            busy[e["rank"]] += e["dur"]
    return t0, span, [(span - busy[r]) / busy[r] if busy[r] > 0 else float("nan") for r in ranks]


def label(e, v):
    """Box text: the micro-batch, one prime per chunk when interleaved."""
    a = e["args"]
    return (str(a.get("micro", "?")) + ("'" * int(a.get("chunk", 0)) if v > 1 else "")
            + ("&" if a.get("paired") else ""))  # DualPipeV: an F that shares its slot with the next B


def draw(events, ranks, t0, span, v, title, out, show_comm, xlabel="time within the step (ms)"):
    """Render the timeline of one step to a PNG file."""
    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.55 * len(ranks)))
    axes_width_in = 13 * 0.8  # rough width of the plot area, to decide if a label fits
    span_ms = span / 1e3
    for e in events:
        x, w, y = (e["ts"] - t0) / 1e3, e["dur"] / 1e3, ranks.index(e["rank"])
        if e.get("cat") == "comm":
            if show_comm:
                ax.barh(y + 0.4, w, left=x, height=0.08, color="0.55", linewidth=0)
            continue
        kind = KINDS.get(e["name"], KINDS["B"])
        color = COLORS[int(e["args"].get("micro", 0)) % len(COLORS)]
        ax.barh(y, w, left=x, height=0.7, color=color, alpha=kind["alpha"], hatch=kind["hatch"],
                edgecolor="black", linewidth=0.6)
        text = label(e, v)
        if w / span_ms * axes_width_in > 0.06 * len(text.rstrip("'")) + 0.03 * text.count("'") + 0.04:
            ax.text(x + w / 2, y, text, ha="center", va="center", fontsize=8)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.4, -0.6)  # rank 0 on top
    ax.set_xlim(0, span_ms)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=10)
    names = {e["name"] for e in events if e.get("cat") == "compute"}
    handles = [Patch(facecolor="0.5", alpha=KINDS[k]["alpha"], hatch=KINDS[k]["hatch"],
                     edgecolor="black", label=text)
               for k, text in [("F", "F forward"), ("B", "B backward"), ("W", "W weight grad")]
               if k in names]
    if show_comm and any(e.get("cat") == "comm" for e in events):
        handles.append(Patch(facecolor="0.55", label="send/recv"))
    micros = sorted({int(e["args"].get("micro", 0)) for e in events if e.get("cat") == "compute"})
    handles += [Patch(facecolor=COLORS[i % len(COLORS)], label=f"micro {i}")
                for i in micros if i < len(COLORS)]
    if len(micros) > len(COLORS):
        handles.append(Patch(facecolor="white", label=f"(colours repeat every {len(COLORS)})"))
    if v > 1:
        handles.append(Patch(facecolor="white", label="n' = chunk 1, n'' = chunk 2 ..."))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=130)


def main():
    p = argparse.ArgumentParser(description="Plot one step of a pipeline-parallel Chrome trace.")
    p.add_argument("trace")
    p.add_argument("out")
    p.add_argument("--step", type=int, help="optimizer step to draw (1-based; default: the last)")
    p.add_argument("--title", help="heading instead of 'schedule, P, m'")
    p.add_argument("--no-comm", action="store_true", help="do not draw the send/recv bars")
    a = p.parse_args()

    events, other = load(a.trace)
    step, events = select_step(events, a.step)
    ranks = sorted({e["rank"] for e in events} | set(range(int(other.get("pp", 0)))))
    t0, span, bubbles = measure(events, ranks)
    mean = sum(bubbles) / len(bubbles)
    sched, v = other.get("schedule", "pipeline"), int(other.get("virtual_stages", 1))
    formula = other.get("bubble_formula")

    per_rank = " ".join(f"{b:.2f}" for b in bubbles)
    how = "simulated" if other.get("simulated") else "measured"  # train --dry-run --pp-trace: unit time
    print(f"{sched} step {step}: {how} bubble fraction {mean:.3f} (per rank {per_rank})"
          + (f"; formula {formula}" if formula else ""))

    heading = a.title or (f"{sched}, P={other.get('pp', len(ranks))}, m={other.get('grad_acc_steps', '?')}"
                          + (f", v={v}" if v > 1 else ""))
    title = (f"{heading} — step {step}: {how} bubble {mean:.2f}"
             + (f" (formula {formula})" if formula else "") + f"\nper rank: {per_rank}")
    draw(events, ranks, t0, span, v, title, a.out, not a.no_comm,
         "time within the step (units: F = 1, B = 2 or B = W = 1)" if other.get("simulated") else "time within the step (ms)")


if __name__ == "__main__":
    main()
