#!/usr/bin/env python3
"""scripts/run_report.py DIR [--reference DIR2] [-o FILE] — one run, one page.

Reads what `build/train --run-dir DIR` wrote (runtime/preflight/run_dir.h lists the files)
and writes DIR/report.html: one self-contained file (inline SVG, CSS and a few lines of
script; nothing fetched, no URL), readable without scripts: a table under every chart
gives its numbers. Each panel is shown only when its files are there:

  run        command.txt, run.json: the command, the mesh with each rank's holdings,
             the model, the machine
  loss       metrics.jsonl: loss and grad norm per step (val loss when present); with
             --reference DIR2 (say the single-process run) both curves and the largest
             relative difference per step: the equivalence contract, seen
  timeline   pp_trace.json (+ flight/ for the collectives): per rank, the last step's
             forwards, backwards, weight gradients, sends, receives, collectives, each on
             its lane, idle time shaded, with totals
  ledger     rank-<R>.json: calls and elements per group and kind, per step, beside the
             formula quoted from the technique's README ("Communication per step")
  memory     estimate.json, rank-<R>.json, memory.jsonl: the estimate's parts beside the
             measured peak per rank, and rank 0's memory over the last step
  narration  narration.txt (--explain): the first step, every communication with its line
  hang       flight/: scripts/hang_report.py's verdict

    python3 scripts/run_report.py runs/dp2pp2                # -> runs/dp2pp2/report.html
    python3 scripts/run_report.py runs/dp2pp2 --reference runs/single

Test: ctest -L report   (tests/cmake/report_tests.cmake: opened in headless Chromium)
"""
import argparse
import glob
import html
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
LANES = [("F", "forward"), ("B", "backward"), ("W", "weight grad"), ("send", "send"), ("recv", "recv"),
         ("coll", "collectives")]
DTYPE_BYTES = {"fp32": 4, "fp64": 8, "bf16": 2, "fp16": 2, "fp8": 2}
READMES = {"tp": "tensor_parallel", "pp": "pipeline_parallel", "embed": "pipeline_parallel",
           "cp": "context_parallel", "cp_a2a": "context_parallel", "cp_ring": "context_parallel"}
esc = html.escape


def fail(msg):
    print("run_report: error: " + msg, file=sys.stderr)
    sys.exit(2)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))


def read_lines(path):
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))


def num(v, digits=6):
    if isinstance(v, int):
        return "{:,}".format(v)
    return "%.*g" % (digits, v)


def table(head, rows, cls=""):
    out = ['<table class="%s"><tr>' % cls + "".join("<th>%s</th>" % esc(str(h)) for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join("<td>%s</td>" % c for c in r) + "</tr>")
    return "".join(out) + "</table>"


def panel(pid, title, body):
    return '<section id="%s" class="panel"><h2>%s</h2>%s</section>' % (pid, esc(title), body)


# ---- charts (hand-made SVG) ---------------------------------------------------------------
def line_chart(series, title, w=560, h=220):
    """series: [(label, [(x, y), ...], color, dashed)]"""
    pts = [p for _, s, _, _ in series for p in s if p[1] is not None]
    if not pts:
        return ""
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    x1 = x1 if x1 > x0 else x0 + 1
    pad = (y1 - y0) * 0.08 or abs(y1) * 0.1 or 1
    y0, y1 = y0 - pad, y1 + pad
    L, R, T, B = 56, 10, 22, 28
    sx = lambda x: L + (x - x0) / (x1 - x0) * (w - L - R)
    sy = lambda y: T + (y1 - y) / (y1 - y0) * (h - T - B)
    out = ['<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">' % (w, h, esc(title)),
           '<text x="%d" y="14" class="t">%s</text>' % (L, esc(title)),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" class="ax"/>' % (L, h - B, w - R, h - B),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" class="ax"/>' % (L, T, L, h - B)]
    for k in range(3):
        y = y0 + (y1 - y0) * k / 2
        out.append('<text x="%d" y="%.1f" class="l" text-anchor="end">%s</text>' % (L - 4, sy(y) + 4, num(y, 4)))
    out.append('<text x="%d" y="%d" class="l">step %s</text><text x="%d" y="%d" class="l" text-anchor="end">%s</text>'
               % (L, h - 8, num(x0), w - R, h - 8, num(x1)))
    for i, (label, s, color, dashed) in enumerate(series):
        s = [p for p in s if p[1] is not None]
        d = " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in s)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                   % (d, color, ' stroke-dasharray="5 3"' if dashed else ""))
        out.extend('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (sx(x), sy(y), color) for x, y in s)
        out.append('<text x="%d" y="%d" class="l" fill="%s">%s</text>' % (w - R - 150, T + 12 + 13 * i, color, esc(label)))
    return "".join(out) + "</svg>"


def bars(rows, title, w=560):
    """rows: [(label, [(part, value, color)])]: stacked horizontal bars."""
    top = max([sum(v for _, v, _ in parts) for _, parts in rows] + [1])
    h = 26 + 22 * len(rows)
    out = ['<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">' % (w, h, esc(title)),
           '<text x="90" y="14" class="t">%s</text>' % esc(title)]
    for i, (label, parts) in enumerate(rows):
        y, x = 22 + 22 * i, 90.0
        out.append('<text x="84" y="%d" class="l" text-anchor="end">%s</text>' % (y + 13, esc(label)))
        for part, v, color in parts:
            bw = v / top * (w - 100)
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="16" fill="%s"><title>%s: %s</title></rect>'
                       % (x, y, bw, color, esc(part), num(v)))
            x += bw
    return "".join(out) + "</svg>"


# ---- panels -------------------------------------------------------------------------------
def run_panel(d):
    run = read_json(os.path.join(d, "run.json"))
    command = open(os.path.join(d, "command.txt")).read().strip() if os.path.exists(os.path.join(d, "command.txt")) else ""
    if not run and not command:
        return ""
    body = "<pre class=\"cmd\">%s</pre>" % esc(command) if command else ""
    if run:
        mesh = run["mesh"]
        body += "<p>mesh: dp %d × pp %d × cp %d × tp %d (tp fastest): a row per dp rank</p>" % (
            mesh["dp"], mesh["pp"], mesh["cp"], mesh["tp"])
        cols = max(1, mesh["pp"] * mesh["cp"] * mesh["tp"])
        w, bw = 560, min(130, 540 // cols)
        rows = (len(run["ranks"]) + cols - 1) // cols
        svg = ['<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="the mesh">' % (w, 10 + 70 * rows)]
        for r in run["ranks"]:
            i, j = divmod(r["rank"], cols)
            x, y = 10 + j * (bw + 6), 6 + i * 70
            text = " ".join(r["holds"])  # the holdings in short: layers, heads, positions
            short = [m.group(0) for m in (re.search(p, text) for p in (r"layers [\d-]+", r"heads [\d-]+",
                                                                        r"positions [\d, -]+\d")) if m]
            svg.append('<rect x="%d" y="%d" width="%d" height="62" rx="4" fill="%s" fill-opacity="0.25" stroke="#555">'
                       '<title>%s</title></rect>' % (x, y, bw, COLORS[r["pp"] % 8], esc("; ".join(r["holds"]))))
            svg.append('<text x="%d" y="%d" class="t">rank %d</text>' % (x + 5, y + 14, r["rank"]))
            svg.append('<text x="%d" y="%d" class="l">dp%d pp%d cp%d tp%d</text>'
                       % (x + 5, y + 27, r["dp"], r["pp"], r["cp"], r["tp"]))
            for k, line in enumerate(short[:3]):
                svg.append('<text x="%d" y="%d" class="l">%s</text>' % (x + 5, y + 39 + 10 * k, esc(line[:26])))
        body += "".join(svg) + "</svg>"
        body += table(["rank", "dp", "pp", "cp", "tp", "holds"],
                      [[str(r["rank"]), str(r["dp"]), str(r["pp"]), str(r["cp"]), str(r["tp"]),
                        "<br>".join(esc(h) for h in r["holds"])] for r in run["ranks"]], "holdings")
        body += table(["model", "value"], [[esc(k), esc(str(v))] for k, v in run["model"].items()])
        body += table(["machine", "value"], [[esc(k), esc(str(v))] for k, v in run["machine"].items()])
    return panel("run", "The run", body)


def loss_panel(d, ref):
    rows = read_lines(os.path.join(d, "metrics.jsonl"))
    if not rows:
        return ""
    refs = {r["step"]: r for r in read_lines(os.path.join(ref, "metrics.jsonl"))} if ref else {}
    series = [("loss", [(r["step"], r["loss"]) for r in rows], COLORS[0], False)]
    if any("val_loss" in r for r in rows):
        series.append(("val loss", [(r["step"], r.get("val_loss")) for r in rows if "val_loss" in r], COLORS[2], False))
    if refs:
        series.append(("reference loss", [(s, r["loss"]) for s, r in sorted(refs.items())], COLORS[3], True))
    body = line_chart(series, "loss per step")
    body += line_chart([("grad norm", [(r["step"], r["grad_norm"]) for r in rows], COLORS[1], False)]
                       + ([("reference grad norm", [(s, r["grad_norm"]) for s, r in sorted(refs.items())], COLORS[3], True)]
                          if refs else []), "grad norm per step")
    head = ["step", "loss", "grad norm", "lr"] + (["val loss"] if any("val_loss" in r for r in rows) else [])
    if refs:
        head += ["reference loss", "largest relative difference (loss, grad norm)"]
    out, worst = [], 0.0
    for r in rows:
        cells = ['<span class="loss" data-step="%d">%s</span>' % (r["step"], repr(r["loss"])), num(r["grad_norm"]),
                 num(r["lr"])]
        if "val loss" in head:
            cells.append(num(r["val_loss"]) if "val_loss" in r else "")
        if refs:
            q = refs.get(r["step"])
            rel = lambda a, b: abs(a - b) / max(abs(b), 1e-300)
            diff = max(rel(r["loss"], q["loss"]), rel(r["grad_norm"], q["grad_norm"])) if q else None
            worst = max(worst, diff or 0.0)
            cells += [repr(q["loss"]) if q else "", "%.3g" % diff if diff is not None else "(no such step)"]
        out.append([str(r["step"])] + cells)
    body += table(head, out, "metrics")
    if refs:
        body += ('<p>largest relative difference over the run: <b class="maxdiff">%.3g</b> (against %s)</p>'
                 % (worst, esc(ref)))
    return panel("loss", "Loss and grad norm", body)


def union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def flight_collectives(d, rank, offset_of):
    """Rank's collectives of the flight recorder as (start_us, dur_us, label), on the trace's clock."""
    f = read_json(os.path.join(d, "flight", "comms-rank%d.json" % rank))
    if not f or rank not in offset_of:
        return []
    names = {g["id"]: g["name"] for g in f.get("groups", [])}
    out = []
    for e in f["entries"]:
        if e["op"] in ("send", "recv") or e.get("completed_s") is None or e.get("function") == "write_trace":
            continue  # (write_trace: the trace's own gathering, after the last step)
        a = e["issued_s"] * 1e6 + offset_of[rank]
        out.append((a, max(e["completed_s"] * 1e6 + offset_of[rank] - a, 1.0),
                    "%s %s" % (e["op"], names.get(e["group"], "?"))))
    return out


def draw_lanes(lanes, t0, t1, title):
    """Each rank's lanes (LANES) between t0 and t1 (us): the SVG and the totals' rows."""
    ranks = sorted(lanes)
    w, L, lh = 760, 110, 11
    h = 24 + len(ranks) * (len(LANES) * lh + 14)
    sx = lambda t: L + (t - t0) / max(t1 - t0, 1.0) * (w - L - 10)
    svg = ['<svg class="chart wide" viewBox="0 0 %d %d" role="img" aria-label="%s">' % (w, h, esc(title)),
           '<text x="%d" y="14" class="t">%s, %.1f ms</text>' % (L, esc(title), (t1 - t0) / 1e3)]
    totals = []
    for i, r in enumerate(ranks):
        y = 22 + i * (len(LANES) * lh + 14)
        svg.append('<rect x="%d" y="%d" width="%d" height="%d" class="idle"/>' % (L, y, w - L - 10, len(LANES) * lh))
        svg.append('<text x="4" y="%d" class="t">rank %d</text>' % (y + 10, r))
        for j, (k, label) in enumerate(LANES):
            svg.append('<text x="%d" y="%d" class="l" text-anchor="end">%s</text>' % (L - 4, y + j * lh + 9, label))
            for a, dur, what in lanes[r][k]:
                svg.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %.0f us</title></rect>'
                           % (sx(a), y + j * lh + 1, max(sx(a + dur) - sx(a), 0.8), lh - 2, COLORS[j], esc(what), dur))
        comp = union([(a, a + dur) for k in ("F", "B", "W") for a, dur, _ in lanes[r][k]])
        comm = union([(a, a + dur) for k in ("send", "recv", "coll") for a, dur, _ in lanes[r][k]])
        busy = union([(a, a + dur) for k, _ in LANES for a, dur, _ in lanes[r][k]])
        totals.append([str(r)] + ["%.2f" % (v / 1e3) for v in (comp, comm, t1 - t0 - busy)] +
                      [str(sum(len(lanes[r][k]) for k in ("F", "B", "W"))),
                       str(sum(len(lanes[r][k]) for k in ("send", "recv", "coll")))])
    return "".join(svg) + "</svg>", totals


TOTALS = ["rank", "compute ms", "communication ms", "idle ms", "compute actions", "communications"]


def flight_timeline(d):
    """Without a pipeline trace: each rank's communications of its last step, from the flight
    recorder alone (a step ends with the loss's all-reduce, train.cpp's train_step)."""
    lanes, t0, t1 = {}, None, None
    for path in glob.glob(os.path.join(d, "flight", "comms-rank*.json")):
        f = read_json(path)
        names = {g["id"]: g["name"] for g in f.get("groups", [])}
        es = [e for e in f["entries"] if e.get("completed_s") is not None and e.get("function") != "write_trace"]
        ends = [i for i, e in enumerate(es) if e.get("function") == "train_step"]
        if len(ends) < 1:
            continue
        start = ends[-2] + 1 if len(ends) >= 2 else 0
        lane = {k: [] for k, _ in LANES}
        for e in es[start:ends[-1] + 1]:
            k = e["op"] if e["op"] in ("send", "recv") else "coll"
            a = (f.get("start_unix_s", 0.0) + e["issued_s"]) * 1e6  # the machine's clock: the ranks line up
            lane[k].append((a, max(e["completed_s"] * 1e6 - a, 1.0), "%s %s #%d" % (e["op"], names.get(e["group"], "?"),
                                                                                     e["seq"])))
        lanes[f["rank"]] = lane
    if not lanes:
        return ""
    t0 = min(a for lane in lanes.values() for v in lane.values() for a, _, _ in v)
    t1 = max(a + dur for lane in lanes.values() for v in lane.values() for a, dur, _ in v)
    svg, totals = draw_lanes(lanes, t0, t1, "the last step's communications")
    body = svg + ("<p>From the flight recorder (flight/): every communication of each rank's last step, on the "
                  "machine's clock; the forwards and backwards are traced only by the pipeline (--pp), so here the grey ground "
                  "between communications is compute or idle time.</p>")
    for row in totals:
        row[1], row[3], row[4] = "", "%s (compute or idle)" % row[3], ""
    return panel("timeline", "A step, rank by rank", body + table(TOTALS, totals, "timeline"))


def timeline_panel(d):
    trace = read_json(os.path.join(d, "pp_trace.json"))
    if not trace:
        return flight_timeline(d)
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    for e in ev:  # (a --dry-run's simulated trace has one step, and no micro-batch on its sends)
        e.setdefault("args", {}).setdefault("step", 1)
        e["args"].setdefault("micro", -1)
    if not ev:
        return ""
    step = max(e["args"]["step"] for e in ev)
    ranks = sorted({e["tid"] for e in ev})
    # The flight recorder's clock is its own: each rank's is moved so that its last pipeline
    # message starts where the pipeline trace has it (both record the same message).
    offset_of = {}
    for r in ranks:
        f = read_json(os.path.join(d, "flight", "comms-rank%d.json" % r))
        sends = [e for e in ev if e["tid"] == r and e["name"] in ("send", "recv")]
        p2p = [e for e in (f or {}).get("entries", []) if e["op"] in ("send", "recv")]
        if sends and p2p:
            offset_of[r] = max(e["ts"] for e in sends) - max(e["issued_s"] for e in p2p) * 1e6
    lanes = {r: {k: [] for k, _ in LANES} for r in ranks}
    for e in ev:
        if e["args"]["step"] == step:
            lanes[e["tid"]][e["name"]].append((e["ts"], e["dur"], "%s micro %d" % (e["name"], e["args"]["micro"])))
    t0 = min(e["ts"] for e in ev if e["args"]["step"] == step)
    t1 = max(e["ts"] + e["dur"] for e in ev if e["args"]["step"] == step)
    for r in ranks:  # the last step's: from the rank's first action on (the gradients' sync, the norm, the loss after)
        first = min(a for k in ("F", "B", "W", "send", "recv") for a, _, _ in lanes[r][k])
        lanes[r]["coll"] = [c for c in flight_collectives(d, r, offset_of) if c[0] >= first]
        t1 = max([t1] + [a + dur for a, dur, _ in lanes[r]["coll"]])
    svg, totals = draw_lanes(lanes, t0, t1, "step %d" % step)
    body = svg + ("<p>The grey ground is idle time. Collectives come from the flight recorder (flight/), whose clock is "
                  "lined up with the trace's at each rank's last pipeline message. Schedule %s, bubble formula %s.</p>"
                  % (esc(str(trace.get("otherData", {}).get("schedule", "?"))),
                     esc(str(trace.get("otherData", {}).get("bubble_formula", "?")))))
    return panel("timeline", "A step, rank by rank", body + table(TOTALS, totals, "timeline"))


def readme_for(name, zero):
    if name in READMES:
        return READMES[name] + "/README.md"
    if name.startswith("ep"):
        return "expert_parallel/README.md"
    return ("zero" if zero else "data_parallel") + "/README.md"  # dp, cp_dp, world: the gradients' sync


def formula(readme, last=False):
    """The first lines of the README's communication section (its last one with `last`: the
    all-to-all modes of context parallelism), up to the end of its first table."""
    try:
        lines = open(os.path.join(ROOT, readme)).read().splitlines()
    except OSError:
        return ""
    starts = [i for i, line in enumerate(lines) if re.match(r"^##+ (Communication|Cost) per step", line)]
    if not starts:
        return ""
    out, seen_table = [], False
    for line in lines[(starts[-1] if last else starts[0]) + 1:][:40]:
        if line.startswith("#") or (seen_table and not line.startswith("|")):
            break
        seen_table = seen_table or line.startswith("|")
        out.append(line)
    return "\n".join(out).strip()


def ledger_panel(d, cfg):
    files = sorted(glob.glob(os.path.join(d, "rank-*.json")), key=lambda p: int(re.findall(r"\d+", p)[-1]))
    docs = [read_json(p) for p in files]
    if not docs:
        return ""
    zero = int(cfg.get("--zero", "0") or 0)
    width = DTYPE_BYTES.get(cfg.get("--dtype", "fp32"), 4)
    steps = max(docs[0]["steps"], 1)
    by_group = {}
    for doc in docs:
        for g in doc["groups"]:
            for kind, n in g["ledger"].items():
                by_group.setdefault(g["name"], []).append((doc["rank"], g, kind, n))
    if not by_group:
        return ""  # (one process: nothing was communicated)
    body = "<p>Elements per step as Comm's ledger counts them (picotron/comm.h), over the %d training step(s); " \
           "bytes at %d per element.</p>" % (steps, width)
    for name, rows in by_group.items():
        readme = readme_for(name, zero)
        out = []
        for rank, g, kind, n in rows:
            out.append([str(rank), esc(",".join(map(str, g["world_ranks"]))), esc(kind), num(n["calls"] / steps),
                        '<span class="elements" data-group="%s" data-rank="%d" data-kind="%s">%s</span>'
                        % (esc(name), rank, esc(kind), num(n["elements"] // steps if n["elements"] % steps == 0
                                                          else n["elements"] / steps)),
                        num(n["elements"] * width // steps)])
        text = formula(readme, last=name in ("cp_a2a", "cp_ring"))
        body += ('<div class="group"><h3>group %s</h3><div class="side">%s<div class="formula"><p>from <a href="%s">%s'
                 '</a>:</p><pre>%s</pre></div></div></div>'
                 % (esc(name), table(["rank", "members (world)", "kind", "calls/step", "elements/step", "bytes/step"],
                                     out, "ledger"), esc(os.path.relpath(os.path.join(ROOT, readme), d)), esc(readme),
                    esc(text)))
    return panel("ledger", "Communication per group", body)


def memory_panel(d):
    est = read_json(os.path.join(d, "estimate.json"))
    ranks = {}
    for p in glob.glob(os.path.join(d, "rank-*.json")):
        doc = read_json(p)
        ranks[doc["rank"]] = doc["peak_mem_bytes"]
    trace = read_lines(os.path.join(d, "memory.jsonl"))
    if not est and not ranks and not trace:
        return ""
    body, mib = "", 1 << 20
    if est:
        names = []
        for r in est["ranks"]:
            names += [p["name"] for p in r["parts"] if p["name"] not in names]
        color = {n: COLORS[i % 8] for i, n in enumerate(names)}
        rows = []
        for r in est["ranks"]:
            rows.append(("rank %d est." % r["rank"], [(p["name"], p["bytes"] / mib, color[p["name"]]) for p in r["parts"]]))
            if r["rank"] in ranks:
                rows.append(("rank %d peak" % r["rank"], [("measured peak", ranks[r["rank"]] / mib, "#444")]))
        body += bars(rows, "memory per rank, MiB: the estimate's parts, and the measured peak")
        body += "<p>" + " ".join('<span class="key" style="background:%s"></span>%s' % (color[n], esc(n))
                                 for n in names) + "</p>"
        out = []
        for r in est["ranks"]:
            peak = ranks.get(r["rank"])
            out.append([str(r["rank"])] + ["%s<br><small>%s</small>" % (num(p["bytes"] / mib, 4), esc(p["formula"]))
                                           for p in r["parts"]] +
                       [num(r["peak_bytes"] / mib, 4),
                        '<span class="peak" data-rank="%d">%s</span>' % (r["rank"], num(peak)) if peak is not None else ""])
        width = max(len(r["parts"]) for r in est["ranks"])
        body += table(["rank"] + [p["name"] + " MiB" for p in max(est["ranks"], key=lambda r: len(r["parts"]))["parts"]]
                      [:width] + ["estimated peak MiB", "measured peak bytes (last step)"], out, "memory")
    if trace:
        step = max(t["step"] for t in trace)
        last = [t for t in trace if t["step"] == step]
        body += line_chart([("tensor memory MiB", [(t["t"] - last[0]["t"], t["bytes"] / mib) for t in last], COLORS[0],
                             False)], "rank 0's tensor memory over step %d (x: seconds into the step)" % step)
        body += table(["phase", "micro", "t s", "bytes", "peak"],
                      [[esc(t["phase"]), str(t["micro"]), "%.4f" % (t["t"] - last[0]["t"]), num(t["bytes"]),
                        num(t["peak"])] for t in last], "trace")
    return panel("memory", "Memory per rank", body)


def narration_panel(d):
    path = os.path.join(d, "narration.txt")
    if not os.path.exists(path):
        return ""
    lines = open(path).read().splitlines()
    rows, i = [], 0
    while i < len(lines):
        line, src = lines[i], ""
        if i + 1 < len(lines) and lines[i + 1].strip().startswith("at "):
            src, i = lines[i + 1].strip()[3:], i + 1
        rows.append('<tr><td><pre>%s</pre></td><td class="src">%s</td></tr>' % (esc(line), esc(src)))
        i += 1
    body = ('<details><summary>%d lines: the first step, every communication with the line that issued it'
            '</summary><table class="narration"><tr><th>narration</th><th>source line</th></tr>%s</table></details>'
            % (len(rows), "".join(rows)))
    return panel("narration", "Narration (--explain)", body)


def hang_panel(d):
    flight = os.path.join(d, "flight")
    if not glob.glob(os.path.join(flight, "comms-rank*.json")):
        return ""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "hang_report.py"), flight],
                       capture_output=True, text=True, timeout=120)
    verdict = "no problem found" if p.returncode == 0 else "a problem (exit %d)" % p.returncode
    return panel("hang", "Hang report", "<p>verdict: <b>%s</b> (scripts/hang_report.py %s)</p><pre>%s</pre>"
                 % (esc(verdict), esc(flight), esc(p.stdout.strip())))


CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:1em auto;max-width:1100px;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;border-bottom:1px solid #ccc}h3{font-size:1em;margin:.6em 0 .2em}
nav a{margin-right:1em}.panel{margin-bottom:1.5em}pre{white-space:pre-wrap;margin:0}
.cmd{background:#f4f4f4;padding:.5em}table{border-collapse:collapse;margin:.4em 0;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px;vertical-align:top;text-align:left}
.chart{width:100%;max-width:560px;display:block}.chart.wide{max-width:100%}.t{font-size:12px;font-weight:600}
.l{font-size:10px}.ax{stroke:#888}.idle{fill:#eee}.side{display:flex;gap:1em;flex-wrap:wrap}
.formula{max-width:520px;font-size:12px;background:#fafafa;padding:.3em}.src{color:#666;font-size:11px}
.key{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px}table.narration pre{font-size:11px}"""
SCRIPT = """document.querySelectorAll('section.panel h2').forEach(function(h){h.style.cursor='pointer';
h.title='click to fold';h.addEventListener('click',function(){var s=h.parentNode;
for(var i=1;i<s.children.length;i++){var c=s.children[i];c.style.display=c.style.display==='none'?'':'none';}});});"""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="a run's --run-dir")
    ap.add_argument("--reference", help="another run's --run-dir (say the single-process run): curves overlaid")
    ap.add_argument("-o", "--out", help="the page (default: DIR/report.html)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.dir):
        fail("%s: not a folder (give a run's --run-dir)" % a.dir)
    if a.reference and not os.path.exists(os.path.join(a.reference, "metrics.jsonl")):
        fail("--reference %s: no metrics.jsonl there (give another run's --run-dir)" % a.reference)
    cfg = read_json(os.path.join(a.dir, "config.json")) or {}
    panels = [run_panel(a.dir), loss_panel(a.dir, a.reference), timeline_panel(a.dir), ledger_panel(a.dir, cfg),
              memory_panel(a.dir), narration_panel(a.dir), hang_panel(a.dir)]
    panels = [p for p in panels if p]
    if not panels:
        fail("%s: none of a run's files (was it written by train --run-dir %s?)" % (a.dir, a.dir))
    ids = re.findall(r'<section id="(\w+)" class="panel"><h2>([^<]*)</h2>', "".join(panels))
    nav = "<nav>" + "".join('<a href="#%s">%s</a>' % (i, t) for i, t in ids) + "</nav>"
    page = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>run report: %s</title>'
            '<style>%s</style></head><body><h1>run report: %s</h1>%s%s<script>%s</script></body></html>\n'
            % (esc(a.dir), CSS, esc(os.path.abspath(a.dir)), nav, "".join(panels), SCRIPT))
    out = a.out or os.path.join(a.dir, "report.html")
    with open(out + ".tmp", "w") as f:
        f.write(page)
    os.replace(out + ".tmp", out)
    print("wrote %s (%d bytes, panels: %s)" % (out, len(page.encode()), ", ".join(i for i, _ in ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
