#!/usr/bin/env bash
# `tollgate rls --store` beside limitador's `redis` storage ($LIMITADOR),
# on one fresh redis-server, in one run: calls/s, p99 and CPU per call for
# one key and 1M keys (a limit never reached), with Redis' own CPU per row
# and tollgate's script calls (decisions coalesce while calls are in flight);
# then two replicas of each on one key limited to 1,000 an hour, hammered
# at once from two load generators: the OKs of the two add up to what each
# admitted in all. The tollgate replicas wait up to 1 s for Redis here, as
# limitador always waits: past `--store-deadline` (10 ms by default) a call
# is answered by `--on-error`, and `local` admits on each replica's own
# counters, which a Redis slower than the deadline turns into more than the
# limit. Two tollgate servers answer: one with the runtime's default
# workers (one per core), one with `--threads 1`, which does better where
# Redis and the load share the cores with it; with BASE set (a baseline
# build's tollgate), a third, the baseline with its default workers. Run
# from the repository root.
#
#   LIMITADOR=../limitador/target/release/limitador-server [BASE=../old/tollgate] \
#   bash crates/cli/benches/rls_redis.sh
set -u
T=${T:-target/release/tollgate}
BASE=${BASE:-}
: "${LIMITADOR:?set LIMITADOR to limitador-server}"
D=$(mktemp -d)
cat > $D/load.yaml <<'YAML'
- namespace: load
  max_value: 1000000000
  seconds: 1
  conditions: []
  variables:
    - descriptors[0].remote_address
YAML
cat > $D/exact.yaml <<'YAML'
- namespace: exact
  max_value: 1000
  seconds: 3600
  conditions: []
  variables:
    - descriptors[0].remote_address
YAML
cat > $D/exact-tollgate.yaml <<'YAML'
domain: exact
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000}
YAML
redis-server --port 16399 --save '' --appendonly no >/dev/null 2>&1 & RS=$!
sleep 1
U=redis://127.0.0.1:16399
rcpu() { redis-cli -p 16399 info cpu | awk -F: '/used_cpu_(sys|user):/ {s+=$2} END {printf "%.2f", s}'; }
# Script calls (tollgate's EVALSHA: several decisions coalesce into one)
# and their time inside Redis, since the last reset.
rscripts() { redis-cli -p 16399 info commandstats | awk -F'[:=,]' '/^cmdstat_evalsha:/ {printf "evalsha_calls=%s evalsha_usec=%s", $3, $5}'; }
$T rls --config crates/rls/examples/rls-load.yaml --host 127.0.0.1 --port 15951 --debug-port 0 --store $U >/dev/null 2>&1 & TP=$!
$T rls --config crates/rls/examples/rls-load.yaml --host 127.0.0.1 --port 15952 --debug-port 0 --store $U --threads 1 >/dev/null 2>&1 & T1P=$!
WHO="tollgate tollgate-threads-1 limitador"
BP=
if [ -n "$BASE" ]; then
  $BASE rls --config crates/rls/examples/rls-load.yaml --host 127.0.0.1 --port 15953 --debug-port 0 --store $U >/dev/null 2>&1 & BP=$!
  WHO="baseline $WHO"
fi
$LIMITADOR --rls-ip 127.0.0.1 --rls-port 15961 --http-ip 127.0.0.1 --http-port 15962 $D/load.yaml redis $U >/dev/null 2>&1 & LP=$!
sleep 2
for r in 1 2; do
  for v in 1 1000000; do
    for who in $WHO; do
      case $who in
        tollgate) P=15951; PID=$TP ;;
        tollgate-threads-1) P=15952; PID=$T1P ;;
        baseline) P=15953; PID=$BP ;;
        *) P=15961; PID=$LP ;;
      esac
      redis-cli -p 16399 config resetstat >/dev/null
      c0=$(rcpu)
      out=$($T load --mode rls --server 127.0.0.1:$P --domain load --descriptors 1 --values $v --duration 5s --server-pid $PID 2>&1 | tail -1)
      c1=$(rcpu)
      echo "=== round $r values $v $who redis_cpu_s=$(echo "$c1 - $c0" | bc) $(rscripts)"; echo "$out"
    done
  done
done
kill -INT $TP $T1P $BP; kill $LP; wait $TP $T1P $BP $LP 2>/dev/null
echo "=== exactness: two replicas each, 1000 per hour on one key"
$T rls --config $D/exact-tollgate.yaml --host 127.0.0.1 --port 15971 --debug-port 0 --store $U --store-deadline 1s >/dev/null 2>&1 & T1=$!
$T rls --config $D/exact-tollgate.yaml --host 127.0.0.1 --port 15972 --debug-port 0 --store $U --store-deadline 1s >/dev/null 2>&1 & T2=$!
$LIMITADOR --rls-ip 127.0.0.1 --rls-port 15981 --http-ip 127.0.0.1 --http-port 15982 $D/exact.yaml redis $U >/dev/null 2>&1 & L1=$!
$LIMITADOR --rls-ip 127.0.0.1 --rls-port 15983 --http-ip 127.0.0.1 --http-port 15984 $D/exact.yaml redis $U >/dev/null 2>&1 & L2=$!
sleep 2
for pair in "tollgate 15971 15972" "limitador 15981 15983"; do
  set -- $pair
  $T load --mode rls --server 127.0.0.1:$2 --domain exact --descriptors 1 --values 1 --duration 3s 2>&1 | tail -1 > $D/a.txt &
  A=$!
  $T load --mode rls --server 127.0.0.1:$3 --domain exact --descriptors 1 --values 1 --duration 3s 2>&1 | tail -1 > $D/b.txt &
  B=$!
  wait $A $B
  echo "=== $1 replica A: $(cat $D/a.txt)"
  echo "=== $1 replica B: $(cat $D/b.txt)"
done
kill -INT $T1 $T2; kill $L1 $L2; wait $T1 $T2 $L1 $L2 2>/dev/null
kill $RS; wait
rm -rf $D
