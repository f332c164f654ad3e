"""``etwkit.pcap``: the packets of a capture trace as pcapng, the same blocks ``etwkit pcap`` writes."""

import struct
import subprocess

import pytest

import etwkit
from conftest import cli, samples_dir


def blocks(path):
    """(type, body) of every pcapng block."""
    b = path.read_bytes()
    out, off = [], 0
    while off < len(b):
        kind, length = struct.unpack_from("<II", b, off)
        assert struct.unpack_from("<I", b, off + length - 4)[0] == length
        out.append((kind, b[off + 8:off + length - 4]))
        off += length
    return out


def test_pktmon_capture_equals_the_cli(tmp_path):
    etl = samples_dir() / "demikernel_PktMon.etl"
    ours = tmp_path / "py.pcapng"
    s = etwkit.pcap(etl, ours)
    assert (s["packets"], s["interfaces"], s["events"]) == (114, 4, 0)
    assert s["pktmon"]["packets"] == 114 and s["ndis"]["packets"] == 0
    theirs = tmp_path / "cli.pcapng"
    subprocess.run([cli(), "pcap", str(etl), "-o", str(theirs)], check=True, capture_output=True)
    a, b = blocks(ours), blocks(theirs)
    # The section headers name their writer; every other block is the same.
    assert a[0][0] == b[0][0] == 0x0A0D0D0A
    assert a[1:] == b[1:]
    assert sum(1 for k, _ in a if k == 6) == 114


def test_ndis_capture_with_its_other_events(tmp_path):
    out = tmp_path / "ndis.pcapng"
    s = etwkit.pcap(str(samples_dir() / "attackhost_trace.etl"), str(out), events=True)
    assert (s["packets"], s["interfaces"], s["events"]) == (1, 1, 101)
    assert s["ndis"]["fragments"] == 1 and s["ndis"]["incomplete"] == 0
    kinds = [k for k, _ in blocks(out)]
    assert kinds.count(6) == 1 and kinds.count(9) == 101 and kinds.count(1) == 1


def test_bad_input_and_output(tmp_path):
    notes = tmp_path / "notes.etl"
    notes.write_bytes(b"not a trace")
    out = tmp_path / "out.pcapng"
    with pytest.raises(etwkit.NotEtlError):
        etwkit.pcap(notes, out)
    assert not out.exists()
    etl = samples_dir() / "demikernel_PktMon.etl"
    with pytest.raises(ValueError, match="also an input"):
        etwkit.pcap(etl, etl)
