#!/usr/bin/env python3
"""tests/scripts/check_stepping.py ROOT [--rewrite] [--only NAME] — docs/stepping.md's debugger
sessions are produced, not typed (ctest: docs.stepping_transcripts).

Every ```sh block of docs/stepping.md that runs `scripts/debug.sh ... --ex CMD ...` (gdb in
batch mode) is followed by a plain ``` block: what that session printed. This script runs
each session on the debug build and keeps, from gdb's output, the lines a reader looks at:

    Thread 1 "train" hit Breakpoint 1, picotron::...   where it stopped, with the arguments
    $N = ...                                           each print
    x = [...] ...                                      each `tensor x ...` (scripts/picotron_gdb.py)
    Value returned is $N = ...                         what `finish` returned
    #N  picotron::... at file.cpp:LINE                 backtrace frames
    LINE<tab>source                                    where `next` stopped

Each session runs with --no-calls added (gdb may not call into the program, as on a machine
where such calls fail): what the file shows must not need a call.

(sources are named as build-debug/ sees them, ../file.cpp, whether the debug info names
them /picotron-src/file.cpp, by absolute path or relative to build-debug/; pointers and references'
addresses become `...`: they differ from run to run; the values
do not: same seed, one thread. Another CPU may round a float's last printed digit the
other way, so floats agree within 1.1e-3 relative, one unit in the last of 4 digits;
everything else exactly.) Without --rewrite the block must equal those lines, or the test
fails naming the first line that drifted; --rewrite writes them into the file instead.
Needs build-debug/train (scripts/build.sh --debug --target train): SKIPPED without it.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

KEEP = re.compile(r'^(Thread \d+ "[^"]*" hit Breakpoint|\$\d+ = |Value returned is |#\d+ |\d+\t|[\w.]+ = \[)')


def normalise(line):
    line = re.sub(r'=0x[0-9a-f]+', '=...', line)             # this=0x55d4... -> this=...
    line = re.sub(r'@0x[0-9a-f]+', '@...', line)             # a reference: (T &) @0x55d4...
    line = re.sub(r'^(#\d+ +)0x[0-9a-f]+ in', r'\g<1>0x... in', line)
    return line.rstrip()


FLOAT = re.compile(r'-?\d+\.\d*(?:e[-+]?\d+)?|-?\d+e[-+]?\d+')


def same(got, want):
    """The same line, floats within 1.1e-3 relative (a tensor's elements print 4 digits)."""
    if got == want:
        return True
    g, w = FLOAT.split(got), FLOAT.split(want)
    if g != w:  # the text between the floats, integers (line numbers, sizes) included
        return False
    for a, b in zip(map(float, FLOAT.findall(got)), map(float, FLOAT.findall(want))):
        if abs(a - b) > 1.1e-3 * max(abs(a), abs(b)):
            return False
    return True


def sessions(lines):
    """(name, command, first, last) for each batch session: the transcript is lines[first:last]."""
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == '```sh' and lines[i + 1].startswith('scripts/debug.sh') and '--ex' in lines[i + 1]:
            command = lines[i + 1].strip()
            stop = re.search(r'--stop (\S+)', command)
            rank = re.search(r'--rank (\d+)', command)
            name = (stop.group(1) if stop else 'session') + (f'_rank{rank.group(1)}' if rank else '')
            j = i + 3  # past the ```sh block
            while j < len(lines) and lines[j].strip() != '```':
                if lines[j].startswith('```sh') or lines[j].startswith('#'):
                    sys.exit(f'docs/stepping.md:{i + 2}: the session "{command}" has no ``` block with its output after it')
                j += 1
            k = j + 1
            while k < len(lines) and lines[k].strip() != '```':
                k += 1
            found.append((name, command, j + 1, k))
            i = k
        i += 1
    return found


def run(root, command):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    argv = shlex.split(command)
    argv.insert(1, '--no-calls')  # scripts/debug.sh --no-calls ...
    p = subprocess.run(argv, cwd=root, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f'FAILED: "{command}" exited with {p.returncode}:\n' + '\n'.join(p.stdout.splitlines()[-20:]))
    # The debug build names its sources /picotron-src/... (CMakeLists.txt: any checkout, one
    # name); a build made before that, by absolute path (unity) or relative to build-debug/
    # (file at a time): the same file each way, written as build-debug/ sees it.
    prefixes = [os.path.realpath(root) + '/', '/picotron-src/']
    lines = [l for l in p.stdout.splitlines() if KEEP.match(l)]
    for prefix in prefixes:
        lines = [l.replace(prefix, '../') for l in lines]
    return [normalise(l) for l in lines]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('root')
    ap.add_argument('--rewrite', action='store_true', help='write what the sessions print into the file')
    ap.add_argument('--only', help='only the sessions whose name (the --stop file, _rankR) contains this')
    a = ap.parse_args()
    if not os.access(os.path.join(a.root, 'build-debug', 'train'), os.X_OK):
        print('SKIPPED: no debug build (scripts/build.sh --debug --target train)')
        return
    path = os.path.join(a.root, 'docs', 'stepping.md')
    lines = open(path).read().split('\n')
    drifted = 0
    # From the last session up, so that rewriting one block does not move the others.
    for name, command, first, last in reversed(sessions(lines)):
        if a.only and a.only not in name:
            continue
        got, want = run(a.root, command), [l.rstrip() for l in lines[first:last]]
        if len(got) == len(want) and all(same(g, w) for g, w in zip(got, want)):
            print(f'ok: {name}: {len(got)} lines as docs/stepping.md shows them')
            continue
        if a.rewrite:
            lines[first:last] = got
            print(f'rewritten: {name}: {len(got)} lines')
            continue
        drifted += 1
        for n, (g, w) in enumerate(zip(got + [''] * len(want), want + [''] * len(got))):
            if not same(g, w):
                print(f'DRIFTED: {name}: docs/stepping.md:{first + n + 1}\n  the file: {w}\n  the run:  {g}')
                break
    if a.rewrite:
        open(path, 'w').write('\n'.join(lines))
    elif drifted:
        print(f'FAILED: {drifted} session(s) print something else now; '
              f'python3 tests/scripts/check_stepping.py . --rewrite updates the file (then read the prose around them)')
        sys.exit(1)
    else:
        print('TRANSCRIPTS OK')


if __name__ == '__main__':
    main()
