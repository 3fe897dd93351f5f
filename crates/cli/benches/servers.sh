#!/usr/bin/env bash
# The servers side by side in one run, alternating, each driven by the same
# `tollgate load` for 5 s a row: quota's Allow and Doorman's GetCapacity on
# this build ($T) and a baseline build ($BASE), then `tollgate rls` beside
# limitador's memory storage ($LIMITADOR, built from Kuadrant/limitador with
# `cargo build --release -p limitador-server`), then the limiter's
# uncapped criterion rows of both builds ($BENCH, $BASE_BENCH: their
# `target/release/deps/limiter-*` from `cargo bench -p tollgate --bench
# limiter --no-run`). Run from the repository root; read the server CPU
# per call of rows in the same round against each other.
#
#   T=target/release/tollgate BASE=../old/target/release/tollgate \
#   LIMITADOR=../limitador/target/release/limitador-server \
#   BENCH=target/release/deps/limiter-HASH BASE_BENCH=../old/target/release/deps/limiter-HASH \
#   bash crates/cli/benches/servers.sh
set -u
T=${T:-target/release/tollgate}
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
DC=crates/doorman/examples/doorman-fair.yaml
$BASE quota --config $QC --host 127.0.0.1 --port 15911 --debug-port 0 >/dev/null 2>&1 & QB=$!
$T quota --config $QC --host 127.0.0.1 --port 15912 --debug-port 0 >/dev/null 2>&1 & QM=$!
$BASE serve --config $DC --host 127.0.0.1 --port 15901 --debug-port 0 >/dev/null 2>&1 & SB=$!
$T serve --config $DC --host 127.0.0.1 --port 15902 --debug-port 0 >/dev/null 2>&1 & SM=$!
$T rls --config crates/rls/examples/rls-load.yaml --host 127.0.0.1 --port 15921 --debug-port 0 >/dev/null 2>&1 & RP=$!
$LIMITADOR --rls-ip 127.0.0.1 --rls-port 15931 --http-ip 127.0.0.1 --http-port 15932 "$LIMITS" memory >/dev/null 2>&1 & LP=$!
sleep 3
row() { echo "=== round $1 $2"; shift 2; $T load "$@" --duration 5s 2>&1 | tail -1; }
for r in 1 2 3; do
  row $r "allow baseline" --mode allow --server 127.0.0.1:15911 --namespace one --bucket b --server-pid $QB
  row $r "allow this" --mode allow --server 127.0.0.1:15912 --namespace one --bucket b --server-pid $QM
  row $r "getcapacity baseline" --server 127.0.0.1:15901 --clients 1000 --server-pid $SB
  row $r "getcapacity this" --server 127.0.0.1:15902 --clients 1000 --server-pid $SM
  row $r "rls 1 descriptor, 1 value" --mode rls --server 127.0.0.1:15921 --domain load --descriptors 1 --values 1 --server-pid $RP
  row $r "limitador 1 descriptor, 1 value" --mode rls --server 127.0.0.1:15931 --domain load --descriptors 1 --values 1 --server-pid $LP
  row $r "rls 1 descriptor, 100K values" --mode rls --server 127.0.0.1:15921 --domain load --descriptors 1 --values 100000 --server-pid $RP
  row $r "limitador 1 descriptor, 100K values" --mode rls --server 127.0.0.1:15931 --domain load --descriptors 1 --values 100000 --server-pid $LP
  row $r "rls 3 descriptors, 100K values" --mode rls --server 127.0.0.1:15921 --domain load --descriptors 3 --values 100000 --server-pid $RP
done
kill -INT $QB $QM $SB $SM $RP; kill $LP; wait
rm -f "$LIMITS"
if [ -n "${BENCH:-}" ] && [ -n "${BASE_BENCH:-}" ]; then
  for r in 1 2; do
    for x in "$BASE_BENCH" "$BENCH"; do
      echo "=== limiter round $r $x"
      $x --bench "uncapped/tollgate/1$|try_acquire/tollgate" --measurement-time 3 --warm-up-time 1 2>&1 | grep -E "^(uncapped|try_acquire)|thrpt:  \["
    done
  done
fi
