#!/usr/bin/env python3
"""Speed of the etwkit Python package against dissect.etl on the same file, in the same run.

    python bench_read.py [FILE] [--cli PATH_TO_ETWKIT]

1. Iteration with decoded properties: ``for ev in etwkit.read(FILE): ev.properties`` against
   dissect.etl's ``for rec in ETL(fh): rec.event.event_values()`` (goal: etwkit >= 50x faster).
2. ``etwkit.read(FILE).to_arrow()`` against ``etwkit dump --format json FILE > /dev/null`` (goal:
   within 2x of the CLI's time).

Needs etwkit (a release build: ``pip install ./crates/etwkit-py``), pyarrow and dissect-etl in the
interpreter; bench.sh next to this script sets that up. Best of 3 runs for etwkit, 1 for dissect.etl.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import etwkit

ROOT = Path(__file__).resolve().parents[3]


def best(f, n=3):
    times = []
    out = None
    for _ in range(n):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def etwkit_iter(path):
    n = 0
    props = 0
    for ev in etwkit.read(path):
        props += len(ev.properties)
        n += 1
    return n, props


def dissect_iter(path):
    from dissect.etl import ETL

    n = 0
    props = 0
    failed = 0
    with open(path, "rb") as fh:
        for rec in ETL(fh):
            n += 1
            try:
                props += len(rec.event.event_values())
            except Exception:
                failed += 1
    return n, props, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(ROOT.parent / "shared/etl-samples/perfview_net.4.5.x86.etl"))
    ap.add_argument("--cli", default=str(ROOT / "target/release/etwkit"))
    a = ap.parse_args()
    path = a.file
    if not os.path.isfile(path):
        sys.exit(f"bench_read: no file {path} (pass one, or clone next to ../shared)")
    size = os.path.getsize(path) / 1e6
    print(f"file: {path} ({size:.1f} MB)")

    t_ours, (n, props) = best(lambda: etwkit_iter(path))
    print(f"etwkit.read + .properties:    {t_ours:7.3f} s  {size / t_ours:7.1f} MB/s  {n} events, {props} values")
    t_dis, (dn, dprops, dfail) = best(lambda: dissect_iter(path), 1)
    print(f"dissect.etl + event_values(): {t_dis:7.3f} s  {size / t_dis:7.2f} MB/s  {dn} records, {dprops} values, {dfail} failed")
    print(f"ratio: etwkit iteration is {t_dis / t_ours:.0f}x dissect.etl (goal >= 50x)")

    t_arrow, table = best(lambda: etwkit.read(path).to_arrow())
    t_dump, _ = best(lambda: subprocess.run([a.cli, "dump", "--format", "json", path],
                                            stdout=subprocess.DEVNULL, check=True))
    print(f"to_arrow():                   {t_arrow:7.3f} s  {size / t_arrow:7.1f} MB/s  {table.num_rows} rows")
    print(f"etwkit dump --format json:    {t_dump:7.3f} s  {size / t_dump:7.1f} MB/s  (to /dev/null, {a.cli})")
    print(f"ratio: to_arrow takes {t_arrow / t_dump:.2f}x the CLI's JSON dump (goal <= 2x)")


if __name__ == "__main__":
    main()
