"""Heap answers from Python (Linux, root): etwkit.heap_report of a trace `etwkit heap -o FILE -- CHILD`
recorded of a child leaking 7 blocks of 4242 bytes equals `etwkit heap --report FILE`; etwkit.heap_trace of
a running process sees the very addresses its mallocs returned."""

import json
import subprocess
import sys
import threading
import time

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
    # The traced command's stdout goes to etwkit's stderr (etwkit's stdout is the report alone).
    pid = next(int(l) for l in run.stderr.splitlines() if l.strip().isdigit())
    json.loads(run.stdout)
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


ATTACHED = r"""
import ctypes, sys
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
keep = [libc.malloc(4242) for _ in range(7)]
sys.stdout.write(" ".join(str(p) for p in keep) + "\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def test_heap_trace_of_a_running_process(tmp_path):
    require_live()
    child = subprocess.Popen([sys.executable, "-c", ATTACHED], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        etl = tmp_path / "attached.etl"
        trace = etwkit.heap_trace([child.pid], logfile=etl)
        assert trace.exists()
        events = []
        th = threading.Thread(target=trace.process, args=(events.append,))
        th.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        addrs = [int(a) for a in child.stdout.readline().split()]
        time.sleep(0.3)
        trace.stop()
        th.join(10)
        child.stdin.write("bye\n")
        child.stdin.flush()
    finally:
        child.wait(10)
    assert len(addrs) == 7
    allocs = {e.properties["AllocAddress"]: e for e in events if e.id == 33 and e.pid == child.pid}
    for a in addrs:
        assert a in allocs, f"no Alloc event for {a:#x}"
        assert allocs[a].properties["AllocSize"] == 4242
        assert allocs[a].provider_name == "HeapTraceProvider" and allocs[a].stack
    report = etwkit.heap_report(etl)
    mine = [p for p in report["processes"] if p["pid"] == child.pid]
    assert mine and mine[0]["allocs"] >= 7 and mine[0]["outstanding_bytes"] >= 7 * 4242
