#!/usr/bin/env python3
"""scripts/check-modules.py finds each kind of mistake in a small planted tree (and passes it
once the mistake is gone)."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts',
                     'check-modules.py')

MODULES = """# layer 0: the model
core:
# layer 1: libraries
kube: core
policy: core
# layer 3: adapters
extender: kube policy
deviceplugin: kube
"""


def run(root, *args):
    return subprocess.run([sys.executable, CHECK, *args, root], capture_output=True, text=True)


class CheckModulesTest(unittest.TestCase):
    def plant(self, files):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ['rm', '-rf', root])
        for path, text in {'src/modules.txt': MODULES, **files}.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), 'w') as f:
                f.write(text)
        for m in ('core', 'kube', 'policy', 'extender', 'deviceplugin'):
            os.makedirs(os.path.join(root, 'src', m), exist_ok=True)
        os.makedirs(os.path.join(root, 'include', 'gpumux'), exist_ok=True)
        doc_map = run(root, '--map').stdout.strip()
        os.makedirs(os.path.join(root, 'docs'), exist_ok=True)
        with open(os.path.join(root, 'docs', 'ARCHITECTURE.md'), 'w') as f:
            f.write('# map\n<!-- modules:begin -->\n' + doc_map + '\n<!-- modules:end -->\n')
        return root

    def test_an_allowed_tree_passes(self):
        root = self.plant({'src/extender/a.cc': '#include "gpumux/core/x.h"\n#include "gpumux/kube/y.h"\n'})
        r = run(root)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('every include takes an allowed arrow', r.stdout)

    def test_a_sideways_include_between_adapters_is_named_with_its_line(self):
        root = self.plant({'src/deviceplugin/a.cc': '// x\n#include "gpumux/extender/extender.h"\n'})
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn('src/deviceplugin/a.cc:2: deviceplugin includes extender', r.stderr)

    def test_an_upward_include_from_a_public_header_is_found(self):
        root = self.plant({'include/gpumux/kube/a.h': '#include "gpumux/policy/p.h"\n'})
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn('include/gpumux/kube/a.h:1: kube includes policy', r.stderr)

    def test_a_folder_that_is_no_module_is_named(self):
        root = self.plant({'src/k8s/a.cc': '\n'})
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn('src/k8s/: not a module', r.stderr)

    def test_a_stale_map_in_the_architecture_document_fails(self):
        root = self.plant({})
        with open(os.path.join(root, 'src', 'modules.txt'), 'a') as f:
            f.write('runs: kube\n')
        os.makedirs(os.path.join(root, 'src', 'runs'))
        r = run(root)
        self.assertEqual(r.returncode, 1)
        self.assertIn('module map differs', r.stderr)

    def test_a_use_of_a_module_listed_later_is_refused(self):
        root = self.plant({})
        with open(os.path.join(root, 'src', 'modules.txt'), 'w') as f:
            f.write('# layer 0: x\ncore: kube\nkube: core\n')
        r = run(root)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('not listed above it', r.stderr + r.stdout)


if __name__ == '__main__':
    unittest.main()
