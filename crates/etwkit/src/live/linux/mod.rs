//! The Linux backend: tracefs instances as sessions.
//!
//! - A session is one tracefs instance `etwkit-<owner pid>-<name>` (plus `…-<name>.net` when the Winsock
//!   provider is enabled: socket-layer tracepoints fire in softirq context in whatever task runs, so
//!   they are collected without a pid filter and attributed to the socket's owner by the correlator).
//! - Providers are tracepoint systems (GUID = TraceLogging name hash of the system name) plus
//!   `Microsoft-Windows-Winsock-AFD` ([`winsock`]).
//! - Events are read in binary from every CPU's `trace_pipe_raw` (one thread per CPU, [`ring`]), merged
//!   by time and turned into TraceLogging [`EventRecord`]s.
//! - Pid filter: `set_event_pid` with every thread of each pid, `options/event-fork` for children.
//! - Losses: page-header counts, then `per_cpu/cpuN/stats` (overrun + dropped) at stop.

pub mod bindhold;
pub mod early;
pub mod format;
pub mod heap;
pub mod procfd;
/// Properties of backend-made TraceLogging events (now [`crate::live::props`]).
pub use super::props;
pub mod ring;
pub mod tracefs;
pub mod tracepoints;
pub mod unwind;
pub mod uprobe;
pub mod winsock;
pub mod workload;

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{
    Backend, Callback, EnableSpec, LiveError, LiveSession, ProviderInfo, ProviderRef, Result,
    SessionConfig, SessionInfo, TraceSummary,
};
use crate::event::EventRecord;
use crate::time::FILETIME_UNIX_EPOCH;
use crate::tlg::{self, TlInstance};
use ring::{Merger, Readers};
use tracepoints::TpEvent;

/// The Linux backend.
#[derive(Default)]
pub struct LinuxBackend;

impl LinuxBackend {
    pub fn new() -> Self {
        LinuxBackend
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Instances (any owner) that belong to the etwkit session `name`.
fn instances_named(root: &Path, name: &str) -> Result<Vec<String>> {
    Ok(tracefs::instances(root)?
        .into_iter()
        .filter(|i| matches!(tracefs::parse_instance_name(i), Some((_, rest)) if rest == name || rest.strip_suffix(".net") == Some(name)))
        .collect())
}

impl Backend for LinuxBackend {
    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        let root = tracefs::root()?;
        let mut v = Vec::new();
        for inst in tracefs::instances(&root)? {
            let dir = root.join("instances").join(&inst);
            let parsed = tracefs::parse_instance_name(&inst);
            let enabled = tracefs::read(&dir.join("set_event"))
                .map(|s| s.lines().filter(|l| !l.trim().is_empty()).count())
                .unwrap_or(0);
            v.push(SessionInfo {
                name: parsed
                    .map(|(_, r)| r.to_string())
                    .unwrap_or_else(|| inst.clone()),
                owner_pid: parsed.map(|(p, _)| p),
                etwkit: parsed.is_some(),
                orphan: parsed.is_some_and(|(p, _)| !tracefs::pid_alive(p)),
                tracing_on: tracefs::read(&dir.join("tracing_on"))
                    .map(|s| s.trim() == "1")
                    .unwrap_or(false),
                enabled_events: enabled,
                buffer_size_kb: tracefs::read(&dir.join("buffer_size_kb"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0),
                instance: inst,
            });
        }
        Ok(v)
    }

    fn providers(&self) -> Result<Vec<ProviderInfo>> {
        let root = tracefs::root()?;
        let mut v = vec![ProviderInfo {
            name: winsock::PROVIDER_NAME.into(),
            guid: winsock::PROVIDER_GUID,
            kind: "winsock correlator (syscalls, sock, tcp, udp tracepoints)".into(),
            events: winsock::EVENT_IDS.len(),
        }];
        // Alloc, ReAlloc and Free of the processes a session names (--pid, or a command it starts).
        v.push(ProviderInfo {
            name: crate::live::heap::HEAP_PROVIDER_NAMES[0].into(),
            guid: crate::schema::builtin::heap_events::HEAP_PROVIDER,
            kind: "heap tracer (allocator shim or uprobes; processes named by pid or started by the session)"
                .into(),
            events: 3,
        });
        v.extend(tracepoints::provider_infos(&root.join("events"))?);
        Ok(v)
    }

    fn start(&self, cfg: &SessionConfig) -> Result<Box<dyn LiveSession>> {
        if cfg
            .providers
            .iter()
            .any(|p| heap::session::is_heap_provider(&p.provider))
        {
            // Heap tracing: perf uprobes bound to the target processes, not tracefs.
            return Ok(Box::new(heap::session::HeapSession::start(cfg)?));
        }
        Ok(Box::new(LinuxSession::start(cfg)?))
    }

    fn stop_by_name(&self, name: &str) -> Result<bool> {
        let root = tracefs::root()?;
        let found = instances_named(&root, name)?;
        for i in &found {
            tracefs::remove_instance(&root, i)?;
        }
        Ok(!found.is_empty())
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let root = tracefs::root()?;
        Ok(!instances_named(&root, name)?.is_empty())
    }
}

/// What to do with a raw record of a given (instance, event id).
#[derive(Clone, Copy)]
enum Handler {
    None,
    Tp(usize),
    Ws,
    Both(usize),
}

/// tid → tgid, from /proc or the kernel's saved_tgids.
struct Tgids {
    cache: HashMap<u32, u32>,
    root: PathBuf,
    last: (u32, u32),
}

impl Tgids {
    fn get(&mut self, tid: u32) -> u32 {
        if self.last.0 == tid && tid != 0 {
            return self.last.1;
        }
        let tgid = match self.cache.get(&tid) {
            Some(&t) => t,
            None => {
                let t = self.lookup(tid);
                self.cache.insert(tid, t);
                t
            }
        };
        self.last = (tid, tgid);
        tgid
    }
    fn lookup(&self, tid: u32) -> u32 {
        if tid == 0 {
            return 0;
        }
        if let Some(v) = procfd::tgid_of(tid) {
            return v;
        }
        if let Ok(s) = std::fs::read_to_string(self.root.join("saved_tgids")) {
            for l in s.lines() {
                let mut it = l.split_whitespace();
                if it.next().and_then(|x| x.parse::<u32>().ok()) == Some(tid) {
                    if let Some(t) = it.next().and_then(|x| x.parse().ok()) {
                        return t;
                    }
                }
            }
        }
        tid
    }
    /// Forget a tid (threads exit and tids get reused).
    fn forget(&mut self, tid: u32) {
        self.cache.remove(&tid);
        if self.last.0 == tid {
            self.last = (0, 0);
        }
    }
}

static SESSION_SEQ: AtomicU32 = AtomicU32::new(0);

/// One live Linux session.
pub struct LinuxSession {
    name: String,
    root: PathBuf,
    /// [0] the filtered instance, [1] the `.net` instance (when Winsock is enabled).
    instances: Vec<PathBuf>,
    cpus: Vec<usize>,
    readers: Option<Readers>,
    merger: Merger,
    handlers: Vec<Vec<Handler>>,
    tp: Vec<(TpEvent, EnableSpec)>,
    winsock: Option<winsock::Correlator>,
    tgids: Tgids,
    exit_id: Option<u16>,
    /// Offset of `group_dead` in sched_process_exit (absent on older kernels).
    group_dead_off: Option<usize>,
    offset_ns: i128,
    pid_file: Option<File>,
    on_file: Option<File>,
    filtered: bool,
    /// The session traces given processes (not a spawned command): it ends once none of them, nor
    /// any child they forked, is alive (see [`LinuxSession::traced_pids_gone`]).
    watch_pids: bool,
    /// When the pid filter was last found to name no live task.
    pids_gone_since: Option<std::time::Instant>,
    last_pid_check: std::time::Instant,
    stop_requested: bool,
    stopped: bool,
    summary: TraceSummary,
    payload: Vec<u8>,
    /// Removed after the instances (an enabled probe cannot be removed).
    probes: Option<uprobe::Probes>,
    /// Tracepoint records shorter than their format says (fields padded with zeros).
    short_records: u64,
}

impl LinuxSession {
    pub fn start(cfg: &SessionConfig) -> Result<LinuxSession> {
        if !valid_name(&cfg.name) {
            return Err(LiveError::BadName(cfg.name.clone()));
        }
        let root = tracefs::root()?;
        let _ = tracefs::cleanup_orphans(&root)?;
        if !instances_named(&root, &cfg.name)?.is_empty() {
            return Err(LiveError::AlreadyStarted(cfg.name.clone()));
        }
        let events_dir = root.join("events");
        // Resolve providers first: a typo fails before anything is created.
        let systems: Vec<String> = tracepoints::systems(&events_dir)?
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let mut tp_specs: Vec<(String, EnableSpec)> = Vec::new();
        let mut ws_spec = None;
        for spec in &cfg.providers {
            if winsock::matches(&spec.provider) {
                ws_spec = Some(spec.clone());
                continue;
            }
            let sys = match &spec.provider {
                ProviderRef::Name(n) => systems.iter().find(|s| *s == n),
                ProviderRef::Guid(g) => systems.iter().find(|s| tracepoints::system_guid(s) == *g),
            };
            match sys {
                Some(s) => tp_specs.push((s.clone(), spec.clone())),
                None => return Err(LiveError::UnknownProvider(spec.provider.to_string())),
            }
        }
        if tp_specs.is_empty() && ws_spec.is_none() {
            return Err(LiveError::Other(
                "no provider enabled: call enable() before start()".into(),
            ));
        }
        let me = std::process::id();
        let seq = SESSION_SEQ.fetch_add(1, Ordering::SeqCst);
        let base = format!("etwkit-{me}-{}", cfg.name);
        let mut names = vec![base.clone()];
        if ws_spec.is_some() {
            names.push(format!("{base}.net"));
        }
        // Socket addresses of bind/connect (uprobes): without them those fields are absent.
        let mut probes = None;
        let mut issues = Vec::new();
        if ws_spec.is_some() {
            uprobe::cleanup_orphans(&root);
            match uprobe::Probes::define(&root, &format!("etwkit_{me}_{seq}")) {
                Ok(p) => probes = Some(p),
                Err(e) => issues.push(format!(
                    "bind/connect addresses unavailable (no uprobes): {e}"
                )),
            }
        }
        let mut instances = Vec::new();
        let cleanup = |instances: &Vec<PathBuf>| {
            for i in instances {
                if let Some(n) = i.file_name().and_then(|n| n.to_str()) {
                    let _ = tracefs::remove_instance(&root, n);
                }
            }
        };
        for n in &names {
            let dir = root.join("instances").join(n);
            std::fs::create_dir(&dir).map_err(|e| LiveError::io(&dir, e))?;
            instances.push(dir);
        }
        let filtered = !cfg.pids.is_empty() || cfg.armed_for_spawn;
        let r = (|| -> Result<LinuxSession> {
            let buffer_kb = if cfg.buffer_kb > 0 {
                cfg.buffer_kb
            } else {
                8192
            };
            for (i, dir) in instances.iter().enumerate() {
                tracefs::write(&dir.join("tracing_on"), "0")?;
                tracefs::write(&dir.join("trace_clock"), "mono")?;
                tracefs::write(&dir.join("buffer_size_kb"), &buffer_kb.to_string())?;
                let _ = tracefs::write(&dir.join("options/record-tgid"), "1");
                // event-fork makes pid lists follow forks: wanted for the filter, but it would also
                // spread our own notrace entry to the commands we spawn.
                tracefs::write(
                    &dir.join("options/event-fork"),
                    if i == 0 && filtered { "1" } else { "0" },
                )?;
            }
            for &pid in &cfg.pids {
                for t in tracefs::threads_of(pid)? {
                    tracefs::append(&instances[0].join("set_event_pid"), &format!("{t}\n"))?;
                }
            }
            let events0 = instances[0].join("events");
            let mut tp = Vec::new();
            let mut handlers = vec![vec![Handler::None; 65536]; instances.len()];
            for (sys, spec) in &tp_specs {
                for ev in tracepoints::events_of(&events0, sys)? {
                    let f = match format::EventFormat::load(&events_dir, sys, &ev) {
                        Ok(f) => f,
                        Err(_) => continue, // e.g. ftrace-internal events without a readable format
                    };
                    let id = f.id as usize;
                    tp.push((TpEvent::new(f)?, spec.clone()));
                    handlers[0][id] = Handler::Tp(tp.len() - 1);
                }
                tracefs::write(&events0.join(sys).join("enable"), "1")?;
            }
            let mut ws = None;
            if let Some(spec) = ws_spec {
                let c = winsock::Correlator::new(
                    &events_dir,
                    spec,
                    probes.as_ref().map(|p| p.group.as_str()),
                )?;
                for (inst, sys, ev, id) in c.tracepoints() {
                    let h = &mut handlers[inst][id as usize];
                    *h = match *h {
                        Handler::Tp(i) => Handler::Both(i),
                        _ => Handler::Ws,
                    };
                    tracefs::write(
                        &instances[inst]
                            .join("events")
                            .join(sys)
                            .join(ev)
                            .join("enable"),
                        "1",
                    )?;
                }
                ws = Some(c);
            }
            // Thread exits keep the tid → tgid cache honest.
            let exit_fmt =
                format::EventFormat::load(&events_dir, "sched", "sched_process_exit").ok();
            let exit_id = exit_fmt.as_ref().map(|f| f.id);
            let group_dead_off = exit_fmt
                .as_ref()
                .and_then(|f| f.field("group_dead"))
                .map(|f| f.offset);
            if let Some(id) = exit_id {
                if matches!(handlers[0][id as usize], Handler::None) {
                    tracefs::write(&events0.join("sched/sched_process_exit/enable"), "1")?;
                }
            }
            let cpus = tracefs::cpus(&instances[0])?;
            let page = ring::page_size(&instances[0]);
            // The readers of the filtered instance take bind/connect addresses while the process lives.
            let early = ws
                .as_mut()
                .map(|c: &mut winsock::Correlator| c.early_peek());
            let readers = Readers::start(&instances, &cpus, page, early)?;
            let streams = readers.streams.len();
            let pid_file = std::fs::OpenOptions::new()
                .append(true)
                .open(instances[0].join("set_event_pid"))
                .map_err(|e| LiveError::io(&instances[0], e))?;
            let on_file = std::fs::OpenOptions::new()
                .write(true)
                .open(instances[0].join("tracing_on"))
                .map_err(|e| LiveError::io(&instances[0], e))?;
            // Our own threads (readers included) are never traced where no pid filter applies: the
            // readers' own reads would feed themselves.
            let mut own = String::new();
            for t in tracefs::threads_of(me)? {
                own.push_str(&format!("{t} "));
            }
            for (i, dir) in instances.iter().enumerate() {
                if i > 0 || !filtered {
                    tracefs::write(&dir.join("set_event_notrace_pid"), &own)?;
                }
            }
            let offset_ns = ring::realtime_now_ns() - ring::mono_now_ns() as i128;
            // Net instance first, so socket ownership is known before the filtered events flow.
            for dir in instances.iter().skip(1) {
                tracefs::write(&dir.join("tracing_on"), "1")?;
            }
            if !(cfg.armed_for_spawn && cfg.pids.is_empty()) {
                tracefs::write(&instances[0].join("tracing_on"), "1")?;
            }
            Ok(LinuxSession {
                name: cfg.name.clone(),
                root: root.clone(),
                instances: instances.clone(),
                cpus,
                readers: Some(readers),
                merger: Merger::new(streams, 2_000_000),
                handlers,
                tp,
                winsock: ws,
                tgids: Tgids {
                    cache: HashMap::new(),
                    root: root.clone(),
                    last: (0, 0),
                },
                exit_id,
                group_dead_off,
                offset_ns,
                pid_file: Some(pid_file),
                on_file: Some(on_file),
                filtered,
                watch_pids: !cfg.pids.is_empty() && !cfg.armed_for_spawn,
                pids_gone_since: None,
                last_pid_check: std::time::Instant::now(),
                stop_requested: false,
                stopped: false,
                summary: TraceSummary {
                    issues: issues.clone(),
                    ..TraceSummary::default()
                },
                payload: Vec::with_capacity(256),
                probes: None,
                short_records: 0,
            })
        })();
        match r {
            Ok(mut s) => {
                s.probes = probes;
                Ok(s)
            }
            Err(e) => {
                cleanup(&instances);
                drop(probes);
                Err(e)
            }
        }
    }

    pub fn instance_names(&self) -> Vec<String> {
        self.instances
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(String::from))
            .collect()
    }

    fn request_stop(&mut self) {
        if self.stop_requested {
            return;
        }
        self.stop_requested = true;
        for i in &self.instances {
            let _ = tracefs::write(&i.join("tracing_on"), "0");
        }
        if let Some(r) = &self.readers {
            r.request_stop();
        }
    }

    fn pump(&mut self, cb: &mut Callback<'_>, wait: Duration) -> bool {
        let Some(readers) = &self.readers else {
            return true;
        };
        match readers.rx.recv_timeout(wait) {
            Ok(m) => self.merger.accept(m),
            Err(_) => return true,
        }
        while let Ok(m) = readers.rx.try_recv() {
            self.merger.accept(m);
        }
        let Self {
            merger,
            handlers,
            tp,
            winsock,
            tgids,
            exit_id,
            group_dead_off,
            offset_ns,
            payload,
            readers,
            short_records,
            ..
        } = self;
        let group_dead_off = *group_dead_off;
        let streams = &readers.as_ref().unwrap().streams;
        let exit_id = *exit_id;
        let offset_ns = *offset_ns;
        merger.drain(|raw| {
            let data = raw.data;
            if data.len() < 8 {
                return true;
            }
            let id = u16::from_le_bytes([data[0], data[1]]);
            let tid = i32::from_le_bytes(data[4..8].try_into().unwrap()) as u32;
            let s = &streams[raw.stream];
            let filetime = ((raw.ts as i128 + offset_ns) / 100) as i64 + FILETIME_UNIX_EPOCH;
            let h = handlers[s.instance][id as usize];
            let mut go = true;
            if let Handler::Tp(i) | Handler::Both(i) = h {
                let (ev, spec) = &tp[i];
                if spec.accepts(4, 0) {
                    if !ev.pack(data, payload) {
                        *short_records += 1;
                    }
                    let inst = TlInstance {
                        pid: tgids.get(tid),
                        tid,
                        cpu: s.cpu,
                        timestamp: filetime,
                        activity_id: crate::Guid::ZERO,
                    };
                    let rec: EventRecord<'_> = tlg::event_record(&ev.schema, &inst, &payload[..]);
                    go = cb(&rec).is_continue();
                }
            }
            if let (Handler::Ws | Handler::Both(_), Some(ws)) = (h, winsock.as_mut()) {
                let tgid = tgids.get(tid);
                if !ws.on_raw(
                    s.instance,
                    id,
                    tid,
                    tgid,
                    s.cpu,
                    (filetime, raw.ts),
                    data,
                    &mut |rec| cb(rec).is_continue(),
                ) {
                    go = false;
                }
            }
            if Some(id) == exit_id && s.instance == 0 {
                if let Some(ws) = winsock.as_mut() {
                    let tgid = tgids.get(tid);
                    // group_dead, or (older kernels) the main thread's exit.
                    let group_dead = match group_dead_off {
                        Some(o) => data.get(o).is_some_and(|&b| b != 0),
                        None => tid == tgid,
                    };
                    ws.on_thread_exit(tid, tgid, s.cpu, filetime, group_dead, &mut |rec| {
                        cb(rec).is_continue()
                    });
                }
                tgids.forget(tid);
            }
            go
        })
    }

    fn finish_summary(&mut self) -> TraceSummary {
        let mut sum = self.summary.clone();
        let c = &self.merger.counters;
        sum.raw_records = c.events;
        let (mut overrun, mut commit_overrun, mut dropped) = (0, 0, 0);
        for i in &self.instances {
            for &cpu in &self.cpus {
                if let Ok(s) = tracefs::cpu_stats(i, cpu) {
                    overrun += s.overrun;
                    commit_overrun += s.commit_overrun;
                    dropped += s.dropped;
                }
            }
        }
        // Page flags and the overrun counter count the same losses (overwrite mode); report the
        // larger. Commit overruns and drops (no-overwrite mode) are losses neither of them counts.
        let lost_overwrite = overrun.max(c.lost_page_flags);
        sum.events_lost = lost_overwrite + commit_overrun + dropped;
        sum.lost_detail = vec![
            ("page_header_missed".into(), c.lost_page_flags),
            ("per_cpu_stats_overrun".into(), overrun),
            ("per_cpu_stats_commit_overrun".into(), commit_overrun),
            ("per_cpu_stats_dropped".into(), dropped),
            ("pages_flagged_uncounted".into(), c.lost_uncounted_pages),
        ];
        sum.issues.extend(c.issues.iter().cloned());
        if c.out_of_order > 0 {
            sum.issues.push(format!(
                "{} events reached the reader after later ones had been delivered (a CPU's ring was read late); they were delivered out of time order",
                c.out_of_order
            ));
        }
        if self.short_records > 0 {
            sum.issues.push(format!("{} tracepoint records were shorter than their format (missing fields written as 0)", self.short_records));
        }
        if let Some(ws) = &self.winsock {
            sum.issues.extend(ws.issues());
        }
        sum
    }
}

impl LinuxSession {
    /// Whether the pid filter has named no live task for a while. With `event-fork` the kernel adds
    /// children to the filter at fork and drops tasks when they are freed; a zombie still listed is
    /// dead. The grace period lets the softirq tail of the last process (FINs, resets) reach the ring.
    fn traced_pids_gone(&mut self) -> bool {
        const CHECK_EVERY: Duration = Duration::from_millis(100);
        const GRACE: Duration = Duration::from_millis(150);
        if self.last_pid_check.elapsed() < CHECK_EVERY {
            return false;
        }
        self.last_pid_check = std::time::Instant::now();
        let Ok(list) = std::fs::read_to_string(self.instances[0].join("set_event_pid")) else {
            return false;
        };
        let alive = list
            .split_whitespace()
            .filter_map(|t| t.parse::<u32>().ok())
            .any(task_alive);
        if alive {
            self.pids_gone_since = None;
            return false;
        }
        let since = *self
            .pids_gone_since
            .get_or_insert_with(std::time::Instant::now);
        since.elapsed() >= GRACE
    }
}

/// Whether the task exists and is not a zombie.
fn task_alive(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/stat")).is_ok_and(|s| {
        // The state follows the parenthesized command name, which may itself hold ') '.
        s.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|c| c != 'Z' && c != 'X')
    })
}

impl LiveSession for LinuxSession {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&mut self, pid: u32) -> Result<()> {
        for t in tracefs::threads_of(pid)? {
            tracefs::append(&self.instances[0].join("set_event_pid"), &format!("{t}\n"))?;
        }
        if !self.filtered {
            self.filtered = true;
        }
        self.watch_pids = true;
        tracefs::write(&self.instances[0].join("tracing_on"), "1")
    }

    fn spawn(&mut self, cmd: &mut Command) -> Result<Child> {
        let (Some(pf), Some(of)) = (&self.pid_file, &self.on_file) else {
            return Err(LiveError::NotStarted(self.name.clone()));
        };
        // The spawner decides when the trace ends (when its command exits).
        self.watch_pids = false;
        let pid_fd = pf.as_raw_fd();
        let on_fd = of.as_raw_fd();
        let filtered = self.filtered;
        // SAFETY: the closure runs in the forked child before exec and only calls async-signal-safe
        // functions (getpid, write) on descriptors the parent opened; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if filtered {
                    let mut buf = [0u8; 16];
                    let mut n = libc::getpid() as u32;
                    let mut i = buf.len() - 1;
                    buf[i] = b'\n';
                    loop {
                        i -= 1;
                        buf[i] = b'0' + (n % 10) as u8;
                        n /= 10;
                        if n == 0 {
                            break;
                        }
                    }
                    let len = buf.len() - i;
                    if libc::write(pid_fd, buf[i..].as_ptr().cast(), len) != len as isize {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::write(on_fd, b"1".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn()
            .map_err(|e| LiveError::Other(format!("cannot start {:?}: {e}", cmd.get_program())))
    }

    fn process(&mut self, cb: &mut Callback<'_>, stop: &AtomicBool) -> Result<()> {
        if self.stopped {
            return Err(LiveError::NotStarted(self.name.clone()));
        }
        loop {
            if stop.load(Ordering::SeqCst) {
                self.request_stop();
            }
            if !self.pump(cb, Duration::from_millis(20)) {
                return Ok(());
            }
            if self.watch_pids && !self.stop_requested && self.traced_pids_gone() {
                self.request_stop();
            }
            if self.stop_requested && self.merger.all_done() {
                // Events the Winsock correlator held back (binds waiting for their port) go out.
                if let Some(ws) = self.winsock.as_mut() {
                    let now = ((ring::realtime_now_ns()) / 100) as i64 + FILETIME_UNIX_EPOCH;
                    ws.finish(now, &mut |rec| cb(rec).is_continue());
                }
                return Ok(());
            }
        }
    }

    fn flush(&mut self) -> Result<()> {
        // tracefs records are readable as soon as they are committed: nothing is held back in the kernel.
        Ok(())
    }

    fn stop(&mut self) -> Result<TraceSummary> {
        if self.stopped {
            return Ok(self.summary.clone());
        }
        self.request_stop();
        // Drain without delivering (process() returned early or was never called).
        let mut sink = |_: &EventRecord<'_>| std::ops::ControlFlow::Continue(());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !self.merger.all_done() && std::time::Instant::now() < deadline {
            self.pump(&mut sink, Duration::from_millis(20));
        }
        let sum = self.finish_summary();
        if let Some(r) = self.readers.take() {
            r.request_stop();
            drop(r);
        }
        self.pid_file = None;
        self.on_file = None;
        let mut errors = Vec::new();
        for n in self.instance_names() {
            if let Err(e) = tracefs::remove_instance(&self.root, &n) {
                errors.push(e.to_string());
            }
        }
        if let Some(mut p) = self.probes.take() {
            if let Err(e) = p.remove() {
                errors.push(e.to_string());
            }
        }
        self.stopped = true;
        self.summary = sum.clone();
        if !errors.is_empty() {
            return Err(LiveError::Other(format!(
                "could not remove the session's instances: {}",
                errors.join("; ")
            )));
        }
        Ok(sum)
    }
}

impl Drop for LinuxSession {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = LiveSession::stop(self);
        }
    }
}

/// Whether the caller can run live tracing, as one sentence when it cannot.
pub fn check_available() -> Result<()> {
    tracefs::root().map(|_| ())
}

/// The name of a process (see [`crate::live::process_name`]): `/proc/PID/comm`, else the name
/// tracefs saved for the pid while events were enabled (one read of `saved_cmdlines`); `swapper`
/// for pid 0, the idle task of every CPU.
pub fn process_name(pid: u32) -> Option<String> {
    if pid == 0 {
        return Some("swapper".into());
    }
    if pid == u32::MAX {
        return None;
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| tracefs::saved_cmdline(pid))
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<LinuxSession>();
    let _ = Arc::new(());
}
