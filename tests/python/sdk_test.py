#!/usr/bin/env python3
"""The task SDK (python/gpumux) against a fake coordinator served here, over TCP and over a
unix socket: registration, batched reports, a new batch size, re-registration after a 404,
malformed and refusing replies, a hung coordinator, leaving, and the no-op without any
coordinator. Standard library only.

  python3 tests/python/sdk_test.py [unittest options]      (ctest: python.sdk)
"""
import http.server
import json
import logging
import os
import pathlib
import socket
import socketserver
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import gpumux  # noqa: E402
from gpumux import transport  # noqa: E402

FAST = dict(retry_first_s=0.02, retry_max_s=0.1, timeout_s=0.5)


class FakeCoordinator:
    """Serves the job protocol from memory and records every request with its status. `answer`
    decides each reply: by default register/report answer {batch_size: self.batch or the one
    the job registered with, state: tuned, report_every_s: 0.02}, leave answers {}."""

    def __init__(self, unix_path=None, port=0):
        self.requests = []
        self.lock = threading.Lock()
        self.batch = None          # the batch size to answer; None = the job's registered one
        self.registered = {}       # job -> the batch size it registered with
        self.answer = self.default_answer
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def address_string(self):  # a unix peer has no (host, port)
                return "test"

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw or b"{}")
                status, reply = fake.answer(self.path, body)
                with fake.lock:
                    fake.requests.append((self.path, body, status))
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

        if unix_path:
            class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True
            self.server = Server(unix_path, Handler)
            self.url = "unix://" + unix_path
        else:
            class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
                daemon_threads = True
                allow_reuse_address = True
            self.server = Server(("127.0.0.1", port), Handler)
            self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,),
                                       daemon=True)
        self.thread.start()

    def default_answer(self, path, body):
        if path == "/v1/register":
            self.registered[body.get("job")] = body.get("batch_size")
        if path in ("/v1/register", "/v1/report"):
            return 200, {"batch_size": self.batch or self.registered.get(body.get("job"), 1),
                         "state": "tuned", "report_every_s": 0.02}
        return 200, {}

    def all(self):
        with self.lock:
            return list(self.requests)

    def paths(self):
        return [p for p, _, _ in self.all()]

    def bodies(self, path):
        return [b for p, b, _ in self.all() if p == path]

    def reported_steps(self):
        """The steps of every report the fake accepted (200)."""
        return [s for p, b, status in self.all() if p == "/v1/report" and status == 200
                for s in b.get("steps", [])]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def wait_for(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.005)
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SdkTestCase(unittest.TestCase):
    def setUp(self):
        self.env = dict(os.environ)
        for k in list(os.environ):
            if k.startswith("GPUMUX_") or k == "NVIDIA_VISIBLE_DEVICES":
                del os.environ[k]
        os.environ["GPUMUX_GPU_UUIDS"] = "GPU-a"
        self.folder = tempfile.TemporaryDirectory(prefix="gpumux-sdk-test-")
        self.addCleanup(self.folder.cleanup)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)

    def fake(self, **kw):
        f = FakeCoordinator(**kw)
        self.addCleanup(f.stop)
        return f

    def session(self, url, batch=32, **kw):
        options = dict(FAST)
        options.update(kw)
        s = gpumux.Session("resnet", batch, coordinator=url, **options)
        self.addCleanup(s.close)
        return s

    def steps(self, s, n, batch=None):
        for _ in range(n):
            with s.step(batch):
                pass


class RegistrationAndReports(SdkTestCase):
    def test_it_registers_in_the_background_with_what_the_environment_says(self):
        os.environ.update({"GPUMUX_POD": "ns/p", "GPUMUX_CONTAINER": "train",
                           "GPUMUX_GPU_MEM_MIB": "8192"})
        fake = self.fake()
        s = self.session(fake.url, min_batch=16, max_batch=128, noise_scale=250.0)
        self.assertTrue(wait_for(lambda: s.registered))
        register = fake.bodies("/v1/register")[0]
        self.assertEqual(register, {"job": "ns/p/train", "class": "resnet", "batch_size": 32,
                                    "gpus": ["GPU-a"], "pid": os.getpid(), "min_batch": 16,
                                    "max_batch": 128, "memory_mib": 8192, "noise_scale": 250.0})
        self.assertEqual(s.state, "tuned")

    def test_steps_are_sent_in_batches_as_batch_size_and_seconds_pairs(self):
        fake = self.fake()
        s = self.session(fake.url)
        self.steps(s, 200)
        self.assertTrue(wait_for(lambda: len(fake.reported_steps()) == 200))
        reports = [b for b in fake.bodies("/v1/report") if b["steps"]]
        self.assertLess(len(reports), 200, "steps must be batched, not sent one by one")
        for batch, seconds in fake.reported_steps():
            self.assertEqual(batch, 32)
            self.assertGreaterEqual(seconds, 0.0)
            self.assertLess(seconds, 1.0)
        self.assertEqual(s.steps, 200)

    def test_an_empty_report_is_still_sent_as_the_heartbeat(self):
        fake = self.fake()
        self.session(fake.url)
        self.assertTrue(wait_for(lambda: len(fake.bodies("/v1/report")) >= 3))
        self.assertEqual(fake.bodies("/v1/report")[0]["steps"], [])

    def test_a_new_batch_size_is_learned_and_recorded_once_the_job_adopts_it(self):
        fake = self.fake()
        s = self.session(fake.url)
        fake.batch = 48
        self.assertTrue(wait_for(lambda: s.batch_size == 48))
        self.steps(s, 3)  # not adopted yet: still running 32
        self.assertEqual(s.adopt(), 48)
        self.steps(s, 2)
        self.steps(s, 1, batch=64)  # a job may also say the size each step
        self.assertTrue(wait_for(lambda: len(fake.reported_steps()) == 6))
        self.assertEqual([b for b, _ in fake.reported_steps()], [32, 32, 32, 48, 48, 64])
        self.assertEqual(s.running_batch, 64)

    def test_a_batch_size_outside_the_jobs_bounds_is_clamped(self):
        fake = self.fake()
        fake.batch = 1024
        s = self.session(fake.url, min_batch=16, max_batch=256)
        self.assertTrue(wait_for(lambda: s.batch_size == 256))
        fake.batch = 2
        self.assertTrue(wait_for(lambda: s.batch_size == 16))

    def test_it_works_over_a_unix_socket(self):
        fake = self.fake(unix_path=os.path.join(self.folder.name, "c.sock"))
        fake.batch = 40
        s = self.session(fake.url)
        self.steps(s, 5)
        self.assertTrue(wait_for(lambda: len(fake.reported_steps()) == 5))
        self.assertEqual(s.batch_size, 40)
        s.close()
        self.assertEqual(fake.paths()[-1], "/v1/leave")

    def test_the_coordinator_is_found_through_gpumux_coordinator(self):
        fake = self.fake(unix_path=os.path.join(self.folder.name, "env.sock"))
        os.environ["GPUMUX_COORDINATOR"] = fake.url
        s = gpumux.Session("lstm", 8, **FAST)
        self.addCleanup(s.close)
        self.assertTrue(wait_for(lambda: s.registered))
        self.assertEqual(fake.bodies("/v1/register")[0]["class"], "lstm")

    def test_a_404_makes_it_register_again_without_losing_steps(self):
        fake = self.fake()
        s = self.session(fake.url)
        self.assertTrue(wait_for(lambda: s.registered))
        forgot = threading.Event()

        def forget_once(path, body):
            if path == "/v1/report" and not forgot.is_set():
                forgot.set()
                return 404, {"error": "job: not registered"}
            return fake.default_answer(path, body)
        self.steps(s, 5)
        fake.answer = forget_once
        self.assertTrue(wait_for(lambda: fake.paths().count("/v1/register") == 2))
        self.steps(s, 5)
        self.assertTrue(wait_for(lambda: len(fake.reported_steps()) >= 10))
        self.assertEqual(len(fake.reported_steps()), 10)

    def test_close_sends_the_last_steps_and_leaves_and_may_be_called_twice(self):
        fake = self.fake()
        fake.answer = lambda path, body: (200, {"batch_size": 32, "report_every_s": 600})
        s = self.session(fake.url)
        self.assertTrue(wait_for(lambda: s.registered))
        self.steps(s, 7)  # the next report would be in 10 minutes: only close() sends them
        s.close()
        s.close()
        self.assertEqual(fake.paths()[-2:], ["/v1/report", "/v1/leave"])
        self.assertEqual(len(fake.reported_steps()), 7)
        self.assertEqual(fake.bodies("/v1/leave"), [{"job": s.job_id}])

    def test_a_session_used_as_a_context_manager_leaves_at_the_end(self):
        fake = self.fake()
        with gpumux.Session("neumf", 256, coordinator=fake.url, **FAST) as s:
            self.steps(s, 2)
        self.assertEqual(fake.paths()[-1], "/v1/leave")
        self.assertEqual(len(fake.reported_steps()), 2)

    def test_a_very_short_job_still_reports_its_steps_when_it_closes(self):
        fake = self.fake()
        s = gpumux.Session("resnet", 32, coordinator=fake.url, **FAST)
        self.steps(s, 3)
        s.close()
        self.assertIn("/v1/leave", fake.paths())
        self.assertEqual(len(fake.reported_steps()), 3)


class Timing(SdkTestCase):
    def test_step_records_its_wall_time_and_data_its_host_phase(self):
        s = gpumux.Session("resnet", 32, enabled=False)
        with s.data():  # before the step: counted with it
            time.sleep(0.01)
        with s.step():
            with s.data():
                time.sleep(0.01)
            time.sleep(0.01)
        self.assertGreaterEqual(s.last_data_s, 0.02)
        self.assertGreaterEqual(s.last_step_s, 0.02)
        self.assertLess(s.last_step_s, s.last_data_s + 1.0)
        with s.step():
            pass
        self.assertEqual(s.last_data_s, 0.0)
        self.assertEqual(s.steps, 2)

    def test_a_step_that_raises_is_not_recorded(self):
        fake = self.fake()
        s = self.session(fake.url)
        with self.assertRaises(RuntimeError):
            with s.step(64):
                raise RuntimeError("CUDA out of memory")
        self.steps(s, 1, batch=32)
        s.close()
        self.assertEqual([b for b, _ in fake.reported_steps()], [32])
        self.assertEqual(s.steps, 1)

    def test_record_takes_steps_timed_by_the_job(self):
        fake = self.fake()
        s = self.session(fake.url)
        s.record(0.25)
        s.record(0.5, batch_size=64)
        s.close()
        self.assertEqual(fake.reported_steps(), [[32, 0.25], [64, 0.5]])


class Faults(SdkTestCase):
    def test_malformed_replies_change_nothing_and_the_reporter_carries_on(self):
        fake = self.fake()
        replies = [b"<html>not json", b"[1, 2]", {"batch_size": "big"}, {"batch_size": True},
                   {"batch_size": 0}, {"batch_size": -3}, {"batch_size": 1.5},
                   {"report_every_s": "often", "state": 7}, {"report_every_s": -1}]
        served = []

        def answer(path, body):
            if path != "/v1/report":
                return fake.default_answer(path, body)
            if len(served) < len(replies):
                served.append(replies[len(served)])
                return 200, served[-1]
            return 200, {"batch_size": 24, "report_every_s": 0.02, "state": "measuring"}
        fake.answer = answer
        with self.assertLogs("gpumux", level="WARNING") as logs:
            s = self.session(fake.url)
            self.steps(s, 3)
            self.assertTrue(wait_for(lambda: s.batch_size == 24))
        self.assertEqual(s.state, "measuring")
        self.assertEqual(s.report_every_s, 0.02)
        self.assertTrue(any("malformed reply" in m for m in logs.output))
        self.assertTrue(any("batch_size 'big'" in m for m in logs.output))

    def test_a_refused_registration_is_logged_once_and_retried(self):
        fake = self.fake()
        refuse = threading.Event()
        refuse.set()

        def answer(path, body):
            if path == "/v1/register" and refuse.is_set():
                return 400, {"error": "class: too long"}
            return fake.default_answer(path, body)
        fake.answer = answer
        with self.assertLogs("gpumux", level="WARNING") as logs:
            s = self.session(fake.url)
            self.assertTrue(wait_for(lambda: fake.paths().count("/v1/register") >= 3))
            self.assertFalse(s.registered)
            self.assertIn("class: too long", s.last_error)
            self.steps(s, 3)
            refuse.clear()
            self.assertTrue(wait_for(lambda: s.registered))
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("HTTP 400 class: too long", logs.output[0])

    def test_without_a_coordinator_it_is_a_quiet_no_op_that_closes_at_once(self):
        for url in ("http://127.0.0.1:%d" % free_port(),
                    "unix://" + os.path.join(self.folder.name, "nobody.sock")):
            with self.subTest(url=url), self.assertLogs("gpumux", level="INFO") as logs:
                s = gpumux.Session("resnet", 32, coordinator=url, **FAST)
                self.steps(s, 1000)
                self.assertTrue(wait_for(lambda: s.last_error is not None))
                time.sleep(0.2)  # several retries
                t0 = time.monotonic()
                s.close()
                self.assertLess(time.monotonic() - t0, 1.0, "close() waited on a coordinator")
                self.assertEqual(s.batch_size, 32)
                self.assertFalse(s.registered)
                self.assertEqual(len(logs.output), 1, logs.output)  # one line per outage
                self.assertIn("no coordinator at " + url, logs.output[0])
                self.assertTrue(logs.output[0].startswith("WARNING"))

    def test_a_coordinator_that_starts_later_is_found(self):
        port = free_port()
        s = self.session("http://127.0.0.1:%d" % port)
        self.assertTrue(wait_for(lambda: s.last_error is not None))
        self.steps(s, 4)
        fake = self.fake(port=port)
        fake.batch = 16
        with self.assertLogs("gpumux", level="INFO") as logs:
            self.assertTrue(wait_for(lambda: s.batch_size == 16))
        self.assertTrue(any("reachable again" in m for m in logs.output))
        self.assertTrue(wait_for(lambda: len(fake.reported_steps()) == 4))

    def test_a_hung_coordinator_never_blocks_the_training_loop_or_close(self):
        hung = socket.socket()
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # connections are accepted by the kernel and never answered
        self.addCleanup(hung.close)
        s = gpumux.Session("resnet", 32, coordinator="http://127.0.0.1:%d" % hung.getsockname()[1],
                           timeout_s=1.0, retry_first_s=0.02, retry_max_s=0.05)
        worst = 0.0
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            with s.step():
                pass
            worst = max(worst, time.perf_counter() - t0)
        t0 = time.monotonic()
        s.close()
        self.assertLess(time.monotonic() - t0, 2 * 1.0 + 1.5)
        self.assertLess(worst, 0.5, "a step waited on the network (1 s timeout)")
        self.assertEqual(s.batch_size, 32)

    def test_gpumux_disable_turns_it_off(self):
        fake = self.fake()
        os.environ["GPUMUX_DISABLE"] = "1"
        os.environ["GPUMUX_COORDINATOR"] = fake.url
        s = gpumux.Session("resnet", 32)
        self.assertFalse(s.enabled)
        self.steps(s, 3)
        self.assertEqual(s.steps, 3)
        s.close()
        time.sleep(0.05)
        self.assertEqual(fake.all(), [])

    def test_a_bad_coordinator_address_is_reported_and_the_job_runs_without_it(self):
        os.environ["GPUMUX_COORDINATOR"] = "ftp://nowhere"
        with self.assertLogs("gpumux", level="WARNING") as logs:
            s = gpumux.Session("resnet", 32)
        self.assertFalse(s.enabled)
        self.assertIn("unix:///PATH or http://HOST:PORT", logs.output[0])
        self.steps(s, 1)
        s.close()

    def test_bad_arguments_are_the_callers_error(self):
        for batch in (0, -1, 2.5, "8", True):
            with self.subTest(batch=batch), self.assertRaises(ValueError):
                gpumux.Session("resnet", batch, enabled=False)
        with self.assertRaises(ValueError):
            gpumux.Session("", 8, enabled=False)


class Environment(SdkTestCase):
    def test_the_job_id_is_pod_and_container_else_host_and_pid(self):
        os.environ.update({"GPUMUX_POD": "ns/p", "GPUMUX_CONTAINER": "c"})
        self.assertEqual(gpumux.default_job_id(), "ns/p/c")
        del os.environ["GPUMUX_CONTAINER"]
        self.assertEqual(gpumux.default_job_id(), "host/%s/%d" % (socket.gethostname(), os.getpid()))

    def test_gpus_come_from_gpumux_gpu_uuids_else_uuid_lists_in_nvidia_visible_devices(self):
        cases = [({"GPUMUX_GPU_UUIDS": "GPU-a,GPU-b"}, ["GPU-a", "GPU-b"]),
                 ({"GPUMUX_GPU_UUIDS": "GPU-a", "NVIDIA_VISIBLE_DEVICES": "GPU-z"}, ["GPU-a"]),
                 ({"NVIDIA_VISIBLE_DEVICES": "GPU-x, MIG-y"}, ["GPU-x", "MIG-y"]),
                 ({"NVIDIA_VISIBLE_DEVICES": "0,1"}, []),
                 ({"NVIDIA_VISIBLE_DEVICES": "all"}, []),
                 ({}, [])]
        for env, want in cases:
            with self.subTest(env=env):
                os.environ.pop("GPUMUX_GPU_UUIDS", None)
                os.environ.pop("NVIDIA_VISIBLE_DEVICES", None)
                os.environ.update(env)
                self.assertEqual(gpumux.default_gpus(), want)

    def test_coordinator_urls(self):
        good = {"unix:///run/gpumux/coordinator.sock": ("unix", "/run/gpumux/coordinator.sock"),
                "http://127.0.0.1:9403": ("tcp", ("127.0.0.1", 9403)),
                "http://localhost:80/": ("tcp", ("localhost", 80)),
                "http://node-1": ("tcp", ("node-1", 9403)),
                "http://[::1]:9500": ("tcp", ("::1", 9500))}
        for url, want in good.items():
            with self.subTest(url=url):
                self.assertEqual(transport.parse_url(url), want)
        for url in ("", "unix://relative.sock", "http://", "http://h:0", "http://h:99999",
                    "http://h:port", "https://h:1", "http://h:1/v1", "tcp://h:1"):
            with self.subTest(url=url), self.assertRaises(ValueError):
                transport.parse_url(url)

    def test_without_gpumux_coordinator_the_default_socket_else_the_default_address(self):
        endpoint = transport.Endpoint(None)
        want = ("unix://" + gpumux.DEFAULT_SOCKET if os.path.exists(gpumux.DEFAULT_SOCKET)
                else gpumux.DEFAULT_ADDRESS)
        self.assertEqual(endpoint.describe(), want)
        self.assertFalse(endpoint.configured)


if __name__ == "__main__":
    unittest.main(verbosity=2)
