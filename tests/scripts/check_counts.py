#!/usr/bin/env python3
"""tests/scripts/check_counts.py [ROOT] — every count the documents state about the code is the code's.

    python3 tests/scripts/check_counts.py [ROOT]

ctest runs it as `docs.counts` (label `docs`, tests/cmake/docs_tests.cmake); it needs no build,
only the sources, and takes well under a second. Standard library only.

A count written by hand in a page drifts when the code grows (the README said the grader
fails "seven" wrong solutions when it failed eleven; docs/status.md said "all four
schedules" after the fifth came). So each kind of count a page states is read here from
the code that decides it, and every page that states one is compared with it:

  tasks, points      tests/cmake/assignments.cmake (the task table; `scripts/assignment list`):
                     "N tasks" and "N points" in README.md and docs/assignments/README.md are
                     the totals; in a handout (docs/assignments/X.md) they are its own tasks';
                     a handout's "## Task NAME (N points)" is NAME's points.
  the task table     docs/assignments/README.md's table "| task | points | where | handout |":
                     one row per task of tests/cmake/assignments.cmake, the same points and handout,
                     and "where" the file whose `// BEGIN ASSIGNMENT NAME` markers hold it.
  wrong solutions    tests/scripts/assignment_wrong_fills.py's WRONG table: "N (deliberately) wrong
                     solutions / fills / lines" anywhere.
  schedules          pipeline_parallel/schedules.h's `enum class PipelineSchedule`: "N
                     schedules", "all N schedules", "N pipeline schedules" anywhere.
  unity batch        CMakeLists.txt's UNITY_BUILD_BATCH_SIZE: "its whole batch of up to N
                     files" (docs/building.md).
  files              every .h/.cpp/.cu/.cuh of a technique folder, of the step (picotron/)
                     and of each runtime room is named in its README.md (the folder's map,
                     picotron/README.md's reading order: a new file cannot go unexplained).
  labels             README.md's "# one label: unit, mpi, ..." names exactly the labels that
                     tests/cmake/*.cmake give (task.NAME and assignments_build aside).

Numbers are digits or the words one to twenty. Counts the program prints (layouts
considered, parameters) are not here: the pages show them in <!-- docs-test --> blocks,
which tests/scripts/check_docs.py compares with the real output.

Exit status: 0 when every count agrees, 1 otherwise (each printed with file:line).
"""
import ast
import os
import re
import sys

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen", "twenty"]
NUM = r"(?P<n>[0-9][0-9,]*|" + "|".join(WORDS) + r")"
TECHNIQUES = ["data_parallel", "tensor_parallel", "pipeline_parallel", "context_parallel", "zero",
              "expert_parallel", "kernels"]


def number(text):
    text = text.lower()
    return WORDS.index(text) if text in WORDS else int(text.replace(",", ""))


def read(root, rel):
    return open(os.path.join(root, rel), encoding="utf-8").read()


def documents(root):
    docs = ["README.md"]
    for sub in ("docs", "docs/assignments"):
        docs += sorted(f"{sub}/{f}" for f in os.listdir(os.path.join(root, sub)) if f.endswith(".md"))
    docs += [f"{d}/README.md" for d in sorted(os.listdir(root))
             if not d.startswith(".") and d not in ("docs", "data") and os.path.isfile(os.path.join(root, d, "README.md"))]
    return docs


def task_table(root):
    """name -> (points, handout page name), in the table's order (as scripts/assignment reads it)."""
    tasks = {}
    for body in re.findall(r"^picotron_task\(([^)]*)\)", read(root, "tests/cmake/assignments.cmake"), re.M):
        words = body.split()
        points = words[words.index("POINTS") + 1]
        doc = words[words.index("DOC") + 1]
        tasks[words[0]] = (int(points), doc)
    return tasks


def task_files(root):
    """name -> the files whose BEGIN ASSIGNMENT markers hold it."""
    where = {}
    for top in ["picotron", "runtime", "tests"] + TECHNIQUES:
        for dp, _, fn in os.walk(os.path.join(root, top)):
            for f in fn:
                if re.search(r"\.(h|cpp|cu|cuh)$", f):
                    rel = os.path.relpath(os.path.join(dp, f), root)
                    for name in re.findall(r"//\s*BEGIN ASSIGNMENT\s+(\S+)", read(root, rel)):
                        where.setdefault(name, set()).add(rel)
    return where


def wrong_fills(root):
    tree = ast.parse(read(root, "tests/scripts/assignment_wrong_fills.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "WRONG" for t in node.targets):
            return len(node.value.keys)
    raise SystemExit("check_counts: no WRONG table in tests/scripts/assignment_wrong_fills.py")


def schedules(root):
    m = re.search(r"enum class PipelineSchedule\s*\{([^}]*)\}", read(root, "pipeline_parallel/schedules.h"))
    return len([w for w in m.group(1).split(",") if w.strip()])


def unity_batch(root):
    return int(re.search(r"UNITY_BUILD_BATCH_SIZE\s+([0-9]+)", read(root, "CMakeLists.txt")).group(1))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    problems, checked = [], 0
    tasks = task_table(root)
    total_points = sum(p for p, _ in tasks.values())
    truth = {"wrong": wrong_fills(root), "schedules": schedules(root), "unity": unity_batch(root)}

    def claim(rel, text, m, want, what):
        nonlocal checked
        checked += 1
        got = number(m.group("n"))
        if got != want:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{rel}:{line}: \"{m.group(0).strip()}\": {what} is {want}, not {got}")

    for rel in documents(root):
        text = read(root, rel)
        handout = re.fullmatch(r"docs/assignments/(\w+)\.md", rel)
        if handout and handout.group(1) != "README":
            mine = {t: p for t, (p, d) in tasks.items() if d == handout.group(1)}
            scope = f"the number of {handout.group(1)}'s tasks in tests/cmake/assignments.cmake"
            for m in re.finditer(r"^## Task (?P<task>\S+) \((?P<n>[0-9]+) points?\)", text, re.M):
                if m.group("task") not in tasks:
                    problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: a task {m.group('task')} "
                                    "that tests/cmake/assignments.cmake does not have")
                    continue
                claim(rel, text, m, tasks[m.group("task")][0], f"{m.group('task')}'s points (tests/cmake/assignments.cmake)")
            body = re.sub(r"^## Task .*$", "", text, flags=re.M)
            for m in re.finditer(r"\b" + r"(?P<n>[0-9]+) tasks?\b", body):
                claim(rel, body, m, len(mine), scope)
            for m in re.finditer(r"\b(?P<n>[0-9]+) points\b", body):
                claim(rel, body, m, sum(mine.values()), f"the sum of {handout.group(1)}'s points")
        else:
            for m in re.finditer(r"\b(?P<n>[0-9]+) (?:graded )?tasks\b", text):
                claim(rel, text, m, len(tasks), "the number of tasks in tests/cmake/assignments.cmake")
            for m in re.finditer(r"\b(?P<n>[0-9]{2,}) points\b", text):
                claim(rel, text, m, total_points, "the sum of points in tests/cmake/assignments.cmake")
        for m in re.finditer(r"\b" + NUM + r" (?:deliberately )?wrong (?:solutions|fills|lines)\b", text, re.I):
            claim(rel, text, m, truth["wrong"], "the number of wrong fills (tests/scripts/assignment_wrong_fills.py, WRONG)")
        for m in re.finditer(r"\b(?:all )?" + NUM + r" (?:pipeline[- ])?schedules\b", text, re.I):
            claim(rel, text, m, truth["schedules"], "the number of schedules (enum class PipelineSchedule)")
        for m in re.finditer(r"batch of up to " + NUM + r" files", text):
            claim(rel, text, m, truth["unity"], "UNITY_BUILD_BATCH_SIZE in CMakeLists.txt")

    # docs/assignments/README.md's task table against tests/cmake/assignments.cmake and the markers.
    rel = "docs/assignments/README.md"
    text, where = read(root, rel), task_files(root)
    rows = {}
    for m in re.finditer(r"^\| *([a-z0-9_]+\.[a-z0-9_]+) *\| *([0-9]+) *\| *([^|]+?) *\| *\[[^\]]*\]\(([^)]+)\.md\) *\|$",
                         text, re.M):
        rows[m.group(1)] = (int(m.group(2)), m.group(3), m.group(4), text.count("\n", 0, m.start()) + 1)
    checked += 1
    for name, (points, doc) in tasks.items():
        if name not in rows:
            problems.append(f"{rel}: the task table has no row for {name} (tests/cmake/assignments.cmake has it)")
            continue
        got_points, got_where, got_doc, line = rows[name]
        files = sorted(where.get(name, []))
        if got_points != points:
            problems.append(f"{rel}:{line}: {name}: {got_points} points, tests/cmake/assignments.cmake says {points}")
        if got_doc != doc:
            problems.append(f"{rel}:{line}: {name}: handout {got_doc}.md, tests/cmake/assignments.cmake says {doc}.md")
        if sorted(w.strip() for w in got_where.split(",")) != files:
            problems.append(f"{rel}:{line}: {name}: written in '{got_where}', its markers are in {', '.join(files)}")
    for name in rows:
        if name not in tasks:
            problems.append(f"{rel}:{rows[name][3]}: a row for {name}, which tests/cmake/assignments.cmake does not have")

    # README.md's list of test labels ("# one label: unit, mpi, ...") names every label the
    # tests declare (tests/cmake/*.cmake, tests/CMakeLists.txt), task.NAME and assignments_build aside.
    declared = set()
    for f in ["CMakeLists.txt"] + [f"cmake/{c}" for c in sorted(os.listdir(os.path.join(root, "tests", "cmake")))]:
        if f.endswith(".cmake") or f == "CMakeLists.txt":
            for group in re.findall(r'LABELS\s+"?([a-z_;]+)', read(root, f"tests/{f}")):
                declared.update(w for w in group.split(";") if w and w not in ("task", "assignments_build"))
    # ... and the technique labels (tests/cmake/labels.cmake gives them by flags and name).
    declared.update(re.search(r"^set\(PICOTRON_TECHNIQUES ([a-z0-9_ ]+)\)", read(root, "tests/cmake/labels.cmake"),
                              re.M).group(1).split())
    text = read(root, "README.md")
    m = re.search(r"# one label: ([a-z0-9_, ]+)", text)
    checked += 1
    if not m:
        problems.append("README.md: no '# one label: ...' list of the test labels")
    else:
        listed = {w.strip() for w in m.group(1).split(",")}
        line = text.count("\n", 0, m.start()) + 1
        for label in sorted(declared - listed):
            problems.append(f"README.md:{line}: the list of labels lacks '{label}' (a label of tests/cmake/*.cmake)")
        for label in sorted(listed - declared):
            problems.append(f"README.md:{line}: the list of labels names '{label}', which no test has")

    # Every source file of a technique folder, the step and each runtime room is named in the
    # folder's README.md (a pair by its stem: `zero1.h`, zero1.{h,cpp}, `zero1.cpp` all name
    # zero1.h and zero1.cpp).
    rooms = sorted(f"runtime/{d}" for d in os.listdir(os.path.join(root, "runtime"))
                   if os.path.isdir(os.path.join(root, "runtime", d)))
    for folder in TECHNIQUES + ["picotron"] + rooms:
        readme = read(root, f"{folder}/README.md")
        stems = sorted({f.rsplit(".", 1)[0] for f in os.listdir(os.path.join(root, folder))
                        if re.search(r"\.(h|cpp|cu|cuh)$", f)})
        for stem in stems:
            checked += 1
            if not re.search(r"(?<![\w-])" + re.escape(stem) + r"\.(h|cpp|cu|cuh|\{)", readme):
                files = sorted(f for f in os.listdir(os.path.join(root, folder)) if f.rsplit(".", 1)[0] == stem)
                problems.append(f"{folder}/README.md: does not name {', '.join(files)} (every file of the "
                                "folder is in its map)")

    for p in problems:
        print("FAILED " + p)
    print(f"counts: {checked} count(s) and table(s) checked, {len(problems)} wrong")
    if not problems:
        print("counts ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
