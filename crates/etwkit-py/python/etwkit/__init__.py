"""etwkit: Event Tracing for Windows on every OS.

* ``etwkit.etw`` is PythonForWindows' ``windows.system.etw`` (an :class:`EtwManager`): ``sessions``,
  ``providers`` and ``open_trace(name=None, logfile=None, guid=None)`` giving an :class:`EtwTrace`
  with ``enable``, ``enable_ex``, ``start``, ``stop``, ``flush``, ``exists`` and ``process``. Live
  tracing runs on Linux (tracefs, as root) now; on Windows when etwkit's ETW backend lands.
* ``etwkit.read(path, ...)`` iterates the decoded events of an ETL file on any OS, and turns them into a
  pyarrow Table (``.to_arrow()``) or a pandas DataFrame (``.to_pandas()``).
* ``etwkit.heap_trace(pids, logfile=...)`` traces the heap of running processes (Linux, root), and
  ``etwkit.heap_report(path)`` is the leak report of a trace with heap-provider events.
* ``etwkit.net_report(*paths)`` is one row per socket (who, to whom, how much, how long, what failed)
  from the Microsoft-Windows-Winsock-AFD events of ETL files, Windows-written or etwkit's own.
* ``etwkit.cpu_report(path, pids=None, begin=None, end=None)`` is the CPU sampling profile of a
  kernel trace (per process, module and stack), as ``etwkit cpu --format json`` gives it.
* ``etwkit.pcap(path, output, events=False)`` writes the packets of a PktMon or NDIS-PacketCapture
  (``netsh trace ... capture=yes``) trace as a pcapng file for Wireshark, as ``etwkit pcap`` does.
"""

from ._etwkit import (  # noqa: F401
    EtwError,
    EtwManager,
    EtwTrace,
    EventRecord,
    EventTraceProperties,
    NotEtlError,
    Reader,
    TraceProvider,
    UnknownProviderError,
    __version__,
    cpu_report,
    heap_report,
    net_report,
    pcap,
    read,
)

#: The ETW manager, as ``windows.system.etw`` in PythonForWindows.
etw = EtwManager()

# ETW trace levels.
TRACE_LEVEL_CRITICAL = 1
TRACE_LEVEL_ERROR = 2
TRACE_LEVEL_WARNING = 3
TRACE_LEVEL_INFORMATION = 4
TRACE_LEVEL_VERBOSE = 5

__all__ = [
    "EtwError",
    "EtwManager",
    "EtwTrace",
    "EventRecord",
    "EventTraceProperties",
    "NotEtlError",
    "Reader",
    "TraceProvider",
    "UnknownProviderError",
    "cpu_report",
    "etw",
    "heap_report",
    "heap_trace",
    "net_report",
    "pcap",
    "read",
]


def heap_trace(pids, logfile=None, stack_event_ids=(33, 34), name=None):
    """A started heap trace of running processes: ``etw.heap_trace(...)`` (see EtwManager.heap_trace)."""
    return etw.heap_trace(list(pids), logfile, list(stack_event_ids), name)
