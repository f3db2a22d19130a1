#!/bin/sh
# Runs inside the Debian 12 chroot of test-debs.sh, as root, with network:
# installs the packages with apt (their dependencies come from Debian, with
# ibverbs-utils for the tutorial) and checks what they put on the system.
#   chroot-install.sh BUILD_MODULE IBEMU_DEB IBEMU_DKMS_DEB
set -eu
BUILD_MODULE=$1
shift
export DEBIAN_FRONTEND=noninteractive
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2> /dev/null || echo x86_64-linux-gnu)

apt-get update -q > /dev/null
apt-get install -y -q --no-install-recommends "$@" ibverbs-utils > /tmp/apt.log 2>&1 \
  || { tail -n 30 /tmp/apt.log; exit 1; }
dpkg-query -W -f='installed ${Package} ${Version}\n' ibemu ibemu-dkms

failed=0
check() { # check DESCRIPTION COMMAND...
  description=$1
  shift
  if "$@" > /tmp/check.out 2>&1; then
    echo "  ok    $description"
  else
    echo "  FAIL  $description"
    sed 's/^/        | /' /tmp/check.out
    failed=1
  fi
}
check "programs on PATH" sh -c 'for p in ibemu ibemud ibemu-sm; do command -v $p; done'
check "programs find their libraries" sh -c \
  '! ldd /usr/lib/ibemu/bin/* /usr/lib/ibemu/lib/*.so /usr/lib/ibemu/lib/compat/*.so.1 2>/dev/null | grep "not found"'
check "provider in libibverbs' directory" sh -c "ls /usr/lib/$MULTIARCH/libibverbs/libibemu-rdmav*.so"
check "driver file" grep -qx "driver ibemu" /etc/libibverbs.d/ibemu.driver
check "man pages" test -f /usr/share/man/man1/ibemu.1 -a -f /usr/share/man/man8/ibemud.8 \
  -a -f /usr/share/man/man8/ibemu-sm.8
check "systemd units" grep -q "^ExecStart=/usr/bin/ibemud " /usr/lib/systemd/system/ibemud.service \
  /usr/lib/systemd/system/ibemu-sm.service
check "daemon config" test -f /etc/ibemu/ibemu.json
check "docs" test -f /usr/share/doc/ibemu/install.md
check "module sources for DKMS" test -f /usr/src/ibemu-0.1/dkms.conf
check "DKMS knows the module" sh -c 'dkms status ibemu | grep "^ibemu/0.1"'

if [ "$BUILD_MODULE" = 1 ]; then
  # The headers' package runs DKMS's kernel hook, which builds ibemu.ko.
  apt-get install -y -q --no-install-recommends linux-headers-amd64 > /tmp/apt.log 2>&1 \
    || { tail -n 30 /tmp/apt.log; exit 1; }
  kver=$(ls /lib/modules | sort -V | tail -n 1)
  check "DKMS built and installed ibemu.ko for $kver" sh -c \
    "dkms status ibemu | grep \"ibemu/0.1, $kver, .*: installed\" && modinfo -k $kver ibemu"
fi
dkms status ibemu

# The tutorial runs as an ordinary user: the fabric needs no root.
id tutor > /dev/null 2>&1 || useradd --create-home tutor
exit $failed
