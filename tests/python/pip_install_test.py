"""`pip install ./python` as the README says, offline, into a scratch folder: the package imports
from there (not from the source tree), has the SDK's API, and carries the binary's version.

    pip_install_test.py PATH-TO-GPUMUX
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "..", "python")


def main():
    gpumux = sys.argv[1]
    version = subprocess.run([gpumux, "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[-1]
    with tempfile.TemporaryDirectory(prefix="gpumux-pip-") as tmp:
        src = os.path.join(tmp, "src")  # a copy: setuptools writes build/ and *.egg-info beside
        shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                   "*.egg-info"))
        target = os.path.join(tmp, "site")
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                            "--no-index", "--no-deps", "--disable-pip-version-check", "--quiet",
                            "--target", target, src], capture_output=True, text=True,
                           env=dict(os.environ, PIP_NO_CACHE_DIR="1"))
        if p.returncode != 0:
            print(p.stdout + p.stderr)
            return 1
        probe = ("import gpumux, os; print(gpumux.__version__); "
                 "print(os.path.dirname(gpumux.__file__)); print(callable(gpumux.Session))")
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           cwd=tmp, env=dict(os.environ, PYTHONPATH=target))
        lines = p.stdout.split()
        if p.returncode != 0 or len(lines) != 3:
            print(p.stdout + p.stderr)
            return 1
        got, where, api = lines
        problems = []
        if got != version:
            problems.append(f"the package says {got}, the binary {version}")
        if not where.startswith(target):
            problems.append(f"imported from {where}, not the installed copy")
        if api != "True":
            problems.append("gpumux.Session is missing")
        if problems:
            print("; ".join(problems))
            return 1
        print(f"pip install ./python: gpumux {got} imported from the installed copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
