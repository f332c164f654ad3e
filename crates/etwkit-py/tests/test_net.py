"""``etwkit.net_report``: the socket answers from Python equal ``etwkit net``'s."""

import json
import subprocess

import etwkit
from conftest import cli, require_live, samples_dir


def test_net_report_of_a_recorded_trace_equals_the_cli(tmp_path):
    require_live()
    etl = tmp_path / "winsock.etl"
    # The built-in demo workload (TCP over IPv4 and IPv6, a refused connect, a reset, a UDP burst).
    run = subprocess.run([cli(), "trace", "--provider", "winsock", "-o", str(etl), "--",
                          cli(), "__demo-workload"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = etwkit.net_report(etl)
    rows = [json.loads(l) for l in subprocess.run(
        [cli(), "net", str(etl), "--format", "json"], capture_output=True, text=True,
        check=True).stdout.splitlines()]
    assert report["sockets"] == rows
    assert {(r["family"], r["protocol"]) for r in rows} >= {
        ("IPv4", "TCP"), ("IPv6", "TCP"), ("IPv4", "UDP")}
    assert any("connection refused" in json.dumps(r["failures"]) for r in rows)
    assert report["afd_events"] > len(rows)


def test_net_report_of_a_file_without_afd_events():
    r = etwkit.net_report(samples_dir() / "perfview_smallEtlFile.etl")
    assert r["sockets"] == [] and r["afd_events"] == 0
