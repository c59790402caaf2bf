#!/usr/bin/env python3
"""Checks deploy/ without a cluster.

  python3 deploy/check-manifests.py [--kubectl KUBECTL] [OVERLAY ...]
  python3 deploy/check-manifests.py --rendered FILE        (FILE '-': standard input)
  python3 deploy/check-manifests.py --workloads FILE ...   (FILE '-': standard input)

The files: every YAML file of deploy/base and deploy/examples parses; the examples' pods ask for
GPUs through gpumux-scheduler's resources or the OCI runtime path's variables (every example
file asks somewhere); the Prometheus scrape configuration
(deploy/monitoring/prometheus-scrape.yaml) keeps the pods the monitoring overlay marks.

The installs: each OVERLAY (default: every folder of deploy/overlays) rendered with
`KUBECTL kustomize` (default: kubectl; kubectl 1.20's embedded kustomize v2.0.3 and today's both
work), or a rendered FILE, is checked as one installation:
  - every Kubernetes object, field by field, against the types of the Kubernetes Python client
    (Debian: python3-kubernetes; skipped, saying so, without it);
  - one namespace for everything (one RoleBinding must sit in kube-system), and it exists;
  - every ConfigMap a workload mounts or reads a key of is in the install, with that key (a
    kustomize name suffix or namespace that did not follow shows here); the scheduler
    configuration kube-scheduler reads is deploy/base/extender/scheduler-config.yaml and uses
    only fields of kubescheduler.config.k8s.io/v1;
  - every workload's service account is defined and bound; bindings name roles defined here or
    built in; each ClusterRole grants what its daemon does with the API server; every
    DaemonSet's account is held to its own node by a ValidatingAdmissionPolicy bound with Deny;
  - the device plugin and the coordinator run in the extender's namespace with the extender's
    image and memory unit; the kubelet folder and the socket folder are mounted; the probes ask
    the addresses the daemons listen on;
  - listeners are on loopback, except a --metrics-address that Prometheus is told to scrape
    (pod annotations prometheus.io/scrape, port, path, and a container port named metrics);
    the extender's --listen (it takes bind) is always on loopback.
The workloads (`--workloads`, e.g. what `gpumux jobgen --format k8s` writes): every object is a
Pod or a Job that makes pods, names a scheduler, asks only for known gpumux resources with
whole-number quantities and carries string labels and annotations; field by field as above.
Exit 1 with a list of problems, 0 when there are none.
"""
import argparse
import importlib
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import types

import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent
SCHEDULER_CONFIG = DEPLOY / "base/extender/scheduler-config.yaml"
SCRAPE_CONFIG = DEPLOY / "monitoring/prometheus-scrape.yaml"
# The one object that may not be in the install's namespace: kube-scheduler reads the
# extension-apiserver-authentication ConfigMap of kube-system.
OTHER_NAMESPACE = {("RoleBinding", "gpumux-scheduler-extension-apiserver-authentication-reader"):
                   "kube-system"}
problems = []


def problem(text):
    problems.append(text)


def load_text(text, where):
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        problem(f"{where}: {e}")
        return []


# KubeSchedulerConfiguration v1 fields used or likely to be used (k8s.io/kube-scheduler/config/v1).
SCHED = {
    "": {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
         "enableProfiling", "enableContentionProfiling", "percentageOfNodesToScore",
         "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders",
         "delayCacheUntilActive"},
    "leaderElection": {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod",
                       "resourceLock", "resourceName", "resourceNamespace"},
    "profiles": {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"},
    "extenders": {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight",
                  "bindVerb", "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable",
                  "managedResources", "ignorable"},
    "managedResources": {"name", "ignoredByScheduler"},
}


def check_scheduler_config(doc, where):
    def keys(obj, allowed, at):
        for k in sorted(set(obj) - SCHED[allowed]):
            problem(f"{where}: unknown field {at}{k}")
    if not isinstance(doc, dict) or doc.get("kind") != "KubeSchedulerConfiguration":
        return problem(f"{where}: not a KubeSchedulerConfiguration")
    keys(doc, "", "")
    keys(doc.get("leaderElection", {}), "leaderElection", "leaderElection.")
    for p in doc.get("profiles", []):
        keys(p, "profiles", "profiles[].")
    for e in doc.get("extenders", []):
        keys(e, "extenders", "extenders[].")
        for r in e.get("managedResources", []):
            keys(r, "managedResources", "extenders[].managedResources[].")


def client_models():
    """kubernetes.client.models without running kubernetes/__init__.py (which needs auth libraries)."""
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = pathlib.Path(list(spec.submodule_search_locations)[0])
    for name, path in (("kubernetes", base), ("kubernetes.client", base / "client")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    try:
        return importlib.import_module("kubernetes.client.models")
    except ImportError:
        return None


# Kinds newer than Debian 12's Python client (Kubernetes 1.22): their fields are checked here.
NEWER_KINDS = {
    "V1ValidatingAdmissionPolicy": {
        "": {"apiVersion", "kind", "metadata", "spec"},
        "spec": {"failurePolicy", "matchConstraints", "matchConditions", "variables", "validations",
                 "auditAnnotations", "paramKind"},
    },
    "V1ValidatingAdmissionPolicyBinding": {
        "": {"apiVersion", "kind", "metadata", "spec"},
        "spec": {"policyName", "validationActions", "matchResources", "paramRef"},
    },
}


def check_newer_kind(obj, type_name, where):
    for at, allowed in NEWER_KINDS[type_name].items():
        part = obj if at == "" else obj.get(at)
        if not isinstance(part, dict):
            problem(f"{where}: {at} should be an object")
            continue
        for k in part:
            if k not in allowed:
                problem(f"{where}: unknown field {at}.{k} ({type_name})".replace(" .", " "))


# Fields newer than Debian 12's Python client, by the type that holds them: checked here, the
# rest of the object strictly.
NEWER_FIELDS = {"V1MutatingWebhook": {"matchConditions": {"name", "expression"}}}


def check_newer_fields(obj, type_name, at, where):
    rest = dict(obj)
    for field, keys in NEWER_FIELDS[type_name].items():
        value = rest.pop(field, None)
        if value is None:
            continue
        if not isinstance(value, list):
            problem(f"{where}: {at}.{field} should be a list")
            continue
        for i, item in enumerate(value):
            if not isinstance(item, dict) or set(item) != keys or \
                    not all(isinstance(v, str) and v for v in item.values()):
                problem(f"{where}: {at}.{field}[{i}] must have exactly {sorted(keys)} as strings")
    return rest


def check_strict(models, obj, type_name, at, where):
    if at == "" and type_name in NEWER_KINDS and getattr(models, type_name, None) is None:
        return check_newer_kind(obj, type_name, where)
    if type_name in NEWER_FIELDS and isinstance(obj, dict):
        obj = check_newer_fields(obj, type_name, at, where)
    if type_name.startswith("list["):
        if not isinstance(obj, list):
            return problem(f"{where}: {at} should be a list")
        for i, item in enumerate(obj):
            check_strict(models, item, type_name[5:-1], f"{at}[{i}]", where)
    elif type_name.startswith("dict("):
        if not isinstance(obj, dict):
            return problem(f"{where}: {at} should be a map")
        for k, v in obj.items():
            check_strict(models, v, type_name[5:-1].split(", ", 1)[1], f"{at}.{k}", where)
    elif type_name == "str":  # also quantities, which may be written as numbers
        if not isinstance(obj, (str, int, float)) or isinstance(obj, bool):
            problem(f"{where}: {at} should be a string")
    elif type_name in ("int", "bool"):
        if type(obj).__name__ != type_name:
            problem(f"{where}: {at} should be {type_name}, not {obj!r}")
    elif type_name in ("object", "float", "datetime", "date"):
        pass
    else:
        cls = getattr(models, type_name, None)
        if cls is None:
            return problem(f"{where}: unknown kind ({type_name})")
        if not isinstance(obj, dict):
            return problem(f"{where}: {at} should be an object ({type_name})")
        fields = {json: py for py, json in cls.attribute_map.items()}
        for k, v in obj.items():
            if k not in fields:
                problem(f"{where}: unknown field {at}.{k} ({type_name})")
            else:
                check_strict(models, v, cls.openapi_types[fields[k]], f"{at}.{k}", where)


def pod_spec(doc):
    """The pod spec of a Pod, or of the pods a workload object creates; None for other kinds."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "Pod":
        return spec
    if doc.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {})
    elif doc.get("kind") not in ("Job", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet"):
        return None
    return (spec.get("template") or {}).get("spec") or {}


def pod_annotations(doc):
    return ((((doc.get("spec") or {}).get("template") or {}).get("metadata") or {})
            .get("annotations") or {})


def arg(container, flag, default=None):
    """The value of `--flag value` or `--flag=value` in a container's args."""
    args = [str(a) for a in container.get("args", []) or []]
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return default


def host_port(address):
    host, _, port = str(address).rpartition(":")
    return host.strip("[]"), port


def loopback(host):
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def name_ns(doc):
    meta = doc.get("metadata") or {}
    return meta.get("name"), meta.get("namespace")


def describe(doc):
    return f"{doc.get('kind')}/{name_ns(doc)[0]}"


# --- the files -------------------------------------------------------------------------------
def check_files(models):
    for folder in ("base", "examples"):
        for path in sorted((DEPLOY / folder).rglob("*.yaml")):
            if path.name == "kustomization.yaml":
                continue
            asked = False
            for doc in load_text(path.read_text(), path.relative_to(DEPLOY)):
                where = f"{path.relative_to(DEPLOY)} {describe(doc)}"
                if doc.get("kind") == "KubeSchedulerConfiguration":
                    check_scheduler_config(doc, where)
                elif models is not None:
                    check_strict(models, doc, "V1" + str(doc.get("kind", "?")), "", where)
                if folder == "examples":
                    asked = check_example(doc, path.name) or asked
            if folder == "examples" and not asked:
                problem(f"examples/{path.name}: asks for no gpumux.io resource")
    check_scrape_config()


# Examples: a pod that asks gpumux for GPUs does so through gpumux-scheduler (extended resources)
# or through the OCI runtime path (runtimeClassName gpumux with HOUDINI_GPU_*/NVIDIA_VISIBLE_DEVICES,
# and no gpumux.io resources: the hook would not see them). A file may hold pods that ask for no
# GPU (a stack's services), but every file asks for one somewhere.
HOUDINI_ASK = {"HOUDINI_GPU_ENABLED", "HOUDINI_GPU_REQUESTED", "HOUDINI_GPU_REQUEST",
               "NVIDIA_VISIBLE_DEVICES"}


def check_example(doc, name):
    """Problems of one object of an example file; True when it asks gpumux for a GPU."""
    if doc.get("kind") in ("Namespace", "Service", "RuntimeClass"):
        return False
    spec = pod_spec(doc)
    if spec is None:
        problem(f"examples/{name}: {doc.get('kind')} is neither a pod nor makes pods")
        return False
    at = "spec." if doc.get("kind") == "Pod" else "pod template spec."
    containers = spec.get("containers", [])
    asks = [k for c in containers for k in c.get("resources", {}).get("limits", {})
            if k.startswith("gpumux.io/")]
    env = {e.get("name") for c in containers for e in c.get("env", []) or []}
    oci = spec.get("runtimeClassName") == "gpumux"
    if asks and spec.get("schedulerName") != "gpumux-scheduler":
        problem(f"examples/{name}: {at}schedulerName is not gpumux-scheduler")
    if oci and asks:
        problem(f"examples/{name}: {at}runtimeClassName gpumux with gpumux.io resources "
                "(the OCI runtime path reads HOUDINI_GPU_*, not resources)")
    return bool(asks) or (oci and bool(env & HOUDINI_ASK))


def scrape_job():
    """The gpumux job of deploy/monitoring/prometheus-scrape.yaml, or None (a problem said)."""
    where = SCRAPE_CONFIG.relative_to(DEPLOY)
    if not SCRAPE_CONFIG.exists():
        return problem(f"{where}: missing")
    docs = load_text(SCRAPE_CONFIG.read_text(), where)
    jobs = [j for d in docs for j in (d or {}).get("scrape_configs", []) or []
            if j.get("job_name") == "gpumux"]
    if len(jobs) != 1:
        return problem(f"{where}: no scrape_configs entry with job_name gpumux")
    return jobs[0]


def check_scrape_config():
    job = scrape_job()
    if job is None:
        return
    where = f"{SCRAPE_CONFIG.relative_to(DEPLOY)} job gpumux"
    sd = job.get("kubernetes_sd_configs") or []
    if not sd or any(s.get("role") != "pod" for s in sd):
        problem(f"{where}: kubernetes_sd_configs must discover pods (role: pod)")
    keeps = {tuple(r.get("source_labels") or []): str(r.get("regex"))
             for r in job.get("relabel_configs") or [] if r.get("action") == "keep"}
    if keeps.get(("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)) != "true":
        problem(f"{where}: does not keep pods annotated prometheus.io/scrape: \"true\"")
    if keeps.get(("__meta_kubernetes_pod_container_port_name",)) != "metrics":
        problem(f"{where}: does not keep only the container ports named metrics")


# --- one install -------------------------------------------------------------------------------
def check_install(docs, label, models):
    def objects(kind):
        return [d for d in docs if d.get("kind") == kind]

    for doc in docs:
        if models is not None:
            check_strict(models, doc, "V1" + str(doc.get("kind", "?")), "", f"{label}: {describe(doc)}")

    def container(kind, name, cname):
        for doc in objects(kind):
            if name_ns(doc)[0] == name:
                for c in pod_spec(doc).get("containers", []):
                    if c.get("name") == cname:
                        return doc, c
        problem(f"{label}: no {kind}/{name} with a container {cname}")
        return None, None

    ext_doc, extender = container("Deployment", "gpumux-scheduler", "gpumux-extender")
    if ext_doc is None:
        return
    ns = name_ns(ext_doc)[1]

    # One namespace, which the install creates.
    if ns not in {name_ns(d)[0] for d in objects("Namespace")}:
        problem(f"{label}: the namespace {ns} of the extender is not created (no Namespace object)")
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "RuntimeClass", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding", "MutatingWebhookConfiguration"}
    for doc in docs:
        if doc.get("kind") in cluster_scoped:
            continue
        want = OTHER_NAMESPACE.get((doc.get("kind"), name_ns(doc)[0]), ns)
        if name_ns(doc)[1] != want:
            problem(f"{label}: {describe(doc)} is in namespace {name_ns(doc)[1]}, not {want}")

    # ConfigMaps that workloads mount or read exist, with their keys.
    configmaps = {name_ns(d): d for d in objects("ConfigMap")}
    workloads = [d for d in docs if d.get("kind") in ("Deployment", "DaemonSet")]
    for w in workloads:
        spec = pod_spec(w)
        for v in spec.get("volumes", []) or []:
            ref = (v.get("configMap") or {}).get("name")
            if ref is not None and (ref, name_ns(w)[1]) not in configmaps:
                problem(f"{label}: {describe(w)} mounts ConfigMap {ref}, which the install lacks")
        for c in spec.get("containers", []) or []:
            for e in c.get("env", []) or []:
                ref = ((e.get("valueFrom") or {}).get("configMapKeyRef") or {})
                if not ref:
                    continue
                cm = configmaps.get((ref.get("name"), name_ns(w)[1]))
                if cm is None or ref.get("key") not in (cm.get("data") or {}):
                    problem(f"{label}: {describe(w)} container {c.get('name')} reads key "
                            f"{ref.get('key')} of ConfigMap {ref.get('name')}, which the install "
                            f"lacks")

    def env_value(doc, c, var):
        for e in c.get("env", []) or []:
            if e.get("name") != var:
                continue
            if "value" in e:
                return str(e["value"])
            ref = ((e.get("valueFrom") or {}).get("configMapKeyRef") or {})
            cm = configmaps.get((ref.get("name"), name_ns(doc)[1]))
            return ((cm or {}).get("data") or {}).get(ref.get("key"))
        return None

    def resolved_arg(doc, c, flag, default=None):
        value = arg(c, flag, default)
        if value is not None and value.startswith("$(") and value.endswith(")"):
            return env_value(doc, c, value[2:-1])
        return value

    # The scheduler configuration.
    _, scheduler = container("Deployment", "gpumux-scheduler", "kube-scheduler")
    if scheduler:
        config_path = next((str(a).split("=", 1)[1] for a in scheduler.get("command", []) or []
                            if str(a).startswith("--config=")), None)
        mounted = None
        volumes = {v.get("name"): v for v in pod_spec(ext_doc).get("volumes", []) or []}
        for m in scheduler.get("volumeMounts", []) or []:
            if config_path and config_path.startswith(m.get("mountPath", "").rstrip("/") + "/"):
                cm_name = (volumes.get(m.get("name"), {}).get("configMap") or {}).get("name")
                cm = configmaps.get((cm_name, ns))
                key = config_path[len(m.get("mountPath", "").rstrip("/")) + 1:]
                mounted = ((cm or {}).get("data") or {}).get(key)
        if mounted is None:
            problem(f"{label}: kube-scheduler's --config {config_path} is not in a mounted ConfigMap")
        else:
            if mounted != SCHEDULER_CONFIG.read_text():
                problem(f"{label}: the scheduler configuration kube-scheduler reads is not "
                        f"{SCHEDULER_CONFIG.relative_to(DEPLOY)}")
            check_scheduler_config(yaml.safe_load(mounted), f"{label}: scheduler configuration")

    # Service accounts and bindings.
    service_accounts = {name_ns(d) for d in objects("ServiceAccount")}
    bound = {(s.get("name"), s.get("namespace") or name_ns(b)[1])
             for kind in ("ClusterRoleBinding", "RoleBinding") for b in objects(kind)
             for s in b.get("subjects", []) or [] if s.get("kind") == "ServiceAccount"}
    for doc in workloads:
        account = (pod_spec(doc).get("serviceAccountName"), name_ns(doc)[1])
        if account[0] is None and pod_spec(doc).get("automountServiceAccountToken") is False:
            continue  # a workload that talks to no API server needs no account of its own
        if account[0] is None:
            problem(f"{label}: {describe(doc)} names no serviceAccountName")
        elif account not in service_accounts:
            problem(f"{label}: {describe(doc)}: no ServiceAccount {account[1]}/{account[0]}")
        elif account not in bound:
            problem(f"{label}: {describe(doc)}: ServiceAccount {account[1]}/{account[0]} is bound to no role")
    # Node agents (DaemonSets that may patch nodes) are held to their own node by an admission
    # policy that names their account and is bound with Deny (deploy/base/node-agents).
    denying = {(b.get("spec") or {}).get("policyName")
               for b in objects("ValidatingAdmissionPolicyBinding")
               if "Deny" in ((b.get("spec") or {}).get("validationActions") or [])}
    held = " ".join(str(c.get("expression", "")) for d in objects("ValidatingAdmissionPolicy")
                    if name_ns(d)[0] in denying
                    for c in (d.get("spec") or {}).get("matchConditions") or [])
    for doc in objects("DaemonSet"):
        sa, ns = pod_spec(doc).get("serviceAccountName"), name_ns(doc)[1]
        if sa and f"system:serviceaccount:{ns}:{sa}" not in held:
            problem(f"{label}: {describe(doc)}: no admission policy (bound with Deny) holds "
                    f"ServiceAccount {ns}/{sa} to its own node")
    roles = {("ClusterRole", name_ns(d)[0]) for d in objects("ClusterRole")} | \
            {("Role", name_ns(d)[0]) for d in objects("Role")}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for doc in objects(kind):
            ref = doc.get("roleRef") or {}
            builtin = str(ref.get("name", "")).startswith("system:") or \
                ref.get("name") == "extension-apiserver-authentication-reader"
            if not builtin and (ref.get("kind"), ref.get("name")) not in roles:
                problem(f"{label}: {kind}/{name_ns(doc)[0]} refers to {ref.get('kind')}/"
                        f"{ref.get('name')}, which the install does not define")

    # What each daemon does with the API server, against what its ClusterRole grants (the
    # extender's bind patches the node to take the node lock: a role without it made every bind
    # on a node with the device plugin fail with 403 Forbidden).
    needs = {
        "gpumux-extender": {("", "pods"): {"get", "list", "watch", "patch"},
                            ("", "pods/binding"): {"create"},
                            ("", "nodes"): {"get", "list", "watch", "patch"}},
        "gpumux-coordinator": {("", "pods"): {"get", "list", "watch"},
                               ("", "nodes"): {"patch"}},  # the gpumux.io/coordinator annotation
        "gpumux-device-plugin": {("", "pods"): {"get", "list", "watch"},
                                 ("", "nodes"): {"get", "list", "watch", "patch"}},
        # the warning for a translated share no node enforces (a node list of limit 1)
        "gpumux-webhook": {("", "nodes"): {"list"}},
    }
    cluster_roles = {name_ns(d)[0]: d for d in objects("ClusterRole")}
    for role_name, wanted in needs.items():
        role = cluster_roles.get(role_name)
        if role is None:
            problem(f"{label}: ClusterRole {role_name} is missing")
            continue
        granted = {}
        for rule in role.get("rules", []) or []:
            for group in rule.get("apiGroups", []) or []:
                for resource in rule.get("resources", []) or []:
                    granted.setdefault((group, resource), set()).update(rule.get("verbs", []) or [])
        for key, verbs in wanted.items():
            missing = verbs - granted.get(key, set())
            if missing:
                problem(f"{label}: ClusterRole {role_name}: {key[1]} lacks {', '.join(sorted(missing))}")

    # The extender itself.
    where = f"{label}: Deployment/gpumux-scheduler"
    listen = arg(extender, "--listen", "127.0.0.1:12345")
    if not loopback(host_port(listen)[0]):
        problem(f"{where}: the extender's --listen {listen} is not loopback (it takes bind)")
    policy = resolved_arg(ext_doc, extender, "--policy", "fgd")
    if not policy:
        problem(f"{where}: --policy {arg(extender, '--policy')} has no value")
    for probe in ("livenessProbe", "readinessProbe"):
        command = " ".join(((extender.get(probe) or {}).get("exec") or {}).get("command", []) or [])
        if f"http://127.0.0.1:{host_port(listen)[1]}/" not in command:
            problem(f"{where}: {probe} does not ask --listen {listen}")

    # The device plugin and the coordinator against the extender.
    dp_doc, plugin = container("DaemonSet", "gpumux-device-plugin", "device-plugin")
    co_doc, coordinator = container("DaemonSet", "gpumux-coordinator", "coordinator")
    for doc, c, sub in ((dp_doc, plugin, "device-plugin"), (co_doc, coordinator, "coordinator")):
        if c is None:
            continue
        where = f"{label}: {describe(doc)}"
        if c.get("image") != extender.get("image"):
            problem(f"{where}: image {c.get('image')} is not the extender's {extender.get('image')}")
        if [str(a) for a in c.get("args", []) or []][:1] != [sub]:
            problem(f"{where}: args do not start with the subcommand {sub}")
        env = {e.get("name"): e for e in c.get("env", []) or []}
        flag = "--node-name" if sub == "device-plugin" else "--node"
        if ((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") \
                != "spec.nodeName" and arg(c, flag) is None:
            problem(f"{where}: neither {flag} nor NODE_NAME from spec.nodeName")

    def probes_ask(doc, c, address, paths):
        host, port = host_port(address)
        probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        for probe, path in zip(("livenessProbe", "readinessProbe"), paths):
            command = " ".join(((c.get(probe) or {}).get("exec") or {}).get("command", []) or [])
            if f"http://{probe_host}:{port}/{path}" not in command:
                problem(f"{label}: {describe(doc)}: {probe} does not ask {address} for /{path}")

    if plugin:
        where = f"{label}: {describe(dp_doc)}"
        unit = (arg(plugin, "--gpu-mem-unit-mib", "1024"), arg(extender, "--gpu-mem-unit-mib", "1024"))
        if unit[0] != unit[1]:
            problem(f"{where}: --gpu-mem-unit-mib {unit[0]} differs from the extender's {unit[1]}")
        kubelet_dir = arg(plugin, "--kubelet-dir", "/var/lib/kubelet/device-plugins")
        host_paths = {v.get("name"): (v.get("hostPath") or {}).get("path")
                      for v in pod_spec(dp_doc).get("volumes", []) or []}
        if not any(m.get("mountPath") == kubelet_dir and
                   host_paths.get(m.get("name")) == "/var/lib/kubelet/device-plugins"
                   for m in plugin.get("volumeMounts", []) or []):
            problem(f"{where}: --kubelet-dir {kubelet_dir} is not the hostPath /var/lib/kubelet/device-plugins")
        probes_ask(dp_doc, plugin, arg(plugin, "--metrics-address", "127.0.0.1:9402"),
                   ("healthz", "readyz"))
    if coordinator:
        where = f"{label}: {describe(co_doc)}"
        listen = arg(coordinator, "--listen", "127.0.0.1:9403")
        if not loopback(host_port(listen)[0]):
            problem(f"{where}: --listen {listen} is not loopback (it takes the job protocol)")
        probes_ask(co_doc, coordinator, listen, ("healthz", "healthz"))
        socket = arg(coordinator, "--socket", "/run/gpumux/coordinator.sock")
        host_paths = {v.get("name"): (v.get("hostPath") or {}).get("path")
                      for v in pod_spec(co_doc).get("volumes", []) or []}
        folder = socket.rsplit("/", 1)[0]
        if not any(m.get("mountPath") == folder and host_paths.get(m.get("name")) == folder
                   for m in coordinator.get("volumeMounts", []) or []):
            problem(f"{where}: the socket's folder {folder} is not the same hostPath (pods mount it)")
        handed = arg(plugin, "--coordinator-dir") if plugin else None
        if handed is not None and handed != folder:
            problem(f"{label}: {describe(dp_doc)}: --coordinator-dir {handed} is not the "
                    f"coordinator's socket folder {folder}")

    # Listeners: loopback unless Prometheus is told to scrape them.
    scraped_namespaces = None
    job = scrape_job() if any(pod_annotations(w).get("prometheus.io/scrape") == "true"
                              for w in workloads) else None
    if job is not None:
        scraped_namespaces = {n for s in job.get("kubernetes_sd_configs") or []
                              for n in ((s.get("namespaces") or {}).get("names") or [])}
    for w in workloads:
        annotations = pod_annotations(w)
        scraped = annotations.get("prometheus.io/scrape") == "true"
        where = f"{label}: {describe(w)}"
        wide = []
        for c in pod_spec(w).get("containers", []) or []:
            address = arg(c, "--metrics-address")
            if address is None or loopback(host_port(address)[0]):
                continue
            wide.append((c, host_port(address)[1]))
        if not scraped:
            for c, port in wide:
                problem(f"{where}: container {c.get('name')} serves /metrics beyond loopback "
                        f"(port {port}) but the pod is not annotated for Prometheus")
            continue
        port = str(annotations.get("prometheus.io/port", ""))
        if annotations.get("prometheus.io/path", "/metrics") != "/metrics":
            problem(f"{where}: prometheus.io/path is {annotations.get('prometheus.io/path')}, not /metrics")
        matching = [c for c, p in wide if p == port]
        if not matching:
            problem(f"{where}: prometheus.io/port {port} is not a --metrics-address beyond loopback")
        for c in matching:
            if not any(str(p.get("containerPort")) == port and p.get("name") == "metrics"
                       for p in c.get("ports", []) or []):
                problem(f"{where}: container {c.get('name')} does not declare port {port} named "
                        f"metrics (the scrape configuration keeps only that port)")
        if scraped_namespaces is not None and name_ns(w)[1] not in scraped_namespaces:
            problem(f"{where}: {SCRAPE_CONFIG.relative_to(DEPLOY)} does not discover pods in "
                    f"namespace {name_ns(w)[1]}")
    check_webhook(docs, label, extender)
    return f"policy {policy}, image {extender.get('image')}"


def check_webhook(docs, label, extender):
    """gpumux-webhook: its Service reaches its listener, its certificate covers the Service's
    name, and no webhook of its configuration can see kube-system or gpumux-system."""
    configs = [d for d in docs if d.get("kind") == "MutatingWebhookConfiguration"]
    deployment = next((d for d in docs if d.get("kind") == "Deployment" and
                       name_ns(d)[0] == "gpumux-webhook"), None)
    if not configs and deployment is None:
        return
    if deployment is None or len(configs) != 1:
        return problem(f"{label}: the webhook needs its Deployment and one configuration")
    c = pod_spec(deployment)["containers"][0]
    where = f"{label}: {describe(deployment)}"
    if c.get("image") != extender.get("image"):
        problem(f"{where}: image {c.get('image')} is not the extender's {extender.get('image')}")
    port = host_port(arg(c, "--listen", "127.0.0.1:9443"))[1]
    names = (arg(c, "--tls-names", "gpumux-webhook.gpumux-system.svc") or "").split(",")
    unit = (arg(c, "--gpu-mem-unit-mib", "1024"), arg(extender, "--gpu-mem-unit-mib", "1024"))
    if unit[0] != unit[1]:
        problem(f"{where}: --gpu-mem-unit-mib {unit[0]} differs from the extender's {unit[1]}")
    services = {name_ns(d): d for d in docs if d.get("kind") == "Service"}
    for hook in configs[0].get("webhooks", []):
        at = f"{label}: webhook {hook.get('name')}"
        excluded = set()
        for e in (hook.get("namespaceSelector") or {}).get("matchExpressions", []) or []:
            if e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "NotIn":
                excluded |= set(e.get("values") or [])
        if not {"kube-system", "gpumux-system"} <= excluded:
            problem(f"{at}: its namespaceSelector does not exclude kube-system and gpumux-system")
        if not hook.get("matchConditions"):
            problem(f"{at}: no matchConditions (every pod of a selected namespace would wait on it)")
        ref = (hook.get("clientConfig") or {}).get("service")
        if ref is None:
            continue  # a URL (the e2e rig's): nothing to match
        svc = services.get((ref.get("name"), ref.get("namespace")))
        if svc is None:
            problem(f"{at}: no Service {ref.get('namespace')}/{ref.get('name')}")
            continue
        if f"{ref.get('name')}.{ref.get('namespace')}.svc" not in names:
            problem(f"{at}: --tls-names {','.join(names)} does not cover "
                    f"{ref.get('name')}.{ref.get('namespace')}.svc")
        targets = [str(p.get("targetPort")) for p in svc["spec"].get("ports", [])
                   if p.get("port") == ref.get("port", 443)]
        if targets != [str(port)]:
            problem(f"{at}: Service port {ref.get('port', 443)} goes to {targets}, not the "
                    f"webhook's --listen port {port}")


def render(kubectl, overlay):
    try:
        p = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True,
                           timeout=120)
    except OSError as e:
        problem(f"{overlay}: cannot run {kubectl}: {e}")
        return None
    if p.returncode != 0:
        problem(f"{overlay}: {kubectl} kustomize failed: {p.stderr.strip()}")
        return None
    return p.stdout


def kubectl_version(kubectl):
    try:
        p = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True,
                           timeout=60)
    except OSError:
        return "?"
    text = p.stdout.strip().splitlines()
    return text[0] if text else "?"


GPUMUX_RESOURCES = {"gpumux.io/gpu", "gpumux.io/gpu-mem", "gpumux.io/gpu-milli"}


def check_workload(doc, where):
    """A Pod or Job of a trace-driven workload (see the module's docstring)."""
    spec = pod_spec(doc)
    if spec is None or doc.get("kind") not in ("Pod", "Job"):
        return problem(f"{where}: {doc.get('kind')} is neither a Pod nor a Job")
    if not spec.get("schedulerName"):
        problem(f"{where}: no schedulerName")
    metas = [doc.get("metadata") or {}]
    if doc.get("kind") == "Job":
        metas.append(((doc.get("spec") or {}).get("template") or {}).get("metadata") or {})
    for meta in metas:
        for field in ("labels", "annotations"):
            for k, v in (meta.get(field) or {}).items():
                if not isinstance(v, str):
                    problem(f"{where}: metadata.{field}.{k} is {v!r}, not a string")
    for c in spec.get("containers", []) or []:
        for section in ("limits", "requests"):
            for k, v in ((c.get("resources") or {}).get(section) or {}).items():
                if k.startswith("gpumux.io/") and k not in GPUMUX_RESOURCES:
                    problem(f"{where}: unknown resource {k}")
                if k in GPUMUX_RESOURCES and not str(v).isdigit():
                    problem(f"{where}: {k} is {v!r}, not a whole number")


def check_workloads(names, models):
    count = 0
    for name in names:
        text = sys.stdin.read() if name == "-" else pathlib.Path(name).read_text()
        objects = load_text(text, name)
        if len(objects) == 1 and str(objects[0].get("kind", "")).endswith("List"):
            objects = objects[0].get("items") or []
        for i, doc in enumerate(objects, 1):
            where = f"{name} object {i} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name', '')}"
            if models is not None:
                check_strict(models, doc, "V1" + str(doc.get("kind", "?")), "", where)
            check_workload(doc, where)
            count += 1
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overlays", nargs="*", help="kustomize folders (default: deploy/overlays/*)")
    parser.add_argument("--kubectl", default="kubectl", help="the kubectl that renders them")
    parser.add_argument("--rendered", help="check this rendered install instead ('-': stdin)")
    parser.add_argument("--workloads", nargs="+", metavar="FILE",
                        help="check these workload manifests instead ('-': stdin)")
    args = parser.parse_args()

    models = client_models()
    if args.workloads:
        count = check_workloads(args.workloads, models)
        for p in problems:
            print(p)
        print(f"{count} objects in {len(args.workloads)} files; field-by-field check "
              f"{'done' if models else 'skipped (no Kubernetes Python client)'}; "
              f"{len(problems)} problem(s)")
        return 1 if problems else 0
    check_files(models)
    summaries = []
    if args.rendered:
        text = sys.stdin.read() if args.rendered == "-" else pathlib.Path(args.rendered).read_text()
        summaries.append((args.rendered, check_install(load_text(text, args.rendered),
                                                       args.rendered, models)))
    else:
        if shutil.which(args.kubectl) is None:
            problem(f"no {args.kubectl} to render the overlays: install Debian's kubernetes-client "
                    f"(scripts/setup.sh) or pass --kubectl")
        else:
            print(f"rendering with {args.kubectl}: {kubectl_version(args.kubectl)}")
            overlays = args.overlays or sorted(p for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
            for overlay in overlays:
                text = render(args.kubectl, overlay)
                if text is not None:
                    label = str(pathlib.Path(overlay).resolve().relative_to(DEPLOY.parent)) \
                        if str(pathlib.Path(overlay).resolve()).startswith(str(DEPLOY.parent)) \
                        else str(overlay)
                    docs = load_text(text, label)
                    summaries.append((label, f"{len(docs)} objects, " +
                                      str(check_install(docs, label, models))))
    for p in problems:
        print(p)
    for label, summary in summaries:
        print(f"{label}: {summary}")
    print(f"field-by-field check {'done' if models else 'skipped (no Kubernetes Python client)'}; "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
