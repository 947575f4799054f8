#!/usr/bin/env python3
"""tests/scripts/flight_diagnosis_check.py DIR FLIGHT_CASES — grades the flight recorder assignment
(task flight.diagnose, docs/assignments/flight_recorder.md): the diagnosis the student wrote
(`FLIGHT_CASES diagnosis` prints it) against the flight recorder's files of the hung run in DIR
(`mpirun -np 3 FLIGHT_CASES mystery DIR`).

The truth is read off the files, not stored: a rank R waits in a receive #k from rank P of a
group, and P sent R only k-1 messages in that group and waits in nothing: P's program lacks a
send to R (the pairing rule of pipeline_parallel/p2p_program.h: the k-th send from a to b
meets the k-th receive b posts from a). The answer must name P (the rank whose program is
wrong), the group, "send", R and the header. Prints "diagnosis right" or what differs.
"""
import glob
import json
import subprocess
import sys

RULE = "pipeline_parallel/p2p_program.h"


def truth(directory):
    ranks = {}
    for path in glob.glob(directory + "/comms-rank*.json"):
        d = json.load(open(path))
        ranks[d["rank"]] = d
    if not ranks:
        sys.exit("FAILED: no flight recorder files in %s (run the mystery first)" % directory)
    for r, d in sorted(ranks.items()):
        groups = {g["id"]: g for g in d["groups"]}
        for e in d["entries"]:
            if e["op"] != "recv" or e["state"] == "completed":
                continue
            g, p = groups[e["group"]], e["peer_world"]
            other = ranks.get(p)
            if other is None:
                continue
            ids = {x["id"]: x["name"] for x in other["groups"]}
            sent = [x for x in other["entries"] if x["op"] == "send" and x["peer_world"] == r
                    and ids.get(x["group"]) == g["name"]]
            waiting = [x for x in other["entries"] if x["state"] != "completed"]
            if len(sent) < e["seq"] and not waiting:
                return {"rank": p, "group": g["name"], "op": "send", "peer": r, "rule": RULE}
    sys.exit("FAILED: the files show no receive waiting for a send its peer never posted")


def main():
    directory, cases = sys.argv[1], sys.argv[2]
    want = truth(directory)
    run = subprocess.run([cases, "diagnosis"], capture_output=True, text=True)
    if run.returncode != 0:
        print("FAILED: %s diagnosis: %s" % (cases, (run.stderr or run.stdout).strip().splitlines()[-1:]))
        return 1
    try:
        got = json.loads(run.stdout)
    except ValueError:
        print("FAILED: the diagnosis is not JSON: %s" % run.stdout.strip())
        return 1
    wrong = ["%s: answered %r, the files say %r" % (k, got.get(k), v) for k, v in want.items() if got.get(k) != v]
    if wrong:
        print("FAILED: the diagnosis differs from the flight recorder's files:\n  " + "\n  ".join(wrong))
        return 1
    print("diagnosis right: rank %(rank)d's program lacks a %(op)s to rank %(peer)d in group %(group)s (%(rule)s)" % want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
