"""etwkit.read over every ../shared sample, checked against the etwkit CLI (`stats`, `dump --format
json`) run on the same file; the Arrow table; process() on a logfile; bad input."""

import datetime
import os
import warnings

import pytest

import etwkit
from compare import EPOCH_FT, check_event, filetime_from_rfc3339
from conftest import dump_lines, sample_names, samples_dir, stats

SAMPLES = sample_names() or ["<no ../shared>"]
PER_FILE = 250  # records compared field by field per sample (evenly spaced, plus first and last)


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_reads_like_the_cli(name):
    path = samples_dir() / name
    want = stats(path)["records"]
    events = list(etwkit.read(path))
    assert len(events) == want, f"{name}: etwkit.read yields {len(events)} records, stats says {want}"
    if not events:
        return
    step = max(1, len(events) // PER_FILE)
    keep = set(range(0, len(events), step)) | {len(events) - 1}
    lines, n = dump_lines(path, keep)
    assert n == len(events)
    for i in sorted(keep):
        check_event(events[i], lines[i], f"{name} record {i}")


def test_filters_select_like_the_cli():
    path = samples_dir() / "perfview_net.4.5.2.x64.etl"
    all_ev = list(etwkit.read(path))
    pid = next(e.pid for e in all_ev if e.provider_name == "Microsoft-Windows-DotNETRuntime")
    sel = list(etwkit.read(path, providers="Microsoft-Windows-DotNETRuntime", pids=[pid]))
    assert sel and all(e.pid == pid and e.provider_name == "Microsoft-Windows-DotNETRuntime" for e in sel)
    assert len(sel) == sum(1 for e in all_ev
                           if e.pid == pid and e.provider_name == "Microsoft-Windows-DotNETRuntime")
    by_id = list(etwkit.read(path, ids=[sel[0].id]))
    assert len(by_id) == sum(1 for e in all_ev if e.id == sel[0].id)
    # Time bounds: a FILETIME int, an aware datetime and seconds from the start select the same window.
    mid = all_ev[len(all_ev) // 2].filetime
    tail = [e for e in all_ev if e.filetime >= mid]
    assert len(list(etwkit.read(path, begin=mid))) == len(tail)
    as_dt = datetime.datetime(1601, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=mid // 10)
    assert len(list(etwkit.read(path, begin=as_dt))) == sum(1 for e in all_ev if e.filetime >= mid // 10 * 10)
    head = [e for e in all_ev if e.filetime <= mid]
    assert len(list(etwkit.read(path, end=mid))) == len(head)


def test_to_arrow_matches_dump():
    path = samples_dir() / "perfview_net.4.5.x86.etl"
    table = etwkit.read(path).to_arrow()
    assert table.num_rows == stats(path)["records"]
    import pyarrow as pa
    types = {f.name: f.type for f in table.schema}
    assert types["timestamp"] == pa.timestamp("ns", tz="UTC")
    assert types["id"] == pa.uint16() and types["pid"] == pa.uint32() and types["keywords"] == pa.uint64()
    lines, n = dump_lines(path)
    assert n == table.num_rows
    cols = {c: table.column(c).to_pylist() for c in
            ("id", "version", "level", "opcode", "task", "channel", "pid", "tid", "cpu", "keywords",
             "provider", "provider_name", "event_name", "task_name", "opcode_name", "header_type",
             "activity_id", "properties", "process_name")}
    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    import json
    for i in range(n):
        line = lines[i]
        assert ts[i] == (filetime_from_rfc3339(line["timestamp"]) - EPOCH_FT) * 100, f"row {i}"
        for c in ("id", "version", "level", "opcode", "task", "channel", "pid", "tid", "cpu",
                  "provider", "header_type", "activity_id"):
            assert cols[c][i] == line[c], f"row {i} column {c}"
        for c in ("provider_name", "event_name", "task_name", "opcode_name", "process_name"):
            assert cols[c][i] == line.get(c), f"row {i} column {c}"
        assert cols["keywords"][i] == int(line["keywords"], 16), f"row {i}"
        p = cols["properties"][i]
        assert (json.loads(p) if p is not None else None) == line["properties"], f"row {i} properties"
    df = etwkit.read(path, ids=[cols["id"][n // 2]]).to_pandas()
    assert len(df) == sum(1 for x in cols["id"] if x == cols["id"][n // 2])
    assert str(df["timestamp"].dtype).startswith("datetime64[ns")


def test_process_on_a_logfile_reads_the_file():
    path = samples_dir() / "perfview_net.4.5.2.x64.etl"
    trace = etwkit.etw.open_trace("pytest-logfile", logfile=str(path))
    assert trace.logfile == path or str(trace.logfile) == str(path)
    seen = []
    trace.process(lambda ev: seen.append((ev.filetime, ev.id, ev.pid)))
    assert seen == [(e.filetime, e.id, e.pid) for e in etwkit.read(path)]
    # begin/end as seconds from the trace start (the logfile header's) bound what is delivered.
    got = []
    trace.process(lambda ev, ctx: ctx.append(ev.filetime), begin=0.5, end=1.0, context=got)
    start = filetime_from_rfc3339(stats(path)["start_time"])
    want = [t for t, _, _ in seen if start + 5_000_000 <= t <= start + 10_000_000]
    assert want and got == want


def test_callback_exception_propagates_from_logfile_processing():
    path = samples_dir() / "perfview_net.4.5.2.x64.etl"

    class Boom(Exception):
        pass

    n = []

    def cb(ev):
        n.append(ev)
        if len(n) == 10:
            raise Boom("stop here")

    with pytest.raises(Boom):
        etwkit.etw.open_trace("pytest-boom", logfile=path).process(cb)
    assert len(n) == 10


def test_missing_file_is_file_not_found(tmp_path):
    p = tmp_path / "nope.etl"
    with pytest.raises(FileNotFoundError) as e:
        etwkit.read(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_empty_and_corrupt_files_are_not_etl(tmp_path):
    empty = tmp_path / "empty.etl"
    empty.write_bytes(b"")
    with pytest.raises(etwkit.NotEtlError) as e:
        etwkit.read(empty)
    assert isinstance(e.value, ValueError) and "empty" in str(e.value)
    junk = tmp_path / "junk.etl"
    junk.write_bytes(os.urandom(3) + b"not an ETL file at all" * 1000)
    with pytest.raises(ValueError) as e:
        etwkit.read(junk)
    assert "not an ETL file" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(etwkit.NotEtlError) as e:
        etwkit.read(tmp_path)
    assert "is a directory" in str(e.value)


def test_truncated_file_yields_what_is_readable(tmp_path):
    src = samples_dir() / "perfview_net.4.5.2.x64.etl"
    data = src.read_bytes()
    cut = tmp_path / "cut.etl"
    cut.write_bytes(data[: len(data) // 2 + 12345])
    full = stats(src)["records"]
    r = etwkit.read(cut)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        n = sum(1 for _ in r)
    assert 0 < n < full
    assert n == stats(cut)["records"]
    assert r.summary["records"] >= n


def test_file_cut_at_a_buffer_boundary_warns(tmp_path):
    # Nothing in it is unreadable, but 162 of the logger's 182 buffers are missing: this was silent.
    src = samples_dir() / "tx_Process.etl"
    cut = tmp_path / "cut.etl"
    cut.write_bytes(src.read_bytes()[: 20 * 8192])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        n = sum(1 for _ in etwkit.read(cut))
    assert n == stats(cut)["records"]
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert msgs == [
        f"{cut}: file offset {20 * 8192}: file holds 20 of the 182 buffers the logger wrote; "
        "everything in the file was read"
    ], msgs
    # The whole file: no warning.
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sum(1 for _ in etwkit.read(src))
    assert [x for x in w if issubclass(x.category, RuntimeWarning)] == []


def test_bad_arguments_are_value_or_type_errors():
    path = samples_dir() / "perfview_smallEtlFile.etl"
    with pytest.raises(ValueError) as e:
        etwkit.read(path, begin="soon")
    assert "RFC 3339" in str(e.value)
    with pytest.raises((TypeError, ValueError)):
        etwkit.read(path, ids=["x"])
    with pytest.raises(ValueError):
        etwkit.read(path, begin=datetime.datetime(2020, 1, 1))  # naive
    with pytest.raises(ValueError):
        etwkit.etw.open_trace("x", guid="not-a-guid")


def test_repr_and_types():
    path = samples_dir() / "perfview_smallEtlFile.etl"
    ev = next(iter(etwkit.read(path)))
    r = repr(ev)
    assert r.startswith("<EventRecord Windows Kernel") and f"pid={ev.pid}" in r
    assert ev.timestamp.tzinfo is not None
    assert isinstance(ev.properties["BufferSize"], int)
    assert isinstance(ev.properties["EndTime"], datetime.datetime)
    assert isinstance(ev.properties["SessionNameString"], str)
    assert isinstance(ev.properties["TimeZoneInformation"], bytes)
