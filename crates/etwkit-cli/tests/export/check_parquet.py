"""Reads an `etwkit export` dataset with DuckDB and compares it with what `etwkit` itself printed.

  check_parquet.py counts DIR
      prints {"file": {"provider": rows}} of DIR/events.parquet (for the comparison with `stats`).
  check_parquet.py sql QUERY
      prints the rows of a DuckDB query as a JSON list of lists.
  check_parquet.py typed DIR DUMP.jsonl
      compares every row of every typed table DIR/*/*.parquet, and every row of events.parquet, with
      the records of `etwkit dump --format json` (DUMP.jsonl, the only file in DIR's dataset), and
      prints a JSON report: rows and values compared, mismatches, values null in Parquet but not in
      the dump (the export counts those as unfit), and column chunk statistics checked against
      their row groups' values.
"""

import calendar
import glob
import json
import math
import os
import struct
import sys
import time

import duckdb


def q(path):
    return "'" + path.replace("'", "''") + "'"


def counts(d):
    con = duckdb.connect()
    out = {}
    sql = f"SELECT file, provider, count(*) FROM read_parquet({q(os.path.join(d, 'events.parquet'))}) GROUP BY ALL"
    for f, p, n in con.sql(sql).fetchall():
        out.setdefault(os.path.basename(f), {})[p] = n
    return out


def rfc3339_ns(s):
    """'2021-09-09T14:59:36.6710000Z' as ns since 1970."""
    assert s.endswith("Z"), s
    secs = calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))
    frac = s[20:-1] if len(s) > 20 else ""
    return secs * 10**9 + int((frac + "000000000")[:9])


def systemtime_ms(s):
    """'2021-09-09T14:59:36.671' (SYSTEMTIME, no zone) as ms since 1970."""
    secs = calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))
    return secs * 1000 + int(s[20:23])


def same(ty, dv, pv):
    """Whether the Parquet value pv (DuckDB type name ty, timestamps as epoch numbers) shows the dump's
    JSON value dv."""
    if ty.endswith("[]"):
        return isinstance(dv, list) and len(dv) == len(pv) and all(
            same(ty[:-2], a, b) for a, b in zip(dv, pv))
    if dv is None or pv is None:
        return dv is None and pv is None
    if ty in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"):
        if isinstance(dv, str):  # hex integers, NTSTATUS/HRESULT: "0x…"
            return dv.startswith("0x") and int(dv, 16) == pv
        return not isinstance(dv, bool) and dv == pv
    if ty == "BOOLEAN":
        return dv is pv
    if ty == "FLOAT":
        return isinstance(dv, (int, float)) and struct.unpack("f", struct.pack("f", dv))[0] == pv
    if ty == "DOUBLE":
        return isinstance(dv, (int, float)) and (dv == pv or (math.isnan(dv) and math.isnan(pv)))
    if ty == "BLOB":
        return isinstance(dv, str) and dv.startswith("0x") and bytes.fromhex(dv[2:]) == pv
    if ty == "EPOCH_NS":
        return isinstance(dv, str) and rfc3339_ns(dv) == pv
    if ty == "EPOCH_MS":
        return isinstance(dv, str) and systemtime_ms(dv) == pv
    if ty == "VARCHAR":
        if isinstance(dv, (dict, list)):  # structures: JSON text
            return json.loads(pv) == dv
        if isinstance(dv, (bool, int)):  # a text column's number or boolean: its JSON text
            return json.dumps(dv) == pv
        return dv == pv
    raise AssertionError(f"unexpected column type {ty}")


def select(con, path):
    """Rows of a Parquet file as dicts, timestamps as epoch numbers; and the column types."""
    cols = con.sql(f"DESCRIBE SELECT * FROM read_parquet({q(path)})").fetchall()
    exprs, types = [], {}
    for name, ty, *_ in cols:
        qn = '"' + name.replace('"', '""') + '"'
        if ty.startswith("TIMESTAMP") and ("TZ" in ty or "TIME ZONE" in ty or ty == "TIMESTAMP_NS"):
            exprs.append(f"epoch_ns({qn}) AS {qn}")
            ty = "EPOCH_NS"  # FILETIMEs and record timestamps (UTC)
        elif ty in ("TIMESTAMP", "TIMESTAMP_MS"):
            exprs.append(f"epoch_ms({qn}) AS {qn}")
            ty = "EPOCH_MS"  # SYSTEMTIMEs (no zone)
        else:
            exprs.append(qn)
        types[name] = ty
    rel = con.sql(f"SELECT {', '.join(exprs)} FROM read_parquet({q(path)})")
    names = rel.columns
    return [dict(zip(names, r)) for r in rel.fetchall()], types


COMMON = ["timestamp", "provider", "provider_name", "event_name", "id", "version", "level", "opcode",
          "task", "keywords", "pid", "process_name", "tid", "cpu", "activity_id"]


def statistics(con, path, table, bad, rep):
    """Checks the footer's min/max/null-count statistics of every chunk of `path` against the
    values DuckDB reads from that row group."""
    meta = con.sql(
        "SELECT row_group_id, row_group_num_rows, path_in_schema, stats_min_value, stats_max_value, "
        f"stats_null_count FROM parquet_metadata({q(path)}) ORDER BY row_group_id"
    ).fetchall()
    groups = {}
    for g, n, col, lo, hi, nulls in meta:
        groups.setdefault(g, (n, []))[1].append((col, lo, hi, nulls))
    start = 0
    for g in sorted(groups):
        n, cols = groups[g]
        cols = [c for c in cols if c[1] is not None or c[3] is not None]
        cols = [c for c in cols if "," not in c[0]]  # list items: no statistics
        if cols:
            exprs = ", ".join(
                f"min({qi(c)})::VARCHAR, max({qi(c)})::VARCHAR, count(*) - count({qi(c)})" for c, *_ in cols)
            got = con.sql(
                f"SELECT {exprs} FROM read_parquet({q(path)}, file_row_number=true) "
                f"WHERE file_row_number >= {start} AND file_row_number < {start + n}").fetchall()[0]
            for k, (c, lo, hi, nulls) in enumerate(cols):
                rep["statistics"] += 1
                want_lo, want_hi, want_nulls = got[3 * k:3 * k + 3]
                for what, have, want in [("min", lo, want_lo), ("max", hi, want_hi)]:
                    if have is None and want is None:
                        continue
                    if have is not None and want is not None and have != want:
                        try:  # floats: -0.0 and 0.0, and the two formats of one number
                            if float(have) == float(want):
                                continue
                        except ValueError:
                            pass
                    elif have is None and lo is None and hi is None:
                        continue  # no min/max written (booleans): nothing claimed
                    if have != want:
                        bad(table, f"row group {g} column {c} {what} statistic", want, have)
                if nulls is not None and nulls != want_nulls:
                    bad(table, f"row group {g} column {c} null count", want_nulls, nulls)
        start += n


def qi(name):
    return '"' + name.replace('"', '""') + '"'


def typed(d, dump_path):
    dump = [json.loads(line) for line in open(dump_path, encoding="utf-8")]
    con = duckdb.connect()
    rep = {"tables": 0, "rows": 0, "values": 0, "mismatches": [], "unfit_nulls": 0,
           "records_with_properties": sum(1 for r in dump if r.get("properties")),
           "events_rows": 0}
    seen = set()

    rep["mismatch_count"] = 0
    rep["statistics"] = 0

    def bad(where, what, dv, pv):
        rep["mismatch_count"] += 1
        if len(rep["mismatches"]) < 20:
            rep["mismatches"].append(f"{where}: {what}: dump {dv!r:.200}, parquet {pv!r:.200}")

    for path in sorted(glob.glob(os.path.join(d, "*", "*.parquet"))):
        rep["tables"] += 1
        rows, types = select(con, path)
        table = os.path.relpath(path, d)
        common = set(COMMON) | {"file", "record"}
        prop_cols = [c for c in types if c not in common]
        # One event type per table: TraceLogging events share id 0 (and often everything else
        # in their descriptor), their name tells them apart.
        kinds = {(r["provider"], r["event_name"], r["id"], r["version"], r["opcode"], r["task"])
                 for r in rows}
        if len(kinds) > 1:
            bad(table, "event types", 1, sorted(kinds, key=str)[:4])
        for row in rows:
            rec = row["record"]
            if rec in seen:
                bad(table, f"record {rec}", "once", "twice")
            seen.add(rec)
            dr = dump[rec]
            rep["rows"] += 1
            for c in COMMON:
                dv = dr.get(c)
                if not same(types[c], dv, row[c]):
                    bad(table, f"record {rec} {c}", dv, row[c])
            props = dr.get("properties") or {}
            cols_for = {}
            for c in prop_cols:
                p = c
                while p not in props and p.startswith("prop_"):
                    p = p[5:]
                cols_for[p] = c
            for p, dv in props.items():
                c = cols_for.get(p)
                if c is None:  # no column for it: counted as unfit by the export
                    rep["unfit_nulls"] += 1
                    continue
                pv = row[c]
                rep["values"] += 1
                if pv is None and dv is not None:
                    rep["unfit_nulls"] += 1
                    continue
                if not same(types[c], dv, pv):
                    bad(table, f"record {rec} property {p} ({types[c]})", dv, pv)
            for p, c in cols_for.items():
                if p not in props and row[c] is not None:
                    bad(table, f"record {rec} column {c}", "absent", row[c])
    # Every column chunk's statistics (min, max, null count) are its row group's own.
    for path in [os.path.join(d, "events.parquet")] + sorted(glob.glob(os.path.join(d, "*", "*.parquet"))):
        statistics(con, path, os.path.relpath(path, d), bad, rep)
    # events.parquet: every record, its payload, stack and properties.
    rows, types = select(con, os.path.join(d, "events.parquet"))
    rep["events_rows"] = len(rows)
    for row in rows:
        rec = row["record"]
        dr = dump[rec]
        for c in COMMON + ["task_name", "opcode_name", "channel", "header_type"]:
            if not same(types[c], dr.get(c), row[c]):
                bad("events.parquet", f"record {rec} {c}", dr.get(c), row[c])
        if row["payload"].hex() != dr["payload"]:  # the dump's payload: hex digits
            bad("events.parquet", f"record {rec} payload", dr["payload"], row["payload"])
        stack = dr.get("stack")  # return addresses as "0x…" strings
        want = None if stack is None else [int(a, 16) for a in stack]
        if want != row["stack"]:
            bad("events.parquet", f"record {rec} stack", stack, row["stack"])
        props = json.loads(row["properties"]) if row["properties"] is not None else None
        if props != dr.get("properties"):
            bad("events.parquet", f"record {rec} properties", dr.get("properties"), row["properties"])
    json.dump(rep, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "sql":
        json.dump([list(r) for r in duckdb.connect().sql(sys.argv[2]).fetchall()], sys.stdout,
                  default=str)
    elif sys.argv[1] == "counts":
        json.dump(counts(sys.argv[2]), sys.stdout)
    else:
        typed(sys.argv[2], sys.argv[3])
