#!/usr/bin/env python3
"""scripts/check-sizes.py finds long functions and files in a small planted tree, and accepts
composition roots and the reasons it documents."""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts',
                     'check-sizes.py')


def function(name, lines, above=''):
    body = ''.join(f'  x += {i};\n' for i in range(lines))
    return f'{above}int {name}(int x) {{\n{body}  return x;\n}}\n'


class CheckSizesTest(unittest.TestCase):
    def planted(self, files):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ['rm', '-rf', root])
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), 'w') as f:
                f.write(text)
        return root

    def run_on(self, files):
        return subprocess.run([sys.executable, CHECK, self.planted(files)], capture_output=True,
                              text=True)

    def test_short_functions_pass(self):
        r = self.run_on({'src/a/a.cc': function('Short', 10)})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_long_function_is_named_with_its_line_and_length(self):
        r = self.run_on({'src/a/a.cc': '// x\n' + function('Long', 90)})
        self.assertEqual(r.returncode, 1)
        self.assertIn('src/a/a.cc:2: function Long has 93 lines', r.stderr)

    def test_a_reason_above_the_signature_excuses_it(self):
        r = self.run_on({'src/a/a.cc': function('Table', 90, '// long function: a flat table\n')})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_the_clis_composition_roots_are_exempt_but_only_there(self):
        r = self.run_on({'src/cli/x.cc': function('RunThing', 120)})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.run_on({'src/sim/x.cc': function('RunThing', 120)})
        self.assertEqual(r.returncode, 1)

    def test_braces_inside_parentheses_and_lambdas_count_to_their_function(self):
        text = ('int F(int x) {\n  auto f = [](int y) {\n' + '    y += 1;\n' * 85 +
                '    return y;\n  };\n  return g({1, 2}, f(x));\n}\n')
        r = self.run_on({'src/a/a.cc': text})
        self.assertEqual(r.returncode, 1)
        self.assertIn('function F has', r.stderr)

    def test_a_long_initializer_list_is_read_in_linear_time(self):
        # A constructor initialising members with namespace-qualified builder calls and a braced
        # argument once made the signature pattern backtrack exponentially in the number of '::'
        # (repo.Sizes took 163 s on the device plugin's metrics; this tree takes hours).
        members = ',\n'.join(f'        m{i}_(lib::Build()\n{" " * 24}.Name("n{i}")\n'
                              f'{" " * 24}.Register(*r_))' for i in range(12))
        members += ',\n        x_(lib::F({}))'
        text = 'Metrics::Metrics()\n    : r_(Make()),\n' + members + ' {\n' + '  x += 1;\n' * 85 + '}\n'
        r = subprocess.run([sys.executable, CHECK, self.planted({'src/a/a.cc': text})],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn('function Metrics has', r.stderr)

    def test_a_long_file_fails_unless_it_says_why(self):
        short = function('F', 5)  # 8 lines
        r = self.run_on({'src/a/a.cc': short * 120})
        self.assertEqual(r.returncode, 1)
        self.assertIn('src/a/a.cc: 960 lines', r.stderr)
        r = self.run_on({'src/a/a.cc': '// size: generated tables\n' + short * 120})
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == '__main__':
    unittest.main()
