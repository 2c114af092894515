# Sourced by tools/aarch64-test.sh and tools/wheel-test-sid.sh (which define log and
# die): a Debian root made once with debootstrap, recognised by its stamp file.
#
#   make_root ROOT SUITE PACKAGES MIRROR [DEBOOTSTRAP_OPTIONS...]
#
# Makes ROOT unless it holds a .rmq-rootfs stamp; the stamp records "SUITE PACKAGES",
# so that the caller can tell a root made for another package list (root_stamp).
# It never deletes a directory it did not make: an unfinished root is ROOT.tmp.

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
    debootstrap "$@" --variant=minbase --include="$packages" "$suite" "$root.tmp" "$mirror" \
        > "$root.debootstrap.log" 2>&1 \
        || { tail -20 "$root.debootstrap.log" >&2; die "debootstrap (log: $root.debootstrap.log)"; }
    mv "$root.tmp" "$root"
    root_stamp "$root" "$suite" "$packages" > "$root/.rmq-rootfs"
    log "root created in $(( $(date +%s) - t )) s"
}
