"""etwkit.heap_report on a heap trace recorded here (Linux, root): `etwkit heap -o FILE -- CHILD` traces
a child that leaks 7 blocks of 4242 bytes; the Python report equals `etwkit heap --report FILE`."""

import json
import subprocess
import sys

import pytest

import etwkit
from conftest import cli, require_live, samples_dir

CHILD = r"""
import ctypes, os
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
keep = [libc.malloc(4242) for _ in range(7)]
print(os.getpid())
"""


def test_heap_report_of_a_recorded_trace_equals_the_cli(tmp_path):
    require_live()
    etl = tmp_path / "heap.etl"
    run = subprocess.run([cli(), "heap", "--mode", "uprobe", "-o", str(etl), "--format", "json", "--",
                          sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    pid = int(run.stdout.splitlines()[0])  # the child's line comes before the CLI's report
    report = etwkit.heap_report(etl, top=5, frames=4)
    cli_report = json.loads(subprocess.run([cli(), "heap", "--report", str(etl), "--format", "json",
                                            "--top", "5", "--frames", "4"],
                                           capture_output=True, text=True, check=True).stdout)
    assert report == cli_report
    procs = report["processes"]
    assert procs and sum(p["allocs"] for p in procs) >= 7
    assert report["outstanding_bytes_total"] >= 7 * 4242
    assert pid in [p["pid"] for p in procs]


def test_heap_report_of_a_file_without_heap_events_says_so():
    r = etwkit.heap_report(samples_dir() / "perfview_smallEtlFile.etl")
    assert r["operations"] == 0 and r["processes"] == []
    assert any("no heap events" in n for n in r["notes"])


def test_heap_report_of_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        etwkit.heap_report(tmp_path / "none.etl")
