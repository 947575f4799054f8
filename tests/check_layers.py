#!/usr/bin/env python3
"""tests/check_layers.py ROOT — the include arrows point one way (README.md, "Layout").

  the step         picotron/*.{h,cpp}: includes the step's headers, and of the runtime
                   only the launch plumbing Comm is built on (STEP_MAY_USE below);
                   never a technique folder, never kernels/ (the model reaches the fused
                   kernels through its slots)
  the techniques   data_parallel/ tensor_parallel/ pipeline_parallel/ context_parallel/
                   zero/ kernels/: the step and the runtime, never another technique
  the runtime      picotron/runtime/: used by train.cpp and the tests; may read any
                   technique's pure arithmetic (the estimator walks ZeRO's layout and the
                   pipeline schedules)

Every violation is one line; exit 1 if any. Run by ctest (label unit: layers.include_rules).
"""
import pathlib
import re
import sys

TECHNIQUES = ["data_parallel", "tensor_parallel", "pipeline_parallel", "context_parallel", "zero", "kernels"]
STEP_MAY_USE = {"picotron/runtime/distributed.h", "picotron/runtime/comm_internal.h",
                "picotron/runtime/nccl_watchdog.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    return INCLUDE.findall(path.read_text(errors="replace"))


def folder(rel):
    parts = rel.split("/")
    if parts[0] == "picotron":
        return "runtime" if len(parts) > 2 and parts[1] == "runtime" else "step"
    return parts[0] if parts[0] in TECHNIQUES else None


def main(root):
    root = pathlib.Path(root)
    problems = []
    sources = [p for d in ["picotron"] + TECHNIQUES for p in (root / d).rglob("*")
               if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    for path in sorted(sources):
        rel = path.relative_to(root).as_posix()
        layer = folder(rel)
        for inc in includes(path):
            target = folder(inc)
            if target is None:
                continue
            if layer == "step" and target != "step" and inc not in STEP_MAY_USE:
                problems.append(f"{rel}: the step includes {inc} ({target})")
            if layer in TECHNIQUES and target in TECHNIQUES and target != layer:
                problems.append(f"{rel}: technique {layer} includes another technique's {inc}")
    # The runtime headers the step may use must themselves stay inside the step.
    for inc in sorted(STEP_MAY_USE):
        for sub in includes(root / inc):
            if folder(sub) not in (None, "step") and sub not in STEP_MAY_USE:
                problems.append(f"{inc}: included by the step, but includes {sub}")
    for p in problems:
        print(p)
    print(f"{len(sources)} files checked, {len(problems)} include(s) against the rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
