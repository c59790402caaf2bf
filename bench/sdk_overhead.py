#!/usr/bin/env python3
"""The task SDK's added cost per training step (issue 15's goal: under 50 us), measured against
the same loop without the SDK.

  /usr/bin/python3 bench/sdk_overhead.py [--gpumux build/gpumux] [--steps 200000]
                                         [--work-us 0] [--repeats 5] [--report-every 0.25]

Each setting runs `steps` steps whose body is `work_us` of busy work (0: an empty step), and
prints its wall time per step and the difference from the loop without the SDK (median of
--repeats runs; the settings take turns so that drift in the machine's load hits all alike):
  no SDK                  for _ in range(n): body()
  SDK disabled            GPUMUX_DISABLE=1: with session.step(): body()
  no coordinator          the SDK retrying a refused address in the background
  fake coordinator        a stand-in served by a child process on a unix socket, asking for a
                          report every --report-every seconds (the real default is 1 s: more
                          reports than in production, so the reporter's share is not hidden)
  fake, step + data       as above with `with session.data():` nested, as the examples do
  gpumux coordinator      the real daemon (--gpumux), on loopback, same report interval
The reporter thread's work (JSON of up to 10,000 steps per report, one HTTP exchange) runs
during the loop and takes the GIL from it: it is part of the figures.
"""
import argparse
import http.server
import json
import logging
import os
import pathlib
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import gpumux  # noqa: E402


def serve_fake(path, report_every_s):
    """The child process: a minimal coordinator on a unix socket (answers, remembers nothing)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def address_string(self):
            return "bench"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            reply = {}
            if self.path in ("/v1/register", "/v1/report"):
                reply = {"batch_size": 32, "state": "solo", "report_every_s": report_every_s}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True
    Server(path, Handler).serve_forever()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def make_body(work_us):
    if work_us <= 0:
        return None
    work = work_us / 1e6
    pc = time.perf_counter

    def body():
        end = pc() + work
        while pc() < end:
            pass
    return body


def loop(steps, body, session=None, data=False):
    """Wall seconds of `steps` steps; the same loop shape with and without the SDK."""
    pc = time.perf_counter
    t0 = pc()
    if session is None:
        if body is None:
            for _ in range(steps):
                pass
        else:
            for _ in range(steps):
                body()
    elif not data:
        step = session.step
        if body is None:
            for _ in range(steps):
                with step():
                    pass
        else:
            for _ in range(steps):
                with step():
                    body()
    else:
        step, data_phase = session.step, session.data
        for _ in range(steps):
            with step():
                with data_phase():
                    pass
                if body is not None:
                    body()
    return pc() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpumux", help="a gpumux binary: also measure against the real coordinator")
    p.add_argument("--steps", type=int, default=200000)
    p.add_argument("--work-us", type=float, default=0.0, help="busy work per step (default 0)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--report-every", type=float, default=0.25,
                   help="report interval the coordinators ask for (default %(default)s s)")
    p.add_argument("--serve-fake", help=argparse.SUPPRESS)  # the child process's mode
    a = p.parse_args()
    if a.serve_fake:
        return serve_fake(a.serve_fake, a.report_every)
    if a.steps < 1 or a.repeats < 1:
        p.error("--steps and --repeats must be >= 1")

    logging.getLogger("gpumux").setLevel(logging.ERROR)  # the refused setting's outage line
    for k in [k for k in os.environ if k.startswith("GPUMUX_")]:
        del os.environ[k]
    os.environ["GPUMUX_GPU_UUIDS"] = "GPU-bench-0"
    folder = tempfile.TemporaryDirectory(prefix="gpumux-sdk-bench-")
    children = []
    settings = [("no SDK", None, False),
                ("SDK disabled (GPUMUX_DISABLE=1)", dict(enabled=False), False),
                ("SDK, no coordinator (refused)",
                 dict(coordinator="http://127.0.0.1:%d" % free_port()), False)]
    try:
        sock = os.path.join(folder.name, "fake.sock")
        children.append(subprocess.Popen([sys.executable, __file__, "--serve-fake", sock,
                                          "--report-every", str(a.report_every)]))
        if not wait_until(lambda: os.path.exists(sock)):
            sys.exit("sdk_overhead: the fake coordinator did not start")
        settings.append(("SDK, fake coordinator (unix socket)", dict(coordinator="unix://" + sock),
                         False))
        settings.append(("SDK, fake coordinator, step + data", dict(coordinator="unix://" + sock),
                         True))
        if a.gpumux:
            port = free_port()
            children.append(subprocess.Popen(
                [a.gpumux, "coordinator", "--node", "bench", "--socket", "off",
                 "--listen", "127.0.0.1:%d" % port, "--backend", "none", "--members", "jobs",
                 "--store", "file://%s/store.json" % folder.name,
                 "--report-every", str(a.report_every)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            url = "http://127.0.0.1:%d" % port
            if not wait_until(lambda: urllib.request.urlopen(url + "/healthz", timeout=1).status == 200):
                sys.exit("sdk_overhead: %s coordinator did not start" % a.gpumux)
            settings.append(("SDK, gpumux coordinator (loopback)", dict(coordinator=url), False))

        body = make_body(a.work_us)
        loop(min(a.steps, 20000), body)  # warm the interpreter
        runs = {name: [] for name, _, _ in settings}
        reports = {}
        for _ in range(a.repeats):
            for name, options, data in settings:
                session = None
                if options is not None:
                    session = gpumux.Session("resnet", 32, **options)
                    if "coordinator" in options and "refused" not in name:
                        if not wait_until(lambda: session.registered, timeout=10):
                            sys.exit("sdk_overhead: %s: the session did not register" % name)
                runs[name].append(loop(a.steps, body, session, data))
                if session is not None:
                    session.close()
                    reports[name] = session.last_error
    finally:
        for c in children:
            c.terminate()
            c.wait()
        folder.cleanup()

    base = statistics.median(runs["no SDK"]) / a.steps * 1e6
    print("task SDK overhead: %d steps of %g us busy work, median of %d runs, python %s, "
          "report every %g s" % (a.steps, a.work_us, a.repeats, sys.version.split()[0],
                                 a.report_every))
    print("  %-38s %12s %12s" % ("setting", "us/step", "added us"))
    for name, _, _ in settings:
        us = statistics.median(runs[name]) / a.steps * 1e6
        spread = (max(runs[name]) - min(runs[name])) / a.steps * 1e6
        print("  %-38s %12.3f %+12.3f   (runs spread %.3f us)" % (name, us, us - base, spread))
    failed = {n: e for n, e in reports.items() if e and "refused" not in n}
    for name, error in failed.items():
        print("  note: %s ended with: %s" % (name, error))


if __name__ == "__main__":
    main()
