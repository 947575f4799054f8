#!/usr/bin/env python3
"""tests/scripts/check_docs.py — run the commands the documentation shows and compare their output.

    python3 tests/scripts/check_docs.py --train build/train [--root .] [--python PY] [--only docs/data.md] [-v]

ctest runs it as `docs.commands` (label `docs`, tests/cmake/docs_tests.cmake): the checks of scripts,
test names and flags there (--no-blocks), and each document's blocks as a test of its own,
docs.commands.<document> (--only DOC --blocks-only), so that ctest runs them beside other
tests. Standard library only.

The convention (docs/testing.md, "Documentation that cannot drift"):

  * A fenced block is checked when the line right before its opening fence is the marker
        <!-- docs-test -->            or    <!-- docs-test: OPTIONS -->
    Unmarked blocks are only read by people. Mark only blocks that finish in seconds on a
    2-core CPU (tiny model, few steps, --threads 1 where ranks share cores).
  * In a checked block, a line starting with "$ " is a command (a line ending in " \\" goes
    on to the next line); the lines after it, up to the next command, are output it must
    print. Each shown line must appear in the real output (stdout and stderr together),
    in the order shown, as a whole line; lines of the real output that are not shown are
    allowed anywhere. A line "..." or "…" alone only tells the reader that lines were left
    out; it is not matched.
  * Inside a shown line, "…" stands for any text. Always volatile, whatever the block says
    (they depend on the machine, the load and the number of threads): a number before
    "tok/s", after "mfu " and before "%", after "grad norm ", and a duration ("0.02 s",
    "12 ms", "3 µs"). Such a number matches any number, but not "inf" or "nan". A number
    after "loss " matches within 2% relative: another CPU model rounds differently, and a
    few dozen steps grow that into the fourth digit of a loss and any digit of a
    gradient norm (seen between two 2-core Xeons, docs/testing.md). (Whether a technique
    changes the numbers is the equivalence tests' question, to 1e-9 in fp64.)
  * OPTIONS, space-separated:
        numbers     every number of the shown output matches any number, and a run of spaces
                    any run of spaces (columns move with the numbers' widths): timings,
                    benchmarks
        fails       every command of the block that shows output must exit non-zero (bad
                    input); one that shows none (a set-up step) must exit 0. Without it,
                    every command must exit 0
        timeout=N   seconds a command may run (default 120)
  * Commands run with bash, in one scratch directory per document (the blocks of a document
    run top to bottom and see each other's files), which holds build/train (the --train
    binary), build/bench and build/tests (the folders beside it), and scripts/, bench/,
    tests/ of the repository: so the commands run exactly as written. The environment adds
    what OpenMPI needs as root in a container (OMPI_ALLOW_RUN_AS_ROOT=1,
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, the vader single-copy mechanism off) and TRAIN=<binary>.
    An mpirun command in a checked block must say --oversubscribe (a 2-core machine needs it).
  * Scripts: every scripts/, bench/ or tests/ file with a .sh or .py name that a document
    names must exist; a .sh must pass `bash -n`, a .py must compile, and a .py that uses
    argparse must answer --help with --python (a missing third-party module, e.g.
    matplotlib, is reported and skipped, not failed).
  * Any fenced block (checked or not) with an `mpirun -np N` line, N > 2, and no
    `--device cuda` must say --oversubscribe: those are the CPU examples a laptop runs.
  * Flags: every flag of `build/train --help` is named in docs/running.md, and every flag in
    the first column of its table is one `--help` lists.
  * Test selections: every `ctest ... -R PATTERN` a document shows must select a test of
    the build directory beside --train (`ctest -N`), and every `-L LABEL` must be a label
    there or in tests/cmake/*.cmake; a test named in backticks (`ledger.tp`: a
    known prefix, a dot, no file extension) must be a test there, or the start of some
    test names, or an add_test(NAME ...) of tests/cmake/*.cmake; every `unit_tests "[tag]"` must be a tag of
    build/tests/unit_tests. Skipped (and said so) when there is no ctest, no test
    directory or no unit_tests binary.

Documents read: README.md, docs/*.md and every top-level folder's README.md.
Exit status: 0 when every check passed, 1 otherwise (each failure printed with file:line).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^\s*<!--\s*docs-test(?::\s*(?P<opts>[^>]*?))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
NUMBER = r"[-+]?[0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
ANY_NUMBER = "\x00"  # placeholder for NUMBER while the rest of the line is escaped
ANY_TEXT = "\x01"
# Volatile fields, whatever the block's options: (regex on the shown line, group = the number).
VOLATILE = [
    re.compile(r"(" + NUMBER + r")(?= tok/s)"),
    re.compile(r"(?<=mfu )(" + NUMBER + r")(?=%)"),
    re.compile(r"(?<=grad norm )(" + NUMBER + r")"),
    re.compile(r"(" + NUMBER + r")(?= (?:s|ms|µs|us)\b)"),
]
# A loss: within LOSS_RTOL relative of the shown value.
APPROXIMATE = re.compile(r"(?<=loss )(" + NUMBER + r")")
LOSS_RTOL = 0.02
ANY_APPROX = "\x02"
DEFAULT_TIMEOUT = 120


class Block:
    def __init__(self, path, line, opts):
        self.path, self.line, self.opts = path, line, opts
        self.commands = []  # [(line number, command text, [expected lines])]


def documents(root):
    docs = [os.path.join(root, "README.md")]
    ddir = os.path.join(root, "docs")
    if os.path.isdir(ddir):
        docs += sorted(os.path.join(ddir, f) for f in os.listdir(ddir) if f.endswith(".md"))
    for d in sorted(os.listdir(root)):
        p = os.path.join(root, d, "README.md")
        if not d.startswith(".") and d != "docs" and os.path.isfile(p):
            docs.append(p)
    return [d for d in docs if os.path.isfile(d)]


def parse_options(text, where, errors):
    opts = {"numbers": False, "fails": False, "timeout": DEFAULT_TIMEOUT}
    for word in (text or "").split():
        if word in ("numbers", "fails"):
            opts[word] = True
        elif re.fullmatch(r"timeout=[1-9][0-9]*", word):
            opts["timeout"] = int(word.split("=")[1])
        else:
            errors.append(f"{where}: unknown docs-test option '{word}' (numbers, fails, timeout=N)")
    return opts


def fenced_blocks(lines):
    """Yield (index of the opening fence, index of the closing fence) of every fenced block."""
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            close = re.compile(r"^\s*" + re.escape(m.group(2)[0]) + "{" + str(len(m.group(2))) + r",}\s*$")
            j = i + 1
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            yield i, j
            i = j + 1
        else:
            i += 1


def parse(path, rel, errors):
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, fences = [], list(fenced_blocks(lines))
    fence_starts = {start for start, _ in fences}
    inside = {k for start, end in fences for k in range(start, end + 1)}
    for k, text in enumerate(lines):  # a marker (outside a block) must sit right before a fence
        if MARKER.match(text) and k not in inside and k + 1 not in fence_starts:
            errors.append(f"{rel}:{k + 1}: docs-test marker not followed by a fenced block")
    for start, end in fences:
        body = lines[start + 1:end]
        lint_mpirun(body, f"{rel}:{start + 1}", errors)
        m = MARKER.match(lines[start - 1]) if start > 0 else None
        if not m:
            continue
        block = Block(rel, start + 1, parse_options(m.group("opts"), f"{rel}:{start}", errors))
        k = 0
        while k < len(body):
            text = body[k].rstrip()
            if text.startswith("$ "):
                first, cmd = start + 2 + k, text[2:]
                while cmd.endswith("\\") and k + 1 < len(body):
                    k += 1
                    cmd = cmd[:-1] + "\n" + body[k].rstrip()
                block.commands.append((first, cmd, []))
            elif text and not block.commands:
                errors.append(f"{rel}:{start + 2 + k}: checked block: output before the first '$ ' command")
            elif block.commands:
                block.commands[-1][2].append(text)
            k += 1
        if not block.commands:
            errors.append(f"{rel}:{start + 1}: checked block has no '$ ' command")
        for first, cmd, _ in block.commands:
            if re.search(r"(^|\s)mpirun\s", cmd) and "--oversubscribe" not in cmd:
                errors.append(f"{rel}:{first}: checked mpirun command without --oversubscribe")
        blocks.append(block)
    return blocks, lines


def lint_mpirun(body, where, errors):
    text = "\n".join(body).replace("\\\n", " ")
    for line in text.split("\n"):
        m = re.search(r"\bmpirun\b.*?-np\s+([0-9]+)", line)
        if m and int(m.group(1)) > 2 and "--oversubscribe" not in line and "--device cuda" not in line:
            errors.append(f"{where}: `{line.strip()[:70]}...`: mpirun -np {m.group(1)} on the CPU needs --oversubscribe")


def as_float(text):
    return float(text.replace(",", ""))


def line_regex(shown, numbers):
    """The regex a real line must match in full, and the shown losses its groups must be near."""
    text = shown.replace("…", ANY_TEXT)
    losses = []
    if not numbers:
        losses = [as_float(n) for n in APPROXIMATE.findall(text)]
        text = APPROXIMATE.sub(ANY_APPROX, text)
    pats = [re.compile(NUMBER)] if numbers else VOLATILE
    for pat in pats:
        text = pat.sub(ANY_NUMBER, text)
    out = re.escape(text)
    for mark, rx in ((ANY_NUMBER, NUMBER), (ANY_TEXT, ".*"), (ANY_APPROX, "(" + NUMBER + ")")):
        out = out.replace(re.escape(mark), rx).replace(mark, rx)
    if numbers:
        out = re.sub(r"(?:\\ )+", " +", out)  # re.escape writes a space as "\ "
    return re.compile(out), losses


def line_matches(rx, losses, real):
    m = rx.fullmatch(real)
    return bool(m) and all(abs(as_float(got) - want) <= LOSS_RTOL * abs(want) for got, want in zip(m.groups(), losses))


def compare(expected, actual, numbers):
    """None if every shown line is found in order, else a message about the first that is not."""
    real = [a.rstrip() for a in actual.split("\n")]
    pos = 0
    for shown in expected:
        if shown.strip() in ("", "...", "…"):
            continue
        rx, losses = line_regex(shown, numbers)
        while pos < len(real) and not line_matches(rx, losses, real[pos]):
            pos += 1
        if pos == len(real):
            return f"this shown line is not in the output (after the lines matched before it):\n    {shown}"
        pos += 1
    return None


def scratch(root, train):
    d = tempfile.mkdtemp(prefix="check_docs.")
    os.makedirs(os.path.join(d, "build"))
    os.symlink(os.path.abspath(train), os.path.join(d, "build", "train"))
    for sub in ("bench", "tests"):
        src = os.path.join(os.path.dirname(os.path.abspath(train)), sub)
        if os.path.isdir(src):
            os.symlink(src, os.path.join(d, "build", sub))
    for sub in ("scripts", "bench", "tests"):
        os.symlink(os.path.join(root, sub), os.path.join(d, sub))
    return d


def run(cmd, cwd, env, timeout):
    start = time.time()
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode("utf-8", "replace"), time.time() - start
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # mpirun and its ranks: the whole session
        out, _ = p.communicate()
        return None, out.decode("utf-8", "replace"), time.time() - start


def check_scripts(root, docs_text, python, verbose, errors):
    named = set()
    for rel, text in docs_text:
        for m in re.finditer(r"(?<![\w./-])((?:scripts|bench|tests)/[\w./-]+\.(?:sh|py))\b", text):
            named.add((m.group(1), rel))
    seen = set()
    for path, rel in sorted(named):
        if path in seen:
            continue
        seen.add(path)
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            errors.append(f"{rel}: names {path}, which does not exist")
            continue
        if path.endswith(".sh"):
            r = subprocess.run(["bash", "-n", full], capture_output=True, text=True)
            if r.returncode:
                errors.append(f"{path}: bash -n: {r.stderr.strip()}")
            elif verbose:
                print(f"  script {path}: exists, bash -n ok")
            continue
        source = open(full, encoding="utf-8").read()
        try:
            compile(source, full, "exec")
        except SyntaxError as e:
            errors.append(f"{path}: does not compile: {e}")
            continue
        if "argparse" not in source:
            if verbose:
                print(f"  script {path}: exists, compiles")
            continue
        r = subprocess.run([python, full, "--help"], capture_output=True, text=True, timeout=60)
        missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", r.stderr)
        if r.returncode and missing:
            print(f"  script {path}: --help skipped: {python} has no module {missing.group(1)}")
        elif r.returncode or "usage" not in r.stdout.lower():
            errors.append(f"{path}: '{python} {path} --help' failed: {(r.stderr or r.stdout).strip()[-300:]}")
        elif verbose:
            print(f"  script {path}: --help ok")


def check_test_names(root, train, docs_text, verbose, errors):
    build = os.path.dirname(os.path.abspath(train))
    ctest = shutil.which("ctest")
    if not ctest or not os.path.isfile(os.path.join(build, "CTestTestfile.cmake")):
        print(f"  ctest names: skipped (no ctest, or no CTestTestfile.cmake in {build})")
    else:
        listing = subprocess.run([ctest, "--test-dir", build, "-N"], capture_output=True, text=True).stdout
        names = re.findall(r"Test +#[0-9]+: (\S+)", listing)
        labels = set(re.findall(r"^  (\S+)$", subprocess.run([ctest, "--test-dir", build, "--print-labels"],
                                                               capture_output=True, text=True).stdout, re.M))
        declared = set()
        cmake_dir = os.path.join(root, "tests", "cmake")
        for f in ["CMakeLists.txt"] + [os.path.join("cmake", c) for c in sorted(os.listdir(cmake_dir))]:
            if f.endswith(".cmake") or f == "CMakeLists.txt":
                source = open(os.path.join(root, "tests", f)).read()
                for group in re.findall(r'LABELS\s+"?([A-Za-z_;${} ]+)', source):
                    labels.update(w for w in re.split(r"[; ]", group) if re.fullmatch(r"[a-z_]+", w))
                declared.update(re.findall(r"add_test\(NAME\s+([A-Za-z0-9_.]+)", source))
        prefixes = {n.split(".")[0] for n in names if "." in n}
        files = re.compile(r"\.(h|cpp|cu|cuh|md|py|sh|cmake|json|jsonl|png|txt|bin|safetensors)$")
        for rel, text in docs_text:
            for m in re.finditer(r"\bctest\b[^\n`]*?\s-([RL])\s+(?:\"([^\"]+)\"|([^\s`]+))", text):
                kind, what = m.group(1), m.group(2) or m.group(3)
                if re.fullmatch(r"[A-Z_]+", what):  # a placeholder: `ctest -R PATTERN`
                    continue
                line = text.count("\n", 0, m.start()) + 1
                if kind == "L" and what not in labels:
                    errors.append(f"{rel}:{line}: `ctest -L {what}`: no such label (labels: {' '.join(sorted(labels))})")
                elif kind == "R" and not any(re.search(what, n) for n in names):
                    errors.append(f"{rel}:{line}: `ctest -R {what}` selects no test of {build}")
            for m in re.finditer(r"`([A-Za-z0-9_]+)\.([A-Za-z0-9_.]+)`", text):
                name = m.group(0).strip("`")
                if m.group(1) in prefixes and not files.search(name) and name not in declared \
                        and not any(n.startswith(name) for n in names):
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{rel}:{line}: `{name}` is not a test of {build}")
        if verbose:
            print(f"  ctest names: {len(names)} tests, {len(labels)} labels checked against the documents")
    unit = os.path.join(build, "tests", "unit_tests")
    if not os.access(unit, os.X_OK):
        print(f"  unit_tests tags: skipped (no {unit})")
        return
    tags = set(re.findall(r"\[[^\]]+\]", subprocess.run([unit, "--list-tags"], capture_output=True, text=True).stdout))
    for rel, text in docs_text:
        for m in re.finditer(r"unit_tests\s+\"((?:\[[^\]]+\])+)\"", text):
            for tag in re.findall(r"\[[^\]]+\]", m.group(1)):
                if tag not in tags:
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{rel}:{line}: unit_tests \"{tag}\": no such Catch2 tag")


def check_flags(root, train, verbose, errors):
    """Every flag `build/train --help` lists is in docs/running.md's table (the page that says
    it has every flag), and every --flag the table's first column names is a flag."""
    r = subprocess.run([train, "--help"], capture_output=True, text=True, timeout=60)
    flags = set(re.findall(r"^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)", r.stdout, re.M))
    if not flags:
        errors.append(f"{train} --help: no flags found in its output")
        return
    text = open(os.path.join(root, "docs", "running.md"), encoding="utf-8").read()
    shown = set(re.findall(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)", text))
    for f in sorted(flags - shown - {"help"}):
        errors.append(f"docs/running.md: --{f} (in `build/train --help`) is not in the flags table")
    named = set()
    for line in text.split("\n"):
        if line.startswith("| `--"):
            named.update(re.findall(r"`--([a-z0-9][a-z0-9-]*)", line.split("|")[1]))
    for f in sorted(named - flags):
        errors.append(f"docs/running.md: the flags table names --{f}, which `build/train --help` does not list")
    if verbose:
        print(f"  flags: {len(flags)} in --help, all in docs/running.md")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="the built train binary (build/train)")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."),
                    help="the repository (default: this script's ..)")
    ap.add_argument("--python", default=sys.executable, help="the python that runs scripts' --help")
    ap.add_argument("--only", action="append", default=[], help="check only this document (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the checked blocks and exit")
    ap.add_argument("--blocks-only", action="store_true",
                    help="run the checked blocks only, not the checks of scripts, test names and flags")
    ap.add_argument("--no-blocks", action="store_true",
                    help="only the checks of scripts, test names and flags (ctest runs each document's blocks apart)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every command's output")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if not os.access(args.train, os.X_OK):
        sys.exit(f"check_docs: error: --train {args.train}: not an executable")

    errors, docs_text, all_blocks = [], [], []
    for path in documents(root):
        rel = os.path.relpath(path, root)
        blocks, lines = parse(path, rel, errors)
        docs_text.append((rel, "\n".join(lines)))
        if (args.only and rel not in args.only) or args.no_blocks:
            continue
        all_blocks.append((rel, blocks))
    if args.list:
        for rel, blocks in all_blocks:
            for b in blocks:
                print(f"{b.path}:{b.line}: {len(b.commands)} command(s) {b.opts}")
        return 0

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", TRAIN=os.path.abspath(args.train))
    start, commands = time.time(), 0
    for rel, blocks in all_blocks:
        if not blocks:
            continue
        work = scratch(root, args.train)
        try:
            for b in blocks:
                for first, cmd, expected in b.commands:
                    commands += 1
                    code, out, secs = run(cmd, work, env, b.opts["timeout"])
                    where = f"{rel}:{first}"
                    print(f"{where}: {cmd.splitlines()[0][:90]}  ({secs:.1f} s)")
                    if args.verbose:
                        print("    | " + "\n    | ".join(out.rstrip().split("\n")))
                    problem = None
                    must_fail = b.opts["fails"] and any(e.strip() for e in expected)
                    if code is None:
                        problem = f"timed out after {b.opts['timeout']} s"
                    elif must_fail and code == 0:
                        problem = "exited 0, but the block is marked 'fails'"
                    elif not must_fail and code != 0:
                        problem = f"exited {code}"
                    problem = problem or compare(expected, out, b.opts["numbers"])
                    if problem:
                        tail = "\n    | ".join(out.rstrip().split("\n")[-25:])
                        errors.append(f"{where}: `{cmd.splitlines()[0]}`: {problem}\n  its output (end):\n    | {tail}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    if not args.blocks_only:
        check_scripts(root, docs_text, args.python, args.verbose, errors)
        check_test_names(root, args.train, docs_text, args.verbose, errors)
        check_flags(root, args.train, args.verbose, errors)
    for e in errors:
        print("FAILED " + e)
    print(f"docs: {commands} command(s) in {sum(len(b) for _, b in all_blocks)} checked block(s), "
          f"{len(errors)} problem(s), {time.time() - start:.0f} s")
    if not errors:
        print("docs ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
