#!/usr/bin/env bash
# Rate accuracy: achieved/target of `tollgate pace` over a grid of rates and
# thread counts, printed as a table (one pace run per cell, --format json).
#
#   bash crates/cli/benches/accuracy.sh                  # 1K-100M ops/s x 1, 2, 8 threads, 2 s a cell
#   DURATION=5s RATES="1M 10M" THREADS="2" bash crates/cli/benches/accuracy.sh
#   EXTRA="--async" bash crates/cli/benches/accuracy.sh  # extra pace options
#
# "other" is the cores other processes kept busy during the cell (from
# /proc/stat): a cell run while the machine was busy is noise.
#
# Needs jq. Builds the release binary first unless TOLLGATE points at one.
# The machine is shared: repeat a cell before trusting a miss.
set -euo pipefail

RATES=${RATES:-"1K 100K 1M 10M 50M 100M"}
THREADS=${THREADS:-"1 2 8"}
DURATION=${DURATION:-2s}
SPEC_SUFFIX=${SPEC_SUFFIX:-",1.1"}
EXTRA=${EXTRA:-}

command -v jq >/dev/null || { echo "accuracy.sh needs jq" >&2; exit 1; }
if [[ -z ${TOLLGATE:-} ]]; then
    cargo build --release --quiet --bin tollgate
    TOLLGATE="${CARGO_TARGET_DIR:-target}/release/tollgate"
fi

printf '%-8s %7s %14s %14s %9s %9s %11s %11s %9s %6s\n' \
    rate threads target achieved ratio "error%" "late p99" "backlog" "cpu ns/op" "other"
for rate in $RATES; do
    for threads in $THREADS; do
        # shellcheck disable=SC2086 # EXTRA is a list of options
        "$TOLLGATE" pace "$rate$SPEC_SUFFIX" --threads "$threads" --duration "$DURATION" \
            --format json $EXTRA |
            jq -r --arg rate "$rate" 'select(.type == "summary") | [
                $rate, .threads, .target_ops_per_s, .achieved_ops_per_s, .ratio,
                (.ratio - 1) * 100, .lateness_p99_ns / 1000, .backlog_ns / 1000, .cpu_ns_per_op,
                ([0, (.host_busy_cores // .cpu_cores) - .cpu_cores] | max)
            ] | @tsv' |
            while IFS=$'\t' read -r r t target achieved ratio err p99 backlog cpu other; do
                printf '%-8s %7s %14.0f %14.0f %9.5f %+9.3f %9.0fus %9.0fus %9.1f %6.2f\n' \
                    "$r" "$t" "$target" "$achieved" "$ratio" "$err" "$p99" "$backlog" "$cpu" "$other"
            done
    done
done
