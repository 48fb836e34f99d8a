#!/usr/bin/env bash
# Proves the README's set-up on a bare machine. For each of the README's two commands, it makes a
# minimal Debian 12 root (debootstrap --variant=minbase), clones the commit under test into it
# with ../shared beside it, and runs the command there under chroot, as a new user would on a new
# machine. A machine where earlier work installed packages by hand can hide a missing install
# step; a bare root cannot. Each command gets its own root, because each must set up alone.
#
#   sudo bash scripts/check_fresh.sh [COMMIT]      (default: HEAD; needs root for chroot and mount)
#
# Environment:
#   SDP_FRESH_STEPS   training steps of the main job inside the root (default 40; the job's own
#                     default is 2000): the same script runs, only shorter
#   SDP_FRESH_CACHE   where the bare root is cached as a tarball between runs
#                     (default ${TMPDIR:-/tmp}/sdp-fresh-cache); delete it to debootstrap anew
#   SDP_FRESH_MIRROR  the Debian mirror for debootstrap (default: the host's first Debian source)
#   SDP_FRESH_KEEP=1  keep each root afterwards for a look inside (removed by default)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
commit=${1:-HEAD}
suite=bookworm
steps=${SDP_FRESH_STEPS:-40}
cache=${SDP_FRESH_CACHE:-${TMPDIR:-/tmp}/sdp-fresh-cache}
tarball="$cache/$suite-minbase.tar"
logs="$cache/logs"

die() {
    echo "check_fresh: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot and mount): run it with sudo"
sha=$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}") ||
    die "'$commit' is not a commit of $repo"
if [ "$commit" = HEAD ] && [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    echo "check_fresh: note: uncommitted changes are not tested, only commit ${sha:0:12}"
fi
shared="$repo/../shared"
[ -d "$shared" ] || echo "check_fresh: note: no ../shared beside the project: text tests will skip"

# The host's own Debian source, so that the root is built from the mirror this machine uses.
host_mirror() {
    grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
        grep -oE '(https?|file)://[^ ]*/debian/?( |$)' | head -n 1 | tr -d ' ' || true
}

make_bare_tarball() {
    command -v debootstrap >/dev/null || {
        echo "check_fresh: installing debootstrap on the host"
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; } \
            >/dev/null || die "could not install debootstrap (apt-get install debootstrap)"
    }
    local mirror=${SDP_FRESH_MIRROR:-$(host_mirror)} t0=$SECONDS dir="$cache/debootstrap.$$"
    [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt: set SDP_FRESH_MIRROR"
    echo "check_fresh: debootstrap --variant=minbase $suite (cached in $tarball)"
    rm -rf --one-file-system "$dir"
    debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        die "debootstrap failed: see $cache/debootstrap.log"
    rm -f "$dir"/var/cache/apt/archives/*.deb # debootstrap's own: count only what set-up fetches
    tar -C "$dir" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf --one-file-system "$dir"
    echo "check_fresh: bare root made in $((SECONDS - t0)) s"
}

root=""
mounted=()

# Unmounts whatever was mounted (innermost first) and removes the root, but never a root that
# still has something mounted under it: removing it would reach into the host's /dev.
remove_root() {
    [ -n "$root" ] || return 0
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null ||
            echo "check_fresh: could not unmount ${mounted[i]}" >&2
    done
    mounted=()
    if grep -qF " $root/" /proc/mounts; then
        echo "check_fresh: left $root in place: something is still mounted under it" >&2
    elif [ "${SDP_FRESH_KEEP:-0}" = 1 ]; then
        echo "check_fresh: kept the root at $root"
    else
        rm -rf --one-file-system "$root"
    fi
    root=""
}
trap remove_root EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mount_in() { # mount_in TARGET MOUNT-ARGS...
    local target="$root$1"
    shift
    mkdir -p "$target"
    mount "$@" "$target"
    mounted+=("$target")
}

# A bare root with the commit under test at /work/main and ../shared at /work/shared.
new_root() {
    root=$(mktemp -d "$cache/root.XXXXXX")
    tar -C "$root" -xf "$tarball"
    git clone --quiet --no-hardlinks "$repo" "$root/work/main"
    git -C "$root/work/main" checkout --quiet --detach "$sha"
    if [ -d "$shared" ]; then mkdir -p "$root/work/shared" && cp -a "$shared/." "$root/work/shared/"; fi
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" # apt inside the root resolves names
    # debootstrap writes no /etc/hosts, unlike an installed machine; without one, every lookup
    # of the machine's own name (MPI does one per process) waits for DNS to time out.
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
        "$(hostname)" >"$root/etc/hosts"
    mount_in /proc -t proc proc
    mount_in /sys -t sysfs sysfs
    mount_in /dev --bind /dev
    mount_in /dev/pts --bind /dev/pts
    mount_in /dev/shm -t tmpfs -o mode=1777 shm # MPI's shared-memory transport lives here
}

kib_outside_work() { du -sk --one-file-system --exclude="$root/work" "$@" "$root" | cut -f1; }

# Runs one README command in a new bare root with a clean environment, and prints one line: PASS
# or FAIL with its time. Each line of its log carries the seconds since the command started, so
# its parts (download, build, run) can be read off.
failures=0
run_readme_command() {
    local cmd=$1 log="$logs/$(printf '%s' "$1" | tr -c 'a-z0-9' '_').log" status=0
    new_root
    local bare_kib t0=$SECONDS
    bare_kib=$(kib_outside_work)
    chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        ${http_proxy:+http_proxy="$http_proxy"} ${https_proxy:+https_proxy="$https_proxy"} \
        SDP_STEPS="$steps" /bin/bash -c "cd /work/main && $cmd" </dev/null 2>&1 |
        while IFS= read -r line; do printf '[%4ds] %s\n' $((SECONDS - t0)) "$line"; done >"$log" ||
        status=$? # pipefail: chroot's own status
    local took=$((SECONDS - t0)) installed_kib debs_kib
    installed_kib=$(($(kib_outside_work --exclude="$root/var/cache/apt") - bare_kib))
    debs_kib=$(du -sk "$root/var/cache/apt/archives" | cut -f1)
    local what
    what=$(printf '%-26s %dm%02ds, packages %d MiB downloaded, %d MiB installed' "$cmd" \
        $((took / 60)) $((took % 60)) $((debs_kib / 1024)) $((installed_kib / 1024)))
    if [ "$status" -eq 0 ]; then
        echo "check_fresh: PASS  $what  (log: $log)"
    else
        echo "check_fresh: FAIL  $what  (log: $log); its last lines:"
        tail -n 25 "$log" | sed 's/^/    /'
        failures=$((failures + 1))
    fi
    remove_root
}

mkdir -p "$cache" "$logs"
exec 9>"$cache/lock"
flock -w 3600 9 || die "another check_fresh has held $cache/lock for an hour"
[ -s "$tarball" ] || make_bare_tarball
echo "check_fresh: commit ${sha:0:12}, each README command in its own bare Debian 12 root" \
    "(main job at $steps steps)"
run_readme_command "bash scripts/main_job.sh"
run_readme_command "bash scripts/test.sh"
if [ "$failures" -ne 0 ]; then
    echo "check_fresh: $failures of 2 README commands failed on a bare root"
    exit 1
fi
echo "check_fresh: both README commands pass on a bare root"
