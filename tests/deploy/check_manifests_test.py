#!/usr/bin/env python3
"""deploy/check-manifests.py finds what it claims to find: each case breaks one thing in an
install rendered from deploy/overlays/monitoring and expects the checker's complaint.

    tests/deploy/check_manifests_test.py KUBECTL        (ctest: deploy.CheckManifestsFindsMistakes)
"""
import copy
import os
import subprocess
import sys
import tempfile
import unittest

import yaml

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECKER = os.path.join(ROOT, "deploy", "check-manifests.py")
KUBECTL = "kubectl"


def render(overlay):
    p = subprocess.run([KUBECTL, "kustomize", os.path.join(ROOT, "deploy", "overlays", overlay)],
                       capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def find(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def container(doc, name):
    return next(c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def check(docs):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all(docs, f)
    try:
        p = subprocess.run([sys.executable, CHECKER, "--rendered", f.name], capture_output=True,
                           text=True)
    finally:
        os.unlink(f.name)
    return p.returncode, p.stdout + p.stderr


class CheckManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.monitoring = render("monitoring")
        cls.default = render("default")

    def broken(self, docs, change, expected):
        docs = copy.deepcopy(docs)
        change(docs)
        rc, out = check(docs)
        self.assertEqual(rc, 1, out)
        self.assertIn(expected, out)

    def test_both_overlays_as_rendered_pass(self):
        for docs in (self.default, self.monitoring):
            rc, out = check(docs)
            self.assertEqual(rc, 0, out)

    def test_a_configmap_reference_kustomize_did_not_follow(self):
        def change(docs):
            cm = next(d for d in docs if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"].startswith("gpumux-config"))
            cm["metadata"]["namespace"] = "default"  # the generator without its namespace
        self.broken(self.default, change, "reads key policy of ConfigMap gpumux-config")

    def test_a_scheduler_configuration_that_is_not_the_file(self):
        def change(docs):
            cm = next(d for d in docs if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"].startswith("gpumux-scheduler-config"))
            cm["data"]["scheduler-config.yaml"] += "percentageOfNodeToScore: 50\n"
        self.broken(self.default, change, "is not base/extender/scheduler-config.yaml")

    def test_an_object_outside_the_namespace(self):
        def change(docs):
            find(docs, "DaemonSet", "gpumux-coordinator")["metadata"]["namespace"] = "default"
        self.broken(self.default, change, "DaemonSet/gpumux-coordinator is in namespace default")

    def test_the_extender_listening_beyond_loopback(self):
        def change(docs):
            args = container(find(docs, "Deployment", "gpumux-scheduler"), "gpumux-extender")["args"]
            args[args.index("--listen") + 1] = "0.0.0.0:12345"
        self.broken(self.default, change, "is not loopback (it takes bind)")

    def test_metrics_beyond_loopback_without_the_annotation(self):
        def change(docs):
            del find(docs, "DaemonSet", "gpumux-device-plugin")["spec"]["template"]["metadata"][
                "annotations"]
        self.broken(self.monitoring, change,
                    "serves /metrics beyond loopback (port 9402) but the pod is not annotated")

    def test_an_annotated_port_nobody_listens_on(self):
        def change(docs):
            find(docs, "DaemonSet", "gpumux-coordinator")["spec"]["template"]["metadata"][
                "annotations"]["prometheus.io/port"] = "9999"
        self.broken(self.monitoring, change,
                    "prometheus.io/port 9999 is not a --metrics-address beyond loopback")

    def test_a_metrics_port_without_its_name(self):
        def change(docs):
            c = container(find(docs, "Deployment", "gpumux-scheduler"), "gpumux-extender")
            c["ports"][0]["name"] = "http"
        self.broken(self.monitoring, change, "does not declare port 9401 named metrics")

    def test_a_probe_asking_another_port(self):
        def change(docs):
            c = container(find(docs, "DaemonSet", "gpumux-device-plugin"), "device-plugin")
            c["livenessProbe"]["exec"]["command"][-1] = "http://127.0.0.1:9999/healthz"
        self.broken(self.default, change, "livenessProbe does not ask 127.0.0.1:9402 for /healthz")

    def test_images_that_differ(self):
        def change(docs):
            container(find(docs, "DaemonSet", "gpumux-coordinator"), "coordinator")["image"] = "x:1"
        self.broken(self.default, change, "image x:1 is not the extender's")

    def test_a_role_without_what_the_daemon_does(self):
        def change(docs):
            role = find(docs, "ClusterRole", "gpumux-extender")
            role["rules"] = [r for r in role["rules"] if r["resources"] != ["nodes"]]
        self.broken(self.default, change, "ClusterRole gpumux-extender: nodes lacks get, list, patch, watch")

    def test_an_unbound_service_account(self):
        def change(docs):
            docs[:] = [d for d in docs if not (d["kind"] == "ClusterRoleBinding"
                                               and d["metadata"]["name"] == "gpumux-coordinator")]
        self.broken(self.default, change, "ServiceAccount gpumux-system/gpumux-coordinator is bound to no role")


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        KUBECTL = sys.argv.pop(1)
    unittest.main(verbosity=2)
