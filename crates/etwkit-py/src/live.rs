//! PythonForWindows' `windows.system.etw` surface over etwkit's live API: `EtwManager` (`sessions`,
//! `providers`, `open_trace`) and `EtwTrace` (`enable`, `enable_ex`, `start`, `stop`, `flush`,
//! `exists`, `process`).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use etwkit::decode::Decoder;
use etwkit::live::{Etw, LiveError, ProcessNames, StopHandle, Trace, TraceSummary};
use etwkit::schema::Registry;
use etwkit::Guid;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{self, EtwError};
use crate::reader::{read_events, time_bound, warn_issues, Selection};
use crate::record::{OwnedEvent, PyEventRecord};

/// A session as PythonForWindows' `EventTraceProperties` shows it, plus what etwkit knows.
#[pyclass(frozen, get_all, module = "etwkit", name = "EventTraceProperties")]
pub struct TraceProperties {
    name: String,
    /// Sessions on Linux have no GUID: None.
    guid: Option<String>,
    /// The session's position in `etw.sessions` (Linux has no logger ids).
    id: usize,
    logfile: Option<PathBuf>,
    /// The backend's own name for it (the tracefs instance).
    instance: String,
    owner_pid: Option<u32>,
    /// Created by etwkit.
    etwkit: bool,
    tracing_on: bool,
    enabled_events: usize,
    buffer_size_kb: u64,
}

#[pymethods]
impl TraceProperties {
    fn __repr__(&self) -> String {
        format!(
            "<EventTraceProperties name={:?} id={} instance={:?}>",
            self.name, self.id, self.instance
        )
    }
}

/// A provider that can be enabled.
#[pyclass(frozen, get_all, module = "etwkit", name = "TraceProvider")]
pub struct TraceProvider {
    name: String,
    guid: String,
    /// Where its events come from (e.g. `tracepoints`, `winsock correlator`).
    kind: String,
    events: usize,
}

#[pymethods]
impl TraceProvider {
    fn __repr__(&self) -> String {
        format!("<TraceProvider {} {{{}}}>", self.name, self.guid)
    }
}

fn parse_guid(v: &Bound<'_, PyAny>) -> PyResult<Guid> {
    let s: String = v.str()?.extract()?;
    s.parse::<Guid>()
        .map_err(|_| PyValueError::new_err(format!("{s:?} is not a GUID")))
}

/// PythonForWindows' `EtwManager` (`windows.system.etw`): the sessions, the providers, and traces.
#[pyclass(frozen, module = "etwkit", name = "EtwManager")]
pub struct EtwManager {
    etw: Etw,
}

#[pymethods]
impl EtwManager {
    #[new]
    fn new() -> Self {
        EtwManager { etw: Etw::new() }
    }

    /// The running sessions.
    #[getter]
    fn sessions(&self, py: Python<'_>) -> PyResult<Vec<TraceProperties>> {
        let v = py.detach(|| self.etw.sessions()).map_err(errors::live)?;
        Ok(v.into_iter()
            .enumerate()
            .map(|(id, s)| TraceProperties {
                name: s.name,
                guid: None,
                id,
                logfile: None,
                instance: s.instance,
                owner_pid: s.owner_pid,
                etwkit: s.etwkit,
                tracing_on: s.tracing_on,
                enabled_events: s.enabled_events,
                buffer_size_kb: s.buffer_size_kb,
            })
            .collect())
    }

    /// The providers that can be enabled.
    #[getter]
    fn providers(&self, py: Python<'_>) -> PyResult<Vec<TraceProvider>> {
        let v = py.detach(|| self.etw.providers()).map_err(errors::live)?;
        Ok(v.into_iter()
            .map(|p| TraceProvider {
                name: p.name,
                guid: p.guid.to_string(),
                kind: p.kind,
                events: p.events,
            })
            .collect())
    }

    /// A trace handle: realtime when `logfile` is None, else its events also go to (or, when it is not
    /// started, are read from) that ETL file. Nothing happens until `start()` or `process()`.
    #[pyo3(signature = (name=None, logfile=None, guid=None))]
    fn open_trace(
        &self,
        name: Option<String>,
        logfile: Option<PathBuf>,
        guid: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<EtwTrace> {
        let name = name.unwrap_or_else(|| "PythonForWindowsTrace".to_string());
        let guid = guid.filter(|g| !g.is_none()).map(parse_guid).transpose()?;
        let t = self.etw.open_trace(&name, logfile.as_deref(), guid);
        Ok(EtwTrace::new(t, false))
    }

    /// A started heap trace of running processes (every thread), like Windows' heap tracing with a
    /// PID list: HeapTraceProvider Alloc (33), ReAlloc (34) and Free (36) events, with stacks on the
    /// `stack_event_ids` among them. With a `logfile` the events also go to that ETL file, which
    /// `etwkit.heap_report()` turns into the leak report.
    #[pyo3(signature = (pids, logfile=None, stack_event_ids=vec![33, 34], name=None))]
    fn heap_trace(
        &self,
        py: Python<'_>,
        pids: Vec<u32>,
        logfile: Option<PathBuf>,
        stack_event_ids: Vec<u16>,
        name: Option<String>,
    ) -> PyResult<EtwTrace> {
        let name = name.unwrap_or_else(|| "etwkit-heap".to_string());
        let t = py
            .detach(|| -> Result<Trace, LiveError> {
                let mut t =
                    self.etw
                        .open_heap_trace(&name, logfile.as_deref(), &stack_event_ids)?;
                for p in &pids {
                    t.add_pid(*p)?;
                }
                t.start()?;
                Ok(t)
            })
            .map_err(errors::live)?;
        Ok(EtwTrace::new(t, true))
    }

    fn __repr__(&self) -> String {
        "<etwkit.EtwManager>".into()
    }
}

/// PythonForWindows' `EtwTrace`: one session and the providers it enables.
#[pyclass(frozen, module = "etwkit", name = "EtwTrace")]
pub struct EtwTrace {
    trace: Mutex<Trace>,
    stop: StopHandle,
    /// The session name.
    #[pyo3(get)]
    name: String,
    /// The ETL file of the trace, or None for a realtime trace.
    #[pyo3(get)]
    logfile: Option<PathBuf>,
    #[pyo3(get)]
    guid: Option<String>,
    /// A provider was enabled.
    enabled: AtomicBool,
    /// start() came before any enable() (PythonForWindows' order): the session starts with the first
    /// enable(), since a session needs a provider here.
    pending_start: AtomicBool,
}

fn busy() -> PyErr {
    EtwError::new_err("the trace is busy in process() on another thread; stop() it first")
}

fn summary_dict<'py>(py: Python<'py>, s: &TraceSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("events_delivered", s.events_delivered)?;
    d.set_item("raw_records", s.raw_records)?;
    d.set_item("events_lost", s.events_lost)?;
    d.set_item("lost_detail", s.lost_detail.clone())?;
    d.set_item("issues", s.issues.clone())?;
    Ok(d)
}

/// What the worker thread of `process` feeds to the calling thread.
type Batch = Vec<OwnedEvent>;

impl EtwTrace {
    fn new(t: Trace, enabled: bool) -> EtwTrace {
        EtwTrace {
            stop: t.stop_handle(),
            name: t.name().to_string(),
            logfile: t.logfile().map(|p| p.to_path_buf()),
            guid: t.guid().map(|g| g.to_string()),
            trace: Mutex::new(t),
            enabled: AtomicBool::new(enabled),
            pending_start: AtomicBool::new(false),
        }
    }

    /// The trace, unless `process` holds it.
    fn locked(&self) -> PyResult<MutexGuard<'_, Trace>> {
        match self.trace.try_lock() {
            Ok(g) => Ok(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(busy()),
        }
    }

    /// Calls the Python callback for each event the worker sends, until the worker is done, the
    /// callback raises or a signal handler raises (Ctrl-C). Returns the first Python error.
    fn pump(
        &self,
        rx: std::sync::mpsc::Receiver<Batch>,
        callback: &Py<PyAny>,
        context: &Option<Py<PyAny>>,
    ) -> Option<PyErr> {
        loop {
            let got = rx.recv_timeout(Duration::from_millis(100));
            let r = Python::attach(|py| -> PyResult<bool> {
                let more = match got {
                    Ok(batch) => {
                        let cb = callback.bind(py);
                        for ev in batch {
                            let rec = Bound::new(py, PyEventRecord { ev })?;
                            match context {
                                Some(c) => cb.call1((rec, c.bind(py)))?,
                                None => cb.call1((rec,))?,
                            };
                        }
                        true
                    }
                    Err(RecvTimeoutError::Timeout) => true,
                    Err(RecvTimeoutError::Disconnected) => false,
                };
                py.check_signals()?;
                Ok(more)
            });
            match r {
                Ok(true) => continue,
                Ok(false) => return None,
                Err(e) => {
                    self.stop.stop();
                    return Some(e);
                }
            }
        }
    }
}

fn send(tx: &SyncSender<Batch>, batch: Batch) -> ControlFlow<()> {
    match tx.send(batch) {
        Ok(()) => ControlFlow::Continue(()),
        Err(_) => ControlFlow::Break(()),
    }
}

#[pymethods]
impl EtwTrace {
    /// Enables a provider (GUID or name). As in PythonForWindows, `flags` are the keywords to match
    /// (MatchAnyKeyword) and `level` the highest level wanted. On a started realtime trace the session
    /// is restarted with the provider added.
    #[pyo3(signature = (guid, flags=255, level=255))]
    fn enable(
        &self,
        py: Python<'_>,
        guid: &Bound<'_, PyAny>,
        flags: u64,
        level: u8,
    ) -> PyResult<()> {
        self.enable_impl(py, guid, 0, level, flags, 0)
    }

    /// Enables a provider with keyword masks. `flags` is accepted for PythonForWindows compatibility
    /// and, as there, unused; `enable_property` takes EVENT_ENABLE_PROPERTY_* flags (0x4: stacks).
    #[pyo3(signature = (guid, flags=255, level=255, any_keyword=0xffffffff, all_keyword=0, enable_property=0))]
    #[allow(clippy::too_many_arguments)]
    fn enable_ex(
        &self,
        py: Python<'_>,
        guid: &Bound<'_, PyAny>,
        flags: u64,
        level: u8,
        any_keyword: u64,
        all_keyword: u64,
        enable_property: u32,
    ) -> PyResult<()> {
        let _ = flags;
        self.enable_impl(py, guid, enable_property, level, any_keyword, all_keyword)
    }

    /// Starts the session. `flags` and `mode` are accepted for PythonForWindows compatibility. Called
    /// before any `enable()` (PythonForWindows' order), the session starts with the first `enable()`.
    #[pyo3(signature = (flags=0, mode=0))]
    fn start(&self, py: Python<'_>, flags: u32, mode: u32) -> PyResult<()> {
        let _ = (flags, mode);
        if !self.enabled.load(Ordering::SeqCst) {
            self.pending_start.store(true, Ordering::SeqCst);
            return Ok(());
        }
        let mut g = self.locked()?;
        let t: &mut Trace = &mut g;
        py.detach(|| t.start()).map_err(errors::live)
    }

    /// Restricts the trace to a process (all its threads, and its children); etwkit's addition.
    fn add_pid(&self, py: Python<'_>, pid: u32) -> PyResult<()> {
        let mut g = self.locked()?;
        let t: &mut Trace = &mut g;
        py.detach(|| t.add_pid(pid)).map_err(errors::live)
    }

    /// Stops the session (a `process()` running on another thread delivers what is buffered and
    /// returns first). `soft`: a session that does not exist is not an error. Returns the session's
    /// summary (events delivered and lost) as a dict.
    #[pyo3(signature = (soft=false))]
    fn stop<'py>(&self, py: Python<'py>, soft: bool) -> PyResult<Bound<'py, PyDict>> {
        self.stop.stop();
        self.pending_start.store(false, Ordering::SeqCst);
        let r = py.detach(|| {
            let mut g = self.trace.lock().unwrap_or_else(|p| p.into_inner());
            g.stop(soft)
        });
        summary_dict(py, &r.map_err(errors::live)?)
    }

    /// Flushes the session's buffers.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let mut g = self.locked()?;
        let t: &mut Trace = &mut g;
        py.detach(|| t.flush()).map_err(errors::live)
    }

    /// Whether the session exists (started by this handle or by anyone under this name).
    fn exists(&self) -> PyResult<bool> {
        match self.trace.try_lock() {
            Ok(t) => t.exists().map_err(errors::live),
            // process() holds the trace: its session exists.
            Err(_) => Ok(true),
        }
    }

    /// Calls `callback(event)` (`callback(event, context)` when `context` is given) for each event.
    /// On a started realtime trace it blocks until the trace is stopped from another thread (or
    /// Ctrl-C: the trace is stopped and KeyboardInterrupt raised), releasing the GIL while it waits.
    /// On a logfile trace that is not started it reads the ETL file. An exception raised by the
    /// callback stops processing and propagates. `begin`/`end` bound the events delivered (FILETIME
    /// int, aware datetime, RFC 3339 string; for a file also seconds from its start).
    #[pyo3(signature = (callback, begin=None, end=None, context=None))]
    fn process(
        &self,
        py: Python<'_>,
        callback: Py<PyAny>,
        begin: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let context = context.filter(|c| !c.is_none(py));
        let from_file = {
            let t = self.locked()?;
            if t.is_started() {
                None
            } else {
                match &self.logfile {
                    Some(p) => Some(p.clone()),
                    None => {
                        return Err(EtwError::new_err(format!(
                            "the trace {:?} is not started: call start() before process()",
                            self.name
                        )))
                    }
                }
            }
        };
        if let Some(path) = from_file {
            let file = py.detach(|| crate::reader::open(&path))?;
            let start = file.header().start_time;
            let sel = Selection {
                begin: time_bound(begin, start)?,
                end: time_bound(end, start)?,
                ..Default::default()
            };
            let (tx, rx) = sync_channel::<Batch>(4);
            let (err, summary) = py.detach(|| {
                std::thread::scope(|s| {
                    let w = s.spawn(move || {
                        let mut batch = Vec::with_capacity(1024);
                        let sum = read_events(&file, &sel, &mut |ev| {
                            batch.push(ev);
                            if batch.len() == 1024 {
                                return send(&tx, std::mem::take(&mut batch));
                            }
                            ControlFlow::Continue(())
                        });
                        if !batch.is_empty() {
                            let _ = tx.send(batch);
                        }
                        sum
                    });
                    let err = self.pump(rx, &callback, &context);
                    (err, w.join())
                })
            });
            if let Some(e) = err {
                return Err(e);
            }
            if let Ok(s) = summary {
                warn_issues(py, &path, &s)?;
            }
            return Ok(());
        }
        let begin = time_bound(begin, 0)?;
        let end = time_bound(end, 0)?;
        let (tx, rx) = sync_channel::<Batch>(4096);
        let (err, res) = py.detach(|| {
            let mut guard = self.trace.lock().unwrap_or_else(|p| p.into_inner());
            let t: &mut Trace = &mut guard;
            let (err, res) = std::thread::scope(|s| {
                let w = s.spawn(move || {
                    let mut decoder = Decoder::new(Registry::with_builtins());
                    let mut names = ProcessNames::new();
                    t.process(
                        |ev| {
                            if decoder.learn(ev) {
                                return ControlFlow::Continue(());
                            }
                            let mut o = OwnedEvent::new(ev, decoder.decode(ev));
                            // A live event carries only a pid: its process as the system names
                            // it now, as `etwkit trace` prints it (asked once a second per pid).
                            if o.decoded.process_name.is_none() {
                                o.decoded.process_name = names.name(o.pid).cloned();
                            }
                            send(&tx, vec![o])
                        },
                        begin,
                        end,
                    )
                });
                let err = self.pump(rx, &callback, &context);
                let res = w.join().unwrap_or_else(|_| {
                    Err(LiveError::Other("the session reader panicked".into()))
                });
                (err, res)
            });
            // Ctrl-C: stop the session cleanly before KeyboardInterrupt propagates.
            let interrupted = err.as_ref().is_some_and(|e| {
                Python::attach(|py| e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py))
            });
            if interrupted {
                let _ = guard.stop(true);
            }
            (err, res)
        });
        if let Some(e) = err {
            return Err(e);
        }
        res.map_err(errors::live)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaving a `with` block stops the trace (softly).
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.stop(py, true)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &self.logfile {
            Some(p) => format!("<EtwTrace {:?} logfile={}>", self.name, p.display()),
            None => format!("<EtwTrace {:?} realtime>", self.name),
        }
    }
}

impl EtwTrace {
    fn enable_impl(
        &self,
        py: Python<'_>,
        guid: &Bound<'_, PyAny>,
        property: u32,
        level: u8,
        any: u64,
        all: u64,
    ) -> PyResult<()> {
        let provider = guid.str()?.extract::<String>()?;
        let logfile = self.logfile.is_some();
        let mut g = self.locked()?;
        let t: &mut Trace = &mut g;
        py.detach(|| {
            if t.is_started() {
                if logfile {
                    return Err(LiveError::Unsupported(format!(
                        "enabling {provider} on the running logfile trace {:?}: enable providers before start()",
                        t.name()
                    )));
                }
                // PythonForWindows enables after start(): restart the session with the provider added.
                t.stop(false)?;
                t.enable_ex(provider.as_str(), property, level, any, all)?;
                return t.start();
            }
            t.enable_ex(provider.as_str(), property, level, any, all)?;
            if self.pending_start.swap(false, Ordering::SeqCst) {
                t.start()?;
            }
            Ok(())
        })
        .map_err(errors::live)?;
        self.enabled.store(true, Ordering::SeqCst);
        Ok(())
    }
}
