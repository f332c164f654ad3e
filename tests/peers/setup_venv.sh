#!/bin/sh
# Creates the venv the cross-reading test uses: target/peer-venv with the two PyPI peers.
set -e
cd "$(dirname "$0")/../.."
python3 -m venv target/peer-venv
target/peer-venv/bin/pip install -q "dissect-etl==3.14" "etl-parser==1.0.1"
echo "peer venv ready: target/peer-venv/bin/python"
