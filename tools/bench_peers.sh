#!/usr/bin/env bash
# Speed of etwkit against dissect.etl (PyPI dissect-etl) on the same file, in the same run.
#   tools/bench_peers.sh [FILE]     (default: ../shared/etl-samples/perfview_net.4.5.x86.etl)
# Prints MB/s for etwkit's record walk and JSON dump, dissect.etl's record walk (+ payload parse),
# and the ratios. dissect.etl lives in a venv under target/ (created on first run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
file=${1:-$root/../shared/etl-samples/perfview_net.4.5.x86.etl}
[ -f "$file" ] || { echo "bench_peers: no file $file (pass one, or clone next to ../shared)" >&2; exit 2; }
venv=$root/target/peers-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q dissect-etl
fi
cargo build -q --release -p etwkit-cli --manifest-path "$root/Cargo.toml"
bin=$root/target/release/etwkit
size=$(stat -c %s "$file")

ours_walk=$(cargo bench -q -p etwkit --bench read --manifest-path "$root/Cargo.toml" -- "$file" 2>/dev/null | awk '/walk, file order/ {print $6}')
start=$(date +%s.%N); "$bin" dump "$file" --format json --order file > /dev/null; end=$(date +%s.%N)
ours_dump=$(python3 -c "print(round($size/1e6/($end-$start)))")

dissect=$("$venv/bin/python" - "$file" <<'PY'
import sys, time
from dissect.etl import ETL
t = time.perf_counter(); n = 0; parsed = 0
with open(sys.argv[1], "rb") as fh:
    for rec in ETL(fh):
        n += 1
        try:
            rec.event; parsed += 1
        except Exception:
            pass
dt = time.perf_counter() - t
print(f"{n} {dt:.3f}")
PY
)
read -r d_records d_secs <<<"$dissect"
d_rate=$(python3 -c "print(round($size/1e6/$d_secs, 2))")
echo "file: $file ($((size/1000000)) MB)"
echo "etwkit walk (1 core):        $ours_walk MB/s"
echo "etwkit dump --format json:   $ours_dump MB/s (whole process, to /dev/null)"
echo "dissect.etl walk + event:    $d_rate MB/s ($d_records records in $d_secs s)"
python3 -c "print(f'ratio walk: etwkit is {float(\"$ours_walk\")/$d_rate:.0f}x dissect.etl; json dump: {$ours_dump/$d_rate:.0f}x')"
