"""ETL files as a Spark table: a PySpark data source (Spark 4's Python Data Source API).

    from etwkit.spark import register
    register(spark)
    df = spark.read.format("etl").load("/data/traces/*.etl")
    df.groupBy("provider_name").count().show()

Each file (a glob, a directory, or a comma-separated list of either) is one input partition: Spark
hands the files to its executors, each decodes its files with etwkit (the files must be readable
where the executors run: decode where the files are) and gives Spark Arrow record batches.

Columns: ``file``, ``timestamp`` (UTC, microseconds as Spark keeps them), ``provider`` (GUID),
``provider_name``, ``event_name``, ``task_name``, ``opcode_name``, ``id``, ``version``, ``level``,
``opcode``, ``task``, ``keywords`` (the 64 keyword bits as a signed long), ``channel``, ``pid``,
``process_name``, ``tid``, ``cpu``, ``activity_id``, ``header_type`` and ``properties`` (JSON text, as
``etwkit dump --format json``).

Options:

- ``providers``: provider names or GUIDs, comma-separated; ``ids``: event ids; ``pids``: process ids
  (what ``etwkit.read`` selects by);
- ``event``: ``PROVIDER/EVENT`` (provider name or GUID, event name) — the rows of that event type
  only, with one typed column per decoded property after the common columns instead of
  ``properties``. The property columns and their types come from the first file that has the event
  (the driver reads it while planning); a later value that does not fit its column is null.
- ``ignoreCorruptFiles``: ``true`` to pass over a file that is no ETL trace or cannot be opened
  (as Spark's own file sources do), with a warning naming it; by default such a file fails the
  query with etwkit's one-sentence error. A truncated or partly corrupt trace is not skipped:
  everything readable in it is read (and warned about), as ``etwkit.read`` does.
"""

import datetime
import glob
import json
import os
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

import etwkit

try:  # Spark 4+
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import StructType
except ImportError as _e:  # pragma: no cover - without pyspark the module only says why
    raise ImportError("etwkit.spark needs pyspark 4 or later (pip install pyspark)") from _e

#: Rows per record batch handed to Spark.
BATCH_ROWS = 65536

_COMMON_DDL = (
    "file STRING, timestamp TIMESTAMP, provider STRING, provider_name STRING, event_name STRING, "
    "task_name STRING, opcode_name STRING, id INT, version SMALLINT, level SMALLINT, opcode SMALLINT, "
    "task INT, keywords BIGINT, channel SMALLINT, pid BIGINT, process_name STRING, tid BIGINT, cpu INT, "
    "activity_id STRING, header_type STRING"
)
_EVENTS_DDL = _COMMON_DDL + ", properties STRING"

# Arrow types of the common columns as Spark takes them (no unsigned types; microsecond timestamps).
_COMMON_ARROW = [
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("provider", pa.string()),
    ("provider_name", pa.string()),
    ("event_name", pa.string()),
    ("task_name", pa.string()),
    ("opcode_name", pa.string()),
    ("id", pa.int32()),
    ("version", pa.int16()),
    ("level", pa.int16()),
    ("opcode", pa.int16()),
    ("task", pa.int32()),
    ("keywords", pa.int64()),
    ("channel", pa.int16()),
    ("pid", pa.int64()),
    ("process_name", pa.string()),
    ("tid", pa.int64()),
    ("cpu", pa.int32()),
    ("activity_id", pa.string()),
    ("header_type", pa.string()),
]


def expand_paths(path: str) -> List[str]:
    """The ETL files a load path names: comma-separated globs, files or directories (*.etl in
    them), sorted, each once."""
    out: List[str] = []
    for part in (p.strip() for p in path.split(",")):
        if not part:
            continue
        if os.path.isdir(part):
            hits = sorted(glob.glob(os.path.join(part, "*.etl")))
        else:
            hits = sorted(glob.glob(part)) or [part]  # a missing file fails on its executor
        for h in hits:
            if h not in out:
                out.append(h)
    return out


def _list(opt: Optional[str], conv=str) -> Optional[List[Any]]:
    if opt is None or opt.strip() == "":
        return None
    return [conv(x.strip()) for x in opt.split(",") if x.strip()]


def _int(s: str) -> int:
    return int(s, 0)


def _common_arrays(file: str, t: pa.Table) -> List[pa.Array]:
    """The common columns of a to_arrow() table, as Spark wants them."""
    cols = [pa.array([file] * t.num_rows, pa.string())]
    for name, ty in _COMMON_ARROW:
        c = t.column(name)
        if name in ("keywords", "timestamp"):
            # The 64 keyword bits as a signed long (Spark has no unsigned types); timestamps cut
            # to Spark's microseconds.
            c = pc.cast(c, ty, safe=False)
        else:
            c = pc.cast(c, ty)
        cols.append(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c)
    return cols


# ---------------------------------------------------------------------------------------------
# Typed columns of one event type.

def _spark_type(v: Any) -> Optional[str]:
    """The Spark SQL type of a decoded property value (None: nothing to go by)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT"
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, str):
        return "STRING"
    if isinstance(v, bytes):
        return "BINARY"
    if isinstance(v, datetime.datetime):
        return "TIMESTAMP"
    if isinstance(v, list):
        inner = next((t for t in map(_spark_type, v) if t is not None), None)
        if inner is None:
            return None
        if inner.startswith("ARRAY") or inner == "JSON":
            return "JSON"
        return f"ARRAY<{inner}>"
    return "JSON"  # structures


_ARROW = {"BOOLEAN": pa.bool_(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "STRING": pa.string(),
          "BINARY": pa.binary(), "TIMESTAMP": pa.timestamp("us", tz="UTC"), "JSON": pa.string()}


def _arrow_type(t: str) -> pa.DataType:
    if t.startswith("ARRAY<"):
        return pa.list_(_arrow_type(t[6:-1]))
    return _ARROW[t]


def _fits(t: str, v: Any) -> bool:
    if v is None:
        return True
    if t.startswith("ARRAY<"):
        return isinstance(v, list) and all(_fits(t[6:-1], x) for x in v)
    if t == "JSON":
        return True
    if t == "BIGINT":
        return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
    if t == "DOUBLE":
        return isinstance(v, float)
    return _spark_type(v) == t


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    return str(v)


def _option(options: Dict[str, str], name: str, default: Optional[str] = None) -> Optional[str]:
    """A reader option by name, in any case (Spark's option names are case-insensitive)."""
    for k, v in options.items():
        if k.lower() == name.lower():
            return v
    return default


def _ignore_corrupt(options: Dict[str, str]) -> bool:
    v = _option(options, "ignoreCorruptFiles", "false")
    if v.lower() not in ("true", "false"):
        raise ValueError(f"option ignoreCorruptFiles={v!r}: expected true or false")
    return v.lower() == "true"


def _open(path: str, ignore_corrupt: bool, **selection: Any) -> Optional[Any]:
    """``etwkit.read(path, **selection)``; with ``ignore_corrupt``, None (and a warning) for a
    file that cannot be opened or is no ETL trace."""
    try:
        return etwkit.read(path, **selection)
    except (OSError, etwkit.NotEtlError) as e:
        if not ignore_corrupt:
            raise
        warnings.warn(f"etwkit.spark: {path} skipped (ignoreCorruptFiles): {e}", stacklevel=2)
        return None


def _split_event(event: str) -> Tuple[str, str]:
    provider, sep, name = event.rpartition("/")
    if not sep or not provider or not name:
        raise ValueError(f"option event={event!r}: expected PROVIDER/EVENT")
    return provider, name


def _matches(e: Any, provider: str, name: str) -> bool:
    return (e.provider_name == provider or e.guid == provider.lower().strip("{}")) and e.event_name == name


def _reserved() -> set:
    return {"file"} | {n for n, _ in _COMMON_ARROW}


def infer_event_columns(files: Sequence[str], event: str, sample: int = 10000,
                        ignore_corrupt: bool = False) -> List[Tuple[str, str, str]]:
    """(property, column, Spark type) of the event type `event` (PROVIDER/EVENT), from the first
    `sample` events of the first file that has it. A property named like a common column gets the
    column name ``prop_`` + its name."""
    provider, name = _split_event(event)
    found: Dict[str, Optional[str]] = {}
    for f in files:
        seen = 0
        events = _open(f, ignore_corrupt, providers=[provider])
        for e in events or ():
            if not _matches(e, provider, name):
                continue
            for k, v in e.properties.items():
                if found.get(k) is None:
                    found[k] = _spark_type(v)
            seen += 1
            if seen >= sample:
                break
        if seen:
            break
    taken = {c.lower() for c in _reserved()}
    cols = []
    for k, t in found.items():
        col = k
        while col.lower() in taken:
            col = "prop_" + col
        taken.add(col.lower())
        cols.append((k, col, t or "STRING"))
    return cols


def _ddl_name(n: str) -> str:
    return "`" + n.replace("`", "``") + "`"


# ---------------------------------------------------------------------------------------------
# The data source.

class EtlPartition(InputPartition):
    """One ETL file."""

    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


class EtlDataSource(DataSource):
    """``spark.read.format("etl")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return "etl"

    def _files(self) -> List[str]:
        path = self.options.get("path") or self.options.get("paths")
        if not path:
            raise ValueError('spark.read.format("etl") needs a path: .load("traces/*.etl")')
        if path.startswith("["):  # load([...]) passes a JSON list
            path = ",".join(json.loads(path))
        return expand_paths(path)

    def schema(self) -> str:
        event = self.options.get("event")
        if not event:
            return _EVENTS_DDL
        cols = infer_event_columns(self._files(), event, ignore_corrupt=_ignore_corrupt(self.options))
        props = ", ".join(f"{_ddl_name(c)} {'STRING' if t == 'JSON' else t}" for _, c, t in cols)
        return _COMMON_DDL + (", " + props if props else "")

    def reader(self, schema: StructType) -> "EtlReader":
        return EtlReader(self._files(), dict(self.options), schema)


class EtlReader(DataSourceReader):
    def __init__(self, files: List[str], options: Dict[str, str], schema: StructType):
        self.files = files
        self.options = options
        self.event = options.get("event")
        self.ignore_corrupt = _ignore_corrupt(options)
        self.columns = (infer_event_columns(files, self.event, ignore_corrupt=self.ignore_corrupt)
                        if self.event else None)
        self.schema = schema

    def partitions(self) -> List[InputPartition]:
        return [EtlPartition(f) for f in self.files]

    def _selection(self) -> Dict[str, Any]:
        return {
            "providers": _list(self.options.get("providers")),
            "ids": _list(self.options.get("ids"), _int),
            "pids": _list(self.options.get("pids"), _int),
        }

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        path = partition.path
        if self.columns is None:
            r = _open(path, self.ignore_corrupt, **self._selection())
            if r is None:
                return
            t = r.to_arrow()
            names = ["file"] + [n for n, _ in _COMMON_ARROW] + ["properties"]
            arrays = _common_arrays(path, t) + [t.column("properties").combine_chunks()]
            for b in pa.Table.from_arrays(arrays, names=names).to_batches(BATCH_ROWS):
                yield b
            return
        yield from self._read_typed(path)

    def _read_typed(self, path: str) -> Iterator[pa.RecordBatch]:
        provider, name = _split_event(self.event)
        sel = self._selection()
        common: Dict[str, List[Any]] = {n: [] for n in ["file"] + [n for n, _ in _COMMON_ARROW]}
        props: Dict[str, List[Any]] = {c: [] for _, c, _ in self.columns}

        def flush() -> pa.RecordBatch:
            arrays, names = [], []
            for n, ty in [("file", pa.string())] + _COMMON_ARROW:
                vals = common[n]
                if n == "keywords":
                    arrays.append(pc.cast(pa.array(vals, pa.uint64()), pa.int64(), safe=False))
                else:
                    arrays.append(pa.array(vals, ty))
                names.append(n)
                vals.clear()
            for _, c, t in self.columns:
                arrays.append(pa.array(props[c], _arrow_type(t)))
                names.append(c)
                props[c].clear()
            return pa.RecordBatch.from_arrays(arrays, names=names)

        events = _open(path, self.ignore_corrupt, **sel)
        if events is None:
            return
        n = 0
        for e in events:
            if not _matches(e, provider, name):
                continue
            ft = e.filetime
            row = {
                "file": path,
                "timestamp": (ft - 116444736000000000) // 10,
                "provider": e.guid,
                "provider_name": e.provider_name,
                "event_name": e.event_name,
                "task_name": e.task_name,
                "opcode_name": e.opcode_name,
                "id": e.id, "version": e.version, "level": e.level, "opcode": e.opcode,
                "task": e.task, "keywords": e.keywords, "channel": e.channel,
                "pid": e.pid, "process_name": e.process_name, "tid": e.tid, "cpu": e.cpu,
                "activity_id": e.activity_id, "header_type": e.header_type,
            }
            for k, v in row.items():
                common[k].append(v)
            p = e.properties
            for prop, c, t in self.columns:
                v = p.get(prop)
                if not _fits(t, v):
                    v = None  # does not fit the column's type
                elif t == "JSON" and v is not None:
                    v = json.dumps(v, default=_json_default)
                props[c].append(v)
            n += 1
            if n % BATCH_ROWS == 0:
                yield flush()
        if n % BATCH_ROWS:
            yield flush()


def register(spark: Any) -> None:
    """Makes ``spark.read.format("etl")`` available in this Spark session."""
    spark.dataSource.register(EtlDataSource)
