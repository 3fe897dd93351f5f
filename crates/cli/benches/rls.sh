#!/usr/bin/env bash
# `tollgate rls` beside quota's Allow and limitador in one run, alternating,
# each row 5 s of `tollgate load` (64 calls in flight over 4 connections)
# on the same two cores as the server: this build ($T, server and load)
# against a baseline build ($BASE, server and load: the whole system
# before), and limitador's memory storage ($LIMITADOR, built from
# Kuadrant/limitador with `cargo build --release -p limitador-server`)
# driven by this build's load; and the baseline's rls driven by this
# build's load, which tells the server's share of a change from the
# load's. Run from the repository root; read the
# server and load CPU per call of rows in the same round against each
# other.
#
#   T=target/release/tollgate BASE=../old/target/release/tollgate \
#   LIMITADOR=../limitador/target/release/limitador-server \
#   ROUNDS=3 bash crates/cli/benches/rls.sh
set -u
T=${T:-target/release/tollgate}
ROUNDS=${ROUNDS:-3}
: "${BASE:?set BASE to the baseline tollgate}" "${LIMITADOR:?set LIMITADOR to limitador-server}"
LIMITS=$(mktemp --suffix .yaml)
cat > "$LIMITS" <<'YAML'
- namespace: load
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables:
    - descriptors[0].remote_address
YAML
QC=crates/quota/examples/quota-load.yaml
RC=crates/rls/examples/rls-load.yaml
$BASE quota --config $QC --host 127.0.0.1 --port 15911 --debug-port 0 >/dev/null 2>&1 & QB=$!
$T quota --config $QC --host 127.0.0.1 --port 15912 --debug-port 0 >/dev/null 2>&1 & QM=$!
$BASE rls --config $RC --host 127.0.0.1 --port 15920 --debug-port 0 >/dev/null 2>&1 & RB=$!
$T rls --config $RC --host 127.0.0.1 --port 15921 --debug-port 0 >/dev/null 2>&1 & RM=$!
$LIMITADOR --rls-ip 127.0.0.1 --rls-port 15931 --http-ip 127.0.0.1 --http-port 15932 "$LIMITS" memory >/dev/null 2>&1 & LP=$!
sleep 3
echo "=== load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
row() { echo "=== round $1 $2"; local g=$3; shift 3; $g load "$@" --duration 5s 2>&1 | tail -1; }
for r in $(seq "$ROUNDS"); do
  row $r "allow baseline" $BASE --mode allow --server 127.0.0.1:15911 --namespace one --bucket b --server-pid $QB
  row $r "allow this" $T --mode allow --server 127.0.0.1:15912 --namespace one --bucket b --server-pid $QM
  row $r "rls baseline, 1 descriptor, 1 value" $BASE --mode rls --server 127.0.0.1:15920 --domain load --descriptors 1 --values 1 --server-pid $RB
  row $r "rls baseline driven by this load, 1 descriptor, 1 value" $T --mode rls --server 127.0.0.1:15920 --domain load --descriptors 1 --values 1 --server-pid $RB
  row $r "rls this, 1 descriptor, 1 value" $T --mode rls --server 127.0.0.1:15921 --domain load --descriptors 1 --values 1 --server-pid $RM
  row $r "limitador, 1 descriptor, 1 value" $T --mode rls --server 127.0.0.1:15931 --domain load --descriptors 1 --values 1 --server-pid $LP
  row $r "rls baseline, 3 descriptors, 100K values" $BASE --mode rls --server 127.0.0.1:15920 --domain load --descriptors 3 --values 100000 --server-pid $RB
  row $r "rls baseline driven by this load, 3 descriptors, 100K values" $T --mode rls --server 127.0.0.1:15920 --domain load --descriptors 3 --values 100000 --server-pid $RB
  row $r "rls this, 3 descriptors, 100K values" $T --mode rls --server 127.0.0.1:15921 --domain load --descriptors 3 --values 100000 --server-pid $RM
  row $r "limitador, 1 descriptor, 100K values" $T --mode rls --server 127.0.0.1:15931 --domain load --descriptors 1 --values 100000 --server-pid $LP
done
echo "=== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -INT $QB $QM $RB $RM; kill $LP; wait
rm -f "$LIMITS"
