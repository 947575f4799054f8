#!/usr/bin/env python3
"""tests/scripts/reseal_manifest.py MANIFEST.json PYTHON-EDIT — edit a checkpoint's manifest and seal it again.

The manifest carries its own FNV-1a 64 checksum (manifest_fnv1a64, over the compact, key-sorted
JSON of the rest: runtime/checkpoint/resume.cpp), so an edit alone is refused as damage. This makes the edit
(a Python statement over m, the manifest) and recomputes the checksum as picotron does: a manifest
that is sealed yet says something false, which only a check of its meaning can refuse.
"""
import json
import sys


def fnv1a64(data, h=14695981039346656037):
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & ((1 << 64) - 1)
    return h


path, edit = sys.argv[1], sys.argv[2]
m = json.load(open(path))
exec(edit)
m.pop("manifest_fnv1a64", None)
body = json.dumps(m, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
m["manifest_fnv1a64"] = "%016x" % fnv1a64(body.encode())
json.dump(m, open(path, "w"), indent=1)
