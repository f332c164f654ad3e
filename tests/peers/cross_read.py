#!/usr/bin/env python3
"""Cross-read ETL files that etwkit wrote with two independent readers from PyPI.

    cross_read.py MANIFEST.json

MANIFEST (written by crates/etwkit/tests/writer_cross_read.rs):
    {"files": [{"path": "...", "records": N,          # etwkit's record count (logfile header included)
                "tl_events": [                          # optional: TraceLogging events etwkit wrote
                    {"seq": 0, "event": "SocketCreate",
                     "fields": [["Seq", 0], ["Socket", 123], ...]}, ...],
                "tl_match": "seq" | "order"}]}               # how events pair up (default "seq")

Checks, for every file:
  * dissect.etl (``for r in ETL(fh)``) yields exactly N records, and decoding none of their headers fails;
  * etl-parser yields exactly N records, both through its documented API
    (``build_from_stream(data).parse(observer)``, which consumes the logfile-header record itself, so it
    reports N - 1 events) and through its own per-buffer record parser (N);
  * for files with ``tl_events``: etl-parser's TraceLogging decoder (``Event.parse_tracelogging``)
    recovers, for every event, the event name and the same field names and values, in order, as
    etwkit decodes. Events are matched by their "Seq" field, or with ``"tl_match": "order"`` by their
    position among the file's TraceLogging events in file order (``seq`` is then that position).

Prints one JSON line per file and exits 1 on any mismatch (2 on bad usage).
"""
import json
import sys

from dissect.etl import ETL
from etl.etl import IEtlFileObserver, build_from_stream, EtlLogFile, ChunkParser
from etl.event import Event


def norm(v):
    """etl-parser values -> plain JSON-comparable values."""
    if isinstance(v, bool) or isinstance(v, (int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if hasattr(v, "inner") and hasattr(v.inner, "data4"):  # Guid
        g = v.inner
        d4 = bytes(g.data4)
        return "%08x-%04x-%04x-%s-%s" % (g.data1, g.data2, g.data3, d4[:2].hex(), d4[2:].hex())
    if hasattr(v, "milliseconds"):  # SystemTime
        return [v.year, v.month, v.day_of_week, v.day, v.hour, v.minute, v.second, v.milliseconds]
    return repr(v)


class Collect(IEtlFileObserver):
    def __init__(self, want_tl):
        self.records = 0
        self.want_tl = want_tl
        self.tl = {}
        self.tl_order = []
        self.tl_errors = []

    def on_event_record(self, event):
        self.records += 1
        if not self.want_tl:
            return
        # Only TraceLogging events (those with an EVENT_SCHEMA_TL item) count.
        ext = event.source.extended_data or []
        if not any(e.ext_type == 11 for e in ext):
            return
        try:
            t = event.parse_tracelogging()
        except Exception as ex:  # undecodable: reported below
            self.tl_errors.append("%s: %s" % (type(ex).__name__, ex))
            self.tl_order.append(None)
            return
        fields = [[k, norm(v)] for k, v in t.items()]
        got = {"event": t.get_name(), "fields": fields}
        self.tl[dict(fields).get("Seq")] = got
        self.tl_order.append(got)

    def on_trace_record(self, event):
        self.records += 1

    def on_perfinfo_trace(self, obj):
        self.records += 1

    def on_system_trace(self, obj):
        self.records += 1

    def on_win_trace(self, obj):
        self.records += 1


def per_buffer_records(data):
    n = 0
    for chunk in EtlLogFile.parse(data):
        n += len(ChunkParser.parse(chunk.payload))
    return n


def check(entry):
    path, want = entry["path"], entry["records"]
    problems = []
    out = {"file": path, "etwkit": want}

    with open(path, "rb") as fh:
        n = 0
        header_errors = 0
        for r in ETL(fh):
            n += 1
            try:
                r.header.provider_id
            except Exception:
                header_errors += 1
    out["dissect"] = n
    if n != want:
        problems.append("dissect.etl read %d records, etwkit %d" % (n, want))
    if header_errors:
        problems.append("dissect.etl could not read %d record headers" % header_errors)

    data = open(path, "rb").read()
    tl_want = entry.get("tl_events") or []
    obs = Collect(bool(tl_want))
    build_from_stream(data).parse(obs)
    out["etl_parser_api"] = obs.records
    if obs.records + 1 != want:
        problems.append("etl-parser's API read %d events + the logfile header, etwkit %d records"
                        % (obs.records, want))
    pb = per_buffer_records(data)
    out["etl_parser_per_buffer"] = pb
    if pb != want:
        problems.append("etl-parser's per-buffer parser read %d records, etwkit %d" % (pb, want))

    if tl_want:
        matched = 0
        by_order = entry.get("tl_match") == "order"
        if by_order and len(obs.tl_order) != len(tl_want):
            problems.append("etl-parser saw %d TraceLogging events, etwkit %d" % (len(obs.tl_order), len(tl_want)))
        for ev in tl_want:
            if by_order:
                got = obs.tl_order[ev["seq"]] if ev["seq"] < len(obs.tl_order) else None
            else:
                got = obs.tl.get(ev["seq"])
            if got is None:
                problems.append("TL event seq %s: etl-parser did not decode it" % ev["seq"])
                continue
            if got["event"] != ev["event"]:
                problems.append("TL event seq %s: name %r, etwkit %r" % (ev["seq"], got["event"], ev["event"]))
            if got["fields"] != ev["fields"]:
                problems.append("TL event seq %s: fields %s, etwkit %s" % (ev["seq"], got["fields"], ev["fields"]))
            else:
                matched += 1
        out["tl_events"] = len(tl_want)
        out["tl_matched"] = matched
        if obs.tl_errors:
            problems.append("etl-parser failed on %d TL events, first: %s" % (len(obs.tl_errors), obs.tl_errors[0]))
    out["problems"] = problems[:20]
    print(json.dumps(out), flush=True)
    return not problems


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    manifest = json.load(open(sys.argv[1]))
    ok = all([check(e) for e in manifest["files"]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
