#!/usr/bin/env python3
"""tests/scripts/fnv_independent.py FILE.safetensors — the checksums picotron writes are standard FNV-1a 64.

Every tensor's checksum travels in the file's metadata as "fnv1a64:<name>" (runtime/checkpoint/checkpoint.cpp;
a checkpoint's manifest carries the same sums). Here each is recomputed from the tensor's bytes with
this file's own FNV-1a (offset basis 14695981039346656037, prime 1099511628211, the published
function) and must be equal: so any standard tool reproduces them.
"""
import json
import struct
import sys

BASIS, PRIME, MASK = 14695981039346656037, 1099511628211, (1 << 64) - 1


def fnv1a64(data):
    h = BASIS
    for byte in data:
        h = ((h ^ byte) * PRIME) & MASK
    return h


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tests/scripts/fnv_independent.py FILE.safetensors")
    raw = open(sys.argv[1], "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    checked = 0
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        want = meta.get("fnv1a64:" + name)
        got = "%016x" % fnv1a64(body[begin:end])
        if want != got:
            print(f"FAILED: {name}: the file says {want}, standard FNV-1a 64 of its bytes is {got}")
            return 1
        checked += 1
    print(f"FNV-1a 64 STANDARD: {checked} tensors' checksums equal an independent implementation's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
