#!/usr/bin/env bash
# Build rmq._core for aarch64 and run its core tests, the ARMv8 CRC32 kernels
# included, under QEMU user emulation on an x86_64 Debian/Ubuntu host: the test-command
# cibuildwheel runs on the aarch64 wheels (pyproject.toml's aarch64 override).
#
#   tools/aarch64-test.sh                  # cibuildwheel's aarch64 test-command
#   tools/aarch64-test.sh tests/test_crc32.py -k armv8    # other pytest arguments
#   tools/aarch64-test.sh --prepare        # steps 1-5 only (.ci/run: beside make test)
#
# What it does (docs/aarch64.md has the details and the measured times). Only the
# tests run under QEMU; the build runs natively on the host, with Debian's cross
# compiler (cibuildwheel builds its aarch64 wheels under QEMU, in its own images):
#   1. installs qemu-user-static, debootstrap and gcc-aarch64-linux-gnu with apt-get
#      when missing, finds a host CPython of the arm64 root's version (bookworm: 3.11;
#      python3.11-venv is installed when there is none), and makes sure binfmt_misc
#      runs aarch64 ELF binaries through qemu-aarch64-static;
#   2. creates an arm64 Debian bookworm rootfs (python3, python3-dev, libc6-dev: no
#      compiler in it) in $RMQ_ARM64_ROOT (default ~/.cache/rmq/arm64-bookworm), once.
#      While debootstrap installs its packages under QEMU (one core), the other core
#      does steps 4's download and 5's build against those packages unpacked on the host;
#   3. copies the current source tree (uncommitted edits included, .gitignore'd
#      files not) into it;
#   4. a venv /opt/rmq-venv in it (made by the arm64 python3, without pip) holding
#      rmq's dependencies and cibuildwheel's test-requires for aarch64, with
#      pytest-xdist, as pyproject.toml names them: aarch64 wheels from PyPI, installed
#      by the host's pip (--target --platform: no pip under QEMU), with launchers for
#      their console scripts (pytest); made again when that list changes;
#   5. cross-compiles rmq on the host: Cython, then aarch64-linux-gnu-gcc -O3 with the
#      rootfs as sysroot and its Python's sysconfig data, into a cp311 linux_aarch64
#      wheel installed into the venv (skipped when the sources are those of the last
#      build); checks that the core runs on aarch64 (QEMU) with the armv8 CRC32 kernel
#      selected;
#   6. runs cibuildwheel's test-command for aarch64, read from pyproject.toml by
#      tools/cibw_options.py ({project} and {package}: the copy; from an empty
#      directory, CI=true) in the rootfs under QEMU, with -rfEs, a JUnit XML report and
#      pytest-xdist added by PYTEST_ADDOPTS; fails unless the tests pass AND every
#      ARMv8 CRC32 test ran (none skipped), as the report tells.
#
# Environment: RMQ_ARM64_ROOT (rootfs), RMQ_ARM64_MIRROR (Debian mirror),
# RMQ_ARM64_JOBS (pytest-xdist workers, default nproc), QEMU_CPU (default max),
# HYPOTHESIS_PROFILE (default, quick or thorough; see tests/conftest.py; for runs
# with arguments: the test-command sets its own),
# RMQ_ARM64_REBUILD=1 (build even when src/, setup.py and pyproject.toml are
# unchanged since the last build), RMQ_ARM64_HOST_PYTHON (the host CPython, of the
# root's version, that builds; found by itself otherwise).
# Needs root (debootstrap, chroot, mount); re-runs itself with sudo when possible.
set -euo pipefail
shopt -s inherit_errexit 2> /dev/null || true

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${RMQ_ARM64_ROOT:-$HOME/.cache/rmq/arm64-bookworm}
MIRROR=${RMQ_ARM64_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PYVER=3.11          # bookworm's python3: the host CPython that cross-builds must be the same
# No compiler in the root: the core is cross-compiled on the host, with the root as
# its sysroot (python3-dev: Python's headers; libc6-dev: glibc's, crt*.o, libc.so).
PACKAGES=python3,python3-dev,libc6-dev
CROSS_CC=aarch64-linux-gnu-gcc
JOBS=${RMQ_ARM64_JOBS:-$(nproc)}
# QEMU 7.2's default aarch64 CPU model is already "max" (AT_HWCAP has CRC32, bit 7);
# set it anyway so an older or newer QEMU cannot silently hide the kernel.
export QEMU_CPU=${QEMU_CPU:-max}
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-default}

TOOL=aarch64-test
START=${RMQ_ARM64_START:-$(date +%s)}
export RMQ_ARM64_START=$START
# shellcheck source=tools/roots.sh
. "$(dirname "${BASH_SOURCE[0]}")/roots.sh"
[[ "$ROOT" == /?* ]] || die "RMQ_ARM64_ROOT must be an absolute path other than / (got '$ROOT')"

# host_python [CANDIDATE...]: prints the first host CPython $PYVER (with venv and
# ensurepip) of the candidates, by default those on PATH, in /usr and in pyenv; or fails
host_python() {
    local p exe
    (( $# )) || set -- "python$PYVER" "/usr/bin/python$PYVER" "/usr/local/bin/python$PYVER" \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$PYVER".*/bin/"python$PYVER"
    for p in "$@"; do
        command -v "$p" > /dev/null 2>&1 || continue
        exe=$("$p" -c "import sys, venv, ensurepip
assert sys.implementation.name == 'cpython' and '%d.%d' % sys.version_info[:2] == '$PYVER'
print(sys.executable)" 2> /dev/null) || continue
        echo "$exe"
        return 0
    done
    return 1
}

# --prepare: everything but the tests (the root, the venv, the build), for a later run
# to reuse; .ci/run does it at the lowest priority while the host's suite runs.
PREPARE=0
[[ "${1:-}" == "--prepare" ]] && PREPARE=1
[[ "${1:-}" == "--in-namespace" && "${2:-}" == "--prepare" ]] && PREPARE=1

# ------------------------------------------------------------------ inside the namespace
# The second half runs under `unshare --mount`: its mounts (proc, sys, dev in the
# rootfs) vanish with it, even when it is killed.
if [[ "${1:-}" == "--in-namespace" ]]; then
    shift
    (( PREPARE )) && shift
    mount --make-rprivate /       # before debootstrap's own mounts (mount_root does it too)
    in_root() {        # a command in the arm64 rootfs, with the venv first on PATH
        in_root_of "$ROOT" PATH=/opt/rmq-venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
            QEMU_CPU="$QEMU_CPU" HYPOTHESIS_PROFILE="$HYPOTHESIS_PROFILE" \
            ${PYTEST_ADDOPTS:+PYTEST_ADDOPTS="$PYTEST_ADDOPTS"} ${CI:+CI="$CI"} "$@"
    }
    HOST_PY=${RMQ_ARM64_HOST_PYTHON:?}
    SITE=$ROOT/opt/rmq-venv/lib/python$PYVER/site-packages
    BUILD_LOG=$ROOT.build.log
    # the host's side of the work (a copy of the tree, a venv, the wheels, a sysroot):
    # thrown away at the end, with the background job that may still be filling it
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/rmq-aarch64.XXXXXX")
    PREP_PID=
    # shellcheck disable=SC2317  # the EXIT trap's
    cleanup() {
        if [[ -n "$PREP_PID" ]]; then
            kill -- "-$PREP_PID" 2> /dev/null || true
            wait "$PREP_PID" 2> /dev/null || true
        fi
        rm -rf --one-file-system "$TMP"
    }
    trap cleanup EXIT

    # the current source tree (uncommitted edits included), what it needs and its hash
    "$REPO/tools/copy-tree.sh" "$REPO" "$TMP/rmq"
    IDENTIFIER=cp${PYVER/./}-manylinux_aarch64
    option() { "$HOST_PY" "$TMP/rmq/tools/cibw_options.py" "$@"; }
    mapfile -t BUILD_REQS < <(option - build-system.requires)
    mapfile -t PIP_REQS < <(option - project.dependencies; option "$IDENTIFIER" test-requires
                            echo "pytest-xdist>=3")
    (( ${#BUILD_REQS[@]} > 0 && ${#PIP_REQS[@]} > 2 )) || die "no requirements read from pyproject.toml"
    # what the build reads: when it is unchanged since the last build, that build stands
    SRC_HASH=$(cd "$TMP/rmq" && find src setup.py pyproject.toml -type f -print0 | LC_ALL=C sort -z \
        | xargs -0 sha256sum | sha256sum | cut -c1-16)

    host_venv() {      # host_venv [REQUIREMENT...]: $TMP/venv, with these installed
        if [[ ! -x "$TMP/venv/bin/python" ]]; then
            "$HOST_PY" -m venv "$TMP/venv" || die "$HOST_PY -m venv"
        fi
        (( $# == 0 )) || "$TMP/venv/bin/python" -m pip install -q --disable-pip-version-check "$@" \
            || die "pip install (host) $*"
    }
    host_pip_for_root() {   # pip install ARGUMENTS... by the host's pip, for the root's Python
        "$TMP/venv/bin/python" -m pip install -q --disable-pip-version-check \
            --python-version "$PYVER" --implementation cp --abi "cp${PYVER/./}" "$@"
    }
    # glibc_minor SYSROOT: 36 for bookworm's glibc 2.36, from its headers
    glibc_minor() {
        sed -nE 's/^#[[:space:]]*define[[:space:]]+__GLIBC_MINOR__[[:space:]]+([0-9]+).*/\1/p' \
            "$1/usr/include/features.h"
    }
    check_sysroot() {  # check_sysroot SYSROOT: its Python is $PYVER, its glibc headers are there
        [[ "$(readlink "$1/usr/bin/python3")" == "python$PYVER" ]] \
            || die "the root's python3 is '$(readlink "$1/usr/bin/python3")', not python$PYVER: set PYVER"
        [[ "$(glibc_minor "$1")" =~ ^[0-9]+$ ]] || die "no glibc headers in $1 (libc6-dev)"
        [[ -f "$1/usr/include/python$PYVER/Python.h" && -f "$1/usr/include/aarch64-linux-gnu/python$PYVER/pyconfig.h" ]] \
            || die "no Python headers for aarch64 in $1 (python3-dev)"
    }

    # fetch_reqs SYSROOT: the venv's packages, aarch64 wheels for the root's Python and
    # glibc (manylinux up to 2.36), from PyPI by the host's pip (no pip under QEMU), in $TMP/site
    fetch_reqs() {
        local t i platforms=(--platform manylinux2014_aarch64)
        t=$(date +%s)
        for (( i = 17; i <= $(glibc_minor "$1"); i++ )); do platforms+=(--platform "manylinux_2_${i}_aarch64"); done
        host_venv
        rm -rf "$TMP/site"
        host_pip_for_root --target "$TMP/site" --only-binary=:all: "${platforms[@]}" "${PIP_REQS[@]}" \
            || die "pip install (host, for the root) ${PIP_REQS[*]}"
        log "the venv's packages (aarch64 wheels) fetched in $(( $(date +%s) - t )) s"
    }

    # build_wheel SYSROOT: rmq cross-compiled on the host, natively, into a linux_aarch64
    # wheel in $TMP/dist: Cython, then aarch64-linux-gnu-gcc -O3. setuptools takes the
    # root's Python's build configuration: its sysconfig data (EXT_SUFFIX
    # .cpython-311-aarch64-linux-gnu.so, CC aarch64-linux-gnu-gcc, CFLAGS), alone on
    # PYTHONPATH (not the arm64 stdlib), its headers first on the include path, and the
    # root as the compiler's sysroot (glibc's headers, crt*.o and libraries)
    build_wheel() {
        local sysroot=$1 t sysconfigdata=_sysconfigdata__aarch64-linux-gnu
        log "building rmq._core for aarch64 from sources $SRC_HASH (Cython on the host, $CROSS_CC -O3, sysroot $sysroot; log: $BUILD_LOG)"
        t=$(date +%s)
        host_venv "${BUILD_REQS[@]}"
        rm -rf "$TMP/build-src" "$TMP/dist" "$TMP/sysconfig"
        cp -a "$TMP/rmq" "$TMP/build-src"
        mkdir -p "$TMP/sysconfig"
        cp "$sysroot/usr/lib/python$PYVER/$sysconfigdata.py" "$TMP/sysconfig/" \
            || die "no $sysconfigdata in $sysroot"
        printf '[build_ext]\ninclude_dirs = %s:%s\n' "$sysroot/usr/include/python$PYVER" \
            "$sysroot/usr/include/aarch64-linux-gnu/python$PYVER" > "$TMP/setup.cfg"
        (cd "$TMP/build-src" && _PYTHON_SYSCONFIGDATA_NAME=$sysconfigdata PYTHONPATH="$TMP/sysconfig" \
            _PYTHON_HOST_PLATFORM=linux-aarch64 DIST_EXTRA_CONFIG="$TMP/setup.cfg" \
            CC="$CROSS_CC --sysroot=$sysroot" \
            "$TMP/venv/bin/python" -m pip wheel -v --no-build-isolation --no-deps --disable-pip-version-check \
            -w "$TMP/dist" . > "$BUILD_LOG" 2>&1) \
            || { tail -30 "$BUILD_LOG" >&2; die "build (log: $BUILD_LOG)"; }
        compgen -G "$TMP/dist/rmq-*-cp${PYVER/./}-*-linux_aarch64.whl" > /dev/null \
            || die "no linux_aarch64 wheel in $TMP/dist: $(ls "$TMP/dist")"
        echo $(( $(date +%s) - t )) > "$TMP/build-seconds"
        log "built in $(( $(date +%s) - t )) s: $(cd "$TMP/dist" && echo rmq-*.whl)"
    }

    # launchers: the venv's console scripts (pytest, ...), for pip --target writes them
    # for the host's Python, in site-packages/bin
    launchers() {
        rm -rf --one-file-system "${SITE:?}/bin"
        "$HOST_PY" - "$SITE" "$ROOT/opt/rmq-venv/bin" <<"EOF" || die "console script launchers"
import configparser, pathlib, sys
site, bin_dir = map(pathlib.Path, sys.argv[1:])
for entry_points in sorted(site.glob("*.dist-info/entry_points.txt")):
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str
    parser.read(entry_points)
    if not parser.has_section("console_scripts"):
        continue
    for name, value in parser.items("console_scripts"):
        module, _, attr = value.split("[")[0].strip().partition(":")
        script = bin_dir / name
        script.write_text(
            "#!/opt/rmq-venv/bin/python\nimport re\nimport sys\n"
            f"from {module.strip()} import {attr.strip().split('.')[0]}\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
            f"    sys.exit({attr.strip()}())\n")
        script.chmod(0o755)
EOF
    }

    # 2. the rootfs, once. When it is made, its packages are downloaded first (on the
    # host), then installed (dpkg under QEMU, on one core for minutes): meanwhile, the
    # other core fetches the venv's packages and cross-builds rmq against those packages
    # unpacked on the host, the same files as the root will hold.
    # shellcheck disable=SC2317  # make_root's ROOT_BETWEEN_STAGES
    between_stages() {      # between_stages ROOT.tmp: its packages are in var/cache/apt/archives
        local deb debs=("$1"/var/cache/apt/archives/*.deb)
        [[ -f "${debs[0]}" ]] || die "no packages in $1/var/cache/apt/archives after debootstrap --foreign"
        mkdir -p "$TMP/sysroot"
        for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$TMP/sysroot" || die "dpkg-deb -x $deb"; done
        check_sysroot "$TMP/sysroot"
        log "meanwhile, in the background: the venv's packages, and the build against the root's packages"
        set -m          # its own process group, which cleanup ends on failure
        ( fetch_reqs "$TMP/sysroot" && build_wheel "$TMP/sysroot" ) < /dev/null > "$TMP/background.log" 2>&1 &
        PREP_PID=$!
        set +m
    }
    STAMP=$(root_stamp "$ROOT" "$SUITE" "$PACKAGES")
    if [[ ! -f "$ROOT/.rmq-rootfs" ]]; then
        ROOT_BETWEEN_STAGES=between_stages make_root "$ROOT" "$SUITE" "$PACKAGES" "$MIRROR" --arch=arm64
        if [[ -n "$PREP_PID" ]]; then
            rc=0
            wait "$PREP_PID" || rc=$?
            PREP_PID=
            cat "$TMP/background.log" >&2
            (( rc == 0 )) || die "the background job (the venv's packages, the build) failed"
        fi
    fi
    mount_root "$ROOT"
    if [[ "$(cat "$ROOT/.rmq-rootfs")" != "$STAMP" ]]; then
        log "rootfs package list changed: apt-get install ${PACKAGES//,/ }"
        in_root apt-get update -q
        # shellcheck disable=SC2086
        in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PACKAGES//,/ }
        echo "$STAMP" > "$ROOT/.rmq-rootfs"
    fi
    check_sysroot "$ROOT"

    # 3. the current source tree
    log "copying $REPO to $ROOT/build/rmq"
    rm -rf --one-file-system "$ROOT/build/rmq"
    mkdir -p "$ROOT/build"
    cp -a "$TMP/rmq" "$ROOT/build/rmq"

    # 4. the venv, once per requirement list: the arm64 python3's, without pip, and the
    # wheels the host's pip fetched
    REQS_STAMP="host pip, manylinux_2_17..$(glibc_minor "$ROOT")_aarch64: ${PIP_REQS[*]}"
    if [[ "$(cat "$ROOT/opt/rmq-venv/.rmq-reqs" 2>/dev/null)" != "$REQS_STAMP" ]]; then
        log "creating the arm64 venv /opt/rmq-venv: ${PIP_REQS[*]}"
        t=$(date +%s)
        [[ -d "$TMP/site" ]] || fetch_reqs "$ROOT"
        rm -rf --one-file-system "$ROOT/opt/rmq-venv"
        in_root /usr/bin/python3 -m venv --without-pip /opt/rmq-venv
        [[ -d "$SITE" ]] || die "no $SITE in the new venv"
        cp -a "$TMP/site/." "$SITE/"
        launchers
        echo "$REQS_STAMP" > "$ROOT/opt/rmq-venv/.rmq-reqs"
        log "venv ready in $(( $(date +%s) - t )) s"
    fi

    # 5. rmq, cross-compiled on the host
    BUILT="$ROOT/opt/rmq-venv/.rmq-built"
    BUILD_NOTE=
    if [[ "${RMQ_ARM64_REBUILD:-0}" == 0 && "$(cat "$BUILT" 2>/dev/null)" == "$SRC_HASH" ]]; then
        BUILD_S=0
        BUILD_NOTE=" (reused)"
        log "rmq._core already built from these sources ($SRC_HASH): reused (RMQ_ARM64_REBUILD=1 rebuilds)"
    else
        rm -f "$BUILT"
        if [[ -f "$TMP/build-seconds" ]]; then
            BUILD_S=$(cat "$TMP/build-seconds")
            BUILD_NOTE=" (while the root was made)"
        else
            build_wheel "$ROOT"
            BUILD_S=$(cat "$TMP/build-seconds")
        fi
        rm -rf --one-file-system "$SITE"/rmq "$SITE"/rmq-*.dist-info
        host_pip_for_root --target "$SITE" --no-deps --platform linux_aarch64 "$TMP"/dist/rmq-*.whl \
            || die "pip install (host, for the root) $TMP/dist/rmq-*.whl"
        launchers
        echo "$SRC_HASH" > "$BUILT"
        log "installed into /opt/rmq-venv: $(cd "$TMP/dist" && echo rmq-*.whl)"
    fi
    [[ -x "$ROOT/opt/rmq-venv/bin/pytest" ]] || die "no pytest in /opt/rmq-venv/bin"

    in_root /bin/sh -c 'cd /build/rmq/tests && python - <<"EOF"
import os, platform, sys
import rmq
from rmq import _core
print("machine:", platform.machine(), "| python:", platform.python_version(),
      "| QEMU_CPU:", os.environ.get("QEMU_CPU"))
print("rmq.IMPLEMENTATION:", rmq.IMPLEMENTATION, "| core:", _core.__file__)
print("rmq.CRC32_KERNEL:", rmq.CRC32_KERNEL, "| available:", _core.crc32_kernels_available())
assert platform.machine() == "aarch64", platform.machine()
assert _core.__file__.endswith("-aarch64-linux-gnu.so"), _core.__file__
assert rmq.CRC32_KERNEL == "armv8", "the armv8 CRC32 kernel is not selected: no HWCAP_CRC32?"
EOF' || die "the core does not run with the armv8 kernel on aarch64"
    if (( PREPARE )); then
        log "prepared (--prepare): the root, the venv and the build, for the next run"
        exit 0
    fi

    # 6. the tests: cibuildwheel's command as it runs it, or the arguments given
    XDIST=()
    (( JOBS > 1 )) && XDIST=(-n "$JOBS")
    # each test's outcome in JUnit XML, whatever verbosity the command asks for
    export PYTEST_ADDOPTS="-rfEs --junitxml=/build/pytest.xml ${XDIST[*]}"
    rm -f "$ROOT/build/pytest.xml"
    t=$(date +%s)
    rc=0
    if (( $# == 0 )); then
        COMMAND=$(option "$IDENTIFIER" test-command --project /build/rmq)
        [[ "$COMMAND" == *test_crc32.py* ]] || die "the aarch64 test-command runs no test_crc32.py: $COMMAND"
        log "cibuildwheel's $IDENTIFIER test-command (PYTEST_ADDOPTS=$PYTEST_ADDOPTS): $COMMAND"
        CI=true in_root /bin/sh -c 'd=$(mktemp -d) && cd "$d" && /bin/sh -c "$1"; rc=$?; rm -rf "$d"; exit $rc' \
            sh "$COMMAND" > "$ROOT/build/pytest.log" 2>&1 || rc=$?
    else
        log "pytest (PYTEST_ADDOPTS=$PYTEST_ADDOPTS, HYPOTHESIS_PROFILE=$HYPOTHESIS_PROFILE): $*"
        in_root /bin/sh -c 'cd /build/rmq && exec python -m pytest -p no:cacheprovider "$@"' \
            pytest "$@" > "$ROOT/build/pytest.log" 2>&1 || rc=$?
    fi
    TEST_S=$(( $(date +%s) - t ))
    grep -E '^(FAILED|ERROR|SKIPPED) ' "$ROOT/build/pytest.log" | head -50 >&2 || true
    # "=== 2 passed in 1.0s ===", or without the rules under -q
    SUMMARY=$( { grep -E '^(=+ )?[0-9]+ [a-z]+.* in [0-9.]+s' "$ROOT/build/pytest.log" || true; } | tail -1)
    # the ARMv8 CRC32 tests (ids ending c-armv8]) and their outcomes
    read -r ARMV8_PASSED ARMV8_SKIPPED ARMV8_NOT_PASSED < <(in_root /usr/bin/python3 - <<"EOF"
import re
import xml.etree.ElementTree as ET
try:
    cases = list(ET.parse("/build/pytest.xml").getroot().iter("testcase"))
except (OSError, ET.ParseError):
    cases = []
passed = skipped = not_passed = 0
for case in cases:
    if case.get("classname", "").split(".")[-1] != "test_crc32" \
            or not re.search(r"c-armv8\]$", case.get("name", "")):
        continue
    outcomes = {c.tag for c in case} & {"skipped", "failure", "error"}
    passed += not outcomes
    skipped += "skipped" in outcomes
    not_passed += bool(outcomes)
print(passed, skipped, not_passed)
EOF
    )
    echo
    echo "aarch64 (QEMU_CPU=$QEMU_CPU, $(qemu-aarch64-static --version | sed -n 1p)), rmq.CRC32_KERNEL=armv8"
    echo "pytest: ${SUMMARY:-no summary line (see $ROOT/build/pytest.log)}"
    echo "ARMv8 CRC32 tests: $ARMV8_PASSED passed, $ARMV8_SKIPPED skipped, $ARMV8_NOT_PASSED not passed"
    echo "build ${BUILD_S}s${BUILD_NOTE}, tests ${TEST_S}s, total $(( $(date +%s) - START ))s; log: $ROOT/build/pytest.log"
    (( rc == 0 )) || die "pytest exited $rc"
    (( ARMV8_SKIPPED == 0 && ARMV8_NOT_PASSED == 0 )) || die "ARMv8 CRC32 tests did not all run and pass"
    if (( ARMV8_PASSED == 0 )); then
        for a in "${@:-test_crc32.py}"; do [[ "$a" == *test_crc32.py* ]] && die "no ARMv8 CRC32 test ran"; done
    fi
    exit 0
fi

# ------------------------------------------------------------------ on the host
if (( EUID != 0 )); then
    command -v sudo > /dev/null || die "needs root (debootstrap, chroot, mount), and there is no sudo"
    exec sudo --preserve-env=RMQ_ARM64_ROOT,RMQ_ARM64_MIRROR,RMQ_ARM64_JOBS,RMQ_ARM64_REBUILD,RMQ_ARM64_HOST_PYTHON,QEMU_CPU,HYPOTHESIS_PROFILE,http_proxy,https_proxy,PIP_INDEX_URL,PIP_EXTRA_INDEX_URL,PIP_CERT,SSL_CERT_FILE \
        RMQ_ARM64_ROOT="$ROOT" "$0" "$@"
fi
[[ "$(uname -m)" == x86_64 || "$(uname -m)" == aarch64 ]] || die "unexpected host $(uname -m)"

# 1. host tools, the host Python and binfmt_misc
apt_install() {     # apt_install PACKAGE...: Debian/Ubuntu packages, with the lists updated once
    command -v apt-get > /dev/null || die "install $* (Debian/Ubuntu packages; no apt-get here)"
    log "apt-get install $*"
    [[ -n "${APT_UPDATED:-}" ]] || apt-get update -q > /dev/null
    APT_UPDATED=1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" > /dev/null
}
missing=()
command -v qemu-aarch64-static > /dev/null || missing+=(qemu-user-static)
command -v debootstrap > /dev/null || missing+=(debootstrap)
command -v unshare > /dev/null || missing+=(util-linux)
if ! command -v "$CROSS_CC" > /dev/null; then
    # Debian's cross compiler, or on an arm64 host its own gcc
    if [[ "$(uname -m)" == aarch64 ]]; then missing+=(gcc); else missing+=(gcc-aarch64-linux-gnu); fi
fi
(( ${#missing[@]} == 0 )) || apt_install "${missing[@]}"
# the Python that cross-builds: the root's version (sysconfig, Cython's output, the tags)
if [[ -n "${RMQ_ARM64_HOST_PYTHON:-}" ]]; then
    py=$(host_python "$RMQ_ARM64_HOST_PYTHON") \
        || die "RMQ_ARM64_HOST_PYTHON=$RMQ_ARM64_HOST_PYTHON is no CPython $PYVER with venv and ensurepip"
    RMQ_ARM64_HOST_PYTHON=$py
elif ! RMQ_ARM64_HOST_PYTHON=$(host_python); then
    # Debian bookworm's own python3.11 (elsewhere: pyenv install 3.11, or RMQ_ARM64_HOST_PYTHON)
    if command -v apt-get > /dev/null; then apt_install "python$PYVER-venv" 2> /dev/null || true; fi
    RMQ_ARM64_HOST_PYTHON=$(host_python) \
        || die "no CPython $PYVER (with venv and ensurepip) on the host, which the arm64 root's python3 is: install one (python$PYVER-venv, pyenv install $PYVER) and set RMQ_ARM64_HOST_PYTHON to it if it is not on PATH"
fi
export RMQ_ARM64_HOST_PYTHON

if [[ "$(uname -m)" != aarch64 ]]; then
    BINFMT=/proc/sys/fs/binfmt_misc
    [[ -e $BINFMT/register ]] || mount -t binfmt_misc binfmt_misc $BINFMT \
        || die "cannot mount binfmt_misc on $BINFMT"
    if [[ ! -e $BINFMT/qemu-aarch64 ]]; then
        log "registering qemu-aarch64 with binfmt_misc"
        conf=/usr/lib/binfmt.d/qemu-aarch64.conf
        if command -v update-binfmts > /dev/null && update-binfmts --enable qemu-aarch64 2> /dev/null \
                && [[ -e $BINFMT/qemu-aarch64 ]]; then :
        elif [[ -f $conf ]]; then
            grep -v '^#' "$conf" > $BINFMT/register || die "cannot register $conf"
        else
            die "qemu-user-static ships no $conf: cannot register qemu-aarch64"
        fi
    fi
    grep -qx enabled $BINFMT/qemu-aarch64 || echo 1 > $BINFMT/qemu-aarch64
    # F (fix-binary): the interpreter is opened now, so it runs inside the chroot too.
    grep -qE '^flags: .*F' $BINFMT/qemu-aarch64 \
        || die "qemu-aarch64 is registered without the F flag; chroot needs it ($BINFMT/qemu-aarch64)"
fi

exec unshare --mount -- "$0" --in-namespace "$@"
