#!/usr/bin/env bash
# Parquet export against the JSON-lines dump of the same trace, in one run: wall time (best of N
# runs, the two taking turns), CPU time (user+sys of that run), peak RSS (GNU time) and bytes.
#   tools/bench_export.sh [FILE.etl] [RUNS]
# Default: ../shared/etl-samples/perfview_net.4.5.x86.etl, 3 runs. Builds the release CLI first.
# Goal (issue 14): the export is faster than `dump --format json` and under a fifth of its bytes.
# The profile-guided build of tools/build_pgo.sh takes the same turns (one more line at the end;
# ETWKIT_BENCH_PGO=0 leaves it out).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
file=${1:-../shared/etl-samples/perfview_net.4.5.x86.etl}
runs=${2:-3}
[ -x /usr/bin/time ] || { echo "bench_export.sh: GNU time (/usr/bin/time, Debian package time) is needed" >&2; exit 2; }
cargo build -q --release -p etwkit-cli
bin=$root/target/release/etwkit
# The PGO build (see the header).
pgo=
if [ "${ETWKIT_BENCH_PGO:-1}" != 0 ]; then
  pgo=$("$root/tools/build_pgo.sh") || {
    echo "bench_export: the PGO build failed (above); measuring the release build alone" >&2
    pgo=
  }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# once CMD...: runs CMD under GNU time; prints "wall cpu rss_kb".
once() {
  /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@"
  set -- $(tail -1 "$work/time")
  echo "$1 $(echo "$2 + $3" | bc -l) $4"
}
# keep BEST LINE: the line with the smaller wall time.
keep() {
  if [ -z "$1" ] || [ "$(echo "${2%% *} < ${1%% *}" | bc -l)" = 1 ]; then echo "$2"; else echo "$1"; fi
}

# The two commands take turns, run by run (the machine's speed drifts; each figure is the best of
# its runs, taken over the same stretch of time).
# Each writes a new output: the previous run's is removed before the clock starts (truncating the
# 159 MB JSON inside the timed command cost `dump` tens of milliseconds of page-cache freeing that
# are not its work).
json_best= pq_best= pgo_json_best= pgo_pq_best=
for _ in $(seq "$runs"); do
  rm -f "$work/dump.jsonl"
  json_best=$(keep "$json_best" "$(once sh -c "'$bin' dump --format json '$file' > '$work/dump.jsonl'")")
  rm -rf "$work/ds"
  pq_best=$(keep "$pq_best" "$(once sh -c "'$bin' export -o '$work/ds' '$file' 2>/dev/null")")
  if [ -n "$pgo" ]; then
    rm -f "$work/pgo.jsonl"
    pgo_json_best=$(keep "$pgo_json_best" "$(once sh -c "'$pgo' dump --format json '$file' > '$work/pgo.jsonl'")")
    rm -rf "$work/pgo-ds"
    pgo_pq_best=$(keep "$pgo_pq_best" "$(once sh -c "'$pgo' export -o '$work/pgo-ds' '$file' 2>/dev/null")")
  fi
done
read -r json_t json_cpu json_rss <<< "$json_best"
read -r pq_t pq_cpu pq_rss <<< "$pq_best"
json_b=$(stat -c %s "$work/dump.jsonl")
ev_b=$(stat -c %s "$work/ds/events.parquet")
all_b=$(du -sb "$work/ds" | cut -f1)
tables=$(find "$work/ds" -name '*.parquet' | wc -l)
printf '%s (%s bytes), best of %s runs, %s cores, load %s\n' "$file" "$(stat -c %s "$file")" "$runs" \
  "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '  dump --format json : %7.3f s wall  %6.3f s cpu  %7d KB peak RSS  %11d bytes\n' \
  "$json_t" "$json_cpu" "$json_rss" "$json_b"
printf '  export (parquet)   : %7.3f s wall  %6.3f s cpu  %7d KB peak RSS  %11d bytes (events.parquet %d + %d typed tables)\n' \
  "$pq_t" "$pq_cpu" "$pq_rss" "$all_b" "$ev_b" "$((tables - 1))"
time_ratio=$(echo "$pq_t / $json_t" | bc -l)
bytes_ratio=$(echo "$all_b / $json_b" | bc -l)
printf '  export/json ratios: time %.2f  cpu %.2f  peak RSS %.2f  bytes %.3f (events.parquet alone %.3f)\n' \
  "$time_ratio" "$(echo "$pq_cpu / $json_cpu" | bc -l)" \
  "$(echo "$pq_rss / $json_rss" | bc -l)" "$bytes_ratio" "$(echo "$ev_b / $json_b" | bc -l)"
# Issue 14's targets: faster than the dump, under a fifth of its bytes.
goal() { if [ "$(echo "$1" | bc -l)" = 1 ]; then echo met; else echo "NOT met"; fi; }
printf '  goal export faster than dump --format json: %s (%.2fx its time); under a fifth of its bytes: %s (%.3f)\n' \
  "$(goal "$time_ratio < 1")" "$time_ratio" "$(goal "$bytes_ratio < 0.2")" "$bytes_ratio"
if [ -n "$pgo" ]; then
  read -r pj_t pj_cpu _ <<< "$pgo_json_best"
  read -r pp_t pp_cpu _ <<< "$pgo_pq_best"
  printf '  PGO build (tools/build_pgo.sh): dump --format json %.3f s wall %.3f s cpu, export %.3f s wall %.3f s cpu: time %.2f, cpu %.2f\n' \
    "$pj_t" "$pj_cpu" "$pp_t" "$pp_cpu" "$(echo "$pp_t / $pj_t" | bc -l)" "$(echo "$pp_cpu / $pj_cpu" | bc -l)"
fi
