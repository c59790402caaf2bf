#!/usr/bin/env python3
"""The node coordinator on one host, for real: `gpumux coordinator` with the fake GPU backend,
real PyTorch training examples (python/examples, on CPU) registered as sharing one GPU through
the task SDK, and faults: the coordinator killed and restarted, etcd stopped and restarted, a job
killed, malformed messages. Everything runs on loopback, on free ports, in a temporary folder,
and is killed by PID at the end.

  tests/coordinator/host_test.py GPUMUX_BINARY [unittest options]

Needs Debian's python3-torch (run with /usr/bin/python3) and, for the etcd case, etcd.
"""
import http.client
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "examples"
PROFILE = ROOT / "data" / "dl_profile_cpu_example.json"
GPUMUX = None  # set from argv
GPU = "GPU-00000000-0000-0000-0000-000000000001"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout=60.0, every=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            pass
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Process:
    """A child process whose output goes to a file; killed by PID (and its group) at the end."""

    def __init__(self, args, log, env=None):
        self.log_path = log
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def text(self):
        if not self.log.closed:
            self.log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")

    def alive(self):
        return self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


class Etcd:
    def __init__(self, folder):
        self.folder = folder
        self.client = free_port()
        self.peer = free_port()
        self.proc = None

    def start(self):
        url = f"http://127.0.0.1:{self.client}"
        self.proc = Process(["etcd", "--data-dir", str(self.folder / "etcd-data"), "--name", "test",
                             "--listen-client-urls", url, "--advertise-client-urls", url,
                             "--listen-peer-urls", f"http://127.0.0.1:{self.peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer}",
                             "--initial-cluster", f"test=http://127.0.0.1:{self.peer}"],
                            self.folder / "etcd.log")
        wait_for("etcd health", lambda: urllib.request.urlopen(url + "/health", timeout=1).status == 200,
                 timeout=30)

    def stop(self):
        if self.proc:
            self.proc.kill(signal.SIGTERM)
            self.proc = None


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=2)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(2)
        self.sock.connect(self.path)


class HostTest(unittest.TestCase):
    def setUp(self):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gpumux-host-"))
        self.procs = []
        self.etcd = None
        (self.dir / "gpus.csv").write_text(f"index,uuid,model,memory_mib\n0,{GPU},NVIDIA Fake,16384\n")
        self.port = free_port()
        self.socket = self.dir / "coordinator.sock"
        self.problems_before = self._problems()

    def tearDown(self):
        for p in self.procs:
            p.kill()
        if self.etcd:
            self.etcd.stop()
        if self._problems() > self.problems_before:
            for p in self.procs:
                sys.stderr.write(f"---- {p.log_path}\n{p.text()[-3000:]}\n")
        shutil.rmtree(self.dir, ignore_errors=True)

    def _problems(self):
        result = getattr(self._outcome, "result", None)
        return len(result.failures) + len(result.errors) if result else 0

    # ---- helpers
    def coordinator(self, store, log="coordinator.log"):
        p = Process([GPUMUX, "coordinator", "--node", "host-test", "--profile", str(PROFILE),
                     "--backend", "fake", "--gpus-file", str(self.dir / "gpus.csv"),
                     "--listen", f"127.0.0.1:{self.port}", "--socket", str(self.socket),
                     "--store", store, "--window-steps", "4", "--window-timeout", "20",
                     "--job-timeout", "4", "--report-every", "0.25"],
                    self.dir / log)
        self.procs.append(p)
        wait_for("the coordinator", lambda: self.get("/healthz", raw=True) == "ok\n", timeout=20)
        return p

    def job(self, example, name, batch, extra=()):
        env = dict(os.environ)
        env.update({"GPUMUX_COORDINATOR": f"unix://{self.socket}", "GPUMUX_GPU_UUIDS": GPU,
                    "GPUMUX_POD": f"default/{name}", "GPUMUX_CONTAINER": "train",
                    "PYTHONPATH": str(ROOT / "python"), "OMP_NUM_THREADS": "1"})
        p = Process(["/usr/bin/python3", str(EXAMPLES / f"{example}.py"), "--device", "cpu",
                     "--threads", "1", "--batch-size", str(batch), *extra],
                    self.dir / f"{name}.log", env=env)
        self.procs.append(p)
        return p

    def get(self, path, raw=False):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
            body = r.read().decode()
        return body if raw else json.loads(body)

    def post(self, path, body, unix=False):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if unix:  # as a job on the node: the coordinator knows the caller from the socket
            conn = UnixConnection(str(self.socket))
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            reply = json.loads(r.read().decode())
            conn.close()
            return r.status, reply
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read().decode())

    def gpu_state(self):
        for g in self.get("/v1/state")["gpus"]:
            if g["uuid"] == GPU:
                return g
        return None

    def tuned_with(self, n):
        """The GPU's state once it is tuned with n jobs that all run their target batch sizes."""
        def check():
            g = self.gpu_state()
            if not g or g["state"] != "tuned" or len(g["jobs"]) != n:
                return None
            if any(j["batch_size"] != j["target_batch"] for j in g["jobs"]):
                return None
            return g
        return check

    def stored_gpu_tuned(self):
        """True once the file store holds this GPU's record in state tuned."""
        try:
            keys = json.loads((self.dir / "store.json").read_text())["keys"]
            return any(key.endswith(f"/gpus/{GPU}") and json.loads(e["value"])["state"] == "tuned"
                       for key, e in keys.items())
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def steps_of(self, job):
        for j in (self.gpu_state() or {}).get("jobs", []):
            if j["job"] == job:
                return j["steps"]
        return -1

    # ---- cases
    def test_two_jobs_sharing_a_gpu_are_measured_tuned_and_adopt_their_batch_sizes(self):
        self.coordinator(f"file://{self.dir}/store.json")
        a = self.job("resnet", "resnet-a", 32)
        b = self.job("lstm", "lstm-b", 16)
        g = wait_for("both jobs tuned and running their batch sizes", self.tuned_with(2), timeout=90)
        self.assertGreaterEqual(g["measurement_windows"], 1)
        metrics = self.get("/metrics", raw=True)
        self.assertIn('gpumux_coordinator_job_slowdown{class="resnet"', metrics)
        self.assertIn('gpumux_coordinator_gpu_state{gpu="%s",state="tuned"}' % GPU, metrics)
        # The coordinator's log shows the measurement and the tuned sizes; the jobs adopted them.
        log = self.procs[0].text()
        self.assertIn("window measured gpu=%s set=lstm+resnet" % GPU, log)
        self.assertIn("state=tuned", log)
        for job in (a, b):
            self.assertTrue(job.alive(), job.text()[-2000:])
        # The store is written in the background: the observation arrives shortly.
        wait_for("the observation in the store", lambda: "/gpumux/observations/lstm+resnet/"
                 in (self.dir / "store.json").read_text(), timeout=10)

    def test_a_killed_coordinator_does_not_stop_the_jobs_and_resumes_from_the_store(self):
        co = self.coordinator(f"file://{self.dir}/store.json")
        self.job("resnet", "resnet-a", 32)
        self.job("neumf", "neumf-b", 64)
        wait_for("both jobs tuned", self.tuned_with(2), timeout=90)
        # The store is written in the background: kill only once it holds the tuned state (under
        # a sanitizer the write can trail the state the API shows by a second).
        wait_for("the tuned state in the store", self.stored_gpu_tuned, timeout=10)
        co.kill()  # SIGKILL: nothing flushed at exit
        time.sleep(1.5)
        for p in self.procs[1:]:
            self.assertTrue(p.alive(), "a job died with its coordinator:\n" + p.text()[-2000:])
        self.coordinator(f"file://{self.dir}/store.json", log="coordinator2.log")
        g = wait_for("the restarted coordinator serving both jobs, tuned", self.tuned_with(2), timeout=60)
        self.assertEqual(g["tuning_sessions"], 0, "the stored assignment should be kept, not re-tuned")
        self.assertIn("restored from the store jobs=2 gpus=1", self.procs[-1].text())

    def test_a_killed_job_leaves_and_its_gpu_retunes(self):
        self.coordinator(f"file://{self.dir}/store.json")
        self.job("resnet", "resnet-a", 32)
        victim = self.job("lstm", "lstm-b", 16)
        self.job("neumf", "neumf-c", 64)
        wait_for("three jobs tuned", self.tuned_with(3), timeout=120)
        sessions = self.gpu_state()["tuning_sessions"]
        victim.kill()
        g = wait_for("the GPU re-tuned for the two jobs left", self.tuned_with(2), timeout=60)
        self.assertGreater(g["tuning_sessions"], sessions)
        self.assertIn('job left job=default/lstm-b/train reason="stopped reporting', self.procs[0].text())

    def test_malformed_messages_get_a_clear_error_and_disturb_no_other_job(self):
        self.coordinator(f"file://{self.dir}/store.json")
        self.job("resnet", "resnet-a", 32)
        wait_for("the job registered", lambda: self.steps_of("default/resnet-a/train") > 0, timeout=60)
        for body, part in ((b"{nope", "not JSON"), ({"job": "x", "class": "resnet", "batch_size": "big"}, "batch_size"),
                           ({"job": "default/resnet-a/train", "steps": [[32, -1]]}, "steps")):
            status, reply = self.post("/v1/register" if isinstance(body, dict) and "class" in body else "/v1/report", body,
                                      unix=True)
            self.assertEqual(status, 400, reply)
            self.assertIn(part, reply["error"])
        # Over TCP the caller is nobody in particular: it may not report for the job.
        status, reply = self.post("/v1/report", {"job": "default/resnet-a/train", "steps": [[32, 9.0]]})
        self.assertEqual(status, 403, reply)
        self.assertIn("a TCP peer", reply["error"])
        n = self.steps_of("default/resnet-a/train")
        wait_for("the job still reporting", lambda: self.steps_of("default/resnet-a/train") > n, timeout=30)

    def test_with_the_hook_ledger_a_job_needs_a_live_reservation_and_leaves_when_it_is_gone(self):
        # A ledger as the runtime hook writes it: GPU 0 reserved by a live holder (a sleeping
        # child of this test, identified by pid and start time as the hook does).
        holder = subprocess.Popen(["sleep", "600"])
        self.addCleanup(holder.kill)
        start = pathlib.Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        state = self.dir / "hook-state"
        state.mkdir()
        (state / "reservations.json").write_text(json.dumps({"version": 1, "reservations": [{
            "container": "c" * 64, "gpus": [0], "since": "2026-11-24T00:00:00Z", "since_unix": 0,
            "state": "running", "holder_pid": holder.pid, "holder_start_time": int(start)}]}))
        # This test process plays the job: a fake /proc in which its cgroup names a container.
        proc = self.dir / "proc"
        (proc / str(os.getpid())).mkdir(parents=True)
        cgroup = proc / str(os.getpid()) / "cgroup"
        cgroup.write_text("0::/system.slice/runc-" + "c" * 64 + ".scope\n")
        p = Process([GPUMUX, "coordinator", "--node", "host-test", "--profile", "cpu-example",
                     "--backend", "fake", "--gpus-file", str(self.dir / "gpus.csv"),
                     "--members", "ledger", "--hook-state-dir", str(state),
                     "--listen", f"127.0.0.1:{self.port}", "--socket", str(self.socket),
                     "--proc-root", str(proc),
                     "--store", f"file://{self.dir}/store.json"], self.dir / "coordinator.log")
        self.procs.append(p)
        wait_for("the coordinator", lambda: self.get("/healthz", raw=True) == "ok\n", timeout=20)
        status, reply = self.post("/v1/register", {"job": "j", "class": "neumf", "batch_size": 64,
                                                   "gpus": ["GPU-00000000-0000-0000-0000-000000000002"]},
                                  unix=True)
        self.assertEqual(status, 400, reply)  # not a GPU of this node
        job = {"job": "j", "class": "neumf", "batch_size": 64, "gpus": [GPU]}
        status, reply = self.post("/v1/register", job)
        self.assertEqual(status, 403, reply)  # over TCP: not identified
        cgroup.write_text("0::/system.slice/runc-" + "d" * 64 + ".scope\n")
        status, reply = self.post("/v1/register", job, unix=True)
        self.assertEqual(status, 403, reply)  # another container: the GPU is not its reservation
        self.assertIn("is not reserved by a process of uid", reply["error"])
        cgroup.write_text("0::/system.slice/runc-" + "c" * 64 + ".scope\n")
        status, reply = self.post("/v1/register", job, unix=True)
        self.assertEqual(status, 200, reply)
        self.assertEqual(self.steps_of("j"), 0)
        holder.kill()
        holder.wait()
        wait_for("the job gone with its container's reservation", lambda: self.gpu_state() is None, timeout=10)
        self.assertIn("no live container reserves its GPU", p.text())

    @unittest.skipUnless(shutil.which("etcd"), "etcd (Debian etcd-server) is not installed")
    def test_with_etcd_the_coordinator_keeps_serving_while_etcd_is_down_and_catches_up(self):
        self.etcd = Etcd(self.dir)
        self.etcd.start()
        store = f"etcd://127.0.0.1:{self.etcd.client}"
        self.coordinator(store)
        self.job("resnet", "resnet-a", 32)
        self.job("lstm", "lstm-b", 16)
        wait_for("both jobs tuned", self.tuned_with(2), timeout=90)
        self.etcd.stop()
        n = self.steps_of("default/resnet-a/train")
        wait_for("reports served while etcd is down", lambda: self.steps_of("default/resnet-a/train") > n + 5, timeout=30)
        wait_for("the store reported down", lambda: 'gpumux_coordinator_store_up 0' in self.get("/metrics", raw=True), timeout=30)
        self.etcd.start()
        wait_for("the queue written to etcd", lambda: 'gpumux_coordinator_store_pending_writes 0' in self.get("/metrics", raw=True)
                 and 'gpumux_coordinator_store_up 1' in self.get("/metrics", raw=True), timeout=30)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    GPUMUX = sys.argv.pop(1)
    unittest.main(verbosity=2)
