#!/usr/bin/env bash
# Build rmq._core for aarch64 and run its core tests, the ARMv8 CRC32 kernels
# included, under QEMU user emulation on an x86_64 Debian/Ubuntu host: the test-command
# cibuildwheel runs on the aarch64 wheels (pyproject.toml's aarch64 override).
#
#   tools/aarch64-test.sh                  # cibuildwheel's aarch64 test-command
#   tools/aarch64-test.sh tests/test_crc32.py -k armv8    # other pytest arguments
#
# What it does (docs/aarch64.md has the details and the measured times):
#   1. installs qemu-user-static and debootstrap with apt-get when missing, and
#      makes sure binfmt_misc runs aarch64 ELF binaries through qemu-aarch64-static;
#   2. creates an arm64 Debian bookworm rootfs (python3, python3-dev, python3-venv,
#      gcc) in $RMQ_ARM64_ROOT (default ~/.cache/rmq/arm64-bookworm), once;
#   3. copies the current source tree (uncommitted edits included, .gitignore'd
#      files not) into it;
#   4. inside it (chroot, in a private mount namespace: nothing stays mounted), a
#      venv with what pyproject.toml names: the build requirements, rmq's
#      dependencies and cibuildwheel's test-requires for aarch64, with pytest-xdist;
#      made again when that list changes;
#   5. builds and installs rmq with the arm64 gcc (skipped when the sources are those
#      of the last build), and checks that the core runs on aarch64 with the armv8
#      CRC32 kernel selected;
#   6. runs cibuildwheel's test-command for aarch64, read from pyproject.toml by
#      tools/cibw_options.py ({project} and {package}: the copy; from an empty
#      directory, CI=true), with -rfEs, a JUnit XML report and pytest-xdist added by
#      PYTEST_ADDOPTS; fails unless the tests pass AND every ARMv8 CRC32 test ran
#      (none skipped), as the report tells.
#
# Environment: RMQ_ARM64_ROOT (rootfs), RMQ_ARM64_MIRROR (Debian mirror),
# RMQ_ARM64_JOBS (pytest-xdist workers, default nproc), QEMU_CPU (default max),
# HYPOTHESIS_PROFILE (default, quick or thorough; see tests/conftest.py; for runs
# with arguments: the test-command sets its own),
# RMQ_ARM64_REBUILD=1 (build even when src/, setup.py and pyproject.toml are
# unchanged since the last build).
# Needs root (debootstrap, chroot, mount); re-runs itself with sudo when possible.
set -euo pipefail
shopt -s inherit_errexit 2> /dev/null || true

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${RMQ_ARM64_ROOT:-$HOME/.cache/rmq/arm64-bookworm}
MIRROR=${RMQ_ARM64_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PACKAGES=python3,python3-dev,python3-venv,gcc,libc6-dev,ca-certificates
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

# ------------------------------------------------------------------ inside the namespace
# The second half runs under `unshare --mount`: its mounts (proc, sys, dev in the
# rootfs) vanish with it, even when it is killed.
if [[ "${1:-}" == "--in-namespace" ]]; then
    shift
    mount --make-rprivate /       # before debootstrap's own mounts (mount_root does it too)
    in_root() {        # a command in the arm64 rootfs, with the venv first on PATH
        in_root_of "$ROOT" PATH=/opt/rmq-venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
            QEMU_CPU="$QEMU_CPU" HYPOTHESIS_PROFILE="$HYPOTHESIS_PROFILE" \
            ${PYTEST_ADDOPTS:+PYTEST_ADDOPTS="$PYTEST_ADDOPTS"} ${CI:+CI="$CI"} "$@"
    }

    # 2. the rootfs, once
    STAMP=$(root_stamp "$ROOT" "$SUITE" "$PACKAGES")
    make_root "$ROOT" "$SUITE" "$PACKAGES" "$MIRROR" --arch=arm64
    mount_root "$ROOT"
    if [[ "$(cat "$ROOT/.rmq-rootfs")" != "$STAMP" ]]; then
        log "rootfs package list changed: apt-get install ${PACKAGES//,/ }"
        in_root apt-get update -q
        # shellcheck disable=SC2086
        in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PACKAGES//,/ }
        echo "$STAMP" > "$ROOT/.rmq-rootfs"
    fi

    # 3. the current source tree
    log "copying $REPO to $ROOT/build/rmq"
    rm -rf --one-file-system "$ROOT/build/rmq"
    "$REPO/tools/copy-tree.sh" "$REPO" "$ROOT/build/rmq"
    # what cibuildwheel runs on aarch64 and needs, from the copy's pyproject.toml
    IDENTIFIER=$(in_root /usr/bin/python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')-manylinux_aarch64
    option() { in_root /usr/bin/python3 /build/rmq/tools/cibw_options.py "$@"; }
    mapfile -t PIP_REQS < <(option - build-system.requires; option - project.dependencies
                            option "$IDENTIFIER" test-requires; echo "pytest-xdist>=3")
    (( ${#PIP_REQS[@]} > 3 )) || die "no requirements read from pyproject.toml"

    # 4. the venv, once per requirement list
    if [[ "$(cat "$ROOT/opt/rmq-venv/.rmq-reqs" 2>/dev/null)" != "${PIP_REQS[*]}" ]]; then
        log "creating the arm64 venv /opt/rmq-venv: ${PIP_REQS[*]}"
        t=$(date +%s)
        rm -rf --one-file-system "$ROOT/opt/rmq-venv"
        in_root /usr/bin/python3 -m venv /opt/rmq-venv
        in_root /opt/rmq-venv/bin/python -m pip install -q "${PIP_REQS[@]}"
        echo "${PIP_REQS[*]}" > "$ROOT/opt/rmq-venv/.rmq-reqs"
        log "venv ready in $(( $(date +%s) - t )) s"
    fi

    # 5. rmq built with the arm64 gcc
    # what the build reads: when it is unchanged since the last build, that build stands
    SRC_HASH=$(cd "$ROOT/build/rmq" && find src setup.py pyproject.toml -type f -print0 | LC_ALL=C sort -z \
        | xargs -0 sha256sum | sha256sum | cut -c1-16)
    BUILT="$ROOT/opt/rmq-venv/.rmq-built"
    if [[ "${RMQ_ARM64_REBUILD:-0}" == 0 && "$(cat "$BUILT" 2>/dev/null)" == "$SRC_HASH" ]]; then
        BUILD_S=0
        log "rmq._core already built from these sources ($SRC_HASH): reused (RMQ_ARM64_REBUILD=1 rebuilds)"
    else
        log "building rmq._core for aarch64 from sources $SRC_HASH (Cython + gcc -O3 under QEMU)"
        rm -f "$BUILT"
        t=$(date +%s)
        in_root /bin/sh -c 'cd /build/rmq && pip install -q --no-build-isolation --no-deps --force-reinstall . 2>&1' \
            > "$ROOT/build/build.log" || { tail -30 "$ROOT/build/build.log" >&2; die "build (log: $ROOT/build/build.log)"; }
        BUILD_S=$(( $(date +%s) - t ))
        echo "$SRC_HASH" > "$BUILT"
        log "built in $BUILD_S s"
    fi

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
    echo "build ${BUILD_S}s, tests ${TEST_S}s, total $(( $(date +%s) - START ))s; log: $ROOT/build/pytest.log"
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
    exec sudo --preserve-env=RMQ_ARM64_ROOT,RMQ_ARM64_MIRROR,RMQ_ARM64_JOBS,RMQ_ARM64_REBUILD,QEMU_CPU,HYPOTHESIS_PROFILE,http_proxy,https_proxy,PIP_INDEX_URL,PIP_CERT,SSL_CERT_FILE \
        RMQ_ARM64_ROOT="$ROOT" "$0" "$@"
fi
[[ "$(uname -m)" == x86_64 || "$(uname -m)" == aarch64 ]] || die "unexpected host $(uname -m)"

# 1. host tools and binfmt_misc
missing=()
command -v qemu-aarch64-static > /dev/null || missing+=(qemu-user-static)
command -v debootstrap > /dev/null || missing+=(debootstrap)
command -v unshare > /dev/null || missing+=(util-linux)
if (( ${#missing[@]} )); then
    command -v apt-get > /dev/null || die "install ${missing[*]} (Debian/Ubuntu packages; no apt-get here)"
    log "apt-get install ${missing[*]}"
    apt-get update -q > /dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" > /dev/null
fi

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
