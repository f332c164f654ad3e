"""PythonForWindows' ETW flow against the real kernel (Linux, root, tracefs): the Winsock provider sees
a child process's socket workload; stop/exists semantics; errors; Ctrl-C; callback exceptions."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import etwkit
from conftest import require_live

AFD = "Microsoft-Windows-Winsock-AFD"
AFD_GUID = "e53c6823-7bb8-44bb-90dc-3f86090d48a6"
PAYLOAD = 1234


WORKLOAD = r"""
import json, os, socket, sys, threading
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
cli.connect(("127.0.0.1", port))
sent = cli.send(b"x" * int(sys.argv[1]))
conn, peer = srv.accept()
got = b""
while len(got) < sent:
    got += conn.recv(65536)
for s in (conn, cli, srv):
    s.close()
print(json.dumps({"server_port": port, "client_port": peer[1], "sent": sent,
                  "tid": threading.get_native_id(), "pid": os.getpid()}))
"""


def workload():
    """A child process doing loopback TCP: listen, connect, send PAYLOAD bytes, accept, receive, close.
    Returns what it did. (A session never traces its own process's threads: a child it is.)"""
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(PAYLOAD)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def name(tag):
    return f"pytest-{tag}-{os.getpid()}"


def test_pythonforwindows_flow_sees_the_winsock_events_of_a_workload():
    require_live()
    etw = etwkit.etw
    trace = etw.open_trace(name("flow"))
    assert trace.name == name("flow") and trace.logfile is None
    assert not trace.exists()
    trace.enable(AFD_GUID)
    trace.start()
    assert trace.exists()
    assert name("flow") in [s.name for s in etw.sessions]
    events, errors = [], []

    def run():
        try:
            trace.process(events.append)
        except BaseException as e:  # reported below
            errors.append(e)

    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.2)
    facts = workload()
    time.sleep(0.3)
    summary = trace.stop()
    th.join(10)
    assert not th.is_alive(), "process() did not return after stop()"
    assert not errors, errors
    assert not trace.exists()
    assert name("flow") not in [s.name for s in etw.sessions]
    assert summary["events_lost"] == 0, summary

    mine = [e for e in events if e.pid == facts["pid"]]
    assert mine, f"no AFD event of pid {facts['pid']} among {len(events)}"
    assert all(e.guid == AFD_GUID and e.provider_name == AFD for e in events)
    conn = [e for e in mine if e.id == 4 and e.properties.get("Port") == facts["server_port"]]
    assert len(conn) == 1, [repr(e) for e in mine]
    conn = conn[0]
    assert conn.properties["Address"] == "127.0.0.1"
    assert conn.tid == facts["tid"]
    assert conn.event_name and conn.decoded
    ep = conn.properties["Endpoint"]
    assert isinstance(ep, int)
    client = [e for e in mine if e.properties.get("Endpoint") == ep]
    ids = [e.id for e in client]
    for want in (1, 4, 24, 13):  # create, connect, send completed, close
        assert want in ids, f"id {want} missing from the client socket's events {ids}"
    create = next(e for e in client if e.id == 1)
    assert (create.properties["AddressFamily"], create.properties["SocketType"],
            create.properties["Protocol"]) == (2, 1, 6)
    assert sum(e.properties["BufferLength"] for e in client if e.id == 24) == facts["sent"]
    assert ids.index(1) < ids.index(4) < ids.index(13)
    acc = [e for e in mine if e.id == 15 and e.properties.get("Port") == facts["client_port"]]
    assert len(acc) == 1 and acc[0].properties["Address"] == "127.0.0.1"
    assert all(a.filetime <= b.filetime for a, b in zip(events, events[1:]))


def test_enable_after_start_as_pythonforwindows_does():
    require_live()
    trace = etwkit.etw.open_trace(name("late"))
    trace.start()
    trace.enable(AFD)  # restarts the session with the provider
    assert trace.exists()
    events = []
    th = threading.Thread(target=trace.process, args=(events.append,))
    th.start()
    time.sleep(0.2)
    facts = workload()
    time.sleep(0.3)
    trace.stop()
    th.join(10)
    assert any(e.id == 4 and e.pid == facts["pid"] and e.properties["Port"] == facts["server_port"]
               for e in events)


def test_soft_stop_of_a_missing_trace_is_not_an_error():
    require_live()
    trace = etwkit.etw.open_trace(name("missing"))
    assert not trace.exists()
    assert trace.stop(soft=True)["events_delivered"] == 0
    with pytest.raises(etwkit.EtwError) as e:
        trace.stop()
    assert "does not exist" in str(e.value)
    assert not trace.exists()


def test_unknown_provider_raises_value_error():
    require_live()
    trace = etwkit.etw.open_trace(name("unknown"))
    trace.enable("No-Such-Provider-For-Pytest")
    with pytest.raises(etwkit.UnknownProviderError) as e:
        trace.start()
    assert isinstance(e.value, ValueError)
    assert "No-Such-Provider-For-Pytest" in str(e.value) and "\n" not in str(e.value)
    assert not trace.exists()


def test_process_before_start_is_an_error():
    require_live()
    trace = etwkit.etw.open_trace(name("notstarted"))
    with pytest.raises(etwkit.EtwError) as e:
        trace.process(print)
    assert "not started" in str(e.value)


def test_callback_exception_stops_processing_and_propagates():
    require_live()
    trace = etwkit.etw.open_trace(name("boom"))
    trace.enable(AFD)
    trace.start()

    class Boom(Exception):
        pass

    seen = []

    def cb(ev):
        seen.append(ev)
        raise Boom(f"event {ev.id}")

    t = threading.Timer(0.2, workload)
    t.start()
    try:
        with pytest.raises(Boom):
            trace.process(cb)
    finally:
        t.join()
        trace.stop(soft=True)
    assert len(seen) == 1
    assert not trace.exists()


def test_ctrl_c_stops_the_trace_and_raises_keyboard_interrupt():
    require_live()
    trace = etwkit.etw.open_trace(name("sigint"))
    trace.enable(AFD)
    trace.start()
    assert trace.exists()
    # Python's own Ctrl-C handler, even where SIGINT came in ignored (a job started in the
    # background by a non-interactive shell inherits SIG_IGN, and Python then installs none).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    t = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    t.start()
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            trace.process(lambda ev: None)  # no event needed: the wait itself is interruptible
    finally:
        t.join()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - began < 5
    assert not trace.exists(), "Ctrl-C must stop the session"


def test_logfile_trace_writes_what_it_delivers(tmp_path):
    require_live()
    etl = tmp_path / "live.etl"
    trace = etwkit.etw.open_trace(name("logfile"), logfile=str(etl))
    trace.enable(AFD)
    trace.start()
    delivered = []
    th = threading.Thread(target=trace.process, args=(delivered.append,))
    th.start()
    time.sleep(0.2)
    facts = workload()
    time.sleep(0.3)
    trace.stop()
    th.join(10)
    # The file holds what process() delivered, and what was still buffered at stop().
    back = [e for e in etwkit.read(etl) if e.guid == AFD_GUID]
    key = lambda e: (e.filetime, e.id, e.pid, e.tid, e.user_data)
    assert [key(e) for e in delivered] == [key(e) for e in back[: len(delivered)]]
    conn = [e for e in back if e.id == 4 and e.pid == facts["pid"]]
    assert len(conn) == 1 and conn[0].properties["Port"] == facts["server_port"]
    # Read back as a logfile trace, PythonForWindows style (the trace is stopped: process() reads).
    again = []
    trace.process(again.append)
    assert [key(e) for e in again if e.guid == AFD_GUID] == [key(e) for e in back]


NAMED = r"""
import json, socket, sys

def comm(name):
    with open("/proc/self/comm", "w") as f:
        f.write(name)

def tcp():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.connect(("127.0.0.1", port))
    conn, _ = srv.accept()
    for s in (conn, cli, srv):
        s.close()
    return port

comm(sys.argv[1])
print(json.dumps({"port": tcp()}), flush=True)
sys.stdin.readline()  # the test has seen the first connect
comm(sys.argv[2])
print("renamed", flush=True)
sys.stdin.readline()  # over a second later
print(json.dumps({"port": tcp()}), flush=True)
sys.stdin.read()  # alive until the test is done: its name comes from /proc/PID/comm
"""

FIRST, SECOND = "pytest-named", "pytest-renamed"


def test_live_events_carry_the_process_name_asked_again_after_a_second():
    require_live()
    trace = etwkit.etw.open_trace(name("names"))
    trace.enable(AFD)
    trace.start()
    events = []
    th = threading.Thread(target=trace.process, args=(events.append,))
    th.start()
    child = subprocess.Popen([sys.executable, "-c", NAMED, FIRST, SECOND], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)

    def connect(port):
        """The child's connect event to `port`, once process() has delivered it."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for e in list(events):
                if e.pid == child.pid and e.id == 4 and e.properties.get("Port") == port:
                    return e
            time.sleep(0.05)
        pytest.fail(f"no connect of pid {child.pid} to port {port} among {len(events)} events")

    try:
        first = connect(json.loads(child.stdout.readline())["port"])
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "renamed\n"
        # The cached name was asked before the rename: past a second the next event asks again.
        time.sleep(1.2)
        child.stdin.write("\n")
        child.stdin.flush()
        second = connect(json.loads(child.stdout.readline())["port"])
    finally:
        trace.stop(soft=True)
        th.join(10)
        child.stdin.close()
        child.wait(10)
    assert not th.is_alive(), "process() did not return after stop()"

    assert first.process_name == FIRST, repr(first)
    assert second.process_name == SECOND, repr(second)
    mine = [e.process_name for e in events if e.pid == child.pid]
    # Every event of the child named, the first name up to the rename and the second after it.
    assert set(mine) == {FIRST, SECOND}, mine
    assert mine == sorted(mine, key=lambda n: n == SECOND), mine
