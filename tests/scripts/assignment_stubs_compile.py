#!/usr/bin/env python3
"""tests/scripts/assignment_stubs_compile.py BUILD_DIR — every file a course copy stubs compiles on its own.

`scripts/assignment make` replaces each task's body with the stub (scripts/assignment:
STUB_INCLUDES and stub()). The grader then compiles each file as its own translation unit,
where only its target's precompiled header (<torch/torch.h>, for the targets that have one)
comes before it; the project's own fast (unity) build hides a missing include, because
another file of the same batch has it. So here each file that holds a region is stubbed
(every task of it at once, as `make all` does) and compiled alone with -fsyntax-only, with
the flags that BUILD_DIR's compile_commands.json gives its target (its precompiled header
included). A file that does not compile fails the test with g++'s first error. About a
minute on 2 cores. (That each file includes what the stub needs itself, precompiled header
or not, is scripts/assignment check's rule: STUB_INCLUDES.)

A file that compiled alone once is not compiled again while nothing it reads changed, as
ccache would (issue 53: 80 s of every run): its verdict is kept in
~/.cache/picotron/stubs_compile/ (XDG_CACHE_HOME) under a key of its stubbed text and its
command (the checkout's and the build's folders written as <root> and <build>, so a fresh
clone elsewhere finds it), beside the list of every file g++ read for it (-MD): the
checkout's and the build's files by their content, the compiler's and LibTorch's by size
and time. Only a success is kept; a failure is compiled again every time.
"""
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from importlib.machinery import SourceFileLoader
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
tool = SourceFileLoader("assignment", str(ROOT / "scripts" / "assignment")).load_module()


def commands_by_source(build):
    """source path (absolute) -> its compile command's words, through unity files too."""
    db = json.loads((build / "compile_commands.json").read_text())
    out = {}
    for entry in db:
        words = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        src = Path(entry["directory"], entry["file"]).resolve()
        out[src] = (words, entry["directory"])
        if "/Unity/" in src.as_posix() and src.is_file():  # a CMake unity file includes its sources
            for inc in re.findall(r'^#include "([^"]+)"', src.read_text(), re.M):
                out[Path(inc).resolve()] = (words, entry["directory"])
    return out


def alone(words):
    """A compile command without its output and input (its precompiled header kept, as the
    grader's build compiles the file): -fsyntax-only."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if w in ("-MD", "-MMD"):
            continue
        out.append(w)
    return out + ["-fsyntax-only"]


CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "picotron" / "stubs_compile"


def sha1(data):
    return hashlib.sha1(data).hexdigest()


class Verdicts:
    """Successes kept by what the compile read (see the module's docstring)."""

    def __init__(self, build, tmp):
        self.places = [(str(ROOT), "<root>"), (str(build), "<build>"), (tmp, "<tmp>")]

    def portable(self, text):
        for path, name in self.places:
            text = text.replace(path, name)
        return text

    def key(self, cmd, stubbed):
        compiler = Path(cmd[0]) if os.path.isabs(cmd[0]) else Path(shutil.which(cmd[0]) or cmd[0])
        st = compiler.resolve().stat()
        # g++ -MD does not list what the precompiled header holds (<torch/torch.h>, from the
        # LibTorch folder the command names with its version): its text goes in the key.
        pch = [Path(w).read_text() for k, w in zip(cmd, cmd[1:]) if k == "-include" and Path(w).is_file()]
        return sha1("\0".join([self.portable(" ".join(cmd)), Path(stubbed).read_text(), *pch,
                                f"{compiler.resolve()} {st.st_size} {st.st_mtime_ns}"]).encode())

    def fingerprint(self, path):
        p = Path(path)
        if p.suffix == ".gch":
            return "pch"  # made from cmake_pch.hxx and the headers listed beside it
        try:
            if self.portable(str(p)) != str(p):  # the checkout's, the build's, the stub's own
                return sha1(p.read_bytes())
            st = p.stat()
            return f"{st.st_size} {st.st_mtime_ns}"
        except OSError:
            return "missing"

    def known(self, key):
        try:
            deps = json.loads((CACHE / f"{key}.json").read_text())
        except (OSError, ValueError):
            return False
        places = {name: path for path, name in self.places}
        def real(p):
            for name, path in places.items():
                if p.startswith(name):
                    return path + p[len(name):]
            return p
        return all(self.fingerprint(real(p)) == f for p, f in deps.items())

    def remember(self, key, depfile):
        words = Path(depfile).read_text().replace("\\\n", " ").split(":", 1)[1].split()
        deps = {self.portable(str(Path(w))): self.fingerprint(w) for w in words}
        CACHE.mkdir(parents=True, exist_ok=True)
        part = CACHE / f"{key}.json.{os.getpid()}"
        part.write_text(json.dumps(deps, indent=0))
        part.replace(CACHE / f"{key}.json")


def main():
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "compile_commands.json").is_file():
        sys.exit("usage: tests/scripts/assignment_stubs_compile.py BUILD_DIR (a configured build with compile_commands.json)")
    build = Path(sys.argv[1]).resolve()
    table = tool.read_table(ROOT)
    found = tool.all_regions(ROOT)
    files = sorted({p for places in found.values() for p, _, _ in places})
    commands = commands_by_source(build)
    problems, jobs = [], []
    with tempfile.TemporaryDirectory(prefix="picotron-stubs-") as tmp:
        for rel in files:
            if (ROOT / rel).resolve() not in commands:
                if rel.endswith(".cu"):
                    continue  # (no .cu file holds a task today; nvcc is not asked here)
                problems.append(f"{rel}: not in {build}/compile_commands.json: is it built?")
                continue
            stubbed = Path(tmp) / rel
            stubbed.parent.mkdir(parents=True, exist_ok=True)
            stubbed.write_text((ROOT / rel).read_text())
            tool.rewrite(stubbed, set(found), lambda task, k, indent: [tool.stub(task, table, indent)])
            words, directory = commands[(ROOT / rel).resolve()]
            jobs.append((rel, alone(words) + [str(stubbed)], directory))

        verdicts = Verdicts(build, tmp)

        def compile_one(job):
            rel, cmd, directory = job
            key = verdicts.key(cmd, cmd[-1])
            if verdicts.known(key):
                return rel, 0, "", True
            depfile = f"{cmd[-1]}.d"
            proc = subprocess.run(cmd[:-1] + ["-MD", "-MF", depfile, cmd[-1]], cwd=directory,
                                  capture_output=True, text=True)
            if proc.returncode == 0:
                verdicts.remember(key, depfile)
            return rel, proc.returncode, proc.stderr, False

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for rel, rc, err, kept in pool.map(compile_one, jobs):
                if rc == 0:
                    print(f"compiles alone, stubbed: {rel}" +
                          (" (as before: the same text, command and includes)" if kept else ""))
                else:
                    first = next((l for l in err.splitlines() if "error" in l), err.strip()[-300:])
                    problems.append(f"{rel}: does not compile alone once stubbed: {first.replace(tmp + '/', '')}")
    if problems:
        print("\n".join(problems))
        print("FAILED")
        return 1
    print(f"STUBS COMPILE: {len(jobs)} files, each alone with every task of it stubbed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
