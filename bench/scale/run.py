#!/usr/bin/python3
"""gpumux's scale rig: a real kube-apiserver (+ etcd) and kube-scheduler from ../shared/k8s-rig,
N API-only GPU nodes, and a measured stream of pods, once with gpumux (its extender installed as
deploy/ installs it) and once with the default scheduler and whole nvidia.com/gpu GPUs.

  bench/scale/run.py [--nodes 500,1000,5000] [--steady-pods 500 --rate 20] [--burst-pods 2000]

Per cluster size and mode it starts a fresh control plane (so runs do not share state), creates
the nodes (gpumux_scale nodes), starts the scheduler (and for gpumux the extender with the
shipped RBAC and a service-account token), then runs the steady phase (pods created at --rate)
and the burst (--burst-pods created at once) with gpumux_scale run, which also plays every
node's device plugin in the grant handshake. It samples CPU and RSS of every process, reads the
API server's request counters before and after each phase, and writes results.json, results.md
and results.svg into --out. For gpumux it also replays the pods the cluster saw, in the API
server's order, through `gpumux simulate --replay` with the extender's policy and compares the
GPU allocation each reached (bench/scale/README.md, placement quality). Needs no root: etcd, kube-apiserver and kube-scheduler run as this
user on loopback, on free ports. Exit 0 when no GPU was over-committed, no create or Allocate
failed and every pod was bound or marked unschedulable by the scheduler; 77 (skipped) when the
rig's binaries are not built here.
"""
import argparse
import csv
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77


def log(msg):
    print(f"scale: {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process with its log in the state folder; stopped by PID (SIGTERM, then SIGKILL)."""

    def __init__(self, name, argv, state, env=None):
        self.name = name
        self.log_path = os.path.join(state, name + ".log")
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.alive():
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.close()

    def tail(self, n=20):
        with open(self.log_path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode(errors="replace")


def proc_usage(pid):
    """(cpu seconds, rss MiB, peak rss MiB) of a process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        rss = hwm = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 1024
        return cpu, rss, hwm
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0, 0.0


class Sampler:
    """Peak RSS of each process every 0.5 s during a phase, and CPU seconds over it."""

    def __init__(self, procs):
        self.procs = procs
        self.start = {n: proc_usage(p.p.pid)[0] for n, p in procs.items()}
        self.peak = {n: 0.0 for n in procs}
        self.done = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.done.wait(0.5):
            for n, p in self.procs.items():
                self.peak[n] = max(self.peak[n], proc_usage(p.p.pid)[1])

    def finish(self):
        self.done.set()
        self.t.join()
        out = {}
        for n, p in self.procs.items():
            cpu, rss, _ = proc_usage(p.p.pid)
            out[n] = {"cpu_s": round(cpu - self.start[n], 2),
                      "rss_mib": round(max(self.peak[n], rss), 1)}
        return out


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, state in a fresh folder."""

    def __init__(self, rig, state):
        self.rig, self.state = rig, state
        self.procs = {}
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        pki = os.path.join(rig, "pki")
        self.ca = os.path.join(pki, "ca.crt")
        with open(os.path.join(pki, "tokens.csv")) as f:
            self.tokens = {line.split(",")[1]: line.split(",")[0] for line in f if line.strip()}

    def kubeconfig(self, name, token):
        path = os.path.join(self.state, name + ".kubeconfig")
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
               "clusters": [{"name": "c", "cluster": {"server": self.server,
                                                      "certificate-authority": self.ca}}],
               "users": [{"name": "u", "user": {"token": token}}],
               "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
        with open(path, "w") as f:
            yaml.safe_dump(cfg, f)
        return path

    def start(self):
        etcd_port, peer = free_port(), free_port()
        self.procs["etcd"] = Proc("etcd", [
            "/usr/bin/etcd", "--name", "scale", "--data-dir", os.path.join(self.state, "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"scale=http://127.0.0.1:{peer}",
            "--quota-backend-bytes", str(8 << 30), "--log-level", "warn"], self.state)
        p = os.path.join(self.rig, "pki")
        self.procs["kube-apiserver"] = Proc("kube-apiserver", [
            os.path.join(self.rig, "bin", "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
            "--bind-address", "127.0.0.1", "--secure-port", str(self.port),
            "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
            "--tls-cert-file", f"{p}/apiserver.crt", "--tls-private-key-file", f"{p}/apiserver.key",
            "--client-ca-file", f"{p}/ca.crt", "--token-auth-file", f"{p}/tokens.csv",
            "--service-account-issuer", self.server,
            "--service-account-key-file", f"{p}/sa.pub",
            "--service-account-signing-key-file", f"{p}/sa.key", "--api-audiences", self.server,
            "--service-cluster-ip-range", "10.0.0.0/24", "--authorization-mode", "Node,RBAC",
            "--disable-admission-plugins", "ServiceAccount", "--profiling=false", "--v=1"],
            self.state)
        self.admin = self.kubeconfig("admin", self.tokens["rig-admin"])
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if self.get("/readyz") == "ok":
                    return
            except OSError:
                pass
            for proc in self.procs.values():
                if not proc.alive():
                    raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
            time.sleep(0.5)
        raise RuntimeError("kube-apiserver not ready in 120 s:\n" + self.procs["kube-apiserver"].tail())

    def get(self, path):
        ctx = ssl.create_default_context(cafile=self.ca)
        req = urllib.request.Request(self.server + path,
                                     headers={"Authorization": "Bearer " + self.tokens["rig-admin"]})
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.read().decode()

    def request_counts(self):
        """apiserver_request_total summed by 'VERB resource[/subresource]'."""
        out = {}
        for line in self.get("/metrics").splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
            kv = dict(part.split("=", 1) for part in labels.split('",') if "=" in part)
            kv = {k: v.strip('"') for k, v in kv.items()}
            key = kv.get("verb", "?") + " " + kv.get("resource", "?")
            if kv.get("subresource"):
                key += "/" + kv["subresource"]
            out[key] = out.get(key, 0) + float(value)
        return out

    def kubectl(self, *args, stdin=None):
        return subprocess.run(["kubectl", "--kubeconfig", self.admin, *args], input=stdin,
                              capture_output=True, text=True, check=True).stdout

    def stop(self):
        for name in reversed(list(self.procs)):
            self.procs[name].stop()


def extender_args(kubeconfig, port, policy):
    """The extender container's args from deploy/base/extender/deployment.yaml, with what a
    process outside a pod needs instead: --kubeconfig for --in-cluster, a free port, the
    overlay's policy for $(PLACEMENT_POLICY)."""
    with open(os.path.join(ROOT, "deploy/base/extender/deployment.yaml")) as f:
        deployment = yaml.safe_load(f)
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                     if c["name"] == "gpumux-extender")
    out = []
    for a in container["args"]:
        a = str(a)
        if a == "--in-cluster":
            out += ["--kubeconfig", kubeconfig]
        elif a == "127.0.0.1:12345":
            out.append(f"127.0.0.1:{port}")
        elif a == "$(PLACEMENT_POLICY)":
            out.append(policy)
        else:
            out.append(a)
    return out


def overlay_policy():
    with open(os.path.join(ROOT, "deploy/overlays/default/kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    for gen in k.get("configMapGenerator", []):
        for lit in gen.get("literals", []):
            if lit.startswith("policy="):
                return lit.split("=", 1)[1]
    raise RuntimeError("deploy/overlays/default sets no policy")


def gpumux_scheduler_config(kubeconfig, ext_port, state, variant="shipped"):
    """deploy/base/extender/scheduler-config.yaml with the kubeconfig and the extender's port."""
    with open(os.path.join(ROOT, "deploy/base/extender/scheduler-config.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["clientConnection"] = {"kubeconfig": kubeconfig}
    if variant == "extender-scores":
        # Ablation: kube-scheduler's own score plugins off but for node affinity and taint
        # preferences (the extender's score decides among feasible nodes anyway).
        for profile in cfg["profiles"]:
            profile.setdefault("plugins", {})["score"] = {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "TaintToleration"}, {"name": "NodeAffinity"}]}
    elif variant == "every-node":
        # Ablation: every feasible node scored (the extender chooses among all of them); the
        # shipped configuration leaves kube-scheduler's adaptive share.
        cfg["percentageOfNodesToScore"] = 100
    elif variant != "shipped":
        raise RuntimeError(f"unknown --scheduler-variant {variant}")
    for ext in cfg["extenders"]:
        ext["urlPrefix"] = ext["urlPrefix"].replace("127.0.0.1:12345", f"127.0.0.1:{ext_port}")
    path = os.path.join(state, "scheduler-config.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def nodes_to_score(variant):
    """kube-scheduler's percentageOfNodesToScore under `variant` (0 when not set: its adaptive
    default), for the simulator's --percentage-of-nodes-to-score."""
    with open(os.path.join(ROOT, "deploy/base/extender/scheduler-config.yaml")) as f:
        cfg = yaml.safe_load(f)
    return 100 if variant == "every-node" else int(cfg.get("percentageOfNodesToScore", 0))


def wait_http(url, what, proc, seconds=120, ok=lambda body: True):
    deadline = time.time() + seconds
    ctx = ssl._create_unverified_context()  # the scheduler's self-signed health port
    while time.time() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
                if r.status == 200 and ok(r.read().decode()):
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready in {seconds} s:\n{proc.tail()}")


# The modes: gpumux as deploy/ installs it, and the default scheduler with whole nvidia.com/gpu
# GPUs twice: with its client limit lifted as Kubernetes' own scheduler_perf runs it (qps and
# burst 5000), and as shipped (kube-scheduler's defaults, qps 50 and burst 100). gpumux's
# kube-scheduler is as deploy/ ships it (the defaults too); its binds go through the extender's
# own client, which has no such limit.
MODES = {
    "gpumux": {"tool": "gpumux", "client": None,
               "label": "gpumux (kube-scheduler as shipped, client qps 50 / burst 100; binds by "
                        "the extender's client)"},
    "default-5000": {"tool": "default", "client": {"qps": 5000, "burst": 5000},
                     "label": "default, client qps / burst 5000 (scheduler_perf's)"},
    "default": {"tool": "default", "client": None,
                "label": "default, client qps 50 / burst 100 (as shipped)"},
}


def start_scheduling(cp, mode, args, state):
    """The scheduler for `mode` (and gpumux's extender); returns the processes by name."""
    rig_bin = os.path.join(args.rig, "bin")
    sched_port = free_port()
    procs = {}
    if mode == "gpumux":
        cp.kubectl("apply", "-f", os.path.join(ROOT, "deploy/base/namespace.yaml"),
                   "-f", os.path.join(ROOT, "deploy/base/extender/rbac.yaml"))
        token = cp.kubectl("create", "token", "gpumux-scheduler", "-n", "gpumux-system",
                           "--duration", "24h").strip()
        kc = cp.kubeconfig("gpumux-scheduler", token)
        ext_port = free_port()
        procs["extender"] = Proc("extender", [args.gpumux, *extender_args(kc, ext_port, args.policy),
                                          *args.extender_arg],
                                 state)
        procs["extender"].metrics_url = f"http://127.0.0.1:{ext_port}/metrics"
        wait_http(f"http://127.0.0.1:{ext_port}/readyz", "extender", procs["extender"])
        config = gpumux_scheduler_config(kc, ext_port, state, args.scheduler_variant)
        auth = kc
    else:
        kc = cp.kubeconfig("scheduler", cp.tokens["system:kube-scheduler"])
        config = os.path.join(state, "scheduler-default.yaml")
        client = dict({"kubeconfig": kc}, **(MODES[mode]["client"] or {}))
        with open(config, "w") as f:
            yaml.safe_dump({"apiVersion": "kubescheduler.config.k8s.io/v1",
                            "kind": "KubeSchedulerConfiguration",
                            "clientConnection": client,
                            "leaderElection": {"leaderElect": False}}, f)
        auth = kc
    procs["kube-scheduler"] = Proc("kube-scheduler", [
        os.path.join(rig_bin, "kube-scheduler"), "--config", config,
        "--bind-address", "127.0.0.1", "--secure-port", str(sched_port),
        "--authentication-kubeconfig", auth, "--authorization-kubeconfig", auth, "--v=1"], state)
    wait_http(f"https://127.0.0.1:{sched_port}/healthz", "kube-scheduler", procs["kube-scheduler"])
    return procs


def extender_failures(procs):
    """gpumux_extender_failures_total by 'verb reason' (empty without the extender)."""
    url = getattr(procs.get("extender"), "metrics_url", None)
    out = {}
    if url is None:
        return out
    with urllib.request.urlopen(url, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("gpumux_extender_failures_total{"):
                labels, value = line[len("gpumux_extender_failures_total{"):].rsplit("} ", 1)
                kv = {k: v.strip('"') for k, v in
                      (part.split("=", 1) for part in labels.split('",') if "=" in part)}
                key = " ".join(v for k, v in sorted(kv.items()))
                out[key] = out.get(key, 0) + int(float(value))
    return out


def diff_counts(after, before, own):
    """Requests the schedulers, the extender and the device plugins (the stand-in) made: the API
    server's counts over the phase less the load tool's own (its creates, its watch and its final
    list), never the plugins'."""
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0) - own.get(k, 0)
        if d > 0.5:
            out[k] = int(round(d))
    return out


def run_phase(cp, args, mode, n, name, pods, rate, offset, fraction, procs, state):
    out = os.path.join(state, f"{name}.json")
    before = cp.request_counts()
    failures_before = extender_failures(procs)
    sampler = Sampler(procs)
    cmd = [args.scale_tool, "run", "--kubeconfig", cp.admin, "--count", str(n), "--mode",
           MODES[mode]["tool"],
           "--namespace", name, "--pods", str(pods), "--rate", str(rate), "--offset", str(offset),
           "--gpu-fraction", f"{fraction:.4f}", "--timeout", str(args.timeout),
           "--idle-timeout", str(args.idle_timeout), "--handshake", args.handshake, "--out", out]
    if mode == "gpumux":
        cmd += ["--replay-dir", os.path.join(state, f"replay-{name}")]
    log(f"{n} nodes, {mode}, {name}: {pods} pods at " + (f"{rate}/s" if rate else "once"))
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
    usage = sampler.finish()
    with open(out) as f:
        result = json.load(f)
    result["tool_rc"] = rc
    result["usage"] = usage
    result["apiserver_requests"] = diff_counts(cp.request_counts(), before, result["own_requests"])
    result["extender_failures"] = diff_counts(extender_failures(procs), failures_before, {})
    return result


def run_simulator(args, folder, node_list, placements=None):
    """(JSON of `gpumux simulate --replay folder`, error text or None)."""
    cmd = [args.gpumux, "simulate", "--nodes", node_list, "--replay", folder, "--policy",
           args.policy, "--no-report", "--format", "json", "-q", "--expect", "none",
           "--percentage-of-nodes-to-score", str(nodes_to_score(args.scheduler_variant))]
    if placements:
        cmd += ["--placements", placements]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-400:]}"
    try:
        return json.loads(p.stdout), None
    except json.JSONDecodeError as e:
        return None, f"{' '.join(cmd)}: not JSON ({e}): {p.stdout[:200]!r}"


def tie_break_spread(args, folder, node_list, gpus, seeds):
    """The simulator's allocation % on the same replay with its tie-break ranks drawn at random
    (kube-scheduler breaks ties between equal scores at random): [min, max] over `seeds`."""
    with open(os.path.join(folder, "nodes.csv"), newline="") as f:
        names = [row["node"] for row in csv.DictReader(f)]
    shuffled = folder + "-random-ranks"
    os.makedirs(shuffled, exist_ok=True)
    shutil.copy(os.path.join(folder, "arrival.csv"), shuffled)
    pcts = []
    for seed in range(seeds):
        ranks = list(range(len(names)))
        random.Random(seed).shuffle(ranks)
        with open(os.path.join(shuffled, "nodes.csv"), "w") as f:
            f.write("node_prefixed,node,prefix\n")
            f.writelines(f"{n},{n},{r}\n" for n, r in zip(names, ranks))
        out, error = run_simulator(args, shuffled, node_list)
        if error:
            return {"error": error}
        pcts.append(round(100 * out["runs"][0]["used_gpu_milli"] / (gpus * 1000), 2))
    return {"seeds": seeds, "sim_alloc_pct": pcts}


def simulate_replay(args, folder, node_list, arrivals, granted_milli, gpus):
    """`gpumux simulate --replay` of `arrivals` (the rows of the real path's arrival.csv, in the
    order the API server stored the pods) on the same nodes with the extender's policy, and how
    its placements compare with the real path's."""
    os.makedirs(folder, exist_ok=True)
    shutil.copy(os.path.join(os.path.dirname(node_list), "nodes.csv"), folder)
    fields = ["seq", "pod", "source_pod", "node", "gpu_index"]
    with open(os.path.join(folder, "arrival.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for i, row in enumerate(arrivals):
            w.writerow(dict(row, seq=i))
    placements = os.path.join(folder, "sim-placements.csv")
    t = time.time()
    out, error = run_simulator(args, folder, node_list, placements)
    if error:
        return {"error": error}
    sim = out["runs"][0]
    with open(placements) as f:
        # The simulator writes a node as "<rank>-<name>" (ranks are this replay's node order).
        sim_at = {row["pod"]: (row["node"].split("-", 1)[1] if row["node"] else "", row["gpu_index"])
                  for row in csv.DictReader(f)}
    with open(node_list, newline="") as f:
        shape = {row["sn"]: (row["cpu_milli"], row["memory_mib"], row["gpu"], row["model"])
                 for row in csv.DictReader(f)}
    real_only = sim_only = same_node = same_shape = 0
    for row in arrivals:
        node, _ = sim_at.get(row["pod"], ("", ""))
        real_only += bool(row["node"]) and not node
        sim_only += bool(node) and not row["node"]
        same_node += bool(node) and node == row["node"]
        same_shape += bool(node) and bool(row["node"]) and shape[node] == shape[row["node"]]
    real = granted_milli / (gpus * 1000)
    if out["config"]["cluster_gpus"] != gpus:
        return {"error": f"the replay's nodes have {out['config']['cluster_gpus']} GPUs, the "
                         f"cluster {gpus}"}
    predicted = sim["used_gpu_milli"] / (gpus * 1000)
    return {"policy": args.policy, "arrivals": len(arrivals),
            "real_bound": sum(1 for row in arrivals if row["node"]),
            "sim_placed": sim["placed_pods"], "real_granted_milli": granted_milli,
            "sim_used_milli": sim["used_gpu_milli"], "real_alloc_pct": round(100 * real, 2),
            "sim_alloc_pct": round(100 * predicted, 2),
            "diff_pp": round(100 * (real - predicted), 2), "real_only": real_only,
            "sim_only": sim_only, "same_node": same_node, "same_shape": same_shape,
            # How far each spread the pods: nodes holding at least one of them.
            "real_nodes_used": len({row["node"] for row in arrivals if row["node"]}),
            "sim_nodes_used": len({node for node, _ in sim_at.values() if node}),
            "same_node_and_gpus": sim["pods"] - sim["replay_mismatches"],
            # The simulator words it as a replay of the FGD study's: "study" is the real path.
            "first_difference": sim["first_mismatch"].replace(": study ", ": real path ")
                                                      .replace("], gpumux ", "], simulator "), "sim_seconds": round(time.time() - t, 2),
            "folder": folder}


def compare_with_simulator(args, runs):
    """Placement quality after each gpumux phase: the pods the cluster saw so far (steady, then
    steady and burst) replayed through the simulator. The real ratio sums every phase's grants
    as listed at its end (pods stay bound: nothing leaves)."""
    arrivals, granted = [], 0
    for r in runs:
        replay = r.get("replay")
        if not replay:
            continue
        if replay.get("error"):
            r["placement"] = {"error": f"writing the replay: {replay['error']}"}
            continue
        with open(os.path.join(replay["dir"], "arrival.csv"), newline="") as f:
            arrivals += list(csv.DictReader(f))
        granted += r["granted_gpu_milli"]
        folder, node_list = replay["dir"] + "-so-far", os.path.join(replay["dir"], "node_list.csv")
        r["placement"] = simulate_replay(args, folder, node_list, arrivals, granted, r["gpus"])
        if args.tie_break_seeds > 0 and "error" not in r["placement"]:
            r["placement"]["random_ranks"] = tie_break_spread(args, folder, node_list, r["gpus"],
                                                              args.tie_break_seeds)
        phase = os.path.basename(replay["dir"])[len("replay-"):]
        log(f"{r['nodes']} nodes, placement after {phase}: {json.dumps(r['placement'])}")


def measure(args, n, mode, root_state):
    state = tempfile.mkdtemp(prefix=f"n{n}-{mode}-", dir=root_state)
    try:
        runs = run_control_plane(args, n, mode, state)
        if mode == "gpumux":
            compare_with_simulator(args, runs)
        return runs
    finally:
        if not args.keep_state:
            shutil.rmtree(state, ignore_errors=True)


def run_control_plane(args, n, mode, state):
    cp = ControlPlane(args.rig, state)
    procs = {}
    try:
        cp.start()
        t = time.time()
        subprocess.run([args.scale_tool, "nodes", "--kubeconfig", cp.admin, "--count", str(n),
                        "--handshake", args.handshake], check=True, stdout=subprocess.DEVNULL)
        log(f"{n} nodes created in {time.time() - t:.1f} s")
        procs = start_scheduling(cp, mode, args, state)
        watched = dict(procs, **cp.procs)
        runs = []
        used = 0.0
        if args.steady_pods > 0:
            steady = run_phase(cp, args, mode, n, "steady", args.steady_pods, args.rate, 0,
                               args.max_fill, watched, state)
            used = steady.get("requested_gpus", 0) / max(steady["gpus"], 1)
            runs.append(steady)
        if args.burst_pods > 0:
            offset = runs[-1]["next_offset"] if runs else 0
            runs.append(run_phase(cp, args, mode, n, "burst", args.burst_pods, 0,
                                  offset, max(args.max_fill - used, 0.0), watched, state))
        return runs
    finally:
        for p in procs.values():
            p.stop()
        cp.stop()


def fmt(v, nd=2):
    return "-" if v is None or v < 0 else f"{v:.{nd}f}"


def per_pod(requests, bound):
    if not bound:
        return "-"
    total = sum(requests.values())
    top = sorted(requests.items(), key=lambda kv: -kv[1])[:4]
    return f"{total / bound:.1f} (" + ", ".join(f"{k} {v / bound:.2f}" for k, v in top) + ")"


def healthy(r):
    """No over-commitment, no failed create or Allocate, and every pod bound or told why not
    (a pod the scheduler found no room for is the workload's, not a failure of the path)."""
    lost = sum(f["pods"] for f in r["failures"] if "no PodScheduled condition" in f["reason"])
    return (not r["capacity_violations"] and r["tool_rc"] == 0 and lost == 0
            and r["create_errors"] == 0 and r["allocate_errors"] == 0 and not r["list_error"]
            and "error" not in r.get("placement", {})
            and "error" not in r.get("placement", {}).get("random_ranks", {}))


def failure_kinds(failures):
    """(reason with its counts of nodes made N, pods) for the pods left unbound, most first."""
    kinds = {}
    for f in failures:
        why = re.sub(r"\d+", "N", f["reason"])[:90]
        kinds[why] = kinds.get(why, 0) + f["pods"]
    return sorted(kinds.items(), key=lambda kv: -kv[1])


def label(r):
    variant = r.get("variant", "shipped")
    name = MODES.get(r["mode"], {}).get("label", r["mode"])
    return name if variant in ("shipped", "default") else f"{name} ({variant})"


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def node_busy(r):
    return sum(v for k, v in r.get("extender_failures", {}).items() if "node_busy" in k)


def medians(results):
    """Per size, phase and mode: the median over repeats of each figure the issue asks for, and
    gpumux's burst rate against each default's in the same runs."""
    groups = {}
    for r in results:
        groups.setdefault((r["nodes"], r["phase"], r["mode"]), []).append(r)
    lines = ["", "Medians over the repeats (each size, phase and mode run `--repeats` times, "
             "interleaved). API requests per bound pod count every client's but the load tool's "
             "own creates, watch and list: the device plugins' (the stand-in's) included.", "",
             "| nodes | phase | scheduler | runs | pods/s | p50 s | p99 s | API requests per "
             "bound pod | of them the plugins' | kube-apiserver CPU ms per pod | extender CPU ms "
             "per pod | node_busy refusals | capacity violations |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (n, phase, mode), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                        list(MODES).index(kv[0][2])
                                                                        if kv[0][2] in MODES else 9)):
        per = lambda f: median([f(r) for r in rs if r["bound"] > 0])  # noqa: E731
        req = per(lambda r: sum(r["apiserver_requests"].values()) / r["bound"])
        plug = per(lambda r: sum(r.get("plugin_requests", {}).values()) / r["bound"])
        api_cpu = per(lambda r: 1000 * r["usage"]["kube-apiserver"]["cpu_s"] / r["bound"])
        ext_cpu = per(lambda r: 1000 * r["usage"]["extender"]["cpu_s"] / r["bound"]
                      if "extender" in r["usage"] else None)
        lines.append(
            f"| {n} | {phase} | {label(rs[0])} | {len(rs)} | {fmt(per(lambda r: r['pods_per_second']), 1)} | "
            f"{fmt(per(lambda r: r['latency_s']['p50']))} | {fmt(per(lambda r: r['latency_s']['p99']))} | "
            f"{fmt(req, 1)} | {fmt(plug, 1) if mode == 'gpumux' else '-'} | {fmt(api_cpu, 1)} | "
            f"{fmt(ext_cpu, 1)} | {fmt(per(node_busy), 0) if mode == 'gpumux' else '-'} | "
            f"{sum(len(r['capacity_violations']) for r in rs)} |")
    for (n, phase, mode), rs in sorted(groups.items()):
        if mode != "gpumux":
            continue
        ours = median([r["pods_per_second"] for r in rs])
        for other in ("default-5000", "default"):
            theirs = groups.get((n, phase, other))
            if theirs and ours:
                base = median([r["pods_per_second"] for r in theirs])
                lines.append(f"- {n} nodes, {phase}: gpumux {ours:.1f} pods/s = "
                             f"{100 * ours / base:.0f} % of {label(theirs[0])} ({base:.1f})"
                             if base else "")
    return lines


def markdown(results, meta):
    lines = [f"# gpumux scale rig: {meta['date']}", "",
             f"Machine: {meta['machine']}. Command: `{meta['command']}`.", "",
             "| nodes | GPUs | scheduler | run | phase | pods | bound | pods/s | p50 s | p99 s | max s | "
             "extender CPU s / RSS MiB | kube-scheduler CPU s / RSS MiB | kube-apiserver CPU s / RSS MiB "
             "| etcd RSS MiB | API requests per bound pod (all but the load tool's own) | extender verbs "
             "refused | not bound | capacity violations |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        u = r["usage"]
        ext = u.get("extender")
        lat = r["latency_s"]
        failures = "; ".join(f"{n}: {why}" for why, n in failure_kinds(r["failures"])) or "0"
        refused = ", ".join(f"{k} {v}" for k, v in sorted(r.get("extender_failures", {}).items())) or "-"
        lines.append(
            f"| {r['nodes']} | {r['gpus']} | {label(r)} | {r.get('repeat', 1)} | {r['phase']} | "
            f"{r['pods']} | {r['bound']} | "
            f"{fmt(r['pods_per_second'], 1)} | {fmt(lat['p50'])} | {fmt(lat['p99'])} | {fmt(lat['max'])} | "
            + (f"{ext['cpu_s']} / {ext['rss_mib']}" if ext else "-") + " | "
            f"{u['kube-scheduler']['cpu_s']} / {u['kube-scheduler']['rss_mib']} | "
            f"{u['kube-apiserver']['cpu_s']} / {u['kube-apiserver']['rss_mib']} | "
            f"{u['etcd']['rss_mib']} | {per_pod(r['apiserver_requests'], r['bound'])} | "
            f"{refused} | {failures} | {len(r['capacity_violations'])} |")
    lines += medians(results)
    placed = [r for r in results if "placement" in r]
    if placed:
        lines += ["", "Placement quality against the simulator: the pods the cluster saw so far, "
                  "in the order the API server stored them, replayed by `gpumux simulate "
                  "--replay` on the same nodes with the extender's policy "
                  f"({placed[0]['placement'].get('policy', '?')}). GPU allocation = milli-GPU "
                  "granted (bound pods' gpumux.io/grant) or placed (simulator) / (GPUs x 1000).",
                  "",
                  "| nodes | GPUs | after | pods | bound (real) | placed (simulator) | "
                  "allocation real % | simulator % | real - simulator (pp) | bound by the real "
                  "path only | placed by the simulator only | same node (same shape) | same node "
                  "and GPUs | nodes used real / simulator | simulator %, random tie-break ranks |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in placed:
            q = r["placement"]
            if "error" in q:
                lines.append(f"| {r['nodes']} | {r['gpus']} | {r['phase']} | error: {q['error']} |")
                continue
            lines.append(
                f"| {r['nodes']} | {r['gpus']} | {r['phase']} | {q['arrivals']} | "
                f"{q['real_bound']} | {q['sim_placed']} | {q['real_alloc_pct']:.2f} | "
                f"{q['sim_alloc_pct']:.2f} | {q['diff_pp']:+.2f} | {q['real_only']} | "
                f"{q['sim_only']} | {q['same_node']} ({q['same_shape']}) | "
                f"{q['same_node_and_gpus']} | {q['real_nodes_used']} / {q['sim_nodes_used']} | "
                f"{spread(q.get('random_ranks'))} |")
    return "\n".join(lines) + "\n"


def spread(random_ranks):
    if not random_ranks:
        return "-"
    if "error" in random_ranks:
        return "error: " + random_ranks["error"]
    pcts = random_ranks["sim_alloc_pct"]
    return f"{min(pcts):.2f} - {max(pcts):.2f} ({len(pcts)} rankings)"


def svg(results):
    """Two panels for the burst: pods per second and p99 create->bound by cluster size, each bar
    the median of a mode's repeats."""
    bursts = [r for r in results if r["phase"] == "burst"] or results
    sizes = sorted({r["nodes"] for r in bursts})
    modes = [m for m in MODES if any(r["mode"] == m for r in bursts)]
    colors = {"gpumux": "#3b6ea8", "default-5000": "#c0703a", "default": "#d9b38c"}
    w, h, pad = 420, 240, 50
    k = max(len(modes), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w + 40}" height="{h + 60}" '
             'font-family="sans-serif" font-size="11">']
    for panel, (key, title) in enumerate([("pods_per_second", "burst: pods bound per second"),
                                          ("p99", "burst: p99 create -> bound (s)")]):
        x0 = 20 + panel * (w + 20)
        vals = {}
        for r in bursts:
            vals.setdefault((r["nodes"], r["mode"]), []).append(
                r["latency_s"]["p99"] if key == "p99" else r[key])
        vals = {nm: median(v) for nm, v in vals.items()}
        top = max([v for v in vals.values() if v and v > 0] + [1e-9]) * 1.15
        parts.append(f'<text x="{x0 + w / 2}" y="16" text-anchor="middle">{title}</text>')
        parts.append(f'<line x1="{x0 + pad}" y1="{h}" x2="{x0 + w}" y2="{h}" stroke="#444"/>')
        slot = (w - pad) / max(len(sizes), 1)
        bw = (slot - 20) / k
        for i, n in enumerate(sizes):
            for j, m in enumerate(modes):
                v = vals.get((n, m))
                if v is None or v < 0:
                    continue
                bh = (h - 30) * v / top
                bx = x0 + pad + i * slot + 10 + j * bw
                parts.append(f'<rect x="{bx:.1f}" y="{h - bh:.1f}" width="{bw - 4:.1f}" '
                             f'height="{bh:.1f}" fill="{colors.get(m, "#888")}"/>')
                parts.append(f'<text x="{bx + (bw - 4) / 2:.1f}" y="{h - bh - 3:.1f}" '
                             f'text-anchor="middle">{v:.1f}</text>')
            parts.append(f'<text x="{x0 + pad + (i + 0.5) * slot:.1f}" y="{h + 14}" '
                         f'text-anchor="middle">{n} nodes</text>')
    for j, m in enumerate(modes):
        parts.append(f'<rect x="{20 + j * 290}" y="{h + 30}" width="10" height="10" '
                     f'fill="{colors.get(m, "#888")}"/>')
        parts.append(f'<text x="{34 + j * 290}" y="{h + 39}">{MODES[m]["label"][:46]}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="500,1000,5000", help="cluster sizes, comma-separated")
    ap.add_argument("--modes", default="gpumux,default-5000,default",
                    help="of gpumux, default-5000 (the default scheduler with client qps / burst "
                         "5000, as Kubernetes' scheduler_perf runs it) and default (its client "
                         "as shipped: qps 50, burst 100)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs of each size and mode (interleaved); the summary gives medians")
    ap.add_argument("--steady-pods", type=int, default=500, help="pods of the steady phase (0: none)")
    ap.add_argument("--rate", type=float, default=20, help="steady phase: pods created per second")
    ap.add_argument("--burst-pods", type=int, default=2000, help="pods of the burst (0: none)")
    ap.add_argument("--max-fill", type=float, default=0.95,
                    help="stop adding pods once their GPUs (a share counted whole) would pass "
                         "this fraction of the cluster's, both phases together")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per phase")
    ap.add_argument("--idle-timeout", type=float, default=60,
                    help="a phase ends when no pod was bound for this long")
    ap.add_argument("--policy", default=None, help="extender policy [default: deploy's overlay]")
    ap.add_argument("--scheduler-variant", default="shipped",
                    choices=["shipped", "extender-scores", "every-node"],
                    help="gpumux's kube-scheduler configuration: as deploy/ ships it, with "
                         "kube-scheduler's own score plugins off but node affinity and taints, "
                         "or scoring every feasible node (ablations)")
    ap.add_argument("--handshake", default="node-lock", choices=["node-lock", "none"],
                    help="none: the nodes announce no device-plugin handshake, so the extender "
                         "binds without the node lock and no plugin stands in (an ablation: what "
                         "the lock and the plugins' part cost; unsafe on a real cluster)")
    ap.add_argument("--extender-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for the extender after deploy's (repeatable; for "
                         "ablations, e.g. --extender-arg=--threads --extender-arg=64)")
    ap.add_argument("--tie-break-seeds", type=int, default=5,
                    help="gpumux mode: also replay each phase through the simulator with this "
                         "many random tie-break rankings of the nodes (0: none)")
    ap.add_argument("--rig", default=os.environ.get("RIG", "/opt/k8s-rig"))
    ap.add_argument("--gpumux", default=os.path.join(ROOT, "build/gpumux"))
    ap.add_argument("--scale-tool", default=os.path.join(ROOT, "build/bench/scale/gpumux_scale"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build/scale"))
    ap.add_argument("--keep-state", action="store_true", help="keep logs and etcd data")
    args = ap.parse_args()
    args.policy = args.policy or overlay_policy()
    needed = [os.path.join(args.rig, "bin", b) for b in ("kube-apiserver", "kube-scheduler")]
    needed += ["/usr/bin/etcd", os.path.join(args.rig, "pki", "tokens.csv")]
    missing = [p for p in needed if not os.path.exists(p)]
    if missing or not shutil.which("kubectl"):
        print(f"scale: SKIPPED: the k8s rig is not built here (missing: "
              f"{', '.join(missing) or 'kubectl'}; ../shared/k8s-rig/README.md)")
        return SKIP
    for b in (args.gpumux, args.scale_tool):
        if not os.access(b, os.X_OK):
            print(f"scale: {b} is not built (make; cmake -DGPUMUX_BUILD_BENCH=ON)", file=sys.stderr)
            return 2
    os.makedirs(args.out, exist_ok=True)
    root_state = tempfile.mkdtemp(prefix="state-", dir=args.out)
    results = []
    ok = True
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        print(f"scale: unknown --modes {','.join(unknown)} (of {', '.join(MODES)})", file=sys.stderr)
        return 2
    for n in [int(x) for x in args.nodes.split(",")]:
        # Repeats interleave the modes, so that a drift of the machine falls on all of them.
        for repeat in range(args.repeats):
            for mode in modes:
                for phase, r in zip(["steady", "burst"] if args.steady_pods > 0 else ["burst"],
                                    measure(args, n, mode, root_state)):
                    r["phase"] = phase
                    r["mode"] = mode
                    r["repeat"] = repeat + 1
                    r["variant"] = args.scheduler_variant if mode == "gpumux" else "default"
                    if mode == "gpumux" and args.handshake == "none":
                        r["variant"] += ", no node lock: an ablation"
                    results.append(r)
                    ok = ok and healthy(r)
                    log(f"{n} {mode} {phase} (repeat {repeat + 1}/{args.repeats}): "
                        f"{r['bound']}/{r['pods']} bound, {r['pods_per_second']:.1f} pods/s, "
                        f"p99 {r['latency_s']['p99']:.2f} s")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "machine": f"{os.cpu_count()} cores, "
                       f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
            "command": " ".join(sys.argv)}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "runs": results}, f)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(results, meta))
    with open(os.path.join(args.out, "results.svg"), "w") as f:
        f.write(svg(results))
    if not args.keep_state:
        shutil.rmtree(root_state, ignore_errors=True)
    print(markdown(results, meta))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
