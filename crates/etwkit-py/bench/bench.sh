#!/usr/bin/env bash
# Benchmarks the etwkit Python package (release wheel) against dissect.etl, in one run:
#   crates/etwkit-py/bench/bench.sh [FILE]   (default ../shared/etl-samples/perfview_net.4.5.x86.etl)
# The venv (target/py-bench-venv: maturin, pyarrow, dissect-etl, etwkit) is made on first run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
venv=$root/target/py-bench-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q maturin pyarrow "dissect-etl==3.14"
fi
"$venv/bin/maturin" build -q --release -m "$root/crates/etwkit-py/Cargo.toml" -o "$root/target/py-wheels"
"$venv/bin/pip" install -q --force-reinstall --no-deps "$root"/target/py-wheels/etwkit-*.whl
cargo build -q --release -p etwkit-cli --manifest-path "$root/Cargo.toml"
exec "$venv/bin/python" "$root/crates/etwkit-py/bench/bench_read.py" "$@"
