#!/bin/sh
# Three `tollgate serve` electing on a real etcd, a `tollgate lease`
# client holding 40 of 100, etcd stopped for OUTAGE seconds (longer than
# the election TTL) and started again. Prints when the masters changed
# and the client's capacity over time (seconds since etcd stopped).
#
# Usage: docs/fleet/etcd-outage-real.sh [TOLLGATE] [OUTAGE]
# Leases of 20 s, refresh every 5 s, 20 s of learning mode, TTL 3 s.
set -eu
TOLLGATE=${1:-target/release/tollgate}
OUTAGE=${2:-10}
DIR=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLIENT=$(port); PEER=$(port)
ETCD="127.0.0.1:$CLIENT"
start_etcd() {
    etcd --name=t --data-dir="$DIR/data" \
        --listen-client-urls="http://$ETCD" --advertise-client-urls="http://$ETCD" \
        --listen-peer-urls="http://127.0.0.1:$PEER" \
        --initial-advertise-peer-urls="http://127.0.0.1:$PEER" \
        --initial-cluster="t=http://127.0.0.1:$PEER" >>"$DIR/etcd.log" 2>&1 &
    echo $! >"$DIR/etcd.pid"
}
cat >"$DIR/doorman.yaml" <<'YAML'
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 20}
YAML
start_etcd
sleep 2
PIDS=""
SERVERS=""
for i in 1 2 3; do
    P=$(port); D=$(port)
    "$TOLLGATE" serve --config "$DIR/doorman.yaml" --port "$P" --debug-port "$D" \
        --etcd-endpoints "$ETCD" --election-key /tollgate/real --election-ttl 3s \
        --advertise "127.0.0.1:$P" >"$DIR/serve$i.log" 2>&1 &
    PIDS="$PIDS $!"
    SERVERS="$SERVERS,127.0.0.1:$P"
done
SERVERS=${SERVERS#,}
trap 'kill $PIDS $LEASE $(cat "$DIR/etcd.pid") 2>/dev/null; rm -rf "$DIR"' EXIT
sleep 2
"$TOLLGATE" lease r --wants 40 --server "$SERVERS" --format json 2>"$DIR/lease.err" |
    while read -r line; do echo "$(date +%s.%N) $line"; done >"$DIR/lease.log" &
LEASE=$!
sleep 20
STOP=$(date +%s.%N)
kill "$(cat "$DIR/etcd.pid")"
sleep "$OUTAGE"
start_etcd
BACK=$(date +%s.%N)
sleep 45
echo "etcd stopped at 0 s, back at $(echo "$BACK - $STOP" | bc) s"
grep -h -E "won mastership|lost mastership" "$DIR"/serve*.log |
    sed -E 's/\x1b\[[0-9;]*m//g' | cut -c1-200
awk -v t0="$STOP" '{ t = $1 - t0; $1 = ""; printf "%7.2f %s\n", t, $0 }' "$DIR/lease.log" |
    grep -o -E '^ *-?[0-9.]+|"capacity":[0-9.e+-]+|"source":"[a-z_]+"' | paste -d' ' - - -
