"""The release artifacts of this tree, built once per test session: ``python -m build``
makes the sdist from a copy of the tree, then the wheel from the sdist in an isolated
build environment, so the wheel proves the sdist complete.

Two modules need them (tests/test_packaging.py checks and installs them;
tests/test_spark_cluster.py ships the wheel to its executors), and under pytest-xdist
they run on different workers: the first to ask builds, under a lock in the session's
shared temporary directory, and the others read what it left there. One build of the
core instead of two.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What a build or a fresh venv sees: not this tree (PYTHONPATH), and the compiled core
#: whatever the test pass runs.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RMQ_PUREPYTHON")}


def shared_dir(tmp_path_factory):
    """A directory every worker of this session sees: the session's base temporary
    directory under xdist (each worker's is below it), this process's own otherwise."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        d = tmp_path_factory.getbasetemp().parent / "shared-dists"
        d.mkdir(exist_ok=True)
        return d
    return tmp_path_factory.mktemp("shared-dists")


def build(directory, env=CLEAN_ENV, timeout=900):
    """(sdist, wheel, the build's output) in ``directory``, built there by the first
    caller; an AssertionError with the output if the build failed (for every caller)."""
    d = Path(directory)
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = d / "result.json"
        if not done.exists():
            done.write_text(json.dumps(_build(d, env, timeout)))
        result = json.loads(done.read_text())
    assert result["returncode"] == 0, (
        f"python -m build exited {result['returncode']}:\n{result['log']}")
    return Path(result["sdist"]), Path(result["wheel"]), result["log"]


def _build(d, env, timeout):
    # A copy of the tree (MANIFEST.in still decides what the sdist holds): the build
    # writes egg-info and a release tree into the directory it builds, which another
    # build of the same tree (nox, a developer) must not meet.
    tree = d / "tree" / "rmq"
    shutil.rmtree(d / "tree", ignore_errors=True)
    shutil.copytree(ROOT, tree, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".venv-debug", ".nox", "build", "dist", "node_modules", "*.egg-info",
        "*.so", "_core.c", "__pycache__", ".mypy_cache", ".hypothesis", ".benchmarks"))
    out = d / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)],
                          cwd=tree, capture_output=True, text=True, timeout=timeout, env=env)
    result = {"returncode": proc.returncode, "log": proc.stdout + proc.stderr}
    if proc.returncode == 0:
        [sdist] = out.glob("rmq-*.tar.gz")
        [wheel] = out.glob("rmq-*.whl")
        result.update(sdist=str(sdist), wheel=str(wheel))
    return result
