"""Type stubs of etwkit: PythonForWindows' ETW API on every OS, and fast decoded ETL reading."""

import datetime
import os
from typing import Any, Callable, Iterable, Iterator, List, Optional, Union

__version__: str

TRACE_LEVEL_CRITICAL: int
TRACE_LEVEL_ERROR: int
TRACE_LEVEL_WARNING: int
TRACE_LEVEL_INFORMATION: int
TRACE_LEVEL_VERBOSE: int

_Path = Union[str, "os.PathLike[str]"]
#: FILETIME int, seconds from the trace start (float, files only), RFC 3339 string, or aware datetime.
_TimeBound = Union[int, float, str, datetime.datetime, None]

class NotEtlError(ValueError):
    """The file is not an ETL trace (empty, or its header is not ETW's)."""

class EtwError(OSError):
    """A live tracing operation failed (tracefs, the session, the kernel)."""

class UnknownProviderError(ValueError):
    """No provider has this name or GUID."""

class EventRecord:
    """One event: PythonForWindows' attributes plus etwkit's names and decoded properties."""

    @property
    def guid(self) -> str:
        """The provider GUID, lowercase without braces."""
    @property
    def id(self) -> int:
        """The event id (EVENT_DESCRIPTOR.Id; the hook type of classic kernel records)."""
    @property
    def version(self) -> int: ...
    @property
    def channel(self) -> int: ...
    @property
    def level(self) -> int: ...
    @property
    def opcode(self) -> int: ...
    @property
    def task(self) -> int: ...
    @property
    def keywords(self) -> int: ...
    @property
    def pid(self) -> Optional[int]:
        """The process id, or None when the record has none (0xFFFFFFFF)."""
    @property
    def tid(self) -> Optional[int]:
        """The thread id, or None when the record has none (0xFFFFFFFF)."""
    @property
    def cpu(self) -> int: ...
    @property
    def timestamp(self) -> datetime.datetime:
        """When the event happened: a timezone-aware UTC datetime (microsecond precision)."""
    @property
    def filetime(self) -> int:
        """The timestamp in 100 ns units since 1601-01-01 UTC (FILETIME), full precision."""
    @property
    def activity_id(self) -> str: ...
    @property
    def header_type(self) -> str:
        """The record's header type (e.g. ``EVENT_HEADER64``, ``SYSTEM32``)."""
    @property
    def provider_name(self) -> Optional[str]: ...
    @property
    def event_name(self) -> Optional[str]: ...
    @property
    def task_name(self) -> Optional[str]: ...
    @property
    def opcode_name(self) -> Optional[str]: ...
    @property
    def process_name(self) -> Optional[str]:
        """The image name of the event's process: in a file by the trace's kernel Process events
        (``"PerfView.exe"``); for a live event (``EtwTrace.process`` on a realtime trace) the
        process's name as the system gives it when the event is read, as ``etwkit trace`` prints
        it (Linux: ``/proc/PID/comm``, else tracefs' ``saved_cmdlines`` for a process gone,
        ``swapper`` for pid 0; Windows: the image's file name), asked once a second per pid, so a
        rename or ``exec`` shows within a second. None when nothing names it."""
    @property
    def user_data(self) -> bytes:
        """The raw payload (UserData), as PythonForWindows gives it."""
    @property
    def properties(self) -> dict[str, Any]:
        """Decoded properties in schema order: int, str, bytes, bool, float, datetime, lists, dicts.

        Integers stay ints (hex, pointers, status codes); GUIDs and IP addresses are str; a value
        with a value map is its name. A new dict on each access."""
    @property
    def decoded(self) -> bool:
        """Whether a layout was found for the payload."""
    @property
    def undecoded(self) -> Optional[str]:
        """Why the payload is not (or only partly) decoded; None when it is."""
    @property
    def stack(self) -> Optional[List[int]]:
        """Return addresses of the event's stack, innermost first; None without a stack."""

class Reader:
    """The selected events of an ETL file; iterate it, or convert it to Arrow / pandas."""

    def __iter__(self) -> Iterator[EventRecord]: ...
    def __next__(self) -> EventRecord: ...
    @property
    def path(self) -> str: ...
    @property
    def summary(self) -> Optional[dict[str, Any]]:
        """Counts of the finished iteration (records, buffers, bad_buffers, bad_records, issues)."""
    def to_arrow(self) -> Any:
        """A ``pyarrow.Table``: timestamp (ns, UTC), provider, provider_name, event_name, task_name,
        opcode_name, id, version, level, opcode, task, keywords, channel, pid, process_name, tid, cpu,
        activity_id, header_type, and properties as JSON text (as ``etwkit dump --format json``)."""
    def to_pandas(self) -> Any:
        """``to_arrow().to_pandas()``."""

def read(
    path: _Path,
    providers: Union[str, Iterable[str], None] = None,
    ids: Union[int, Iterable[int], None] = None,
    pids: Union[int, Iterable[int], None] = None,
    begin: _TimeBound = None,
    end: _TimeBound = None,
) -> Reader:
    """Opens an ETL file (OSError if it cannot be read, NotEtlError if it is no ETL file) and returns
    its decoded events in time order, selected by provider names/GUIDs, event ids, pids and time."""

def heap_report(path: _Path, top: int = 10, frames: int = 8) -> dict[str, Any]:
    """The heap leak report of a trace with heap-provider events (as ``etwkit heap --format json``)."""

def net_report(*paths: _Path) -> dict[str, Any]:
    """One row per socket from the Winsock-AFD events of the files (as ``etwkit net --format json``):
    ``sockets`` (pid, process, protocol, local/remote address, bytes and operations sent and
    received, times, outcome, failures with codes and names), ``afd_events``, ``notes``."""

def pcap(path: _Path, output: _Path, events: bool = False) -> dict[str, Any]:
    """Writes the packets of a PktMon or NDIS-PacketCapture trace to ``output`` as pcapng (whole or
    not at all; with ``events``, the trace's other events as systemd journal entries among them), as
    ``etwkit pcap`` does; returns ``packets``, ``interfaces``, ``events`` and each converter's counts
    (``pktmon``, ``ndis``)."""

def cpu_report(
    path: _Path,
    pids: Optional[Iterable[int]] = None,
    begin: _TimeBound = None,
    end: _TimeBound = None,
    top: int = 10,
    frames: int = 16,
) -> dict[str, Any]:
    """The CPU sampling profile of a trace's kernel SampledProfile events (as ``etwkit cpu --format
    json``): ``total_samples``, ``processes``, ``modules_exclusive``/``modules_inclusive``, the
    ``top`` stacks with ``frames`` frames each (leaf first), the sampling interval and losses."""

def heap_trace(
    pids: Iterable[int],
    logfile: Optional[_Path] = None,
    stack_event_ids: Iterable[int] = (33, 34),
    name: Optional[str] = None,
) -> "EtwTrace":
    """A started heap trace of running processes (``etw.heap_trace``)."""

class EventTraceProperties:
    """A running session (PythonForWindows' EventTraceProperties) plus etwkit's details."""

    name: str
    guid: Optional[str]
    id: int
    logfile: Optional[str]
    instance: str
    owner_pid: Optional[int]
    etwkit: bool
    tracing_on: bool
    enabled_events: int
    buffer_size_kb: int

class TraceProvider:
    """A provider that can be enabled."""

    name: str
    guid: str
    kind: str
    events: int

class EtwTrace:
    """PythonForWindows' EtwTrace: one session and the providers it enables."""

    name: str
    logfile: Optional[str]
    guid: Optional[str]
    def enable(self, guid: Any, flags: int = 255, level: int = 255) -> None:
        """Enables a provider (GUID or name); ``flags`` are the keywords to match (MatchAnyKeyword).
        On a started realtime trace the session is restarted with the provider added."""
    def enable_ex(
        self,
        guid: Any,
        flags: int = 255,
        level: int = 255,
        any_keyword: int = 0xFFFFFFFF,
        all_keyword: int = 0,
        enable_property: int = 0,
    ) -> None:
        """Enables a provider with keyword masks; ``enable_property`` takes EVENT_ENABLE_PROPERTY_*
        (0x4: stacks). ``flags`` is unused, as in PythonForWindows."""
    def start(self, flags: int = 0, mode: int = 0) -> None:
        """Starts the session (UnknownProviderError for a provider nobody knows, PermissionError
        without root on Linux)."""
    def add_pid(self, pid: int) -> None:
        """Restricts the trace to a process, its threads and children."""
    def stop(self, soft: bool = False) -> dict[str, Any]:
        """Stops the session; with ``soft`` a missing session is not an error. Returns a summary
        (events_delivered, raw_records, events_lost, lost_detail, issues)."""
    def flush(self) -> None: ...
    def exists(self) -> bool:
        """Whether the session exists."""
    def process(
        self,
        callback: Callable[..., Any],
        begin: _TimeBound = None,
        end: _TimeBound = None,
        context: Any = None,
    ) -> None:
        """Calls ``callback(event)`` (``callback(event, context)`` with a context) for each event.

        Realtime: blocks until the trace is stopped from another thread, releasing the GIL; Ctrl-C
        stops the trace and raises KeyboardInterrupt. Logfile trace not started: reads the file. An
        exception raised by the callback stops processing and propagates."""
    def __enter__(self) -> "EtwTrace": ...
    def __exit__(self, *args: Any) -> bool: ...

class EtwManager:
    """PythonForWindows' ``windows.system.etw``."""

    def __init__(self) -> None: ...
    @property
    def sessions(self) -> List[EventTraceProperties]: ...
    @property
    def providers(self) -> List[TraceProvider]: ...
    def open_trace(
        self,
        name: Optional[str] = None,
        logfile: Optional[_Path] = None,
        guid: Any = None,
    ) -> EtwTrace:
        """A trace handle; realtime when ``logfile`` is None. Nothing happens until start()/process()."""
    def heap_trace(
        self,
        pids: List[int],
        logfile: Optional[_Path] = None,
        stack_event_ids: List[int] = [33, 34],
        name: Optional[str] = None,
    ) -> EtwTrace:
        """A started heap trace of running processes (every thread): HeapTraceProvider Alloc (33),
        ReAlloc (34), Free (36) events, stacks on ``stack_event_ids``; with ``logfile`` they also go to
        that ETL file, which ``heap_report()`` turns into the leak report."""

#: The manager, as ``windows.system.etw``.
etw: EtwManager
