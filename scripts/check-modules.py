#!/usr/bin/env python3
"""Checks the layering of gpumux's modules against src/modules.txt (the one place it is written).

  scripts/check-modules.py [ROOT]        exit 1 and name each offending line, else print a summary
  scripts/check-modules.py --map [ROOT]  print the map that docs/ARCHITECTURE.md must contain

A module may include its own headers and those of the modules src/modules.txt lets it use,
directly or through the arrows of those. Every folder of src/ and include/gpumux/ must be a
module of the file, and docs/ARCHITECTURE.md must hold the map that --map prints, between the
markers `<!-- modules:begin -->` and `<!-- modules:end -->`.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"gpumux/([a-z0-9_]+)/')
BEGIN, END = '<!-- modules:begin -->', '<!-- modules:end -->'


def read_modules(root):
    """[(layer comment, [(module, [uses])])] in file order, and {module: [uses]}."""
    layers, uses = [], {}
    current = None
    with open(os.path.join(root, 'src', 'modules.txt'), encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip('\n')
            m = re.match(r'^# (layer \d+:.*)$', line)
            if m:
                current = (m.group(1), [])
                layers.append(current)
                continue
            if not line.strip() or line.startswith('#'):
                continue
            m = re.match(r'^([a-z0-9_]+):((?:\s+[a-z0-9_]+)*)\s*$', line)
            if not m or current is None:
                sys.exit(f'src/modules.txt:{n}: expected "module: uses..." under a "# layer N:" line')
            name, deps = m.group(1), m.group(2).split()
            if name in uses:
                sys.exit(f'src/modules.txt:{n}: module {name} listed twice')
            for d in deps:
                if d not in uses:
                    sys.exit(f'src/modules.txt:{n}: {name} uses {d}, which is not listed above it')
            uses[name] = deps
            current[1].append((name, deps))
    return layers, uses


def closure(uses):
    allowed = {}
    for name in uses:  # file order: every module's uses are listed before it
        seen = set()
        for d in uses[name]:
            seen.add(d)
            seen |= allowed[d]
        allowed[name] = seen
    return allowed


def render_map(layers):
    lines = ['```']
    for title, modules in layers:
        lines.append(title)
        for name, deps in modules:
            lines.append(f'  {name:<13}-> {", ".join(deps) if deps else "(nothing)"}')
    lines.append('```')
    return '\n'.join(lines)


def main(argv):
    args = [a for a in argv if not a.startswith('--')]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    layers, uses = read_modules(root)
    if '--map' in argv:
        print(render_map(layers))
        return 0
    allowed = closure(uses)
    problems = []
    for top in ('src', os.path.join('include', 'gpumux')):
        for entry in sorted(os.listdir(os.path.join(root, top))):
            path = os.path.join(root, top, entry)
            if os.path.isdir(path) and entry not in uses:
                problems.append(f'{top}/{entry}/: not a module of src/modules.txt')
    checked = 0
    for name in uses:
        for top in (os.path.join('src', name), os.path.join('include', 'gpumux', name)):
            base = os.path.join(root, top)
            if not os.path.isdir(base):
                continue
            for dirpath, _, files in os.walk(base):
                for file in sorted(files):
                    if not file.endswith(('.h', '.cc')):
                        continue
                    rel = os.path.relpath(os.path.join(dirpath, file), root)
                    checked += 1
                    with open(os.path.join(dirpath, file), encoding='utf-8') as f:
                        for n, line in enumerate(f, 1):
                            m = INCLUDE.match(line)
                            if not m or m.group(1) == name:
                                continue
                            target = m.group(1)
                            if target not in allowed[name]:
                                problems.append(
                                    f'{rel}:{n}: {name} includes {target} '
                                    f'("{name}: {" ".join(uses[name])}" in src/modules.txt)')
    doc = os.path.join(root, 'docs', 'ARCHITECTURE.md')
    text = open(doc, encoding='utf-8').read()
    if BEGIN not in text or END not in text:
        problems.append(f'docs/ARCHITECTURE.md: no {BEGIN} ... {END} block')
    else:
        block = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
        if block != render_map(layers):
            problems.append('docs/ARCHITECTURE.md: the module map differs from src/modules.txt; '
                            'replace it with the output of scripts/check-modules.py --map')
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f'check-modules: {len(problems)} problem(s)', file=sys.stderr)
        return 1
    print(f'check-modules: {len(uses)} modules, {checked} files, every include takes an allowed arrow')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
