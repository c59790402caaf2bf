"""The training loop the examples share: command line, device, synthetic batches, the task SDK
(python/gpumux), progress on stderr, and the --json summary that `gpumux profile` reads.

Each example supplies build(batch_size, device) -> (model, optimizer, make_batch, loss_fn);
make_batch(batch_size) returns the inputs and targets of one minibatch (host-side work, timed
as the step's data phase).
"""
import argparse
import json
import os
import platform
import resource
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in a source tree (or a read-only image)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpumux  # noqa: E402  (the SDK beside the examples)
import torch  # noqa: E402


def parse(description, job_class, default_batch):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (cuda when available)")
    p.add_argument("--batch-size", type=int, default=default_batch)
    p.add_argument("--steps", type=int, default=0, help="measured steps; 0 = train until killed")
    p.add_argument("--warmup", type=int, default=3, help="steps before measuring")
    p.add_argument("--class", dest="job_class", default=job_class,
                   help="workload class told to the coordinator (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON summary line at the end")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-sdk", action="store_true", help="do not talk to the coordinator")
    a = p.parse_args()
    if a.batch_size < 1 or a.steps < 0 or a.warmup < 0 or a.threads < 1:
        p.error("--batch-size and --threads must be >= 1, --steps and --warmup >= 0")
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    return a


def _rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run(args, build):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    batch = args.batch_size
    model, optimizer, make_batch, loss_fn = build(batch, device)
    session = gpumux.Session(args.job_class, batch, enabled=False if args.no_sdk else None)
    rss0 = _rss_mib()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step_s, data_s, t_end = [], [], []
    total = args.warmup + args.steps
    k = 0
    last_print = time.monotonic()
    while args.steps == 0 or k < total:
        if session.batch_size != batch:
            sys.stderr.write("%s: batch size %d -> %d\n" % (args.job_class, batch, session.batch_size))
            batch = session.batch_size
            session.set_running_batch(batch)
        with session.step():
            t0 = time.perf_counter()
            inputs, targets = make_batch(batch)
            inputs = [x.to(device, non_blocking=True) for x in inputs]
            targets = targets.to(device, non_blocking=True)
            t1 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(*inputs), targets)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t2 = time.perf_counter()
        if k >= args.warmup:
            step_s.append(t2 - t0)
            data_s.append(t1 - t0)
            t_end.append(time.time())
        k += 1
        now = time.monotonic()
        if now - last_print >= 10:
            last_print = now
            sys.stderr.write("%s: step %d, batch %d, %.1f ms/step, loss %.3f, coordinator %s\n" % (
                args.job_class, k, batch, 1000 * (t2 - t0), loss.item(), session.state))
    session.close()
    if args.json:
        if device.type == "cuda":
            memory = torch.cuda.max_memory_allocated(device) / 2**20
            name = torch.cuda.get_device_name(device)
            total = torch.cuda.get_device_properties(device).total_memory / 2**20
        else:
            memory = max(1.0, _rss_mib() - rss0)
            name = _cpu_name()
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        print(json.dumps({"class": args.job_class, "batch_size": batch, "device": device.type,
                          "device_name": name, "steps": len(step_s), "step_s": step_s,
                          "data_s": data_s, "t_end": t_end, "memory_mib": round(memory, 1),
                          "device_memory_mib": int(total),
                          "torch": torch.__version__, "python": platform.python_version(),
                          "threads": args.threads}))


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
