# shellcheck shell=bash
# Sourced by the scripts in tools/ (set TOOL, the name their log lines carry, and
# START, the epoch second their clock starts at, first): their log lines, and the
# Debian roots that tools/aarch64-test.sh and tools/wheel-test-sid.sh run things in.

log() { printf '[%s %4ds] %s\n' "$TOOL" "$(( $(date +%s) - START ))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

# make_root ROOT SUITE PACKAGES MIRROR [DEBOOTSTRAP_OPTIONS...]
#
# Makes ROOT with debootstrap unless it holds a .rmq-rootfs stamp; the stamp records
# root_stamp's "SUITE PACKAGES", so that the caller can tell a root made for another
# package list. It never deletes a directory it did not make: an unfinished root is
# ROOT.tmp.
#
# With ROOT_BETWEEN_STAGES set to a command, debootstrap runs in its two stages: the
# first (--foreign: the packages downloaded into ROOT.tmp/var/cache/apt/archives and the
# essential ones unpacked, on the host), then that command with ROOT.tmp as its argument
# (tools/aarch64-test.sh starts its cross build there, on the packages), then the second
# stage (their installation: dpkg and the packages' scripts in ROOT.tmp, under QEMU for a
# foreign architecture).
root_stamp() { echo "$2 $3"; }      # ROOT SUITE PACKAGES: what .rmq-rootfs says when current

make_root() {
    local root=$1 suite=$2 packages=$3 mirror=$4 t
    shift 4
    [[ -f "$root/.rmq-rootfs" ]] && return 0
    [[ ! -e "$root" ]] || die "$root exists but is not a finished root of this script (no .rmq-rootfs): remove it"
    log "creating the $suite root in $root (first run only)"
    rm -rf --one-file-system "$root.tmp"
    mkdir -p "$(dirname "$root")"
    t=$(date +%s)
    if [[ -z "${ROOT_BETWEEN_STAGES:-}" ]]; then
        debootstrap "$@" --variant=minbase --include="$packages" "$suite" "$root.tmp" "$mirror" \
            > "$root.debootstrap.log" 2>&1 \
            || { tail -20 "$root.debootstrap.log" >&2; die "debootstrap (log: $root.debootstrap.log)"; }
    else
        debootstrap --foreign "$@" --variant=minbase --include="$packages" "$suite" "$root.tmp" "$mirror" \
            > "$root.debootstrap.log" 2>&1 \
            || { tail -20 "$root.debootstrap.log" >&2; die "debootstrap --foreign (log: $root.debootstrap.log)"; }
        log "first stage (packages downloaded, essential ones unpacked) in $(( $(date +%s) - t )) s"
        "$ROOT_BETWEEN_STAGES" "$root.tmp"
        # run on the host, as debootstrap runs its second stage itself (in the root, its
        # shell script would run under QEMU too, and take twice as long)
        DEBOOTSTRAP_DIR="$root.tmp/debootstrap" "$root.tmp/debootstrap/debootstrap" --second-stage \
            --second-stage-target="$root.tmp" >> "$root.debootstrap.log" 2>&1 \
            || { tail -20 "$root.debootstrap.log" >&2; die "debootstrap --second-stage (log: $root.debootstrap.log)"; }
    fi
    mv "$root.tmp" "$root"
    root_stamp "$root" "$suite" "$packages" > "$root/.rmq-rootfs"
    log "root created in $(( $(date +%s) - t )) s"
}

# mount_root ROOT: proc, sys and dev in ROOT, and what pip needs to reach PyPI from
# inside: the host's resolver, and the CA certificates the host trusts (a
# TLS-intercepting proxy's included). Inside a private mount namespace (unshare
# --mount), so that the mounts vanish with it, even when the run is killed.
mount_root() {
    local root=$1 bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
    mount --make-rprivate /
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    mount --rbind /dev "$root/dev"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    [[ -f "$bundle" ]] || bundle="$root/etc/ssl/certs/ca-certificates.crt"
    cp -L "$bundle" "$root/etc/rmq-host-ca.crt"
}

# in_root_of ROOT [VAR=VALUE...] COMMAND...: COMMAND in ROOT with a clean environment
# (the caller's assignments come last, so that they win), pip using mount_root's CA and
# the host's proxy settings.
in_root_of() {
    local root=$1
    shift
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/rmq-host-ca.crt \
        SSL_CERT_FILE=/etc/rmq-host-ca.crt PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-60}" \
        ${http_proxy:+http_proxy=$http_proxy} ${https_proxy:+https_proxy=$https_proxy} \
        ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} "$@"
}
