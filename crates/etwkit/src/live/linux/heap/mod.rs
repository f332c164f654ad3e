//! Heap tracing of chosen processes on Linux (the StartHeapTrace job).
//!
//! Allocator entry points of the target's libc get perf_event_open **uprobe PMU** events opened
//! for the target threads only (pid = each tid, `inherit` for threads and children created later,
//! one event per CPU): breakpoints go into the target's memory map alone, so no other process on
//! the machine pays (tracefs uprobes are inode-wide and slow every libc user). Entry samples carry
//! the argument registers and, for the configured events, a copy of the user stack that
//! [`crate::live::linux::unwind`] unwinds with DWARF; return probes carry the returned address.
//! Entry and return are paired per thread; calls nested inside another traced call (realloc(NULL)
//! calling malloc, posix_memalign calling malloc...) are folded into the outer one.
//!
//! [`spawn_suspended`] starts a command stopped before its first instruction (PTRACE_TRACEME),
//! so probes are armed before its first allocation; [`SuspendedChild::resume`] lets it run.

pub mod inject;
pub mod perf;
pub mod probes;
mod safe_point;
pub mod session;
pub mod shim;
pub mod tracefs;

use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::live::linux::unwind::{Mapping, Unwinder, UserRegs};
use crate::schema::builtin::heap_events::{HeapOp, HeapOpKind};
use perf::{reg_idx, PerfEventAttr, Ring};
use probes::{Func, ProbeSite};

/// Errors of the heap tracer.
#[derive(Debug, thiserror::Error)]
pub enum HeapError {
    #[error("heap tracing needs root or CAP_PERFMON: {0}")]
    Permission(String),
    #[error("{}", crate::live::LiveError::NotRoot)]
    NotRoot,
    #[error("process {0} not found")]
    NoProcess(u32),
    #[error("{0}")]
    Setup(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> HeapError {
    move |source| HeapError::Io {
        context: context.into(),
        source,
    }
}

/// Which operations carry a stack: the platform-neutral [`crate::live::heap::HeapStacks`].
pub use crate::live::heap::HeapStacks as StackEvents;

impl StackEvents {
    fn wants(&self, f: Func) -> bool {
        match f {
            Func::Free => self.free,
            f if f.is_realloc() => self.realloc,
            _ => self.alloc,
        }
    }
}

/// Tuning knobs (defaults fit the measured machine).
#[derive(Clone, Debug)]
pub struct HeapOptions {
    pub stacks: StackEvents,
    /// Bytes of user stack copied per stacked event (DWARF unwinding walks this copy).
    pub stack_bytes: u32,
    /// Data pages per CPU ring (a power of two).
    pub ring_pages: usize,
    /// Deepest stack kept.
    pub max_frames: usize,
}

impl Default for HeapOptions {
    fn default() -> Self {
        HeapOptions {
            stacks: StackEvents::ALLOC,
            stack_bytes: 8 * 1024,
            ring_pages: 4096,
            max_frames: 64,
        }
    }
}

/// A command started stopped before its first instruction (the CREATE_SUSPENDED of StartHeapTrace).
pub struct SuspendedChild {
    child: Child,
}

/// Starts `cmd` stopped right after exec (PTRACE_TRACEME in the child): no instruction of the new
/// program has run, its libc is not even mapped yet. Arm tracing on [`SuspendedChild::pid`], then
/// [`SuspendedChild::resume`].
pub fn spawn_suspended(cmd: &mut Command) -> Result<SuspendedChild, HeapError> {
    // SAFETY: the closure runs in the forked child before exec and only makes the async-signal-safe
    // ptrace(PTRACE_TRACEME) system call.
    unsafe {
        cmd.pre_exec(perf::ptrace_traceme);
    }
    let child = cmd
        .spawn()
        .map_err(io_err(format!("cannot start {:?}", cmd.get_program())))?;
    let pid = child.id() as i32;
    perf::wait_stopped(pid)
        .map_err(io_err("waiting for the started command to stop after exec"))?;
    Ok(SuspendedChild { child })
}

impl SuspendedChild {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    /// Detaches (ptrace) and lets the program run. The returned `Child` is waited as usual.
    pub fn resume(self) -> Result<Child, HeapError> {
        perf::ptrace_detach(self.child.id() as i32)
            .map_err(io_err("resuming the started command"))?;
        Ok(self.child)
    }
}

#[derive(Clone, Copy, Debug)]
struct ProbeKind {
    func: Func,
    ret: bool,
}

/// One call in flight on a thread (entry seen, return not yet).
struct InFlight {
    func: Func,
    nested: bool,
    /// Stack pointer at entry: a call made inside this one has a lower one.
    sp: u64,
    a0: u64,
    a1: u64,
    a2: u64,
    stack: Option<Arc<[u64]>>,
}

/// A sample reduced to what pairing needs (parsed while its ring bytes are at hand).
struct Parsed {
    time: u64,
    pid: u32,
    tid: u32,
    kind: ProbeKind,
    regs: [u64; reg_idx::COUNT],
    /// Entry: the unwound stack. posix_memalign's return: the copied stack words (for *memptr).
    stack: Option<Arc<[u64]>>,
}

/// Counters of a heap session (what could make figures inexact is counted, never dropped silently).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HeapTraceStats {
    pub samples: u64,
    /// Samples the kernel dropped (PERF_RECORD_LOST): figures are not exact when > 0.
    pub lost_samples: u64,
    /// Return samples with no matching entry on their thread (an entry was lost).
    pub unmatched_returns: u64,
    /// In-flight calls dropped because a later call at the same stack depth began (return lost).
    pub lost_returns: u64,
    /// Entries never returned when the trace ended (calls in flight, or lost returns).
    pub pending_at_end: u64,
    /// Allocation calls that returned NULL.
    pub failed_allocations: u64,
    pub stacks_unwound: u64,
    pub threads_attached: u64,
    pub probe_fds: u64,
}

impl HeapTraceStats {
    /// Why the figures may not be exact, one sentence each (lost samples are counted apart).
    pub fn notes(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.unmatched_returns > 0 {
            v.push(format!(
                "{} allocator returns without their entry (lost, or the call began before tracing)",
                self.unmatched_returns
            ));
        }
        if self.lost_returns > 0 {
            v.push(format!(
                "{} allocator calls whose return was lost (not counted)",
                self.lost_returns
            ));
        }
        if self.pending_at_end > 0 {
            v.push(format!(
                "{} allocator calls still in flight when tracing stopped",
                self.pending_at_end
            ));
        }
        v
    }
}

/// A live heap trace of some processes. Drive it with [`HeapTrace::process`].
pub struct HeapTrace {
    opts: HeapOptions,
    sites: HashMap<std::path::PathBuf, Vec<ProbeSite>>,
    cpus: Vec<i32>,
    rings: HashMap<i32, Ring>,
    fds: Vec<OwnedFd>,
    ids: HashMap<u64, ProbeKind>,
    attached_tids: HashSet<u32>,
    roots: Vec<u32>,
    exited: HashSet<u32>,
    threads: HashMap<u32, Vec<InFlight>>,
    pending: Vec<Parsed>,
    unwinder: Unwinder,
    clock: (u64, u64),
    stop: Arc<AtomicBool>,
    stats: HeapTraceStats,
    /// Tracepoint id of each (probe site, return?) defined in tracefs.
    tp_ids: HashMap<(std::path::PathBuf, u64, bool), u64>,
    /// CLOCK_MONOTONIC ns when the last attach completed: returns without entry before it are calls
    /// that began before the entry probes existed, not losses.
    armed_at: u64,
    /// Declared last: dropped after every perf fd is closed.
    defs: tracefs::UprobeDefs,
}

/// Starts heap tracing of running processes (every thread), like StartHeapTrace with a PID list.
pub fn heap_trace(pids: &[u32], stack_events: StackEvents) -> Result<HeapTrace, HeapError> {
    HeapTrace::attach(
        pids,
        HeapOptions {
            stacks: stack_events,
            ..Default::default()
        },
    )
}

impl HeapTrace {
    fn new(opts: HeapOptions) -> Result<HeapTrace, HeapError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Uprobe definitions live in tracefs, which only root may mount and write.
            return Err(HeapError::NotRoot);
        }
        let defs = tracefs::UprobeDefs::new().map_err(HeapError::Setup)?;
        perf::raise_fd_limit();
        if !opts.ring_pages.is_power_of_two() {
            return Err(HeapError::Setup(format!(
                "ring_pages must be a power of two, not {}",
                opts.ring_pages
            )));
        }
        Ok(HeapTrace {
            armed_at: 0,
            tp_ids: HashMap::new(),
            defs,
            opts,
            sites: HashMap::new(),
            cpus: perf::online_cpus(),
            rings: HashMap::new(),
            fds: Vec::new(),
            ids: HashMap::new(),
            attached_tids: HashSet::new(),
            roots: Vec::new(),
            exited: HashSet::new(),
            threads: HashMap::new(),
            pending: Vec::new(),
            unwinder: Unwinder::new(),
            clock: perf::clocks_now(),
            stop: Arc::new(AtomicBool::new(false)),
            stats: HeapTraceStats::default(),
        })
    }

    /// Attaches to running processes: every thread listed in /proc/PID/task, re-listed until stable.
    pub fn attach(pids: &[u32], opts: HeapOptions) -> Result<HeapTrace, HeapError> {
        let mut t = HeapTrace::new(opts)?;
        for &pid in pids {
            t.add_process(pid, false)?;
        }
        Ok(t)
    }

    /// Arms tracing on a [`SuspendedChild`] (its libc is not mapped yet: the probes go on the libc this
    /// process uses, which the dynamic loader will map). Call [`SuspendedChild::resume`] afterwards.
    pub fn for_suspended(
        child: &SuspendedChild,
        opts: HeapOptions,
    ) -> Result<HeapTrace, HeapError> {
        let mut t = HeapTrace::new(opts)?;
        t.add_process(child.pid(), true)?;
        Ok(t)
    }

    /// Adds one more process to a running trace.
    pub fn add_process(&mut self, pid: u32, suspended: bool) -> Result<(), HeapError> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(HeapError::NoProcess(pid));
        }
        let libc = probes::libc_path(if suspended { None } else { Some(pid) })
            .map_err(HeapError::Setup)?;
        if !self.sites.contains_key(&libc) {
            let s = probes::resolve(&libc).map_err(HeapError::Setup)?;
            for (i, site) in s.iter().enumerate() {
                for ret in [false, true] {
                    if ret && !site.func.returns() {
                        continue;
                    }
                    let id = self.defs.define(site, ret, i).map_err(|e| {
                        match e.contains("Permission denied") {
                            true => HeapError::Permission(e),
                            false => HeapError::Setup(e),
                        }
                    })?;
                    self.tp_ids
                        .insert((site.path.clone(), site.offset, ret), id);
                }
            }
            self.sites.insert(libc.clone(), s);
        }
        let _ = self.unwinder.load_proc_maps(pid);
        self.roots.push(pid);
        // Threads may start while we attach: list until no new one appears.
        loop {
            let tids = list_tids(pid);
            if tids.is_empty() {
                return Err(HeapError::NoProcess(pid));
            }
            let new: Vec<u32> = tids
                .into_iter()
                .filter(|t| !self.attached_tids.contains(t))
                .collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                match self.attach_thread(&libc, tid) {
                    Ok(()) => {}
                    // The thread exited between listing and opening.
                    Err(HeapError::Io { source, .. })
                        if source.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(e),
                }
                self.attached_tids.insert(tid);
            }
        }
        self.armed_at = perf::clocks_now().0;
        Ok(())
    }

    fn attach_thread(&mut self, libc: &std::path::Path, tid: u32) -> Result<(), HeapError> {
        let sites = self.sites[libc].clone();
        let cpus = self.cpus.clone();
        // Return probes first, on every CPU, then entries: an entry seen always gets its return
        // (a call entered before its return probe existed is never seen at all).
        let mut first_on_cpu: HashSet<i32> = HashSet::new();
        for ret in [true, false] {
            for &cpu in &cpus {
                for site in &sites {
                    if ret && !site.func.returns() {
                        continue;
                    }
                    let first = first_on_cpu.insert(cpu);
                    let mut attr = PerfEventAttr {
                        sample_type: perf::SAMPLE_IDENTIFIER
                            | perf::SAMPLE_TID
                            | perf::SAMPLE_TIME
                            | perf::SAMPLE_CPU
                            | perf::SAMPLE_REGS_USER,
                        sample_regs_user: perf::REGS_MASK,
                        flags: perf::FLAG_INHERIT
                            | perf::FLAG_EXCLUDE_KERNEL
                            | perf::FLAG_EXCLUDE_HV
                            | perf::FLAG_SAMPLE_ID_ALL
                            | perf::FLAG_USE_CLOCKID
                            | perf::FLAG_WATERMARK,
                        clockid: libc::CLOCK_MONOTONIC,
                        wakeup_events: (self.opts.ring_pages as u32 * 4096) / 8,
                        ..Default::default()
                    };
                    if !ret && self.opts.stacks.wants(site.func) && self.opts.stack_bytes > 0 {
                        attr.sample_type |= perf::SAMPLE_STACK_USER;
                        attr.sample_stack_user = self.opts.stack_bytes & !7;
                    }
                    if ret && site.func == Func::PosixMemalign {
                        // *memptr usually lives in the caller's frame, just above the return sp.
                        attr.sample_type |= perf::SAMPLE_STACK_USER;
                        attr.sample_stack_user = 512;
                    }
                    if first {
                        // Side-band (mmaps, forks, exits, comm) once per thread and CPU.
                        attr.flags |=
                            perf::FLAG_MMAP | perf::FLAG_MMAP2 | perf::FLAG_COMM | perf::FLAG_TASK;
                    }
                    let tp = self.tp_ids[&(site.path.clone(), site.offset, ret)];
                    let fd = perf::open_tracepoint(tp, tid as i32, cpu, &attr)
                        .map_err(|e| match e.raw_os_error() {
                            Some(libc::EACCES) | Some(libc::EPERM) => HeapError::Permission(e.to_string()),
                            _ => HeapError::Io {
                                context: format!(
                                    "perf_event_open uprobe {}{} at {}:{:#x} for tid {tid} cpu {cpu}",
                                    site.func.name(),
                                    if ret { " (return)" } else { "" },
                                    site.path.display(),
                                    site.offset
                                ),
                                source: e,
                            },
                        })?;
                    let id = perf::event_id(&fd).map_err(io_err("PERF_EVENT_IOC_ID"))?;
                    self.ids.insert(
                        id,
                        ProbeKind {
                            func: site.func,
                            ret,
                        },
                    );
                    if let Some(ring) = self.rings.get(&cpu) {
                        perf::set_output(&fd, &ring.fd)
                            .map_err(io_err("PERF_EVENT_IOC_SET_OUTPUT"))?;
                        self.fds.push(fd);
                    } else {
                        let ring = Ring::map(fd, self.opts.ring_pages)
                            .map_err(io_err("mmap of the perf ring"))?;
                        self.rings.insert(cpu, ring);
                    }
                    self.stats.probe_fds += 1;
                }
            }
        }
        self.stats.threads_attached += 1;
        Ok(())
    }

    /// A flag that makes [`HeapTrace::process`] return after a final drain when set.
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub fn stats(&self) -> &HeapTraceStats {
        &self.stats
    }

    pub fn unwinder(&self) -> &Unwinder {
        &self.unwinder
    }

    /// The processes given to the trace (roots; children they fork are traced too).
    pub fn roots(&self) -> &[u32] {
        &self.roots
    }

    /// Delivers heap operations in time order until every root process has exited, the stop flag is
    /// set, or `f` breaks. Every op reaches `f` exactly once.
    pub fn process(
        &mut self,
        mut f: impl FnMut(&HeapOp) -> ControlFlow<()>,
    ) -> Result<(), HeapError> {
        loop {
            let done = self.stop.load(Ordering::Relaxed) || self.all_roots_gone();
            if !done {
                let fds: Vec<i32> = self.rings.values().map(|r| r.fd.as_raw_fd()).collect();
                perf::poll_fds(&fds, 50).map_err(io_err("poll on perf rings"))?;
            }
            self.drain_rings();
            // Samples of one thread can sit in two CPU rings; order by time and hold back the last
            // few milliseconds, which a slower ring may still be writing.
            let horizon = if done {
                u64::MAX
            } else {
                perf::clocks_now().0.saturating_sub(20_000_000)
            };
            if self.deliver(horizon, &mut f).is_break() {
                return Ok(());
            }
            if done {
                self.stats.pending_at_end = self
                    .threads
                    .values()
                    .map(|v| v.iter().filter(|c| !c.nested).count() as u64)
                    .sum();
                return Ok(());
            }
        }
    }

    fn all_roots_gone(&self) -> bool {
        self.roots
            .iter()
            .all(|p| self.exited.contains(p) || !process_alive(*p))
    }

    fn drain_rings(&mut self) {
        let mut cpus: Vec<i32> = self.rings.keys().copied().collect();
        cpus.sort();
        // Pass 1: side-band records of every ring first (a library mapped on one CPU must be known
        // before unwinding a sample taken on another).
        let mut seen = HashMap::new();
        for &cpu in &cpus {
            let Some(mut ring) = self.rings.remove(&cpu) else {
                continue;
            };
            let mut side = Vec::new();
            let head = ring.read(false, |_, rec| {
                if u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) != perf::RECORD_SAMPLE {
                    side.push(rec.to_vec());
                }
            });
            seen.insert(cpu, head);
            self.rings.insert(cpu, ring);
            for rec in side {
                self.side_band(&rec);
            }
        }
        // Pass 2: samples, parsed in place (stacks unwound while the copy is in the ring); side-band
        // records that arrived after pass 1 are applied here.
        let mut samples: Vec<Parsed> = Vec::new();
        for cpu in cpus {
            let Some(mut ring) = self.rings.remove(&cpu) else {
                continue;
            };
            let seen_head = seen.get(&cpu).copied().unwrap_or(0);
            ring.read(true, |pos, rec| {
                let t = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
                if t == perf::RECORD_SAMPLE {
                    if let Some(p) = self.parse_sample(rec) {
                        samples.push(p);
                    }
                } else if pos >= seen_head {
                    self.side_band(rec);
                }
            });
            self.rings.insert(cpu, ring);
        }
        self.pending.extend(samples);
    }

    fn side_band(&mut self, rec: &[u8]) {
        let t = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let body = &rec[8..];
        let u32_at = |o: usize| {
            body.get(o..o + 4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                .unwrap_or(0)
        };
        let u64_at = |o: usize| {
            body.get(o..o + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
                .unwrap_or(0)
        };
        match t {
            perf::RECORD_LOST => self.stats.lost_samples += u64_at(8),
            perf::RECORD_LOST_SAMPLES => self.stats.lost_samples += u64_at(0),
            perf::RECORD_EXIT => {
                let (pid, tid) = (u32_at(0), u32_at(8));
                if pid == tid {
                    self.exited.insert(pid);
                }
            }
            perf::RECORD_FORK => {
                let (pid, ppid) = (u32_at(0), u32_at(4));
                if pid != ppid {
                    self.unwinder.fork(ppid, pid);
                }
            }
            perf::RECORD_MMAP2 => {
                // pid, tid, addr, len, pgoff, (maj, min, ino, ino_gen | build id), prot, flags, filename.
                let pid = u32_at(0);
                let (addr, len, pgoff) = (u64_at(8), u64_at(16), u64_at(24));
                let prot = u32_at(56);
                let name = body.get(64..).unwrap_or(&[]);
                let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
                if prot & libc::PROT_EXEC as u32 != 0 && name.first() == Some(&b'/') {
                    let path = std::path::Path::new(std::str::from_utf8(name).unwrap_or(""));
                    self.unwinder.add_mapping(
                        pid,
                        Mapping {
                            start: addr,
                            end: addr + len,
                            pgoff,
                            path: Arc::from(path),
                        },
                    );
                }
            }
            _ => {}
        }
    }

    /// Parses a PERF_RECORD_SAMPLE laid out as IDENTIFIER, TID, TIME, CPU, REGS_USER[, STACK_USER].
    fn parse_sample(&mut self, rec: &[u8]) -> Option<Parsed> {
        self.stats.samples += 1;
        let mut r = Cursor { b: rec, p: 8 };
        let id = r.u64()?;
        let kind = *self.ids.get(&id)?;
        let pid = r.u32()?;
        let tid = r.u32()?;
        let time = r.u64()?;
        let _cpu = r.u64()?;
        let abi = r.u64()?;
        let mut regs = [0u64; reg_idx::COUNT];
        if abi != 0 {
            for v in regs.iter_mut() {
                *v = r.u64()?;
            }
        }
        let mut stack = None;
        let has_stack =
            (!kind.ret && self.opts.stacks.wants(kind.func) && self.opts.stack_bytes > 0)
                || (kind.ret && kind.func == Func::PosixMemalign);
        if has_stack {
            let size = r.u64()? as usize;
            let data = r.bytes(size)?;
            let dyn_size = if size > 0 { r.u64()? as usize } else { 0 };
            let data = &data[..dyn_size.min(data.len())];
            if kind.ret {
                // posix_memalign's return: keep the copied words; *memptr is looked up at pairing.
                let words: Vec<u64> = data
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                stack = Some(Arc::from(words));
            } else if abi != 0 {
                let regs = UserRegs {
                    ip: regs[reg_idx::IP],
                    sp: regs[reg_idx::SP],
                    bp: regs[reg_idx::BP],
                };
                let frames = self.unwinder.unwind(pid, regs, data, self.opts.max_frames);
                self.stats.stacks_unwound += 1;
                stack = Some(Arc::from(frames));
            }
        }
        Some(Parsed {
            time,
            pid,
            tid,
            kind,
            regs,
            stack,
        })
    }

    fn filetime(&self, mono_ns: u64) -> i64 {
        let (mono0, real0) = self.clock;
        let real = real0 as i128 + (mono_ns as i128 - mono0 as i128);
        (real / 100) as i64 + 116_444_736_000_000_000
    }

    fn deliver(
        &mut self,
        horizon: u64,
        f: &mut impl FnMut(&HeapOp) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.pending.sort_by_key(|p| p.time);
        let n = self.pending.partition_point(|p| p.time <= horizon);
        let ready: Vec<Parsed> = self.pending.drain(..n).collect();
        for p in ready {
            if let Some(op) = self.pair(p) {
                f(&op)?;
            }
        }
        ControlFlow::Continue(())
    }

    /// Pairs entries and returns on a thread; returns the heap operation a return (or free) completes.
    fn pair(&mut self, p: Parsed) -> Option<HeapOp> {
        let timestamp = self.filetime(p.time);
        let calls = self.threads.entry(p.tid).or_default();
        let regs = &p.regs;
        let op = |kind, stack| HeapOp {
            pid: p.pid,
            tid: p.tid,
            timestamp,
            api: p.kind.func.name(),
            kind,
            stack,
        };
        if !p.kind.ret {
            // In-flight calls at the same or a shallower stack depth have returned unseen (lost
            // return sample): drop them, or they would make every later call look nested.
            let sp = regs[reg_idx::SP];
            let live = calls.partition_point(|c| c.sp > sp);
            self.stats.lost_returns += (calls.len() - live) as u64;
            calls.truncate(live);
            let nested = !calls.is_empty();
            if p.kind.func == Func::Free {
                let addr = regs[reg_idx::DI];
                if nested || addr == 0 {
                    return None;
                }
                return Some(op(HeapOpKind::Free { address: addr }, p.stack));
            }
            calls.push(InFlight {
                func: p.kind.func,
                nested,
                sp,
                a0: regs[reg_idx::DI],
                a1: regs[reg_idx::SI],
                a2: regs[reg_idx::DX],
                stack: p.stack,
            });
            return None;
        }
        // A return: its entry is the innermost in-flight call of the same function.
        let Some(pos) = calls.iter().rposition(|c| c.func == p.kind.func) else {
            if p.time > self.armed_at {
                self.stats.unmatched_returns += 1;
            }
            return None;
        };
        // Anything above it lost its return: drop it (counted as unmatched).
        let dropped = calls.len() - pos - 1;
        self.stats.unmatched_returns += dropped as u64;
        calls.truncate(pos + 1);
        let c = calls.pop().expect("in-flight call");
        if c.nested {
            return None;
        }
        let ret = regs[reg_idx::AX];
        let kind = match c.func {
            Func::Malloc | Func::Valloc | Func::Pvalloc => {
                (ret != 0).then_some(HeapOpKind::Alloc {
                    address: ret,
                    size: c.a0,
                })
            }
            Func::Calloc => (ret != 0).then_some(HeapOpKind::Alloc {
                address: ret,
                size: c.a0.wrapping_mul(c.a1),
            }),
            Func::Memalign => (ret != 0).then_some(HeapOpKind::Alloc {
                address: ret,
                size: c.a1,
            }),
            Func::PosixMemalign => {
                if ret as u32 != 0 {
                    None
                } else {
                    let memptr = c.a0;
                    let sp = regs[reg_idx::SP];
                    let from_copy = memptr.checked_sub(sp).filter(|d| d % 8 == 0).and_then(|d| {
                        p.stack
                            .as_ref()
                            .and_then(|s| s.get((d / 8) as usize).copied())
                    });
                    let value = from_copy.or_else(|| {
                        let mut b = [0u8; 8];
                        perf::read_process_memory(p.pid as i32, memptr, &mut b)
                            .ok()
                            .map(|_| u64::from_le_bytes(b))
                    });
                    value.map(|address| HeapOpKind::Alloc {
                        address,
                        size: c.a2,
                    })
                }
            }
            Func::Realloc | Func::ReallocArray => {
                let size = if c.func == Func::ReallocArray {
                    c.a1.wrapping_mul(c.a2)
                } else {
                    c.a1
                };
                let old = c.a0;
                if old == 0 {
                    (ret != 0).then_some(HeapOpKind::Alloc { address: ret, size })
                } else if ret == 0 && size == 0 {
                    Some(HeapOpKind::Free { address: old })
                } else if ret == 0 {
                    None
                } else {
                    Some(HeapOpKind::Realloc {
                        old_address: old,
                        new_address: ret,
                        new_size: size,
                    })
                }
            }
            Func::Free => None,
        };
        if kind.is_none() && !(c.func.is_realloc() && c.a0 != 0 && ret != 0) {
            self.stats.failed_allocations += 1;
        }
        kind.map(|k| HeapOp {
            pid: p.pid,
            tid: p.tid,
            timestamp,
            api: c.func.name(),
            kind: k,
            stack: c.stack,
        })
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_le_bytes(self.b.get(self.p..self.p + 8)?.try_into().ok()?);
        self.p += 8;
        Some(v)
    }
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_le_bytes(self.b.get(self.p..self.p + 4)?.try_into().ok()?);
        self.p += 4;
        Some(v)
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let v = self.b.get(self.p..self.p + n)?;
        self.p += n;
        Some(v)
    }
}

/// Thread ids of a process (`/proc/PID/task`).
pub fn list_tids(pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// True while the process exists and is not a zombie. A thread id is not a process: `/proc/TID`
/// answers for any thread (it is only left out of the listing), so the thread group id must be
/// `pid` itself.
pub fn process_alive(pid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim_start)
    };
    let state = field("State:").and_then(|v| v.chars().next());
    let tgid = field("Tgid:").and_then(|v| v.parse::<u32>().ok());
    tgid == Some(pid) && !matches!(state, Some('Z') | Some('X') | None)
}

#[cfg(test)]
mod alive_tests {
    use super::process_alive;

    /// The calling thread's id (`/proc/thread-self` links to "PID/task/TID").
    fn this_thread() -> u32 {
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        link.file_name().unwrap().to_str().unwrap().parse().unwrap()
    }

    #[test]
    fn a_thread_id_is_not_a_process() {
        assert!(process_alive(std::process::id()));
        let ended = std::thread::spawn(this_thread).join().unwrap();
        assert!(!process_alive(ended), "an ended thread");
        // A live thread of ours (the harness runs tests beside its main thread).
        let me = this_thread();
        if me != std::process::id() {
            assert!(
                std::path::Path::new(&format!("/proc/{me}/status")).exists(),
                "/proc answers for a thread id"
            );
            assert!(!process_alive(me), "thread {me} is not a process");
        }
        assert!(!process_alive(u32::MAX));
    }
}
