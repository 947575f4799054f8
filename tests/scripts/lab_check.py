#!/usr/bin/env python3
"""tests/scripts/lab_check.py BUILD [CHAPTER] — every exercise of scripts/lab, right and wrong.

    python3 tests/scripts/lab_check.py build-debug "pipeline parallelism"

ctest runs it once per chapter (tests/cmake/lab_tests.cmake: lab.<chapter>, label labs). For the
chapter's exercises (all of them without CHAPTER):

  1. the data (and, after 2, each measurement read again another way: the ledger's totals
     over the step count, the schedule's bubble formula, the memory trace, the step
     line, the metrics file, the planner's command line; a broken extractor fails here): each exercise names an extractor scripts/lab has, a file and section that
     exist (the formula's place), hints that evaluate, none within the tolerance of the
     measured value, none matching an earlier hint of the same exercise;
  2. `scripts/lab solve --cache DIR` measures every answer (each command runs once);
  3. `scripts/lab check` of those answers: every one right, exit 0;
  4. for each hint, a wrong answer made from the measured value by that hint's expression
     (forgetting the backward, bytes for elements, a factor of the group size, ...):
     `check --json` says WRONG, exit 1, and gives exactly that hint;
  5. bad input: an unknown id, malformed JSON, an answer that is not a number, a run that
     fails (a course copy's task not written yet): one line, exit 2.

Steps 3-5 reuse the runs of step 2 (--cache), so each command runs once. Standard library.
"""
import importlib.machinery
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/scripts/ -> the checkout
LAB = ROOT / "scripts/lab"


def load_lab():
    loader = importlib.machinery.SourceFileLoader("lab", str(LAB))
    spec = importlib.util.spec_from_loader("lab", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def headings(path):
    out, fence = [], False
    for line in path.read_text().splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fence = not fence
        elif not fence and re.match(r"^#{1,6}\s", line):
            out.append(re.sub(r"^#{1,6}\s+", "", line).strip())
    return out


# ---- the oracle: each measurement read again another way, so that a broken extractor fails ----
# (the reference answers come from the extractors themselves; without this a wrong extractor
# would agree with itself)

BUBBLE = {"afab": lambda P, m, v: (P - 1) / m, "1f1b": lambda P, m, v: (P - 1) / m,  # schedules.h
          "interleaved": lambda P, m, v: (P - 1) / (v * m), "zb-h1": lambda P, m, v: (P - 1) / (3 * m),
          "dualpipev": lambda P, m, v: (P - 1) / (6 * m)}


def flag(args, name, default):
    return int(args[args.index(name) + 1]) if name in args else default


def oracle(e, folder):
    """The exercise's measurement from its run's folder, not through scripts/lab's extractor."""
    x, args = e["extract"], e["command"]["args"]
    out = (folder / "stdout.txt").read_text()
    if x["from"] == "ledger":  # the totals' columns over the step count, not the per-step ones
        steps = flag(args, "--steps", 1)
        for line in out[out.index("communication of rank 0"):].splitlines()[2:]:
            w = line.split()
            if len(w) == 7 and (w[0], w[2]) == (x["group"], x["kind"]):
                return int(w[3 if x["field"] == "calls" else 4]) / steps
            if not w:
                break
        return 0
    if x["from"] == "pp_idle":  # the taught formula: idle / step = bubble / (1 + bubble)
        s = args[args.index("--pp-schedule") + 1]
        b = BUBBLE[s](flag(args, "--pp", 1), flag(args, "--grad-acc-steps", 1), flag(args, "--pp-virtual-stages", 1))
        return b / (1 + b)
    if x["from"] == "memory_trace":
        rows = [json.loads(l) for l in (folder / x["file"]).read_text().splitlines()]
        pick = lambda p: next(r["bytes"] for r in rows if all(r.get(k, -1) == v for k, v in p.items()))
        return (pick(x["at"]) - (pick(x["minus"]) if "minus" in x else 0)) / x.get("scale", 1)
    if x["from"] == "metrics":
        row = [json.loads(l) for l in (folder / x["file"]).read_text().splitlines()][x["step"] - 1]
        v = row[x["key"]]
        return sum(v) if isinstance(v, list) and "index" not in x else (v[x["index"]] if isinstance(v, list) else v)
    if x["from"] == "step_line":  # the last step line's field, split on its bars
        last = [l for l in out.splitlines() if l.startswith("step ")][-1]
        part = next(p.strip() for p in last.split("|") if p.strip().startswith(x["field"] + " "))
        return float(part.split()[1].replace(",", ""))
    if x["from"] == "plan_best":  # the best layout's own command line
        cmd = next(l for l in out.splitlines() if "build/train" in l and "mpirun" in l)
        return flag(cmd.split(), "--" + x["axis"], 1)
    raise ValueError(f"no oracle for the extractor '{x['from']}'")


def page_problems(m, table, ids):
    """Each chapter's page (exercises.json "chapters") holds its questions in order, each under
    its `## N. `id`` heading with its command as scripts/lab show prints it; the counts in the
    sentence of the labs' README that says how many questions need how many runs are the data's."""
    problems = []
    chapters = {c["chapter"]: c["page"] for c in json.loads(m.EXERCISES.read_text())["chapters"]}
    for chapter in sorted({table[i]["chapter"] for i in ids}):
        if chapter not in chapters:
            problems.append(f"chapter '{chapter}': no page in exercises.json's chapters")
            continue
        page = ROOT / chapters[chapter]
        if not page.is_file():
            problems.append(f"chapter '{chapter}': its page {chapters[chapter]} does not exist")
            continue
        text = page.read_text()
        mine = [i for i in table if table[i]["chapter"] == chapter]
        shown = re.findall(r"^## \d+\. `([^`]+)`", text, re.M)
        if shown != mine:
            problems.append(f"{chapters[chapter]}: its questions are {shown}, the chapter's {mine}")
        for i in mine:
            for cmd in m.commands_of(table[i]):
                if m.shown_command(cmd) not in text:
                    problems.append(f"{chapters[chapter]}: {i}'s command `{m.shown_command(cmd)}` is not shown")
    readme = (ROOT / "docs/labs/README.md").read_text()
    commands = {m.run_key(c) for e in table.values() for c in m.commands_of(e)}
    said = re.search(r"The (\d+)\s+questions need (\d+) runs", readme)
    if not said or (int(said.group(1)), int(said.group(2))) != (len(table), len(commands)):
        problems.append(f"the labs' README (docs/labs/) should say: The {len(table)} questions need {len(commands)} runs")
    return problems


def lab(*args):
    return subprocess.run([sys.executable, str(LAB), *args], capture_output=True, text=True)


def main():
    if len(sys.argv) < 2:
        print("usage: tests/scripts/lab_check.py BUILD [CHAPTER]")
        return 2
    build, chapter = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    m = load_lab()
    table = m.load_exercises()
    ids = [i for i, e in table.items() if chapter is None or e["chapter"] == chapter]
    problems = []
    if not ids:
        print(f"FAILED: no exercise in chapter '{chapter}'")
        return 1

    # 1. the data
    for i in ids:
        e = table[i]
        for key in ("chapter", "question", "quantity", "unit", "tolerance", "command", "extract", "taught", "hints"):
            if key not in e:
                problems.append(f"{i}: no '{key}'")
        if e["extract"]["from"] not in m.EXTRACTORS:
            problems.append(f"{i}: unknown extractor '{e['extract']['from']}'")
        f = ROOT / e["taught"]["file"]
        if not f.is_file():
            problems.append(f"{i}: taught in {e['taught']['file']}, which does not exist")
        elif e["taught"]["section"] not in headings(f):
            problems.append(f"{i}: {e['taught']['file']} has no section \"{e['taught']['section']}\"")
        if not e["hints"]:
            problems.append(f"{i}: no hint for a wrong answer")
    problems += page_problems(m, table, ids)
    if problems:
        print("\n".join(f"FAILED: {p}" for p in problems))
        return 1

    with tempfile.TemporaryDirectory(prefix="lab-check-") as tmp:
        tmp = Path(tmp)
        cache = tmp / "cache"
        # 2. solve
        t0 = time.time()
        p = lab("solve", *ids, "--build", build, "--cache", str(cache))
        if p.returncode != 0:
            print(f"FAILED: scripts/lab solve exit {p.returncode}: {p.stderr.strip()}")
            return 1
        measured = json.loads(p.stdout)
        solve_s = time.time() - t0
        runs = len([d for d in cache.iterdir() if (d / "ok").is_file()])
        for i in ids:
            x, e = float(measured[i]), table[i]
            folders = [cache / m.run_folder_name(c) for c in m.commands_of(e)]
            o = oracle(e, folders[0]) - (oracle(e, folders[1]) if len(folders) > 1 else 0)
            if not m.close(x, o, max(e["tolerance"], 1e-6)):
                problems.append(f"{i}: scripts/lab measured {x:g}, read another way {o:g}")
            seen = []
            for value, hint in m.hint_values(e, x):
                if m.close(value, x, e["tolerance"]):
                    problems.append(f"{i}: the wrong answer of hint '{hint}' is right ({value:g} ~ {x:g})")
                for earlier, hint0 in seen:
                    if m.close(value, earlier, e["tolerance"]):
                        problems.append(f"{i}: hints '{hint0}' and '{hint}' give the same wrong answer {value:g}")
                seen.append((value, hint))

        # 3. the reference answers pass
        right = tmp / "right.json"
        right.write_text(json.dumps(measured))
        t1 = time.time()
        p = lab("check", str(right), "--build", build, "--cache", str(cache), "--json", str(tmp / "right.out.json"))
        check_s = time.time() - t1
        if p.returncode != 0:
            problems.append(f"check of the reference answers: exit {p.returncode}\n{p.stdout}{p.stderr}")
        else:
            res = json.loads((tmp / "right.out.json").read_text())
            if res["right"] != len(ids):
                problems.append(f"check of the reference answers: {res['right']} of {len(ids)} right")

        # 4. each hint's wrong answer fails with that hint (round k: each exercise's k-th hint)
        wrong_cases = 0
        for k in range(max(len(table[i]["hints"]) for i in ids)):
            answers, expect = {}, {}
            for i in ids:
                hv = m.hint_values(table[i], float(measured[i]))
                if k < len(hv):
                    answers[i], expect[i] = hv[k][0], hv[k][1]
            if not answers:
                continue
            f = tmp / f"wrong{k}.json"
            f.write_text(json.dumps(answers))
            p = lab("check", str(f), "--build", build, "--cache", str(cache), "--json", str(tmp / f"wrong{k}.out.json"))
            if p.returncode != 1:
                problems.append(f"check of wrong answers (hint {k + 1}): exit {p.returncode}, not 1\n{p.stderr}")
                continue
            for row in json.loads((tmp / f"wrong{k}.out.json").read_text())["exercises"]:
                wrong_cases += 1
                if row["right"]:
                    problems.append(f"{row['id']}: the wrong answer {row['predicted']:g} passed")
                elif row["hint"] != expect[row["id"]]:
                    problems.append(f"{row['id']}: {row['predicted']:g} gave the hint '{row['hint']}', "
                                    f"not '{expect[row['id']]}'")

        # 5. bad input: one line, exit 2
        bad = {"unknown id": '{"no.such_exercise": 1}', "malformed JSON": '{"dp.allreduce_elements": ',
               "not a number": json.dumps({ids[0]: "many"})}
        for what, text in bad.items():
            f = tmp / "bad.json"
            f.write_text(text)
            p = lab("check", str(f), "--build", build, "--cache", str(cache))
            lines = p.stderr.strip().splitlines()
            if p.returncode != 2 or len(lines) != 1 or not lines[0].startswith("scripts/lab: "):
                problems.append(f"bad input ({what}): exit {p.returncode}, stderr {p.stderr!r}")
        # a run that fails (a course copy's task not written yet): its line, exit 2
        fake = tmp / "fake-build"
        fake.mkdir()
        (fake / "train").write_text("#!/bin/sh\necho 'error: not implemented: dp.naive_all_reduce' >&2\nexit 1\n")
        (fake / "train").chmod(0o755)
        one_rank = next(i for i in table if table[i]["command"].get("ranks", 1) == 1)
        f = tmp / "one.json"
        f.write_text(json.dumps({one_rank: 1}))
        p = lab("check", str(f), "--build", str(fake), "--cache", str(tmp / "fake-runs"))
        lines = [l for l in p.stderr.strip().splitlines() if not l.startswith("[lab] running")]
        if p.returncode != 2 or len(lines) != 1 or "not implemented: dp.naive_all_reduce" not in lines[0]:
            problems.append(f"a failed run: exit {p.returncode}, stderr {p.stderr!r}")
        p = lab("show", "no.such_exercise")
        if p.returncode != 2 or "no exercise 'no.such_exercise'" not in p.stderr:
            problems.append(f"show of an unknown id: exit {p.returncode}, {p.stderr!r}")

    if problems:
        print("\n".join(f"FAILED: {p}" for p in problems))
        return 1
    print(f"{len(ids)} exercises ({chapter or 'every chapter'}): {runs} runs, solve {solve_s:.0f} s, check of every "
          f"answer {check_s:.1f} s (cached runs); the reference answers right, {wrong_cases} wrong answers "
          f"each with its hint, bad input refused")
    print("LABS OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
