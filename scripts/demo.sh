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
port=$((18000 + $$ % 1000))
"$IBEMU" run -- ibv_rc_pingpong -d ibemu0 -g 0 -p $port -n 1000 > /tmp/ibemu-demo-server.$$ 2>&1 &
server=$!
sleep 0.5
"$IBEMU" run -- ibv_rc_pingpong -d ibemu1 -g 0 -p $port -n 1000 localhost
wait $server
echo "--- server side:"
cat /tmp/ibemu-demo-server.$$
rm -f /tmp/ibemu-demo-server.$$
echo
echo "The fabric keeps running: try '$IBEMU run -- ibv_devinfo', and '$IBEMU down' to stop it."
