"""Shared support of the Python tests: where ../shared and the etwkit CLI are, and loud skips.

Sample-based tests skip with a ``*** SKIPPED ... ***`` line when ../shared is missing, and fail instead
under ``ETWKIT_REQUIRE_SHARED=1`` (set by .ci/run). Live tests likewise need root with tracefs and fail
without it under ``ETWKIT_REQUIRE_ROOT=1``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import etwkit

ROOT = Path(__file__).resolve().parents[3]


def _missing(what, env):
    msg = f"{what} ({env}=1 requires it)"
    if os.environ.get(env) == "1":
        pytest.fail(msg, pytrace=False)
    # Shown in pytest's summary (tools/test.sh passes -rs), and on stderr with -s.
    sys.stderr.write(f"\n*** SKIPPED: {what} ***\n\n")
    pytest.skip(f"*** SKIPPED: {what} ***")


def shared_dir():
    p = os.environ.get("ETWKIT_SHARED")
    p = Path(p) if p else ROOT.parent / "shared"
    return p if p.is_dir() else None


def samples_dir():
    """The ETL samples folder; skips (or fails under ETWKIT_REQUIRE_SHARED=1) without it."""
    s = shared_dir()
    if s is None or not (s / "etl-samples").is_dir():
        _missing("../shared/etl-samples not found (set ETWKIT_SHARED or clone next to ../shared)",
                 "ETWKIT_REQUIRE_SHARED")
    return s / "etl-samples"


def sample_names():
    """Sample file names for parametrization (empty without ../shared: the tests then skip loudly)."""
    s = shared_dir()
    if s is None or not (s / "etl-samples").is_dir():
        return []
    return sorted(p.name for p in (s / "etl-samples").glob("*.etl"))


def require_live():
    """Skips (or fails under ETWKIT_REQUIRE_ROOT=1) unless live tracing works here (root, tracefs)."""
    try:
        etwkit.etw.sessions
    except OSError as e:
        _missing(f"live tracing needs root with tracefs ({e})", "ETWKIT_REQUIRE_ROOT")


_cli = None


def cli():
    """The etwkit CLI binary: $ETWKIT_CLI, else target/debug/etwkit (built with cargo when missing)."""
    global _cli
    if _cli is None:
        p = os.environ.get("ETWKIT_CLI")
        if p:
            _cli = p
        else:
            exe = ROOT / "target" / "debug" / "etwkit"
            if not exe.exists():
                subprocess.run(["cargo", "build", "-q", "-p", "etwkit-cli"], cwd=ROOT, check=True)
            _cli = str(exe)
    return _cli


def stats(path):
    out = subprocess.run([cli(), "stats", "--format", "json", str(path)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def dump_lines(path, keep=None):
    """`etwkit dump --format json` of a file as {index: parsed line}, for indices in `keep` (all when
    None), and the total line count."""
    proc = subprocess.Popen([cli(), "dump", "--format", "json", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    got = {}
    n = 0
    for line in proc.stdout:
        if keep is None or n in keep:
            got[n] = json.loads(line)
        n += 1
    assert proc.wait() == 0, f"etwkit dump {path} failed"
    return got, n
