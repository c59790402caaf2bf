#!/usr/bin/env python3
"""The PyTorch training examples (python/examples) on CPU with tiny sizes, each talking to a
fake coordinator served here on a unix socket: 3 measured steps and a --json line that parses;
a job adopting the batch size the coordinator sends, then stopped by SIGTERM (it leaves and
still prints its summary); --no-sdk talks to nobody. Needs Debian's python3-torch.

  /usr/bin/python3 tests/python/examples_test.py [unittest options]   (ctest: python.examples.*)
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from sdk_test import FakeCoordinator, wait_for  # noqa: E402

EXAMPLES = HERE.parents[1] / "python" / "examples"
PYTHON = "/usr/bin/python3"
TINY = {"resnet": 4, "lstm": 4, "neumf": 16}


class ExamplesTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory(prefix="gpumux-examples-test-")
        self.addCleanup(self.folder.cleanup)
        self.fake = FakeCoordinator(unix_path=os.path.join(self.folder.name, "c.sock"))
        self.addCleanup(self.fake.stop)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMUX_")}
        self.env.update({"GPUMUX_COORDINATOR": self.fake.url, "GPUMUX_GPU_UUIDS": "GPU-test",
                         "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})

    def start(self, example, *args):
        return subprocess.Popen([PYTHON, str(EXAMPLES / (example + ".py")), "--device", "cpu",
                                 "--batch-size", str(TINY[example]), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, start_new_session=True)

    def finish(self, proc, timeout=120):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            self.fail("the example did not finish:\n" + err[-3000:])
        self.assertEqual(proc.returncode, 0, err[-3000:])
        lines = out.strip().splitlines()
        self.assertEqual(len(lines), 1, out)
        return json.loads(lines[0]), err

    def check_summary(self, summary, example, steps):
        self.assertEqual(summary["class"], example)
        self.assertEqual(summary["device"], "cpu")
        self.assertEqual(summary["steps"], steps)
        for key in ("step_s", "data_s", "batch_sizes", "t_end"):
            self.assertEqual(len(summary[key]), steps, key)
        for step, data in zip(summary["step_s"], summary["data_s"]):
            self.assertGreater(step, 0)
            self.assertGreaterEqual(data, 0)
            self.assertLessEqual(data, step)
        self.assertGreater(summary["memory_mib"], 0)
        self.assertTrue(summary["torch"])
        self.assertTrue(summary["device_name"])

    def smoke(self, example):
        summary, _ = self.finish(self.start(example, "--steps", "3", "--warmup", "1", "--json"))
        self.check_summary(summary, example, 3)
        self.assertEqual(summary["batch_size"], TINY[example])
        register = self.fake.bodies("/v1/register")
        self.assertEqual(len(register), 1)
        self.assertEqual(register[0]["class"], example)
        self.assertEqual(register[0]["gpus"], ["GPU-test"])
        self.assertEqual(self.fake.paths()[-1], "/v1/leave")
        self.assertEqual(len(self.fake.reported_steps()), 4)  # the warm-up step too

    def test_resnet(self):
        self.smoke("resnet")

    def test_lstm(self):
        self.smoke("lstm")

    def test_neumf(self):
        self.smoke("neumf")

    def test_a_job_adopts_the_coordinators_batch_size_and_leaves_on_sigterm(self):
        self.fake.batch = 24
        proc = self.start("neumf", "--json", "--warmup", "0", "--min-batch", "8")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        self.assertTrue(wait_for(lambda: any(b == 24 for b, _ in self.fake.reported_steps()),
                                 timeout=60), "no step at the new batch size was reported")
        proc.send_signal(signal.SIGTERM)
        summary, err = self.finish(proc)
        self.assertIn("neumf: batch size 16 -> 24", err)
        self.assertIn("stopped after", err)
        self.assertEqual(summary["batch_size"], 24)
        self.check_summary(summary, "neumf", summary["steps"])
        self.assertEqual(summary["batch_sizes"][-1], 24)
        self.assertEqual(self.fake.bodies("/v1/register")[0]["min_batch"], 8)
        self.assertEqual(self.fake.paths()[-1], "/v1/leave")

    def test_no_sdk_talks_to_no_coordinator(self):
        summary, _ = self.finish(self.start("neumf", "--steps", "2", "--warmup", "0", "--json",
                                            "--no-sdk"))
        self.check_summary(summary, "neumf", 2)
        time.sleep(0.05)
        self.assertEqual(self.fake.all(), [])

    def test_bad_arguments_are_refused_with_a_usage_error(self):
        sys.path.insert(0, str(EXAMPLES))
        import common  # the examples' shared command line (imports torch)
        for argv in (["--batch-size", "0"], ["--min-batch", "64", "--max-batch", "8"],
                     ["--steps", "-1"], ["--device", "tpu"]):
            with self.subTest(argv=argv), self.assertRaises(SystemExit) as exit_:
                with open(os.devnull, "w") as devnull:
                    stderr, sys.stderr = sys.stderr, devnull
                    try:
                        common.parse("", "neumf", 16, argv)
                    finally:
                        sys.stderr = stderr
            self.assertEqual(exit_.exception.code, 2)
        self.assertEqual(common.parse("", "neumf", 16, ["--device", "cpu"]).batch_size, 16)

if __name__ == "__main__":
    unittest.main(verbosity=2)
