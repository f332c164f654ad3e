#!/usr/bin/env bash
# Byte-for-byte comparison of `etwkit dump` between two builds on every sample: stdout, stderr and
# exit code of `--format json` and `--format csv` (each also with `--threads 1` and `--order file`),
# so a speed change can be shown not to change the output contract.
#   tools/compare_dump.sh REFERENCE_BINARY [CANDIDATE_BINARY] [SAMPLES_DIR]
# Candidate default: this checkout's target/release/etwkit; samples: ../shared/etl-samples.
# Exit 0 when every run matches, 1 when any differs (each difference is named).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:?usage: tools/compare_dump.sh REFERENCE_BINARY [CANDIDATE_BINARY] [SAMPLES_DIR]}
cand=${2:-$root/target/release/etwkit}
dir=${3:-$root/../shared/etl-samples}
[ -x "$ref" ] || { echo "compare_dump: no reference binary $ref" >&2; exit 2; }
[ -x "$cand" ] || { echo "compare_dump: no candidate binary $cand" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
runs=0
diffs=0
for f in "$dir"/*.etl; do
    for args in "--format json" "--format csv" "--format json --threads 1" \
        "--format csv --threads 1" "--format json --order file"; do
        # shellcheck disable=SC2086
        "$ref" dump "$f" $args >"$tmp/ref.out" 2>"$tmp/ref.err"
        rc_ref=$?
        # shellcheck disable=SC2086
        "$cand" dump "$f" $args >"$tmp/cand.out" 2>"$tmp/cand.err"
        rc_cand=$?
        runs=$((runs + 1))
        if [ $rc_ref -ne $rc_cand ] || ! cmp -s "$tmp/ref.out" "$tmp/cand.out" ||
            ! cmp -s "$tmp/ref.err" "$tmp/cand.err"; then
            diffs=$((diffs + 1))
            echo "DIFFERS: $(basename "$f") $args (exit $rc_ref vs $rc_cand; stdout $(cmp "$tmp/ref.out" "$tmp/cand.out" 2>&1 | head -1))"
        fi
    done
done
echo "compare_dump: $runs runs over $(ls "$dir"/*.etl | wc -l) samples, $diffs differ"
[ $diffs -eq 0 ]
