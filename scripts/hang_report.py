#!/usr/bin/env python3
"""scripts/hang_report.py DIR — what went wrong first, from every rank's flight recorder.

Each rank of a run writes DIR/comms-rank<R>.json (runtime/observe/flight_recorder.h) when the run
times out, is ended by a signal or fails (and at the end with --flight-dump-at-end): its
last communications, each with its group, operation, sequence number, size, call site,
note and state (issued / completed). This script lines the ranks up and says:

  - which rank left no file (it died without a word: SIGKILL, a crash, the OOM killer);
  - for each group's collectives, whether the ranks disagree on the operation, the
    count or the dtype at the same sequence number (a rank skipped or added one);
  - for sends and receives, whether both sides send first (the classic pipeline
    deadlock) or one waits for a message the other never sends (schedules or
    micro-batch counts that disagree), per NCCL's pairing rule: the k-th send from a
    to b meets the k-th receive b posts from a (pipeline_parallel/p2p_program.h);
  - who is behind: ranks the others wait for, and whether they wait elsewhere or are
    in no communication at all (computing, stopped, or stuck outside Comm).
  - which rank stopped running: a thread of each rank's recorder wakes every 100 ms, and
    a gap of seconds between two wake-ups is a process that was stopped (SIGSTOP, a
    debugger holding it, a swapped-out machine).

Then, per group, where each rank is.  Exit code: 0 no problem found, 1 a problem, 2 no files.

  scripts/hang_report.py flight/            (train's default --flight-recorder)

Test: ctest -L flight   (tests/flight_tests.cmake)
"""
import glob
import json
import os
import re
import sys

P2P = ("send", "recv")
RULE_COLLECTIVE = ("picotron/comm.h: every rank of a group calls the same collectives in the same order, "
                   "with the same count and dtype")
RULE_P2P = ("pipeline_parallel/p2p_program.h: the k-th send from a to b meets the k-th receive b posts "
            "from a (NCCL's pairing rule); a send waits until it is received")


def load(directory):
    dumps = {}
    for path in sorted(glob.glob(os.path.join(directory, "comms-rank*.json"))):
        if not re.search(r"comms-rank\d+\.json$", path):
            continue
        with open(path) as f:
            d = json.load(f)
        d["path"] = path
        dumps[d["rank"]] = d
    return dumps


def describe(e, with_site=True):
    """'all_reduce #7 (sum, 4096 float32)' / 'send #3 to rank 1 (8192 float32)'."""
    what = e["op"] + " #" + str(e["seq"])
    if e["op"] == "send":
        what += " to rank %d" % e["peer_world"]
    elif e["op"] == "recv":
        what += " from rank %d" % e["peer_world"]
    size = "%d %s" % (e["elements"], e["dtype"])
    what += " (" + (e["reduce"] + ", " if e["reduce"] else "") + size + ")"
    if with_site:
        what += " at " + e["site"] + " " + e["function"]
    if e["note"]:
        what += ' — "' + e["note"] + '"'
    return what


class Rank:
    """One rank's file: its groups by identity, and its entries."""

    def __init__(self, d):
        self.d = d
        self.rank = d["rank"]
        self.groups = {}  # id -> (name, ranks tuple)
        for g in d["groups"]:
            ranks = tuple(g["ranks"]) if g["ranks"] else (self.rank,)
            self.groups[g["id"]] = (g["name"], ranks)
        self.entries = d["entries"]
        for e in self.entries:
            e["key"] = self.groups[e["group"]]
            if e["peer_world"] < 0:
                e["peer_world"] = e["peer"]
        self.pending = [e for e in self.entries if e["state"] != "completed"]  # issued or waiting
        last = max([max(e["issued_s"], e["waiting_s"] or 0, e["completed_s"] or 0) for e in self.entries] or [0.0])
        self.idle_s = d["dumped_at_s"] - last  # how long before its file it did nothing with Comm
        self.timeout_s = d.get("timeout_s", 0)

    def waits_in(self):
        """The call its host waits in (Work::wait), if any: the newest one marked waiting."""
        waiting = [e for e in self.pending if e["state"] == "waiting"]
        return waiting[-1] if waiting else None

    def stalled(self):
        """Why this rank looks stopped, or "". Measured: its recorder's thread, which wakes every
        100 ms, saw a gap of seconds (paused_s: runtime/observe/flight_recorder.h, "Pauses"). Else
        inferred: ended by a signal, and either it waited longer than --timeout-s
        without timing out itself, or it did nothing with Comm for half of it."""
        paused = self.d.get("paused_s") or 0
        if self.timeout_s and paused >= max(1.0, self.timeout_s / 2):
            e = next((x for x in self.entries if x["id"] == self.d.get("paused_after")), None)
            after = " (its last call before it: %s %s)" % (e["key"][0], describe(e, with_site=False)) if e else ""
            return ("the whole process did not run for %.1f s%s: a thread of its recorder wakes every 100 ms, so "
                    "a gap of seconds is a process that was stopped (SIGSTOP, a debugger holding it, a swapped-out "
                    "machine)" % (paused, after))
        if not self.d["reason"].startswith("signal") or not self.timeout_s:
            return ""
        w = self.waits_in()
        if w and self.d["dumped_at_s"] - w["waiting_s"] > self.timeout_s + 0.5:
            return ("it waited in %s %s for %.1f s, longer than --timeout-s %d, without timing out itself: it was not "
                    "running (stopped: SIGSTOP, a debugger, a swapped-out machine)"
                    % (w["key"][0], describe(w, with_site=False), self.d["dumped_at_s"] - w["waiting_s"], self.timeout_s))
        if not w and self.idle_s > max(1.0, self.timeout_s / 2):
            return ("it did nothing with Comm for the last %.1f s before the launcher ended it (--timeout-s %d): it "
                    "was stopped (SIGSTOP, a debugger) or stuck computing" % (self.idle_s, self.timeout_s))
        return ""

    def collectives(self, key):
        return {e["seq"]: e for e in self.entries if e["key"] == key and e["op"] not in P2P}

    def messages(self, key, op, peer):
        return {e["seq"]: e for e in self.entries if e["key"] == key and e["op"] == op and e["peer_world"] == peer}

    def where(self):
        w = self.waits_in()
        if w:
            return "waits in %s %s, for %.1f s" % (w["key"][0], describe(w), self.d["dumped_at_s"] - w["waiting_s"])
        return ("is in no communication (its last one ended %.1f s before its file was written): "
                "computing, stopped (SIGSTOP, a debugger) or stuck outside Comm" % self.idle_s)


def group_name(key):
    return "%s (world ranks %s)" % (key[0], ",".join(map(str, key[1])))


def collective_findings(ranks, keys):
    out = []
    for key in keys:
        members = [ranks[r] for r in key[1] if r in ranks]
        seqs = sorted(set().union(*[m.collectives(key).keys() for m in members])) if members else []
        for seq in seqs:
            have = [(m, m.collectives(key)[seq]) for m in members if seq in m.collectives(key)]
            if len(have) < 2:
                continue
            sig = lambda e: (e["op"], e["dtype"], e["reduce"], e["elements"] if e["op"] != "all_to_all" else 0)
            if len({sig(e) for _, e in have}) > 1:
                lines = ["group %s: the ranks disagree at collective #%d:" % (group_name(key), seq)]
                lines += ["  rank %d: %s" % (m.rank, describe(e)) for m, e in have]
                lines.append("  A rank skipped a collective, or called one the others did not; from here on "
                             "the group's calls pair up wrongly. Rule: " + RULE_COLLECTIVE + ".")
                out.append(lines)
                break
    return out


def p2p_findings(ranks, keys, missing):
    out = []
    for key in keys:
        members = [r for r in key[1] if r in ranks]
        done = set()
        for a in members:
            for b in members:
                if a == b or (b, a) in done:
                    continue
                done.add((a, b))
                A, B = ranks[a], ranks[b]
                a_to_b, b_from_a = A.messages(key, "send", b), B.messages(key, "recv", a)
                b_to_a, a_from_b = B.messages(key, "send", a), A.messages(key, "recv", b)
                for k in sorted(set(a_to_b) & set(b_from_a)):
                    s, r = a_to_b[k], b_from_a[k]
                    if (s["elements"], s["dtype"]) != (r["elements"], r["dtype"]):
                        out.append(["group %s: message #%d from rank %d to rank %d has two sizes:" % (group_name(key), k, a, b),
                                    "  rank %d: %s" % (a, describe(s)), "  rank %d: %s" % (b, describe(r)),
                                    "  Rule: " + RULE_P2P + "."])
                        break
                # Unmatched pending sends: posted, but the peer never posted that receive.
                a_stuck = [e for e in A.pending if e["key"] == key and e["op"] == "send" and e["peer_world"] == b
                           and e["seq"] > max(b_from_a or [0])]
                b_stuck = [e for e in B.pending if e["key"] == key and e["op"] == "send" and e["peer_world"] == a
                           and e["seq"] > max(a_from_b or [0])]
                if a_stuck and b_stuck:
                    out.append(["group %s: ranks %d and %d both send first, and neither receives: the classic "
                                "pipeline deadlock." % (group_name(key), a, b),
                                "  rank %d: %s" % (a, describe(a_stuck[0])),
                                "  rank %d: %s" % (b, describe(b_stuck[0])),
                                "  Each send waits for the other's receive, which comes after its own send. Post "
                                "the send and the receive together (one batch_p2p: ncclGroupStart/End). Rule: "
                                + RULE_P2P + "."])
                    continue
                # One side sends a message the other never receives (it posted fewer receives).
                for (x, y, stuck, y_got) in ((a, b, a_stuck, b_from_a), (b, a, b_stuck, a_from_b)):
                    if not stuck or y in missing:
                        continue
                    e, Y, got = stuck[0], ranks[y], max(y_got or [0])
                    last = y_got[got] if got else None
                    out.append(["group %s: rank %d sends message #%d to rank %d, but rank %d posted only %d receives "
                                "from rank %d%s." % (group_name(key), x, e["seq"], y, y, got, x,
                                                     (' (the last: "' + last["note"] + '")') if last and last["note"] else ""),
                                "  rank %d: %s" % (x, describe(e)),
                                "  rank %d %s" % (y, Y.where()),
                                "  The two ranks' programs disagree on the messages between them (the number of "
                                "micro-batches, --grad-acc-steps, or the schedule). Rule: " + RULE_P2P + "."])
                for (x, y, y_sent, x_waits) in ((a, b, b_to_a, A), (b, a, a_to_b, B)):
                    waiting = [e for e in x_waits.pending if e["key"] == key and e["op"] == "recv"
                               and e["peer_world"] == y and e["seq"] > max(y_sent or [0])]
                    if not waiting or y in missing:
                        continue
                    e, Y = waiting[0], ranks[y]
                    sent = max(y_sent or [0])
                    last = y_sent[sent] if sent else None
                    lines = ["group %s: rank %d waits for message #%d from rank %d, but rank %d sent it only %d%s."
                             % (group_name(key), x, e["seq"], y, y, sent,
                                (' (the last: "' + last["note"] + '")') if last and last["note"] else ""),
                             "  rank %d: %s" % (x, describe(e)),
                             "  rank %d %s" % (y, Y.where()),
                             "  The two ranks' programs disagree on the messages between them (the number of "
                             "micro-batches, --grad-acc-steps, or the schedule). Rule: " + RULE_P2P + "."]
                    out.append(lines)
    return out


def behind_findings(ranks, keys, missing):
    out = []
    for key in keys:
        members = [r for r in key[1] if r in ranks]
        for r in members:
            R = ranks[r]
            w = [e for e in R.pending if e["key"] == key and e["op"] not in P2P]
            if not w:
                continue
            e = w[0]
            late = [o for o in key[1] if o in ranks and o != r and max(ranks[o].collectives(key) or [0]) < e["seq"]]
            gone = [o for o in key[1] if o in missing]
            if not late and not gone:
                continue
            lines = ["group %s: rank %d waits in %s, issued %.1f s before its file was written;"
                     % (group_name(key), r, describe(e), R.d["dumped_at_s"] - e["issued_s"])]
            for o in late:
                O = ranks[o]
                lines.append("  rank %d has not called it (its last on this group: #%d) and %s"
                             % (o, max(O.collectives(key) or [0]), O.where()))
            for o in gone:
                lines.append("  rank %d left no file (see above)" % o)
            out.append(lines)
            break
    return out


def stuck_together_findings(ranks, keys):
    """Every rank of a group is in the same collective, and it did not complete, and no rank's
    recorder measured a pause (Rank.stalled): the collective itself did not progress. Which
    rank is to blame cannot be read off the files; say what each was doing."""
    out = []
    for key in keys:
        members = [r for r in key[1] if r in ranks]
        if len(members) < len(key[1]):
            continue
        first = {r: ranks[r].pending[0] for r in members if ranks[r].pending and ranks[r].pending[0]["key"] == key}
        if len(first) != len(members) or len({(e["op"], e["seq"]) for e in first.values()}) != 1:
            continue
        e = first[members[0]]
        out.append(["group %s: every rank is in %s, and it did not complete within --timeout-s, though every rank "
                    "ran (no recorder measured a pause): the library did not move it (a network or driver problem, "
                    "or a rank stuck inside it without polling)." % (group_name(key), describe(e))])
    return out


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[0])
        print("usage: scripts/hang_report.py DIR")
        return 2
    directory = argv[1]
    dumps = load(directory)
    if not dumps:
        print("hang report: no comms-rank*.json in %s (was the run started with --flight-recorder %s?)"
              % (directory, directory))
        return 2
    world = max(d["world_size"] for d in dumps.values())
    ranks = {r: Rank(d) for r, d in dumps.items()}
    missing = [r for r in range(world) if r not in ranks]
    keys = sorted({k for R in ranks.values() for k in R.groups.values()}, key=lambda k: (len(k[1]), k))
    keys = [k for k in keys if len(k[1]) > 1]

    print("hang report: %d of %d ranks wrote their flight recorder in %s" % (len(ranks), world, directory))
    for r in sorted(ranks):
        d = ranks[r].d
        print("  rank %d: %s (%d communications recorded, last %d kept)"
              % (r, d["reason"], d["recorded"], len(d["entries"])))
    findings = []
    for r in missing:
        findings.append(["rank %d left no file: it died without a word (SIGKILL, a crash, the OOM killer) before "
                         "it could write one; the others waited for it." % r])
    findings += collective_findings(ranks, keys)
    findings += p2p_findings(ranks, keys, missing)
    for r in sorted(ranks):
        why = ranks[r].stalled()
        if why:
            findings.append(["rank %d stopped answering: %s." % (r, why),
                             "  The others waited for it until --timeout-s; rank %d's last communications:" % r]
                            + ["    " + describe(e) + " [" + e["state"] + "]" for e in ranks[r].entries[-2:]])
    if not findings or missing:
        findings += behind_findings(ranks, keys, missing)
    if not findings:
        findings += stuck_together_findings(ranks, keys)
    if not findings and any(R.pending for R in ranks.values()):
        for r in sorted(ranks):
            if ranks[r].pending:
                findings.append(["rank %d %s; its oldest unfinished call: %s [%s] (no other rank's file explains it)"
                                 % (r, ranks[r].where(), describe(ranks[r].pending[0]), ranks[r].pending[0]["state"])])
    print()
    if not findings:
        counts = ", ".join("%s #%d" % (k[0], max(max(ranks[r].collectives(k) or [0]) for r in k[1] if r in ranks))
                           for k in keys)
        print("No problem found: every rank wrote its file, every communication it issued completed, and the "
              "groups agree (collectives so far: %s)." % (counts or "none"))
        return 0
    print("What went wrong first:")
    for line in findings[0]:
        print("  " + line)
    if len(findings) > 1:
        print("Then:")
        for f in findings[1:3]:
            print("  " + f[0])
    print()
    print("Where each rank is (the call its host waits in), per group:")
    for key in keys:
        cells = []
        for r in key[1]:
            if r not in ranks:
                cells.append("rank %d: no file" % r)
                continue
            w = [e for e in ranks[r].pending if e["key"] == key]
            done = [e for e in ranks[r].entries if e["key"] == key and e["state"] == "completed"]
            if w:
                cells.append("rank %d: %s %s" % (r, "waits in" if w[-1]["state"] == "waiting" else "posted",
                                                 describe(w[-1], with_site=False).split(" — ")[0]))
            elif done:
                cells.append("rank %d: done up to %s" % (r, describe(done[-1], with_site=False).split(" — ")[0]))
        if cells:
            print("  %s: %s" % (group_name(key), "; ".join(cells)))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
