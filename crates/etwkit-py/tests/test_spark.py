"""The Spark data source (etwkit.spark) in local mode with two executor threads: every ../shared
sample read through spark.read.format("etl"), counts per provider equal `etwkit stats` summed over
the files; filters; one event type's typed columns equal `etwkit dump --format json`."""

import datetime
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from conftest import _missing, cli, dump_lines, samples_dir, stats


@pytest.fixture(scope="module")
def spark():
    try:
        import pyspark  # noqa: F401
        from pyspark.sql import SparkSession
    except ImportError:
        _missing("pyspark is not installed (pip install pyspark)", "ETWKIT_REQUIRE_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    s = (SparkSession.builder.master("local[2]").appName("etwkit-test")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .getOrCreate())
    from etwkit.spark import register
    register(s)
    yield s
    s.stop()


def test_every_sample_counts_per_provider_equal_stats(spark):
    d = samples_dir()
    files = sorted(d.glob("*.etl"))
    want = Counter()
    for f in files:
        for p, n in stats(f)["providers"].items():
            want[p] += n
    df = spark.read.format("etl").load(str(d / "*.etl"))
    # One input partition per file: the files are spread over the executors.
    assert df.rdd.getNumPartitions() == len(files)
    got = {r["provider"]: r["count"] for r in df.groupBy("provider").count().collect()}
    assert got == dict(want)
    per_file = {r["file"]: r["count"] for r in df.groupBy("file").count().collect()}
    assert {os.path.basename(k): v for k, v in per_file.items()} == {
        f.name: stats(f)["records"] for f in files}


def test_filters(spark):
    f = samples_dir() / "tx_Process.etl"
    s = stats(f)
    df = (spark.read.format("etl").option("providers", "Microsoft-Windows-Kernel-Process")
          .load(str(f)))
    assert df.count() == s["providers"]["22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716"]
    lines, n = dump_lines(f)
    pid = lines[1]["pid"]
    want_pid = sum(1 for line in lines.values() if line["pid"] == pid)
    assert spark.read.format("etl").option("pids", str(pid)).load(str(f)).count() == want_pid
    want_ids = sum(1 for line in lines.values() if line["id"] in (1, 2))
    assert spark.read.format("etl").option("ids", "1,2").load(str(f)).count() == want_ids


def test_event_type_typed_columns_equal_dump(spark):
    f = samples_dir() / "tx_Process.etl"
    lines, _ = dump_lines(f)
    want = [line for _, line in sorted(lines.items())
            if line.get("provider_name") == "Microsoft-Windows-Kernel-Process"
            and line.get("event_name") == "ProcessStart"]
    assert want, "tx_Process.etl has ProcessStart events"
    df = (spark.read.format("etl")
          .option("event", "Microsoft-Windows-Kernel-Process/ProcessStart").load(str(f)))
    types = dict(df.dtypes)
    props = list(want[0]["properties"])
    assert all(p in types for p in props), (props, df.columns)
    assert types["ProcessID"] == "bigint" and types["ImageName"] == "string"
    rows = df.orderBy("timestamp").collect()
    assert len(rows) == len(want)
    for r, line in zip(rows, want):
        assert r["pid"] == line["pid"] and r["id"] == line["id"]
        for p, v in line["properties"].items():
            got = r[p]
            if isinstance(v, str) and v.startswith("0x") and isinstance(got, int):
                v = int(v, 16)
            elif hasattr(got, "isoformat"):
                got = got.astimezone(__import__("datetime").timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
                v = v[:19]
            assert got == v, (p, got, v)



def test_spark_reads_the_exported_parquet(spark, tmp_path):
    """Spark's own Parquet reader (parquet-mr, not DuckDB) reads the dataset `etwkit export` writes
    with etwkit's Parquet writer: per-provider counts equal `stats`, each file's record indexes
    (delta-encoded) are 0..n-1, names, keywords and times read back as the dump has them, and a
    typed table's values equal the dump. Spark has no nanosecond timestamps: with
    spark.sql.legacy.parquet.nanosAsLong it reads timestamp[ns] columns as nanoseconds (bigint)."""
    d = samples_dir()
    files = [d / "perfview_net.4.5.x86.etl", d / "tx_Process.etl"]
    out = tmp_path / "ds"
    subprocess.run([cli(), "export", "-o", str(out)] + [str(f) for f in files], check=True,
                   stdout=subprocess.DEVNULL)
    spark.conf.set("spark.sql.legacy.parquet.nanosAsLong", "true")
    ev = spark.read.parquet(str(out / "events.parquet"))
    assert dict(ev.dtypes)["timestamp"] == "bigint"
    got = {(os.path.basename(r["file"]), r["provider"]): r["count"]
           for r in ev.groupBy("file", "provider").count().collect()}
    assert got == {(f.name, p): n for f in files for p, n in stats(f)["providers"].items()}
    for f in files:
        n = stats(f)["records"]
        rec = ev.where(ev.file.endswith(f.name)).select("record")
        lo, hi, distinct = rec.selectExpr("min(record)", "max(record)",
                                          "count(DISTINCT record)").collect()[0]
        assert (lo, hi, distinct) == (0, n - 1, n), f.name
    lines, _ = dump_lines(files[1])
    rows = ev.where(ev.file.endswith(files[1].name)).orderBy("record").collect()
    assert len(rows) == len(lines)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    for r in rows:
        line = lines[r["record"]]
        assert r["provider_name"] == line.get("provider_name")
        assert r["event_name"] == line.get("event_name")
        # keywords: uint64, which Spark reads as decimal(20,0); the dump prints them as hex.
        assert int(r["keywords"]) == int(line["keywords"], 16)
        t = epoch + datetime.timedelta(microseconds=r["timestamp"] // 1000)
        want = line["timestamp"]  # 2010-10-29T19:07:49.6596362Z: 100 ns ticks
        assert t.strftime("%Y-%m-%dT%H:%M:%S.%f") == want[:26], (r["timestamp"], want)
        assert r["timestamp"] % 1000 == int(want[26:-1] or 0) * 100
    typed = spark.read.parquet(
        str(out / "Microsoft-Windows-Kernel-Process" / "ProcessStart.parquet"))
    want = [line for _, line in sorted(lines.items())
            if line.get("provider_name") == "Microsoft-Windows-Kernel-Process"
            and line.get("event_name") == "ProcessStart"]
    rows = typed.where(typed.file.endswith(files[1].name)).orderBy("record").collect()
    assert len(rows) == len(want) > 0
    for r, line in zip(rows, want):
        assert r["ProcessID"] == line["properties"]["ProcessID"]
        assert r["ImageName"] == line["properties"]["ImageName"]


def test_a_file_that_is_no_trace_fails_the_query_unless_ignored(spark, tmp_path):
    good = samples_dir() / "tx_Process.etl"
    bad = tmp_path / "notes.etl"
    bad.write_text("not a trace\n")
    paths = f"{good},{bad}"
    # By default the query fails, naming the file.
    with pytest.raises(Exception) as e:
        spark.read.format("etl").load(paths).count()
    assert "notes.etl" in str(e.value)
    # ignoreCorruptFiles (any case, as Spark's options): the file is passed over, the rest read.
    df = spark.read.format("etl").option("IgnoreCorruptFiles", "true").load(paths)
    assert df.rdd.getNumPartitions() == 2
    assert df.count() == stats(good)["records"]
    lines, _ = dump_lines(good)
    starts = sum(1 for line in lines.values()
                 if line.get("provider_name") == "Microsoft-Windows-Kernel-Process"
                 and line.get("event_name") == "ProcessStart")
    event = "Microsoft-Windows-Kernel-Process/ProcessStart"
    with pytest.raises(Exception) as e:
        spark.read.format("etl").option("event", event).load(f"{bad},{good}").count()
    assert "notes.etl" in str(e.value)
    typed = (spark.read.format("etl").option("ignoreCorruptFiles", "true").option("event", event)
             .load(f"{bad},{good}"))
    assert "ProcessID" in typed.columns
    assert typed.count() == starts > 0
    with pytest.raises(Exception) as e:
        spark.read.format("etl").option("ignoreCorruptFiles", "maybe").load(paths).count()
    assert "ignoreCorruptFiles" in str(e.value)
