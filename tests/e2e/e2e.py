#!/usr/bin/env python3
"""gpumux end-to-end scenarios on a real single-node Kubernetes (started by tests/e2e/run.sh).

Deploys gpumux as a user would (label the node, kubectl apply -k deploy/overlays/monitoring), through
an overlay in OUT/kustomize that adds only the rig-specific patches listed in tests/e2e/README.md,
then runs every scenario. After each scenario it checks, from the API
server's copy, that no GPU's grants exceed its capacity and that no exclusive GPU is shared.
Prints one row per scenario with its timings and writes them to OUT/results.json and
OUT/results.md. Standard library only.
"""
import argparse
import base64
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

NS = "gpumux-e2e"          # where the test pods live
SYS = "gpumux-system"      # where gpumux runs
# The DaemonSets' service accounts: deploy/base/node-agents/policy.yaml limits them to their node.
NODE_AGENTS = ("gpumux-device-plugin", "gpumux-coordinator")
CUDA = "nvidia/cuda:12.4.1-base-ubuntu22.04"  # the rig's busybox stand-in
GPUS = 4
WEBHOOK_NS = "gpumux-e2e-webhook"  # labelled gpumux.io/webhook=enabled by the webhook scenarios
WEBHOOK_PORT = 9443                # deploy/base/webhook's --listen port, on the rig's host network


class Failed(Exception):
    pass


class Rig:
    def __init__(self, args):
        self.args = args
        self.kc = os.path.join(args.rig, "config", "admin.kubeconfig")
        self.node = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
        self.log = open(os.path.join(args.out, "e2e.log"), "a")

    def say(self, line):
        stamp = time.strftime("%H:%M:%S")
        print(f"e2e {stamp} {line}", flush=True)
        self.log.write(f"{stamp} {line}\n")
        self.log.flush()

    def kubectl(self, *args, stdin=None, check=True, timeout=120):
        cmd = ["kubectl", "--kubeconfig", self.kc, *args]
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        self.log.write(f"$ kubectl {' '.join(args)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        if check and p.returncode != 0:
            raise Failed(f"kubectl {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout

    def namespace(self, ns):
        if not self.kubectl("get", "namespace", ns, "--ignore-not-found").strip():
            self.kubectl("create", "namespace", ns)

    def get(self, *args):
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def apply(self, obj):
        self.kubectl("apply", "-f", "-", stdin=json.dumps(obj))

    def rig(self, script, *args):
        p = subprocess.run([os.path.join(self.args.rig_scripts, script), *args],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ))
        self.log.write(f"$ {script} {' '.join(args)}\n{p.stdout}{p.stderr}")
        if p.returncode != 0:
            raise Failed(f"{script} {' '.join(args)} failed: {p.stderr.strip()[-500:]}")

    # --- waiting ---------------------------------------------------------------------------
    def wait(self, what, predicate, timeout, interval=0.1):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
                if last:
                    return last
            except Failed as e:
                last = e
            time.sleep(interval)
        raise Failed(f"timed out after {timeout} s waiting for {what} (last: {last})")

    def pod(self, name, ns=NS):
        p = self.kubectl("get", "pod", "-n", ns, name, "-o", "json", check=False)
        return json.loads(p) if p.strip() else None

    def phase(self, name, ns=NS):
        p = self.pod(name, ns)
        return p["status"].get("phase") if p else None

    def wait_running(self, names, timeout=90, ns=NS):
        names = [names] if isinstance(names, str) else names
        start = time.monotonic()
        pending = set(names)
        while pending:
            if time.monotonic() - start > timeout:
                details = {n: self.describe_tail(n, ns) for n in sorted(pending)}
                raise Failed(f"not Running within {timeout} s: {details}")
            items = self.get("pods", "-n", ns)["items"]
            by_name = {i["metadata"]["name"]: i for i in items}
            for n in list(pending):
                p = by_name.get(n)
                if p and p["status"].get("phase") == "Running":
                    pending.discard(n)
                elif p and p["status"].get("phase") == "Failed":
                    raise Failed(f"pod {n} failed: {p['status'].get('reason')} "
                                 f"{p['status'].get('message')}")
            time.sleep(0.1)
        return time.monotonic() - start

    def describe_tail(self, name, ns=NS):
        out = self.kubectl("describe", "pod", "-n", ns, name, check=False)
        return " | ".join(out.strip().splitlines()[-4:])

    def unschedulable(self, name, ns=NS):
        p = self.pod(name, ns)
        if not p:
            return False
        for c in p["status"].get("conditions", []):
            if c["type"] == "PodScheduled" and c["status"] == "False":
                return c.get("message") or True
        return False

    def delete_pods(self, *names, ns=NS, grace=1, missing_ok=False):
        """missing_ok: in a cleanup (`finally`), where a pod may not exist because the scenario
        failed before creating it, and that failure is the one to report."""
        if names:
            self.kubectl("delete", "pod", "-n", ns, *names, f"--grace-period={grace}",
                         "--wait=true", *(["--ignore-not-found"] if missing_ok else []),
                         timeout=180)

    def clean(self):
        self.kubectl("delete", "pods", "--all", "-n", NS, "--grace-period=0", "--force",
                     "--wait=true", check=False, timeout=180)
        self.wait("no pods in " + NS, lambda: not self.get("pods", "-n", NS)["items"], 60)

    def exec_env(self, pod, container, var):
        # busybox by its path: the gpumux image has no /bin/sh, only /bin/busybox
        return self.kubectl("exec", "-n", NS, pod, "-c", container, "--", "/bin/busybox", "sh",
                            "-c", f"echo \"${var}\"", check=False).strip()

    def grant(self, name):
        p = self.pod(name)
        text = p["metadata"].get("annotations", {}).get("gpumux.io/grant")
        if not text:
            raise Failed(f"pod {name} has no gpumux.io/grant")
        return json.loads(text)


def gpu_pod(name, containers, scheduler="gpumux-scheduler", priority_class=None, extra=None,
            runtime_class=None, env=None):
    """containers: [(container name, {resource: amount})]."""
    spec = {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": c,
            "image": CUDA,
            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
            "resources": {"limits": {k: str(v) for k, v in limits.items()}},
            **({"env": [{"name": k, "value": v} for k, v in env.items()]} if env else {}),
        } for c, limits in containers],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if extra:
        spec.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


WHOLE = {"gpumux.io/gpu": 1}


# --- the invariant checked after every scenario -----------------------------------------------
def check_capacity(rig):
    """No GPU's grants exceed its capacity; an exclusive grant is alone on its GPU."""
    nodes = {n["metadata"]["name"]: n for n in rig.get("nodes")["items"]}
    used = {}
    for p in rig.get("pods", "-A")["items"]:
        ann = p["metadata"].get("annotations", {})
        if "gpumux.io/grant" not in ann or p["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        g = json.loads(ann["gpumux.io/grant"])
        node = p["spec"].get("nodeName") or g["node"]
        for c in g["containers"]:
            for gpu in c["gpus"]:
                u = used.setdefault((node, gpu["uuid"]), {"milli": 0, "mib": 0, "tenants": [],
                                                          "exclusive": 0})
                u["milli"] += 1000 if c.get("exclusive") else c.get("gpu_milli", 0)
                u["mib"] += c.get("gpu_mem_mib", 0)
                u["exclusive"] += 1 if c.get("exclusive") else 0
                u["tenants"].append(p["metadata"]["name"] + "/" + c["name"])
    problems = []
    for (node, uuid), u in used.items():
        inv = json.loads(nodes.get(node, {}).get("metadata", {}).get("annotations", {})
                         .get("gpumux.io/gpus", "[]"))
        size = {g["uuid"]: g["memory_mib"] for g in inv}.get(uuid)
        if size is None:
            problems.append(f"{uuid} on {node} is not in the node's inventory: {u['tenants']}")
            continue
        if u["milli"] > 1000 or u["mib"] > size:
            problems.append(f"{uuid} over capacity: {u['milli']} milli, {u['mib']} MiB of "
                            f"{size}: {u['tenants']}")
        if u["exclusive"] and len(u["tenants"]) > 1:
            problems.append(f"{uuid} is exclusive but shared: {u['tenants']}")
    if problems:
        raise Failed("capacity invariant broken: " + "; ".join(problems))
    return len(used)


def check_env_matches_grant(rig, name):
    """Each container's NVIDIA_VISIBLE_DEVICES and GPUMUX_GPU_UUIDS are its own grant's UUIDs."""
    g = rig.grant(name)
    for c in g["containers"]:
        want = ",".join(gpu["uuid"] for gpu in c["gpus"])
        got = rig.exec_env(name, c["name"], "NVIDIA_VISIBLE_DEVICES")
        if got != want:
            raise Failed(f"{name}/{c['name']}: NVIDIA_VISIBLE_DEVICES={got!r}, grant {want!r}")
        got = rig.exec_env(name, c["name"], "GPUMUX_GPU_UUIDS")
        if got != want:
            raise Failed(f"{name}/{c['name']}: GPUMUX_GPU_UUIDS={got!r}, grant {want!r}")
    return g


# --- setup --------------------------------------------------------------------------------------
OVERLAY = "monitoring"  # deploy/overlays/<this>: the default install plus the metrics listeners


def workload_args(docs, kind, name):
    """The first container's args of a workload in a rendered install (patched by position)."""
    for d in docs:
        if d.get("kind") == kind and d["metadata"]["name"] == name:
            return [str(x) for x in d["spec"]["template"]["spec"]["containers"][0]["args"]]
    raise Failed(f"the rendered install has no {kind}/{name}")


def e2e_overlay(rig, docs):
    """OUT/kustomize: the user's overlay (deploy/overlays/OVERLAY, as shipped) plus what the rig
    lacks (tests/e2e/README.md): no service network and no token controller, no GPUs, the
    coordinator's host folders and the OCI runtime path's ledger in the rig's folder."""
    a = rig.args
    k = os.path.join(a.out, "kustomize")
    os.makedirs(k, exist_ok=True)
    shutil.copy(os.path.join(a.out, "gpus.csv"), os.path.join(k, "gpus.csv"))
    # The stand-in nvidia-cuda-mps-control of the MPS scenario (the rig has no GPU).
    shutil.copy(os.path.join(a.root, "tests", "testing", "mps-control-standin.sh"),
                os.path.join(k, "mps-control"))
    # Typical pods for the fgd-sat-reserve scenario (--typical-pods): the rig's node has far
    # less CPU than the Alibaba trace's whole-GPU pods ask, so the scenario names its own.
    with open(os.path.join(k, "typical.csv"), "w") as f:
        f.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n")
        for i in range(10):
            f.write(f"whole-{i},100,1024,1,1000,\nshare-{i},100,1024,1,810,\n")
    sa_mount = {"name": "sa-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True}
    apiserver_env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                     {"name": "KUBERNETES_SERVICE_PORT", "value": "16443"}]

    def rig_patch(kind, name, secret, containers, more=None):
        spec = {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
                "volumes": [{"name": "sa-token", "secret": {"secretName": secret}}],
                "containers": [{"name": c, "env": apiserver_env, "volumeMounts": [sa_mount]}
                               for c in containers]}
        if more:
            more(spec)
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": SYS},
                "spec": {"template": {"spec": spec}}}

    def e2e_files(spec):
        # gpus.csv and typical.csv (the ConfigMap gpumux-e2e-gpus) at /etc/gpumux-e2e in the
        # first container.
        spec["volumes"].append({"name": "e2e-gpus", "configMap": {"name": "gpumux-e2e-gpus",
                                                                    "defaultMode": 0o755}})
        spec["containers"][0]["volumeMounts"].append(
            {"name": "e2e-gpus", "mountPath": "/etc/gpumux-e2e", "readOnly": True})

    def fake_gpus(spec):
        e2e_files(spec)
        # the coordinator's socket folder is the rig's (as coordinator_dirs below)
        spec["volumes"].append({"name": "coordinator-dir", "hostPath": {
            "path": os.path.join(a.rig, "gpumux-run"), "type": "DirectoryOrCreate"}})
        # the rig's containerd keeps the OCI runtime path's ledger here (GPUMUX_STATE_DIR)
        spec["volumes"].append({"name": "hook-state", "hostPath": {
            "path": os.path.join(a.rig, "gpumux-state"), "type": "DirectoryOrCreate"}})

    def coordinator_dirs(spec):
        # The coordinator's socket folder and state file in the rig's folder, not the host's.
        spec["volumes"] += [
            {"name": "socket-dir", "hostPath": {"path": os.path.join(a.rig, "gpumux-run"),
                                                "type": "DirectoryOrCreate"}},
            {"name": "state", "hostPath": {"path": os.path.join(a.rig, "gpumux-coordinator"),
                                           "type": "DirectoryOrCreate"}}]
        e2e_files(spec)

    def one_scheduler(patch):
        # On the host network two replicas of one Deployment would bind the same ports: one,
        # replaced by Recreate; the failover scenario adds a second on ports of its own.
        patch["spec"]["replicas"] = 1
        patch["spec"]["strategy"] = {"type": "Recreate", "rollingUpdate": None}
        return patch

    patches = [
        one_scheduler(rig_patch("Deployment", "gpumux-scheduler", "gpumux-scheduler-token",
                                ["gpumux-extender", "kube-scheduler"], e2e_files)),
        rig_patch("DaemonSet", "gpumux-device-plugin", "gpumux-device-plugin-token",
                  ["device-plugin"], fake_gpus),
        rig_patch("DaemonSet", "gpumux-coordinator", "gpumux-coordinator-token",
                  ["coordinator"], coordinator_dirs),
        rig_patch("Deployment", "gpumux-webhook", "gpumux-webhook-token", ["webhook"]),
    ]

    def plugin_coordinator_dir():
        args = workload_args(docs, "DaemonSet", "gpumux-device-plugin")
        at = f"/spec/template/spec/containers/0/args/{args.index('--coordinator-dir') + 1}"
        return [{"op": "test", "path": at, "value": args[args.index("--coordinator-dir") + 1]},
                {"op": "replace", "path": at, "value": os.path.join(a.rig, "gpumux-run")}]

    def webhook_on_loopback():
        # No service network: the API server calls the webhook at 127.0.0.1:9443 (hostNetwork),
        # so the certificate also covers 127.0.0.1, and the two replicas share the port (and
        # the metrics port): --reuse-port, without containerPorts (on the host network
        # kube-scheduler counts them as host ports and would not place the second replica).
        args = workload_args(docs, "Deployment", "gpumux-webhook")
        at = f"/spec/template/spec/containers/0/args/{args.index('--tls-names') + 1}"
        return [{"op": "test", "path": at, "value": args[args.index("--tls-names") + 1]},
                {"op": "replace", "path": at,
                 "value": args[args.index("--tls-names") + 1] + ",127.0.0.1"},
                {"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                 "value": "--reuse-port"},
                {"op": "remove", "path": "/spec/template/spec/containers/0/ports"}]

    def webhook_url():
        config = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
        ops = []
        for i in range(len(config["webhooks"])):
            ops += [{"op": "remove", "path": f"/webhooks/{i}/clientConfig/service"},
                    {"op": "add", "path": f"/webhooks/{i}/clientConfig/url",
                     "value": f"https://127.0.0.1:{WEBHOOK_PORT}/mutate"}]
        return ops

    def fake_backend(kind, name):
        # --backend's value, found in the rendered install; the test op fails the build rather
        # than patch another argument if it moves.
        args = workload_args(docs, kind, name)
        at = f"/spec/template/spec/containers/0/args/{args.index('--backend') + 1}"
        return [{"op": "test", "path": at, "value": args[args.index("--backend") + 1]},
                {"op": "replace", "path": at, "value": "fake"},
                {"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                 "value": "--gpus-file"},
                {"op": "add", "path": "/spec/template/spec/containers/0/args/-",
                 "value": "/etc/gpumux-e2e/gpus.csv"}]

    def plugin_enforcement():
        # The device plugin's enforcement in the rig's folders (tests/e2e/README.md): the hook's
        # copy of gpumux and the limit records in $RIG/gpumux-state (containerd's
        # GPUMUX_STATE_DIR), CDI specs in $RIG/cdi, the hybrid host's cgroup v2 hierarchy at
        # /sys/fs/cgroup/unified, limits through the NVML stand-in; each at the same path inside
        # as on the host, as the shipped folders are. Without CDI (containerd 1.6) or the
        # stand-in nothing could set a limit: --enforcement none, and scenario 24 skips.
        # Returns (a JSON patch of the args, a strategic merge patch of the folders).
        args = workload_args(docs, "DaemonSet", "gpumux-device-plugin")
        c = "/spec/template/spec/containers/0"
        ops = []

        def replace_arg(flag, value):
            at = f"{c}/args/{args.index(flag) + 1}"
            ops.extend([{"op": "test", "path": at, "value": args[args.index(flag) + 1]},
                        {"op": "replace", "path": at, "value": value}])

        state = os.path.join(a.rig, "gpumux-state")
        cdi = a.cdi_dir or os.path.join(a.rig, "cdi")
        replace_arg("--install-cdi-hook", os.path.join(state, "hook"))
        replace_arg("--cdi-spec-dir", cdi)
        extra = ["--hook-state-dir", state, "--cgroup-root", "/sys/fs/cgroup/unified"]
        folders = [("state", state, "/var/lib/gpumux", False), ("cdi", cdi, "/var/run/cdi", False),
                   ("cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup", True)]
        if a.cdi_dir and a.nvml_standin:
            extra += ["--limits-nvml-library", a.nvml_standin]
            folders.append(("nvml-standin", os.path.dirname(a.nvml_standin), None, True))
        else:
            extra += ["--enforcement", "none"]
        ops += [{"op": "add", "path": f"{c}/args/-", "value": x} for x in extra]
        mounts = [{"mountPath": shipped, "$patch": "delete"} for _, _, shipped, _ in folders
                  if shipped]
        mounts += [{"name": name, "mountPath": host, "readOnly": ro}
                   for name, host, _, ro in folders]
        smp = {"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "gpumux-device-plugin", "namespace": SYS},
               "spec": {"template": {"spec": {
                   "volumes": [{"name": name, "hostPath": {"path": host}}
                               for name, host, _, _ in folders],
                   "containers": [{"name": "device-plugin", "volumeMounts": mounts}]}}}}
        return ops, smp

    enforcement_args, enforcement_folders = plugin_enforcement()

    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(os.path.join(a.root, "deploy", "overlays", OVERLAY), k)],
        "configMapGenerator": [{"name": "gpumux-e2e-gpus", "namespace": SYS,
                                "files": ["gpus.csv", "typical.csv", "mps-control"],
                                "options": {"disableNameSuffixHash": True}}],
        "patches": [{"patch": json.dumps(p)} for p in patches] + [
            {"target": {"kind": "DaemonSet", "name": name}, "patch": json.dumps(fake_backend("DaemonSet", name))}
            for name in ("gpumux-device-plugin", "gpumux-coordinator")] + [
            {"target": {"kind": "Deployment", "name": "gpumux-webhook"},
             "patch": json.dumps(webhook_on_loopback())},
            {"target": {"kind": "DaemonSet", "name": "gpumux-device-plugin"},
             "patch": json.dumps(plugin_coordinator_dir())},
            {"target": {"kind": "DaemonSet", "name": "gpumux-device-plugin"},
             "patch": json.dumps(enforcement_args)},
            {"patch": json.dumps(enforcement_folders)},
            {"target": {"kind": "MutatingWebhookConfiguration", "name": "gpumux"},
             "patch": json.dumps(webhook_url())}],
    }
    with open(os.path.join(k, "kustomization.yaml"), "w") as f:
        json.dump(kustomization, f, indent=1)
    return k


def deploy(rig):
    """Installs gpumux as deploy/README.md tells a user: label the node, kubectl apply -k."""
    import yaml
    a = rig.args
    overlay = os.path.join(a.root, "deploy", "overlays", OVERLAY)
    docs = [d for d in yaml.safe_load_all(rig.kubectl("kustomize", overlay)) if d]
    k = e2e_overlay(rig, docs)
    # The rig has no token controller and no ServiceAccount admission: each service account gets
    # a bound token (TokenRequest) in a Secret before its pods start. The namespace and the
    # accounts come from the rendered install, as the user's apply would create them.
    first = [d for d in docs if d["kind"] in ("Namespace", "ServiceAccount")]
    rig.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": first}))
    ca = os.path.join(a.rig, "pki", "ca.crt")
    for sa in sorted(d["metadata"]["name"] for d in first if d["kind"] == "ServiceAccount"):
        # A node agent's token names its node, as the pod-bound token a kubelet mounts does
        # (Kubernetes 1.30+): the node-agents admission policy lets it change only that node.
        bound = (["--bound-object-kind", "Node", "--bound-object-name", rig.node]
                 if sa in NODE_AGENTS else [])
        token = rig.kubectl("create", "token", sa, "-n", SYS, "--duration=24h", *bound).strip()
        tokfile = os.path.join(a.out, f"{sa}.token")
        with open(tokfile, "w") as f:
            f.write(token)
        rig.kubectl("create", "secret", "generic", f"{sa}-token", "-n", SYS,
                    f"--from-file=token={tokfile}", f"--from-file=ca.crt={ca}",
                    f"--from-literal=namespace={SYS}")
    rig.kubectl("label", "node", rig.node, "gpumux.io/enabled=true", "--overwrite")
    rig.kubectl("apply", "-k", k)
    rig.namespace(NS)
    for name, value in (("gpumux-e2e-low", 100), ("gpumux-e2e-high", 1000)):
        rig.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": name}, "value": value})
    rig.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "gpumux"}, "handler": "gpumux"})
    wait_gpumux_ready(rig)
    rig.say("scraped as Prometheus would: " + check_scrape_targets(rig))


def check_scrape_targets(rig):
    """Each gpumux pod annotated for Prometheus answers GET http://<pod IP>:<port><path> with its
    daemon's metrics, as deploy/monitoring/prometheus-scrape.yaml would scrape it."""
    import urllib.request
    want = {"gpumux-scheduler": "gpumux_extender_", "gpumux-device-plugin": "gpumux_device_plugin_",
            "gpumux-coordinator": "gpumux_coordinator_", "gpumux-webhook": "gpumux_webhook_"}
    seen = []
    for p in rig.get("pods", "-n", SYS)["items"]:
        ann = p["metadata"].get("annotations", {})
        app = p["metadata"].get("labels", {}).get("app.kubernetes.io/name")
        if ann.get("prometheus.io/scrape") != "true" or p["status"].get("phase") != "Running":
            continue
        url = f"http://{p['status']['podIP']}:{ann['prometheus.io/port']}{ann.get('prometheus.io/path', '/metrics')}"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        if want.get(app, "gpumux_") not in text:
            raise Failed(f"{url} ({app}) has no {want.get(app)} metrics")
        seen.append(app)
    if sorted(set(seen)) != sorted(want):
        raise Failed(f"annotated pods answering /metrics: {sorted(seen)}, want {sorted(want)}")
    return ", ".join(sorted(seen))


def allocatable(rig, resource="gpumux.io/gpu"):
    n = rig.get("node", rig.node)
    return int(n["status"].get("allocatable", {}).get(resource, "0"))


RIG_LOGS = ("kube-apiserver", "kubelet")  # the rig's own logs read on a failure


def rig_log_marks(rig):
    """Where the rig's logs (RIG/run/logs/NAME.log) end now."""
    marks = {}
    for name in RIG_LOGS:
        try:
            marks[name] = os.path.getsize(os.path.join(rig.args.rig, "run", "logs", name + ".log"))
        except OSError:
            pass
    return marks


def failure_context(rig, number, seconds, marks):
    """What gpumux's pods and the rig said while a failed scenario ran: each pod's log since it
    began, and the API server's and the kubelet's from `marks` on, are kept in OUT/logs/; their
    warnings and errors (the last 3 of each), restarts and non-ready containers are added to
    the failure, so that a failure in CI, where only the output is seen, shows its cause."""
    folder = os.path.join(rig.args.out, "logs")
    os.makedirs(folder, exist_ok=True)
    notes = []
    klog_bad = re.compile(r"^[EW]\d{4} ")
    for name, mark in marks.items():
        with open(os.path.join(rig.args.rig, "run", "logs", name + ".log"), errors="replace") as f:
            f.seek(mark)
            text = f.read()
        with open(os.path.join(folder, f"{number:02d}-{name}.log"), "w") as f:
            f.write(text)
        # The kubelet's errors about gpumux's pods (probes, Allocate); its others are noise of
        # the cleanups (containers it asks about after they were removed).
        bad = [line for line in text.splitlines() if klog_bad.match(line)
               and (name != "kubelet" or "gpumux" in line)]
        notes += [f"{name}: {line.strip()[:300]}" for line in bad[-3:]]
    try:
        pods = rig.get("pods", "-n", SYS)["items"]
    except Failed as e:
        return f" | gpumux's pods unreadable: {e}"
    for p in pods:
        name = p["metadata"]["name"]
        for c in p.get("status", {}).get("containerStatuses", []):
            if c.get("restartCount") or not c.get("ready"):
                notes.append(f"{name}/{c['name']}: {c.get('restartCount', 0)} restart(s), "
                             f"ready {c.get('ready')}, state {list(c.get('state', {}))}")
        text = rig.kubectl("logs", "-n", SYS, name, "--all-containers", "--prefix",
                           f"--since={int(seconds) + 5}s", check=False, timeout=30)
        with open(os.path.join(folder, f"{number:02d}-{name}.log"), "w") as f:
            f.write(text)
        bad = [line for line in text.splitlines()
               if re.search(r'\b(WARN|ERROR|panic)\b|\] [EW]\d{4} ', line)]
        notes += [f"{name}: {line.strip()[:300]}" for line in bad[-3:]]
    return (" | while it ran: " + " ; ".join(notes)) if notes else \
        " | gpumux's pods ready, no restart, no warning in theirs or the rig's logs while it ran"


def wait_gpumux_ready(rig, timeout=180):
    rig.kubectl("rollout", "status", "-n", SYS, "deployment/gpumux-scheduler",
                f"--timeout={timeout}s", timeout=timeout + 10)
    rig.kubectl("rollout", "status", "-n", SYS, "daemonset/gpumux-device-plugin",
                f"--timeout={timeout}s", timeout=timeout + 10)
    rig.kubectl("rollout", "status", "-n", SYS, "daemonset/gpumux-coordinator",
                f"--timeout={timeout}s", timeout=timeout + 10)
    rig.kubectl("rollout", "status", "-n", SYS, "deployment/gpumux-webhook",
                f"--timeout={timeout}s", timeout=timeout + 10)
    rig.wait("node allocatable gpumux.io/gpu = 4", lambda: allocatable(rig) == GPUS, timeout)
    rig.wait("node allocatable gpumux.io/gpu-mem = 320",
             lambda: allocatable(rig, "gpumux.io/gpu-mem") == 320, timeout)


# --- scenarios ----------------------------------------------------------------------------------
def example(rig, path, containers_with_gpu):
    obj_path = os.path.join(rig.args.root, "deploy", "examples", path)
    rig.kubectl("apply", "-n", NS, "-f", obj_path)
    name = rig.kubectl("get", "-n", NS, "-f", obj_path, "-o", "jsonpath={.metadata.name}").strip()
    t = rig.wait_running(name)
    g = check_env_matches_grant(rig, name)
    if sorted(c["name"] for c in g["containers"]) != sorted(containers_with_gpu):
        raise Failed(f"{name}: grant names containers {[c['name'] for c in g['containers']]}")
    return name, t, g


def s_whole_shared_multi(rig):
    times = {}
    for path, containers in (("pod-gpu-whole.yaml", ["cuda"]), ("pod-gpu-mem.yaml", ["cuda"]),
                             ("pod-gpu-milli.yaml", ["cuda"]),
                             ("pod-two-containers.yaml", ["trainer", "evaluator"])):
        name, t, g = example(rig, path, containers)
        times[name] = round(t, 1)
    rig.apply(gpu_pod("two-gpus", [("main", {"gpumux.io/gpu": 2})]))
    times["two-gpus"] = round(rig.wait_running("two-gpus"), 1)
    g = check_env_matches_grant(rig, "two-gpus")
    if len(g["containers"][0]["gpus"]) != 2:
        raise Failed(f"two-gpus got {g['containers'][0]['gpus']}")
    whole = rig.grant("gpu-whole")["containers"][0]
    if not whole["exclusive"]:
        raise Failed("gpu-whole's grant is not exclusive")
    return "create -> Running (s): " + ", ".join(f"{k} {v}" for k, v in times.items())


def s_concurrent_same_size(rig):
    pods = [gpu_pod(f"same-{i}", [("main", {"gpumux.io/gpu-mem": 40})]) for i in range(2)]
    rig.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": pods}))
    t = rig.wait_running(["same-0", "same-1"])
    seen = set()
    for i in range(2):
        g = check_env_matches_grant(rig, f"same-{i}")
        seen.add(rig.exec_env(f"same-{i}", "main", "GPUMUX_POD"))
    if seen != {f"{NS}/same-0", f"{NS}/same-1"} and seen != {"same-0", "same-1"}:
        raise Failed(f"GPUMUX_POD values {seen}")
    return f"both Running in {t:.1f} s, each with its own grant in its environment"


def burst(rig, prefix, scheduler, limits, count=8):
    pods = [gpu_pod(f"{prefix}-{i}", [("main", limits)], scheduler=scheduler) for i in range(count)]
    start = time.monotonic()
    rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": pods}))
    rig.wait_running([p["metadata"]["name"] for p in pods], timeout=180)
    return time.monotonic() - start


def s_burst(rig):
    # Without gpumux before and after (the faster of the two is the baseline, so that the
    # order of the runs does not favour gpumux).
    plain = [burst(rig, "plain", "default-scheduler", {"cpu": "10m"})]
    rig.clean()
    gpumux = burst(rig, "burst", "gpumux-scheduler", {"gpumux.io/gpu-mem": 8})
    for i in range(8):
        check_env_matches_grant(rig, f"burst-{i}")
    rig.clean()
    plain.append(burst(rig, "plain", "default-scheduler", {"cpu": "10m"}))
    base = min(plain)
    ratio = gpumux / base
    detail = (f"8 pods create -> all Running: {gpumux:.1f} s with gpumux (8 GiB each), "
              f"{plain[0]:.1f} / {plain[1]:.1f} s without (default scheduler, no GPU; before / "
              f"after), ratio {ratio:.2f} to the faster")
    if ratio > 2.0:
        raise Failed(detail + " (goal: at most 2x)")
    return detail


def s_wait_for_freed_gpu(rig, tries):
    holders = [f"hold-{i}" for i in range(GPUS)]
    rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        gpu_pod(h, [("main", WHOLE)]) for h in holders]}))
    rig.wait_running(holders)
    waits = []
    for i in range(tries):
        w = f"wait-{i}"
        rig.apply(gpu_pod(w, [("main", WHOLE)]))
        rig.wait(f"{w} unschedulable", lambda: rig.unschedulable(w), 60)
        victim = holders.pop(0)
        rig.delete_pods(victim)           # returns once the pod object is gone: the GPU is free
        freed = time.monotonic()
        rig.wait_running(w, timeout=120)
        waits.append(time.monotonic() - freed)
        holders.append(w)
        rig.say(f"  try {i + 1}/{tries}: Running {waits[-1]:.1f} s after the GPU was freed")
    within = sum(1 for x in waits if x <= 10.0)
    waits_sorted = sorted(waits)
    rounds = extender_log(rig).count("requeued ")
    detail = (f"{within}/{tries} within 10 s of the GPU being freed; median "
              f"{waits_sorted[len(waits) // 2]:.1f} s, max {waits_sorted[-1]:.1f} s; "
              f"{rounds} requeue rounds in the extender's log")
    if within != tries:
        raise Failed(detail)
    return detail


def extender_log(rig):
    pods = [p["metadata"]["name"] for p in rig.get("pods", "-n", SYS)["items"]
            if p["metadata"]["name"].startswith("gpumux-scheduler")]
    return "".join(rig.kubectl("logs", "-n", SYS, p, "-c", "gpumux-extender", check=False)
                   for p in pods)


def s_wait_for_freed_share(rig, tries):
    """The extender, not kube-scheduler, turns the pod away (its per-node sums fit, no single
    GPU has room), so only the extender's requeue or kube-scheduler's own retry brings it back."""
    holders = [f"share-{i}" for i in range(GPUS)]
    rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        gpu_pod(h, [("main", {"gpumux.io/gpu-mem": 41})]) for h in holders]}))
    rig.wait_running(holders)
    waits = []
    for i in range(tries):
        w = f"big-{i}"
        rig.apply(gpu_pod(w, [("main", {"gpumux.io/gpu-mem": 60})]))
        msg = rig.wait(f"{w} unschedulable", lambda: rig.unschedulable(w), 60)
        if "gpumux" not in str(msg):
            raise Failed(f"{w} was not turned away by the extender: {msg}")
        rig.delete_pods(holders.pop(0))
        freed = time.monotonic()
        rig.wait_running(w, timeout=120)
        waits.append(time.monotonic() - freed)
        rig.delete_pods(w)
        h = f"share-{GPUS + i}"
        rig.apply(gpu_pod(h, [("main", {"gpumux.io/gpu-mem": 41})]))
        rig.wait_running(h)
        holders.append(h)
        rig.say(f"  try {i + 1}/{tries}: Running {waits[-1]:.1f} s after the share was freed")
    within = sum(1 for x in waits if x <= 10.0)
    rounds = extender_log(rig).count("requeued ")
    detail = (f"{within}/{tries} within 10 s; max {max(waits):.1f} s; {rounds} requeue rounds "
              "in the extender's log")
    if within != tries:
        raise Failed(detail)
    return detail


def s_preemption(rig):
    low = [f"low-{i}" for i in range(GPUS)]
    rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        gpu_pod(n, [("main", WHOLE)], priority_class="gpumux-e2e-low") for n in low]}))
    rig.wait_running(low)
    start = time.monotonic()
    rig.apply(gpu_pod("high", [("main", WHOLE)], priority_class="gpumux-e2e-high"))
    rig.wait_running("high", timeout=120)
    t = time.monotonic() - start
    left = [n for n in low if rig.phase(n) == "Running" and
            not rig.pod(n)["metadata"].get("deletionTimestamp")]
    if len(left) != GPUS - 1:
        raise Failed(f"expected exactly one low-priority victim, {len(left)} of {GPUS} still run")
    check_env_matches_grant(rig, "high")
    return f"high-priority whole-GPU pod Running {t:.1f} s after creation; 1 of 4 low-priority pods preempted"


def set_plugin_node_selector(rig, value):
    rig.kubectl("patch", "daemonset", "-n", SYS, "gpumux-device-plugin", "--type=merge", "-p",
                json.dumps({"spec": {"template": {"spec": {"nodeSelector": {
                    "gpumux.io/enabled": value}}}}}))


def plugin_pods(rig):
    return [p for p in rig.get("pods", "-n", SYS)["items"]
            if p["metadata"]["name"].startswith("gpumux-device-plugin")]


def s_device_plugin_down(rig):
    set_plugin_node_selector(rig, "nowhere")
    rig.wait("device plugin pod gone", lambda: not plugin_pods(rig), 120)
    t0 = time.monotonic()
    rig.wait("node allocatable gpumux.io/gpu = 0", lambda: allocatable(rig) == 0, 120)
    drop = time.monotonic() - t0
    rig.apply(gpu_pod("while-down", [("main", WHOLE)]))
    time.sleep(15)
    p = rig.pod("while-down")
    if p["spec"].get("nodeName"):
        raise Failed(f"bound while the device plugin was down: {p['status']}")
    reason = rig.unschedulable("while-down")
    set_plugin_node_selector(rig, "true")
    start = time.monotonic()
    rig.wait_running("while-down", timeout=120)
    up = time.monotonic() - start
    check_env_matches_grant(rig, "while-down")
    return (f"allocatable 0 after {drop:.1f} s; pod kept Pending ({str(reason)[:90]}); "
            f"Running {up:.1f} s after the plugin was back")


def s_device_plugin_restart(rig):
    rig.apply(gpu_pod("before-restart", [("main", {"gpumux.io/gpu-mem": 8})]))
    rig.wait_running("before-restart")
    old = plugin_pods(rig)[0]["metadata"]["name"]
    rig.kubectl("delete", "pod", "-n", SYS, old, "--wait=false")
    # Pods created while the plugin restarts must not be admitted with missing resources.
    pods = [gpu_pod(f"during-restart-{i}", [("main", {"gpumux.io/gpu-mem": 8})]) for i in range(3)]
    rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": pods}))
    t = rig.wait_running([p["metadata"]["name"] for p in pods], timeout=180)
    for p in pods:
        check_env_matches_grant(rig, p["metadata"]["name"])
    if rig.phase("before-restart") != "Running":
        raise Failed("a running pod was disturbed by the plugin restart")
    return f"3 pods created during the restart all Running after {t:.1f} s, none rejected"


def s_extender_restart(rig):
    rig.apply(gpu_pod("held-1", [("main", {"gpumux.io/gpu-mem": 60})]))
    rig.apply(gpu_pod("held-2", [("main", WHOLE)]))
    rig.wait_running(["held-1", "held-2"])
    old = [p["metadata"]["name"] for p in rig.get("pods", "-n", SYS)["items"]
           if p["metadata"]["name"].startswith("gpumux-scheduler")]
    rig.kubectl("delete", "pod", "-n", SYS, *old, "--wait=true")
    start = time.monotonic()
    # held-1 (60 of 80 GiB) and held-2 (whole) occupy two GPUs: two more 60 GiB pods fit only
    # on the other two, so a new extender that forgot either grant would double-book a GPU
    # (check_capacity) or leave a pod Pending.
    pods = [gpu_pod(f"after-{i}", [("main", {"gpumux.io/gpu-mem": 60})]) for i in range(2)]
    rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": pods}))
    t = rig.wait_running([p["metadata"]["name"] for p in pods], timeout=180)
    return f"extender replaced; new pods scheduled {t:.1f} s after the old extender was gone"


def s_kubelet_restart(rig):
    rig.apply(gpu_pod("k-before", [("main", WHOLE)]))
    rig.wait_running("k-before")
    start = time.monotonic()
    rig.rig("down.sh", "kubelet")
    time.sleep(3)
    rig.rig("up.sh", "--controller-manager")
    rig.wait("node allocatable gpumux.io/gpu = 4 again", lambda: allocatable(rig) == GPUS, 180)
    rig.apply(gpu_pod("k-after", [("main", WHOLE)]))
    rig.wait_running("k-after", timeout=120)
    t = time.monotonic() - start
    if rig.phase("k-before") != "Running":
        raise Failed("k-before is not Running after the kubelet restart")
    check_env_matches_grant(rig, "k-after")
    if rig.grant("k-after")["containers"][0]["gpus"] == rig.grant("k-before")["containers"][0]["gpus"]:
        raise Failed("k-after got k-before's GPU")
    return f"kubelet restarted; old pod still Running, new pod Running {t:.1f} s after the restart began"


def s_api_outage(rig):
    rig.rig("down.sh", "kube-apiserver")
    time.sleep(15)
    rig.rig("up.sh", "--controller-manager")
    start = time.monotonic()
    rig.apply(gpu_pod("after-outage", [("main", WHOLE)]))
    rig.wait_running("after-outage", timeout=240)
    t = time.monotonic() - start
    sched = [p for p in rig.get("pods", "-n", SYS)["items"]
             if p["metadata"]["name"].startswith("gpumux-scheduler")][0]
    restarts = {c["name"]: c.get("restartCount", 0) for c in sched["status"]["containerStatuses"]}
    return f"15 s API outage: a new GPU pod Running {t:.1f} s after the API server was back; restarts {restarts}"


def s_oci_runtime(rig):
    houdini = {"HOUDINI_GPU_ENABLED": "true", "HOUDINI_GPU_REQUESTED": "1"}
    # With the device plugin serving the node, the OCI runtime path refuses (two ledgers).
    rig.apply(gpu_pod("oci-with-plugin", [("main", {"cpu": "10m"})], scheduler="default-scheduler",
                      runtime_class="gpumux", env=houdini))
    first = rig.wait("refusal in the pod's events", lambda: refusal(rig, "oci-with-plugin"), 90)
    if "device plugin serves this node" not in first:
        raise Failed(f"refused for another reason: {first[:300]}")
    rig.delete_pods("oci-with-plugin", grace=0)
    set_plugin_node_selector(rig, "nowhere")
    rig.wait("device plugin pod gone", lambda: not plugin_pods(rig), 120)
    try:
        env_all = dict(houdini, HOUDINI_GPU_REQUESTED=str(GPUS))
        rig.apply(gpu_pod("oci-all", [("main", {"cpu": "10m"})], scheduler="default-scheduler",
                          runtime_class="gpumux", env=env_all))
        rig.wait_running("oci-all")
        rig.apply(gpu_pod("oci-none-left", [("main", {"cpu": "10m"})],
                          scheduler="default-scheduler", runtime_class="gpumux", env=houdini))
        second = rig.wait("refusal in the pod's events", lambda: refusal(rig, "oci-none-left"), 90)
        if "0 of 4 free" not in second or f"{NS}/oci-all/main" not in second:
            raise Failed(f"the refusal does not say why: {second[:300]}")
        rig.delete_pods("oci-all", "oci-none-left", grace=0)
    finally:
        set_plugin_node_selector(rig, "true")
        wait_gpumux_ready(rig)
    def reason(m):
        return m[m.find("gpumux: "):][:170]
    return f"with the device plugin: '{reason(first)}'; without it, no GPU left: '{reason(second)}'"


def refusal(rig, name):
    events = rig.get("events", "-n", NS, "--field-selector", f"involvedObject.name={name}")["items"]
    for e in events:
        m = e.get("message", "")
        if "gpumux" in m and ("OCI runtime" in m or "failed" in m.lower()):
            if "unable to retrieve OCI runtime error" in m:
                raise Failed(f"the runtime's reason is hidden: {m[:300]}")
            return m
    return False


# A training job speaking the coordinator's protocol on its unix socket (the host folder
# /run/gpumux, mounted as a user would) with `gpumux call` from the gpumux image: it registers
# naming a GPU it does not hold (the grant, not its word, decides) and reports two steps a
# second; it registers again whenever a report is refused (the SDK's behaviour, needed if the
# coordinator's watch had not yet seen the pod's grant).
CALL = "/usr/local/bin/gpumux call --socket /run/gpumux/coordinator.sock"
SDK_JOB = ('J="$GPUMUX_POD/$GPUMUX_CONTAINER"; '
           f'reg() {{ {CALL} POST /v1/register -d '
           '"{\\"job\\":\\"$J\\",\\"class\\":\\"resnet\\",\\"batch_size\\":32,'
           '\\"gpus\\":[\\"GPU-not-mine\\"]}"; }; reg; '
           f'while true; do {CALL} POST /v1/report -d '
           '"{\\"job\\":\\"$J\\",\\"steps\\":[[32,0.1],[32,0.1]]}" || reg; '
           '/bin/busybox sleep 1; done')
# Another tenant's pod with a grant of its own: it tries to take the job over (a registration
# under the job's id with a huge batch size, then a report and a leave for it).
INTRUDER = ('V=gpumux-e2e/sdk-job/train; '
            f'{CALL} POST /v1/register -d "{{\\"job\\":\\"$V\\",\\"class\\":\\"resnet\\",'
            '\\"batch_size\\":4096,\\"gpus\\":[]}"; '
            f'{CALL} POST /v1/report -d "{{\\"job\\":\\"$V\\",\\"steps\\":[[4096,9]]}}"; '
            f'{CALL} POST /v1/leave -d "{{\\"job\\":\\"$V\\"}}"; '
            '/bin/busybox sleep 3600')


def socket_job_pod(name, script, limits=None):
    """A GPU pod running `script` in the gpumux image. No volume of its own: the device plugin's
    Allocate mounts the coordinator's socket folder at /run/gpumux (--coordinator-dir)."""
    pod = gpu_pod(name, [("train", limits or {"gpumux.io/gpu-mem": 8})])
    c = pod["spec"]["containers"][0]
    c["image"] = "gpumux:latest"
    c["imagePullPolicy"] = "IfNotPresent"
    c["command"] = ["/bin/busybox", "sh", "-c", script]
    return pod


def coordinator_pod(rig):
    return rig.kubectl("get", "pods", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-coordinator",
                       "-o", "jsonpath={.items[0].metadata.name}").strip()


def coordinator_state(rig):
    out = rig.kubectl("exec", "-n", SYS, coordinator_pod(rig), "--", "/bin/busybox", "wget", "-q",
                      "-O", "-", "http://127.0.0.1:9403/v1/state")
    return json.loads(out)


def s_coordinator(rig):
    # A job in a pod registers over the unix socket naming a GPU it does not hold and reports
    # steps. The coordinator knows the caller from the connection (its pod, through its
    # cgroup) and watches the node's pods: the grant, not the job's word, places it; another
    # pod cannot act for it; deleting the pod makes it leave at once.
    rig.apply(socket_job_pod("sdk-job", SDK_JOB))
    rig.wait_running("sdk-job")
    g = check_env_matches_grant(rig, "sdk-job")
    granted = g["containers"][0]["gpus"][0]["uuid"]
    job_id = f"{NS}/sdk-job/train"

    def job():
        for gpu in coordinator_state(rig)["gpus"]:
            for j in gpu["jobs"]:
                if j["job"] == job_id and j["steps"] > 0:
                    return gpu["uuid"], j
        return None

    def placed():
        found = job()
        return found[0] if found else None
    where = rig.wait("the job registered and reporting", placed, 60, interval=1)
    if where != granted:
        raise Failed(f"the coordinator placed the job on {where}, its grant says {granted}")
    rig.apply(socket_job_pod("intruder", INTRUDER))
    rig.wait_running("intruder")

    def intruder_done():
        out = rig.kubectl("logs", "-n", NS, "intruder", check=False)
        return out if out.count("HTTP 403") >= 3 or out.count("HTTP 200") > 0 else None
    said = rig.wait("the intruder's three calls answered", intruder_done, 60, interval=1)
    after = job()
    if said.count("HTTP 403") < 3 or after is None or after[1]["batch_size"] != 32:
        raise Failed(f"another pod acted for the job: {said[-600:]}; the job now: {after}")
    rig.delete_pods("intruder", grace=0)
    t = time.monotonic()
    rig.delete_pods("sdk-job", grace=0)
    rig.wait("the job gone from the coordinator", lambda: placed() is None, 60, interval=0.5)
    gone_s = time.monotonic() - t
    log = rig.kubectl("logs", "-n", SYS, coordinator_pod(rig))
    if 'job left job=' not in log or 'reason="left: its pod is gone"' not in log:
        raise Failed("the coordinator did not notice the pod's deletion:\n" + log[-1500:])
    return (f"job placed on its granted GPU {granted[:12]}.. (it named another) over the unix "
            f"socket; another pod's register, report and leave for it refused (403), its batch "
            f"size kept; left {gone_s:.1f} s after its pod was deleted")


# --- kubectl gpumux on the real cluster -------------------------------------------------------
def plugin(rig, *args):
    """`kubectl gpumux ARGS` as a user runs it: kubectl finds kubectl-gpumux on PATH, and the
    plugin reads the kubeconfig from KUBECONFIG (kubectl passes no flags to plugins)."""
    env = dict(os.environ, KUBECONFIG=rig.kc,
               PATH=os.path.join(rig.args.out, "gpumux-bin") + os.pathsep + os.environ["PATH"])
    p = subprocess.run(["kubectl", "gpumux", *args], capture_output=True, text=True, env=env,
                       timeout=60)
    rig.log.write(f"$ kubectl gpumux {' '.join(args)}\n{p.stdout[-3000:]}{p.stderr[-2000:]}")
    if p.returncode != 0:
        raise Failed(f"kubectl gpumux {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def s_kubectl_gpumux(rig):
    # A whole-GPU pod, a shared pod whose job reports to the coordinator (as in the coordinator
    # scenario), and a pod too big for any GPU; then every view, as text and as JSON.
    rig.apply(gpu_pod("whole", [("main", WHOLE)]))
    rig.apply(socket_job_pod("shared", SDK_JOB,
                             {"gpumux.io/gpu-mem": 8, "gpumux.io/gpu-milli": 500}))
    rig.apply(gpu_pod("too-big", [("main", {"gpumux.io/gpu-mem": 100})]))
    rig.wait_running(["whole", "shared"])
    rig.wait("too-big unschedulable", lambda: rig.unschedulable("too-big"), 60)

    nodes = plugin(rig, "nodes")
    if f"{NS}/whole (whole)" not in nodes or f"{NS}/shared" not in nodes or "Healthy" not in nodes:
        raise Failed("kubectl gpumux nodes does not show the tenants:\n" + nodes)
    rows = json.loads(plugin(rig, "nodes", "-o", "json"))["items"]
    granted = sum(r["memory"]["granted_mib"] for r in rows)
    if len(rows) != GPUS or granted != 81920 + 8192:
        raise Failed(f"nodes -o json: {len(rows)} GPUs, {granted} MiB granted: {rows}")
    pods = plugin(rig, "pods", "-n", NS, "-o", "wide")
    if "GPU-e2e" not in pods or "whole" not in pods or "500m" not in pods:
        raise Failed("kubectl gpumux pods does not show the grants:\n" + pods)
    why = plugin(rig, "why", "too-big", "-n", NS)
    if "never fits" not in why or "fits on 0 of 1 node" not in why:
        raise Failed("kubectl gpumux why does not explain:\n" + why)

    def reported():
        for r in json.loads(plugin(rig, "top", "-n", NS, "-o", "json"))["items"]:
            if r["job"] == f"{NS}/shared/train" and r["state"] not in ("unreported",
                                                                       "no coordinator"):
                return r
        return None
    t = time.monotonic()
    row = rig.wait("the coordinator's report of the job in kubectl gpumux top", reported, 60,
                   interval=1)
    top = plugin(rig, "top", "-n", NS)
    return (f"nodes: {len(rows)} GPUs, {granted // 1024} GiB granted; pods, why ('never fits'); "
            f"top shows {NS}/shared/train {row['state']} at batch {row['batch_size']} "
            f"{time.monotonic() - t:.1f} s after it ran; top's first row: "
            f"{top.splitlines()[1][:100] if len(top.splitlines()) > 1 else top}")


# --- Houdini's stack: every service reports the GPUs it sees ----------------------------------
STACK = ("stack-a", "stack-b")


def gpus_view(rig, ns, deploy):
    out = rig.kubectl("exec", "-n", ns, f"deploy/{deploy}", "--", "/bin/busybox", "wget", "-q",
                      "-O", "-", "http://127.0.0.1:8080/gpus")
    return json.loads(out)


def stack_up(rig, path):
    # As shipped, but without the readiness probe: the rig's host cannot reach the pod network
    # (the gpumux daemons run with hostNetwork for the same reason), so the kubelet's HTTP probe
    # of a pod's IP never succeeds here. The services answer on the pod's own loopback (exec).
    import yaml
    with open(os.path.join(rig.args.root, "deploy", "examples", path)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        if d["kind"] == "Deployment":
            for c in d["spec"]["template"]["spec"]["containers"]:
                c.pop("readinessProbe", None)
    rig.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": docs}))
    for ns in STACK:
        rig.kubectl("wait", "-n", ns, "--for=condition=available", "--timeout=150s",
                    "deploy/trainer", "deploy/simulator", timeout=180)
    return {ns: (gpus_view(rig, ns, "trainer"), gpus_view(rig, ns, "simulator")) for ns in STACK}


def stack_down(rig):
    for ns in STACK:
        rig.kubectl("delete", "-n", ns, "deploy", "--all", "--wait=true", timeout=180, check=False)
        rig.wait(f"no pods in {ns}", lambda n=ns: not rig.get("pods", "-n", n)["items"], 120)


def s_houdini_stack(rig):
    # Through the device plugin: each trainer's grant names one whole GPU, a different one.
    views = stack_up(rig, "houdini-stack-device-plugin.yaml")
    seen = {}
    for ns, (trainer, simulator) in views.items():
        env = trainer["environment"]
        if env.get("GPUMUX_EXCLUSIVE") != "true" or "," in env.get("NVIDIA_VISIBLE_DEVICES", ","):
            raise Failed(f"{ns} trainer was not given one whole GPU: {env}")
        seen[ns] = env["NVIDIA_VISIBLE_DEVICES"]
        if "NVIDIA_VISIBLE_DEVICES" in simulator["environment"] or simulator["nvidia_smi_L"]:
            raise Failed(f"{ns} simulator sees GPUs: {simulator}")
    if len(set(seen.values())) != 2:
        raise Failed(f"the two trainers share a GPU: {seen}")
    stack_down(rig)
    # Through the OCI runtime path (the device plugin off the node, as the hook requires): the
    # hook reserves one GPU per trainer and gives it the device node, which the service lists.
    set_plugin_node_selector(rig, "nowhere")
    rig.wait("device plugin pod gone", lambda: not plugin_pods(rig), 120)
    try:
        views = stack_up(rig, "houdini-stack-oci-runtime.yaml")
        lines = {}
        for ns, (trainer, simulator) in views.items():
            if len(trainer["nvidia_smi_L"]) != 1:
                raise Failed(f"{ns} trainer does not see exactly one GPU: {trainer}")
            lines[ns] = trainer["nvidia_smi_L"][0]
            if simulator["nvidia_smi_L"] or "NVIDIA_VISIBLE_DEVICES" in simulator["environment"]:
                raise Failed(f"{ns} simulator sees GPUs: {simulator}")
        if len(set(lines.values())) != 2:
            raise Failed(f"the two trainers see the same GPU: {lines}")
        stack_down(rig)
    finally:
        set_plugin_node_selector(rig, "true")
        wait_gpumux_ready(rig)
    return (f"device plugin: trainers given {seen['stack-a']} and {seen['stack-b']}; OCI runtime: "
            f"'{lines['stack-a']}' and '{lines['stack-b']}'; simulators see none")


def set_extender_args(rig, change):
    """Replaces the extender container's args with change(args) and waits for the new pod;
    returns the args it had."""
    dep = rig.get("deployment", "gpumux-scheduler", "-n", SYS)
    containers = dep["spec"]["template"]["spec"]["containers"]
    i = next(k for k, c in enumerate(containers) if c["name"] == "gpumux-extender")
    before = containers[i]["args"]
    rig.kubectl("patch", "deployment", "gpumux-scheduler", "-n", SYS, "--type=json", "-p",
                json.dumps([{"op": "replace", "path": f"/spec/template/spec/containers/{i}/args",
                             "value": change(list(before))}]))
    wait_gpumux_ready(rig)
    return before


RESERVE_MAX_WAIT_S = 30


def s_fgd_sat_reserve(rig):
    """fgd-sat-reserve (include/gpumux/policy/fgd_sat.h) as a user turns it on: the extender's
    --policy, with the threshold at 0.6 so that two busy GPUs of four make idle GPUs scarce.
    An 810-milli share (its 190 remainder fits no typical pod) waits rather than take an idle
    GPU, a whole-GPU pod takes one, and the share runs once idle GPUs are no longer scarce.
    Then the wait limit (--reserve-max-wait-seconds): with idle GPUs scarce again and nothing
    else happening in the cluster, a second share is held and runs once it is overdue, on the
    extender's own retry (kube-scheduler alone would try it again only at its 5-minute flush)."""
    def reserve(args):
        args[args.index("--policy") + 1] = "fgd-sat-reserve"
        return args + ["--reserve-idle-fraction", "0.6", "--reserve-max-wait-seconds",
                       str(RESERVE_MAX_WAIT_S), "--typical-pods", "/etc/gpumux-e2e/typical.csv"]
    original = set_extender_args(rig, reserve)

    def hold_whole_gpus(*names):
        rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                    "items": [gpu_pod(h, [("main", WHOLE)]) for h in names]}))
        rig.wait_running(list(names))

    def create_held_810(name):
        rig.apply(gpu_pod(name, [("main", {"gpumux.io/gpu-milli": 810})]))
        created = time.monotonic()
        msg = str(rig.wait(f"{name} held", lambda: rig.unschedulable(name), 60))
        if "would rather wait" not in msg:
            raise Failed(f"{name} was not held by the reservation: {msg}")
        return msg, created

    try:
        hold_whole_gpus("r-hold-0", "r-hold-1")
        msg, _ = create_held_810("r-810")
        rig.apply(gpu_pod("r-whole", [("main", WHOLE)]))
        rig.wait_running("r-whole")
        if rig.phase("r-810") != "Pending":
            raise Failed("r-810 left Pending while idle GPUs were scarce")
        rig.delete_pods("r-hold-0", "r-hold-1", "r-whole")
        freed = time.monotonic()
        rig.wait_running("r-810", timeout=120)
        t = time.monotonic() - freed
        g = check_env_matches_grant(rig, "r-810")
        # The wait limit: r-810 and two whole-GPU pods leave 1 of 4 GPUs idle (scarce).
        hold_whole_gpus("r-hold-2", "r-hold-3")
        _, created = create_held_810("r-810-late")
        rig.wait_running("r-810-late", timeout=RESERVE_MAX_WAIT_S + 60)
        waited = time.monotonic() - created
        # creationTimestamp has whole seconds: overdue up to 1 s before the limit by our clock.
        if waited < RESERVE_MAX_WAIT_S - 2:
            raise Failed(f"r-810-late ran {waited:.1f} s after its creation, before its "
                         f"{RESERVE_MAX_WAIT_S} s wait limit, with idle GPUs still scarce")
        retries = extender_log(rig).count("(a wait limit passed)")
        how = f"{retries} wait-limit requeue round(s) in the extender's log"
        if retries == 0:
            # Another retry can come first (kube-scheduler's own, or a requeue round for an
            # event): the timed round then finds the pod bound and logs nothing (seen once). The
            # timing above still holds; the timed round itself is RequeuerTest's.
            how = "placed by an earlier retry than the extender's timed requeue round"
        return (f"810-milli share held ('{msg[:90]}'), whole-GPU pod Running beside it; share "
                f"Running {t:.1f} s after 3 of 4 GPUs were freed, on GPU "
                f"{g['containers'][0]['gpus']}; a second share held while scarce Running "
                f"{waited:.1f} s after its creation (wait limit {RESERVE_MAX_WAIT_S} s; {how})")
    finally:
        set_extender_args(rig, lambda _: original)


def s_node_agents_own_node(rig):
    """With each node agent's own token (bound to its node, as a pod's is), through the API
    server: patches of another node and of anything but gpumux.io/ annotations of its own node
    are denied by the node-agents admission policy; its own node's gpumux.io/ annotations pass."""
    a = rig.args
    other = "gpumux-e2e-other-node"
    rig.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": other}})
    cluster = json.loads(rig.kubectl("config", "view", "--minify", "--raw", "-o", "json"))
    server = cluster["clusters"][0]["cluster"]["server"]
    tls = ssl.create_default_context(cafile=os.path.join(a.rig, "pki", "ca.crt"))
    taint = {"spec": {"taints": [{"key": "gpumux.io/e2e", "value": "x", "effect": "NoSchedule"}]}}
    cases = [  # (what, node, merge patch, allowed, what the refusal says)
        ("annotate another node's inventory", other,
         {"metadata": {"annotations": {"gpumux.io/gpus": "forged"}}}, False, "only its own node"),
        ("taint another node", other, taint, False, "only its own node"),
        ("cordon another node", other, {"spec": {"unschedulable": True}}, False, "only its own node"),
        ("label its own node", rig.node, {"metadata": {"labels": {"gpumux.io/forged": "1"}}},
         False, "(not labels)"),
        ("annotate its own node outside gpumux.io/", rig.node,
         {"metadata": {"annotations": {"example.com/forged": "1"}}}, False,
         "only annotations under gpumux.io/"),
        ("taint its own node", rig.node, taint, False, "(not spec or status)"),
        ("annotate its own node under gpumux.io/", rig.node,
         {"metadata": {"annotations": {"gpumux.io/e2e-probe": "1"}}}, True, None),
        ("label its own node under enforcement.gpumux.io/", rig.node,
         {"metadata": {"labels": {"enforcement.gpumux.io/e2e-probe": "1"}}}, True, None),
    ]
    denied = 0
    try:
        for sa in NODE_AGENTS:
            with open(os.path.join(a.out, f"{sa}.token")) as f:
                token = f.read().strip()
            for what, node, patch, allowed, says in cases:
                # A merge patch as the agents send it (kubectl patch would GET the node first,
                # which the coordinator's role does not allow).
                req = urllib.request.Request(
                    f"{server}/api/v1/nodes/{node}", data=json.dumps(patch).encode(),
                    method="PATCH", headers={"Authorization": f"Bearer {token}",
                                             "Content-Type": "application/merge-patch+json"})
                try:
                    with urllib.request.urlopen(req, context=tls, timeout=30) as r:
                        code, out = r.status, r.read().decode(errors="replace")
                except urllib.error.HTTPError as e:
                    code, out = e.code, e.read().decode(errors="replace")
                rig.log.write(f"$ ({sa}) PATCH node {node} {json.dumps(patch)}\n{code} {out[:500]}\n")
                if allowed and code != 200:
                    raise Failed(f"{sa}: {what}: refused ({code}): {out[-300:]}")
                if not allowed and (code == 200 or "denied request" not in out
                                    or says not in out):
                    raise Failed(f"{sa}: {what}: not denied by the policy ({code}): {out[-300:]}")
                denied += not allowed
            rig.kubectl("annotate", "node", rig.node, "gpumux.io/e2e-probe-")
            rig.kubectl("label", "node", rig.node, "enforcement.gpumux.io/e2e-probe-")
        n = rig.get("node", other)
        if ((n["metadata"].get("annotations") or {}).get("gpumux.io/gpus")
                or n["spec"].get("taints") or n["spec"].get("unschedulable")):
            raise Failed(f"the other node was changed: {json.dumps(n)[:300]}")
        mine = rig.get("node", rig.node)
        if "gpumux.io/gpus" not in (mine["metadata"].get("annotations") or {}):
            raise Failed("the device plugin's inventory annotation is missing on its own node")
    finally:
        rig.kubectl("delete", "node", other, "--ignore-not-found", check=False)
    return (f"{denied} patches denied to {len(NODE_AGENTS)} agents' tokens (another node's "
            "inventory, taint, cordon; own node's labels, foreign annotations, taints); own "
            "node's gpumux.io/ annotations accepted, the device plugin's inventory on its node")


def set_plugin_args(rig, change):
    """Replaces the device plugin's args with change(args), waits for the new pod; returns the
    args it had."""
    ds = rig.get("daemonset", "gpumux-device-plugin", "-n", SYS)
    before = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    rig.kubectl("patch", "daemonset", "gpumux-device-plugin", "-n", SYS, "--type=json", "-p",
                json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/args",
                             "value": change(list(before))}]))
    wait_gpumux_ready(rig)
    return before


def s_own_visible_devices(rig):
    """A pod cannot widen its grant with its own NVIDIA_VISIBLE_DEVICES: asking gpumux for a GPU
    while setting it is refused with the reason; with --device-list-strategy volume-mounts the
    GPUs a toolkit would expose are the mounts under /var/run/nvidia-container-devices, which
    name exactly the grant even when the pod's env says all; a pod without a request gets none."""
    rig.apply(gpu_pod("own-all", [("main", WHOLE)], env={"NVIDIA_VISIBLE_DEVICES": "all"}))

    def refused():
        events = rig.get("events", "-n", NS, "--field-selector",
                         "involvedObject.name=own-all")["items"]
        return next((e["message"] for e in events
                     if "sets NVIDIA_VISIBLE_DEVICES itself" in e.get("message", "")), False)
    reason = rig.wait("the extender's refusal in the pod's events", refused, 60)
    if rig.pod("own-all")["status"].get("phase") != "Pending":
        raise Failed("the pod that names its own GPUs was started")
    rig.delete_pods("own-all", grace=0)
    original = set_plugin_args(rig, lambda a: a + ["--device-list-strategy", "volume-mounts"])
    try:
        # What a toolkit set to volume mounts (and to ignore the env of unprivileged
        # containers) would expose is the mount list: the grant for the GPU pod, nothing for a
        # pod without a request whose env says all (the rig has no toolkit to run).
        rig.apply(gpu_pod("mounts-one", [("main", WHOLE)]))
        rig.apply(gpu_pod("mounts-none", [("main", {"cpu": "10m"})],
                          scheduler="default-scheduler", env={"NVIDIA_VISIBLE_DEVICES": "all"}))
        rig.wait_running(["mounts-one", "mounts-none"])
        uuid = rig.grant("mounts-one")["containers"][0]["gpus"][0]["uuid"]

        def listing(pod):
            return rig.kubectl("exec", "-n", NS, pod, "-c", "main", "--", "/bin/busybox", "sh",
                               "-c", "ls /var/run/nvidia-container-devices 2>/dev/null; "
                               "ls /dev | grep -c '^nvidia[0-9]'", check=False).split()
        one, none = listing("mounts-one"), listing("mounts-none")
        if one[:-1] != [uuid]:
            raise Failed(f"mounts-one's device mounts {one[:-1]}, its grant {uuid}")
        if none[:-1] or none[-1] != "0":
            raise Failed(f"a pod without a request sees {none}")
        visible = rig.exec_env("mounts-one", "main", "NVIDIA_VISIBLE_DEVICES")
        if visible != "/var/run/nvidia-container-devices":
            raise Failed(f"mounts-one's NVIDIA_VISIBLE_DEVICES is {visible}")
        rig.delete_pods("mounts-one", "mounts-none", grace=0)
    finally:
        set_plugin_args(rig, lambda a: original)
    i = reason.find("container")
    return (f"refused: '{reason[i:i + 110]}'; with volume mounts the granted pod's device list "
            f"is its one GPU {uuid[:12]}.., a pod without a request (env all) has none and no "
            "/dev/nvidiaN")


# --- the admission webhook --------------------------------------------------------------------
def foreign_pod(name, ns, limits, annotations=None, labels=None):
    """A pod as another GPU stack's users write it: default scheduler, no gpumux resource."""
    pod = gpu_pod(name, [("main", limits)], scheduler="default-scheduler")
    pod["spec"].pop("schedulerName")
    pod["metadata"]["namespace"] = ns
    if annotations:
        pod["metadata"]["annotations"] = annotations
    if labels:
        pod["metadata"]["labels"] = labels
    return pod


def grant_of(rig, name, ns):
    p = rig.pod(name, ns)
    text = (p or {}).get("metadata", {}).get("annotations", {}).get("gpumux.io/grant")
    if not text:
        raise Failed(f"pod {ns}/{name} has no gpumux.io/grant")
    c = json.loads(text)["containers"][0]
    return p, c


def webhook_namespace(rig):
    rig.namespace(WEBHOOK_NS)
    rig.kubectl("label", "namespace", WEBHOOK_NS, "gpumux.io/webhook=enabled", "--overwrite")


def clean_webhook_namespace(rig):
    rig.kubectl("delete", "jobs,pods", "--all", "-n", WEBHOOK_NS, "--grace-period=0", "--force",
                "--wait=true", check=False, timeout=180)


def s_webhook_translates(rig):
    """Unmodified workloads of NVIDIA's plugin, HAMi, gpushare and KAI run with gpumux grants."""
    webhook_namespace(rig)
    try:
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "nvidia-job", "namespace": WEBHOOK_NS},
               "spec": {"backoffLimit": 0, "template": foreign_pod(
                   "x", WEBHOOK_NS, {"nvidia.com/gpu": 1})}}
        job["spec"]["template"].pop("apiVersion")
        job["spec"]["template"].pop("kind")
        job["spec"]["template"]["metadata"] = {"labels": {"app": "nvidia-job"}}
        rig.apply(job)
        rig.apply(foreign_pod("hami", WEBHOOK_NS, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000,
                                                   "nvidia.com/gpucores": 30}))
        rig.apply(foreign_pod("gpushare", WEBHOOK_NS, {"aliyun.com/gpu-mem": 4}))
        rig.apply(foreign_pod("kai", WEBHOOK_NS, {"cpu": "10m"}, {"gpu-fraction": "0.5"}))
        # Opted in by the pod's label, in a namespace that is not.
        rig.apply(foreign_pod("labelled", NS, {"nvidia.com/gpu": 1},
                              labels={"gpumux.io/webhook": "enabled"}))
        job_pod = rig.wait("the Job's pod", lambda: (rig.get(
            "pods", "-n", WEBHOOK_NS, "-l", "job-name=nvidia-job")["items"] or [None])[0], 60)
        names = [job_pod["metadata"]["name"], "hami", "gpushare", "kai"]
        rig.wait_running(names, ns=WEBHOOK_NS)
        rig.wait_running(["labelled"])
        want = {names[0]: (True, 0, 0), "hami": (False, 3072, 300),
                "gpushare": (False, 4096, 1), "kai": (False, 0, 500)}
        seen = []
        for name, (exclusive, mib, milli) in want.items():
            p, c = grant_of(rig, name, WEBHOOK_NS)
            got = (bool(c.get("exclusive")), c.get("gpu_mem_mib", 0),
                   0 if c.get("exclusive") else c.get("gpu_milli", 0))
            if got != (exclusive, mib, milli):
                raise Failed(f"{name}: grant {c}, expected exclusive/MiB/milli {want[name]}")
            if p["spec"].get("schedulerName") != "gpumux-scheduler" or \
                    "gpumux.io/translated-from" not in p["metadata"].get("annotations", {}):
                raise Failed(f"{name}: scheduler {p['spec'].get('schedulerName')}, annotations "
                             f"{sorted(p['metadata'].get('annotations', {}))}")
            seen.append(f"{name.split('-')[0]} {'whole' if exclusive else f'{mib} MiB/{milli}m'}")
        if not grant_of(rig, "labelled", NS)[1].get("exclusive"):
            raise Failed("the pod opted in by its label did not get a whole GPU")
        record = rig.pod("hami", WEBHOOK_NS)["metadata"]["annotations"]["gpumux.io/translated-from"]
        return f"Running with gpumux grants: {', '.join(seen)}, labelled pod whole; hami's record {record}"
    finally:
        clean_webhook_namespace(rig)
        rig.delete_pods("labelled", grace=0, missing_ok=True)


def scale_webhook(rig, replicas):
    rig.kubectl("scale", "deployment", "gpumux-webhook", "-n", SYS, f"--replicas={replicas}")

    def settled():
        pods = rig.get("pods", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-webhook")["items"]
        if replicas == 0:
            return not pods
        return sum(1 for p in pods if p["status"].get("phase") == "Running" and all(
            c.get("ready") for c in p["status"].get("containerStatuses", []) or [{}])) >= replicas
    rig.wait(f"the webhook at {replicas} replicas", settled, 120)


def s_webhook_down(rig):
    """The webhook stopped: nothing it does not select waits on it; what it selects is refused
    (failurePolicy Fail), and is admitted again once it is back, with the certificate it kept."""
    webhook_namespace(rig)
    secret_before = rig.get("secret", "gpumux-webhook-tls", "-n", SYS)["data"]["tls.crt"]
    scale_webhook(rig, 0)
    try:
        t = time.monotonic()
        system = foreign_pod("e2e-system-pod", "kube-system", {"cpu": "10m"})
        system["spec"]["schedulerName"] = "default-scheduler"
        rig.apply(system)
        rig.wait_running(["e2e-system-pod"], ns="kube-system")
        system_s = time.monotonic() - t
        rig.apply(foreign_pod("no-gpu", WEBHOOK_NS, {"cpu": "10m"}))
        refusal = None
        try:
            rig.apply(foreign_pod("refused", WEBHOOK_NS, {"nvidia.com/gpu": 1}))
        except Failed as e:
            refusal = str(e)
        if refusal is None or "webhook" not in refusal or rig.pod("refused", WEBHOOK_NS):
            raise Failed(f"a selected GPU pod was not refused while the webhook was down: {refusal}")
    finally:
        rig.kubectl("delete", "pod", "e2e-system-pod", "-n", "kube-system", "--grace-period=0",
                    "--force", check=False)
        scale_webhook(rig, 2)
    try:
        rig.wait("the GPU pod admitted again", lambda: "created" in rig.kubectl(
            "apply", "-f", "-", stdin=json.dumps(foreign_pod("back", WEBHOOK_NS, {"nvidia.com/gpu": 1})),
            check=False) or rig.pod("back", WEBHOOK_NS) is not None, 60)
        rig.wait_running(["back", "no-gpu"], ns=WEBHOOK_NS)
        if not grant_of(rig, "back", WEBHOOK_NS)[1].get("exclusive"):
            raise Failed("the pod admitted after the restart did not get a whole GPU")
        if rig.get("secret", "gpumux-webhook-tls", "-n", SYS)["data"]["tls.crt"] != secret_before:
            raise Failed("the restarted webhook made a new certificate instead of the kept one")
    finally:
        clean_webhook_namespace(rig)
    i = refusal.find("failed calling webhook")
    return (f"webhook down: kube-system pod Running in {system_s:.1f} s, a non-GPU pod of the "
            f"opted-in namespace admitted, its GPU pod refused ('{refusal[i:i + 90]}'); back up "
            f"with the kept certificate, the GPU pod admitted and granted")


def webhook_pods(rig):
    return [p for p in rig.get("pods", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-webhook")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def pem_certificates(text):
    """The DER of each certificate of a PEM bundle, in order."""
    return [ssl.PEM_cert_to_DER_cert(m.group(0)) for m in re.finditer(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", text, re.S)]


def handshakes_verified(ca_der, n):
    """How many of n TLS handshakes with the webhook's port verify against this CA alone (the
    kernel spreads them over the replicas sharing the port)."""
    ctx = ssl.create_default_context(cadata=ca_der)
    ok = 0
    for _ in range(n):
        try:
            with socket.create_connection(("127.0.0.1", WEBHOOK_PORT), timeout=5) as s:
                with ctx.wrap_socket(s, server_hostname="127.0.0.1"):
                    ok += 1
        except (OSError, ssl.SSLError):
            pass
    return ok


def admit_selected_pods(rig, stop, results):
    """Creates a selected GPU pod by server-side dry run (the whole admission chain, the webhook
    included, and nothing stored) every 0.2 s until `stop`: (monotonic time, translated, error)."""
    body = json.dumps(foreign_pod("dry-run", WEBHOOK_NS, {"nvidia.com/gpu": 1}))
    while not stop.is_set():
        t = time.monotonic()
        p = subprocess.run(["kubectl", "--kubeconfig", rig.kc, "create", "--dry-run=server",
                            "-o", "json", "-f", "-"], input=body, capture_output=True, text=True,
                           timeout=60)
        ok = p.returncode == 0 and "gpumux.io/translated-from" in p.stdout
        results.append((t, ok, "" if ok else (p.stderr.strip() or p.stdout.strip())[-300:]))
        stop.wait(0.2)


def s_webhook_rollout(rig):
    """Two webhook replicas (on the rig's host network they share the port: --reuse-port).
    Selected pods are admitted every 0.2 s while the Deployment rolls (kubectl rollout restart)
    and then while the Secret is deleted, so that a replica renews the certificate and the other
    follows: no pod refused, the renewed ca.crt keeps the old CA, both replicas end on the new pair."""
    webhook_namespace(rig)
    scale_webhook(rig, 2)
    migrate = "/proc/sys/net/ipv4/tcp_migrate_req"  # a stopping listener's queue to the others
    migrate_before = open(migrate).read().strip() if os.path.exists(migrate) else None
    if migrate_before is not None:
        with open(migrate, "w") as f:
            f.write("1")
    stop, results = threading.Event(), []
    admitting = threading.Thread(target=admit_selected_pods, args=(rig, stop, results))
    admitting.start()
    try:
        before = {p["metadata"]["name"] for p in webhook_pods(rig)}
        old_cas = pem_certificates(base64.b64decode(rig.get(
            "secret", "gpumux-webhook-tls", "-n", SYS)["data"]["ca.crt"]).decode())
        time.sleep(3)
        t = time.monotonic()
        rig.kubectl("rollout", "restart", "deployment/gpumux-webhook", "-n", SYS)
        rig.kubectl("rollout", "status", "deployment/gpumux-webhook", "-n", SYS,
                    "--timeout=240s", timeout=250)
        rig.wait("the replaced webhook pods gone", lambda: not (
            before & {p["metadata"]["name"] for p in rig.get(
                "pods", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-webhook")["items"]}), 120)
        rollout_s = time.monotonic() - t
        during_rollout = sum(1 for r in results if r[0] >= t)

        t = time.monotonic()
        rig.kubectl("delete", "secret", "gpumux-webhook-tls", "-n", SYS)

        def renewed():
            text = rig.kubectl("get", "secret", "gpumux-webhook-tls", "-n", SYS, "-o", "json",
                               "--ignore-not-found").strip()
            return json.loads(text) if text else None
        secret = rig.wait("the Secret renewed by a replica", renewed, 120)
        cas = pem_certificates(base64.b64decode(secret["data"]["ca.crt"]).decode())
        until = secret["metadata"].get("annotations", {}).get("gpumux.io/previous-cas-until")
        if len(cas) != 2 or cas[1] != old_cas[0] or not until:
            raise Failed(f"the renewed ca.crt holds {len(cas)} CAs (the old one second: "
                         f"{len(cas) > 1 and cas[1] == old_cas[0]}), previous-cas-until {until}")
        rig.wait("both replicas serving the renewed certificate",
                 lambda: handshakes_verified(cas[0], 16) == 16, 180)
        renewal_s = time.monotonic() - t
        time.sleep(3)
    finally:
        stop.set()
        admitting.join(90)
        if migrate_before is not None:
            with open(migrate, "w") as f:
                f.write(migrate_before)
    refused = [r for r in results if not r[1]]
    if refused:
        raise Failed(f"{len(refused)} of {len(results)} selected pods refused, the first: "
                     f"{refused[0][2]}")
    bundle = pem_certificates(base64.b64decode(rig.kubectl(
        "get", "mutatingwebhookconfiguration", "gpumux", "-o",
        "jsonpath={.webhooks[0].clientConfig.caBundle}")).decode())
    if bundle != cas:
        raise Failed(f"the caBundle holds {len(bundle)} CAs, not the renewed ca.crt's {len(cas)}")
    if during_rollout < 10:
        raise Failed(f"only {during_rollout} pods were admitted during the rollout")
    return (f"{len(results)} selected pods admitted, 0 refused: {during_rollout} during a rolling "
            f"update of 2 replicas ({rollout_s:.0f} s), the rest while the deleted Secret was "
            f"renewed and both replicas moved to the new pair ({renewal_s:.0f} s; ca.crt and "
            f"caBundle hold the new and the old CA until {until})")

# --- workload manifests and MPS ------------------------------------------------------------------
def s_jobgen_baseline(rig):
    """jobgen's training pods pass Pod Security "baseline" (server-side dry run in a namespace
    that enforces it), and are not BestEffort; a hostPath, as jobgen wrote before, is refused."""
    ns = "gpumux-e2e-baseline"
    rig.namespace(ns)
    rig.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=baseline",
                "--overwrite")
    gpumux = os.path.join(rig.args.out, "gpumux-bin", "gpumux")

    def jobgen(*extra, count=3):
        p = subprocess.run([gpumux, "jobgen", "--format", "k8s", "--count", str(count), *extra],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise Failed(f"gpumux jobgen: {p.stderr.strip()}")
        return p.stdout
    out = rig.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", stdin=jobgen())
    refused = None
    try:
        rig.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-",
                    stdin=jobgen("--coordinator-dir", "/run/gpumux"))
    except Failed as e:
        refused = str(e)
    if refused is None or "baseline" not in refused or "hostPath" not in refused:
        raise Failed(f"a hostPath pod was not refused by baseline: {refused}")
    qos = json.loads(rig.kubectl("create", "--dry-run=server", "-n", ns, "-o", "json", "-f", "-",
                                 stdin=jobgen(count=1)))["status"].get("qosClass")
    if qos == "BestEffort":
        raise Failed("jobgen's training pod is BestEffort")
    i = refused.find("violate")
    return (f"{len(out.strip().splitlines())} pods accepted by a baseline namespace (dry run, QoS "
            f"{qos}); with --coordinator-dir as a hostPath refused: '{refused[i:i + 80]}'")


def set_plugin_mps(rig, on):
    """Turns --mps on (with the stand-in control program, the daemons' folder in the rig's
    folder) or back off; waits for the new pod."""
    mps_dir = os.path.join(rig.args.rig, "gpumux-mps")
    ds = rig.get("daemonset", "gpumux-device-plugin", "-n", SYS)
    spec = ds["spec"]["template"]["spec"]
    args = [a for a in spec["containers"][0]["args"]]
    volumes = [v for v in spec["volumes"] if v["name"] != "mps"]
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] != "mps"]
    if on:
        args += ["--mps", "--mps-control", "/etc/gpumux-e2e/mps-control", "--mps-dir", mps_dir]
        volumes.append({"name": "mps", "hostPath": {"path": mps_dir, "type": "DirectoryOrCreate"}})
        mounts.append({"name": "mps", "mountPath": mps_dir})
    else:
        i = args.index("--mps")
        args = args[:i] + args[i + 6:]
    rig.kubectl("patch", "daemonset", "gpumux-device-plugin", "-n", SYS, "--type=json", "-p",
                json.dumps([
                    {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args},
                    {"op": "replace", "path": "/spec/template/spec/volumes", "value": volumes},
                    {"op": "replace", "path": "/spec/template/spec/containers/0/volumeMounts",
                     "value": mounts}]))
    wait_gpumux_ready(rig)
    return mps_dir


def s_mps(rig):
    """--mps with a stand-in control program: a daemon per GPU; two shared pods see their GPU's
    pipe folder and their limits, the daemon's limits rise to the larger share; a whole-GPU pod
    gets no MPS; no pod spec names a host folder."""
    mps_dir = set_plugin_mps(rig, True)
    try:
        rig.apply(gpu_pod("mps-small", [("main", {"gpumux.io/gpu-mem": 8, "gpumux.io/gpu-milli": 200})]))
        rig.apply(gpu_pod("mps-large", [("main", {"gpumux.io/gpu-mem": 16, "gpumux.io/gpu-milli": 300})]))
        rig.apply(gpu_pod("mps-whole", [("main", WHOLE)]))
        rig.wait_running(["mps-small", "mps-large", "mps-whole"])
        seen = []
        for name, mib, pct in (("mps-small", 8192, 20), ("mps-large", 16384, 30)):
            uuid = rig.grant(name)["containers"][0]["gpus"][0]["uuid"]
            listing = rig.kubectl("exec", "-n", NS, name, "--", "sh", "-c",
                                  "ls /tmp/nvidia-mps; echo $CUDA_MPS_PIPE_DIRECTORY "
                                  "$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            want = f"/tmp/nvidia-mps 0={mib}M {pct}"
            if "control" not in listing.split() or want not in listing:
                raise Failed(f"{name} sees {listing!r}, expected the pipe folder and {want!r}")
            with open(os.path.join(mps_dir, uuid, "log", "control.log")) as f:
                log = f.read()
            limits = [int(line.split()[-1][:-1]) for line in log.splitlines()
                      if line.startswith("cmd set_default_device_pinned_mem_limit")]
            if f"start {uuid}" not in log or not limits or max(limits) < mib:
                raise Failed(f"{name}'s GPU {uuid}: the daemon's log is {log!r}")
            seen.append((name, uuid, max(limits)))
        whole = rig.kubectl("exec", "-n", NS, "mps-whole", "--", "sh", "-c",
                            "ls /tmp/nvidia-mps 2>&1; echo pipe=$CUDA_MPS_PIPE_DIRECTORY")
        if "pipe=\n" not in whole + "\n" or "control" in whole:
            raise Failed(f"the whole-GPU pod sees MPS: {whole!r}")
        for name in ("mps-small", "mps-large"):
            if rig.pod(name)["spec"].get("volumes", []) and any(
                    "hostPath" in v for v in rig.pod(name)["spec"]["volumes"]):
                raise Failed(f"{name} has a hostPath in its spec")
        same = seen[0][1] == seen[1][1]
        return (f"{'one GPU' if same else 'two GPUs'}: each shared pod sees its GPU's pipe folder "
                f"and its limits (8192M/20 %, 16384M/30 %); the daemon's limit rose to "
                f"{max(s[2] for s in seen)} MiB; the whole-GPU pod has no MPS")
    finally:
        rig.delete_pods("mps-small", "mps-large", "mps-whole", grace=0, missing_ok=True)
        set_plugin_mps(rig, False)



# --- enforcement on the GPU -------------------------------------------------------------------
MIB = 1024 * 1024


def node_enforcement(rig):
    """Each GPU's enforcement record in the node's gpumux.io/gpus, and the node's labels."""
    n = rig.get("node", rig.node)
    inv = json.loads(n["metadata"].get("annotations", {}).get("gpumux.io/gpus", "[]"))
    return [g.get("enforcement", {}) for g in inv], n["metadata"].get("labels", {})


def limit_calls(rig):
    """The NVML stand-in's record of nvmlDeviceSetMemoryLimits_v1: [uuid, cgroup, soft, hard]."""
    path = os.path.join(os.path.dirname(rig.args.nvml_standin), "fake-nvml.state.limits")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split("|")[1:5] for line in f.read().splitlines() if line.startswith("set|")]


def enforce_list(rig):
    """`gpumux enforce list --json` on the host, over the records the CDI hook keeps."""
    p = subprocess.run([os.path.join(rig.args.out, "gpumux-bin", "gpumux"), "enforce", "list",
                        "--json", "--state-dir", os.path.join(rig.args.rig, "gpumux-state")],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise Failed(f"gpumux enforce list: {p.stderr.strip()}")
    return json.loads(p.stdout)


def s_enforcement(rig):
    """A share is a limit: on a node with memory partitioning (the rig's CDI-enabled containerd,
    its cgroup v2 hierarchy, the NVML stand-in), the real container start runs the CDI hook the
    device plugin wrote, and the stand-in is told the container's own cgroup with its grant as
    the hard limit; the limit goes when the pod does. A node that enforces nothing says so, keeps
    shares under --require-enforcement memory with the reason, and the webhook warns."""
    a = rig.args
    if not (a.cdi_dir and a.nvml_standin):
        return ("SKIPPED: " + ("no CDI in the rig's containerd (Debian 13's containerd 1.7 could not "
                               "be fetched)" if not a.cdi_dir else "no NVML stand-in built"))
    records, labels = node_enforcement(rig)
    if len(records) != GPUS or any(r.get("memory") != "hard" for r in records):
        raise Failed(f"the node does not say memory hard on every GPU: {records}")
    if labels.get("enforcement.gpumux.io/memory") != "hard":
        raise Failed(f"the node's labels: {labels}")
    nodes = plugin(rig, "nodes")
    if nodes.count("memory hard") != GPUS:
        raise Failed("kubectl gpumux nodes does not show memory hard per GPU:\n" + nodes)
    before = len(limit_calls(rig))
    rig.apply(gpu_pod("limited", [("main", {"gpumux.io/gpu-mem": 8, "gpumux.io/gpu-milli": 250})]))
    rig.apply(gpu_pod("limited-whole", [("main", WHOLE)]))
    rig.wait_running(["limited", "limited-whole"])
    pod = rig.pod("limited")
    uid = pod["metadata"]["uid"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    uuid = rig.grant("limited")["containers"][0]["gpus"][0]["uuid"]
    calls = limit_calls(rig)[before:]
    mine = [c for c in calls if c[0] == uuid and c[1].endswith("/" + cid)]
    if len(mine) != 1 or f"pod{uid}/" not in mine[0][1] or \
            (int(mine[0][2]), int(mine[0][3])) != (0, 8192 * MIB):
        raise Failed(f"the stand-in was not told limited's own cgroup (pod{uid}/{cid}) with "
                     f"a hard limit of 8 GiB: {calls}")
    if any(c[1].endswith(f"pod{uid}") for c in calls):
        raise Failed(f"a limit was set on the pod's cgroup rather than its container's: {calls}")
    whole_cid = rig.pod("limited-whole")["status"]["containerStatuses"][0]["containerID"]
    if any(c[1].endswith("/" + whole_cid.split("://")[-1]) for c in calls):
        raise Failed("a whole-GPU pod was given a memory limit")
    if rig.exec_env("limited", "main", "GPUMUX_ENFORCED") != "memory-partitioning":
        raise Failed("the CDI device's variable is not in the container")
    listed = [r for r in enforce_list(rig) if r["pod"] == f"{NS}/limited"]
    if len(listed) != 1 or listed[0]["state"] != "applied" or listed[0]["cgroup"] != mine[0][1]:
        raise Failed(f"gpumux enforce list: {listed}")
    pods = plugin(rig, "pods", "-n", NS)
    line = next((ln for ln in pods.splitlines() if ln.startswith("limited ")), "")
    if "memory hard" not in line:
        raise Failed("kubectl gpumux pods does not show limited's memory hard:\n" + pods)
    rig.delete_pods("limited", "limited-whole", grace=0)
    rig.wait("limited's limit record gone (poststop)",
             lambda: not [r for r in enforce_list(rig) if r["pod"] == f"{NS}/limited"], 60,
             interval=0.5)
    if os.path.isdir(mine[0][1]):
        raise Failed(f"limited's cgroup {mine[0][1]} is still there")

    # A node that enforces nothing: shown, and shares kept off it when memory is required.
    original = set_plugin_args(rig, lambda args: args + ["--enforcement", "none"])
    try:
        rig.wait("the node to say memory none",
                 lambda: all(r.get("memory") == "none" for r in node_enforcement(rig)[0]), 60)
        nodes = plugin(rig, "nodes")
        if nodes.count("none") < GPUS:
            raise Failed("kubectl gpumux nodes does not show none:\n" + nodes)
        extender = set_extender_args(rig, lambda args: args + ["--require-enforcement", "memory"])
        try:
            rig.apply(gpu_pod("unenforced", [("main", {"gpumux.io/gpu-mem": 8})]))
            rig.apply(gpu_pod("unenforced-whole", [("main", WHOLE)]))

            def refused():
                events = rig.get("events", "-n", NS, "--field-selector",
                                 "involvedObject.name=unenforced")["items"]
                return next((e["message"] for e in events
                             if "enforces memory limits" in e.get("message", "")), False)
            reason = rig.wait("the extender's reason in the share's events", refused, 60)
            rig.wait_running(["unenforced-whole"])
            if rig.phase("unenforced") != "Pending":
                raise Failed("the share ran on a node that does not enforce memory")
            described = rig.kubectl("describe", "pod", "-n", NS, "unenforced")
            if "enforces memory limits" not in described:
                raise Failed("kubectl describe does not show the reason:\n" + described[-800:])
            # The webhook warns when it translates a share no node would enforce.
            webhook_namespace(rig)
            hami = foreign_pod("hami-warned", WEBHOOK_NS,
                               {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000})
            p = subprocess.run(["kubectl", "--kubeconfig", rig.kc, "create", "-f", "-"],
                               input=json.dumps(hami), capture_output=True, text=True, timeout=60)
            rig.log.write(f"$ kubectl create (HAMi pod)\n{p.stdout}{p.stderr}")
            if p.returncode != 0 or "Warning: gpumux: no node this pod may run on enforces " \
                                    "memory limits" not in p.stderr:
                raise Failed(f"kubectl create of a HAMi pod: exit {p.returncode}, "
                             f"{p.stderr.strip()[-400:]}")
            warning = next(ln for ln in p.stderr.splitlines() if ln.startswith("Warning: gpumux"))
        finally:
            rig.delete_pods("unenforced", "unenforced-whole", grace=0, missing_ok=True)
            clean_webhook_namespace(rig)
            set_extender_args(rig, lambda args: extender)
    finally:
        set_plugin_args(rig, lambda args: original)
    return (f"limited's container cgroup (pod{uid[:8]}../{cid[:12]}..) got its 8 GiB grant as the "
            f"hard limit through the CDI hook at its start, none for the whole-GPU pod; the "
            f"record went with the pod; with --enforcement none the node says none, and under "
            f"--require-enforcement memory a share waits: '{reason[reason.find('needs'):][:90]}'; "
            f"kubectl create printed '{warning[:100]}'")

# --- two real nodes ------------------------------------------------------------------------------
NODE2 = "gpumux-e2e-node2"
EXTENDER = "http://127.0.0.1:12345"  # deploy's --listen (hostNetwork on the rig): GET /inspect
# Node 2's two GPUs have 95,830 MiB (93.6 GiB) each, more than the first node's 80 GiB A100s.
NODE2_GPUS = [(i, f"GPU-e2e00002-0000-0000-0000-00000000000{i}", "NVIDIA H100 NVL", 95830)
              for i in range(2)]


class SecondNode:
    """A second real node (tests/e2e/second-node.sh: its own kubelet and containerd in a mount
    namespace where /var/lib/kubelet/device-plugins is its own folder) and gpumux's device plugin
    for it, run as a process with the plugin's service account and a token bound to that node, as
    the DaemonSet's pod would have (the DaemonSet stays on the first node: its pods use host
    ports). Its pods write their environment to a host folder: the API server cannot reach this
    kubelet for exec."""

    def __init__(self, rig):
        self.rig = rig
        self.dir = os.path.join(rig.args.out, "node2")
        self.out = os.path.join(self.dir, "out")
        self.plugin = None

    def script(self, cmd):
        p = subprocess.run([os.path.join(self.rig.args.root, "tests", "e2e", "second-node.sh"),
                            cmd, self.dir, NODE2], capture_output=True, text=True, timeout=300)
        self.rig.log.write(f"$ second-node.sh {cmd}\n{p.stdout}{p.stderr}")
        if p.returncode != 0:
            raise Failed(f"second-node.sh {cmd}: {p.stderr.strip()[-500:]}")
        return p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""

    def up(self):
        plugins_dir = self.script("up")
        os.makedirs(self.out, exist_ok=True)
        self.start_plugin(plugins_dir)

    def start_plugin(self, plugins_dir):
        a = self.rig.args
        token = self.rig.kubectl("create", "token", "gpumux-device-plugin", "-n", SYS,
                                 "--duration=2h", "--bound-object-kind", "Node",
                                 "--bound-object-name", NODE2).strip()
        kc = os.path.join(self.dir, "plugin.kubeconfig")
        with open(os.open(kc, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "plugin",
                       "clusters": [{"name": "rig", "cluster": {
                           "server": "https://127.0.0.1:16443",
                           "certificate-authority": os.path.join(a.rig, "pki", "ca.crt")}}],
                       "users": [{"name": "plugin", "user": {"token": token}}],
                       "contexts": [{"name": "plugin", "context": {"cluster": "rig",
                                                                   "user": "plugin"}}]}, f)
        gpus = os.path.join(self.dir, "gpus.csv")
        with open(gpus, "w") as f:
            f.write("index,uuid,model,memory_mib\n")
            f.writelines(f"{i},{u},{m},{mib}\n" for i, u, m, mib in NODE2_GPUS)
        with open(os.path.join(self.dir, "logs", "plugin.log"), "a") as log:
            self.plugin = subprocess.Popen(
                [os.path.join(a.out, "gpumux-bin", "gpumux"), "device-plugin", "--node-name",
                 NODE2, "--backend", "fake", "--gpus-file", gpus, "--kubelet-dir", plugins_dir,
                 "--kubeconfig", kc, "--gpu-mem-unit-mib", "1024",
                 "--metrics-address", "127.0.0.1:0",
                 "--hook-state-dir", os.path.join(self.dir, "hook-state")],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        # second-node.sh down stops it by this file if this script cannot (killed, crashed).
        with open(os.path.join(self.dir, "run", "plugin.pid"), "w") as f:
            f.write(str(self.plugin.pid))

    def stop_plugin(self):
        if self.plugin and self.plugin.poll() is None:
            self.plugin.terminate()
            try:
                self.plugin.wait(10)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
                self.plugin.wait()
        self.plugin = None
        try:
            os.remove(os.path.join(self.dir, "run", "plugin.pid"))
        except FileNotFoundError:
            pass

    def down(self):
        self.stop_plugin()
        self.script("down")

    def allocatable(self, resource="gpumux.io/gpu"):
        n = self.rig.get("node", NODE2)
        return int(n["status"].get("allocatable", {}).get(resource, "0"))

    def pod(self, name, limits):
        """A pod whose container writes its environment to OUT/NAME.env on the host."""
        p = gpu_pod(name, [("main", limits)])
        c = p["spec"]["containers"][0]
        c["command"] = ["sh", "-c", f"env > /out/{name}.env; trap 'exit 0' TERM; "
                        "sleep 3600 & wait"]
        c["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
        p["spec"]["volumes"] = [{"name": "out", "hostPath": {"path": self.out}}]
        return p

    def visible_devices(self, name):
        path = os.path.join(self.out, f"{name}.env")
        if not os.path.exists(path):
            return None
        for line in open(path):
            if line.startswith("NVIDIA_VISIBLE_DEVICES="):
                return line.strip().split("=", 1)[1]
        return ""


def extender_nodes(rig):
    """The extender's own view (GET /inspect): node name -> its GPUs' tenants."""
    with urllib.request.urlopen(EXTENDER + "/inspect", timeout=10) as r:
        state = json.load(r)
    return {n["name"]: [t["pod"] for g in n["gpus"] for t in g["tenants"]] for n in state["nodes"]}


def node_of(rig, name):
    p = rig.pod(name)
    return p["spec"].get("nodeName") if p else None


def s_two_nodes(rig):
    node2 = SecondNode(rig)
    t = time.monotonic()
    try:
        node2.up()
        rig.wait("node 2's gpumux.io/gpu = 2", lambda: node2.allocatable() == 2, 120)
        rig.wait("the extender to know node 2", lambda: NODE2 in extender_nodes(rig), 60)
        joined = time.monotonic() - t

        # 1. A 90 GiB share fits only on node 2's 93.6 GiB GPUs, with nothing but the policy
        # choosing the node; its container gets node 2's GPU from node 2's plugin.
        rig.apply(node2.pod("big", {"gpumux.io/gpu-mem": 90}))
        t = time.monotonic()
        rig.wait_running("big")
        big_s = time.monotonic() - t
        want = ",".join(g["uuid"] for c in rig.grant("big")["containers"] for g in c["gpus"])
        got = rig.wait("big's environment", lambda: node2.visible_devices("big"), 30)
        if node_of(rig, "big") != NODE2 or got != want or not want.startswith("GPU-e2e00002"):
            raise Failed(f"big on {node_of(rig, 'big')}, NVIDIA_VISIBLE_DEVICES={got!r}, "
                         f"grant {want!r}")

        # 2. Drained while pods wait: 6 whole-GPU pods for 5 free GPUs (4 + node 2's other
        # one); draining node 2 frees 2 GPUs there, which the waiting pod must not take (the
        # node is cordoned); when a GPU on the first node is freed it runs there.
        whole = [f"w{i}" for i in range(6)]
        rig.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                            "items": [gpu_pod(n, [("main", WHOLE)])
                                                                      for n in whole]}))
        rig.wait("5 whole-GPU pods Running and 1 waiting", lambda: sorted(
            "R" if rig.phase(n) == "Running" else "U" if rig.unschedulable(n) else "?"
            for n in whole) == ["R"] * 5 + ["U"], 90, interval=0.5)
        waiting = next(n for n in whole if rig.phase(n) != "Running")
        on2 = [n for n in whole if node_of(rig, n) == NODE2]
        if len(on2) != 1:
            raise Failed(f"whole-GPU pods on node 2: {on2}, want one (its free GPU)")
        rig.kubectl("drain", NODE2, "--force", "--grace-period=1", "--ignore-daemonsets",
                    "--delete-emptydir-data", "--timeout=90s", timeout=120)
        rig.wait("node 2's grants gone from the extender",
                 lambda: not extender_nodes(rig).get(NODE2), 30)
        time.sleep(5)  # the waiting pod is retried when the drained pods leave
        if rig.phase(waiting) == "Running" or node_of(rig, waiting):
            raise Failed(f"{waiting} was bound to {node_of(rig, waiting)} after node 2's drain")
        held = rig.unschedulable(waiting)
        freed = next(n for n in whole if node_of(rig, n) and n not in on2)
        rig.delete_pods(freed, grace=0)
        t = time.monotonic()
        rig.wait_running(waiting, timeout=60)
        after_free = time.monotonic() - t
        if node_of(rig, waiting) != rig.node:
            raise Failed(f"{waiting} ran on {node_of(rig, waiting)}, node 2 is cordoned")
        rig.kubectl("uncordon", NODE2)
        rig.clean()

        # 3. Node 2 deleted with a pod on it: the extender forgets the node and its grant, a
        # pod that fits only there waits, and the first node's grants are untouched.
        rig.apply(node2.pod("big-2", {"gpumux.io/gpu-mem": 90}))
        rig.apply(gpu_pod("on-1", [("main", WHOLE)],
                          extra={"nodeSelector": {"kubernetes.io/hostname": rig.node}}))
        rig.wait_running(["big-2", "on-1"])
        node2.stop_plugin()
        node2.script("down")  # kubelet and containerd stopped, the Node object deleted
        t = time.monotonic()
        view = rig.wait("the extender to forget node 2",
                        lambda: (lambda v: v if NODE2 not in v else None)(extender_nodes(rig)), 60)
        forgot = time.monotonic() - t
        if f"{NS}/on-1" not in view.get(rig.node, []):
            raise Failed(f"the first node's grants after node 2 was deleted: {view}")
        # kube-controller-manager's pod garbage collector deletes the pods of a deleted node
        # (after its 40 s quarantine); until then big-2's grant names a node that is gone.
        rig.wait("big-2 removed by the pod garbage collector", lambda: not rig.pod("big-2"),
                 150, interval=1)
        gone = time.monotonic() - t
        rig.apply(gpu_pod("big-3", [("main", {"gpumux.io/gpu-mem": 90})]))
        why = rig.wait("big-3 unschedulable", lambda: rig.unschedulable("big-3"), 60)
        rig.apply(gpu_pod("after-delete", [("main", WHOLE)]))
        rig.wait_running("after-delete")
        return (f"node 2 joined, GPUs in the extender after {joined:.1f} s; a 90 GiB share "
                f"Running on node 2 (GPU {want[:16]}..) in {big_s:.1f} s; drain: {waiting} "
                f"kept off cordoned node 2 ('{str(held)[:80]}'), Running on {rig.node} "
                f"{after_free:.1f} s after a GPU there was freed; node deleted: the extender "
                f"dropped it and its grant in {forgot:.1f} s, its pod garbage-collected after "
                f"{gone:.0f} s, a 90 GiB share waits ('{str(why)[:60]}'), whole-GPU pods still "
                f"placed on {rig.node}")
    finally:
        try:
            node2.down()  # its logs stay in OUT/node2.logs
        except Failed as e:  # reported beside the scenario's own outcome, never instead of it
            rig.say(f"stopping node 2 failed: {e}")


def second_scheduler(rig, node=None):
    """gpumux-scheduler-b: a second replica of the scheduler pod (kube-scheduler and the extender)
    made from the live Deployment, on the same Lease. On the rig every gpumux pod is on the host
    network, where two replicas of one Deployment would bind the same ports, so this one moves
    them: the extender to 127.0.0.1:12346 (its scheduler configuration too), its metrics to 9411,
    kube-scheduler's secure port to 10269."""
    dep = rig.get("deployment", "-n", SYS, "gpumux-scheduler")
    spec = dep["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"]
                  if v.get("configMap", {}).get("name", "").startswith("gpumux-scheduler-config"))
    config = rig.get("configmap", "-n", SYS, volume["configMap"]["name"])
    text = config["data"]["scheduler-config.yaml"]
    if "127.0.0.1:12345" not in text:
        raise Failed("the scheduler configuration does not call the extender on 127.0.0.1:12345")
    rig.apply({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "gpumux-scheduler-config-b", "namespace": SYS},
               "data": {"scheduler-config.yaml": text.replace("127.0.0.1:12345", "127.0.0.1:12346")}})
    volume["configMap"]["name"] = "gpumux-scheduler-config-b"
    scheduler = next(c for c in spec["containers"] if c["name"] == "kube-scheduler")
    scheduler["command"].append("--secure-port=10269")
    body = json.dumps(dep["spec"]).replace("127.0.0.1:12345", "127.0.0.1:12346") \
        .replace("0.0.0.0:9401", "0.0.0.0:9411").replace('"containerPort": 9401', '"containerPort": 9411') \
        .replace('"port": 10259', '"port": 10269').replace('"prometheus.io/port": "9401"',
                                                           '"prometheus.io/port": "9411"')
    b = json.loads(body)
    if node:
        b["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    b.pop("strategy", None)
    b["replicas"] = 1
    labels = {"app.kubernetes.io/name": "gpumux-scheduler-b", "app.kubernetes.io/part-of": "gpumux"}
    b["selector"] = {"matchLabels": {"app.kubernetes.io/name": "gpumux-scheduler-b"}}
    b["template"]["metadata"]["labels"] = labels
    rig.apply({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "gpumux-scheduler-b", "namespace": SYS, "labels": labels},
               "spec": b})
    rig.wait("gpumux-scheduler-b ready (its extender synced)",
             lambda: rig.get("deployment", "-n", SYS, "gpumux-scheduler-b")
             .get("status", {}).get("readyReplicas", 0) == 1, 180, interval=0.5)


def remove_second_scheduler(rig):
    rig.kubectl("delete", "deployment", "-n", SYS, "gpumux-scheduler-b", "--ignore-not-found",
                "--wait=true", check=False, timeout=180)
    rig.kubectl("delete", "configmap", "-n", SYS, "gpumux-scheduler-config-b",
                "--ignore-not-found", check=False)


def extender_binds(url):
    """Successful binds an extender has answered (its /metrics), or '?' when unreadable."""
    try:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    except (OSError, urllib.error.URLError):
        return "?"
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gpumux_extender_placements_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def lease_transitions(rig):
    lease = rig.get("lease", "-n", SYS, "gpumux-scheduler")
    return lease["spec"].get("leaseTransitions", 0), lease["spec"].get("holderIdentity", "")


def arrivals_across_a_failover(rig, lose, what):
    """60 GiB GPU pods arrive one every 2 s for 60 s (two on one 80 GiB GPU would break the
    capacity invariant, checked at every poll); each is deleted 6 s after it runs, so the GPUs
    keep freeing. 20 s in, lose() takes the leader away. Fails unless the first pod created after
    that is bound within 30 s, every pod runs and the lease moved; returns the figures."""
    transitions_before, _ = lease_transitions(rig)
    start = time.monotonic()
    created, bound, running, deleted, checks = {}, {}, {}, set(), 0
    t_del = None
    names = [f"fo-{i:02d}" for i in range(30)]
    nxt = 0
    while time.monotonic() - start < 150:
        now = time.monotonic() - start
        if nxt < len(names) and now >= 2 * nxt:
            rig.apply(gpu_pod(names[nxt], [("main", {"gpumux.io/gpu-mem": 60})]))
            created[names[nxt]] = now
            nxt += 1
        if t_del is None and now >= 20:
            lose()
            t_del = time.monotonic() - start
        by_name = {p["metadata"]["name"]: p for p in rig.get("pods", "-n", NS)["items"]}
        for n, p in by_name.items():
            if n in created and p["spec"].get("nodeName") and n not in bound:
                bound[n] = time.monotonic() - start
            if n in created and p["status"].get("phase") == "Running" and n not in running:
                running[n] = time.monotonic() - start
            if p["status"].get("phase") == "Failed":
                raise Failed(f"{n} failed: {p['status'].get('reason')} "
                             f"{p['status'].get('message')}")
        check_capacity(rig)
        checks += 1
        old = [n for n, t in running.items() if n not in deleted and
               time.monotonic() - start - t >= 6]
        if old:
            rig.kubectl("delete", "pod", "-n", NS, *old, "--grace-period=0", "--force",
                        "--wait=false")
            deleted.update(old)
        if len(running) == len(names):
            break
        time.sleep(0.3)
    lost = [n for n in names if n not in running]
    if lost:
        raise Failed(f"not Running after 150 s: {lost} (bound: {sorted(bound)})")
    after = sorted(t for t in bound.values() if t >= t_del)
    if not after:
        raise Failed(f"no pod was bound after {what}")
    gap = after[0] - t_del  # may be a bind the old leader had in flight
    # The first pod created after the loss: bound by whichever replica leads by then.
    first_new = min((n for n in names if created[n] >= t_del), key=lambda n: created[n])
    new_bound = bound[first_new] - t_del
    before = sorted(t for t in bound.values() if t < t_del)
    gaps = [b - a for a, b in zip(before, before[1:])]
    window = sorted(t for t in bound.values() if t_del - 10 <= t <= t_del + 40)
    longest = max((b - a for a, b in zip(window, window[1:])), default=0)
    transitions, _ = lease_transitions(rig)
    if new_bound > 30:
        raise Failed(f"the first pod created after {what} was bound {new_bound:.1f} s after it "
                     f"(the bound is 30 s)")
    if transitions <= transitions_before:
        raise Failed(f"the lease never moved: {what} did not take the leader")
    typical = sorted(gaps)[len(gaps) // 2] if gaps else 0
    return (f"{len(names)} pods, one every 2 s; {what} at {t_del:.1f} s; the first pod created "
            f"after it bound {new_bound:.1f} s after (the next bind of any pod {gap:.1f} s "
            f"after; the longest gap between binds around it {longest:.1f} s, median before "
            f"{typical:.1f} s); all {len(running)} Running, none lost; the capacity invariant "
            f"held at {checks} checks; lease transitions {transitions_before} -> {transitions}")


def installed_scheduler_pods(rig):
    return [p["metadata"]["name"] for p in rig.get("pods", "-n", SYS)["items"]
            if p["metadata"]["name"].startswith("gpumux-scheduler-")
            and not p["metadata"]["name"].startswith("gpumux-scheduler-b-")]


def s_scheduler_failover(rig):
    """Two scheduler replicas on one Lease; 20 s into the arrivals the leader's pod is deleted."""
    second_scheduler(rig)
    try:
        leader = installed_scheduler_pods(rig)
        summary = arrivals_across_a_failover(
            rig, lambda: rig.kubectl("delete", "pod", "-n", SYS, *leader, "--wait=false"),
            "the leader's pod deleted")
        return f"{summary}; the standby (replica b) bound " \
               f"{extender_binds('http://127.0.0.1:9411/metrics')} pods"
    finally:
        remove_second_scheduler(rig)


def s_scheduler_node_lost(rig):
    """The leader on a node that is lost. A second real node (second-node.sh) runs replica b,
    and the Lease is handed to it (the installed replica's pod deleted; its successor on the
    first node stands by). 20 s into the arrivals the second node is lost: its kubelet,
    containerd and every process in its cgroups killed at once (second-node.sh lose), its Node
    object left as a dead node's is. The standby takes over once the lease lapses."""
    node2 = SecondNode(rig)
    try:
        node2.script("up")
        for image in ("gpumux.tar", "kube-scheduler.tar"):
            subprocess.run(["ctr", "-a", os.path.join(node2.dir, "run", "containerd.sock"),
                            "-n", "k8s.io", "images", "import",
                            os.path.join(rig.args.out, "images", image)],
                           check=True, capture_output=True, timeout=300)
        second_scheduler(rig, node=NODE2)
        # Cordoned, so that the installed replica's successor stands by on the first node (the
        # anti-affinity keeps apart replicas of one Deployment, not of two).
        rig.kubectl("cordon", NODE2)
        transitions, _ = lease_transitions(rig)
        rig.kubectl("delete", "pod", "-n", SYS, *installed_scheduler_pods(rig))
        rig.wait("the lease handed to replica b", lambda: lease_transitions(rig)[0] > transitions,
                 60)
        rig.kubectl("rollout", "status", "-n", SYS, "deployment/gpumux-scheduler",
                    "--timeout=180s", timeout=190)
        b_url = "http://127.0.0.1:9411/metrics"
        b_before = extender_binds(b_url)
        rig.apply(gpu_pod("probe", [("main", {"gpumux.io/gpu-mem": 8})]))
        rig.wait_running("probe")
        b_after = extender_binds(b_url)
        if "?" in (b_before, b_after) or b_after <= b_before:
            raise Failed(f"replica b (on the second node) did not bind the probe ({b_before} -> "
                         f"{b_after} binds): it does not lead")
        rig.delete_pods("probe", grace=0)
        where = {p["spec"].get("nodeName") for p in rig.get(
            "pods", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-scheduler-b")["items"]}
        standby = {p["spec"].get("nodeName") for p in rig.get(
            "pods", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-scheduler")["items"]}
        if where != {NODE2} or standby != {rig.node}:
            raise Failed(f"replica b runs on {where}, the standby on {standby}")
        summary = arrivals_across_a_failover(
            rig, lambda: node2.script("lose"), "the leader's node lost")
        return f"{summary}; the first node's standby took over"
    finally:
        node2.script("down")
        rig.kubectl("delete", "pod", "-n", SYS, "-l", "app.kubernetes.io/name=gpumux-scheduler-b",
                    "--grace-period=0", "--force", check=False)
        remove_second_scheduler(rig)

SCENARIOS = [
    ("whole, shared, multi-container, multi-GPU pods", s_whole_shared_multi),
    ("two same-size pods at once", s_concurrent_same_size),
    ("burst of 8 pods on one node", s_burst),
    ("a pod waits for a GPU another pod frees", None),  # filled in main (tries)
    ("a pod the extender turned away waits for a share another pod frees", None),
    ("priority preemption", s_preemption),
    ("device plugin down", s_device_plugin_down),
    ("device plugin restarted", s_device_plugin_restart),
    ("extender restarted", s_extender_restart),
    ("kubelet restarted", s_kubelet_restart),
    ("OCI runtime path", s_oci_runtime),
    ("API server outage (15 s)", s_api_outage),
    ("node coordinator: grant decides, a deleted pod leaves", s_coordinator),
    ("kubectl gpumux nodes, pods, why, top", s_kubectl_gpumux),
    ("Houdini's stack: each service reports its GPUs (device plugin, OCI runtime)", s_houdini_stack),
    ("fgd-sat-reserve keeps the last idle GPUs for whole-GPU pods", s_fgd_sat_reserve),
    ("node agents change only their own node", s_node_agents_own_node),
    ("a pod cannot widen its grant with its own NVIDIA_VISIBLE_DEVICES", s_own_visible_devices),
    ("webhook: unmodified NVIDIA, HAMi, gpushare and KAI pods get gpumux grants", s_webhook_translates),
    ("webhook down: kube-system and unselected pods unaffected, selected GPU pods refused", s_webhook_down),
    ("jobgen's training pods pass Pod Security baseline", s_jobgen_baseline),
    ("MPS: a supervised control daemon per GPU, its folders and limits through Allocate", s_mps),
    ("two real nodes: a pod that fits only on the other, a drain while pods wait, a node deleted",
     s_two_nodes),
    ("enforcement: a share's container cgroup gets its grant as a hard limit at its start; a node "
     "that enforces nothing is shown, refused under --require-enforcement memory, warned about",
     s_enforcement),
    ("two scheduler replicas: the leader's pod deleted while GPU pods arrive; the next is bound "
     "within 30 s, no GPU granted twice, no pod lost", s_scheduler_failover),
    ("two webhook replicas: a rolling update and a certificate renewal refuse no selected pod",
     s_webhook_rollout),
    ("two scheduler replicas: the leader's node lost (kubelet, containerd, containers killed) while "
     "GPU pods arrive; the next is bound within 30 s, no GPU granted twice, no pod lost",
     s_scheduler_node_lost),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True)
    ap.add_argument("--rig", required=True)
    ap.add_argument("--rig-scripts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tries", type=int, default=20, help="tries of the freed-GPU scenario")
    ap.add_argument("--cdi-dir", default="", help="the rig's CDI spec folder ('' = no CDI)")
    ap.add_argument("--nvml-standin", default="",
                    help="the NVML stand-in library (its fake-nvml.state beside it)")
    ap.add_argument("--only", default="", help="comma-separated scenario numbers (1-based)")
    a = ap.parse_args()
    rig = Rig(a)
    rig.say(f"deploying gpumux with kubectl apply -k (deploy/overlays/{OVERLAY} and the rig's "
            f"patches) onto node {rig.node}")
    t = time.monotonic()
    try:
        deploy(rig)
    except Exception as e:  # noqa: BLE001 - report any setup failure plainly
        rig.say(f"SETUP FAILED: {e}")
        return 2
    rig.say(f"gpumux ready in {time.monotonic() - t:.1f} s")
    only = {int(x) for x in a.only.split(",") if x}
    results = []
    for i, (name, fn) in enumerate(SCENARIOS, 1):
        if only and i not in only:
            continue
        if fn is None and "share" in name:
            fn = lambda r: s_wait_for_freed_share(r, max(1, a.tries // 2))  # noqa: E731
        elif fn is None:
            fn = lambda r: s_wait_for_freed_gpu(r, a.tries)  # noqa: E731
        try:
            wait_gpumux_ready(rig, timeout=120)
        except Exception as e:  # noqa: BLE001
            rig.say(f"gpumux not ready before [{i}]: {e}")
        rig.say(f"[{i}] {name} ...")
        start = time.monotonic()
        marks = rig_log_marks(rig)
        try:
            detail = fn(rig)
            check_capacity(rig)
            ok = True
        except Exception as e:  # noqa: BLE001 - a scenario's failure is reported, then the next runs
            detail, ok = str(e), False
            try:
                check_capacity(rig)
            except Failed as inv:
                detail += " | " + str(inv)
        took = time.monotonic() - start
        if not ok:
            try:
                detail += failure_context(rig, i, took, marks)
            except Exception as e:  # noqa: BLE001 - the failure itself must still be reported
                detail += f" | (what gpumux logged could not be read: {e})"
        results.append({"scenario": name, "ok": ok, "seconds": round(took, 1), "detail": detail})
        rig.say(f"[{i}] {'PASS' if ok else 'FAIL'} ({took:.1f} s): {detail}")
        try:
            rig.clean()
        except Exception as e:  # noqa: BLE001
            rig.say(f"cleaning up after [{i}] failed: {e}")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("| scenario | result | time (s) | measured |\n|---|---|---|---|\n")
        for r in results:
            detail = " ".join(str(r['detail']).split())  # one table row, whatever kubectl wrote
            f.write(f"| {r['scenario']} | {'pass' if r['ok'] else 'FAIL'} | {r['seconds']} | "
                    f"{detail} |\n")
    passed = sum(r["ok"] for r in results)
    print(f"e2e: {passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
