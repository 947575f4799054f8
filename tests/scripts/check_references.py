#!/usr/bin/env python3
"""tests/scripts/check_references.py [ROOT] — every cross-reference names a heading that exists.

    python3 tests/scripts/check_references.py [ROOT] [--list]

ctest runs it as `docs.references` (label `docs`, tests/cmake/docs_tests.cmake); it needs no
build, only the sources, and takes well under a second. Standard library only.

A reference to a section, wherever it is written (README.md, docs/, the technique READMEs,
comments in .h/.cpp/.cu/.py/.sh/.cmake files, scripts/, and strings the program prints):

    [text](docs/testing.md#the-equivalence-contract)     a link with an anchor
    [text](#choosing-a-layout)                           an anchor in the same page
    docs/memory.md, "Where the memory goes"              a file, then the section in quotes
    docs/memory.md ("Where the memory goes")
    [kernels/README.md](../../kernels/README.md), "Measured"
    README.md's "Layout"
    docs/planner.md § Predicted against measured on a 2-core CPU   (to the end of the clause)
    docs/testing.md#the-equivalence-contract             a bare file#anchor, in a comment
    "With the other techniques" below (or above)         a section of the same page

The file must exist in the repository (looked up beside the file that names it, then from
the repository root); an anchor must be the GitHub anchor of one of its headings (lower
case, punctuation dropped, spaces to hyphens, "-1", "-2" for repeats); a quoted section must
be one of its headings, or the start of one up to a ":", " (" or " —" ("Offload" names
"## Offload (`--zero-offload`, GPU runs)"). Headings inside fenced code blocks do not count.
References to other projects' documents (the Playbook's "Context Parallelism") are not
checked: they name no file of this repository.

Exit status: 0 when every reference resolves, 1 otherwise (each printed with file:line).
"""
import os
import re
import sys

SKIP_DIRS = {"data", ".git", ".github"}  # data/docs_corpus.txt is a frozen copy of old docs
SOURCE = re.compile(r"\.(md|h|cpp|cu|cuh|py|sh|cmake|txt)$")
PATH = r"(?:\.\./|\./)*(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+\.md"
QUOTED = r"[\"“](?P<section>[\w`][^\"”]{0,99})[\"”]"  # may wrap onto the next line
# between a file and its quoted section: ", " | " (" | "'s " | a line break inside a comment
SEP = r"(?=[`),'’ \t\n(])(?:`?\)?(?:,|'s|’s)?[ \t]*(?:\n[ \t]*(?://|#)?[ \t]*)?\(?)"
LINK = re.compile(r"\]\((?P<target>[^)\s#]*)(?:#(?P<anchor>[^)\s]+))?\)")
AFTER_LINK = re.compile(r"(?:,|'s|’s)?[ \t]*(?:\n[ \t]*)?\(?" + QUOTED)
PLAIN = re.compile(r"(?<![\w/.\[$-])`?(?P<path>" + PATH + r")" + SEP + QUOTED)
SECTION_SIGN = re.compile(r"(?<![\w/.\[$-])`?(?P<path>" + PATH + r")`?\)?,?\s*§\s*(?:" + QUOTED +
                          r"|(?P<bare>[^,;.()\n]{1,80}?)(?=\s\s|[,;.()\n]|$))")
BARE_ANCHOR = re.compile(r"(?<![\w/.\[$-])(?P<path>" + PATH + r")#(?P<anchor>[A-Za-z0-9_-]+)")
SAME_PAGE = re.compile(r"(?:see |\()?" + QUOTED + r" (?P<where>below|above)")
PLACEHOLDER_FILES = {"file.md", "FILE.md", "PAGE.md"}
PLACEHOLDER_SECTIONS = {"Section"}
FENCE = re.compile(r"^\s*(```+|~~~+)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def source_files(root):
    for dp, dn, fn in os.walk(root):
        rel_dir = os.path.relpath(dp, root)
        dn[:] = sorted(d for d in dn if not d.startswith(".") and not d.startswith("build")
                       and not (rel_dir == "." and d in SKIP_DIRS))
        for f in sorted(fn):
            if SOURCE.search(f) or (os.path.basename(dp) == "scripts" and "." not in f):
                yield os.path.join(dp, f)


def plain_heading(text):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [t](u) -> t
    return text.replace("`", "").replace("**", "").strip()


def slug(text):
    """GitHub's anchor of a heading: lower case, drop punctuation, a hyphen per space."""
    s = plain_heading(text).lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


_headings = {}


def headings(path):
    """(heading texts, anchors) of a Markdown file, outside fenced code blocks."""
    if path not in _headings:
        texts, anchors, seen, fence = [], set(), {}, None
        for line in open(path, encoding="utf-8").read().split("\n"):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence):
                    fence = None
                continue
            if fence is not None:
                continue
            h = HEADING.match(line)
            if not h:
                continue
            texts.append(plain_heading(h.group(2)))
            a = slug(h.group(2))
            n = seen.get(a, 0)
            seen[a] = n + 1
            anchors.add(a if n == 0 else f"{a}-{n}")
        _headings[path] = (texts, anchors)
    return _headings[path]


def section_matches(section, texts):
    want = re.sub(r"\s*\n\s*(?://+|#+)?\s*", " ", plain_heading(section)).casefold()  # a wrapped quote
    for t in texts:
        t = t.casefold()
        if t == want or (t.startswith(want) and re.match(r"\s*(:|\(|—|-\s)", t[len(want):])):
            return True
    return False


def resolve(root, here, path):
    for base in (os.path.dirname(here), root):
        full = os.path.normpath(os.path.join(base, path))
        if os.path.isfile(full) and full.startswith(root):
            return full
    return None


def check_file(root, path, problems, found):
    rel = os.path.relpath(path, root)
    raw = open(path, encoding="utf-8", errors="replace").read()
    text = raw.replace('\\"', '"')  # a C++ or shell string: "(docs/planner.md, \"Every pairing, tested\")"
    is_md = path.endswith(".md")

    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    def check(pos, target_rel, target, section=None, anchor=None):
        if os.path.basename(target_rel) in PLACEHOLDER_FILES or section in PLACEHOLDER_SECTIONS:
            return  # the form itself, written out (docs/testing.md, this file)
        where = f"{rel}:{line_of(pos)}"
        section = re.sub(r"\s*\n\s*(?://+|#+)?\s*", " ", section) if section else section
        what = f"{target_rel}" + (f', "{section}"' if section else "") + (f"#{anchor}" if anchor else "")
        found.append(f"{where}: {what}")
        if target is None:
            problems.append(f"{where}: {what}: no file {target_rel} in the repository")
            return
        texts, anchors = headings(target)
        if section is not None and not section_matches(section, texts):
            problems.append(f"{where}: {what}: {os.path.relpath(target, root)} has no heading "
                            f"\"{section}\" (its headings: {'; '.join(texts)})")
        if anchor is not None and anchor not in anchors:
            problems.append(f"{where}: {what}: {os.path.relpath(target, root)} has no heading with "
                            f"the anchor #{anchor} (its anchors: {' '.join(sorted(anchors))})")

    seen = set()  # (position of the file name) already checked by an earlier form
    if is_md:
        for m in LINK.finditer(text):
            target_rel, anchor = m.group("target"), m.group("anchor")
            if re.match(r"[a-z]+:", target_rel) or not (target_rel.endswith(".md") or (not target_rel and anchor)):
                continue
            target = path if not target_rel else resolve(root, path, target_rel)
            after = AFTER_LINK.match(text, m.end())
            section = after.group("section") if after and target_rel else None
            if anchor or section:
                check(m.start(), target_rel or rel, target, section, anchor)
            seen.add(m.start("target"))
        for m in SAME_PAGE.finditer(text):
            check(m.start(), rel, path, m.group("section"))
    for m in PLAIN.finditer(text):
        if m.start("path") in seen:
            continue
        seen.add(m.start("path"))
        check(m.start(), m.group("path"), resolve(root, path, m.group("path")), m.group("section"))
    for m in SECTION_SIGN.finditer(text):
        if m.start("path") in seen:
            continue
        seen.add(m.start("path"))
        section = (m.group("section") or m.group("bare")).strip()
        check(m.start(), m.group("path"), resolve(root, path, m.group("path")), section)
    for m in BARE_ANCHOR.finditer(text):
        if m.start("path") in seen:
            continue
        check(m.start(), m.group("path"), resolve(root, path, m.group("path")), anchor=m.group("anchor"))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    problems, found = [], []
    for path in source_files(root):
        check_file(root, path, problems, found)
    if "--list" in sys.argv:
        print("\n".join(found))
    for p in problems:
        print("FAILED " + p)
    print(f"references: {len(found)} cross-reference(s) to a section, {len(problems)} broken")
    if not problems:
        print("references ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
