#!/usr/bin/env python3
"""tests/scripts/check_source_lines.py ROOT — every FILE:LINE a document shows still points at what it shows.

The docs paste program output that names source lines: --explain's call sites
("at tensor_parallel/tensor_parallel.cpp:46 (forward):  return all_reduced(x, *tp);") and the
flight recorder's ("at train.cpp:249 train_step"). An edit above such a line moves it, and
the document goes on naming a line that no longer holds that call. For each FILE:LINE in
README.md, docs/*.md and the folders' README.md files:

  - FILE exists (from the repository root) and has at least LINE lines;
  - "(func):  text" after it (--explain): the source line starts with that text;
  - "FILE:LINE name" (the flight recorder): the function around LINE (the nearest line above
    it that starts a definition at column 0) is `name`.

gdb transcripts ("../picotron/...:N", docs/stepping.md) are produced by a run and checked
by docs.stepping_transcripts instead. Needs no build; standard library only. Exit status 1
on any problem, each printed as doc:line.
"""
import pathlib
import re
import sys

REF = re.compile(r"(?<![\w./])((?:[\w-]+/)*[\w-]+\.(?:cpp|h|cu|cuh|py|sh)):(\d+)")
QUOTED = re.compile(r"\s+\([\w:~]+\):\s+(\S.*)$")  # " (forward):  return all_reduced(x, *tp);"
NAMED = re.compile(r" ([A-Za-z_]\w*)(?:[ ,;]|$)")  # " train_step [completed]"
DEFINITION = re.compile(r"^[A-Za-z_].*\b([A-Za-z_]\w*)\s*\(")  # "void DataParallel::launch(..."


def squeeze(text):
    return " ".join(text.split())


def enclosing_function(lines, index):
    for i in range(index, -1, -1):
        m = DEFINITION.match(lines[i])
        if m and not lines[i].startswith(("return", "if", "for", "while", "#")):
            return lines[i]
    return ""


def check(root, doc, errors):
    text = doc.read_text(errors="replace").splitlines()
    for number, line in enumerate(text, 1):
        for ref in REF.finditer(line):
            where = f"{doc.relative_to(root)}:{number}"
            path, at = root / ref.group(1), int(ref.group(2))
            if not path.is_file():
                continue  # a path of another project, or a generated file: docs.paths judges paths
            source = path.read_text(errors="replace").splitlines()
            if at < 1 or at > len(source):
                errors.append(f"{where}: {ref.group(1)} has {len(source)} lines, not {at}")
                continue
            rest = line[ref.end():]
            quoted, named = QUOTED.match(rest), NAMED.match(rest)
            if quoted:
                shown, real = squeeze(quoted.group(1)), squeeze(source[at - 1])
                if not (real.startswith(shown) or shown.startswith(real)):
                    errors.append(f"{where}: {ref.group(1)}:{at} is `{real}`, the document shows `{shown}`")
            elif named and named.group(1) not in ("at", "in", "and", "or"):
                around = enclosing_function(source, at - 1)
                if not re.search(r"\b" + re.escape(named.group(1)) + r"\s*\(", around):
                    errors.append(f"{where}: {ref.group(1)}:{at} is not in {named.group(1)}() "
                                  f"(it is in `{squeeze(around)[:80]}`)")


def main(root):
    root = pathlib.Path(root).resolve()
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted(root.glob("*/README.md")),
            *sorted(root.glob("runtime/*/README.md"))]
    errors = []
    for doc in docs:
        if doc.is_file():
            check(root, doc, errors)
    for e in errors:
        print(e)
    print(f"{'FAILED' if errors else 'ok'}: source lines named in {len(docs)} documents")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
