#!/usr/bin/env python3
"""Checks deploy/: every YAML file parses; the ConfigMap in extender/deployment.yaml holds
exactly extender/scheduler-config.yaml; the scheduler config uses only known fields; the
examples ask gpumux-scheduler for gpumux resources. With the Kubernetes Python client
importable (Debian: python3-kubernetes), every Kubernetes object is also checked field by field
against the API's types (unknown or misspelt fields, wrong kinds of values). No cluster needed.
  python3 deploy/check-manifests.py            exit 1 and a list of problems if any
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

for path in sorted((DEPLOY / "examples").glob("*.yaml")):
    for doc in docs[path]:
        spec = doc.get("spec", {})
        if spec.get("schedulerName") != "gpumux-scheduler":
            problems.append(f"{path.name}: spec.schedulerName is not gpumux-scheduler")
        asks = [k for c in spec.get("containers", []) for k in c.get("resources", {}).get("limits", {})]
        if not any(k.startswith("gpumux.io/") for k in asks):
            problems.append(f"{path.name}: asks for no gpumux.io resource")

for p in problems:
    print(p)
print(f"{sum(len(d) for d in docs.values())} objects in {len(docs)} files; "
      f"field-by-field check {'done' if models else 'skipped (no Kubernetes Python client)'}; "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
