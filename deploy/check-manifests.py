#!/usr/bin/env python3
"""Checks deploy/: every YAML file parses; the ConfigMap in extender/deployment.yaml holds
exactly extender/scheduler-config.yaml; the scheduler config uses only known fields; the
examples (pods, and the pods of jobs) ask gpumux-scheduler for gpumux resources; every
workload's service account is defined and bound; the device plugin runs in the extender's
namespace with the extender's image and the same --gpu-mem-unit-mib, mounts the kubelet's
device-plugin folder, and is probed on its --metrics-address. With the Kubernetes Python client
importable (Debian: python3-kubernetes), every Kubernetes object is also checked field by field
against the API's types (unknown or misspelt fields, wrong kinds of values). No cluster needed.
  python3 deploy/check-manifests.py            exit 1 and a list of problems if any
  python3 deploy/check-manifests.py FILE...    the same object checks on the workload manifests
                                               of FILE (e.g. from `gpumux jobgen --format k8s`;
                                               - for stdin) instead of deploy/
"""
import importlib, importlib.util, pathlib, sys, types
import yaml

DEPLOY = pathlib.Path(__file__).resolve().parent
problems = []

def load(path):
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as e:
        problems.append(f"{path}: {e}")
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
        for k in set(obj) - SCHED[allowed]:
            problems.append(f"{where}: unknown field {at}{k}")
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

def check_strict(models, obj, type_name, at, where):
    if type_name.startswith("list["):
        if not isinstance(obj, list):
            return problems.append(f"{where}: {at} should be a list")
        for i, item in enumerate(obj):
            check_strict(models, item, type_name[5:-1], f"{at}[{i}]", where)
    elif type_name.startswith("dict("):
        if not isinstance(obj, dict):
            return problems.append(f"{where}: {at} should be a map")
        for k, v in obj.items():
            check_strict(models, v, type_name[5:-1].split(", ", 1)[1], f"{at}.{k}", where)
    elif type_name == "str":  # also quantities, which may be written as numbers
        if not isinstance(obj, (str, int, float)) or isinstance(obj, bool):
            problems.append(f"{where}: {at} should be a string")
    elif type_name in ("int", "bool"):
        if type(obj).__name__ != type_name:
            problems.append(f"{where}: {at} should be {type_name}, not {obj!r}")
    elif type_name in ("object", "float", "datetime", "date"):
        pass
    else:
        cls = getattr(models, type_name)
        if not isinstance(obj, dict):
            return problems.append(f"{where}: {at} should be an object ({type_name})")
        fields = {json: py for py, json in cls.attribute_map.items()}
        for k, v in obj.items():
            if k not in fields:
                problems.append(f"{where}: unknown field {at}.{k} ({type_name})")
            else:
                check_strict(models, v, cls.openapi_types[fields[k]], f"{at}.{k}", where)

models = client_models()

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

GPUMUX_RESOURCES = {"gpumux.io/gpu", "gpumux.io/gpu-mem", "gpumux.io/gpu-milli"}

def check_workload(doc, where):
    """A Pod or Job of a trace-driven workload: makes pods, names a scheduler, asks only for known
    gpumux resources with whole-number quantities, and carries string labels and annotations."""
    spec = pod_spec(doc)
    if spec is None or doc.get("kind") not in ("Pod", "Job"):
        return problems.append(f"{where}: {doc.get('kind')} is neither a Pod nor a Job")
    if not spec.get("schedulerName"):
        problems.append(f"{where}: no schedulerName")
    metas = [doc.get("metadata") or {}]
    if doc.get("kind") == "Job":
        metas.append(((doc.get("spec") or {}).get("template") or {}).get("metadata") or {})
    for meta in metas:
        for field in ("labels", "annotations"):
            for k, v in (meta.get(field) or {}).items():
                if not isinstance(v, str):
                    problems.append(f"{where}: metadata.{field}.{k} is {v!r}, not a string")
    for c in spec.get("containers", []) or []:
        for section in ("limits", "requests"):
            for k, v in ((c.get("resources") or {}).get(section) or {}).items():
                if k.startswith("gpumux.io/") and k not in GPUMUX_RESOURCES:
                    problems.append(f"{where}: unknown resource {k}")
                if k in GPUMUX_RESOURCES and not str(v).isdigit():
                    problems.append(f"{where}: {k} is {v!r}, not a whole number")

if len(sys.argv) > 1:
    count = 0
    for name in sys.argv[1:]:
        text = sys.stdin.read() if name == "-" else pathlib.Path(name).read_text()
        try:
            objects = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as e:
            problems.append(f"{name}: {e}")
            continue
        if len(objects) == 1 and str(objects[0].get("kind", "")).endswith("List"):
            objects = objects[0].get("items") or []
        for i, doc in enumerate(objects, 1):
            where = f"{name} object {i} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name', '')}"
            if models is not None:
                check_strict(models, doc, "V1" + str(doc.get("kind", "?")), "", where)
            check_workload(doc, where)
            count += 1
    for p in problems:
        print(p)
    print(f"{count} objects in {len(sys.argv) - 1} files; field-by-field check "
          f"{'done' if models else 'skipped (no Kubernetes Python client)'}; {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)

docs = {}
for path in sorted(DEPLOY.rglob("*.yaml")):
    docs[path] = load(path)
    for doc in docs[path]:
        where = f"{path.relative_to(DEPLOY)} {doc.get('kind')}/{doc.get('metadata', {}).get('name', '')}"
        if doc.get("kind") == "KubeSchedulerConfiguration":
            check_scheduler_config(doc, where)
        elif models is not None:
            check_strict(models, doc, "V1" + doc.get("kind", "?"), "", where)

config_text = (DEPLOY / "extender/scheduler-config.yaml").read_text()
configmaps = [d for d in docs.get(DEPLOY / "extender/deployment.yaml", []) if d.get("kind") == "ConfigMap"]
if not configmaps or configmaps[0]["data"].get("scheduler-config.yaml") != config_text:
    problems.append("extender/deployment.yaml: the ConfigMap differs from extender/scheduler-config.yaml")
check_scheduler_config(yaml.safe_load(configmaps[0]["data"]["scheduler-config.yaml"]) if configmaps else {},
                       "extender/deployment.yaml ConfigMap")

def arg(container, flag, default=None):
    """The value of `--flag value` or `--flag=value` in a container's args."""
    args = [str(a) for a in container.get("args", []) or []]
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return default

def objects(kind):
    return [(path, d) for path, ds in docs.items() for d in ds if d.get("kind") == kind]

def name_ns(doc):
    meta = doc.get("metadata") or {}
    return meta.get("name"), meta.get("namespace")

for path in sorted((DEPLOY / "examples").glob("*.yaml")):
    for doc in docs[path]:
        spec = pod_spec(doc)
        if spec is None:
            problems.append(f"{path.name}: {doc.get('kind')} is neither a pod nor makes pods")
            continue
        at = "spec." if doc.get("kind") == "Pod" else "pod template spec."
        if spec.get("schedulerName") != "gpumux-scheduler":
            problems.append(f"{path.name}: {at}schedulerName is not gpumux-scheduler")
        asks = [k for c in spec.get("containers", []) for k in c.get("resources", {}).get("limits", {})]
        if not any(k.startswith("gpumux.io/") for k in asks):
            problems.append(f"{path.name}: asks for no gpumux.io resource")

# Every workload's service account exists in its namespace and is a subject of some binding
# (a workload with automountServiceAccountToken: false and no account uses none).
service_accounts = {name_ns(d) for _, d in objects("ServiceAccount")}
bound = {(s.get("name"), s.get("namespace") or name_ns(b)[1])
         for kind in ("ClusterRoleBinding", "RoleBinding") for _, b in objects(kind)
         for s in b.get("subjects", []) or [] if s.get("kind") == "ServiceAccount"}
for kind in ("Deployment", "DaemonSet"):
    for path, doc in objects(kind):
        name, ns = name_ns(doc)
        account = (pod_spec(doc).get("serviceAccountName"), ns)
        if account[0] is None and pod_spec(doc).get("automountServiceAccountToken") is False:
            continue  # a workload that talks to no API server needs no account of its own
        if account[0] is None:
            problems.append(f"{path.relative_to(DEPLOY)}: {kind}/{name} names no serviceAccountName")
        elif account not in service_accounts:
            problems.append(f"{path.relative_to(DEPLOY)}: {kind}/{name}: no ServiceAccount {account[1]}/{account[0]} in deploy/")
        elif account not in bound:
            problems.append(f"{path.relative_to(DEPLOY)}: {kind}/{name}: ServiceAccount {account[1]}/{account[0]} is bound to no role")
# Bindings refer to roles defined here, or to built-in ones (system:...).
roles = {("ClusterRole", name_ns(d)[0]) for _, d in objects("ClusterRole")} | \
        {("Role", name_ns(d)[0]) for _, d in objects("Role")}
for kind in ("ClusterRoleBinding", "RoleBinding"):
    for path, doc in objects(kind):
        ref = doc.get("roleRef") or {}
        builtin = str(ref.get("name", "")).startswith("system:") or \
            ref.get("name") == "extension-apiserver-authentication-reader"
        if not builtin and (ref.get("kind"), ref.get("name")) not in roles:
            problems.append(f"{path.relative_to(DEPLOY)}: {kind}/{name_ns(doc)[0]} refers to "
                            f"{ref.get('kind')}/{ref.get('name')}, which deploy/ does not define")

# The device plugin against the extender.
def container(path, kind, name):
    for doc in docs.get(path, []):
        if doc.get("kind") == kind:
            for c in pod_spec(doc).get("containers", []):
                if c.get("name") == name:
                    return doc, c
    problems.append(f"{path.relative_to(DEPLOY)}: no {kind} with a container {name}")
    return None, None

ext_doc, extender = container(DEPLOY / "extender/deployment.yaml", "Deployment", "gpumux-extender")
dp_doc, plugin = container(DEPLOY / "device-plugin/daemonset.yaml", "DaemonSet", "device-plugin")
if extender and plugin:
    where = "device-plugin/daemonset.yaml"
    if name_ns(dp_doc)[1] != name_ns(ext_doc)[1]:
        problems.append(f"{where}: namespace {name_ns(dp_doc)[1]} is not the extender's {name_ns(ext_doc)[1]}")
    if plugin.get("image") != extender.get("image"):
        problems.append(f"{where}: image {plugin.get('image')} is not the extender's {extender.get('image')}")
    args = [str(a) for a in plugin.get("args", []) or []]
    if args[:1] != ["device-plugin"]:
        problems.append(f"{where}: args do not start with the subcommand device-plugin")
    unit = (arg(plugin, "--gpu-mem-unit-mib", "1024"), arg(extender, "--gpu-mem-unit-mib", "1024"))
    if unit[0] != unit[1]:
        problems.append(f"{where}: --gpu-mem-unit-mib {unit[0]} differs from the extender's {unit[1]}")
    kubelet_dir = arg(plugin, "--kubelet-dir", "/var/lib/kubelet/device-plugins")
    spec = pod_spec(dp_doc)
    host_paths = {v.get("name"): (v.get("hostPath") or {}).get("path") for v in spec.get("volumes", []) or []}
    if not any(m.get("mountPath") == kubelet_dir and host_paths.get(m.get("name")) == "/var/lib/kubelet/device-plugins"
               for m in plugin.get("volumeMounts", []) or []):
        problems.append(f"{where}: --kubelet-dir {kubelet_dir} is not the hostPath /var/lib/kubelet/device-plugins")
    metrics = arg(plugin, "--metrics-address", "127.0.0.1:9402")
    for probe in ("livenessProbe", "readinessProbe"):
        command = " ".join(((plugin.get(probe) or {}).get("exec") or {}).get("command", []) or [])
        if f"http://{metrics}/" not in command:
            problems.append(f"{where}: {probe} does not ask --metrics-address {metrics}")
    env = {e.get("name"): e for e in plugin.get("env", []) or []}
    if ((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName" \
            and arg(plugin, "--node-name") is None:
        problems.append(f"{where}: neither --node-name nor NODE_NAME from spec.nodeName")

# The coordinator against the extender and the device plugin.
co_doc, coordinator = container(DEPLOY / "coordinator/daemonset.yaml", "DaemonSet", "coordinator")
if extender and coordinator:
    where = "coordinator/daemonset.yaml"
    if name_ns(co_doc)[1] != name_ns(ext_doc)[1]:
        problems.append(f"{where}: namespace {name_ns(co_doc)[1]} is not the extender's {name_ns(ext_doc)[1]}")
    if coordinator.get("image") != extender.get("image"):
        problems.append(f"{where}: image {coordinator.get('image')} is not the extender's {extender.get('image')}")
    if [str(a) for a in coordinator.get("args", []) or []][:1] != ["coordinator"]:
        problems.append(f"{where}: args do not start with the subcommand coordinator")
    listen = arg(coordinator, "--listen", "127.0.0.1:9403")
    for probe in ("livenessProbe", "readinessProbe"):
        command = " ".join(((coordinator.get(probe) or {}).get("exec") or {}).get("command", []) or [])
        if f"http://{listen}/healthz" not in command:
            problems.append(f"{where}: {probe} does not ask --listen {listen}")
    socket = arg(coordinator, "--socket", "/run/gpumux/coordinator.sock")
    spec = pod_spec(co_doc)
    host_paths = {v.get("name"): (v.get("hostPath") or {}).get("path") for v in spec.get("volumes", []) or []}
    folder = socket.rsplit("/", 1)[0]
    if not any(m.get("mountPath") == folder and host_paths.get(m.get("name")) == folder
               for m in coordinator.get("volumeMounts", []) or []):
        problems.append(f"{where}: the socket's folder {folder} is not the same hostPath (pods mount it)")

# What each daemon does with the API server, against what its ClusterRole grants (the extender's
# bind patches the node to take the node lock: a role without it made every bind on a node with
# the device plugin fail with 403 Forbidden).
NEEDS = {
    "gpumux-extender": {("", "pods"): {"get", "list", "watch", "patch"},
                        ("", "pods/binding"): {"create"},
                        ("", "nodes"): {"get", "list", "watch", "patch"}},
    "gpumux-coordinator": {("", "pods"): {"get", "list", "watch"}},
    "gpumux-device-plugin": {("", "pods"): {"get", "list", "watch"},
                             ("", "nodes"): {"get", "list", "watch", "patch"}},
}
cluster_roles = {d.get("metadata", {}).get("name"): d for _, d in objects("ClusterRole")}
for role_name, needs in NEEDS.items():
    role = cluster_roles.get(role_name)
    if role is None:
        problems.append(f"ClusterRole {role_name} is missing")
        continue
    granted = {}
    for rule in role.get("rules", []) or []:
        for group in rule.get("apiGroups", []) or []:
            for resource in rule.get("resources", []) or []:
                granted.setdefault((group, resource), set()).update(rule.get("verbs", []) or [])
    for key, verbs in needs.items():
        missing = verbs - granted.get(key, set())
        if missing:
            problems.append(f"ClusterRole {role_name}: {key[1]} lacks {', '.join(sorted(missing))}")

for p in problems:
    print(p)
print(f"{sum(len(d) for d in docs.values())} objects in {len(docs)} files; "
      f"field-by-field check {'done' if models else 'skipped (no Kubernetes Python client)'}; "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
