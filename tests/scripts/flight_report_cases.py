#!/usr/bin/env python3
"""tests/scripts/flight_report_cases.py — scripts/hang_report.py on folders no healthy run writes:
files from an earlier run beside this run's, files that disagree, damaged files, a FIFO, and
large rings (the report's time at 2, 4 and 8 ranks x the default ring of 4,096 entries).

The files are made here in the recorder's format (runtime/observe/flight_recorder.cpp), so
every case is exact and takes no training run; tests/cmake/flight_tests.cmake runs the real ones.
Each case checks the lines the report must print and its exit code; "flight report cases
ok" when all do. Run by ctest (flight.report_cases).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "hang_report.py")


def entry(i, group, op, seq, state="completed", elements=4096, peer=-1, t=1.0, note=""):
    return {"id": i, "group": group, "op": op, "reduce": "sum" if op == "all_reduce" else "", "seq": seq,
            "elements": elements, "dtype": "float32", "peer": peer, "peer_world": peer, "batch": -1,
            "async": False, "site": "data_parallel/data_parallel.cpp:102", "function": "launch", "note": note,
            "state": state, "issued_s": t, "waiting_s": t if state != "issued" else None,
            "completed_s": t + 0.001 if state == "completed" else None}


def rank_file(rank, world, run="00000000000000aa", launched=1000.0, reason="timeout or communication error: x",
              entries=None, dumped=10.0, start=None):
    """One rank's file; start: its recorder's start on the wall clock (the file's time is start + dumped)."""
    return {"rank": rank, "world_size": world, "reason": reason, "run_id": run, "launched_unix_s": launched,
            "dumped_at_s": dumped, "start_unix_s": launched if start is None else start, "capacity": 4096,
            "recorded": len(entries or []), "timeout_s": 3, "paused_s": 0.1, "paused_after": -1,
            "groups": [{"id": 0, "name": "world", "ranks": list(range(world)), "rank": rank, "size": world}],
            "entries": entries or []}


def write(folder, rank, d, raw=None):
    with open(os.path.join(folder, "comms-rank%d.json" % rank), "wb" if raw is not None else "w") as f:
        if raw is not None:
            f.write(raw)
        else:
            json.dump(d, f)


def report(folder, timeout=30):
    start = time.time()
    try:
        run = subprocess.run([sys.executable, REPORT, folder], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "(the report did not finish in %d s)" % timeout, time.time() - start
    return run.returncode, run.stdout + run.stderr, time.time() - start


FAILED = []


def expect(name, folder, code, *want):
    rc, out, _ = report(folder)
    missing = [w for w in want if w not in out]
    if rc != code or missing:
        FAILED.append(name)
        print("FAILED %s: exit %d (want %d), missing %s\n%s" % (name, rc, code, missing, out))
    else:
        print("ok: %s (exit %d): %s" % (name, rc, out.strip().splitlines()[0]))


def hung_pair(folder, run="00000000000000bb", launched=2000.0, only=(0, 1)):
    """This run: rank 0 waits in world all_reduce #3; rank 1 (if written) is done up to #2."""
    for r in only:
        es = [entry(0, 0, "all_reduce", 1), entry(1, 0, "all_reduce", 2)]
        if r == 0:
            es.append(entry(2, 0, "all_reduce", 3, state="waiting", t=5.0))
        write(folder, r, rank_file(r, 2, run=run, launched=launched, entries=es))


def main():
    base = tempfile.mkdtemp(prefix="flight-report-")
    try:
        def folder(name):
            path = os.path.join(base, name)
            os.makedirs(path)
            return path

        # 1. A stale file: rank 1's file from an earlier run beside this run's rank 0 (rank 1 died).
        f = folder("stale")
        write(f, 1, rank_file(1, 2, run="00000000000000aa", launched=1000.0, reason="end of the run",
                              entries=[entry(0, 0, "all_reduce", 1), entry(1, 0, "all_reduce", 2),
                                       entry(2, 0, "all_reduce", 3)]))
        hung_pair(f, only=(0,))
        expect("a stale file of an earlier run", f, 1, "set aside, another run's (run 00000000000000aa",
               "comms-rank1.json", "rank 1 left no file")

        # 2. Files that disagree: the folder is refused.
        f = folder("world_sizes")
        write(f, 0, rank_file(0, 2))
        write(f, 1, rank_file(1, 4))
        expect("ranks disagree on the world size", f, 2, "refused: the files disagree on the world size")
        f = folder("same_rank")
        write(f, 0, rank_file(0, 2))
        write(f, 1, rank_file(0, 2))
        expect("two files claim one rank", f, 2, "says it is rank 0", "both claim rank 0")
        f = folder("past_world")
        write(f, 0, rank_file(0, 2))
        write(f, 2, rank_file(2, 2))
        expect("a rank past the world size", f, 2, "claims rank 2 of a world of 2")

        # 3. Damaged files: one line each naming the file and the problem, exit 2, the other rank judged.
        good = json.dumps(rank_file(1, 2, entries=[entry(0, 0, "all_reduce", 1, state="waiting")]))
        cases = [("cut mid-JSON", good[:len(good) // 2].encode(), "not valid JSON"),
                 ("binary bytes", b"\x00\xff\xfe" + good.encode(), "not text"),
                 ("a field of the wrong type", good.replace('"world_size": 2', '"world_size": "two"').encode(),
                  "'world_size' is str, not int"),
                 ("a missing field", good.replace('"reason"', '"no_reason"').encode(), "no field 'reason'"),
                 ("an absurd size", good.replace('"world_size": 2', '"world_size": 1000000000000').encode(),
                  "world_size 1000000000000 is not between 1 and")]
        for name, raw, want in cases:
            f = folder("damaged_" + name.replace(" ", "_"))
            write(f, 1, None, raw=raw)
            write(f, 0, rank_file(0, 2, entries=[entry(0, 0, "all_reduce", 1, state="waiting")]))
            expect("damaged: " + name, f, 2, "comms-rank1.json: " + want, "rank 1's file is damaged", "rank 0")

        # 4. A FIFO named like a rank's file: never opened (it would block forever).
        f = folder("fifo")
        os.mkfifo(os.path.join(f, "comms-rank1.json"))
        write(f, 0, rank_file(0, 2, entries=[entry(0, 0, "all_reduce", 1, state="waiting")]))
        expect("a FIFO in the folder", f, 2, "comms-rank1.json: not a regular file", "rank 0")

        # 5. A crash inside the library after the ranks' calls disagree (rank 1 skipped an all-reduce;
        #    Open MPI may then free a buffer twice): the disagreement first, the crash after it.
        f = folder("crash_after_skip")
        write(f, 0, rank_file(0, 2, start=2000.0, entries=[entry(0, 0, "all_reduce", 1), entry(1, 0, "all_reduce", 2),
                                                           entry(2, 0, "all_reduce", 3, state="waiting", t=5.0)]))
        write(f, 1, rank_file(1, 2, start=1999.0, reason="crash: SIGABRT inside this rank (written from the signal handler)",
                              entries=[entry(0, 0, "all_reduce", 1), entry(1, 0, "all_reduce", 2),
                                       entry(2, 0, "all_reduce", 3, state="waiting", elements=1, t=5.0)]))
        expect("a crash after a skipped collective", f, 1, "What went wrong first:\n  group world (world ranks 0,1): "
               "the ranks disagree at collective #3", "Then:\n  rank 1 crashed (crash: SIGABRT")

        # 6. Time: N ranks x 4,096 entries, rank N-1 skipped the program's collective #4000 (its
        #    own numbers go on: its #4000 is everyone else's #4001, another size).
        times = []
        for n in (2, 4, 8):
            f = folder("ring%d" % n)
            for r in range(n):
                program = [s for s in range(1, 4097) if not (r == n - 1 and s == 4000)]
                es = [entry(i, 0, "all_reduce", i + 1, elements=4096 if s % 2 else 1, t=1.0 + i * 1e-3)
                      for i, s in enumerate(program)]
                es[-1]["state"] = "waiting"
                d = rank_file(r, n, entries=es)
                write(f, r, d)
            rc, out, took = report(f, timeout=120)
            times.append("%d ranks %.2f s" % (n, took))
            if "the ranks disagree at collective #4000" not in out or took > 10:
                FAILED.append("ring%d" % n)
                print("FAILED: %d ranks x 4,096 entries took %.1f s (at most 10) or missed the skipped collective:\n%s"
                      % (n, took, out[:2000]))
        print("report time, each rank a full default ring (4,096 entries): " + ", ".join(times))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if FAILED:
        print("FAILED: " + ", ".join(FAILED))
        return 1
    print("flight report cases ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
