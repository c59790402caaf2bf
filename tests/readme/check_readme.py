#!/usr/bin/env python3
"""Runs the commands of README.md and deploy/README.md as a new user would, so they cannot go stale.

    tests/readme/check_readme.py BUILD_DIR [MARKDOWN...]      (ctest: readme.<file>)

Every fenced block of shell commands (info string `sh`) and every transcript (a block whose first
line starts with `$ `) must be preceded by one annotation line that says how it is checked:

    <!-- readme-test: run [writes=DIR,DIR] [expect=REGEX] [daemon=SECONDS] [timeout=SECONDS] -->
        The block runs as one bash script (`set -euo pipefail`) from a sandbox that looks like a
        fresh clone with the project built (`build/` is BUILD_DIR; `../shared` is the project's
        shared folder when there is one). It must exit 0 (or, with daemon=N, still be running after
        N seconds: a daemon); its output must match REGEX (Python re.search, DOTALL) when given.
        A block that is not a daemon must stop what it starts: a process of its group still
        running when it ends is a failure (then stopped by process group). Whatever it creates must lie under
        the folders named by its `writes=`: a README command never leaves files anywhere the README
        does not name, never changes what an earlier command wrote elsewhere (one report
        overwriting another), and never writes into the source tree.
    <!-- readme-test: transcript [mask=REGEX] [stream=stdout|both] [source=SCRIPT] -->
        Lines `$ CMD  # comment` are run (the comment is not part of the command); the lines that
        follow, up to the next `$ `, are the output the README shows, which must be what the
        command prints (stdout, or stdout+stderr with stream=both), line by line, after collapsing
        runs of blanks and replacing ISO timestamps and matches of `mask` by placeholders.
        SCRIPT (a path in the repository) is sourced before each command, in the sandbox: the
        stand-in for what a command needs that a test machine lacks (a GPU host, runc).
    <!-- readme-test: not-run reason="..." -->
        Needs what a test cannot have (a Kubernetes cluster, a registry, root). The reason is
        required, and every repository path the block names must exist.

A block without an annotation, an unknown kind or a reason-less not-run is a failure: a README
cannot add an unchecked command.
"""
import difflib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), '..', '..'))
ANNOTATION = re.compile(r'^<!--\s*readme-test:\s*(.*?)\s*-->\s*$')
ISO_TIME = re.compile(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z')
# A path into the repository: a file with an extension, or a folder written with its slash
# (`deploy/gpumux-scheduler` is a kubectl resource, not a path).
REPO_PATH = re.compile(r'(?<![\w./-])((?:deploy|data|examples|scripts|tests|docs|bench|fuzz|proto)'
                       r'(?:/[\w@-]+)*(?:/[\w@-]+\.[\w.]+|/))(?![\w/-])')
# Build folders, reports and scratch that a sandbox never takes from the real checkout.
NOT_COPIED = re.compile(r'^(build.*|gpumux-.*|\..*)$')


class Block:
    def __init__(self, path, line, info, lines, annotation):
        self.path, self.line, self.info, self.lines, self.annotation = path, line, info, lines, annotation

    def where(self):
        return f'{os.path.relpath(self.path, ROOT)}:{self.line}'


def blocks_of(path):
    """Fenced blocks with their annotation (None when the line before the fence has none)."""
    out = []
    text = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(text):
        m = re.match(r'^(\s*)```(\S*)\s*$', text[i])
        if not m:
            i += 1
            continue
        indent, info = len(m.group(1)), m.group(2)
        j = i + 1
        while j < len(text) and not re.match(r'^\s*```\s*$', text[j]):
            j += 1
        body = [l[indent:] if l[:indent].strip() == '' else l for l in text[i + 1:j]]
        prev = text[i - 1] if i > 0 else ''
        a = ANNOTATION.match(prev.strip())
        out.append(Block(path, i + 1, info, body, a.group(1) if a else None))
        i = j + 1
    return out


def needs_annotation(b):
    return b.info in ('sh', 'bash', 'shell', 'console') or (
        b.info == '' and b.lines and b.lines[0].startswith('$ '))


def parse_annotation(text):
    words = shlex.split(text)
    if not words:
        raise ValueError('empty annotation')
    kind, opts = words[0], {}
    for w in words[1:]:
        if '=' not in w:
            raise ValueError(f'option {w!r} is not KEY=VALUE')
        k, v = w.split('=', 1)
        opts[k] = v
    allowed = {'run': {'writes', 'expect', 'daemon', 'timeout'},
               'transcript': {'mask', 'stream', 'source', 'writes', 'timeout'},
               'not-run': {'reason'}}
    if kind not in allowed:
        raise ValueError(f'unknown kind {kind!r} (run, transcript or not-run)')
    unknown = set(opts) - allowed[kind]
    if unknown:
        raise ValueError(f'{kind}: unknown option(s) {", ".join(sorted(unknown))}')
    if kind == 'not-run' and not opts.get('reason'):
        raise ValueError('not-run needs reason="..."')
    return kind, opts


class Sandbox:
    """A folder that looks like a built fresh clone: the tracked top-level entries are links to
    the real ones (read-only use), build/ is the build under test, ../shared is the real one."""

    def __init__(self, build_dir):
        self.top = tempfile.mkdtemp(prefix='gpumux-readme-')
        self.repo = os.path.join(self.top, 'gpumux')
        os.mkdir(self.repo)
        for name in os.listdir(ROOT):
            if not NOT_COPIED.match(name):
                os.symlink(os.path.join(ROOT, name), os.path.join(self.repo, name))
        os.symlink(os.path.realpath(build_dir), os.path.join(self.repo, 'build'))
        shared = os.path.realpath(os.path.join(ROOT, '..', 'shared'))
        if os.path.isdir(shared):
            os.symlink(shared, os.path.join(self.top, 'shared'))

    def files(self):
        """Every file in the sandbox (links to the checkout are not followed) with its mtime."""
        out = {}
        for d, _, names in os.walk(self.repo):
            for n in names:
                path = os.path.join(d, n)
                out[os.path.relpath(path, self.repo)] = os.lstat(path).st_mtime_ns
        return out

    def close(self):
        shutil.rmtree(self.top, ignore_errors=True)


def run_script(sandbox, script, timeout, daemon=None):
    """Runs bash SCRIPT in the sandbox in its own process group; returns (status, output, alive).
    Output goes through a file (a background daemon keeps a pipe open forever)."""
    log = os.path.join(sandbox.top, 'output.log')
    env = dict(os.environ, PATH=os.path.join(sandbox.repo, 'build') + os.pathsep + os.environ['PATH'])
    env.pop('GPUMUX_STATE_DIR', None)
    with open(log, 'w') as f:
        p = subprocess.Popen(['bash', '-c', 'set -euo pipefail\n' + script], cwd=sandbox.repo,
                             stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env)
        alive, left = False, []
        try:
            status = p.wait(timeout=daemon if daemon is not None else timeout)
            if daemon is None:
                # What the block signalled last may take a moment to go (a busy machine).
                for _ in range(20):
                    left = group_members(p.pid)
                    if not left:
                        break
                    time.sleep(0.1)
        except subprocess.TimeoutExpired:
            status, alive = None, True
        finally:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                time.sleep(0.2)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    output = open(log, encoding='utf-8', errors='replace').read()
    if left:
        # A block that ends with its background jobs still running would leave them running in
        # the user's shell too (found: training jobs at 22 % CPU half an hour later).
        output += '\nreadme-test: still running when the block ended: ' + '; '.join(left)
        status = status if status else 'left processes running'
    return status, output, alive


def group_members(pgid):
    """'PID COMMAND' of the processes still in process group PGID (zombies aside)."""
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open(f'/proc/{pid}/stat') as f:
                stat = f.read()
            fields = stat[stat.rindex(')') + 2:].split()
            if int(fields[2]) == pgid and fields[0] != 'Z':
                with open(f'/proc/{pid}/cmdline', 'rb') as f:
                    cmd = f.read().replace(b'\0', b' ').decode(errors='replace').strip()
                found.append(f'{pid} {cmd[:80]}')
        except (OSError, ValueError, IndexError):
            continue
    return found


def normalize(line, mask):
    line = ISO_TIME.sub('<time>', line)
    if mask:
        line = re.sub(mask, '<*>', line)
    return ' '.join(line.split())


def transcript_steps(lines):
    steps = []
    for l in lines:
        if l.startswith('$ '):
            steps.append((l[2:].split('  #')[0].strip(), []))
        elif steps:
            steps[-1][1].append(l)
        else:
            raise ValueError('a transcript starts with "$ COMMAND"')
    return steps


def check_block(b, sandbox, problems):
    kind, opts = parse_annotation(b.annotation)
    text = '\n'.join(b.lines)
    if kind == 'not-run':
        for p in REPO_PATH.findall(text):
            if not os.path.exists(os.path.join(ROOT, p.rstrip('.'))):
                problems.append(f'{b.where()}: names {p}, which is not in the repository')
        return 'not run: ' + opts['reason']
    writes = {w for w in opts.get('writes', '').split(',') if w}
    before = sandbox.files()
    timeout = float(opts.get('timeout', 300))
    if kind == 'run':
        daemon = float(opts['daemon']) if 'daemon' in opts else None
        status, output, alive = run_script(sandbox, text, timeout, daemon)
        if daemon is not None and not alive:
            problems.append(f'{b.where()}: a daemon, but it ended (status {status}) within '
                            f'{daemon:g} s:\n{output[-3000:]}')
        elif daemon is None and status != 0:
            why = (f'ran past {timeout:g} s' if alive else
                   status if isinstance(status, str) else f'exit status {status}')
            problems.append(f'{b.where()}: {why}:\n{output[-3000:]}')
        if 'expect' in opts and not re.search(opts['expect'], output, re.DOTALL):
            problems.append(f'{b.where()}: output does not match {opts["expect"]!r}:\n{output[-3000:]}')
    else:
        for cmd, expected in transcript_steps(b.lines):
            # The README shows what a command prints, whatever its exit status.
            quiet = '' if opts.get('stream') == 'both' else ' 2>/dev/null'
            script = '( ' + cmd + ' )' + quiet + ' || true'
            if 'source' in opts:
                script = 'source ' + shlex.quote(opts['source']) + '\n' + script
            _, output, _ = run_script(sandbox, script, timeout)
            want = [normalize(l, opts.get('mask')) for l in expected if l.strip()]
            got = [normalize(l, opts.get('mask')) for l in output.split('\n') if l.strip()]
            if want != got:
                diff = '\n'.join(difflib.unified_diff(want, got, 'README', 'actual', lineterm=''))
                problems.append(f'{b.where()}: `{cmd}` prints other than the README shows '
                                f'(after normalizing):\n{diff}')
    after = sandbox.files()
    stray = sorted(p for p, t in after.items()
                   if before.get(p) != t and p.split(os.sep)[0] not in writes)
    if stray:
        shown = ', '.join(stray[:8]) + (f' and {len(stray) - 8} more' if len(stray) > 8 else '')
        problems.append(f'{b.where()}: wrote {shown}, outside the folders its `writes=` names '
                        f'({", ".join(sorted(writes)) or "none"}): a README command writes only '
                        'where the README says, and never over what another command wrote')
    return kind


def git_status():
    r = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=all'], cwd=ROOT,
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    docs = sys.argv[2:] or ['README.md']
    if not os.access(os.path.join(build, 'gpumux'), os.X_OK):
        sys.exit(f'check_readme: {build}/gpumux is not built')
    problems, before = [], git_status()
    for doc in docs:
        path = os.path.join(ROOT, doc)
        sandbox = Sandbox(build)
        try:
            for b in blocks_of(path):
                if b.annotation is None:
                    if needs_annotation(b):
                        problems.append(f'{b.where()}: a command block without a '
                                        '<!-- readme-test: ... --> line before it')
                    continue
                try:
                    started = time.monotonic()
                    kind = check_block(b, sandbox, problems)
                    print(f'{b.where()}: {kind} ({time.monotonic() - started:.1f} s)', flush=True)
                except ValueError as e:
                    problems.append(f'{b.where()}: bad annotation: {e}')
        finally:
            sandbox.close()
    after = git_status()
    if before is not None and after != before:
        problems.append('the source tree changed while the README commands ran:\n' + after)
    for p in problems:
        print('FAIL ' + p, file=sys.stderr)
    print(f'{len(problems)} problem(s) in {", ".join(docs)}')
    sys.exit(1 if problems else 0)


if __name__ == '__main__':
    main()
