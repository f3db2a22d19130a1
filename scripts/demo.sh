#!/bin/sh
# The README's tour in one script: bring up two emulated HCAs, let the subnet
# manager make their ports ACTIVE, show them, and run rdma-core's RC pingpong
# between ibemu0 and ibemu1.
set -eu
BUILD=${1:-build}
IBEMU="$BUILD/bin/ibemu"
"$IBEMU" up
"$IBEMU" status
"$IBEMU" run -- ibv_devices
rt=$("$IBEMU" env | sed -n "s/^export IBEMU_RUNTIME_DIR='\(.*\)'$/\1/p")
server_log="$rt/demo-server.log"
port=$((18000 + $$ % 1000))
"$IBEMU" run -- ibv_rc_pingpong -d ibemu0 -g 0 -p $port -n 1000 > "$server_log" 2>&1 &
server=$!
# Start the client once the server listens (it accepts a single connection).
hexport=$(printf ':%04X' $port)
tries=0
until grep -q "$hexport 00000000:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
  tries=$((tries + 1))
  if [ $tries -gt 200 ] || ! kill -0 $server 2>/dev/null; then
    echo "the pingpong server did not start:"; cat "$server_log"; exit 1
  fi
  sleep 0.05
done
"$IBEMU" run -- ibv_rc_pingpong -d ibemu1 -g 0 -p $port -n 1000 localhost
wait $server
echo "--- server side:"
cat "$server_log"
rm -f "$server_log"
echo
echo "The fabric keeps running: try '$IBEMU run -- ibv_devinfo', and '$IBEMU down' to stop it."
