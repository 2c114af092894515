#!/usr/bin/env bash
# tools/wheel-test.sh on a CPython that neither this Debian nor pyenv has here
# (3.14, the newest cibuildwheel builds for): in a Debian sid root with Debian's
# python3.X, native x86_64 (no emulation), made once with debootstrap.
#
#   tools/wheel-test-sid.sh                       # CPython 3.14
#   RMQ_SID_PYTHON=3.13 tools/wheel-test-sid.sh
#
# Inside the root the wheel is built, repaired and tested as tools/wheel-test.sh does
# on the host: an isolated build, auditwheel repair, a fresh venv, cibuildwheel's
# test-command from an empty directory. sid moves: when it no longer has python3.X,
# the root cannot be made (the error says so).
#
# Environment: RMQ_SID_ROOT (default ~/.cache/rmq/amd64-sid), RMQ_SID_MIRROR (Debian
# mirror), RMQ_SID_PYTHON (default 3.14), RMQ_WHEEL_XDIST (passed on).
# Needs root (debootstrap, chroot, mount).
set -euo pipefail
shopt -s inherit_errexit 2> /dev/null || true

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${RMQ_SID_ROOT:-$HOME/.cache/rmq/amd64-sid}
MIRROR=${RMQ_SID_MIRROR:-http://deb.debian.org/debian}
PY=${RMQ_SID_PYTHON:-3.14}
PACKAGES=python$PY,python$PY-dev,python$PY-venv,gcc,libc6-dev,ca-certificates

TOOL=wheel-test-sid
START=${RMQ_SID_START:-$(date +%s)}
export RMQ_SID_START=$START
# shellcheck source=tools/roots.sh
. "$(dirname "${BASH_SOURCE[0]}")/roots.sh"
[[ "$ROOT" == /?* ]] || die "RMQ_SID_ROOT must be an absolute path other than / (got '$ROOT')"

if [[ "${1:-}" == "--in-namespace" ]]; then
    mount_root "$ROOT"
    rm -rf --one-file-system "$ROOT/build/rmq"
    "$REPO/tools/copy-tree.sh" "$REPO" "$ROOT/build/rmq"
    in_root_of "$ROOT" ${RMQ_WHEEL_XDIST:+RMQ_WHEEL_XDIST="$RMQ_WHEEL_XDIST"} \
        PYTHON="python$PY" RMQ_WHEEL_WORK=/build/wheel-test /build/rmq/tools/wheel-test.sh
    exit
fi

(( EUID == 0 )) || die "needs root (debootstrap, chroot, mount)"
[[ "$(uname -m)" == x86_64 ]] || die "an amd64 root: run on x86_64"
missing=()
command -v debootstrap > /dev/null || missing+=(debootstrap)
command -v unshare > /dev/null || missing+=(util-linux)
if (( ${#missing[@]} )); then
    command -v apt-get > /dev/null || die "install ${missing[*]} (no apt-get here)"
    log "apt-get install ${missing[*]}"
    apt-get update -q > /dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" > /dev/null
fi

STAMP=$(root_stamp "$ROOT" sid "$PACKAGES")
if [[ ! -f "$ROOT/.rmq-rootfs" ]]; then
    make_root "$ROOT" sid "$PACKAGES" "$MIRROR"
elif [[ "$(cat "$ROOT/.rmq-rootfs")" != "$STAMP" ]]; then
    log "package list changed: apt-get install ${PACKAGES//,/ }"
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
    chroot "$ROOT" apt-get update -q > /dev/null
    # shellcheck disable=SC2086
    chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PACKAGES//,/ } > /dev/null \
        || die "apt-get install in $ROOT (does sid still have python$PY?)"
    echo "$STAMP" > "$ROOT/.rmq-rootfs"
fi
log "$(chroot "$ROOT" "python$PY" -VV | head -1), $(chroot "$ROOT" ldd --version | head -1)"

exec unshare --mount -- "$0" --in-namespace
