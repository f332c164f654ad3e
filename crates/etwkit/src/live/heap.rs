//! Heap tracing on any platform: one API over the platform's heap tracers.
//!
//! ```no_run
//! use etwkit::analysis::heap::HeapAnalyzer;
//! use etwkit::live::heap::{HeapOptions, HeapSession};
//! let mut cmd = std::process::Command::new("my-program");
//! let mut s = HeapSession::start(HeapOptions::command(&mut cmd)).unwrap();
//! use etwkit::live::heap::HeapTotals;
//! let mut an = HeapAnalyzer::new();
//! s.process(&mut |_| {}, &mut |op| { an.add(op); std::ops::ControlFlow::Continue(()) }).unwrap();
//! let mut totals = HeapTotals::default();
//! let _images = s.finish(&mut totals).unwrap();
//! let mut end = s.wait(&mut totals).unwrap();
//! an.add_totals(totals);
//! print!("{}", an.report(Some(end.namer.as_mut()), 20, 8).to_table());
//! ```
//!
//! How processes are traced ([`HeapMode`]):
//! - Linux: the allocator shim (preloaded into a command, or loaded into one running process), or
//!   perf uprobes on the allocator ([`crate::live::linux::heap`]); stacks named from the ELF files.
//! - Windows: an ETW heap session for the PIDs, the way xperf and PerfView start it (a command is
//!   created suspended, added, then resumed; [`crate::live::windows::heap`]), with kernel StackWalk
//!   stacks; frames are named `module+offset` from the image load events of a kernel session run
//!   beside it.
//! - [`HeapMode::Session`] (every platform, Windows' only mode): the heap provider through the
//!   ordinary [`Trace`] API of the platform's backend.

use std::ops::ControlFlow;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};

pub use crate::schema::builtin::heap_events::HeapTotals;

/// The provider names that select the heap provider (besides its GUID), on every platform.
pub const HEAP_PROVIDER_NAMES: [&str; 3] = ["HeapTraceProvider", "heap", "Microsoft-Windows-Heap"];

/// Whether `provider` (a name, any case, or a GUID, as `trace --provider` takes it) is the heap
/// provider, which traces processes only: a session enabling it needs pids or a command.
pub fn is_heap_provider(provider: &str) -> bool {
    match provider.parse::<crate::guid::Guid>() {
        Ok(g) => g == crate::schema::builtin::heap_events::HEAP_PROVIDER,
        Err(_) => HEAP_PROVIDER_NAMES
            .iter()
            .any(|h| h.eq_ignore_ascii_case(provider)),
    }
}

use crate::decode::heap::WindowsHeapEvents;
use crate::decode::symbols::{ModuleMap, ModuleNamer, StackNamer, Symbolizer};
use crate::live::{Etw, LiveError, Result, StopHandle, Trace};
use crate::schema::builtin::heap_events::{
    HeapOp, ImageMapping, EVENT_ALLOC, EVENT_FREE, EVENT_REALLOC,
};

/// Which heap operations carry a stack (StartHeapTrace's stack event list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapStacks {
    pub alloc: bool,
    pub realloc: bool,
    pub free: bool,
}

impl Default for HeapStacks {
    /// Allocations and reallocations (what a leak report needs).
    fn default() -> Self {
        HeapStacks::ALLOC
    }
}

impl HeapStacks {
    pub const NONE: HeapStacks = HeapStacks {
        alloc: false,
        realloc: false,
        free: false,
    };
    /// Allocations and reallocations (the default: what a leak report needs).
    pub const ALLOC: HeapStacks = HeapStacks {
        alloc: true,
        realloc: true,
        free: false,
    };

    /// Parses `alloc,realloc,free` (any subset; `none` for none).
    pub fn parse(s: &str) -> std::result::Result<HeapStacks, String> {
        let mut e = HeapStacks::NONE;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "alloc" => e.alloc = true,
                "realloc" => e.realloc = true,
                "free" => e.free = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown stack event {other:?} (expected alloc, realloc, free or none)"
                    ))
                }
            }
        }
        Ok(e)
    }

    /// The heap provider's event ids that carry a stack (Alloc 33, ReAlloc 34, Free 36).
    pub fn event_ids(&self) -> Vec<u16> {
        let mut v = Vec::new();
        if self.alloc {
            v.push(EVENT_ALLOC as u16);
        }
        if self.realloc {
            v.push(EVENT_REALLOC as u16);
        }
        if self.free {
            v.push(EVENT_FREE as u16);
        }
        v
    }
}

/// How processes are traced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeapMode {
    /// The best the platform has: Linux the shim wherever it can work, else uprobes; Windows the ETW
    /// heap session.
    #[default]
    Auto,
    /// Linux: the allocator shim only (exact and fast).
    Shim,
    /// Linux: perf uprobes only (slow, may lose events).
    Uprobe,
    /// The heap provider through the platform backend's [`Trace`] (Windows: the ETW heap session).
    Session,
}

impl HeapMode {
    pub fn parse(s: &str) -> std::result::Result<HeapMode, String> {
        match s {
            "auto" => Ok(HeapMode::Auto),
            "shim" => Ok(HeapMode::Shim),
            "uprobe" => Ok(HeapMode::Uprobe),
            "session" => Ok(HeapMode::Session),
            o => Err(format!(
                "unknown heap mode {o:?} (expected auto, shim, uprobe or session)"
            )),
        }
    }
}

/// What to trace, and how.
#[derive(Default)]
pub struct HeapOptions<'c> {
    /// Running processes to trace (every thread).
    pub pids: Vec<u32>,
    /// A command to start suspended and trace from its first allocation.
    pub command: Option<&'c mut Command>,
    pub stacks: HeapStacks,
    pub mode: HeapMode,
    /// Linux shim, one running process: also trace the children it forks from now on.
    pub follow_forks: bool,
    /// Deliver every operation in time order (to write them out). Otherwise the Linux shim may
    /// count short-lived allocation/free pairs inside the process, delivered as totals at the end.
    pub every_op: bool,
    /// The Linux allocator shim the caller carries (`$ETWKIT_HEAPSHIM` overrides it); ignored
    /// elsewhere. `Err`: why there is none, in one sentence.
    pub shim: Option<std::result::Result<&'static [u8], String>>,
    /// Session mode: the backend to trace through (default: the platform's, [`Etw::new`]).
    pub etw: Option<Etw>,
    /// Windows: name frames by function and line from the modules' PDB files along this symbol
    /// path (found through the image files the kernel's image events name).
    pub symbols: Option<crate::decode::symbols::SymbolPath>,
}

impl<'c> HeapOptions<'c> {
    /// Trace a command from its start (auto mode, stacks on allocations).
    pub fn command(cmd: &'c mut Command) -> HeapOptions<'c> {
        HeapOptions {
            command: Some(cmd),
            ..Default::default()
        }
    }

    /// Trace running processes (auto mode, stacks on allocations).
    pub fn pids(pids: &[u32]) -> HeapOptions<'c> {
        HeapOptions {
            pids: pids.to_vec(),
            ..Default::default()
        }
    }
}

/// What tracing left once it ended (before the command is waited for).
pub struct HeapFinish {
    /// The executable mappings (Linux) or loaded images (Windows) of the traced processes, for
    /// writing beside the heap events (etwkit's Image events).
    pub images: Vec<ImageMapping>,
    /// Events the platform lost.
    pub events_lost: u64,
}

/// The end of a heap trace: the command's status, a namer for the report's stacks, how it ran.
pub struct HeapEnd {
    pub status: Option<ExitStatus>,
    pub namer: Box<dyn StackNamer>,
    /// How the processes were traced, one phrase (e.g. `traced with the allocator shim`); the
    /// caller adds whether the figures are exact.
    pub mode: String,
}

/// A running heap trace.
pub struct HeapSession {
    inner: Inner,
    command_pid: Option<u32>,
}

enum Inner {
    #[cfg(target_os = "linux")]
    Linux(linux_heap::LinuxHeap),
    Session(Box<EtwHeap>),
}

impl HeapSession {
    /// Starts tracing. A command is started suspended, armed, then resumed (it runs once this
    /// returns). Errors are one sentence each.
    pub fn start(opts: HeapOptions<'_>) -> Result<HeapSession> {
        if opts.pids.is_empty() && opts.command.is_none() {
            return Err(LiveError::Other(
                "nothing to trace: give processes or a command".into(),
            ));
        }
        #[cfg(target_os = "linux")]
        if opts.mode != HeapMode::Session {
            let mut l = linux_heap::LinuxHeap::start(opts)?;
            return Ok(HeapSession {
                command_pid: l.command_pid(),
                inner: Inner::Linux(l),
            });
        }
        match opts.mode {
            HeapMode::Auto | HeapMode::Session => {}
            HeapMode::Shim | HeapMode::Uprobe => {
                return Err(LiveError::Unsupported(
                    "the shim and uprobe heap modes are Linux's: on this system heap tracing uses the ETW heap session".into(),
                ))
            }
        }
        if opts.follow_forks {
            return Err(LiveError::Unsupported(
                "following forks is a Linux shim feature: an ETW heap session traces the processes it is given".into(),
            ));
        }
        let s = EtwHeap::start(opts)?;
        Ok(HeapSession {
            command_pid: s.child.as_ref().map(Child::id),
            inner: Inner::Session(Box::new(s)),
        })
    }

    /// The process id of the command started, if one was.
    pub fn command_pid(&self) -> Option<u32> {
        self.command_pid
    }

    /// Makes [`HeapSession::process`] return (after delivering what is buffered).
    pub fn stop_handle(&self) -> StopHandle {
        match &self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.stop_handle(),
            Inner::Session(s) => s.trace.stop_handle(),
        }
    }

    /// The process the Linux shim was loaded into (attach mode).
    pub fn attached_pid(&self) -> Option<u32> {
        match &self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.attached_pid(),
            Inner::Session(_) => None,
        }
    }

    /// When tracing began, as a FILETIME, when it began after the process did (the Linux shim loaded
    /// into a running process): operations before it are not seen.
    pub fn tracing_started(&self) -> Option<i64> {
        match &self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.tracing_started(),
            Inner::Session(_) => None,
        }
    }

    /// Whether [`HeapSession::process`]'s `progress` counts records received (the shim) — their
    /// operations may arrive later than the records — rather than never being called.
    pub fn counts_records(&self) -> bool {
        match &self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.counts_records(),
            Inner::Session(_) => false,
        }
    }

    /// Delivers every heap operation (time order) until the traced processes end, the stop handle
    /// fires or `f` breaks. `progress` gets the number of records received, where counted.
    pub fn process(
        &mut self,
        progress: &mut dyn FnMut(u64),
        f: &mut dyn FnMut(&HeapOp) -> ControlFlow<()>,
    ) -> Result<()> {
        match &mut self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.process(progress, f),
            Inner::Session(s) => {
                let _ = progress;
                s.process(f)
            }
        }
    }

    /// Ends tracing: what the tracer knows besides the operations (totals, losses, notes) goes
    /// into `t`; the images to write beside the events.
    pub fn finish(&mut self, t: &mut HeapTotals) -> Result<HeapFinish> {
        match &mut self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.finish(t),
            Inner::Session(s) => s.finish(t),
        }
    }

    /// Waits for the traced command (if one was started); notes that depend on how it ended.
    pub fn wait(self, t: &mut HeapTotals) -> Result<HeapEnd> {
        match self.inner {
            #[cfg(target_os = "linux")]
            Inner::Linux(l) => l.wait(t),
            Inner::Session(s) => {
                let _ = t; // an ETW session's end adds nothing to the figures
                s.wait()
            }
        }
    }
}

/// A namer for the stacks of a saved trace: from the executable mappings it carries (etwkit's
/// Image events; Linux reads the ELF files named there for functions and lines) and the loaded
/// modules its own image events give (Windows Image/ImageID events: `module+offset`, and with
/// `symbols` the function and line from each module's PDB, named by its DbgID_RSDS event). `None`
/// when the file carries neither.
pub fn saved_trace_namer(
    images: &[ImageMapping],
    modules: ModuleMap,
    symbols: Option<Symbolizer>,
) -> Option<Box<dyn StackNamer>> {
    // ELF files named by absolute paths (traces written by etwkit on Linux).
    #[cfg(target_os = "linux")]
    if modules.is_empty() && images.iter().all(|m| m.path.starts_with('/')) {
        if let Some(n) = crate::live::linux::unwind::LinuxStackNamer::from_images(images) {
            return Some(Box::new(n));
        }
    }
    let mut modules = modules;
    for m in images {
        modules.insert_mapping(m);
    }
    match (modules.is_empty(), symbols) {
        (true, _) => None,
        (false, Some(s)) => Some(Box::new(ModuleNamer::with_symbols(modules, s))),
        (false, None) => Some(Box::new(ModuleNamer::new(modules))),
    }
}

/// The heap provider through the backend's [`Trace`] (Windows: the ETW heap session, with a kernel
/// image session beside it for module names).
struct EtwHeap {
    trace: Trace,
    child: Option<Child>,
    waiter: Option<std::thread::JoinHandle<()>>,
    events: WindowsHeapEvents,
    images: Option<ImageSession>,
    /// Why frames have no module names, if they have not.
    image_issue: Option<String>,
    traced: Vec<u32>,
    /// The backend is ETW (Windows' heap session).
    etw_backend: bool,
    /// The images seen, once tracing ended.
    modules: Option<ModuleMap>,
    /// Where the modules' PDBs are.
    symbols: Option<crate::decode::symbols::SymbolPath>,
    lost: u64,
    issues: Vec<String>,
}

/// A kernel session that delivers image loads (and the rundown of loaded images) on a thread.
struct ImageSession {
    stop: StopHandle,
    thread: std::thread::JoinHandle<Result<()>>,
    modules: Arc<Mutex<ModuleMap>>,
}

impl ImageSession {
    fn start(etw: &Etw, name: &str) -> Result<ImageSession> {
        use crate::live::windows::properties::{kernel_flags, SYSTEM_TRACE_CONTROL_GUID};
        let mut t = etw.open_trace(name, None, None);
        t.enable_ex(
            SYSTEM_TRACE_CONTROL_GUID,
            0,
            crate::live::Level::VERBOSE,
            (kernel_flags::PROCESS | kernel_flags::IMAGE_LOAD) as u64,
            0,
        )?;
        t.start()?;
        let stop = t.stop_handle();
        let modules = Arc::new(Mutex::new(ModuleMap::new()));
        let m = modules.clone();
        let thread = std::thread::spawn(move || {
            let r = t.process(
                |ev| {
                    if let Ok(mut m) = m.lock() {
                        m.push(ev);
                    }
                    ControlFlow::Continue(())
                },
                None,
                None,
            );
            let _ = t.stop(true);
            r
        });
        Ok(ImageSession {
            stop,
            thread,
            modules,
        })
    }

    fn finish(self) -> (ModuleMap, Option<String>) {
        self.stop.stop();
        let r = self.thread.join();
        let modules = std::mem::take(&mut *self.modules.lock().unwrap_or_else(|e| e.into_inner()));
        let issue = match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("the image-load session failed: {e}")),
            Err(_) => Some("the image-load session's thread panicked".into()),
        };
        (modules, issue)
    }
}

impl EtwHeap {
    fn start(opts: HeapOptions<'_>) -> Result<EtwHeap> {
        let etw = opts.etw.unwrap_or_default();
        let name = format!("etwkit-heap-{}", std::process::id());
        let mut trace = etw.open_heap_trace(&name, None, &opts.stacks.event_ids())?;
        for &p in &opts.pids {
            trace.add_pid(p)?;
        }
        // Module names come from a kernel session's image events (ETW only: other backends'
        // heap events name their stacks themselves).
        let (images, image_issue) = if etw.is_etw() {
            match ImageSession::start(&etw, &format!("{name}-images")) {
                Ok(s) => (Some(s), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "frames are addresses only: the image-load session could not start ({e})"
                    )),
                ),
            }
        } else {
            (None, None)
        };
        let etw_backend = etw.is_etw();
        let mut traced = opts.pids.clone();
        let started = match opts.command {
            Some(cmd) => trace.spawn(cmd).map(Some),
            None => trace.start().map(|()| None),
        };
        let child = match started {
            Ok(c) => c,
            Err(e) => {
                // Leave no kernel session behind.
                if let Some(s) = images {
                    s.finish();
                }
                return Err(e);
            }
        };
        traced.extend(child.as_ref().map(Child::id));
        // The trace ends when the traced processes have (the command is waited for in `wait`).
        let waiter = match &child {
            Some(_) => None,
            None => Some(watch_pids(opts.pids.clone(), trace.stop_handle())),
        };
        Ok(EtwHeap {
            trace,
            child,
            waiter,
            events: WindowsHeapEvents::new(),
            images,
            image_issue,
            traced,
            etw_backend,
            modules: None,
            symbols: opts.symbols,
            lost: 0,
            issues: Vec::new(),
        })
    }

    fn process(&mut self, f: &mut dyn FnMut(&HeapOp) -> ControlFlow<()>) -> Result<()> {
        // A command: the trace stops once it has exited.
        let exited = self
            .child
            .as_ref()
            .map(|c| watch_pids(vec![c.id()], self.trace.stop_handle()));
        // Stacks follow their events (kernel StackWalk) and realtime buffers of different CPUs
        // interleave: an operation goes out, in time order, once it is older than the newest
        // record by the window (WindowsHeapEvents), so memory holds seconds, not the whole trace.
        let events = &mut self.events;
        let mut flow = ControlFlow::Continue(());
        let r = self.trace.process(
            |ev| {
                events.push(ev);
                events.release(&mut |op| {
                    if flow.is_continue() {
                        flow = f(&op);
                    }
                });
                flow
            },
            None,
            None,
        );
        self.trace.stop_handle().stop();
        if let Some(t) = exited {
            let _ = t.join();
        }
        let sum = self.trace.stop(true)?;
        self.lost = sum.events_lost;
        self.issues = sum.issues;
        r?;
        self.events.drain(&mut |op| {
            if flow.is_continue() {
                flow = f(&op);
            }
        });
        Ok(())
    }

    fn finish(&mut self, t: &mut HeapTotals) -> Result<HeapFinish> {
        t.lost += self.lost;
        for i in self.issues.drain(..) {
            t.notes.push(i);
        }
        let mut images = Vec::new();
        if let Some(s) = self.images.take() {
            let (modules, issue) = s.finish();
            if let Some(i) = issue {
                self.image_issue = Some(format!("frames are addresses only: {i}"));
            }
            images = modules.mappings_of(&self.traced);
            self.modules = Some(modules);
        }
        if let Some(i) = &self.image_issue {
            t.notes.push(i.clone());
        }
        if let Some(w) = self.waiter.take() {
            self.trace.stop_handle().stop();
            let _ = w.join();
        }
        Ok(HeapFinish {
            images,
            events_lost: self.lost,
        })
    }

    fn wait(mut self: Box<Self>) -> Result<HeapEnd> {
        let status = match self.child.as_mut() {
            Some(c) => Some(
                c.wait()
                    .map_err(|e| LiveError::Other(format!("waiting for the command: {e}")))?,
            ),
            None => None,
        };
        let modules = self.modules.take().unwrap_or_default();
        let namer = match self.symbols.take() {
            Some(p) => ModuleNamer::with_symbols(modules, Symbolizer::new(p)),
            None => ModuleNamer::new(modules),
        };
        Ok(HeapEnd {
            status,
            namer: Box::new(namer),
            mode: if self.etw_backend {
                "traced with an ETW heap session".into()
            } else {
                "traced with the heap provider's session".into()
            },
        })
    }
}

/// Sets `stop` once none of `pids` runs any more (checked every 100 ms).
fn watch_pids(pids: Vec<u32>, stop: StopHandle) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.is_stopped() {
            if !pids.iter().any(|&p| process_alive(p)) {
                // The tail of the processes' events reaches the buffers.
                std::thread::sleep(std::time::Duration::from_millis(150));
                stop.stop();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    })
}

/// Whether a process runs (not a zombie).
fn process_alive(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    return crate::live::linux::heap::process_alive(pid);
    #[cfg(not(target_os = "linux"))]
    crate::live::windows::process_alive(pid)
}

#[cfg(target_os = "linux")]
mod linux_heap;
