#!/usr/bin/env python3
"""The task SDK (python/gpumux) against a fake coordinator served here, over TCP and over a
unix socket: registration, batched reports, a new batch size, re-registration after a 404, a
malformed reply, leaving, and the no-op without any coordinator. Standard library only.

  python3 tests/python/sdk_test.py
"""
import http.server
import json
import os
import pathlib
import socketserver
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import gpumux  # noqa: E402


class FakeCoordinator:
    """Records every request; answers from `self.reply(path, body)`."""

    def __init__(self, unix_path=None):
        self.requests = []
        self.batch = None
        self.forget_next_report = False
        self.garbage = False
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def address_string(self):
                return "test"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                fake.requests.append((self.path, body))
                status, reply = fake.answer(self.path, body)
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
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
            self.server = Server(("127.0.0.1", 0), Handler)
            self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path, body):
        if self.garbage:
            return 200, b"<html>not json"
        if path == "/v1/report" and self.forget_next_report:
            self.forget_next_report = False
            return 404, {"error": "job is not registered"}
        if path in ("/v1/register", "/v1/report"):
            return 200, {"batch_size": self.batch or body.get("batch_size", 1), "state": "tuned",
                         "report_every_s": 0.05}
        return 200, {}

    def paths(self):
        return [p for p, _ in self.requests]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def wait_for(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


class SdkTest(unittest.TestCase):
    def setUp(self):
        self.env = dict(os.environ)
        for k in ("GPUMUX_DISABLE", "GPUMUX_POD", "GPUMUX_CONTAINER", "NVIDIA_VISIBLE_DEVICES"):
            os.environ.pop(k, None)
        os.environ["GPUMUX_GPU_UUIDS"] = "GPU-a"

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)

    def session(self, fake, **kw):
        os.environ["GPUMUX_COORDINATOR"] = fake.url
        s = gpumux.Session("resnet", 32, **kw)
        self.addCleanup(s.close)
        return s

    def test_steps_are_reported_in_batches_and_a_new_batch_size_is_learned(self):
        fake = FakeCoordinator()
        self.addCleanup(fake.stop)
        fake.batch = 48
        s = self.session(fake)
        for _ in range(20):
            with s.step():
                pass
        self.assertTrue(wait_for(lambda: s.batch_size == 48))
        self.assertTrue(wait_for(lambda: sum(len(b.get("steps", [])) for p, b in fake.requests
                                             if p == "/v1/report") == 20))
        register = [b for p, b in fake.requests if p == "/v1/register"][0]
        self.assertEqual(register["class"], "resnet")
        self.assertEqual(register["gpus"], ["GPU-a"])
        self.assertEqual(register["batch_size"], 32)
        reports = [b for p, b in fake.requests if p == "/v1/report" and b["steps"]]
        self.assertLess(len(reports), 20, "steps must be batched, not sent one by one")
        self.assertTrue(all(step[0] == 32 for r in reports for step in r["steps"]))

    def test_it_works_over_a_unix_socket_and_uses_the_pod_and_container_as_the_job_id(self):
        folder = tempfile.mkdtemp()
        fake = FakeCoordinator(unix_path=os.path.join(folder, "c.sock"))
        self.addCleanup(fake.stop)
        os.environ["GPUMUX_POD"], os.environ["GPUMUX_CONTAINER"] = "ns/p", "train"
        s = self.session(fake)
        with s.step():
            pass
        self.assertTrue(wait_for(lambda: "/v1/report" in fake.paths()))
        self.assertEqual(fake.requests[0][1]["job"], "ns/p/train")

    def test_a_404_makes_it_register_again_without_losing_steps(self):
        fake = FakeCoordinator()
        self.addCleanup(fake.stop)
        s = self.session(fake)
        self.assertTrue(wait_for(lambda: "/v1/report" in fake.paths()))
        fake.forget_next_report = True
        for _ in range(5):
            with s.step():
                pass
        self.assertTrue(wait_for(lambda: fake.paths().count("/v1/register") == 2))
        self.assertTrue(wait_for(lambda: sum(len(b.get("steps", [])) for p, b in fake.requests
                                             if p == "/v1/report") >= 5))

    def test_a_malformed_reply_does_not_stop_training_or_change_the_batch_size(self):
        fake = FakeCoordinator()
        self.addCleanup(fake.stop)
        fake.garbage = True
        s = self.session(fake)
        self.assertTrue(wait_for(lambda: len(fake.requests) >= 2))
        with s.step():
            pass
        self.assertEqual(s.batch_size, 32)

    def test_close_sends_the_last_steps_and_leaves(self):
        fake = FakeCoordinator()
        self.addCleanup(fake.stop)
        s = self.session(fake)
        self.assertTrue(wait_for(lambda: "/v1/register" in fake.paths()))
        with s.step():
            pass
        s.close()
        self.assertEqual(fake.paths()[-1], "/v1/leave")

    def test_without_a_coordinator_it_is_a_cheap_no_op(self):
        os.environ["GPUMUX_COORDINATOR"] = "http://127.0.0.1:9"  # discard port: refused
        s = gpumux.Session("resnet", 32)
        t0 = time.perf_counter()
        for _ in range(1000):
            with s.step():
                pass
        elapsed = time.perf_counter() - t0
        s.close()
        self.assertEqual(s.batch_size, 32)
        self.assertLess(elapsed, 5.0)  # a gross bound: the loop never waits on the network

    def test_gpumux_disable_turns_it_off(self):
        os.environ["GPUMUX_DISABLE"] = "1"
        s = gpumux.Session("resnet", 32)
        self.assertFalse(s.enabled)
        with s.step():
            pass
        s.close()

    def test_a_bad_coordinator_address_is_reported_and_the_job_runs_without_it(self):
        os.environ["GPUMUX_COORDINATOR"] = "ftp://nowhere"
        with self.assertLogs("gpumux", level="WARNING"):
            s = gpumux.Session("resnet", 32)
        self.assertFalse(s.enabled)


if __name__ == "__main__":
    unittest.main(verbosity=2)
