#!/usr/bin/env python3
"""Checks the sizes the house keeps: no source file over 800 lines and no function over 80 lines,
except composition roots (the cli's Main, Run* and Add*Command functions, which wire a command
together) and
places that say why in a one-line comment.

  scripts/check-sizes.py [ROOT]           exit 1 naming each offender, else a summary
  scripts/check-sizes.py --report [ROOT]  the largest files and functions, exceptions included

A file may exceed its limit with a line `// size: <reason>` in it; a function with a line
`// long function: <reason>` just above its signature. Functions are found by matching braces
in the source with comments and literals removed: a function is a brace block opened by a line
that looks like a signature (a parenthesised parameter list before the brace), outside of
another function's body.
"""
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
DIRS = ('src', 'include', 'apps')
ROOT_FUNCTION = re.compile(r'^(Main|Run[A-Z]\w*|Add\w*Command)$')
# A name, its parameter list, then qualifiers and at most one trailing return type or initializer
# list. Each part starts with its own character, so a long head is matched without backtracking.
# A head holds braces only inside parentheses (a braced argument or default), so they may appear.
SIGNATURE = re.compile(r'([~\w:]+)\s*\([^;]*\)(?:\s|const\b|override\b|final\b|noexcept\b|mutable\b)*'
                       r'(?:(?:->|:)[^;]*)?$')
CONTROL = {'if', 'for', 'while', 'switch', 'catch', 'return', 'else', 'do', 'sizeof', 'decltype'}


def strip(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            open_paren = text.find('(', i)
            delim = text[i + 2:open_paren]
            j = text.find(')' + delim + '"', open_paren)
            j = n if j < 0 else j + len(delim) + 2
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j]))
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum()))):
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (j - i - 1) + (c if j < n else ''))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def functions(path):
    """[(name, first line, lines)] of the functions defined in the file."""
    raw = open(path, encoding='utf-8').read()
    text = strip(raw)
    lines = text.split('\n')
    raw_lines = raw.split('\n')
    found = []
    depth_stack = []  # for each open brace: 'fn' (a function body), 'block' (namespace, class, ...)
    in_function = 0
    signature = []    # the text since the last ';', '{' or '}' outside functions
    parens = 0        # a brace inside parentheses is a braced argument, not a block
    sig_start = 0     # the line the signature began on
    for lineno, line in enumerate(lines):
        for ch in line + '\n':
            if ch == '(':
                parens += 1
            elif ch == ')':
                parens = max(0, parens - 1)
            if ch == ':' and in_function == 0 and ''.join(signature).strip() in ('public', 'private', 'protected'):
                signature = []  # an access specifier, not part of the next signature
                continue
            if parens > 0 or ch not in '{};':
                if in_function == 0:
                    if not signature and not ch.isspace():
                        sig_start = lineno
                    if signature or not ch.isspace():
                        signature.append(ch)
                continue
            if ch == ';':
                signature = []
                continue
            if ch == '{':
                head = ''.join(signature).strip()
                kind = 'block'
                if in_function == 0:
                    m = SIGNATURE.search(head)
                    first = re.search(r'([~\w:]+)\s*\(', head)
                    word = first.group(1).split('::')[-1] if (m and first) else ''
                    if m and word not in CONTROL and not re.search(r'\b(namespace|class|struct|enum|union)\b[^(]*$', head) \
                            and not head.endswith('=') and not re.search(r'=\s*\[', head):
                        kind = 'fn'
                        found.append([word, sig_start + 1, None, raw_lines[sig_start - 1] if sig_start > 0 else ''])
                        in_function += 1
                depth_stack.append(kind)
                signature = []
            elif ch == '}':
                if depth_stack:
                    kind = depth_stack.pop()
                    if kind == 'fn':
                        in_function -= 1
                        if in_function == 0:
                            found[-1][2] = lineno + 1
                signature = []
    return [(name, first, last - first + 1, above) for name, first, last, above in found if last]


def main(argv):
    args = [a for a in argv if not a.startswith('--')]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    report = '--report' in argv
    problems, files, funcs = [], [], []
    for top in DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(('.cc', '.h')):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                text = open(path, encoding='utf-8').read()
                n = text.count('\n')
                excused = re.search(r'^\s*// size: \S', text, re.M) is not None
                files.append((n, rel, excused))
                if n > MAX_FILE_LINES and not excused:
                    problems.append(f'{rel}: {n} lines (at most {MAX_FILE_LINES}, or a '
                                    f'"// size: <reason>" line)')
                for fname, first, length, above in functions(path):
                    is_root = rel.startswith('src/cli/') and ROOT_FUNCTION.match(fname) is not None
                    reason = re.match(r'^\s*// long function: \S', above) is not None
                    funcs.append((length, f'{rel}:{first}', fname, is_root or reason))
                    if length > MAX_FUNCTION_LINES and not (is_root or reason):
                        problems.append(f'{rel}:{first}: function {fname} has {length} lines (at '
                                        f'most {MAX_FUNCTION_LINES}, or a "// long function: '
                                        f'<reason>" line above it)')
    if report:
        print('largest files:')
        for n, rel, excused in sorted(files, reverse=True)[:10]:
            print(f'  {n:6d}  {rel}{"  (excused)" if excused else ""}')
        print('longest functions:')
        for n, where, fname, excused in sorted(funcs, reverse=True)[:15]:
            print(f'  {n:6d}  {fname} ({where}){"  (root or excused)" if excused else ""}')
        over = [f for f in funcs if f[0] > MAX_FUNCTION_LINES]
        print(f'functions over {MAX_FUNCTION_LINES} lines: {len(over)} '
              f'({sum(1 for f in over if f[3])} of them composition roots or excused)')
        return 0
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f'check-sizes: {len(problems)} problem(s)', file=sys.stderr)
        return 1
    print(f'check-sizes: {len(files)} files, {len(funcs)} functions within the limits')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
