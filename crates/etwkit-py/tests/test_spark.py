"""The Spark data source (etwkit.spark) in local mode with two executor threads: every ../shared
sample read through spark.read.format("etl"), counts per provider equal `etwkit stats` summed over
the files; filters; one event type's typed columns equal `etwkit dump --format json`."""

import json
import os
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
