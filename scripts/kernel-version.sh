#!/bin/sh
# Prints the kernel release ibemu.ko is built and tested for: $KVER if set,
# else the running kernel when its headers are installed, else Debian's
# default kernel (the one linux-image-amd64 pulls in), else the newest
# installed kernel with headers. A container's running kernel is often not
# one whose headers exist, and the qemu test boots an installed one.
set -eu
if [ -n "${KVER:-}" ]; then echo "$KVER"; exit 0; fi
running=$(uname -r)
if [ -d "/lib/modules/$running/build" ]; then echo "$running"; exit 0; fi
usable() { [ -d "/lib/modules/$1/build" ] && [ -e "/boot/vmlinuz-$1" ]; }
default=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null |
  sed -n 's/^linux-image-\([^ ,]*\).*/\1/p')
if [ -n "$default" ] && usable "$default"; then echo "$default"; exit 0; fi
newest=$(for dir in /lib/modules/*; do
  rel=$(basename "$dir")
  usable "$rel" && echo "$rel"
done | sort -V | tail -n 1)
[ -n "$newest" ] || { echo "no kernel with headers in /lib/modules: run 'make deps'" >&2; exit 1; }
echo "$newest"
