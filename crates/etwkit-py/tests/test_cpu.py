"""``etwkit.cpu_report``: the CPU profile from Python equals ``etwkit cpu``'s."""

import json
import subprocess

import pytest

import etwkit
from conftest import cli, samples_dir


def cli_report(*args):
    run = subprocess.run([cli(), "cpu", *map(str, args), "--format", "json"],
                         capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def test_cpu_report_equals_the_cli():
    etl = samples_dir() / "perfview_net.4.5.x86.etl"
    report = etwkit.cpu_report(etl)
    assert report == cli_report(etl)
    assert report["total_samples"] == 16865
    by_pid = {p["pid"]: p for p in report["processes"]}
    assert by_pid[1980]["name"] == "test.exe" and by_pid[1980]["samples"] == 2931
    # A JIT-compiled method names its frames.
    assert any("Test.Main" in json.dumps(s) for s in report["top_stacks"])


def test_cpu_report_selects_by_pid_and_time():
    etl = samples_dir() / "perfview_net.4.5.x86.etl"
    one = etwkit.cpu_report(etl, pids=[1980], begin=1.0, end=2.5, top=3, frames=4)
    assert one == cli_report(etl, "--pid", "1980", "--begin", "1", "--end", "2.5", "--top", "3",
                             "--frames", "4")
    assert 0 < one["total_samples"] < 2931
    assert {p["pid"] for p in one["processes"]} == {1980}
    assert all(len(s["frames"]) <= 4 for s in one["top_stacks"])


def test_cpu_report_of_a_file_without_samples_is_empty():
    r = etwkit.cpu_report(samples_dir() / "perfview_smallEtlFile.etl")
    assert r["total_samples"] == 0 and r["processes"] == []


def test_cpu_report_refuses_a_bad_time_bound():
    with pytest.raises(TypeError):
        etwkit.cpu_report(samples_dir() / "perfview_smallEtlFile.etl", begin=[1])


def test_cpu_report_with_a_symbol_path_lists_the_pdbs_it_wanted(tmp_path):
    # The x64 sample's DbgID_RSDS events name each module's PDB; none is in the empty store.
    etl = samples_dir() / "perfview_net.4.5.2.x64.etl"
    report = etwkit.cpu_report(etl, top=3, symbols=f"srv*{tmp_path}")
    assert report == cli_report(etl, "--top", "3", "--symbols", f"srv*{tmp_path}")
    assert report["symbols"]["read"] == []
    missing = {(m["pdb"], m["guid"]): m for m in report["symbols"]["missing"]}
    ntdll = missing[("ntdll.pdb", "6048fdb6-2dcd-41c1-8835-594844ce7143")]
    assert ntdll["age"] == 2 and ntdll["store_key"] == "6048FDB62DCD41C18835594844CE71432"
    assert {m["reason"] for m in missing.values()} == {"not on the symbol path"}
    # Without a path, no `symbols`; a path that cannot be read is refused.
    assert "symbols" not in etwkit.cpu_report(etl, top=3)
    with pytest.raises(ValueError, match="srv\\* names no store"):
        etwkit.cpu_report(etl, symbols="srv*")
