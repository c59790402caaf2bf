#!/usr/bin/env python3
"""Every example in every `gpumux ... --help` runs as written, and every help fits in 100 columns.

Usage: help_examples.py GPUMUX SOURCE_DIR

The examples are the lines '  gpumux ...' of a help's "Examples" block (a line ending in a
backslash continues on the next). Each runs with sh in a scratch folder holding the files the
examples name: stand-ins where a trace of ../shared is missing (jobs.csv, submit_times.txt,
openb_pod_list_gpushare40.csv, analysis_allo_discrete.csv, replay-fgd-default-seed42/,
~/.kube/config), jobs.yaml and records of 'gpumux submit' (run1.jsonl, gpumux.jsonl,
iadeep.jsonl), and the project's sample inputs (examples/: nodes.json, gpus.csv); PATH leads to
this gpumux, and the host settings (GPUMUX_STATE_DIR, GPUMUX_DEV_DIR, GPUMUX_RUNTIME) point into
the scratch folder. The daemons'
examples (extender, device-plugin, coordinator, webhook) run with --check, which checks the options and the files they
name and exits without a cluster, a kubelet or a GPU; submit's run with --dry-run, which creates
nothing; call's talk to a coordinator started on a socket in the scratch folder. Each example must exit 0.

Also: `gpumux oci-runtime --runtime-help` and `--version` reach the real runtime (a stand-in that
records its arguments) with the runtime's own arguments, and `--help` does not.
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

WIDTH = 100
DAEMONS = ('extender', 'device-plugin', 'coordinator', 'webhook')
# Commands that would reach a cluster: their examples run with this flag added at the end (the
# last command of a pipeline decides), so that they need no cluster.
OFFLINE_FLAG = {'extender': '--check', 'device-plugin': '--check', 'coordinator': '--check',
                'webhook': '--check',
                'submit': '--dry-run'}
# Subcommands whose help must show examples (a parsing slip must not make this test vacuous).
WITH_EXAMPLES = ('simulate', 'jobgen', 'extender', 'device-plugin', 'oci-runtime', 'gpus',
                 'coordinator', 'profile', 'inspect', 'submit', 'report', 'webhook')
TIMEOUT_S = 300

failures = []


def fail(what):
    failures.append(what)
    print('FAIL: ' + what, flush=True)


def run(argv, cwd, env, timeout=TIMEOUT_S):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def subcommands(help_text):
    names, listing = [], False
    for line in help_text.splitlines():
        if line == 'Subcommands:':
            listing = True
        elif listing and re.match(r'^  [a-z]', line):
            names.append(line.split()[0])
        elif listing and not line:
            break
    return names


def examples(help_text):
    """The example command lines of one help."""
    out, inside, pending = [], False, ''
    for line in help_text.splitlines():
        if line.startswith('Examples'):
            inside = True
            continue
        if not inside:
            continue
        if not line.strip():
            break
        if pending:
            pending += ' ' + line.strip()
        elif line.startswith('  gpumux '):
            pending = line.strip()
        elif line.strip().startswith('-'):
            # Options on a line of their own: an example broken by the wrapping, not by a
            # backslash. It would run without them.
            fail(f'an example continues without a backslash: {line.strip()}')
        else:
            continue  # a description line
        if pending.endswith('\\'):
            pending = pending[:-1].rstrip()
        else:
            out.append(pending)
            pending = ''
    return out


def write(path, text):
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def start_api_server(source):
    """A read-only stand-in for the API server on loopback, for `gpumux inspect`: the sample
    nodes (examples/extender/nodes.json) and one pending pod, team-a/train-7."""
    with open(os.path.join(source, 'examples', 'extender', 'nodes.json')) as f:
        nodes = json.load(f)['items']
    pod = {'apiVersion': 'v1', 'kind': 'Pod',
           'metadata': {'name': 'train-7', 'namespace': 'team-a', 'uid': 'u-7'},
           'spec': {'containers': [{'name': 'main', 'resources': {
               'limits': {'gpumux.io/gpu-mem': '8', 'gpumux.io/gpu-milli': '500'}}}]},
           'status': {'phase': 'Pending'}}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            path = self.path.split('?')[0]
            if path == '/api/v1/nodes':
                items = nodes
            elif path == '/api/v1/pods' or path == '/api/v1/namespaces/team-a/pods':
                items = [pod]
            elif re.match(r'^/api/v1/namespaces/[^/]+/pods$', path):
                items = []
            else:
                self.send_error(404)
                return
            body = json.dumps({'kind': 'List', 'apiVersion': 'v1',
                               'metadata': {'resourceVersion': '1'}, 'items': items}).encode()
            self.send_response(200)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def fixtures(d, gpumux, source, env, api_url):
    """The files the examples name, in the scratch folder `d`."""
    shared = os.path.join(source, '..', 'shared', 'traces', 'alibaba-gpu-v2023')
    data = os.path.join(source, 'data')

    def from_shared(name, rel, fallback):
        src = os.path.join(shared, rel)
        shutil.copy(src if os.path.isfile(src) else fallback, os.path.join(d, name))

    from_shared('openb_pod_list_gpushare40.csv', 'openb_pod_list_gpushare40.csv',
                os.path.join(data, 'openb_pod_list_default.csv'))
    from_shared('analysis_allo_discrete.csv', 'fgd-expected-results/analysis_allo_discrete.csv',
                os.path.join(data, 'fgd_expected_alloc_default.csv'))

    replay = os.path.join(d, 'replay-fgd-default-seed42')
    shared_replay = os.path.join(shared, 'replay-fgd-default-seed42')
    if os.path.isdir(shared_replay):
        shutil.copytree(shared_replay, replay)
    else:
        # The same layout from gpumux itself: its own placements as the arrival order, and a
        # rank for every node of the embedded list (those placed keep the rank they were given).
        os.makedirs(replay)
        r = run([gpumux, 'simulate', '--policy', 'fgd', '--no-report', '-q', '--placements',
                 os.path.join(replay, 'arrival.csv')], d, env)
        if r.returncode != 0:
            raise RuntimeError('cannot make a replay folder: ' + r.stderr)
        with open(os.path.join(replay, 'arrival.csv')) as f:
            prefixed = {row.split(',')[3] for row in f.read().splitlines()[1:] if row.split(',')[3]}
        ranks = {p.split('-', 1)[1]: int(p.split('-', 1)[0]) for p in prefixed}
        with open(os.path.join(data, 'openb_node_list_gpu_node.csv')) as f:
            names = [row.split(',')[0] for row in f.read().splitlines()[1:] if row]
        free = iter(sorted(set(range(len(names))) - set(ranks.values())))
        rows = ['node_prefixed,node,prefix']
        for n in names:
            rank = ranks[n] if n in ranks else next(free)
            rows.append(f'{rank:04d}-{n},{n},{rank}')
        write(os.path.join(replay, 'nodes.csv'), '\n'.join(rows) + '\n')

    r = run([gpumux, 'jobgen', '--count', '50', '-o', 'jobs.csv'], d, env)
    if r.returncode != 0:
        raise RuntimeError('jobgen: ' + r.stderr)
    write(os.path.join(d, 'submit_times.txt'), ''.join(f'{4 * i}\n' for i in range(1000)))
    # Manifests for 'gpumux submit', and records as 'gpumux submit --record' writes them for
    # 'gpumux report --from-cluster' (a run of two jobs, one of which failed).
    r = run([gpumux, 'jobgen', '--format', 'k8s', '--count', '5', '-o', 'jobs.yaml'], d, env)
    if r.returncode != 0:
        raise RuntimeError('jobgen --format k8s: ' + r.stderr)
    for name, label in (('run1.jsonl', 'gpumux'), ('gpumux.jsonl', 'gpumux'),
                        ('iadeep.jsonl', 'iadeep')):
        write(os.path.join(d, name), '\n'.join([
            '{"event":"run","t":0,"version":1,"run":"r","label":"%s","namespace":"default",'
            '"time_scale":0.01,"started_at":"2026-11-26T10:00:00.000Z","source":"jobs.yaml",'
            '"objects":2}' % label,
            '{"event":"submit","t":0.1,"job":"j0001","kind":"Pod","name":"j0001","class":"vgg16"}',
            '{"event":"submit","t":0.5,"job":"j0002","kind":"Pod","name":"j0002","class":"lstm"}',
            '{"event":"start","t":1,"job":"j0001","pod":"j0001","node":"n1","gpus":["n1/0"]}',
            '{"event":"start","t":2,"job":"j0002","pod":"j0002","node":"n1","gpus":["n1/0"]}',
            '{"event":"finish","t":30,"job":"j0001","pod":"j0001","phase":"Succeeded"}',
            '{"event":"finish","t":40,"job":"j0002","pod":"j0002","phase":"Failed",'
            '"reason":"Error"}',
            '{"event":"end","t":40,"reason":"finished"}']) + '\n')
    # The sample inputs the README's try-its use (examples/), under the names the helps give.
    shutil.copy(os.path.join(source, 'examples', 'gpus.csv'), os.path.join(d, 'gpus.csv'))
    shutil.copy(os.path.join(source, 'examples', 'extender', 'nodes.json'),
                os.path.join(d, 'nodes.json'))
    # The stand-in API server: the daemons' --check reads the kubeconfig and never connects;
    # `gpumux inspect` lists its nodes and pods.
    write(os.path.join(d, 'home', '.kube', 'config'),
          'apiVersion: v1\nkind: Config\n'
          f'clusters:\n- name: c\n  cluster:\n    server: {api_url}\n'
          'users:\n- name: u\n  user:\n    token: t\n'
          'contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n'
          'current-context: x\n')


def main():
    gpumux, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix='gpumux-help-examples-') as d:
        bin_dir = os.path.join(d, 'bin')
        os.makedirs(bin_dir)
        os.symlink(gpumux, os.path.join(bin_dir, 'gpumux'))
        runtime_log = os.path.join(d, 'runtime-args')
        runtime = os.path.join(bin_dir, 'runtime')
        write(runtime, f'#!/bin/sh\nprintf "%s\\n" "$*" >> {runtime_log}\n')
        os.chmod(runtime, 0o755)
        os.makedirs(os.path.join(d, 'dev'))
        env = {k: v for k, v in os.environ.items()
               if k not in ('KUBECONFIG', 'GPUMUX_GPUS_FILE',
                            'GPUMUX_DEVICE_PLUGIN_DIR')}
        env.update({'PATH': bin_dir + os.pathsep + env.get('PATH', '/usr/bin:/bin'),
                    'HOME': os.path.join(d, 'home'),
                    'GPUMUX_STATE_DIR': os.path.join(d, 'state'),
                    'GPUMUX_DEV_DIR': os.path.join(d, 'dev'),
                    'GPUMUX_RUNTIME': runtime,
                    'NODE_NAME': 'gpu-1'})  # as the DaemonSet sets it
        api = start_api_server(source)
        fixtures(d, gpumux, source, env, f'http://127.0.0.1:{api.server_address[1]}')

        top = run([gpumux, '--help'], d, env).stdout
        helps = {'': top}
        for sub in subcommands(top):
            r = run([gpumux, sub, '--help'], d, env)
            if r.returncode != 0:
                fail(f'gpumux {sub} --help: exit {r.returncode}: {r.stderr}')
            helps[sub] = r.stdout
        for sub in WITH_EXAMPLES:
            if sub not in helps:
                fail(f'gpumux --help does not list {sub}')

        # A coordinator for `gpumux call`'s examples, on a socket in the scratch folder.
        sock = os.path.join(d, 'coordinator.sock')
        coordinator = subprocess.Popen(
            [gpumux, 'coordinator', '--backend', 'none', '--socket', sock, '--listen',
             '127.0.0.1:0', '--store', 'file://' + os.path.join(d, 'coordinator.json')],
            cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        count = 0
        for sub, text in helps.items():
            for n, line in enumerate(text.splitlines(), 1):
                if len(line) > WIDTH:
                    fail(f'gpumux {sub} --help line {n} has {len(line)} columns: {line}')
            found = examples(text)
            if sub in WITH_EXAMPLES and not found:
                fail(f'gpumux {sub} --help shows no example')
            for example in found:
                command = example
                last = example.split('|')[-1].split()
                if len(last) > 1 and last[0] == 'gpumux' and last[1] in OFFLINE_FLAG:
                    command += ' ' + OFFLINE_FLAG[last[1]]
                if sub == 'call':
                    command = command.replace('/run/gpumux/coordinator.sock', sock)
                try:
                    r = run(['sh', '-c', command], d, env)
                except subprocess.TimeoutExpired:
                    fail(f'{command}: still running after {TIMEOUT_S} s')
                    continue
                count += 1
                status = 'ok' if r.returncode == 0 else f'exit {r.returncode}'
                print(f'{status}: {command}', flush=True)
                if r.returncode != 0:
                    fail(f'{command}: exit {r.returncode}\n{r.stderr[-2000:]}')
        coordinator.terminate()
        coordinator.wait(timeout=30)
        if count < 15:
            fail(f'only {count} examples found in the helps')

        # The runtime wrapper: gpumux's own help, and the runtime's through --runtime-help.
        if os.path.exists(runtime_log):
            os.remove(runtime_log)
        r = run([gpumux, 'oci-runtime', '--help'], d, env)
        if r.returncode != 0 or 'GPUMUX_RUNTIME' not in r.stdout or os.path.exists(runtime_log):
            fail('gpumux oci-runtime --help is not gpumux\'s own help, or ran the runtime')
        for args, expected in ((['--runtime-help'], '--help'), (['--version'], '--version'),
                               (['--root', '/run/x', 'state', 'c1'], '--root /run/x state c1'),
                               (['create', '--help'], 'create --help')):
            if os.path.exists(runtime_log):
                os.remove(runtime_log)
            r = run([gpumux, 'oci-runtime'] + args, d, env)
            got = open(runtime_log).read().strip() if os.path.exists(runtime_log) else None
            if r.returncode != 0 or got != expected:
                fail(f'gpumux oci-runtime {" ".join(args)}: the runtime got {got!r}, expected '
                     f'{expected!r} (exit {r.returncode}: {r.stderr})')
        print(f'{count} examples run', flush=True)
    if failures:
        print(f'{len(failures)} failures', flush=True)
        sys.exit(1)


if __name__ == '__main__':
    main()
