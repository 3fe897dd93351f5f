#!/usr/bin/env bash
# quota's Allow and Doorman's GetCapacity on this build ($T) and a baseline
# build ($BASE) in ABBA order (each round reverses the pair, so neither
# build always runs second), four rounds of 5 s a row, then the limiter's
# uncapped row of both builds ($BENCH, $BASE_BENCH: their
# `target/release/deps/limiter-*`), alternating, three times (left out
# when BENCH is not set: a change that leaves the limiter alone). Run from
# the repository root.
#
#   T=target/release/tollgate BASE=../old/target/release/tollgate \
#   BENCH=target/release/deps/limiter-HASH BASE_BENCH=../old/target/release/deps/limiter-HASH \
#   bash crates/cli/benches/before_after.sh
set -u
T=${T:-target/release/tollgate}
: "${BASE:?set BASE to the baseline tollgate}"
BENCH=${BENCH:-}
[ -z "$BENCH" ] || : "${BASE_BENCH:?set BASE_BENCH beside BENCH}"
QC=crates/quota/examples/quota-load.yaml; DC=crates/doorman/examples/doorman-fair.yaml
$BASE quota --config $QC --host 127.0.0.1 --port 15911 --debug-port 0 >/dev/null 2>&1 & QB=$!
$T quota --config $QC --host 127.0.0.1 --port 15912 --debug-port 0 >/dev/null 2>&1 & QM=$!
$BASE serve --config $DC --host 127.0.0.1 --port 15901 --debug-port 0 >/dev/null 2>&1 & SB=$!
$T serve --config $DC --host 127.0.0.1 --port 15902 --debug-port 0 >/dev/null 2>&1 & SM=$!
sleep 3
echo "load at start: $(cat /proc/loadavg)"
row() { echo "=== round $1 $2"; shift 2; $T load "$@" --duration 5s 2>&1 | tail -1; }
ab() { r=$1
  row $r "allow baseline" --mode allow --server 127.0.0.1:15911 --namespace one --bucket b --server-pid $QB
  row $r "allow this" --mode allow --server 127.0.0.1:15912 --namespace one --bucket b --server-pid $QM
  row $r "getcapacity baseline" --server 127.0.0.1:15901 --clients 1000 --server-pid $SB
  row $r "getcapacity this" --server 127.0.0.1:15902 --clients 1000 --server-pid $SM; }
ba() { r=$1
  row $r "allow this" --mode allow --server 127.0.0.1:15912 --namespace one --bucket b --server-pid $QM
  row $r "allow baseline" --mode allow --server 127.0.0.1:15911 --namespace one --bucket b --server-pid $QB
  row $r "getcapacity this" --server 127.0.0.1:15902 --clients 1000 --server-pid $SM
  row $r "getcapacity baseline" --server 127.0.0.1:15901 --clients 1000 --server-pid $SB; }
ba 1; ab 2; ba 3; ab 4
kill -INT $QB $QM $SB $SM; wait
B=${BASE_BENCH:-}; M=$BENCH
[ -z "$M" ] || for r in 1 2 3; do for x in $M $B; do echo "=== limiter $r $x"; $x --bench "uncapped/tollgate/1$" --measurement-time 3 --warm-up-time 1 2>&1 | grep -A1 "uncapped/tollgate/1 " | tail -2; done; done
echo "load at end: $(cat /proc/loadavg)"
