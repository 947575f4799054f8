#!/usr/bin/env python3
"""scripts/gpu_report.py DIR — write DIR/report.md from what scripts/gpu_check.sh left in
DIR, and print it.

Reads (each optional but steps.tsv): steps.tsv (one line per step: name, status,
seconds, note), machine.txt, unit_gpu.xml (Catch2's XML reporter), bf16_aten.jsonl and
bf16_fused.jsonl (training metrics), logs/NAME.log (each step's output). A step that did
not run shows as "not run"; nothing is invented.
"""
import json
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def read_steps(d):
    steps = {}
    for line in (d / "steps.tsv").read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            steps[parts[0]] = {"status": parts[1], "seconds": parts[2], "note": parts[3] if len(parts) > 3 else ""}
    return steps


def log_tail(d, name, n=8, pattern=None):
    path = d / "logs" / f"{name}.log"
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()
    if pattern:
        lines = [l for l in lines if re.search(pattern, l)]
    return lines[-n:]


def unit_tests(d):
    """[(test case, result)] from Catch2's XML: passed, FAILED, or skipped (no CUDA device)."""
    path = d / "unit_gpu.xml"
    if not path.is_file():
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        return [("(unit_gpu.xml is not valid XML: the run was cut short?)", f"unreadable: {e}")]
    rows = []
    for case in root.iter("TestCase"):
        result = case.find("OverallResult")
        ok = result is not None and result.get("success") == "true"
        skipped = any("SKIPPED" in (w.text or "") for w in case.iter("Warning"))
        rows.append((case.get("name"), "skipped" if ok and skipped else "passed" if ok else "FAILED"))
    return rows


def metrics(path):
    if not path.is_file():
        return None
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    return rows or None


def bf16_section(d):
    aten, fused = metrics(d / "bf16_aten.jsonl"), metrics(d / "bf16_fused.jsonl")
    out = []
    if not aten and not fused:
        return ["not run"]
    out.append("| kernels | steps | first loss | last loss | tokens/s (median after step 5) | peak memory |")
    out.append("|---|---|---|---|---|---|")
    for name, rows in (("aten", aten), ("fused", fused)):
        if not rows:
            out.append(f"| {name} | not run | | | | |")
            continue
        after = [r["tokens_per_s"] for r in rows[5:]] or [r["tokens_per_s"] for r in rows]
        peak = max(r.get("peak_mem_bytes") or 0 for r in rows) / 2**30
        out.append(f"| {name} | {len(rows)} | {rows[0]['loss']:.5f} | {rows[-1]['loss']:.5f} | "
                   f"{statistics.median(after):,.0f} | {peak:.2f} GiB |")
    if aten and fused:
        by_step = {r["step"]: r["loss"] for r in aten}
        diffs = [(abs(r["loss"] - by_step[r["step"]]), r["step"]) for r in fused if r["step"] in by_step]
        if diffs:
            worst, at = max(diffs)
            rel = worst / abs(by_step[at]) if by_step[at] else float("inf")
            out.append("")
            out.append(f"Loss agreement over {len(diffs)} common steps: largest |fused - aten| = {worst:.3g} "
                       f"at step {at} (relative {rel:.2g}).")
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/gpu_report.py DIR (the folder scripts/gpu_check.sh wrote)")
    d = Path(sys.argv[1])
    if not (d / "steps.tsv").is_file():
        sys.exit(f"gpu_report: {d}/steps.tsv: no results there (made by scripts/gpu_check.sh)")
    steps = read_steps(d)
    lines = ["# GPU check", ""]
    machine = d / "machine.txt"
    if machine.is_file():
        lines += ["```", *machine.read_text().strip().splitlines(), "```", ""]

    lines += ["## Steps", "", "| step | result | seconds | note |", "|---|---|---|---|"]
    for name, s in steps.items():
        lines.append(f"| {name} | {s['status']} | {s['seconds']} | {s['note']} |")
    if steps.get("build", {}).get("status") not in (None, "passed"):
        lines += ["", "Build output (end):", "```", *log_tail(d, "build", 15), "```"]

    lines += ["", "## 1. GPU unit tests (`unit_tests \"[gpu]\"`)", ""]
    cases = unit_tests(d)
    if cases is None:
        lines.append("not run")
    else:
        lines += ["| test case | result |", "|---|---|"] + [f"| {n} | {r} |" for n, r in cases]

    lines += ["", "## 2. bf16 training at world size 1: `--kernels aten` and `--kernels fused`", ""]
    lines += bf16_section(d)

    lines += ["", "## 3. Several ranks on one GPU (one NCCL_HOSTID per rank)", ""]
    probe = steps.get("nccl_two_ranks")
    if probe is None:
        lines.append("not run")
    elif probe["status"] == "passed":
        lines += ["NCCL accepted two ranks on the one GPU (dp2, 2 steps).", "",
                  "| equivalence case (against the 1-rank CUDA run; fp64 at rtol 1e-9 unless the name says fp32: 1e-4) "
                  "| result | compare_runs |",
                  "|---|---|---|"]
        for case in [n[len("equivalence_"):] for n in steps if n.startswith("equivalence_")]:
            s = steps.get(f"equivalence_{case}")
            verdict = log_tail(d, f"equivalence_{case}", 1, r"EQUIVALENT|FAILED|differ")
            lines.append(f"| {case} | {s['status'] if s else 'not run'} | {verdict[0] if verdict else ''} |")
    else:
        lines += [f"Two ranks on one GPU: {probe['status']}. NCCL's words (the run's last NCCL/error lines):", "", "```"]
        lines += log_tail(d, "nccl_two_ranks", 12, r"NCCL|rror|refus") or log_tail(d, "nccl_two_ranks", 12)
        lines.append("```")

    lines += ["", "## 4. Speed", ""]
    for name, title in (("attention_rungs", "The attention ladder, one rung at a time (`kernels/attention_rung N`)"),
                        ("bench_kernels", "Each fused kernel against ATen (`bench_kernels`)"),
                        ("kernels_e2e", "End to end, `--kernels aten` against `--kernels fused` (`bench/kernels_e2e.sh`)"),
                        ("vs_pytorch", "Against a minimal PyTorch LLaMA (eager, torch.compile) and transformers "
                                       "(`bench/vs_pytorch.sh`, GPU mode)")):
        if name not in steps:
            continue
        lines += [f"### {title}", "", f"{steps[name]['status']}, {steps[name]['seconds']} s:", "", "```"]
        lines += log_tail(d, name, 40) or ["(no output)"]
        lines += ["```", ""]
    tables = sorted((d / "profile").glob("top-rank*.txt")) if (d / "profile").is_dir() else []
    if tables:
        lines += ["### Where the time goes (`--profile`, smollm-1.7b, `--kernels fused`, steps 3-4)", "",
                  "The trace beside this report: `profile/trace-rank0.json` (open it in https://ui.perfetto.dev).", "",
                  "```", *tables[0].read_text().strip().splitlines(), "```", ""]

    report = "\n".join(lines).rstrip() + "\n"
    (d / "report.md").write_text(report)
    print(report, end="")


if __name__ == "__main__":
    main()
