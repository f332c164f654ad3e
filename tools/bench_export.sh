#!/usr/bin/env bash
# Parquet export against the JSON-lines dump of the same trace: time (best of N runs) and bytes.
#   tools/bench_export.sh [FILE.etl] [RUNS]
# Default: ../shared/etl-samples/perfview_net.4.5.x86.etl, 3 runs. Builds the release CLI first.
# Goal (issue 14): the export is faster than `dump --format json` and under a fifth of its bytes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
file=${1:-../shared/etl-samples/perfview_net.4.5.x86.etl}
runs=${2:-3}
cargo build -q --release -p etwkit-cli
bin=$root/target/release/etwkit
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

best() { # best wall time in seconds of running "$@" $runs times
  local b=
  for _ in $(seq "$runs"); do
    local s e t
    s=$(date +%s.%N)
    "$@"
    e=$(date +%s.%N)
    t=$(echo "$e - $s" | bc -l)
    if [ -z "$b" ] || [ "$(echo "$t < $b" | bc -l)" = 1 ]; then b=$t; fi
  done
  echo "$b"
}

json_t=$(best sh -c "'$bin' dump --format json '$file' > '$work/dump.jsonl'")
pq_t=$(best sh -c "rm -rf '$work/ds' && '$bin' export -o '$work/ds' '$file' 2>/dev/null")
json_b=$(stat -c %s "$work/dump.jsonl")
ev_b=$(stat -c %s "$work/ds/events.parquet")
all_b=$(du -sb "$work/ds" | cut -f1)
tables=$(find "$work/ds" -name '*.parquet' | wc -l)
printf '%s (%s bytes), best of %s runs\n' "$file" "$(stat -c %s "$file")" "$runs"
printf '  dump --format json : %7.3f s  %11d bytes\n' "$json_t" "$json_b"
printf '  export (parquet)   : %7.3f s  %11d bytes (events.parquet %d + %d typed tables)\n' "$pq_t" "$all_b" "$ev_b" "$((tables - 1))"
printf '  time ratio export/json: %.2f   bytes ratio: %.3f (events.parquet alone %.3f)\n' \
  "$(echo "$pq_t / $json_t" | bc -l)" "$(echo "$all_b / $json_b" | bc -l)" "$(echo "$ev_b / $json_b" | bc -l)"
