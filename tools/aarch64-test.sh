#!/usr/bin/env bash
# Build rmq._core for aarch64 and run its core tests, the ARMv8 CRC32 kernels
# included, under QEMU user emulation on an x86_64 Debian/Ubuntu host.
#
#   tools/aarch64-test.sh                  # the default core test set
#   tools/aarch64-test.sh tests/test_crc32.py -k armv8    # other pytest arguments
#
# What it does (docs/aarch64.md has the details and the measured times):
#   1. installs qemu-user-static and debootstrap with apt-get when missing, and
#      makes sure binfmt_misc runs aarch64 ELF binaries through qemu-aarch64-static;
#   2. creates an arm64 Debian bookworm rootfs (python3, python3-dev, python3-venv,
#      gcc) in $RMQ_ARM64_ROOT (default ~/.cache/rmq/arm64-bookworm), once;
#   3. inside it (chroot, in a private mount namespace: nothing stays mounted), a
#      venv with Cython, pytest, pytest-xdist, hypothesis and msgpack from PyPI, once;
#   4. copies the current source tree (uncommitted edits included, .gitignore'd
#      files not), builds and installs rmq with the arm64 gcc (skipped when the
#      sources are those of the last build), and checks that the core runs on
#      aarch64 with the armv8 CRC32 kernel selected;
#   5. runs the tests and fails unless they pass AND every ARMv8 CRC32 test ran
#      (none skipped).
#
# Environment: RMQ_ARM64_ROOT (rootfs), RMQ_ARM64_MIRROR (Debian mirror),
# RMQ_ARM64_JOBS (pytest-xdist workers, default nproc), QEMU_CPU (default max),
# HYPOTHESIS_PROFILE (default, quick or thorough; see tests/conftest.py),
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
# Cython as pinned in pyproject.toml's build-system; the rest for the tests.
PIP_REQS="setuptools>=68 wheel Cython==3.1.8 msgpack>=1.0 pytest>=8 pytest-xdist>=3 hypothesis>=6.100 pyarrow>=14"
JOBS=${RMQ_ARM64_JOBS:-$(nproc)}
# QEMU 7.2's default aarch64 CPU model is already "max" (AT_HWCAP has CRC32, bit 7);
# set it anyway so an older or newer QEMU cannot silently hide the kernel.
export QEMU_CPU=${QEMU_CPU:-max}
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-default}

# The core's tests that need no Java, Node, network server or subprocess client:
# the codecs and the differential tests (compiled core vs rmq.fallback).
DEFAULT_TESTS=(
    tests/test_crc32.py
    tests/test_frame_decoder.py tests/test_frame_splitter.py tests/test_command.py
    tests/test_roundtrip.py tests/test_differential.py tests/test_vectors.py
    tests/test_bodies.py tests/test_scan.py tests/test_scan_compressed.py
    tests/test_routes.py tests/test_table_hashing.py
    tests/test_columns.py tests/test_trace_rows.py tests/test_errors.py
)

START=${RMQ_ARM64_START:-$(date +%s)}
export RMQ_ARM64_START=$START
log() { printf '[aarch64-test %4ds] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
[[ "$ROOT" == /?* ]] || die "RMQ_ARM64_ROOT must be an absolute path other than / (got '$ROOT')"

# ------------------------------------------------------------------ inside the namespace
# The second half runs under `unshare --mount`: its mounts (proc, sys, dev in the
# rootfs) vanish with it, even when it is killed.
if [[ "${1:-}" == "--in-namespace" ]]; then
    shift
    mount --make-rprivate /

    mount_rootfs() {   # $1: rootfs
        mount -t proc proc "$1/proc"
        mount -t sysfs sysfs "$1/sys"
        mount --rbind /dev "$1/dev"
        cp -L /etc/resolv.conf "$1/etc/resolv.conf"   # pip reaches PyPI from inside,
        # trusting what the host trusts (a TLS-intercepting proxy's CA included)
        local bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
        [[ -f "$bundle" ]] || bundle="$1/etc/ssl/certs/ca-certificates.crt"
        cp -L "$bundle" "$1/etc/rmq-host-ca.crt"
    }
    in_root() {        # a command in the arm64 rootfs, with a clean environment
        chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
            PATH=/opt/rmq-venv/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
            QEMU_CPU="$QEMU_CPU" HYPOTHESIS_PROFILE="$HYPOTHESIS_PROFILE" \
            PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/rmq-host-ca.crt \
            SSL_CERT_FILE=/etc/rmq-host-ca.crt PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-60}" \
            ${http_proxy:+http_proxy=$http_proxy} ${https_proxy:+https_proxy=$https_proxy} \
            ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} "$@"
    }

    # 2. the rootfs, once
    STAMP="$SUITE $PACKAGES"
    if [[ ! -f "$ROOT/.rmq-rootfs" ]]; then
        # never delete what this script did not make: an unfinished one is $ROOT.tmp
        [[ ! -e "$ROOT" ]] || die "$ROOT exists but is not a finished rootfs of this script (no .rmq-rootfs): remove it"
        log "creating the arm64 $SUITE rootfs in $ROOT (first run only: 5-10 min)"
        rm -rf --one-file-system "$ROOT.tmp"
        mkdir -p "$(dirname "$ROOT")"
        t=$(date +%s)
        debootstrap --arch=arm64 --variant=minbase --include="$PACKAGES" \
            "$SUITE" "$ROOT.tmp" "$MIRROR" > "$(dirname "$ROOT")/debootstrap.log" 2>&1 \
            || { tail -20 "$(dirname "$ROOT")/debootstrap.log" >&2; die "debootstrap (log: $(dirname "$ROOT")/debootstrap.log)"; }
        mv "$ROOT.tmp" "$ROOT"
        echo "$STAMP" > "$ROOT/.rmq-rootfs"
        log "rootfs created in $(( $(date +%s) - t )) s"
    fi
    mount_rootfs "$ROOT"
    if [[ "$(cat "$ROOT/.rmq-rootfs")" != "$STAMP" ]]; then
        log "rootfs package list changed: apt-get install ${PACKAGES//,/ }"
        in_root apt-get update -q
        # shellcheck disable=SC2086
        in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PACKAGES//,/ }
        echo "$STAMP" > "$ROOT/.rmq-rootfs"
    fi

    # 3. the venv, once per requirement list
    if [[ "$(cat "$ROOT/opt/rmq-venv/.rmq-reqs" 2>/dev/null)" != "$PIP_REQS" ]]; then
        log "creating the arm64 venv /opt/rmq-venv: $PIP_REQS"
        t=$(date +%s)
        rm -rf --one-file-system "$ROOT/opt/rmq-venv"
        in_root /usr/bin/python3 -m venv /opt/rmq-venv
        # shellcheck disable=SC2086
        in_root /opt/rmq-venv/bin/python -m pip install -q $PIP_REQS
        echo "$PIP_REQS" > "$ROOT/opt/rmq-venv/.rmq-reqs"
        log "venv ready in $(( $(date +%s) - t )) s"
    fi

    # 4. the current source tree, built with the arm64 gcc
    log "copying $REPO to $ROOT/build/rmq"
    rm -rf --one-file-system "$ROOT/build/rmq"
    mkdir -p "$ROOT/build/rmq"
    if git -c safe.directory='*' -C "$REPO" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
        # tracked and untracked files, less .gitignore'd ones (x86 .so, .venv, node_modules)
        (cd "$REPO" && git -c safe.directory='*' ls-files -z --cached --others --exclude-standard \
            | while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done \
            | tar --null -T - -cf -) | tar -xf - -C "$ROOT/build/rmq"
    else
        tar -C "$REPO" --exclude=.git --exclude=.venv --exclude=build --exclude='*.so' \
            --exclude=node_modules --exclude=__pycache__ --exclude=.hypothesis \
            --exclude=.pytest_cache --exclude=_core.c -cf - . | tar -xf - -C "$ROOT/build/rmq"
    fi
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

    # 5. the tests
    if (( $# == 0 )); then set -- "${DEFAULT_TESTS[@]}"; fi
    XDIST=()
    (( JOBS > 1 )) && XDIST=(-n "$JOBS")
    log "pytest ${XDIST[*]} (HYPOTHESIS_PROFILE=$HYPOTHESIS_PROFILE): $*"
    t=$(date +%s)
    rc=0
    in_root /bin/sh -c 'cd /build/rmq && exec python -m pytest -p no:cacheprovider -v -rfEs "$@"' \
        pytest "${XDIST[@]}" "$@" > "$ROOT/build/pytest.log" 2>&1 || rc=$?
    TEST_S=$(( $(date +%s) - t ))
    grep -E '^(FAILED|ERROR|SKIPPED) ' "$ROOT/build/pytest.log" | head -50 >&2 || true
    SUMMARY=$( { grep -E '^=+ .* in [0-9.]+s' "$ROOT/build/pytest.log" || true; } | tail -1)
    # -v prints one line a test with its outcome: "[gw0] [ 1%] PASSED tests/...::test_x[c-armv8]"
    # under xdist, "tests/...::test_x[c-armv8] PASSED [ 1%]" without
    armv8() { { grep -E "tests/test_crc32\.py::[^ ]*c-armv8\]" "$ROOT/build/pytest.log" || true; } \
        | { grep -E "(^| )($1)( |$)" || true; } | wc -l; }
    ARMV8_PASSED=$(armv8 PASSED)
    ARMV8_SKIPPED=$(armv8 SKIPPED)
    ARMV8_NOT_PASSED=$(armv8 'FAILED|ERROR|SKIPPED|XFAIL|XPASS')

    echo
    echo "aarch64 (QEMU_CPU=$QEMU_CPU, $(qemu-aarch64-static --version | sed -n 1p)), rmq.CRC32_KERNEL=armv8"
    echo "pytest: ${SUMMARY:-no summary line (see $ROOT/build/pytest.log)}"
    echo "ARMv8 CRC32 tests: $ARMV8_PASSED passed, $ARMV8_SKIPPED skipped, $ARMV8_NOT_PASSED not passed"
    echo "build ${BUILD_S}s, tests ${TEST_S}s, total $(( $(date +%s) - START ))s; log: $ROOT/build/pytest.log"
    (( rc == 0 )) || die "pytest exited $rc"
    (( ARMV8_SKIPPED == 0 && ARMV8_NOT_PASSED == 0 )) || die "ARMv8 CRC32 tests did not all run and pass"
    if (( ARMV8_PASSED == 0 )); then
        for a in "$@"; do [[ "$a" == *test_crc32.py* ]] && die "no ARMv8 CRC32 test ran"; done
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
