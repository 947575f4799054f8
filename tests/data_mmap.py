#!/usr/bin/env python3
"""data_mmap.py WORKDIR TRAIN — --data is memory-mapped: memory stays flat whatever its size.

Trains 3 steps on a 1 MiB text file and on a 4 GiB sparse one (zeros: token 0) and reads
each run's peak resident memory (getrusage of the child). The 4 GiB run must peak far
below the file's size (under 1 GiB), and within 64 MiB of the 1 MiB run: the peak does
not depend on the file size. Prints "mmap ok" or "FAILED: ...".
"""
import os, resource, subprocess, sys

work, train = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
MiB = 1 << 20


def peak_rss(path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run = subprocess.run([train, "--device", "cpu", "--data", path, "--steps", "3", "--seq-len", "256",
                          "--micro-batch-size", "8", "--generate", "0", "--threads", "1"], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        raise SystemExit(f"FAILED: training on {path}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB -> bytes (max over children so far)
    data_line = [l for l in run.stdout.splitlines() if l.startswith("data:")]
    print(data_line[0] if data_line else "")
    return peak, before * 1024


small, big = os.path.join(work, "small.txt"), os.path.join(work, "big.txt")
with open(small, "wb") as f:
    f.write(os.urandom(MiB))
with open(big, "wb") as f:
    f.truncate(4 << 30)  # sparse: no disk blocks
small_peak, _ = peak_rss(small)
big_peak, _ = peak_rss(big)  # (ru_maxrss of children is a running max: big_peak >= small_peak)
print(f"peak resident memory: {small_peak / MiB:.0f} MiB with 1 MiB of data, {big_peak / MiB:.0f} MiB with 4 GiB")
os.remove(big)
if big_peak > 1024 * MiB:
    print("FAILED: the 4 GiB run's peak is not far below the file's size")
elif big_peak - small_peak > 64 * MiB:
    print("FAILED: the peak grows with the file size")
else:
    print("mmap ok")
