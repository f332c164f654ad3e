//! Live tracing: the session API (in the shape of PythonForWindows' ETW module) over a [`Backend`].
//!
//! ```no_run
//! use etwkit::live::{Etw, Level};
//! let etw = Etw::new();
//! let mut trace = etw.open_trace("demo", None, None);
//! trace.enable("Microsoft-Windows-Winsock-AFD", 0, Level::VERBOSE).unwrap();
//! trace.start().unwrap();
//! let stop = trace.stop_handle();
//! std::thread::spawn(move || { std::thread::sleep(std::time::Duration::from_secs(1)); stop.stop(); });
//! trace.process(|ev| { println!("{} {}", ev.provider, ev.descriptor.id); std::ops::ControlFlow::Continue(()) }, None, None).unwrap();
//! trace.stop(false).unwrap();
//! ```
//!
//! On Linux a session is a tracefs instance (see [`linux`]); on Windows an ETW session
//! ([`windows::WindowsBackend`]) implements the same [`Backend`] trait.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::event::EventRecord;
use crate::guid::Guid;

pub mod heap;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod props;
pub mod windows;

/// Errors of the live API. Each names what is missing or wrong in one sentence.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("live tracing on Linux needs root (tracefs instances and the kernel's tracepoints are root-only); run as root")]
    NotRoot,
    #[error("live ETW tracing needs an elevated Administrator or a member of the Performance Log Users group: run from an elevated prompt")]
    NotElevated,
    #[error("tracefs is not available: {0}")]
    NoTracefs(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: unreadable tracepoint format: {reason}")]
    BadFormat { path: PathBuf, reason: String },
    #[error("no provider named or with GUID {0:?} (list them with `etwkit providers`)")]
    UnknownProvider(String),
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("invalid session name {0:?}: use letters, digits, '_', '.' and '-' only")]
    BadName(String),
    #[error("session {0:?} does not exist")]
    NoSuchSession(String),
    #[error("session {0:?} is already started")]
    AlreadyStarted(String),
    #[error("session {0:?} is not started")]
    NotStarted(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Other(String),
}

impl LiveError {
    pub fn io(path: &Path, source: std::io::Error) -> LiveError {
        LiveError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub type Result<T, E = LiveError> = std::result::Result<T, E>;

/// ETW trace levels.
pub struct Level;
impl Level {
    pub const CRITICAL: u8 = 1;
    pub const ERROR: u8 = 2;
    pub const WARNING: u8 = 3;
    pub const INFORMATIONAL: u8 = 4;
    pub const VERBOSE: u8 = 5;
}

/// A provider named by GUID or by name (names work wherever a GUID does).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProviderRef {
    Guid(Guid),
    Name(String),
}

impl From<&str> for ProviderRef {
    fn from(s: &str) -> Self {
        match s.parse::<Guid>() {
            Ok(g) => ProviderRef::Guid(g),
            Err(_) => ProviderRef::Name(s.to_string()),
        }
    }
}
impl From<String> for ProviderRef {
    fn from(s: String) -> Self {
        ProviderRef::from(s.as_str())
    }
}
impl From<Guid> for ProviderRef {
    fn from(g: Guid) -> Self {
        ProviderRef::Guid(g)
    }
}
impl std::fmt::Display for ProviderRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderRef::Guid(g) => write!(f, "{g}"),
            ProviderRef::Name(n) => f.write_str(n),
        }
    }
}

/// One `EnableTraceEx2` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnableSpec {
    pub provider: ProviderRef,
    /// EnableProperty flags (EVENT_ENABLE_PROPERTY_*); `STACK_TRACE` (0x4) is honoured where the backend can.
    pub flags: u32,
    pub level: u8,
    /// 0 = all keywords.
    pub any_keyword: u64,
    pub all_keyword: u64,
    /// Only these event ids (empty: all). ETW filters them at the source (EVENT_FILTER_TYPE_EVENT_ID);
    /// [`Trace::process`] applies the same filter for every backend.
    pub event_ids: Vec<u16>,
}

impl EnableSpec {
    /// Whether an event with this level and keywords passes the level/keyword filter (ETW rules).
    pub fn accepts(&self, level: u8, keywords: u64) -> bool {
        if self.level != 0 && level != 0 && level > self.level {
            return false;
        }
        if keywords == 0 {
            return true;
        }
        if keywords != 0 && self.any_keyword != 0 && keywords & self.any_keyword == 0 {
            return false;
        }
        keywords & self.all_keyword == self.all_keyword
    }
}

/// A live session as listed by [`Etw::sessions`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct SessionInfo {
    pub name: String,
    /// The backend's own name for it (the tracefs instance).
    pub instance: String,
    /// The process that created it, when etwkit did.
    pub owner_pid: Option<u32>,
    /// Created by etwkit.
    pub etwkit: bool,
    /// Left behind by a tracer that no longer runs (killed): nobody reads it; the next session
    /// etwkit starts removes it.
    pub orphan: bool,
    /// The session's switch. On Linux the kernel makes an instance with tracing on and lists it
    /// while it is still being created: on with no `enabled_events` is a session being set up.
    pub tracing_on: bool,
    pub enabled_events: usize,
    pub buffer_size_kb: u64,
}

/// A provider as listed by [`Etw::providers`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProviderInfo {
    pub name: String,
    pub guid: Guid,
    /// Where its events come from (e.g. `tracepoints`, `winsock correlator`).
    pub kind: String,
    pub events: usize,
}

/// What a finished session reports.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TraceSummary {
    pub events_delivered: u64,
    pub raw_records: u64,
    /// Events the kernel lost (ring full), summed over every counter the backend has.
    pub events_lost: u64,
    /// How each part of `events_lost` was learned.
    pub lost_detail: Vec<(String, u64)>,
    /// What went wrong or was incomplete (each one sentence); empty when nothing did.
    pub issues: Vec<String>,
    /// Logfile mode: what the ETL writer wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logfile: Option<crate::etl::writer::WriteSummary>,
}

/// Everything a backend needs to start a session.
#[derive(Clone, Debug, Default)]
pub struct SessionConfig {
    pub name: String,
    pub providers: Vec<EnableSpec>,
    pub pids: Vec<u32>,
    /// Per-CPU buffer size in KiB (0 = backend default).
    pub buffer_kb: u64,
    /// Start with the pid filter armed but empty: nothing is traced until [`LiveSession::spawn`]ed
    /// children add themselves.
    pub armed_for_spawn: bool,
    /// Event ids whose events carry a stack (ETW's stack-walk event filter; the heap provider: Alloc
    /// 33, ReAlloc 34, Free 36). Empty: as the providers' STACK_TRACE enable flag says.
    pub stack_event_ids: Vec<u16>,
    /// The .etl file the backend itself writes (only for backends whose
    /// [`Backend::writes_logfile`] is true; others get `None` and `Trace` writes the file).
    pub logfile: Option<PathBuf>,
}

/// The callback type of [`LiveSession::process`].
pub type Callback<'c> = dyn FnMut(&EventRecord<'_>) -> ControlFlow<()> + 'c;

/// A running session.
pub trait LiveSession: Send {
    fn name(&self) -> &str;
    /// Adds a process (every thread of it; children follow).
    fn add_pid(&mut self, pid: u32) -> Result<()>;
    /// Spawns `cmd` so that it is traced from its first instruction.
    fn spawn(&mut self, cmd: &mut Command) -> Result<Child>;
    /// Delivers events in time order until `stop` is set (then drains what is buffered) or the
    /// callback breaks.
    fn process(&mut self, cb: &mut Callback<'_>, stop: &AtomicBool) -> Result<()>;
    fn flush(&mut self) -> Result<()>;
    /// Stops the session, frees it and reports losses.
    fn stop(&mut self) -> Result<TraceSummary>;
}

/// A tracing backend: Linux tracefs here, Windows ETW later.
pub trait Backend: Send + Sync {
    fn sessions(&self) -> Result<Vec<SessionInfo>>;
    fn providers(&self) -> Result<Vec<ProviderInfo>>;
    fn start(&self, cfg: &SessionConfig) -> Result<Box<dyn LiveSession>>;
    /// Stops a session by name; `Ok(false)` when it does not exist.
    fn stop_by_name(&self, name: &str) -> Result<bool>;
    fn exists(&self, name: &str) -> Result<bool>;
    /// Whether the backend writes a session's logfile itself (ETW does; for the others `Trace`
    /// writes the events it processes with etwkit's ETL writer).
    fn writes_logfile(&self) -> bool {
        false
    }
}

/// The entry point: sessions, providers, traces.
#[derive(Clone)]
pub struct Etw {
    backend: Arc<dyn Backend>,
}

impl Default for Etw {
    fn default() -> Self {
        Etw::new()
    }
}

impl Etw {
    /// The platform's backend.
    #[cfg(target_os = "linux")]
    pub fn new() -> Etw {
        Etw {
            backend: Arc::new(linux::LinuxBackend::new()),
        }
    }
    #[cfg(windows)]
    pub fn new() -> Etw {
        Etw {
            backend: Arc::new(windows::WindowsBackend::new()),
        }
    }
    #[cfg(not(any(target_os = "linux", windows)))]
    pub fn new() -> Etw {
        Etw {
            backend: Arc::new(Unavailable),
        }
    }

    pub fn with_backend(backend: Arc<dyn Backend>) -> Etw {
        Etw { backend }
    }

    /// Whether the backend is ETW's (sessions write their own logfiles, kernel providers exist).
    pub fn is_etw(&self) -> bool {
        self.backend.writes_logfile()
    }

    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        self.backend.sessions()
    }

    pub fn providers(&self) -> Result<Vec<ProviderInfo>> {
        self.backend.providers()
    }

    /// A heap trace of running processes (every thread), like Windows' `StartHeapTrace` with a PID
    /// list: a started [`Trace`] of the heap provider (HeapTraceProvider) whose events are Alloc (33),
    /// ReAlloc (34) and Free (36), with stacks on the `stack_event_ids` among them. Spawn a command
    /// suspended with [`Trace::spawn`] on a trace from [`Etw::open_heap_trace`] instead to miss
    /// nothing from its start.
    pub fn heap_trace(&self, pids: &[u32], stack_event_ids: &[u16]) -> Result<Trace> {
        let mut t = self.open_heap_trace("heap", None, stack_event_ids)?;
        for &p in pids {
            t.add_pid(p)?;
        }
        t.start()?;
        Ok(t)
    }

    /// A heap trace not started yet (add pids, or [`Trace::spawn`] a command suspended).
    pub fn open_heap_trace(
        &self,
        name: &str,
        logfile: Option<&Path>,
        stack_event_ids: &[u16],
    ) -> Result<Trace> {
        let mut t = self.open_trace(
            name,
            logfile,
            Some(crate::schema::builtin::heap_events::HEAP_PROVIDER),
        );
        t.enable(
            crate::schema::builtin::heap_events::HEAP_PROVIDER,
            0,
            Level::VERBOSE,
        )?;
        t.set_stack_events(stack_event_ids);
        Ok(t)
    }

    /// A trace handle, realtime when `logfile` is `None`. Nothing happens until [`Trace::start`] (or
    /// [`Trace::process`] on a logfile).
    pub fn open_trace(&self, name: &str, logfile: Option<&Path>, guid: Option<Guid>) -> Trace {
        Trace {
            backend: self.backend.clone(),
            name: name.to_string(),
            logfile: logfile.map(Path::to_path_buf),
            guid,
            providers: Vec::new(),
            pids: Vec::new(),
            buffer_kb: 0,
            armed_for_spawn: false,
            stack_event_ids: Vec::new(),
            session: None,
            writer: None,
            stop: StopHandle(Arc::new(AtomicBool::new(false))),
            summary: TraceSummary::default(),
        }
    }
}

/// Whether live tracing can work here, as one sentence when not (Linux: root and tracefs; Windows:
/// checked when a session starts, where a missing elevation is named).
pub fn check_available() -> Result<()> {
    #[cfg(target_os = "linux")]
    return linux::check_available();
    #[cfg(not(target_os = "linux"))]
    Ok(())
}

/// The name of process `pid` as the system names it now: what a live event, which carries only a
/// pid, shows as its `process_name`.
///
/// - Linux: `/proc/PID/comm` (at most 15 bytes, as `ps` shows it); for a process already gone, the
///   name tracefs saved for it while events were enabled (`saved_cmdlines`); pid 0, the idle task
///   of every CPU, is `swapper` (as `ps` and `perf` name it).
/// - Windows: the file name of the process's image (`curl.exe`), by `OpenProcess` and
///   `QueryFullProcessImageNameW`; pid 0 is `Idle` and pid 4 `System`, as the kernel's own Process
///   events name them.
///
/// `None` when no process has that pid (any more) and nothing remembers it. The answer can change
/// over time (an `exec`, a reused pid): callers that cache it ask again now and then.
pub fn process_name(pid: u32) -> Option<String> {
    #[cfg(target_os = "linux")]
    return linux::process_name(pid);
    #[cfg(windows)]
    return windows::process_name(pid);
    #[cfg(not(any(target_os = "linux", windows)))]
    {
        let _ = pid;
        None
    }
}

/// Live events' process names by pid, as [`process_name`] gives them, for whatever names live
/// events as they arrive (the CLI's printer, the Python package's live records): each pid is asked
/// of the system once and again when last asked over [`ProcessNames::TTL`] ago, so an `exec` or a
/// reused pid shows within that time while a busy process costs one lookup a second.
///
/// ```no_run
/// let mut names = etwkit::live::ProcessNames::new();
/// if let Some(n) = names.name(std::process::id()) {
///     println!("this process is {n}");
/// }
/// ```
pub struct ProcessNames {
    /// When each pid was last asked, and the answer.
    names: HashMap<u32, (Instant, Option<Arc<str>>)>,
    lookup: fn(u32) -> Option<String>,
}

impl Default for ProcessNames {
    fn default() -> Self {
        ProcessNames::new()
    }
}

impl ProcessNames {
    /// How long an answer is trusted before the pid is asked again (an `exec` renames a process,
    /// an exited one's pid is reused).
    pub const TTL: Duration = Duration::from_secs(1);

    /// Pids remembered at most: past it the answers older than [`Self::TTL`] are dropped (a long
    /// trace of many short processes), or all of them when none is that old.
    const CAP: usize = 16_384;

    pub fn new() -> ProcessNames {
        ProcessNames {
            names: HashMap::new(),
            lookup: process_name,
        }
    }

    /// The name of process `pid` now (see [`process_name`]); `None` for `u32::MAX` (a record
    /// without a process) and for a pid nobody can name.
    pub fn name(&mut self, pid: u32) -> Option<&Arc<str>> {
        self.name_at(pid, Instant::now())
    }

    /// [`Self::name`] at time `now`.
    pub fn name_at(&mut self, pid: u32, now: Instant) -> Option<&Arc<str>> {
        if pid == u32::MAX {
            return None;
        }
        let fresh = |asked: Instant| now.saturating_duration_since(asked) <= Self::TTL;
        if self.names.len() >= Self::CAP && !self.names.contains_key(&pid) {
            self.names.retain(|_, (asked, _)| fresh(*asked));
            if self.names.len() >= Self::CAP {
                self.names.clear();
            }
        }
        let lookup = self.lookup;
        let e = self
            .names
            .entry(pid)
            .or_insert_with(|| (now, lookup(pid).map(Arc::from)));
        if !fresh(e.0) {
            *e = (now, lookup(pid).map(Arc::from));
        }
        e.1.as_ref()
    }
}

/// The demo's loopback network workload for this platform, run in this process; what it did (pids,
/// ports, byte counts) as JSON. Linux: TCP echo v4/v6, refused connect, busy bind, peer reset, UDP
/// overflow ([`linux::workload`]); elsewhere the std::net subset ([`windows::workload`]).
pub fn demo_workload() -> Result<serde_json::Value> {
    #[cfg(target_os = "linux")]
    let facts = linux::workload::run().map(serde_json::to_value);
    #[cfg(not(target_os = "linux"))]
    let facts = windows::workload::run().map(serde_json::to_value);
    facts
        .map_err(|e| LiveError::Other(format!("the demo workload failed: {e}")))?
        .map_err(|e| LiveError::Other(e.to_string()))
}

/// Sets the stop flag of a trace from another thread (Ctrl-C, a timer, the end of a child process).
#[derive(Clone, Debug)]
pub struct StopHandle(Arc<AtomicBool>);
impl StopHandle {
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// One trace (a session plus what it enables), PythonForWindows' `EtwTrace`.
pub struct Trace {
    backend: Arc<dyn Backend>,
    name: String,
    logfile: Option<PathBuf>,
    guid: Option<Guid>,
    providers: Vec<EnableSpec>,
    pids: Vec<u32>,
    buffer_kb: u64,
    armed_for_spawn: bool,
    stack_event_ids: Vec<u16>,
    session: Option<Box<dyn LiveSession>>,
    /// Logfile mode: where the session's events go.
    writer: Option<crate::etl::writer::Writer<std::fs::File>>,
    stop: StopHandle,
    summary: TraceSummary,
}

impl Trace {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn guid(&self) -> Option<Guid> {
        self.guid
    }
    pub fn logfile(&self) -> Option<&Path> {
        self.logfile.as_deref()
    }

    /// Enables a provider (GUID or name) at `level` with all keywords.
    pub fn enable(
        &mut self,
        provider: impl Into<ProviderRef>,
        flags: u32,
        level: u8,
    ) -> Result<()> {
        self.enable_ex(provider, flags, level, 0, 0)
    }

    pub fn enable_ex(
        &mut self,
        provider: impl Into<ProviderRef>,
        flags: u32,
        level: u8,
        any_keyword: u64,
        all_keyword: u64,
    ) -> Result<()> {
        let spec = EnableSpec {
            provider: provider.into(),
            flags,
            level,
            any_keyword,
            all_keyword,
            event_ids: Vec::new(),
        };
        if self.session.is_some() {
            return Err(LiveError::Unsupported(format!(
                "enabling {} on the running session {:?}: enable providers before start()",
                spec.provider, self.name
            )));
        }
        self.providers.retain(|p| p.provider != spec.provider);
        self.providers.push(spec);
        Ok(())
    }

    /// Delivers only these event ids of an enabled provider (at most 64; ETW filters at the source).
    pub fn set_event_ids(&mut self, provider: impl Into<ProviderRef>, ids: &[u16]) -> Result<()> {
        let provider = provider.into();
        if self.session.is_some() {
            return Err(LiveError::Unsupported(format!(
                "filtering {provider} on the running session {:?}: set event ids before start()",
                self.name
            )));
        }
        match self.providers.iter_mut().find(|p| p.provider == provider) {
            Some(p) => {
                p.event_ids = ids.to_vec();
                Ok(())
            }
            None => Err(LiveError::Other(format!(
                "{provider} is not enabled on {:?}: enable it before filtering its event ids",
                self.name
            ))),
        }
    }

    /// Restricts the session to these processes (all their threads, and their children).
    pub fn add_pid(&mut self, pid: u32) -> Result<()> {
        match &mut self.session {
            Some(s) => s.add_pid(pid),
            None => {
                self.pids.push(pid);
                Ok(())
            }
        }
    }

    /// Event ids whose events carry a stack (ETW's stack-walk event filter).
    pub fn set_stack_events(&mut self, ids: &[u16]) {
        self.stack_event_ids = ids.to_vec();
    }

    pub fn set_buffer_kb(&mut self, kb: u64) {
        self.buffer_kb = kb;
    }

    pub fn start(&mut self) -> Result<()> {
        if self.session.is_some() {
            return Err(LiveError::AlreadyStarted(self.name.clone()));
        }
        let native_file = self.logfile.is_some() && self.backend.writes_logfile();
        let cfg = SessionConfig {
            name: self.name.clone(),
            providers: self.providers.clone(),
            pids: self.pids.clone(),
            buffer_kb: self.buffer_kb,
            armed_for_spawn: self.armed_for_spawn,
            stack_event_ids: self.stack_event_ids.clone(),
            logfile: if native_file {
                self.logfile.clone()
            } else {
                None
            },
        };
        self.stop.0.store(false, Ordering::SeqCst);
        let session = self.backend.start(&cfg)?;
        if let (Some(p), false) = (&self.logfile, native_file) {
            let mut opts = crate::etl::writer::WriterOptions::now();
            opts.logger_name = self.name.clone();
            let w = crate::etl::writer::Writer::create(p, opts).map_err(|e| {
                // The logfile named once: `cannot create the logfile x.etl: <reason>`.
                let why = match e {
                    crate::etl::writer::WriteError::Io { path, source } if path == *p => {
                        source.to_string()
                    }
                    e => e.to_string(),
                };
                LiveError::Other(format!("cannot create the logfile {}: {why}", p.display()))
            })?;
            self.writer = Some(w);
        }
        self.session = Some(session);
        Ok(())
    }

    /// Spawns a command traced from its first instruction. When the trace is not started yet it is
    /// started with only the command (and its threads and children) in its pid filter.
    pub fn spawn(&mut self, cmd: &mut Command) -> Result<Child> {
        if self.session.is_none() {
            self.armed_for_spawn = true;
            self.start()?;
        }
        match &mut self.session {
            Some(s) => s.spawn(cmd),
            None => Err(LiveError::NotStarted(self.name.clone())),
        }
    }

    /// Stops the session. `soft`: stopping a session that does not exist is not an error.
    pub fn stop(&mut self, soft: bool) -> Result<TraceSummary> {
        self.stop.stop();
        if let Some(mut s) = self.session.take() {
            let mut write_error = None;
            if let Some(w) = self.writer.as_mut() {
                // Logfile mode: what is still buffered goes to the file, not away.
                let mut cb = |ev: &EventRecord<'_>| match w.write_event(ev) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(e) => {
                        write_error = Some(e.to_string());
                        ControlFlow::Break(())
                    }
                };
                s.process(&mut cb, &self.stop.0)?;
            }
            let mut sum = s.stop()?;
            sum.events_delivered += self.summary.events_delivered;
            if let Some(mut w) = self.writer.take() {
                w.add_events_lost(sum.events_lost.min(u32::MAX as u64) as u32);
                let ws = w
                    .finish()
                    .map_err(|e| LiveError::Other(format!("finishing the logfile: {e}")))?;
                sum.logfile = Some(ws);
            }
            if let Some(e) = write_error {
                return Err(LiveError::Other(format!("writing the logfile: {e}")));
            }
            self.summary = sum.clone();
            return Ok(sum);
        }
        if self.backend.stop_by_name(&self.name)? || soft {
            Ok(TraceSummary::default())
        } else {
            Err(LiveError::NoSuchSession(self.name.clone()))
        }
    }

    pub fn flush(&mut self) -> Result<()> {
        match &mut self.session {
            Some(s) => s.flush(),
            None => Err(LiveError::NotStarted(self.name.clone())),
        }
    }

    /// Whether this handle started its session (and has not stopped it).
    pub fn is_started(&self) -> bool {
        self.session.is_some()
    }

    pub fn exists(&self) -> Result<bool> {
        if self.session.is_some() {
            return Ok(true);
        }
        self.backend.exists(&self.name)
    }

    /// A handle that makes [`Trace::process`] return (after delivering what is buffered).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The summary of the last stopped session.
    pub fn summary(&self) -> &TraceSummary {
        &self.summary
    }

    /// Delivers events to `callback` until the stop handle fires or the callback breaks. On a realtime
    /// trace the session is started if needed; on a logfile trace the file is read. `begin`/`end`
    /// (UTC FILETIME) bound the events delivered.
    pub fn process<F>(
        &mut self,
        mut callback: F,
        begin: Option<i64>,
        end: Option<i64>,
    ) -> Result<()>
    where
        F: FnMut(&EventRecord<'_>) -> ControlFlow<()>,
    {
        if let (Some(p), None) = (&self.logfile, &self.session) {
            if p.exists() {
                return process_logfile(p, callback, begin, end);
            }
        }
        if self.session.is_none() {
            self.start()?;
        }
        let stop = self.stop.0.clone();
        let mut delivered = 0u64;
        let id_filters = self.id_filters();
        let mut cb = |ev: &EventRecord<'_>| {
            if begin.is_some_and(|b| ev.timestamp < b) {
                return ControlFlow::Continue(());
            }
            if !id_filters.is_empty()
                && id_filters
                    .iter()
                    .any(|(g, ids)| *g == ev.provider && !ids.contains(&ev.descriptor.id))
            {
                return ControlFlow::Continue(());
            }
            if end.is_some_and(|e| ev.timestamp > e) {
                return ControlFlow::Break(());
            }
            delivered += 1;
            callback(ev)
        };
        let s = self
            .session
            .as_mut()
            .ok_or_else(|| LiveError::NotStarted(self.name.clone()))?;
        let r = match self.writer.as_mut() {
            Some(w) => {
                let mut write_error = None;
                let mut both = |ev: &EventRecord<'_>| {
                    if let Err(e) = w.write_event(ev) {
                        write_error = Some(e.to_string());
                        return ControlFlow::Break(());
                    }
                    cb(ev)
                };
                let r = s.process(&mut both, &stop);
                match write_error {
                    Some(e) => Err(LiveError::Other(format!("writing the logfile: {e}"))),
                    None => r,
                }
            }
            None => s.process(&mut cb, &stop),
        };
        self.summary.events_delivered += delivered;
        r
    }
}

impl Trace {
    /// (provider GUID, event ids) of the providers named by GUID with an event-id filter.
    fn id_filters(&self) -> Vec<(Guid, Vec<u16>)> {
        self.providers
            .iter()
            .filter(|p| !p.event_ids.is_empty())
            .filter_map(|p| match &p.provider {
                ProviderRef::Guid(g) => Some((*g, p.event_ids.clone())),
                ProviderRef::Name(n) => crate::schema::Registry::with_builtins()
                    .provider_guids_named(n)
                    .first()
                    .map(|g| (*g, p.event_ids.clone())),
            })
            .collect()
    }
}

/// `process` on a logfile: every event of the file, in time order.
fn process_logfile<F>(
    path: &Path,
    mut callback: F,
    begin: Option<i64>,
    end: Option<i64>,
) -> Result<()>
where
    F: FnMut(&EventRecord<'_>) -> ControlFlow<()>,
{
    let f = crate::etl::EtlFile::open(path)
        .map_err(|e| LiveError::Other(format!("{}: {e}", path.display())))?;
    f.for_each(crate::etl::Order::Time, |r| {
        let ev: &EventRecord<'_> = &r.event;
        if begin.is_some_and(|b| ev.timestamp < b) {
            return ControlFlow::Continue(());
        }
        if end.is_some_and(|e| ev.timestamp > e) {
            return ControlFlow::Break(());
        }
        callback(ev)
    });
    Ok(())
}

impl Drop for Trace {
    fn drop(&mut self) {
        if let Some(mut s) = self.session.take() {
            let _ = s.stop();
        }
    }
}

/// The backend of platforms without live tracing support yet.
#[cfg(not(any(target_os = "linux", windows)))]
struct Unavailable;
#[cfg(not(any(target_os = "linux", windows)))]
impl Backend for Unavailable {
    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        Err(LiveError::Unsupported(
            "live tracing is not implemented on this OS yet".into(),
        ))
    }
    fn providers(&self) -> Result<Vec<ProviderInfo>> {
        self.sessions().map(|_| Vec::new())
    }
    fn start(&self, _: &SessionConfig) -> Result<Box<dyn LiveSession>> {
        Err(LiveError::Unsupported(
            "live tracing is not implemented on this OS yet".into(),
        ))
    }
    fn stop_by_name(&self, _: &str) -> Result<bool> {
        self.sessions().map(|_| false)
    }
    fn exists(&self, _: &str) -> Result<bool> {
        self.sessions().map(|_| false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    thread_local! {
        static ASKED: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
        static NAME: std::cell::RefCell<&'static str> = const { std::cell::RefCell::new("first") };
    }

    fn fake_lookup(pid: u32) -> Option<String> {
        ASKED.with(|a| a.borrow_mut().push(pid));
        (pid != 7).then(|| NAME.with(|n| n.borrow().to_string()))
    }

    #[test]
    fn process_names_are_asked_once_a_second_per_pid() {
        let mut names = ProcessNames {
            names: HashMap::new(),
            lookup: fake_lookup,
        };
        let t0 = Instant::now();
        let name = |n: &mut ProcessNames, pid, after_ms| {
            n.name_at(pid, t0 + Duration::from_millis(after_ms))
                .map(|s| s.to_string())
        };
        assert_eq!(name(&mut names, 42, 0).as_deref(), Some("first"));
        NAME.with(|n| *n.borrow_mut() = "second");
        // Within the second: the cached answer, not asked again.
        assert_eq!(name(&mut names, 42, 500).as_deref(), Some("first"));
        assert_eq!(name(&mut names, 42, 1000).as_deref(), Some("first"));
        // Another pid is asked on its own.
        assert_eq!(name(&mut names, 43, 600).as_deref(), Some("second"));
        // Past the second: asked again, the new name.
        assert_eq!(name(&mut names, 42, 1001).as_deref(), Some("second"));
        // No name is remembered as none (asked once), a record without a process not asked at all.
        assert_eq!(name(&mut names, 7, 1001), None);
        assert_eq!(name(&mut names, 7, 1500), None);
        assert_eq!(name(&mut names, u32::MAX, 0), None);
        assert_eq!(ASKED.with(|a| a.borrow().clone()), [42, 43, 42, 7]);
    }

    #[test]
    fn process_names_name_this_process() {
        let mut names = ProcessNames::new();
        let pid = std::process::id();
        assert_eq!(names.name(pid).map(|s| s.to_string()), process_name(pid));
    }

    #[test]
    fn level_and_keyword_filter() {
        let s = EnableSpec {
            provider: "x".into(),
            flags: 0,
            level: 4,
            any_keyword: 0x2,
            all_keyword: 0,
            event_ids: Vec::new(),
        };
        assert!(s.accepts(4, 0x2));
        assert!(!s.accepts(5, 0x2));
        assert!(!s.accepts(4, 0x1));
        assert!(s.accepts(4, 0)); // keyword-less events pass any filter
        let all = EnableSpec {
            all_keyword: 0x3,
            any_keyword: 0,
            ..s
        };
        assert!(!all.accepts(4, 0x1));
        assert!(all.accepts(4, 0x3));
        assert_eq!(
            ProviderRef::from("e53c6823-7bb8-44bb-90dc-3f86090d48a6"),
            ProviderRef::Guid(Guid::from_str_const("e53c6823-7bb8-44bb-90dc-3f86090d48a6"))
        );
        assert_eq!(
            ProviderRef::from("sched"),
            ProviderRef::Name("sched".into())
        );
    }
}
