#!/bin/sh
# Runs inside the Debian 12 chroot of test-debs.sh, without network (its own
# loopback): the README's first tutorial as the user tutor, with nothing but
# the installed packages and Debian's ibverbs-utils.
set -eu
if [ "$(id -u)" = 0 ]; then exec runuser -u tutor -- /bin/sh "$0" "$@"; fi
cd
unset XDG_RUNTIME_DIR IBEMU_RUNTIME_DIR
RUNTIME=/tmp/ibemu-$(id -u)
server=

show_logs() {
  status=$?
  [ -z "$server" ] || kill "$server" 2> /dev/null || true
  if [ $status -ne 0 ]; then
    for log in "$RUNTIME"/ibemud.log "$RUNTIME"/ibemu-sm.log server.out client.out; do
      [ -f "$log" ] && { echo "--- $log"; tail -n 30 "$log"; }
    done
    echo "chroot-tutorial: FAILED"
  fi
  ibemu down > /dev/null 2>&1 || true
}
trap show_logs EXIT

say() { echo "  \$ $*"; }

say ibemu up
ibemu up
say ibemu run -- ibv_devices
ibemu run -- ibv_devices
for device in ibemu0 ibemu1; do
  say ibemu run -- ibv_devinfo -d $device
  ibemu run -- ibv_devinfo -d $device > devinfo.out
  cat devinfo.out
  [ "$(grep -c 'state:.*PORT_ACTIVE' devinfo.out)" = 2 ] || { echo "$device: ports not ACTIVE"; exit 1; }
done

say ibemu run -- ibv_rc_pingpong -d ibemu0 -g 0 '&'
ibemu run -- ibv_rc_pingpong -d ibemu0 -g 0 > server.out 2>&1 &
server=$!
# The client starts once the server listens on its TCP port 18515 (0x4853).
tries=0
until grep -q ':4853 00000000:0000 0A' /proc/net/tcp /proc/net/tcp6 2> /dev/null; do
  tries=$((tries + 1))
  [ $tries -le 200 ] && kill -0 $server 2> /dev/null || { echo "the server did not start"; exit 1; }
  sleep 0.05
done
say ibemu run -- ibv_rc_pingpong -d ibemu1 -g 0 localhost
ibemu run -- ibv_rc_pingpong -d ibemu1 -g 0 localhost > client.out 2>&1
wait $server
server=
cat client.out
grep -q "bytes in .* seconds" client.out && grep -q "bytes in .* seconds" server.out

say ibemu down
ibemu down
echo "chroot-tutorial: passed"
