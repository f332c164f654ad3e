#!/bin/sh
# Creates the venv the export tests read Parquet with: target/export-venv with DuckDB's Python package.
set -e
cd "$(dirname "$0")/../../../.."
[ -x target/export-venv/bin/python ] || python3 -m venv target/export-venv
target/export-venv/bin/python -c "import duckdb" 2>/dev/null || target/export-venv/bin/pip install -q "duckdb>=1.1"
echo "export venv ready: target/export-venv/bin/python"
