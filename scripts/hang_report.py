#!/usr/bin/env python3
"""scripts/hang_report.py DIR — what went wrong first, from every rank's flight recorder.

Each rank of a run writes DIR/comms-rank<R>.json (runtime/observe/flight_recorder.h) when the run
times out, is ended by a signal or fails (and at the end with --flight-dump-at-end): its
last communications, each with its group, operation, sequence number, size, call site,
note and state (issued / waiting / completed), and the run it belongs to (an id every rank
of one launch shares, and the launch time). This script reads the newest run's files (older
runs' files in the same folder are named and set aside), lines the ranks up and says, causes
before the waits they caused:

  - which rank was ended first by a signal (SIGTERM, SIGINT: a preempted node, an OOM
    killer's warning, a user), crashed first (SIGSEGV, SIGABRT: its file written from the
    signal handler) or failed first with an error, and how long before the others;
  - which rank left no file (it died without a word: SIGKILL, a crash, the OOM killer);
  - for each group's collectives, whether the ranks disagree on the operation, the
    count or the dtype at the same sequence number (a rank skipped or added one);
  - for sends and receives, whether both sides send first (the classic pipeline
    deadlock) or one waits for a message the other never sends, per NCCL's pairing rule:
    the k-th send from a to b meets the k-th receive b posts from a (pipeline_parallel/p2p_program.h);
  - which rank stopped running: a thread of each rank's recorder wakes every 100 ms, and
    a gap of seconds between two wake-ups is a process that was stopped (SIGSTOP, a
    debugger holding it, a swapped-out machine);
  - who is behind: ranks the others wait for, and where they are;
  - a collective that did not move although every rank was in it and every rank waited
    longer than --timeout-s (the library or the network), only then; when the files do not
    decide, it says so.

Each finding names the header that teaches its rule. Then, per group, where each rank is.
Any folder gets an answer: a damaged file (cut, binary, wrong types, missing fields, absurd
sizes) or a special one (a FIFO, a device) is named in one line and left out, the other
ranks are still judged; files that disagree (on the world size, two claiming one rank, a
rank past the world size) are named and the folder refused. It reads only regular files, at
most MAX_BYTES each, and its memory does not grow with a declared size; it is linear in the
entries.

Exit code: 0 no problem found, 1 a problem, 2 no files, files refused, or a damaged file.

  scripts/hang_report.py flight/            (train's default --flight-recorder)

Test: ctest -L flight   (tests/cmake/flight_tests.cmake; tests/scripts/flight_report_cases.py)
"""
import json
import os
import re
import stat
import sys

P2P = ("send", "recv")
MAX_BYTES = 256 << 20       # a file larger than this is refused (a full ring of 4,096 is ~2 MB)
MAX_WORLD = 1 << 20         # a world size larger than this is refused
HEADER_COLLECTIVE = "picotron/comm.h"
RULE_COLLECTIVE = (HEADER_COLLECTIVE + ": every rank of a group calls the same collectives in the same order, "
                   "with the same count and dtype")
RULE_P2P = ("pipeline_parallel/p2p_program.h: the k-th send from a to b meets the k-th receive b posts "
            "from a (NCCL's pairing rule); a send waits until it is received")
RULE_DUMP = "runtime/observe/flight_dump.h: a signalled or failing rank writes its file as it ends; SIGKILL leaves none"
RULE_PAUSE = "runtime/observe/flight_recorder.h, \"Pauses\""
NUMBER = (int, float)
FILE_NAME = re.compile(r"^comms-rank(\d+)\.json$")


# ---- reading: every file checked, one line per problem -------------------------------------

def check_fields(obj, fields, where):
    """Problems of a dict against {name: (types, required)}; [] when it is well formed."""
    if not isinstance(obj, dict):
        return ["%s is %s, not an object" % (where or "the file", type(obj).__name__)]
    at = where + ": " if where else ""
    out = []
    for name, (types, required) in fields.items():
        if name not in obj:
            if required:
                out.append("%sno field %r" % (at, name))
            continue
        v = obj[name]
        if isinstance(v, bool) and bool not in types:  # (bool is an int in Python)
            out.append("%s%r is %r, not %s" % (at, name, v, "/".join(t.__name__ for t in types)))
        elif not isinstance(v, types):
            out.append("%s%r is %s, not %s" % (at, name, type(v).__name__, "/".join(t.__name__ for t in types)))
    return out


TOP = {"rank": ((int,), True), "world_size": ((int,), True), "reason": ((str,), True),
       "dumped_at_s": (NUMBER, True), "groups": ((list,), True), "entries": ((list,), True),
       "run_id": ((str,), False), "launched_unix_s": (NUMBER, False), "start_unix_s": (NUMBER, False),
       "timeout_s": (NUMBER, False), "paused_s": (NUMBER, False), "paused_after": ((int,), False),
       "recorded": ((int,), False), "capacity": ((int,), False)}
GROUP = {"id": ((int,), True), "name": ((str,), True), "ranks": ((list,), True), "rank": ((int,), True)}
ENTRY = {"id": ((int,), True), "group": ((int,), True), "op": ((str,), True), "reduce": ((str,), True),
         "seq": ((int,), True), "elements": ((int,), True), "dtype": ((str,), True), "peer": ((int,), True),
         "peer_world": ((int,), True), "batch": ((int,), True), "site": ((str,), True), "function": ((str,), True),
         "note": ((str,), True), "state": ((str,), True), "issued_s": (NUMBER, True),
         "waiting_s": (NUMBER + (type(None),), True), "completed_s": (NUMBER + (type(None),), True)}
OPS = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv", "barrier"}


def validate(d, file_rank):
    """The first problem of a parsed file, or ""."""
    problems = check_fields(d, TOP, "")
    if problems:
        return problems[0]
    if not 1 <= d["world_size"] <= MAX_WORLD:
        return "world_size %d is not between 1 and %d" % (d["world_size"], MAX_WORLD)
    ids = set()
    for i, g in enumerate(d["groups"]):
        p = check_fields(g, GROUP, "group %d" % i)
        if p:
            return p[0]
        if len(g["ranks"]) > d["world_size"] or not all(isinstance(r, int) and not isinstance(r, bool)
                                                          and 0 <= r < d["world_size"] for r in g["ranks"]):
            return "group %d (%s): its ranks are not world ranks of a world of %d" % (i, g["name"], d["world_size"])
        ids.add(g["id"])
    for i, e in enumerate(d["entries"]):
        p = check_fields(e, ENTRY, "entry %d" % i)
        if p:
            return p[0]
        if e["group"] not in ids:
            return "entry %d names group %d, which the file does not list" % (i, e["group"])
        if e["op"] not in OPS or e["state"] not in ("issued", "waiting", "completed"):
            return "entry %d: op %r / state %r is not one the recorder writes" % (i, e["op"], e["state"])
        if e["elements"] < 0 or e["seq"] < 0:
            return "entry %d: a negative count (%d elements, #%d)" % (i, e["elements"], e["seq"])
    return ""


def read_file(path, file_rank):
    """(dict, "") or (None, what is wrong). Never follows a special file, never reads more than MAX_BYTES."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return None, "cannot be read (%s)" % e.strerror
    if stat.S_ISLNK(st.st_mode):
        return None, "a symbolic link, not followed"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file (a FIFO, a socket or a device), not read"
    if st.st_size > MAX_BYTES:
        return None, "%d bytes, more than any recorder writes (%d at most are read)" % (st.st_size, MAX_BYTES)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        return None, "cannot be read (%s)" % e.strerror
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, "not text: a byte that is not UTF-8 at offset %d (binary or damaged)" % e.start
    try:
        d = json.loads(text)
    except ValueError as e:
        where = " (line %d, column %d)" % (e.lineno, e.colno) if hasattr(e, "lineno") else ""
        cut = " (cut short: the writer was interrupted?)" if not text.rstrip().endswith("}") else ""
        return None, "not valid JSON%s: %s%s" % (where, getattr(e, "msg", str(e)), cut)
    problem = validate(d, file_rank)
    if problem:
        return None, problem
    return d, ""


def load(directory):
    """(files by path, problems as (path, line)); files are valid dicts with "path" set."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        return None, [(directory, "cannot be listed: %s" % e.strerror)]
    files, problems = [], []
    for name in names:
        m = FILE_NAME.match(name)
        if not m:
            continue
        path = os.path.join(directory, name)
        d, problem = read_file(path, int(m.group(1)))
        if problem:
            problems.append((path, problem))
            continue
        d["path"] = path
        d["file_rank"] = int(m.group(1))
        files.append(d)
    return files, problems


def when(d):
    """When the file's run was launched (its id's time), else when its recorder started."""
    return d.get("launched_unix_s") or d.get("start_unix_s") or 0.0


def choose_run(files):
    """(this run's files, set-aside lines, refusal lines). The newest run's files; files that name no
    run (an older build) are taken only when no file names one."""
    by_run = {}
    for d in files:
        by_run.setdefault(d.get("run_id") or "", []).append(d)
    named = {k: v for k, v in by_run.items() if k}
    if named:
        newest = max(named, key=lambda k: max(when(d) for d in named[k]))
        chosen = named[newest]
    else:
        chosen = by_run.get("", [])
    aside = []
    for run, ds in sorted(by_run.items(), key=lambda kv: -max(when(d) for d in kv[1])):
        if ds is chosen:
            continue
        label = ("run %s, launched %.1f s before this one" % (run, max(when(d) for d in chosen) - max(when(d) for d in ds))
                 if run else "no run named (an older build)")
        aside.append("set aside, another run's (%s): %s" % (label, ", ".join(os.path.basename(d["path"]) for d in ds)))
    refuse = []
    sizes = {d["world_size"] for d in chosen}
    if len(sizes) > 1:
        refuse.append("the files disagree on the world size: " + ", ".join(
            "%s says %d" % (os.path.basename(d["path"]), d["world_size"]) for d in chosen))
    seen = {}
    for d in chosen:
        if d["rank"] != d["file_rank"]:
            refuse.append("%s says it is rank %d" % (os.path.basename(d["path"]), d["rank"]))
        if d["rank"] in seen:
            refuse.append("%s and %s both claim rank %d" % (os.path.basename(seen[d["rank"]]["path"]),
                                                            os.path.basename(d["path"]), d["rank"]))
        seen[d["rank"]] = d
        if d["rank"] >= d["world_size"]:
            refuse.append("%s claims rank %d of a world of %d" % (os.path.basename(d["path"]), d["rank"], d["world_size"]))
    if not named and len(by_run.get("", [])) and refuse == [] and len({round(when(d)) for d in chosen}) > 1 \
            and max(when(d) for d in chosen) - min(when(d) for d in chosen) > 60:
        refuse.append("the files name no run (an older build) and their recorders started %.0f s apart: they cannot "
                      "be told to be one run's" % (max(when(d) for d in chosen) - min(when(d) for d in chosen)))
    return chosen, aside, refuse


# ---- one rank's file, indexed once (every question below is a dictionary look-up) ------------

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
    """One rank's file: its groups by identity, its entries, and indexes over them."""

    def __init__(self, d):
        self.d = d
        self.rank = d["rank"]
        self.groups = {}  # id -> (name, ranks tuple)
        for g in d["groups"]:
            ranks = tuple(g["ranks"]) if g["ranks"] else (self.rank,)
            self.groups[g["id"]] = (g["name"], ranks)
        self.entries = d["entries"]
        self.coll = {}   # key -> {seq: entry}
        self.msgs = {}   # (key, op, peer) -> {seq: entry}
        self.by_id = {}
        for e in self.entries:
            e["key"] = self.groups[e["group"]]
            if e["peer_world"] < 0:
                e["peer_world"] = e["peer"]
            self.by_id[e["id"]] = e
            if e["op"] in P2P:
                self.msgs.setdefault((e["key"], e["op"], e["peer_world"]), {})[e["seq"]] = e
            else:
                self.coll.setdefault(e["key"], {})[e["seq"]] = e
        self.pending = [e for e in self.entries if e["state"] != "completed"]  # issued or waiting
        self.pending_by_key = {}
        for e in self.pending:
            self.pending_by_key.setdefault(e["key"], []).append(e)
        last = max([max(e["issued_s"], e["waiting_s"] or 0, e["completed_s"] or 0) for e in self.entries] or [0.0])
        self.idle_s = d["dumped_at_s"] - last  # how long before its file it did nothing with Comm
        self.timeout_s = d.get("timeout_s", 0) or 0
        self.ended_at = (d.get("start_unix_s") or 0.0) + d["dumped_at_s"]  # wall clock, to line ranks up
        self.signalled = d["reason"].startswith("signal")
        self.errored = d["reason"].startswith(("error", "crash"))

    def collectives(self, key):
        return self.coll.get(key, {})

    def messages(self, key, op, peer):
        return self.msgs.get((key, op, peer), {})

    def waits_in(self):
        """The call its host waits in (Work::wait), if any: the newest one marked waiting."""
        waiting = [e for e in self.pending if e["state"] == "waiting"]
        return waiting[-1] if waiting else None

    def stalled(self):
        """Why this rank looks stopped, or "". Measured: its recorder's thread, which wakes every
        100 ms, saw a gap of seconds (paused_s). Else inferred: ended by a signal, and it waited
        longer than --timeout-s without timing out itself."""
        paused = self.d.get("paused_s") or 0
        if self.timeout_s and paused >= max(1.0, self.timeout_s / 2):
            e = self.by_id.get(self.d.get("paused_after"))
            after = " (its last call before it: %s %s)" % (e["key"][0], describe(e, with_site=False)) if e else ""
            return ("the whole process did not run for %.1f s%s: a thread of its recorder wakes every 100 ms, so "
                    "a gap of seconds is a process that was stopped (SIGSTOP, a debugger holding it, a swapped-out "
                    "machine). Rule: %s" % (paused, after, RULE_PAUSE))
        if not self.signalled or not self.timeout_s:
            return ""
        w = self.waits_in()
        if w and self.d["dumped_at_s"] - w["waiting_s"] > self.timeout_s + 0.5:
            return ("it waited in %s %s for %.1f s, longer than --timeout-s %d, without timing out itself: it was not "
                    "running (stopped: SIGSTOP, a debugger, a swapped-out machine). Rule: %s"
                    % (w["key"][0], describe(w, with_site=False), self.d["dumped_at_s"] - w["waiting_s"],
                       self.timeout_s, RULE_PAUSE))
        return ""

    def where(self):
        w = self.waits_in()
        if w:
            return "waits in %s %s, for %.1f s" % (w["key"][0], describe(w), self.d["dumped_at_s"] - w["waiting_s"])
        return ("is in no communication (its last one ended %.1f s before its file was written): "
                "computing, stopped (SIGSTOP, a debugger) or stuck outside Comm" % self.idle_s)


def group_name(key):
    return "%s (world ranks %s)" % (key[0], ",".join(map(str, key[1])))


# ---- findings, causes first --------------------------------------------------------------

def first_end_findings(ranks, missing):
    """A rank ended by a signal, or failing with an error, clearly before the others: the cause of
    their waits. Clearly: its file came 0.2 s or more before every other rank's (a launcher that ends
    the others when one rank dies takes longer than that to react)."""
    if len(ranks) < 2 or not any(R.d.get("start_unix_s") for R in ranks.values()):
        return []
    order = sorted(ranks.values(), key=lambda R: R.ended_at)
    first, second = order[0], order[1]
    gap = second.ended_at - first.ended_at
    if not (first.signalled or first.errored):
        return []
    how = first.d["reason"]
    if gap < 0.2:
        signalled = [R.rank for R in order if R.signalled]
        if first.signalled and len(signalled) > 1:
            return [["ranks %s were ended by signals within %.1f s of each other (%s): the files do not tell which "
                     "came first, so neither is named the cause. Rule: %s" % (
                         ",".join(map(str, signalled)), order[-1].ended_at - first.ended_at, how, RULE_DUMP)]]
        return []
    others = ", ".join("rank %d (%s)" % (R.rank, R.d["reason"].split(":")[0]) for R in order[1:])
    what = ("was ended by a signal (%s)" % how) if first.signalled else \
        ("crashed (%s)" % how) if how.startswith("crash") else ("failed with an error (%s)" % how)
    return [["rank %d %s %.1f s before any other rank's file; the others followed: %s. Its end is the cause of "
             "their waits, not a network or driver problem. Rule: %s" % (first.rank, what, gap, others, RULE_DUMP)]
            + (["  rank %d's last communication: %s [%s]" % (first.rank, describe(first.entries[-1]),
                                                            first.entries[-1]["state"])] if first.entries else [])]


def collective_findings(ranks, keys):
    out = []
    sig = lambda e: (e["op"], e["dtype"], e["reduce"], e["elements"] if e["op"] != "all_to_all" else 0)
    for key in keys:
        members = [ranks[r] for r in key[1] if r in ranks]
        seqs = sorted(set().union(*[m.collectives(key).keys() for m in members])) if members else []
        for seq in seqs:
            have = [(m, m.collectives(key)[seq]) for m in members if seq in m.collectives(key)]
            if len(have) < 2 or len({sig(e) for _, e in have}) == 1:
                continue
            lines = ["group %s: the ranks disagree at collective #%d:" % (group_name(key), seq)]
            lines += ["  rank %d: %s" % (m.rank, describe(e)) for m, e in have]
            lines.append("  A rank skipped a collective, or called one the others did not; from here on "
                         "the group's calls pair up wrongly. Rule: " + RULE_COLLECTIVE + ".")
            out.append(lines)
            break
    return out


def p2p_findings(ranks, keys, missing):
    """Waits for a message its peer never posted first (the peer's program lacks it: a cause),
    then sends the peer has not received (it may be blocked elsewhere: often an effect)."""
    out, effects = [], []
    for key in keys:
        members = [r for r in key[1] if r in ranks]
        for i, a in enumerate(members):
            for b in members[i + 1:]:
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
                pend_a, pend_b = A.pending_by_key.get(key, []), B.pending_by_key.get(key, [])
                a_stuck = [e for e in pend_a if e["op"] == "send" and e["peer_world"] == b and e["seq"] > max(b_from_a or [0])]
                b_stuck = [e for e in pend_b if e["op"] == "send" and e["peer_world"] == a and e["seq"] > max(a_from_b or [0])]
                if a_stuck and b_stuck:
                    out.append(["group %s: ranks %d and %d both send first, and neither receives: the classic "
                                "pipeline deadlock." % (group_name(key), a, b),
                                "  rank %d: %s" % (a, describe(a_stuck[0])),
                                "  rank %d: %s" % (b, describe(b_stuck[0])),
                                "  Each send waits for the other's receive, which comes after its own send. Post "
                                "the send and the receive together (one batch_p2p: ncclGroupStart/End). Rule: "
                                + RULE_P2P + "."])
                    continue
                for (x, y, stuck, y_got) in ((a, b, a_stuck, b_from_a), (b, a, b_stuck, a_from_b)):
                    if not stuck or y in missing:
                        continue
                    e, Y, got = stuck[0], ranks[y], max(y_got or [0])
                    last = y_got[got] if got else None
                    effects.append(["group %s: rank %d sends message #%d to rank %d, but rank %d posted only %d receives "
                                "from rank %d%s." % (group_name(key), x, e["seq"], y, y, got, x,
                                                     (' (the last: "' + last["note"] + '")') if last and last["note"] else ""),
                                "  rank %d: %s" % (x, describe(e)),
                                "  rank %d %s" % (y, Y.where()),
                                "  The two ranks' programs disagree on the messages between them (the number of "
                                "micro-batches, --grad-acc-steps, or the schedule). Rule: " + RULE_P2P + "."])
                for (x, y, y_sent, X) in ((a, b, b_to_a, A), (b, a, a_to_b, B)):
                    waiting = [e for e in X.pending_by_key.get(key, []) if e["op"] == "recv" and e["peer_world"] == y
                               and e["seq"] > max(y_sent or [0])]
                    if not waiting or y in missing:
                        continue
                    e, Y = waiting[0], ranks[y]
                    sent = max(y_sent or [0])
                    last = y_sent[sent] if sent else None
                    out.append(["group %s: rank %d waits for message #%d from rank %d, but rank %d sent it only %d%s."
                                % (group_name(key), x, e["seq"], y, y, sent,
                                   (' (the last: "' + last["note"] + '")') if last and last["note"] else ""),
                                "  rank %d: %s" % (x, describe(e)),
                                "  rank %d %s" % (y, Y.where()),
                                "  The two ranks' programs disagree on the messages between them (the number of "
                                "micro-batches, --grad-acc-steps, or the schedule). Rule: " + RULE_P2P + "."])
    return out + effects


def behind_findings(ranks, keys, missing):
    out = []
    for key in keys:
        for r in [r for r in key[1] if r in ranks]:
            R = ranks[r]
            w = [e for e in R.pending_by_key.get(key, []) if e["op"] not in P2P]
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
                lines.append("  rank %d has not called it (its last on this group: #%d) and %s"
                             % (o, max(ranks[o].collectives(key) or [0]), ranks[o].where()))
            for o in gone:
                lines.append("  rank %d left no file (see above)" % o)
            lines.append("  Rule: " + RULE_COLLECTIVE + ".")
            out.append(lines)
            break
    return out


def stuck_together_findings(ranks, keys):
    """Every rank of a group waits in the same collective, each longer than --timeout-s, none was
    signalled or paused: the collective itself did not move. Only then is it the library's."""
    out = []
    for key in keys:
        members = [r for r in key[1] if r in ranks]
        if len(members) < len(key[1]):
            continue
        first = {r: ranks[r].pending[0] for r in members if ranks[r].pending and ranks[r].pending[0]["key"] == key}
        if len(first) != len(members) or len({(e["op"], e["seq"]) for e in first.values()}) != 1:
            continue
        waited = [ranks[r].d["dumped_at_s"] - (first[r]["waiting_s"] or first[r]["issued_s"]) for r in members]
        timeout = max(ranks[r].timeout_s for r in members)
        if not timeout or min(waited) < timeout or any(ranks[r].signalled for r in members):
            continue
        e = first[members[0]]
        out.append(["group %s: every rank waited in %s for %.1f s or more, past --timeout-s %d, and every rank "
                    "ran (no recorder measured a pause): the library did not move it (a network or driver "
                    "problem, or a rank stuck inside it without polling). Rule: %s."
                    % (group_name(key), describe(e), min(waited), timeout, RULE_COLLECTIVE)])
    return out


# ---- the report ----------------------------------------------------------------------------

def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[0])
        print("usage: scripts/hang_report.py DIR")
        return 2
    directory = argv[1]
    files, problems = load(directory)
    if files is None:
        print("hang report: %s: %s" % problems[0])
        return 2
    for path, what in problems:
        print("hang report: %s: %s; left out" % (path, what))
    if not files:
        print("hang report: no readable comms-rank*.json in %s (was the run started with --flight-recorder %s?)"
              % (directory, directory))
        return 2
    chosen, aside, refuse = choose_run(files)
    for line in aside:
        print("hang report: " + line)
    if refuse:
        for line in refuse:
            print("hang report: refused: " + line)
        print("hang report: these files are not one run's; move the others away and run it again")
        return 2
    world = chosen[0]["world_size"]
    ranks = {d["rank"]: Rank(d) for d in chosen}
    missing = [r for r in range(world) if r not in ranks]
    keys = sorted({k for R in ranks.values() for k in R.groups.values()}, key=lambda k: (len(k[1]), k))
    keys = [k for k in keys if len(k[1]) > 1]
    damaged = {int(FILE_NAME.match(os.path.basename(p)).group(1)) for p, _ in problems}

    run = chosen[0].get("run_id")
    print("hang report: %d of %d ranks wrote their flight recorder in %s%s" % (
        len(ranks), world, directory, (" (run %s)" % run) if run else ""))
    for r in sorted(ranks):
        d = ranks[r].d
        print("  rank %d: %s (%d communications recorded, last %d kept)"
              % (r, d["reason"], d.get("recorded", len(d["entries"])), len(d["entries"])))
    first_end = first_end_findings(ranks, missing)
    disagree = collective_findings(ranks, keys) + p2p_findings(ranks, keys, missing)
    # A crash inside the library after the ranks' calls disagree (Open MPI may free a buffer
    # twice on a count mismatch) is the disagreement's effect: that comes first then.
    crashed_first = bool(first_end) and " crashed (" in first_end[0][0]
    findings = [] if crashed_first and disagree else list(first_end)
    for r in missing:
        if r in damaged:
            findings.append(["rank %d's file is damaged (see above): it is left out, and the others are judged "
                             "without it." % r])
        else:
            findings.append(["rank %d left no file: it died without a word (SIGKILL, a crash, the OOM killer) before "
                             "it could write one; the others waited for it. Rule: %s" % (r, RULE_DUMP)])
    findings += disagree
    if crashed_first and disagree:
        findings += first_end
    for r in sorted(ranks):
        why = ranks[r].stalled()
        if why:
            findings.append(["rank %d stopped answering: %s." % (r, why),
                             "  The others waited for it until --timeout-s; rank %d's last communications:" % r]
                            + ["    " + describe(e) + " [" + e["state"] + "]" for e in ranks[r].entries[-2:]])
    findings += behind_findings(ranks, keys, missing)
    if not findings:
        findings += stuck_together_findings(ranks, keys)
    if not findings and any(R.pending for R in ranks.values()):
        findings.append(["the files do not decide what went wrong: no rank was signalled first, none stopped, the "
                         "groups agree, and no collective outlasted --timeout-s on every rank. Where each rank is:"]
                        + ["  rank %d %s; its oldest unfinished call: %s [%s]" % (
                            r, ranks[r].where(), describe(ranks[r].pending[0]), ranks[r].pending[0]["state"])
                           for r in sorted(ranks) if ranks[r].pending])
    print()
    if not findings:
        counts = ", ".join("%s #%d" % (k[0], max(max(ranks[r].collectives(k) or [0]) for r in k[1] if r in ranks))
                           for k in keys)
        print("No problem found: every rank wrote its file, every communication it issued completed, and the "
              "groups agree (collectives so far: %s)." % (counts or "none"))
        return 2 if problems else 0
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
            w = ranks[r].pending_by_key.get(key, [])
            done = [e for e in ranks[r].coll.get(key, {}).values() if e["state"] == "completed"]
            if w:
                cells.append("rank %d: %s %s" % (r, "waits in" if w[-1]["state"] == "waiting" else "posted",
                                                 describe(w[-1], with_site=False).split(" — ")[0]))
            elif done:
                cells.append("rank %d: done up to %s" % (r, describe(done[-1], with_site=False).split(" — ")[0]))
        if cells:
            print("  %s: %s" % (group_name(key), "; ".join(cells)))
    return 2 if problems else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:  # (| head)
        sys.exit(1)
