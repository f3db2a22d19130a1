# Fresh Debian roots for the tests that need a whole system of a given
# release (`make package-test`, `make portability-test`). Sourced, not run:
#
#   debian_root_check               skips (exit 77) without root, debootstrap,
#                                   unshare or the archive
#   debian_root_make RELEASE ROOT   debootstraps RELEASE into ROOT
#   debian_root_run [--no-network] ROOT SCRIPT ARGS...
#                                   runs /bin/sh SCRIPT (a path inside ROOT)
#                                   in ROOT, in namespaces of its own
#   debian_root_apt                 apt-get's options for a root (see below)
#
# The environment:
#   IBEMU_DEBIAN_MIRROR      the archive (default: the system's apt source for
#                            Debian, else http://deb.debian.org/debian)
#   IBEMU_DEBOOTSTRAP_CACHE  downloaded packages kept between runs, those of
#                            debootstrap and, per release, those apt fetches
#                            in the root (default /var/cache/ibemu-debootstrap)
#
# Every mount lives in a private mount namespace and every process in a
# private PID namespace, so nothing stays mounted or running when a script
# ends, however it ends. The caller names itself in DEBIAN_ROOT_USER (for
# messages).

debian_root_skip() { echo "${DEBIAN_ROOT_USER:-debian-root}: skipped: $*"; exit 77; }

debian_root_system_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2> /dev/null | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^[:space:]]*/debian/?' \
    | grep -v security | head -n 1
}

debian_root_check() {
  [ "$(id -u)" = 0 ] || debian_root_skip "needs root (debootstrap, chroot)"
  command -v debootstrap > /dev/null \
    || debian_root_skip "debootstrap is not installed (apt-get install debootstrap)"
  command -v unshare > /dev/null || debian_root_skip "unshare (util-linux) is not installed"
  DEBIAN_MIRROR=${IBEMU_DEBIAN_MIRROR:-$(debian_root_system_mirror)}
  DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  curl -sfI --max-time 20 "${DEBIAN_MIRROR%/}/dists/bookworm/Release" > /dev/null \
    || debian_root_skip "the Debian archive $DEBIAN_MIRROR does not answer"
}

debian_root_make() {
  release=$1 root=$2
  cache=${IBEMU_DEBOOTSTRAP_CACHE:-/var/cache/ibemu-debootstrap}
  mkdir -p "$cache" "$cache/apt-$release/partial"
  DEBIAN_ROOT_APT_CACHE=$cache/apt-$release
  chmod 755 "$root" # the system's /, which an ordinary user must enter
  debootstrap --variant=minbase --cache-dir="$cache" "$release" "$root" "$DEBIAN_MIRROR" \
    > "$root.debootstrap.log" 2>&1 || { tail -n 20 "$root.debootstrap.log" >&2; return 1; }
  rm -f "$root.debootstrap.log"
  # An installed Debian has these (the installer writes them), debootstrap not.
  [ -f "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n' > "$root/etc/hosts"
  # A mirror of the archive taken at some date serves Release files whose
  # Valid-Until has passed; apt in the root must still take them.
  echo 'Acquire::Check-Valid-Until "false";' > "$root/etc/apt/apt.conf.d/99ibemu-test"
}

debian_root_run() {
  network=
  if [ "$1" = --no-network ]; then network=--net; shift; fi
  DEBIAN_ROOT_APT_CACHE=${DEBIAN_ROOT_APT_CACHE:-} \
    unshare --mount --pid --fork --propagation private $network sh -eu -c '
    root=$1; shift
    [ -z "$0" ] || ip link set lo up
    mount -t proc proc "$root/proc"
    mount -t sysfs -o ro sysfs "$root/sys"
    mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
    mount -t tmpfs -o mode=0755 tmpfs "$root/run"
    [ -z "$DEBIAN_ROOT_APT_CACHE" ] || mount --bind "$DEBIAN_ROOT_APT_CACHE" "$root/var/cache/apt/archives"
    exec chroot "$root" /bin/sh "$@"' "$network" "$@"
}
