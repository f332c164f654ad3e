"""Comparing etwkit's Python values with `etwkit dump --format json` renderings of the same event."""

import calendar
import datetime
import math
import struct

EPOCH_FT = 116444736000000000  # 1970-01-01 as FILETIME


def filetime_from_rfc3339(s):
    """`2016-08-17T23:30:22.0379266Z` -> FILETIME (100 ns since 1601)."""
    assert s.endswith("Z"), s
    base, _, frac = s[:-1].partition(".")
    t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S")
    secs = calendar.timegm(t.timetuple())
    return EPOCH_FT + secs * 10**7 + int((frac + "0000000")[:7])


def same(p, j):
    """Whether the Python value `p` (from EventRecord.properties) is the value dump rendered as `j`."""
    if p is None or isinstance(p, bool):
        return p == j
    if isinstance(p, int):
        if isinstance(j, str):
            if j.startswith("0x"):  # hex integers, pointers, NTSTATUS/HRESULT
                return int(j, 16) == p
            return filetime_from_rfc3339(j) == p  # a FILETIME beyond datetime's range
        return isinstance(j, int) and j == p
    if isinstance(p, float):
        if j is None:
            return math.isnan(p) or math.isinf(p)
        if p == j:
            return True
        # An f32: dump prints the shortest text of the float32, Python holds its exact widening.
        return struct.unpack("<f", struct.pack("<f", j))[0] == p
    if isinstance(p, bytes):
        return j == "0x" + p.hex()
    if isinstance(p, datetime.datetime):
        if p.tzinfo is not None:  # FILETIME, microsecond precision in Python
            us = (p - datetime.datetime(1601, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)
            return filetime_from_rfc3339(j) // 10 == us
        return j == p.strftime("%Y-%m-%dT%H:%M:%S.") + f"{p.microsecond // 1000:03d}"  # SYSTEMTIME
    if isinstance(p, str):
        return p == j
    if isinstance(p, list):
        return isinstance(j, list) and len(p) == len(j) and all(same(a, b) for a, b in zip(p, j))
    if isinstance(p, dict):
        return isinstance(j, dict) and list(p) == list(j) and all(same(p[k], j[k]) for k in p)
    raise AssertionError(f"unexpected Python type {type(p)} of {p!r}")


def check_event(ev, line, where):
    """Asserts every field of `ev` (an etwkit.EventRecord) equals dump's JSON `line`."""
    assert ev.filetime == filetime_from_rfc3339(line["timestamp"]), where
    us = (ev.timestamp - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)
    assert us == (ev.filetime - EPOCH_FT) // 10, where
    assert ev.guid == line["provider"], where
    for k in ("provider_name", "event_name", "task_name", "opcode_name", "process_name"):
        assert getattr(ev, k) == line.get(k), f"{where}: {k}"
    for k in ("id", "version", "level", "opcode", "task", "channel", "pid", "tid", "cpu",
              "header_type", "activity_id"):
        assert getattr(ev, k) == line[k], f"{where}: {k} {getattr(ev, k)!r} != {line[k]!r}"
    assert ev.keywords == int(line["keywords"], 16), where
    assert ev.user_data.hex() == line["payload"], where
    want_stack = line["stack"]
    if want_stack is None:
        assert ev.stack is None, where
    else:
        assert ev.stack == [int(a, 16) for a in want_stack], where
    props = ev.properties
    if line["properties"] is None:
        assert props == {}, where
    else:
        assert list(props) == list(line["properties"]), f"{where}: property names"
        for k, v in props.items():
            assert same(v, line["properties"][k]), f"{where}: {k}: {v!r} vs dump {line['properties'][k]!r}"
