#!/usr/bin/env python3
"""The task SDK's added cost per training step: the same empty loop with and without
`with session.step():`, per setting, as microseconds per step. (An empty step isolates the
SDK's cost; with real work in the step, the difference drowns in the work's own variance.)

  python3 bench/sdk_overhead.py [--gpumux build/gpumux] [--steps 200000]

Settings: no SDK (the baseline), SDK disabled (GPUMUX_DISABLE), SDK with no coordinator
reachable, and -- with --gpumux -- SDK reporting to a real `gpumux coordinator` on loopback
(reports every 0.25 s, so the background thread's sends happen during the loop). The figure is
(loop time with - loop time without) / steps, the median of --repeats runs. Prints a table.
"""
import argparse
import os
import pathlib
import socket
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loop(steps, session=None):
    pc = time.perf_counter
    t0 = pc()
    if session is None:
        for _ in range(steps):
            pass
    else:
        step = session.step
        for _ in range(steps):
            with step():
                pass
    return pc() - t0


def measure(name, steps, repeats, make_session, baseline):
    per_step = []
    for _ in range(repeats):
        s = make_session()
        elapsed = loop(steps, s)
        s.close()
        per_step.append((elapsed - baseline) / steps * 1e6)
    return name, statistics.median(per_step)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpumux", help="a gpumux binary: also measure against a real coordinator")
    p.add_argument("--steps", type=int, default=200000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    baseline = statistics.median(loop(a.steps) for _ in range(a.repeats))
    rows = [("no SDK (baseline)", 0.0)]
    os.environ["GPUMUX_DISABLE"] = "1"
    rows.append(measure("SDK disabled (GPUMUX_DISABLE=1)", a.steps, a.repeats,
                        lambda: gpumux.Session("bench", 32), baseline))
    del os.environ["GPUMUX_DISABLE"]
    os.environ["GPUMUX_COORDINATOR"] = "http://127.0.0.1:%d" % free_port()  # nothing there
    rows.append(measure("SDK, no coordinator reachable", a.steps, a.repeats,
                        lambda: gpumux.Session("bench", 32), baseline))
    proc = None
    if a.gpumux:
        folder = tempfile.mkdtemp(prefix="gpumux-sdk-bench-")
        port = free_port()
        proc = subprocess.Popen([a.gpumux, "coordinator", "--socket", "off", "--listen", "127.0.0.1:%d" % port,
                                 "--store", "file://%s/store.json" % folder, "--backend", "none",
                                 "--report-every", "0.25", "--profile",
                                 str(ROOT / "data" / "dl_profile_cpu_example.json")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = "http://127.0.0.1:%d" % port
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        os.environ["GPUMUX_COORDINATOR"] = url
        os.environ["GPUMUX_GPU_UUIDS"] = "GPU-bench"
        rows.append(measure("SDK reporting to gpumux coordinator", a.steps, a.repeats,
                            lambda: gpumux.Session("resnet", 32), baseline))
        proc.terminate()
        proc.wait()
    print("task SDK overhead, %d empty steps, median of %d runs (python %s)"
          % (a.steps, a.repeats, sys.version.split()[0]))
    print("  baseline loop: %.3f us/step" % (baseline / a.steps * 1e6))
    for name, us in rows:
        print("  %-40s %+8.2f us/step" % (name, us))


if __name__ == "__main__":
    main()
