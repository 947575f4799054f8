#!/usr/bin/env python3
"""tests/scripts/check_layers.py ROOT — the include arrows point one way (README.md, "Layout").

  the step         picotron/: config, Distributed and Comm, mesh, shard, model, init, data,
                   optim, recompute (picotron/README.md). Includes only the step.
  the techniques   data_parallel/ tensor_parallel/ pipeline_parallel/ context_parallel/
                   zero/ expert_parallel/ kernels/: the step and their own folder, never
                   another technique, never the runtime
  the runtime      runtime/<room>/: launch, output, cli, checkpoint, planner, observe, text, preflight
                   (runtime/README.md).
                   The step and the techniques (it reads their pure arithmetic:
                   schedules, layouts), never train.cpp. No source file loose in runtime/:
                   each lives in its room.
  train.cpp        on top: anything

An include names its file from the repository's root ("picotron/mesh.h"): one without a
folder ("mesh.h") is judged too, and is a violation, since the rule cannot be read off it.
No exceptions: there is no list of allowed crossings. Every violation is one line; exit
1 if any. Run by ctest (label unit: layers.include_rules).
"""
import pathlib
import re
import sys

TECHNIQUES = ["data_parallel", "tensor_parallel", "pipeline_parallel", "context_parallel", "zero",
              "expert_parallel", "kernels"]
LAYERS = ["picotron", "runtime"] + TECHNIQUES
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    return INCLUDE.findall(path.read_text(errors="replace"))


def layer_of(rel):
    """'step', 'runtime', a technique's folder, or None (a library header, tests/, ...)."""
    top = rel.split("/")[0]
    if top == "picotron":
        return "step"
    return top if top in LAYERS else None


def allowed(layer, target):
    if target is None or target == layer or target == "step":
        return True
    if layer == "runtime":
        return target in TECHNIQUES  # the runtime sits above every technique
    return False  # the step includes only itself; a technique only the step and itself


def main(root):
    root = pathlib.Path(root)
    problems = []
    sources = [p for d in LAYERS for p in (root / d).rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
    for path in sorted(sources):
        rel = path.relative_to(root).as_posix()
        layer = layer_of(rel)
        if rel.startswith("runtime/") and rel.count("/") == 1:
            problems.append(f"{rel}: a source file loose in runtime/: it belongs in one of its rooms (runtime/README.md)")
        for inc in includes(path):
            if "/" not in inc:
                problems.append(f"{rel}: includes \"{inc}\" without its folder: name it from the repository's root")
                continue
            target = layer_of(inc)
            if not allowed(layer, target):
                problems.append(f"{rel}: the {layer if layer != 'step' else 'step (picotron/)'} includes {inc} "
                                f"({target})")
    for p in problems:
        print(p)
    print(f"{len(sources)} files checked, {len(problems)} problem(s) with the rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
