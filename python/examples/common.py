"""The training loop the examples share: command line, device, synthetic batches, the task SDK
(python/gpumux), progress on stderr, and the --json summary that `gpumux profile` reads
(docs/COORDINATOR.md, "Training examples").

Each example supplies build(batch_size, device) -> (model, optimizer, make_batch, loss_fn);
make_batch(batch_size) returns ([inputs...], targets) of one minibatch, made on the host: with
the copy to the device it is the step's data phase (`session.data()`), the rest is compute.
The loop adopts the coordinator's batch size between steps, prints "batch size A -> B" to
stderr when it does, and a progress line every ~10 s. SIGTERM or Ctrl-C ends it cleanly: the
session leaves the coordinator and --json still prints its line.
"""
import argparse
import json
import os
import platform
import resource
import signal
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in a source tree (or a read-only image)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpumux  # noqa: E402  (the SDK beside the examples)
import torch  # noqa: E402

PROGRESS_EVERY_S = 10.0


def parse(description, job_class, default_batch, argv=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="auto",
                   help="cpu, cuda, cuda:N or auto (default: cuda when available, else cpu)")
    p.add_argument("--batch-size", type=int, default=default_batch,
                   help="batch size to start with (default %(default)s)")
    p.add_argument("--steps", type=int, default=0,
                   help="measured steps after the warm-up; 0 = train until killed")
    p.add_argument("--warmup", type=int, default=3,
                   help="steps run first and left out of step_s (default %(default)s)")
    p.add_argument("--class", dest="job_class", default=job_class,
                   help="workload class told to the coordinator (default %(default)s)")
    p.add_argument("--min-batch", type=int, default=0,
                   help="smallest batch size the coordinator may choose (0 = no bound)")
    p.add_argument("--max-batch", type=int, default=0,
                   help="largest batch size the coordinator may choose (0 = no bound)")
    p.add_argument("--json", action="store_true", help="print one JSON summary line at the end")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1, so that co-located CPU jobs behave)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-sdk", action="store_true",
                   help="do not talk to the coordinator (as GPUMUX_DISABLE=1)")
    a = p.parse_args(argv)
    if a.batch_size < 1 or a.threads < 1:
        p.error("--batch-size and --threads must be >= 1")
    if a.steps < 0 or a.warmup < 0 or a.min_batch < 0 or a.max_batch < 0:
        p.error("--steps, --warmup, --min-batch and --max-batch must be >= 0")
    if a.max_batch and a.min_batch > a.max_batch:
        p.error("--min-batch is larger than --max-batch")
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device %s: torch %s sees no CUDA device" % (a.device, torch.__version__))
    if a.device != "cpu" and not a.device.startswith("cuda"):
        p.error("--device must be cpu, cuda, cuda:N or auto, not %r" % a.device)
    return a


def _peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class _Stop:
    """SIGTERM and SIGINT end the loop at the next step boundary (a second one kills)."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.requested:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.requested = True


def run(args, build):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    name = args.job_class
    batch = args.batch_size
    model, optimizer, make_batch, loss_fn = build(batch, device)
    session = gpumux.Session(name, batch, min_batch=args.min_batch, max_batch=args.max_batch,
                             enabled=False if args.no_sdk else None)
    stop = _Stop()
    rss0 = _peak_rss_mib()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    step_s, data_s, batches, t_end = [], [], [], []
    total = args.warmup + args.steps
    k = 0
    loss = None
    last_print = time.monotonic()
    while (args.steps == 0 or k < total) and not stop.requested:
        if session.batch_size != batch:  # the step boundary where this job adopts a new size
            sys.stderr.write("%s: batch size %d -> %d\n" % (name, batch, session.batch_size))
            batch = session.adopt()
        with session.step(batch):
            with session.data():
                inputs, targets = make_batch(batch)
                inputs = [x.to(device, non_blocking=True) for x in inputs]
                targets = targets.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(*inputs), targets)
            loss.backward()
            optimizer.step()
            if cuda:
                torch.cuda.synchronize(device)
        if k >= args.warmup:
            step_s.append(session.last_step_s)
            data_s.append(session.last_data_s)
            batches.append(batch)
            t_end.append(time.time())
        k += 1
        now = time.monotonic()
        if now - last_print >= PROGRESS_EVERY_S:
            last_print = now
            sys.stderr.write("%s: step %d, batch %d, %.1f ms/step, loss %.3f, coordinator: %s\n"
                             % (name, k, batch, 1000 * session.last_step_s, loss.item(),
                                session.state if session.enabled else "off"))
    session.close()
    if stop.requested:
        sys.stderr.write("%s: stopped after %d steps\n" % (name, k))
    if args.json:
        print(json.dumps(summary(args, device, batch, step_s, data_s, batches, t_end, rss0)),
              flush=True)


def summary(args, device, batch, step_s, data_s, batches, t_end, rss0):
    if device.type == "cuda":
        memory = torch.cuda.max_memory_allocated(device) / 2**20
        device_name = torch.cuda.get_device_name(device)
        device_memory = torch.cuda.get_device_properties(device).total_memory / 2**20
    else:
        memory = max(1.0, _peak_rss_mib() - rss0)
        device_name = _cpu_name()
        device_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    return {"class": args.job_class, "batch_size": batch, "device": device.type,
            "device_name": device_name, "steps": len(step_s), "warmup": args.warmup,
            "step_s": step_s, "data_s": data_s, "batch_sizes": batches, "t_end": t_end,
            "memory_mib": round(memory, 1), "device_memory_mib": int(device_memory),
            "torch": torch.__version__, "python": platform.python_version(),
            "threads": args.threads, "seed": args.seed}


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
