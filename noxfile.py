"""The suite on every supported CPython found here: ``nox`` (or ``make nox``).

Each session installs rmq with its test extras into a fresh venv (building the core
for that Python) and runs ``tests`` twice, as ``make test`` does: on the compiled core,
then the pure-Python pass. ``nox -s tests-3.12`` runs one version; arguments after
``--`` go to pytest (``nox -- -m 'not slow'``).
"""

import glob
import os
import platform

import nox

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
# A Python pyenv lacks is a failure naming it, never a session quietly left out
# (tests/parts.py lists them as the part "nox-pythons").
nox.options.error_on_missing_interpreters = True


def _add_pyenv_interpreters():
    # pyenv keeps each version under versions/X.Y.Z/bin; nox looks for pythonX.Y on PATH.
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = []
    for version in PYTHONS:
        found += sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin")))[-1:]
    os.environ["PATH"] = os.pathsep.join(found + [os.environ.get("PATH", "")])


_add_pyenv_interpreters()


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    session.install(".[test]")
    if platform.machine() == "x86_64":      # the C++ client of the interop tests
        session.install("rocketmq==0.4.4")
    args = session.posargs or []
    # Run from the tests' own tree against the installed package, not ./src.
    session.run("python", "-m", "pytest", "tests", "-p", "no:cacheprovider", "-n", "4",
                "--dist", "loadscope", *args)
    session.run("python", "-m", "pytest", "tests", "-p", "no:cacheprovider", "-n", "4",
                "--dist", "loadscope", *args, env={"RMQ_PUREPYTHON": "1"})
