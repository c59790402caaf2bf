#!/usr/bin/env python3
"""Regression tests for the inputs that once crashed, hung or misled gpumux.

Each folder beside this file is a reproducer copied from ../shared/reliability-repros (its
original run.sh and the sanitizer output it produced are kept for reference; README.orig.md
says what each one did). This script replays one of them against a gpumux binary and asserts
what a user must see instead: a clear error naming the input, exit status 1 or 2 for commands,
HTTP 400 and a live daemon for the extender, an unchanged ledger when a container is refused,
and no sanitizer report (the same tests run in the ASan+UBSan build).

    check.py NAME GPUMUX     run one reproducer; exit 0 when it behaves
    check.py --list          the reproducers this script knows
"""
import http.client
import inspect
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZER_MARKS = ('runtime error:', 'AddressSanitizer', 'LeakSanitizer', 'UndefinedBehaviorSanitizer',
                   'terminate called', 'internal invariant')


class Failure(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failure(what)


def run(argv, *, cwd, env=None, stdin=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=cwd, env=full_env, input=stdin, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f'{" ".join(argv[:3])}... still running after {timeout} s')
    took = time.monotonic() - t0
    out = p.stdout + p.stderr
    print(f'$ {" ".join(argv)}\n  exit {p.returncode} in {took:.1f} s\n  ' +
          '\n  '.join(out.strip().splitlines()[-8:]))
    for mark in SANITIZER_MARKS:
        expect(mark not in out, f'output contains "{mark}"')
    return p.returncode, out


def refused(argv, *, cwd, names, env=None, stdin=None, timeout=60, codes=(1, 2)):
    """The command exits with one of `codes` and its message names every string in `names`."""
    code, out = run(argv, cwd=cwd, env=env, stdin=stdin, timeout=timeout)
    expect(code in codes, f'exit status {code}, expected one of {codes}')
    for name in names:
        expect(name in out, f'the message does not name "{name}"')
    return out


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Extender:
    """`gpumux extender --offline-nodes FILE` on a free loopback port."""

    def __init__(self, gpumux, cwd, nodes, extra=()):
        self.port = free_port()
        self.log = open(os.path.join(cwd, 'extender.log'), 'w+')
        self.proc = subprocess.Popen([gpumux, 'extender', '--offline-nodes', nodes, '--listen',
                                      f'127.0.0.1:{self.port}', *extra], cwd=cwd,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            expect(self.proc.poll() is None, f'the extender exited with {self.proc.returncode}')
            if self.get('/readyz', timeout=1)[0] == 200:
                return
            time.sleep(0.1)
        raise Failure('the extender did not become ready within 60 s')

    def request(self, method, path, body=None, timeout=10):
        try:
            c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
            headers = {'Content-Type': 'application/json'} if body is not None else {}
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read().decode(errors='replace')
            c.close()
            return r.status, data
        except OSError as e:
            return None, str(e)

    def get(self, path, timeout=10):
        return self.request('GET', path, timeout=timeout)

    def stop(self):
        alive = self.proc.poll() is None
        if alive:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        for mark in SANITIZER_MARKS:
            expect(mark not in text, f'the extender log contains "{mark}":\n{text[-3000:]}')
        return alive


class CoordinatorDaemon:
    """`gpumux coordinator` (jobs' own word as membership, no GPU backend) on a free loopback
    port, its store the file `store`, its unix socket `socket_path` (or none)."""

    def __init__(self, gpumux, d, store, socket_path='off'):
        self.port = free_port()
        self.log_path = os.path.join(d, 'coordinator.log')
        argv = [gpumux, 'coordinator', '--node', 'n1', '--members', 'jobs', '--backend', 'none',
                '--listen', f'127.0.0.1:{self.port}', '--socket', socket_path,
                '--store', f'file://{store}']
        # Its log goes to a file: a pipe nobody reads fills up and stops it.
        with open(self.log_path, 'w') as log:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        last = None
        while time.monotonic() < deadline:
            status, last = self.request('GET', '/healthz', timeout=2)
            if status == 200:
                return
            if self.proc.poll() is not None:
                raise Failure(f'the coordinator exited ({self.proc.returncode}): {self.log()[-800:]}')
            time.sleep(0.1)
        self.proc.kill()
        raise Failure(f'the coordinator did not serve within 60 s ({last}): {self.log()[:600]}')

    def log(self):
        with open(self.log_path, errors='replace') as f:
            return f.read()

    def request(self, method, path, body=None, timeout=30):
        """(status, text) over TCP; (None, why) when it could not be asked."""
        try:
            c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
            c.request(method, path, None if body is None else json.dumps(body),
                      {'Content-Type': 'application/json'})
            r = c.getresponse()
            text = r.read().decode(errors='replace')
            c.close()
            return r.status, text
        except (OSError, http.client.HTTPException) as e:
            return None, repr(e)

    def status(self, field):
        """A field of /proc/PID/status (Threads, VmSize)."""
        with open(f'/proc/{self.proc.pid}/status') as f:
            for line in f:
                if line.startswith(field + ':'):
                    return line.split(':', 1)[1].strip()
        raise Failure(f'no {field} in /proc/{self.proc.pid}/status')

    def stop(self):
        """SIGTERM; its log, which must hold no sanitizer report."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure('SIGTERM did not end the coordinator within 15 s')
        err = self.log()
        expect(not any(m in err for m in SANITIZER_MARKS), f'sanitizer output: {err[-500:]}')
        return err


def unix_request(path, method, target, body=None, timeout=10):
    """One HTTP/1.1 request on a unix socket: (status, body text)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(path)
        data = b'' if body is None else json.dumps(body).encode()
        s.sendall(f'{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                  f'Content-Length: {len(data)}\r\nConnection: close\r\n\r\n'.encode() + data)
        out = b''
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    head, _, text = out.partition(b'\r\n\r\n')
    return int(head.split()[1]), text.decode(errors='replace')


# --- the reproducers -----------------------------------------------------------------------------

def extender_nodes_empty_object(g, d):
    ext = Extender(g, d, 'nodes.json')
    try:
        for body_file in ('filter.json', 'filter-wrong-node.json'):
            with open(os.path.join(d, body_file)) as f:
                body = f.read()
            status, reply = ext.request('POST', '/gpumux/filter', body)
            print(f'{body_file}: HTTP {status} {reply[:300]}')
            expect(status == 400, f'{body_file}: HTTP {status}, expected 400')
            expect('Nodes' in reply, f'{body_file}: the error does not name the field "Nodes"')
            status, _ = ext.get('/healthz')
            expect(status == 200, f'after {body_file}: /healthz answered {status}')
    finally:
        expect(ext.stop(), 'the extender died')


def extender_nodelist_cpu_overflow(g, d):
    refused([g, 'extender', '--offline-nodes', 'nodes.json', '--listen', '127.0.0.1:0'], cwd=d,
            names=['nodes.json', 'cpu'], timeout=30)


def _ledger_case(g, d, ledger, argv_for):
    state = os.path.join(d, 'state')
    os.makedirs(state, exist_ok=True)
    shutil.copy(os.path.join(d, ledger), os.path.join(state, 'reservations.json'))
    with open(os.path.join(state, 'reservations.json'), 'rb') as f:
        before = f.read()
    env = {'GPUMUX_STATE_DIR': state, 'GPUMUX_GPUS_FILE': os.path.join(d, 'gpus.csv'),
           'GPUMUX_DEV_DIR': os.path.join(d, 'dev'), 'GPUMUX_RUNTIME': '/bin/true'}
    argv, stdin = argv_for(d)
    refused(argv, cwd=d, env=env, stdin=stdin, names=['reservations.json'])
    with open(os.path.join(state, 'reservations.json'), 'rb') as f:
        expect(f.read() == before, f'{ledger}: the ledger changed although the container was refused')


def _hook_state(d, pid):
    return json.dumps({'ociVersion': '1.0.2', 'id': 'c1', 'status': 'creating', 'pid': pid,
                       'bundle': os.path.join(d, 'bundle')})


def hook_ledger_gpu_out_of_range(g, d):
    for ledger in ('reservations.json', 'reservations-gpu2.json', 'reservations-100000.json'):
        _ledger_case(g, d, ledger, lambda d: ([g, 'hook', 'createRuntime'], _hook_state(d, 4000000)))
        _ledger_case(g, d, ledger,
                     lambda d: ([g, 'oci-runtime', 'create', '--bundle', os.path.join(d, 'bundle'), 'c1'],
                                None))


def _empty_ledger_after(state):
    path = os.path.join(state, 'reservations.json')
    if not os.path.exists(path):
        return
    with open(path) as f:
        ledger = json.load(f)
    expect(not ledger.get('reservations'), f'a reservation was left in the ledger: {ledger}')


def hook_config_root_type(g, d):
    state = os.path.join(d, 'state')
    os.makedirs(state)
    env = {'GPUMUX_STATE_DIR': state, 'GPUMUX_GPUS_FILE': os.path.join(d, 'gpus.csv'),
           'GPUMUX_DEV_DIR': os.path.join(d, 'dev')}
    refused([g, 'hook', 'createRuntime'], cwd=d, env=env, stdin=_hook_state(d, 4000000),
            names=['config.json', 'root'])
    _empty_ledger_after(state)


def oci_runtime_config_type(g, d):
    variants = [
        ('linux', {'linux': 'x'}),
        ('hooks', {'hooks': []}),
        ('devices', {'linux': {'devices': {}}}),
        ('resources', {'linux': {'resources': 1}}),
        ('env', {'process': {'env': 'NVIDIA_VISIBLE_DEVICES=all'}}),
    ]
    with open(os.path.join(d, 'config.json')) as f:
        base = json.load(f)
    for field, patch in variants:
        state = os.path.join(d, 'state-' + field)
        os.makedirs(state)
        config = json.loads(json.dumps(base))
        for k, v in patch.items():
            config[k] = v
        with open(os.path.join(d, 'bundle', 'config.json'), 'w') as f:
            json.dump(config, f)
        env = {'GPUMUX_RUNTIME': '/bin/true', 'GPUMUX_STATE_DIR': state,
               'GPUMUX_GPUS_FILE': os.path.join(d, 'gpus.csv'), 'GPUMUX_DEV_DIR': os.path.join(d, 'dev')}
        refused([g, 'oci-runtime', 'create', '--bundle', os.path.join(d, 'bundle'), 'c1'], cwd=d, env=env,
                names=['config.json', field])
        _empty_ledger_after(state)


def replay_duplicate_arrival(g, d):
    refused([g, 'simulate', '--nodes', 'nodes.csv', '--pods', 'pods.csv', '--policy', 'best-fit', '--replay',
             'replay', '--no-report', '-q', '--threads', '1'], cwd=d, names=['arrival.csv'])


def replay_gpu_index_overflow(g, d):
    refused([g, 'simulate', '--nodes', 'nodes.csv', '--pods', 'pods.csv', '--policy', 'best-fit', '--replay',
             'replay', '--no-report', '-q', '--threads', '1'], cwd=d, names=['arrival.csv:2', 'gpu_index'])


def simulate_node_cpu_overflow(g, d):
    refused([g, 'simulate', '--nodes', 'nodes.csv', '--pods', 'pods.csv', '--no-report', '-q', '--threads', '1'],
            cwd=d, names=['n1', 'CPU'])


def simulate_tiny_pod_resample(g, d):
    # Eight million arrivals for one experiment: refused up front, naming the limit.
    refused([g, 'simulate', '--pods', 'pods.csv', '--policy', 'best-fit', '--no-report', '--threads', '1'],
            cwd=d, names=['arrivals', '--max-arrivals'], timeout=30)


def jobgen_tiny_rate(g, d):
    refused([g, 'jobgen', '--rate', '1e-300', '--count', '3', '-o', 'jobs.csv'], cwd=d, names=['--rate'])
    refused([g, 'jobgen', '--load', '1e-300', '--count', '3', '-o', 'jobs.csv'], cwd=d, names=['--load'])


def device_plugin_huge_memory(g, d):
    kubelet = os.path.join(d, 'kubelet')
    os.makedirs(kubelet, exist_ok=True)
    # A 3 GiB address-space limit keeps a regression from taking the machine down (not under
    # ASan, whose shadow memory needs terabytes of address space).
    limit = '' if os.environ.get('GPUMUX_SANITIZED') == '1' else 'ulimit -v 3000000 2>/dev/null; '
    refused(['sh', '-c', limit + 'exec "$@"', 'sh', g, 'device-plugin',
             '--node-name', 'dev', '--backend', 'fake', '--gpus-file', os.path.join(d, 'gpus.csv'),
             '--kubelet-dir', kubelet, '--offline', '--metrics-address', 'off'],
            cwd=d, names=['gpus.csv', 'memory'], timeout=60)


def device_plugin_listener_hostile_clients(g, d):
    # The probe/metrics listener (0.0.0.0:9402 in the monitoring overlay) stopped answering
    # /healthz under 8 trickling connections and read a 512 MiB body into memory.
    kubelet = tempfile.mkdtemp(prefix='gpumux-dp-')  # short: unix socket paths end at 107 bytes
    port = free_port()
    log = open(os.path.join(d, 'plugin.log'), 'w+')
    proc = subprocess.Popen([g, 'device-plugin', '--node-name', 'dev', '--backend', 'fake',
                             '--gpus-file', 'gpus.csv', '--kubelet-dir', kubelet, '--offline',
                             '--metrics-address', f'127.0.0.1:{port}'], cwd=d, stdout=log,
                            stderr=subprocess.STDOUT)
    socks = []

    def probe():
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=3)
            c.request('GET', '/healthz')
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except (OSError, http.client.HTTPException):
            return False
    try:
        deadline = time.monotonic() + 30
        while not probe():
            if time.monotonic() > deadline or proc.poll() is not None:
                log.seek(0)
                raise Failure('the plugin never served:\n' + log.read()[-2000:])
            time.sleep(0.1)
        socks = [socket.create_connection(('127.0.0.1', port)) for _ in range(8)]
        header = b'GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ' + b'a' * 100
        answered = 0
        for k in range(5):
            for s in socks:
                s.sendall(header[k:k + 1])
            answered += probe()
            time.sleep(1)
        print(f'  8 trickling connections: {answered}/5 probes answered')
        expect(answered == 5, f'only {answered} of 5 probes answered beside 8 slow clients')
        big = socket.create_connection(('127.0.0.1', port))
        big.sendall(b'POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n' % (512 << 20))
        big.settimeout(10)
        reply = big.recv(4096)
        big.close()
        print(f'  a 512 MiB body announced: {reply[:40]!r}')
        expect(reply.startswith(b'HTTP/1.1 413') or reply.startswith(b'HTTP/1.1 405'),
               f'a 512 MiB body was not refused before it was read: {reply[:80]!r}')
        expect(b'{' in reply, 'the refusal has no JSON body')
        expect(probe() and proc.poll() is None, 'the plugin stopped answering')
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(kubelet, ignore_errors=True)


def extender_slowloris(g, d):
    # Twice as many trickling connections as the extender has threads, for 15 s: /healthz keeps
    # answering (the benchmark, not this test, holds it to 100 ms).
    ext = Extender(g, d, 'nodes8.json', extra=['--threads', '4'])
    socks = []
    try:
        socks = [socket.create_connection(('127.0.0.1', ext.port)) for _ in range(8)]
        header = b'GET /healthz HTTP/1.1\r\nX-A: ' + b'a' * 100
        answered, probes, worst, k = 0, 0, 0.0, 0
        end = time.monotonic() + 15
        while time.monotonic() < end:
            for s in socks:
                try:
                    s.sendall(header[k % len(header):k % len(header) + 1])
                except OSError:
                    pass  # the extender closed it: what it should do to a slow client
            k += 1
            t0 = time.monotonic()
            status, _ = ext.get('/healthz', timeout=5)
            worst = max(worst, time.monotonic() - t0)
            probes += 1
            answered += status == 200
            time.sleep(0.2)
        print(f'{answered}/{probes} probes answered while 8 connections trickled; slowest {worst:.3f} s')
        expect(answered == probes, f'only {answered} of {probes} /healthz probes were answered')
    finally:
        for s in socks:
            s.close()
        expect(ext.stop(), 'the extender died')


def path_is_a_directory(g, d):
    adir = os.path.join(d, 'adir')
    refused([g, 'extender', '--offline-nodes', adir, '--listen', '127.0.0.1:0'], cwd=d,
            names=[adir, 'directory'], timeout=30)
    refused([g, 'extender', '--config', adir], cwd=d, names=[adir, 'directory'], timeout=30)
    bundle = os.path.join(d, 'bundle')
    state = os.path.join(d, 'state')
    refused([g, 'hook', 'createRuntime'], cwd=d, env={'GPUMUX_STATE_DIR': state},
            stdin=json.dumps({'id': 'c1', 'pid': 0, 'bundle': bundle}), names=['config.json', 'directory'])
    refused([g, 'oci-runtime', 'create', '--bundle', bundle, 'c1'], cwd=d,
            env={'GPUMUX_RUNTIME': '/bin/true', 'GPUMUX_STATE_DIR': state}, names=['config.json', 'directory'])
    refused([g, 'simulate', '--pods', adir, '--no-report'], cwd=d, names=[adir, 'directory'])


def dl_profile_overflow(g, d):
    for profile, field in (('profile-target-epochs-1e300.json', 'target_epochs'),
                           ('profile-solo-memory-int64max.json', 'memory')):
        refused([g, 'simulate', '--workload', 'dl', '--profile', profile, '--count', '15', '--loads', '2',
                 '--policy', 'exclusive', '--no-report', '--threads', '1'], cwd=d,
                names=[profile, field], timeout=60)


def dl_jobs_submit_overflow(g, d):
    # The reproducer's job list names lstm, a class of the profile that was the default then.
    out = refused([g, 'simulate', '--workload', 'dl', '--profile', 'iadeep5-assumed', '--jobs', 'jobs.csv',
                   '--policy', 'exclusive', '--loads', '0.001', '--no-report', '--threads', '1'], cwd=d,
                  names=['j2', 'submit'])
    expect('never ran' not in out, 'the error blames the cluster instead of the submit time')


def submit_yaml_billion_laughs(g, d):
    # Nested aliases: 591 bytes that expand to ~387 million strings. Refused at once, in little
    # memory (the limit makes a runaway expansion fail fast instead of taking the machine).
    # (Not under ASan, whose shadow memory needs terabytes of address space.)
    limit = '' if os.environ.get('GPUMUX_SANITIZED') == '1' else 'ulimit -v 2000000 2>/dev/null; '
    refused(['sh', '-c', limit + 'exec "$@"', 'sh', g, 'submit', 'laughs.yaml', '--dry-run', '--run',
             'r1'], cwd=d, names=['laughs.yaml', 'too many values', 'aliases'], timeout=30)


def report_record_time_overflow(g, d):
    # A finish time that does not fit the report's microseconds was reported as a JCT of 0 s,
    # and a time scale of 5e-324 as load 'inf'.
    code, out = run([g, 'report', '--from-cluster', 'ok-t100.jsonl', '--no-report', '--format',
                     'json'], cwd=d)
    expect(code == 0, f'the valid record: exit {code}')
    metrics = json.loads(out[:out.rindex('}') + 1])['runs'][0]['metrics']
    expect(metrics['avg_jct_s'] == 100.0, f'the valid record: {metrics}')
    for record, field in (('finish-9.3e12.jsonl', '"t"'), ('finish-1e300.jsonl', '"t"'),
                          ('time-scale-5e-324.jsonl', '"time_scale"')):
        refused([g, 'report', '--from-cluster', record, '--no-report'], cwd=d,
                names=[record, field])


def oci_runtime_shared_ask_ignores_reservation(g, d):
    """c1 holds GPU 0 (its keeper a live process, as a running container is); c2 asking for every
    GPU gets only GPU 1, c3 naming GPU 0 is refused naming c1, and the ledger keeps c1."""
    state = os.path.join(d, 'state')
    os.makedirs(state)
    os.makedirs(os.path.join(d, 'dev'))
    env = {'GPUMUX_RUNTIME': '/bin/true', 'GPUMUX_STATE_DIR': state,
           'GPUMUX_GPUS_FILE': os.path.join(d, 'gpus.csv'), 'GPUMUX_DEV_DIR': os.path.join(d, 'dev')}
    keeper = subprocess.Popen(['sleep', '60'])
    try:
        with open(f'/proc/{keeper.pid}/stat') as f:
            start = int(f.read().rsplit(')', 1)[1].split()[19])
        pid_ns = os.readlink(f'/proc/{keeper.pid}/ns/pid')
        with open(os.path.join(state, 'reservations.json'), 'w') as f:
            json.dump({'version': 1, 'reservations': [
                {'container': 'c1', 'gpus': [0], 'since': '2026-11-28T12:00:00Z', 'since_unix': 1795867200,
                 'state': 'running', 'holder_pid': keeper.pid, 'holder_start_time': start,
                 'holder_pid_ns': pid_ns}]}, f)

        def create(name, env_line):
            bundle = os.path.join(d, name)
            os.makedirs(bundle)
            with open(os.path.join(bundle, 'config.json'), 'w') as f:
                json.dump({'ociVersion': '1.0.2', 'process': {'env': [env_line], 'args': ['sh']},
                           'root': {'path': 'rootfs'}}, f)
            return [g, 'oci-runtime', 'create', '--bundle', bundle, name], bundle

        argv, bundle = create('c2', 'NVIDIA_VISIBLE_DEVICES=all')
        code, _ = run(argv, cwd=d, env=env)
        expect(code == 0, f'c2 (every GPU) exit status {code}')
        with open(os.path.join(bundle, 'config.json')) as f:
            given = [e for e in json.load(f)['process']['env'] if e.startswith('GPUMUX_GPUS=')]
        expect(given == ['GPUMUX_GPUS=1'], f'c2 was given {given}, not only GPU 1')
        argv, _ = create('c3', 'NVIDIA_VISIBLE_DEVICES=0')
        refused(argv, cwd=d, env=env, names=["asks for GPU 0", "'c1' has reserved"])
        with open(os.path.join(state, 'reservations.json')) as f:
            held = [r['container'] for r in json.load(f)['reservations']]
        expect(held == ['c1'], f'the ledger holds {held}')
    finally:
        keeper.kill()
        keeper.wait()


def coordinator_job_flood(g, d):
    """Phantom registrations on one GPU stop at the per-GPU limit (503 naming it), and a store
    left with 50,000 jobs (a run without limits) starts serving at once, keeps no more than
    --max-jobs, and a SIGTERM ends it promptly."""
    state = os.path.join(d, 'store.json')
    daemon = CoordinatorDaemon(g, d, state)
    try:
        codes = []
        for i in range(40):
            status, text = daemon.request('POST', '/v1/register', {
                'job': f'flood/p{i}/c', 'class': 'vgg16', 'batch_size': 64, 'gpus': ['GPU-a']})
            codes.append(status)
            if status == 503:
                expect('--max-jobs-per-gpu' in text, f'the refusal does not name the limit: {text}')
        expect(codes.count(200) == 16 and codes.count(503) == 24,
               f'40 registrations on one GPU: {codes.count(200)} accepted, {codes.count(503)} refused')
    finally:
        daemon.stop()
    now = int(time.time())
    keys = {}
    for i in range(50000):
        job = f'flood/p{i}/c'
        keys[f'/gpumux/nodes/n1/jobs/flood%2Fp{i}%2Fc'] = {'revision': i + 1, 'value': json.dumps({
            'job': job, 'owner': 'tcp', 'seen': now, 'class': 'vgg16', 'batch_size': 64,
            'target_batch': 64, 'gpus': [f'GPU-{i % 1000}'], 'pid': 0})}
    with open(state, 'w') as f:
        json.dump({'version': 1, 'revision': 50000, 'keys': keys}, f)
    started = time.monotonic()
    daemon = CoordinatorDaemon(g, d, state)
    took = time.monotonic() - started
    err = daemon.stop()
    print(f'  a store of 50,000 jobs: serving after {took:.1f} s')
    expect('stored jobs dropped: beyond --max-jobs or --max-jobs-per-gpu jobs=49488' in err,
           f'the restart did not drop the jobs beyond the limits: {err[-800:]}')


def coordinator_store_gpu_entry_type(g, d):
    """A GPU's stored group of the wrong JSON shape ("jobs" a string, the value an array,
    "state" a number) aborted every start (an uncaught type_error: a crash loop until someone
    deleted the file). The key is skipped with a warning naming it; the job is restored."""
    for name in ('store-jobs-string.json', 'store-gpu-array.json', 'store-state-number.json'):
        daemon = CoordinatorDaemon(g, d, os.path.join(d, name))
        try:
            status, text = daemon.request('GET', '/v1/state')
        finally:
            err = daemon.stop()
        print(f'  {name}: /v1/state {status}')
        expect(status == 200 and '"ns/a/c"' in text, f'{name}: the stored job is not served: {text}')
        expect('skipping a key key=/gpumux/nodes/n1/gpus/GPU-a' in err,
               f'{name}: no warning names the skipped key: {err[-600:]}')


def coordinator_slowloris(g, d):
    """100 connections trickling a header byte a second on the coordinator's unix socket (any
    pod that mounts /run/gpumux may connect) kept /healthz and every job from being answered.
    Now every probe and a registration on the socket meanwhile are answered."""
    folder = tempfile.mkdtemp(prefix='gpumux-c-')  # short: unix socket paths end at 107 bytes
    sock = os.path.join(folder, 'coord.sock')
    daemon = CoordinatorDaemon(g, d, os.path.join(d, 'store.json'), sock)
    slow = []
    try:
        for _ in range(100):
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            slow.append(s)
        header = b'POST /v1/report HTTP/1.1\r\nHost: x\r\nX-A: ' + b'a' * 1000
        answered, worst = 0, 0.0
        for k in range(8):
            for s in slow:
                try:
                    s.sendall(header[k:k + 1])
                except OSError:
                    pass  # closed by the coordinator: what it should do to a slow client
            t0 = time.monotonic()
            answered += daemon.request('GET', '/healthz', timeout=3)[0] == 200
            worst = max(worst, time.monotonic() - t0)
            time.sleep(1)
        t0 = time.monotonic()
        status, text = unix_request(sock, 'POST', '/v1/register', {
            'job': 'ns/p/c', 'class': 'vgg16', 'batch_size': 64, 'gpus': ['GPU-a']}, timeout=3)
        took = time.monotonic() - t0
        print(f'  100 trickling unix connections: {answered}/8 probes answered (slowest '
              f'{worst:.2f} s); a registration on the socket: {status} in {took:.2f} s')
        expect(answered == 8, f'only {answered} of 8 /healthz probes answered within 3 s')
        expect(status == 200, f'the registration beside them: {status} {text}')
    finally:
        for s in slow:
            s.close()
        daemon.stop()
        shutil.rmtree(folder, ignore_errors=True)


def coordinator_unix_relay_thread_leak(g, d):
    """Every unix-socket connection left a thread behind (an 8 MiB stack and 2 memory maps
    each; abort after ~32,600 connections). 20,000 connections now leave the threads and the
    memory maps as they were after the first 5,000 (the address space may grow once by a
    malloc arena of 64 MiB, not by a stack per connection)."""
    folder = tempfile.mkdtemp(prefix='gpumux-c-')
    sock = os.path.join(folder, 'coord.sock')
    daemon = CoordinatorDaemon(g, d, os.path.join(d, 'store.json'), sock)
    try:
        seen = {}
        for i in range(1, 20001):
            status, _ = unix_request(sock, 'GET', '/healthz')
            expect(status == 200, f'connection {i}: /healthz {status}')
            if i in (5000, 20000):
                with open(f'/proc/{daemon.proc.pid}/maps') as f:
                    maps = sum(1 for _ in f)
                seen[i] = (int(daemon.status('Threads')), maps,
                           int(daemon.status('VmSize').split()[0]))
        (t0, m0, v0), (t1, m1, v1) = seen[5000], seen[20000]
        print(f'  after 5,000 connections: {t0} threads, {m0} maps, VmSize {v0} kB; after '
              f'20,000: {t1} threads, {m1} maps, VmSize {v1} kB')
        expect(t1 <= t0, f'threads grew from {t0} to {t1}')
        expect(m1 - m0 < 100, f'memory maps grew from {m0} to {m1} over 15,000 connections')
        # A leaked thread each would add 15,000 x 8 MiB = 117 GiB.
        expect(v1 - v0 < 1 << 20, f'VmSize grew by {v1 - v0} kB over 15,000 connections')
    finally:
        daemon.stop()
        shutil.rmtree(folder, ignore_errors=True)


# Run as another uid by coordinator_job_impersonation: one request on the unix socket.
AS_UID = """import json, socket, sys
{unix_request}
status, text = unix_request(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
print(status, text)
"""


def coordinator_job_impersonation(g, d):
    """Any client of the 0666 socket could act as any job: re-register its id with max_batch 1
    (the victim then runs batch 1), make it leave. Callers are now told apart by the kernel's
    peer credentials, never by the message: as two plain uids, the attacker's re-registration
    and its 'leave' of the victim are refused (403) and the victim's batch is its own. The
    original run.sh calls as root outside any container: the node's administrator, who may act
    for any job (it could edit the coordinator's store anyway); that is asserted too."""
    if os.geteuid() != 0:
        print('SKIP: telling two callers apart needs two uids: run as root')
        sys.exit(77)
    # Inside a container every process is that container to the coordinator (its principal):
    # two uids there are one caller. caller.cc's rules, roughly: a pod or a 64-hex segment.
    with open('/proc/self/cgroup') as f:
        cgroup = f.read()
    if 'kubepods' in cgroup or re.search(r'[0-9a-f]{64}', cgroup):
        print(f'SKIP: this process is in a container ({cgroup.strip()[:120]}): its uids are one caller')
        sys.exit(77)
    if subprocess.run(['true'], user=60001, capture_output=True).returncode != 0:
        print('SKIP: cannot run as uid 60001 here')
        sys.exit(77)
    folder = tempfile.mkdtemp(prefix='gpumux-c-')
    os.chmod(folder, 0o755)
    sock = os.path.join(folder, 'coord.sock')
    daemon = CoordinatorDaemon(g, d, os.path.join(d, 'store.json'), sock)
    victim, attacker = 60001, 60002
    # The system's Python: one under root's home (pyenv) is not readable by other uids.
    python = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable
    script = AS_UID.format(unix_request=inspect.getsource(unix_request))

    def call(uid, method, target, body):
        p = subprocess.run([python, '-c', script, sock, method, target, json.dumps(body)],
                           user=uid, cwd=folder, capture_output=True, text=True, timeout=30)
        expect(p.returncode == 0, f'uid {uid}: {p.stderr[-500:]}')
        status, _, text = p.stdout.strip().partition(' ')
        return int(status), text

    v = 'team-a/train-0/main'
    try:
        steps = {'job': v, 'steps': [[128, 0.2]]}
        expect(call(victim, 'POST', '/v1/register', {'job': v, 'class': 'vgg16', 'batch_size': 128,
                                                     'gpus': ['GPU-a']})[0] == 200,
               'the victim could not register')
        status, text = call(attacker, 'POST', '/v1/register', {
            'job': v, 'class': 'vgg16', 'batch_size': 128, 'gpus': ['GPU-a'], 'max_batch': 1})
        print(f'  attacker (uid {attacker}) re-registers the victim: {status} {text}')
        expect(status == 403, f'the attacker re-registered the victim: {status} {text}')
        status, text = call(victim, 'POST', '/v1/report', steps)
        expect(status == 200 and json.loads(text)['batch_size'] != 1,
               f'the victim was told {text}')
        status, text = call(attacker, 'POST', '/v1/leave', {'job': v})
        print(f'  attacker makes the victim leave: {status} {text}')
        expect(status == 403, f'the attacker made the victim leave: {status} {text}')
        status, text = call(victim, 'POST', '/v1/report', steps)
        expect(status == 200, f'the victim is no longer registered: {status} {text}')
        status, text = unix_request(sock, 'POST', '/v1/leave', {'job': v})
        print(f'  root outside any container (the node administrator) makes it leave: {status}')
        expect(status == 200, f'the node administrator was refused: {status} {text}')
    finally:
        daemon.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _own_run_sh(g, d, timeout=120, measures=False):
    """The reproducer's own run.sh, which exits 0 once the defect is gone (and nothing a
    sanitizer says reaches its output). `measures`: its verdict is a memory peak or a share of
    probes answered in time, which ASan's shadow memory and slowness move (the webhook's
    baseline RSS is 74 MiB under ASan): in the sanitizer build it must run to its end without a
    sanitizer report (exit 0 or 1), and the figure is judged in the plain build."""
    code, out = run(['sh', os.path.join(d, 'run.sh'), g], cwd=d, timeout=timeout)
    if measures and os.environ.get('GPUMUX_SANITIZED') == '1':
        expect(code in (0, 1), f'its run.sh exits {code}: {out.strip().splitlines()[-1:]}')
        expect('AddressSanitizer' not in out and 'runtime error' not in out,
               f'a sanitizer report: {out[-2000:]}')
        print(f'  sanitized build: ran to its end (exit {code}); its figure is judged in the '
              'plain build')
        return
    expect(code == 0, f'its run.sh exits {code}: {out.strip().splitlines()[-1:]}')


def coordinator_reregister_ignores_max_batch(g, d):
    """A job registering again at the same place with a lower max_batch (after running out of
    memory at the batch it was told) was told its old batch, above the new bound, until the next
    tuning session. Its kept target is now held within the bounds it gives."""
    _own_run_sh(g, d)


def coordinator_loopback_check_by_prefix(g, d):
    """`--listen 127.attacker.example:9403` passed the coordinator's loopback check as text
    (anything starting with "127."), then bound wherever the name resolved. Only loopback
    addresses pass now (127.0.0.0/8, ::1, and localhost when it resolves to nothing else)."""
    _own_run_sh(g, d)


def coordinator_hybrid_cgroup_admin(g, d):
    """On a cgroup "hybrid" host a container's unified-hierarchy line names the runtime's
    service, not its pod: the caller read as a host process (as root, the node's administrator)
    and could remove another pod's job. The line that names a pod decides now, in whichever
    hierarchy it is."""
    _own_run_sh(g, d)


def mps_stop_unbounded(g, d):
    """With --mps, SIGTERM quit the GPUs' control daemons one after the other, each command
    waited for read by read: 15 s per GPU when `quit` hung, for ever when it trickled. Every
    daemon is told at once now, all within one deadline, and what is left is killed."""
    _own_run_sh(g, d, timeout=170)


def http_chunk_extension_unbounded_memory(g, d):
    """A chunked body's chunk line (an endless extension) or its trailer counted against no
    limit: one request grew a listener's memory by ~300 MiB (the webhook, the coordinator and the
    device plugin were OOM-killed under their manifests' limits). The read buffer is bounded now:
    past it the request is refused (431) and the connection closed."""
    _own_run_sh(g, d, timeout=170)


def http_nonreading_clients_exhaust_connections(g, d):
    """Clients that pipeline requests and never read the replies held every connection "being
    answered" until the write timeout: 92 % of the device plugin listener's probes got 503 under
    64 of them. A reply unread for 250 ms no longer keeps its connection from being evicted for
    a newcomer."""
    _own_run_sh(g, d, timeout=170, measures=True)


def webhook_large_review_oom(g, d):
    """A review of a 48,000-container pod (under the 3 MiB body limit) became 48,000 patch
    operations and OOM-killed the webhook under its 128 MiB limit, on the I/O thread. A pod of
    more than 256 containers is denied now, and reviews run on a worker."""
    _own_run_sh(g, d, timeout=170, measures=True)


def http_work_slot_starvation(g, d):
    """A chunked body, or one over 128 KiB, was read while its request held a work slot: four
    bodies trickling in a byte at a time held every slot of the webhook and the coordinator, and
    every legitimate request waited ~10 s. A body is read first now (large ones under one byte
    budget, all at a minimum rate), and a slot is taken only for the handler."""
    _own_run_sh(g, d, timeout=170)


def extender_bodies_exceed_memory_limit(g, d):
    """The extender read bodies of up to 64 MiB on each of its work slots at once: eight 59 MiB
    filter bodies took it to 533 MiB, past the Deployment's 512 Mi. Large bodies now share one
    byte budget (64 MiB in the extender) until their replies are written; the rest wait."""
    _own_run_sh(g, d, timeout=170)

def coordinator_pid_reuse_impersonation(g, d):
    """The caller was read from /proc/<pid>/cgroup at every request, and nothing tied the pid to
    the process that connected: after SCM_RIGHTS and the connector's exit, a connection whose pid
    went to a process of another pod acted as that pod (or, outside any container, as the node's
    administrator). The connector's pidfd (SO_PEERPIDFD; else its start time, read at accept)
    now says when it has gone, and its connection is refused; replies name no host pid. Needs
    root, a writable cgroup2 hierarchy and ns_last_pid (the run.sh exits 2 without them)."""
    code, out = run(['sh', os.path.join(d, 'run.sh'), g], cwd=d, timeout=120)
    if code == 2:
        print(out.strip().splitlines()[-1:] if out.strip() else 'this host cannot run it')
        sys.exit(77)
    expect(code == 0, f'its run.sh exits {code}: {out.strip().splitlines()[-1:]}')


def webhook_cert_files_unchecked_unreloaded(g, d):
    """Certificate files were checked only for pairing and read once: an expired one was served
    without a word, a renewed one never picked up. They are checked as a kept certificate is now
    (expiry, --tls-names; exit 2 naming the file) and re-read every 2 s; a renewed pair is
    served to new connections."""
    _own_run_sh(g, d, timeout=120)


def webhook_extender_deep_json_crash(g, d):
    """A body nesting a value 100,000 deep (195 KB) crashed the webhook and the extender: the
    JSON library's dump() and copy recurse once per level. External JSON is parsed by one entry
    point now (core::ParseJson), which refuses text nested deeper than 128 levels before the
    library sees it: both answer 400 and keep serving."""
    code, out = run(['sh', os.path.join(d, 'run.sh'), g], cwd=d)
    expect(code == 0, f'its run.sh exits {code}: {out.strip().splitlines()[-1:]}')
    expect(out.count("reply b'HTTP/1.1 400") == 3, f'not three 400 replies: {out}')

CASES = {
    'extender-nodes-empty-object': extender_nodes_empty_object,
    'extender-nodelist-cpu-overflow': extender_nodelist_cpu_overflow,
    'hook-ledger-gpu-out-of-range': hook_ledger_gpu_out_of_range,
    'hook-config-root-type': hook_config_root_type,
    'oci-runtime-config-type': oci_runtime_config_type,
    'replay-duplicate-arrival': replay_duplicate_arrival,
    'replay-gpu-index-overflow': replay_gpu_index_overflow,
    'simulate-node-cpu-overflow': simulate_node_cpu_overflow,
    'simulate-tiny-pod-resample': simulate_tiny_pod_resample,
    'jobgen-tiny-rate': jobgen_tiny_rate,
    'device-plugin-huge-memory': device_plugin_huge_memory,
    'extender-slowloris': extender_slowloris,
    'path-is-a-directory': path_is_a_directory,
    'dl-profile-overflow': dl_profile_overflow,
    'dl-jobs-submit-overflow': dl_jobs_submit_overflow,
    'submit-yaml-billion-laughs': submit_yaml_billion_laughs,
    'report-record-time-overflow': report_record_time_overflow,
    'device-plugin-listener-hostile-clients': device_plugin_listener_hostile_clients,
    'oci-runtime-shared-ask-ignores-reservation': oci_runtime_shared_ask_ignores_reservation,
    'coordinator-job-flood': coordinator_job_flood,
    'coordinator-store-gpu-entry-type': coordinator_store_gpu_entry_type,
    'coordinator-slowloris': coordinator_slowloris,
    'coordinator-unix-relay-thread-leak': coordinator_unix_relay_thread_leak,
    'coordinator-job-impersonation': coordinator_job_impersonation,
    'coordinator-reregister-ignores-max-batch': coordinator_reregister_ignores_max_batch,
    'coordinator-loopback-check-by-prefix': coordinator_loopback_check_by_prefix,
    'coordinator-hybrid-cgroup-admin': coordinator_hybrid_cgroup_admin,
    'mps-stop-unbounded': mps_stop_unbounded,
    'http-chunk-extension-unbounded-memory': http_chunk_extension_unbounded_memory,
    'http-nonreading-clients-exhaust-connections': http_nonreading_clients_exhaust_connections,
    'webhook-large-review-oom': webhook_large_review_oom,
    'coordinator-pid-reuse-impersonation': coordinator_pid_reuse_impersonation,
    'webhook-cert-files-unchecked-unreloaded': webhook_cert_files_unchecked_unreloaded,
    'http-work-slot-starvation': http_work_slot_starvation,
    'extender-bodies-exceed-memory-limit': extender_bodies_exceed_memory_limit,
    'webhook-extender-deep-json-crash': webhook_extender_deep_json_crash,
}


def main():
    if len(sys.argv) == 2 and sys.argv[1] == '--list':
        print('\n'.join(CASES))
        return 0
    if len(sys.argv) != 3 or sys.argv[1] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    name, gpumux = sys.argv[1], os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix=f'gpumux-repro-{name}-') as tmp:
        work = os.path.join(tmp, name)
        shutil.copytree(os.path.join(HERE, name), work)
        try:
            CASES[name](gpumux, work)
        except Failure as e:
            print(f'FAIL {name}: {e}')
            return 1
    print(f'PASS {name}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
