#!/usr/bin/env python3
"""code_map.py - a structural report of the code as markdown tables, to compare two revisions.

  1. source files (.h .cpp .cu .cuh) and lines per top-level folder (runtime/ also per room), each
     row's share of all source lines outside tests/ bench/ scripts/ docs/;
  2. per technique, the files a student opens: its own, their quoted #includes transitively, and
     each header's sibling .cpp;
  3. data members of each *Settings / *Config struct; functions taking a TrainConfig&, per folder;
  4. the libraries of CMakeLists.txt (and cmake/*.cmake) and what each links;
  5. the 15 longest functions, how many exceed 60 and 100 lines, the files over 300 lines.

  python3 scripts/code_map.py                         # the working tree (or --rev WORKTREE)
  python3 scripts/code_map.py --rev ec6cc56           # a revision (git ls-tree, git cat-file)
  python3 scripts/code_map.py --compare ec6cc56 HEAD  # "before" and "after" columns side by side
The C++ is read roughly (comments, literals and preprocessor lines blanked, braces counted).
"""
import argparse, bisect, os, posixpath, re, subprocess, sys
from collections import OrderedDict

SRC_EXT = ('.h', '.cpp', '.cu', '.cuh')
TOP = ['picotron', 'data_parallel', 'tensor_parallel', 'pipeline_parallel', 'context_parallel',
       'expert_parallel', 'zero', 'kernels', 'runtime']
TECHNIQUES = TOP[1:8]
NOT_CODE = ('tests/', 'bench/', 'scripts/', 'docs/')
WORKTREE = 'WORKTREE'

# ------------------------------------------------------------------ reading a revision
def git(*args, data=None):
    r = subprocess.run(('git',) + args, input=data, capture_output=True)
    return r.stdout if r.returncode == 0 else sys.exit('git %s: %s' % (args[0], r.stderr.decode().strip()))

def wanted(path):
    return path.endswith(SRC_EXT) or path == 'CMakeLists.txt' or re.match(r'cmake/.*\.cmake$', path)

def read_files(rev):
    """{path: text} of the source and CMake files at rev (or in the working tree)."""
    if rev == WORKTREE:
        paths = git('ls-files', '-co', '--exclude-standard', '-z').decode().split('\0')
        return {p: open(p, encoding='utf-8', errors='replace').read()
                for p in paths if wanted(p) and os.path.isfile(p)}
    rows = [l.split('\t', 1) for l in git('ls-tree', '-r', '-z', rev).decode().split('\0') if l]
    blobs = [(meta.split()[2], p) for meta, p in rows if meta.split()[1] == 'blob' and wanted(p)]
    raw = git('cat-file', '--batch', data=''.join(sha + '\n' for sha, _ in blobs).encode())
    out, pos = {}, 0
    for _, path in blobs:  # each answer: "<sha> blob <size>\n<content>\n", in order
        nl = raw.index(b'\n', pos)
        size = int(raw[pos:nl].split()[2])
        out[path] = raw[nl + 1:nl + 1 + size].decode('utf-8', 'replace')
        pos = nl + 2 + size
    return out

# ------------------------------------------------------------------ rough C++ lexing
TOKENS = re.compile(r'//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|(?<![\w.])\d[\w\'.]*'
                    r'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
PREPROC = re.compile(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', re.M)
ATTRIBUTE = re.compile(r'\b(?:__launch_bounds__|alignas|__attribute__|__declspec)\s*\((?:[^()]|\([^()]*\))*\)')

blank = lambda text: re.sub(r'[^\n]', ' ', text)

def strip_code(text):
    """Comments, string and char literals, preprocessor lines and attributes blanked (lines kept)."""
    def literal(m):
        t = m.group(0)
        if t[0].isdigit():
            return t  # a number: 1'000'000 holds no char literal
        if t[0] in '"\'R':
            return '""' + blank(t[2:]) if t[0] == 'R' else t[0] + blank(t[1:-1]) + t[-1]
        return blank(t)  # a comment
    text = PREPROC.sub(lambda m: blank(m.group(0)), TOKENS.sub(literal, text))
    return ATTRIBUTE.sub(lambda m: blank(m.group(0)), text)

nlines = lambda text: text.count('\n')  # as wc -l counts

def match_brace(s, open_pos):
    depth = 0
    for m in re.compile(r'[{}]').finditer(s, open_pos):
        depth += 1 if m.group() == '{' else -1
        if depth == 0:
            return m.start()
    return len(s)

class Code:
    """One revision: its files, the source outside tests/ bench/ scripts/ docs/, stripped."""
    def __init__(self, rev):
        self.files = read_files(rev)
        self.src = {p: t for p, t in self.files.items() if p.endswith(SRC_EXT)}
        self.code = {p: t for p, t in self.src.items() if not p.startswith(NOT_CODE)}
        self.stripped = {p: strip_code(t) for p, t in self.code.items()}

# ------------------------------------------------------------------ 1. lines per folder
def group_of(path):
    """The section-1 rows a file counts in."""
    parts = path.split('/')
    if path == 'train.cpp' or parts[0] not in TOP:
        return ['train.cpp' if path == 'train.cpp' else '(other)']
    return [parts[0] + '/'] + (['runtime/' + parts[1]] if parts[0] == 'runtime' and len(parts) > 2 else [])

def lines_per_folder(c):
    rows = OrderedDict((k, [0, 0]) for k in [t + '/' for t in TOP] + ['train.cpp'])
    for p in sorted(c.code):
        for k in group_of(p):
            rows.setdefault(k, [0, 0])
            rows[k][0] += 1
            rows[k][1] += nlines(c.code[p])
    total = sum(nlines(t) for t in c.code.values())
    order = sorted(rows, key=lambda k: (TOP + ['train.cpp', '(other)']).index(k.split('/')[0]))
    out = OrderedDict((k, (f, n, '%.1f%%' % (100.0 * n / total))) for k in order for f, n in [rows[k]] if f)
    out['total (excl. tests/ bench/ scripts/ docs/)'] = (len(c.code), total, '100%')
    return [('1. Lines per folder', ['folder'], ['files', 'lines', 'share'], out)]

# ------------------------------------------------------------------ 2. files a student opens
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)

def resolve(c, path, inc):
    """A quoted include: from the repository root first, then from the including file's folder."""
    for cand in (posixpath.normpath(inc), posixpath.normpath(posixpath.join(posixpath.dirname(path), inc))):
        if cand in c.src:
            return cand
    return None  # LibTorch, the standard library, ...

def closure(c, start):
    seen, todo = set(), list(start)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += [r for r in (resolve(c, p, i) for i in INCLUDE.findall(c.src[p])) if r]
            todo += [p[:-2] + '.cpp'] if p.endswith('.h') and p[:-2] + '.cpp' in c.src else []
    return seen

def student_files(c):
    out = OrderedDict()
    for t in TECHNIQUES:
        files = closure(c, [p for p in c.src if posixpath.dirname(p) == t])
        dirs = [posixpath.dirname(p) or '.' for p in sorted(files, key=lambda p: (posixpath.dirname(p) != t, p))]
        folders = OrderedDict((d, dirs.count(d)) for d in dirs)
        out[t] = (len(files), sum(nlines(c.src[p]) for p in files),
                  ', '.join('%s(%d)' % kv for kv in folders.items()))
    return [('2. Files a student opens per technique (own files + quoted includes, transitively; '
             'a .h brings its .cpp)', ['technique'], ['files', 'lines', 'folders reached (files)'], out)]

# ------------------------------------------------------------------ 3. fields each piece receives
STRUCT = re.compile(r'\bstruct\s+(\w+)\s*(?:final\s*)?(?::\s*([^{;]*?))?\s*\{')
NOT_FIELD = re.compile(r'^(using|friend|static_assert|typedef|static|enum|struct|class|union|template)\b')

untemplate = lambda s: re.sub(r'<[^<>]*>', '', re.sub(r'<[^<>]*>', '', s))  # template arguments

def statements(body):
    """A struct body's own statements; inner braces kept as '{}'; member function bodies dropped."""
    out, cur, depth = [], [], 0
    for t in re.findall(r'[{};]|[^{};]+', body):
        if t in '{}':
            depth += 1 if t == '{' else -1
            if depth == (1 if t == '{' else 0):
                cur.append(t)
            head = untemplate(''.join(cur))
            if t == '}' and depth == 0 and '(' in head.split('{')[0] and '=' not in head.split('(')[0]:
                cur = []  # f(...) { ... }
        elif depth == 0 and t == ';':
            out.append(re.sub(r'^\s*(public|private|protected)\s*:', '', ''.join(cur)).strip())
            cur = []
        elif depth == 0:
            cur.append(t)
    return out

def count_fields(body):
    """Data members: statements that are not declarations of functions, types or statics;
    'int dp = 1, tp = 1;' counts 2."""
    n = 0
    for s in statements(body):
        flat = untemplate(s)
        if not s or NOT_FIELD.match(s) or ('(' in flat and not re.search(r'[={]', flat.split('(')[0])):
            continue
        n += re.sub(r'\{[^{}]*\}|\([^()]*\)', '', flat).count(',') + 1
    return n

def config_structs(c):
    out = OrderedDict()
    for p, s in sorted(c.stripped.items()):
        for m in STRUCT.finditer(s) if p.endswith('.h') else ():
            if m.group(1).endswith(('Settings', 'Config')):
                body = s[m.end():match_brace(s, m.end() - 1)]
                key = m.group(1) if m.group(1) not in out else '%s (%s)' % (m.group(1), p)
                out[key] = (p, ' '.join((m.group(2) or '-').split()), count_fields(body))
    return ('3a. Data members of each *Settings / *Config struct', ['struct'], ['file', 'bases', 'fields'], out)

TC_PARAM = re.compile(r'\bTrainConfig\s*&\s*\w*\s*(?=[,)=])')
NOT_NAMES = {'void', 'bool', 'int', 'auto', 'if', 'for', 'while', 'return', 'sizeof', 'decltype'}

def enclosing_call(s, pos):
    """The name before the '(' around pos ('(lambda)@offset' after ']'); None outside parentheses."""
    depth = 0
    for i in range(pos - 1, -1, -1):
        if s[i] in ';{}' and depth == 0:
            return None
        depth += {')': 1, '(': -1}.get(s[i], 0)
        if depth < 0:
            m = re.search(r'([~\w:]+)\s*$', s[:i])
            return m.group(1).split('::')[-1] if m else '(lambda)@%d' % i
    return None

def trainconfig_takers(c):
    rows = OrderedDict((k, [set(), 0]) for k in list(lines_per_folder(c)[0][3])[:-1] + ['total'])
    for p, s in sorted(c.stripped.items()):
        for m in TC_PARAM.finditer(s):
            name = enclosing_call(s, m.start())
            for key in (group_of(p) + ['total']) if name and name not in NOT_NAMES else ():
                rows[key][0].add(p + name if '@' in name else name)
                rows[key][1] += 1
    out = OrderedDict((k, (len(v[0]), v[1])) for k, v in rows.items() if k != '(other)' or v[1])
    return ('3b. Functions taking a TrainConfig& parameter (distinct names per row; signatures: '
            'declarations and definitions)', ['folder'], ['functions', 'signatures'], out)

fields = lambda c: [config_structs(c), trainconfig_takers(c)]

# ------------------------------------------------------------------ 4. libraries
LINK_KW = {'PUBLIC', 'PRIVATE', 'INTERFACE', 'LINK_PUBLIC', 'LINK_PRIVATE', 'LINK_INTERFACE_LIBRARIES'}
KINDS = ('STATIC', 'SHARED', 'INTERFACE', 'OBJECT', 'IMPORTED', 'MODULE')

def cmake_commands(text):
    """(command, [arguments]) of each CMake command, comments dropped (quotes respected)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|#[^\n]*', lambda m: m.group(0) if m.group(0)[0] == '"' else '', text)
    for m in re.finditer(r'^\s*(\w+)\s*\(', text, re.M):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth, i = depth + {'(': 1, ')': -1}.get(text[i], 0), i + 1
        yield m.group(1).lower(), re.findall(r'"[^"]*"|\S+', text[m.end():i - 1])

def library_functions(cmds):
    """CMake functions that make a library named by their first argument, e.g. picotron_layer(NAME
    SOURCES ... BELOW ...): {function: {'words': its keywords, 'links': the keyword its links follow,
    'kind': STATIC..., 'list': the variable it appends the name to}}."""
    out, fn = {}, None
    for name, args in cmds:
        if name == 'function' and len(args) > 1:
            fn, arg, kw = {'name': args[0], 'words': set(), 'links': None, 'list': None}, args[1], ''
        elif name == 'endfunction':
            fn = None
        elif fn and name == 'cmake_parse_arguments':
            kw = args[0] + '_'
            fn['words'] = set(';'.join(a.strip('"') for a in args[1:4]).split(';'))
        elif fn and args[:1] == ['${%s}' % arg] and name == 'add_library':
            out[fn['name']], fn['kind'] = fn, ' '.join(a for a in args[1:3] if a in KINDS) or 'STATIC'
        elif fn and args[:1] == ['${%s}' % arg] and name == 'target_link_libraries':
            fn['links'] = next((a[2 + len(kw):-1] for a in args if a.startswith('${' + kw)), fn['links'])
        elif fn and name == 'set' and '${%s}' % arg in args and 'PARENT_SCOPE' in args:
            fn['list'] = args[0]
    return out

def libraries(c):
    cmds = [cmd for p in sorted(c.files) if not p.endswith(SRC_EXT) for cmd in cmake_commands(c.files[p])]
    wrappers, var, libs, depth = library_functions(cmds), {}, OrderedDict(), 0

    def add(lib, kind, links=()):
        entry = libs.setdefault(lib, [kind, []])
        for a in links:  # a variable that holds target names is expanded
            vals = var.get(a[2:-1], []) if a.startswith('${') else []
            ok = vals and all(re.match(r'^[\w:-]+$', v) for v in vals)
            entry[1] += [v for v in (vals if ok else [a]) if v not in LINK_KW and v not in entry[1]]
    for name, args in cmds:
        depth += {'function': 1, 'endfunction': -1}.get(name, 0)
        if depth or not args:
            continue
        if name == 'set':
            var[args[0]] = [a for a in args[1:] if a not in ('PARENT_SCOPE', 'CACHE', '""')]
        elif name == 'list' and args[0] == 'APPEND' and len(args) > 1:
            var[args[1]] = var.get(args[1], []) + args[2:]
        elif name in ('add_library', 'add_executable') and '${' not in args[0]:
            kind = ' '.join(a for a in args[1:3] if a in KINDS)
            add(args[0], kind or ('executable' if name == 'add_executable' else 'STATIC'))
        elif name == 'target_link_libraries' and args[0] in libs:
            add(args[0], libs[args[0]][0], args[1:])
        elif name in wrappers:
            w, on, links = wrappers[name], False, []
            for a in args[1:]:
                on = a == w['links'] if a in w['words'] else on
                links += [a] if on and a != w['links'] else []
            add(args[0], '%s (%s)' % (w['kind'], name), links)
            if w['list']:  # set(LIST ${LIST} ${name} PARENT_SCOPE)
                var[w['list']] = var.get(w['list'], []) + [args[0]]
    out = OrderedDict((k, (kind, ' '.join(links) or '-')) for k, (kind, links) in libs.items())
    return [('4. Libraries and what each links (variables expanded where they hold target names)',
             ['library'], ['kind', 'links'], out)]

# ------------------------------------------------------------------ 5. longest functions
NAME = re.compile(r'([\w:]*operator\s*[^\w\s(]+|[~\w:]+(?:\s*<[^()<>]*>)?)\s*$')  # before the '('
FN_END = re.compile(r'\)\s*(?:(?:const|override|final|noexcept|mutable|volatile|&&?)\s*)*(?:->\s*[\w:<>,\s*&]+)?$')

def call_paren(h):
    """The '(' of a signature: the first one outside template arguments."""
    depth = 0
    for i, ch in enumerate(h):
        depth += {'<': 1, '>': -1 if depth else 0}.get(ch, 0)
        if ch == '(' and depth == 0:
            return i
    return h.find('(')

def classify(head):
    """What a '{' at the top level opens, from the text since the last ';', '{' or '}'."""
    h = head.strip()
    if re.search(r'\bnamespace\b|\bextern\s*"\s*"$', h):
        return 'ns'
    if '(' in h and (FN_END.search(h) or (re.search(r'\)\s*:[^:]', h) and h[-1] in ')}')):
        return 'fn'  # f(...) const {  |  -> T {  |  X::X(...) : a_(1), b_{2} {
    if re.search(r'(^|[\s>])(struct|class|union)\s+\w[^=(]*$', h):
        return 'cls'  # walked like a namespace: inline member functions count too
    return 'blk'  # an initializer, an enum, a member initializer's {...}

def functions(path, s):
    """(path, line, name, lines) of each function body outside other functions."""
    starts = [0] + [m.end() for m in re.finditer('\n', s)]
    line = lambda pos: bisect.bisect_right(starts, pos)
    out, stack, head = [], [], 0
    for m in re.finditer(r'[{};]', s):
        ch, p = m.group(), m.start()
        top = all(e[0] in ('ns', 'cls') for e in stack)
        if ch == '{':
            kind = classify(s[head:p]) if top else 'inner'
            paren = head + call_paren(s[head:p]) if kind == 'fn' else -1
            name = NAME.search(s[head:paren]) if paren >= 0 else None
            stack.append((kind, name.group(1) if name else '(lambda)', paren))
            head = p + 1 if kind in ('ns', 'cls') else head
        elif ch == '}' and stack:
            kind, name, at = stack.pop()
            if kind == 'fn':
                out.append((path, line(at), name, line(p) - line(at) + 1))
            if kind != 'blk' and all(e[0] in ('ns', 'cls') for e in stack):
                head = p + 1  # (after a member initializer's {...} the header goes on)
        elif top:
            head = p + 1
    return out

def long_functions(c):
    fns = sorted((f for p, s in c.stripped.items() for f in functions(p, s)), key=lambda f: (-f[3], f[0], f[1]))
    top = OrderedDict((i + 1, ('%s:%d' % f[:2], f[2], f[3])) for i, f in enumerate(fns[:15]))
    counts = OrderedDict([('functions found', (len(fns),)), ('over 60 lines', (sum(f[3] > 60 for f in fns),)),
                          ('over 100 lines', (sum(f[3] > 100 for f in fns),))])
    big = OrderedDict((p, (nlines(t),)) for p, t in sorted(c.code.items(), key=lambda kv: -nlines(kv[1]))
                      if nlines(t) > 300)
    return [('5a. Longest functions (lines from the name to the closing brace)', ['#'],
             ['where', 'function', 'lines'], top),
            ('5b. Function counts', ['functions'], ['count'], counts),
            ('5c. Files over 300 lines', ['file'], ['lines'], big)]

SECTIONS = [lines_per_folder, student_files, fields, libraries, long_functions]

# ------------------------------------------------------------------ printing
def print_table(title, keys, vals, rows):
    print('### %s\n\n| %s |\n|%s' % (title, ' | '.join(keys + vals), '---|' * (len(keys) + len(vals))))
    for k, v in rows.items():
        print('| ' + ' | '.join(str(x).replace('|', '\\|') for x in (k,) + tuple(v)) + ' |')
    print()

def merge_keys(a, b):
    """b's rows in order, a's own rows slotted in after the row they followed in a."""
    out, prev = list(b), -1
    for k in a:
        if k in out:
            prev = out.index(k)
        else:
            prev += 1
            out.insert(prev, k)
    return out

def report(rev):
    code = Code(rev)
    print('## Code map of %s\n' % rev)
    for table in [table for section in SECTIONS for table in section(code)]:
        print_table(*table)

def compare(rev_a, rev_b):
    a, b = Code(rev_a), Code(rev_b)
    print('## Code map: before = %s, after = %s\n' % (rev_a, rev_b))
    for section in SECTIONS:
        for (title, keys, vals, ra), (_, _, _, rb) in zip(section(a), section(b)):
            none, rows = ('-',) * len(vals), OrderedDict()
            for k in merge_keys(list(ra), list(rb)):
                rows[k] = tuple(x for pair in zip(ra.get(k, none), rb.get(k, none)) for x in pair)
            print_table(title, keys, [v + s for v in vals for s in (' (before)', ' (after)')], rows)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--rev', default=WORKTREE, help='a git revision (default: the working tree)')
    ap.add_argument('--compare', nargs=2, metavar=('REV_A', 'REV_B'), help='before and after columns')
    args = ap.parse_args()
    os.chdir(os.path.dirname(os.path.abspath(__file__)))  # this checkout, wherever it is run from
    os.chdir(git('rev-parse', '--show-toplevel').decode().strip())
    compare(*args.compare) if args.compare else report(args.rev)

if __name__ == '__main__':
    main()
