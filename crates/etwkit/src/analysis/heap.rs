//! What is still allocated, and who allocated it.
//!
//! Input is a stream of [`HeapOp`]s in time order, whatever their source: the Linux live tracer
//! produces them directly; Windows heap traces (HeapTraceProvider classic events with kernel
//! StackWalk stacks) are turned into them by [`WindowsHeapEvents`]. [`HeapAnalyzer`] keeps the
//! outstanding blocks per process, interns allocation stacks and produces a [`HeapReport`]:
//! outstanding allocations grouped by allocation stack, per-process alloc/free counts and bytes,
//! top allocating stacks, and every reason the figures may not be exact.

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::EventRecord;
use crate::guid::Guid;

// The heap provider's events (provider facts, shared with the live tracers).
use crate::schema::builtin::heap_events::image_provider;
pub use crate::schema::builtin::heap_events::{
    HeapEventEncoder, HeapOp, HeapOpKind, ImageMapping, EVENT_ALLOC, EVENT_FREE, EVENT_IMAGE,
    EVENT_REALLOC, HEAP_PROVIDER, IMAGE_PROVIDER_NAME,
};

/// Kernel StackWalk class (kernel-mof.json `StackWalk.guid`).
pub const STACKWALK_GUID: Guid = Guid::from_str_const("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3");
/// StackWalk Stack event type.
pub const STACKWALK_STACK: u8 = 32;

/// One symbolized frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Frame {
    pub address: u64,
    /// File name of the module (no directory), if the address is in a known mapping.
    pub module: Option<String>,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Offset of the address in its module, when only the module is known (Windows traces:
    /// shown as `module+0xOFFSET`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

impl Frame {
    pub fn unknown(address: u64) -> Frame {
        Frame {
            address,
            ..Default::default()
        }
    }

    /// `function (file:line)`, `module+0xOFFSET`, `module!0xADDR` or `0xADDR`.
    pub fn display(&self) -> String {
        let mut s = match (&self.function, &self.module, self.offset) {
            (Some(f), _, _) => f.clone(),
            (None, Some(m), Some(off)) => format!("{m}+{off:#x}"),
            (None, Some(m), None) => format!("{m}!{:#x}", self.address),
            (None, None, _) => format!("{:#x}", self.address),
        };
        if let Some(file) = &self.file {
            let short = std::path::Path::new(file)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| file.clone());
            match self.line {
                Some(l) => s.push_str(&format!(" ({short}:{l})")),
                None => s.push_str(&format!(" ({short})")),
            }
        }
        s
    }
}

/// Names the addresses of a stack of process `pid` (first address: instruction pointer, then return
/// addresses).
pub trait StackNamer {
    fn name(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame>;
}

#[derive(Clone, Debug, Default)]
struct ProcStats {
    allocs: u64,
    alloc_bytes: u64,
    frees: u64,
    freed_bytes: u64,
    reallocs: u64,
    unknown_frees: u64,
    replaced: u64,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    stack: u32,
}

/// Index of an interned stack; `NO_STACK` when the op carried none.
const NO_STACK: u32 = u32::MAX;

/// Accumulates heap operations; [`HeapAnalyzer::report`] summarizes.
#[derive(Default)]
pub struct HeapAnalyzer {
    stacks: Vec<(u32, Arc<[u64]>)>,
    stack_ids: HashMap<(u32, Arc<[u64]>), u32>,
    /// Allocations (count, bytes) per stack id.
    alloc_by_stack: HashMap<u32, (u64, u64)>,
    outstanding: HashMap<(u32, u64), Block>,
    procs: HashMap<u32, ProcStats>,
    ops: u64,
    lost_events: u64,
    notes: Vec<String>,
    /// When tracing began on running processes (attach): earlier blocks were not seen.
    started: Option<i64>,
}

impl HeapAnalyzer {
    /// Tracing began at `filetime` (UTC FILETIME) on processes already running: frees of blocks
    /// allocated earlier are counted as such, and the report says when tracing started.
    pub fn set_tracing_started(&mut self, filetime: i64) {
        self.started = Some(filetime);
    }

    pub fn new() -> HeapAnalyzer {
        HeapAnalyzer::default()
    }

    fn intern(&mut self, pid: u32, stack: &Option<Arc<[u64]>>) -> u32 {
        let Some(s) = stack else { return NO_STACK };
        let key = (pid, s.clone());
        if let Some(&id) = self.stack_ids.get(&key) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(key.clone());
        self.stack_ids.insert(key, id);
        id
    }

    fn alloc(&mut self, pid: u32, address: u64, size: u64, stack: u32) {
        let p = self.procs.entry(pid).or_default();
        p.allocs += 1;
        p.alloc_bytes += size;
        let e = self.alloc_by_stack.entry(stack).or_default();
        e.0 += 1;
        e.1 += size;
        if self
            .outstanding
            .insert((pid, address), Block { size, stack })
            .is_some()
        {
            // The same address handed out twice without a free in between: a free was missed.
            self.procs.entry(pid).or_default().replaced += 1;
        }
    }

    fn free(&mut self, pid: u32, address: u64) {
        let p = self.procs.entry(pid).or_default();
        match self.outstanding.remove(&(pid, address)) {
            Some(b) => {
                p.frees += 1;
                p.freed_bytes += b.size;
            }
            // Allocated before tracing started (attach), or its allocation was lost.
            None => p.unknown_frees += 1,
        }
    }

    pub fn add(&mut self, op: &HeapOp) {
        self.ops += 1;
        let stack = self.intern(op.pid, &op.stack);
        match op.kind {
            HeapOpKind::Alloc { address, size } => self.alloc(op.pid, address, size, stack),
            HeapOpKind::Free { address } => self.free(op.pid, address),
            HeapOpKind::Realloc {
                old_address,
                new_address,
                new_size,
            } => {
                self.procs.entry(op.pid).or_default().reallocs += 1;
                self.free(op.pid, old_address);
                self.alloc(op.pid, new_address, new_size, stack);
            }
        }
    }

    /// Alloc/free pairs a source counted without sending each operation (the heap shim pairs
    /// short-lived blocks in process): they count as allocations and frees of `stack`.
    pub fn add_transient(&mut self, pid: u32, stack: &Option<Arc<[u64]>>, count: u64, bytes: u64) {
        let id = self.intern(pid, stack);
        let p = self.procs.entry(pid).or_default();
        p.allocs += count;
        p.alloc_bytes += bytes;
        p.frees += count;
        p.freed_bytes += bytes;
        let e = self.alloc_by_stack.entry(id).or_default();
        e.0 += count;
        e.1 += bytes;
        self.ops += 2 * count;
    }

    /// Reallocations a source reported as free + alloc pairs.
    pub fn add_reallocs(&mut self, pid: u32, n: u64) {
        self.procs.entry(pid).or_default().reallocs += n;
    }

    /// Events the source lost (the report then says its figures are not exact).
    pub fn add_lost(&mut self, n: u64) {
        self.lost_events += n;
    }

    /// A reason the figures may be inexact, stated by the source.
    pub fn add_note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn outstanding_count(&self) -> usize {
        self.outstanding.len()
    }

    pub fn outstanding_bytes(&self) -> u64 {
        self.outstanding.values().map(|b| b.size).sum()
    }

    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Builds the report. `namer` symbolizes stacks (None: addresses only). `top` limits the stack
    /// lists, `frames` the frames shown per stack.
    pub fn report(
        &self,
        namer: Option<&mut dyn StackNamer>,
        top: usize,
        frames: usize,
    ) -> HeapReport {
        let mut namer = namer;
        let mut by_stack: HashMap<u32, (u64, u64)> = HashMap::new();
        for b in self.outstanding.values() {
            let e = by_stack.entry(b.stack).or_default();
            e.0 += 1;
            e.1 += b.size;
        }
        let mut name = |id: u32| -> (Option<u32>, Vec<Frame>) {
            if id == NO_STACK {
                return (None, Vec::new());
            }
            let (pid, addrs) = &self.stacks[id as usize];
            let all: Vec<Frame> = match namer.as_deref_mut() {
                Some(n) => n.name(*pid, addrs),
                None => addrs.iter().map(|&a| Frame::unknown(a)).collect(),
            };
            (
                Some(*pid),
                trim_allocator_frames(all)
                    .into_iter()
                    .take(frames)
                    .collect(),
            )
        };
        // Groups by what the user sees (process and the frames shown, by function, file and line:
        // stacks differing only in addresses, or below the frames shown, read the same), largest
        // first (bytes, then count, then frames), the `top` of them.
        let mut ranked = |groups: &mut dyn Iterator<Item = (u32, (u64, u64))>| -> Vec<StackGroup> {
            let mut seen: HashMap<(Option<u32>, Vec<String>), usize> = HashMap::new();
            let mut v: Vec<StackGroup> = Vec::new();
            for (id, (count, bytes)) in groups {
                let (pid, frames) = name(id);
                let key = (pid, frames.iter().map(Frame::display).collect::<Vec<_>>());
                match seen.get(&key) {
                    Some(&i) => {
                        v[i].count += count;
                        v[i].bytes += bytes;
                        // Keep the lowest addresses, so the row does not depend on hash order.
                        if frames < v[i].frames {
                            v[i].frames = frames;
                        }
                    }
                    None => {
                        seen.insert(key, v.len());
                        v.push(StackGroup {
                            pid,
                            count,
                            bytes,
                            frames,
                        });
                    }
                }
            }
            v.sort_by(|a, b| {
                b.bytes
                    .cmp(&a.bytes)
                    .then(b.count.cmp(&a.count))
                    .then(a.frames.cmp(&b.frames))
            });
            v.truncate(top);
            v
        };
        let outstanding = ranked(&mut by_stack.into_iter());
        let top_alloc = ranked(&mut self.alloc_by_stack.iter().map(|(&id, &v)| (id, v)));
        let mut processes: Vec<ProcessSummary> = self
            .procs
            .iter()
            .map(|(&pid, p)| {
                let (oc, ob) = self
                    .outstanding
                    .iter()
                    .filter(|((q, _), _)| *q == pid)
                    .fold((0u64, 0u64), |(c, b), (_, blk)| (c + 1, b + blk.size));
                ProcessSummary {
                    pid,
                    allocs: p.allocs,
                    alloc_bytes: p.alloc_bytes,
                    frees: p.frees,
                    freed_bytes: p.freed_bytes,
                    reallocs: p.reallocs,
                    outstanding: oc,
                    outstanding_bytes: ob,
                    frees_of_unknown_blocks: p.unknown_frees,
                    addresses_reused_without_free: p.replaced,
                }
            })
            .collect();
        processes.sort_by_key(|p| p.pid);
        let mut notes = self.notes.clone();
        let mut exact = notes.is_empty();
        if self.lost_events > 0 {
            notes.push(format!(
                "{} events were lost: counts and bytes are lower bounds",
                self.lost_events
            ));
        }
        let replaced: u64 = processes
            .iter()
            .map(|p| p.addresses_reused_without_free)
            .sum();
        if replaced > 0 {
            notes.push(format!(
                "{replaced} addresses were allocated again without a free seen: frees were missed"
            ));
        }
        exact &= self.lost_events == 0 && replaced == 0;
        let unknown: u64 = processes.iter().map(|p| p.frees_of_unknown_blocks).sum();
        if unknown > 0 && self.started.is_some() {
            notes.push(format!(
                "{unknown} frees of blocks allocated before tracing started (not counted as frees; not leaks)"
            ));
        } else if unknown > 0 {
            // Not a loss by itself: blocks allocated before attaching, or by the allocator's internals
            // (glibc's per-thread tcache comes from _int_malloc, ld.so's early blocks from its minimal
            // malloc) are freed through free(). Outstanding figures of what was seen stay exact.
            notes.push(format!(
                "{unknown} frees of blocks whose allocation was not traced (made before tracing started or inside the allocator); ignored"
            ));
        }
        HeapReport {
            tracing_started: self.started.map(crate::time::format_rfc3339),
            exact,
            notes,
            lost_events: self.lost_events,
            operations: self.ops,
            outstanding_total: self.outstanding.len() as u64,
            outstanding_bytes_total: self.outstanding_bytes(),
            processes,
            outstanding_by_stack: outstanding,
            top_allocating_stacks: top_alloc,
        }
    }
}

/// Drops the allocator's own frames at the top of a stack (malloc, operator new, RtlAllocateHeap...)
/// so the first frame shown is the caller. Unnamed frames are kept.
pub fn trim_allocator_frames(frames: Vec<Frame>) -> Vec<Frame> {
    let is_alloc = |f: &Frame| {
        f.function.as_deref().is_some_and(|n| {
            let n = n.trim_start_matches('_');
            matches!(
                n,
                "malloc"
                    | "calloc"
                    | "realloc"
                    | "reallocarray"
                    | "free"
                    | "posix_memalign"
                    | "aligned_alloc"
                    | "memalign"
                    | "valloc"
                    | "pvalloc"
                    | "libc_malloc"
                    | "libc_calloc"
                    | "libc_realloc"
                    | "libc_free"
                    | "libc_memalign"
                    | "libc_valloc"
                    | "libc_pvalloc"
                    | "RtlAllocateHeap"
                    | "RtlReAllocateHeap"
                    | "RtlFreeHeap"
                    | "HeapAlloc"
                    | "HeapReAlloc"
                    | "HeapFree"
            ) || n.starts_with("operator new")
                || n.starts_with("operator delete")
        })
    };
    let skip = frames.iter().take_while(|f| is_alloc(f)).count();
    if skip == frames.len() {
        return frames;
    }
    frames.into_iter().skip(skip).collect()
}

/// Outstanding (or allocated) blocks sharing one allocation stack.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StackGroup {
    pub pid: Option<u32>,
    pub count: u64,
    pub bytes: u64,
    /// Top frames below the allocator (empty when the events carried no stack).
    pub frames: Vec<Frame>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub freed_bytes: u64,
    pub reallocs: u64,
    pub outstanding: u64,
    pub outstanding_bytes: u64,
    pub frees_of_unknown_blocks: u64,
    pub addresses_reused_without_free: u64,
}

/// The leak report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HeapReport {
    /// When tracing began, for processes that were already running (RFC 3339, UTC).
    pub tracing_started: Option<String>,
    /// False when anything (lost events, unmatched frees...) makes the figures approximate.
    pub exact: bool,
    pub notes: Vec<String>,
    pub lost_events: u64,
    pub operations: u64,
    pub outstanding_total: u64,
    pub outstanding_bytes_total: u64,
    pub processes: Vec<ProcessSummary>,
    pub outstanding_by_stack: Vec<StackGroup>,
    pub top_allocating_stacks: Vec<StackGroup>,
}

impl HeapReport {
    /// Human-readable table.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Heap report: {} operations, {} outstanding blocks, {} bytes outstanding",
            self.operations, self.outstanding_total, self.outstanding_bytes_total
        );
        if let Some(t) = &self.tracing_started {
            let _ = writeln!(s, "Tracing started at {t} (attached to running processes).");
        }
        if self.exact {
            let _ = writeln!(s, "Figures are exact (no events lost).");
        } else {
            let _ = writeln!(s, "FIGURES ARE NOT EXACT:");
            for n in &self.notes {
                let _ = writeln!(s, "  - {n}");
            }
        }
        let _ = writeln!(s, "\nPer process:");
        let _ = writeln!(
            s,
            "{:>8} {:>10} {:>14} {:>10} {:>14} {:>9} {:>11} {:>14}",
            "pid",
            "allocs",
            "alloc bytes",
            "frees",
            "freed bytes",
            "reallocs",
            "outstanding",
            "out bytes"
        );
        for p in &self.processes {
            let _ = writeln!(
                s,
                "{:>8} {:>10} {:>14} {:>10} {:>14} {:>9} {:>11} {:>14}",
                p.pid,
                p.allocs,
                p.alloc_bytes,
                p.frees,
                p.freed_bytes,
                p.reallocs,
                p.outstanding,
                p.outstanding_bytes
            );
        }
        let group = |s: &mut String, title: &str, v: &[StackGroup]| {
            let _ = writeln!(s, "\n{title}:");
            for g in v {
                let _ = writeln!(
                    s,
                    "  {} blocks, {} bytes{}",
                    g.count,
                    g.bytes,
                    g.pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
                );
                if g.frames.is_empty() {
                    let _ = writeln!(s, "      (no stack)");
                }
                for f in &g.frames {
                    let _ = writeln!(s, "      {}", f.display());
                }
            }
        };
        group(
            &mut s,
            "Outstanding allocations by stack",
            &self.outstanding_by_stack,
        );
        group(&mut s, "Top allocating stacks", &self.top_allocating_stacks);
        s
    }
}

/// The `Api` string of an etwkit TraceLogging heap event (after the fixed fields).
fn tl_api(payload: &[u8], opcode: u8) -> Option<&'static str> {
    let at = match opcode {
        EVENT_ALLOC => 28,
        EVENT_REALLOC => 44,
        EVENT_FREE => 20,
        _ => return None,
    };
    let rest = payload.get(at..)?;
    let s = &rest[..rest.iter().position(|&c| c == 0)?];
    const KNOWN: [&str; 9] = [
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "posix_memalign",
        "memalign",
        "valloc",
        "pvalloc",
        "free",
    ];
    KNOWN.iter().find(|k| k.as_bytes() == s).copied()
}

/// Kernel Image class (Load 10, UnLoad 2, DCStart 3, DCEnd 4).
pub const IMAGE_CLASS: Guid = Guid::from_str_const("2cb15d1d-5fc1-11d2-abe1-00a0c911f518");
/// KernelTraceControl ImageID (opcode 0): the rundown of loaded images with their original names.
pub const IMAGE_ID_CLASS: Guid = crate::schema::builtin::kernel_mof::KTC_IMAGE_ID;

/// One loaded module of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Module {
    end: u64,
    /// Offset of `start` in the file (etwkit's Linux mappings; 0 for Windows images).
    file_offset: u64,
    /// The path as the event gives it.
    path: Arc<str>,
}

/// The modules loaded in each process, by address range, from a trace's own image events:
/// Windows kernel Image Load/DCStart/DCEnd, KernelTraceControl ImageID rundown (where no Image
/// event covers the range), and etwkit's Image events. A later load over a range replaces what
/// was there; unloads are kept (the blocks of an unloaded module still name it).
#[derive(Default)]
pub struct ModuleMap {
    by_pid: HashMap<u32, std::collections::BTreeMap<u64, Module>>,
    decoder: Option<Box<crate::decode::Decoder>>,
    /// Image events that could not be read.
    pub malformed: u64,
}

impl std::fmt::Debug for ModuleMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleMap")
            .field("processes", &self.by_pid.len())
            .field("modules", &self.len())
            .finish()
    }
}

/// The file name of a Windows or Unix path.
fn base_name(path: &str) -> &str {
    path.rsplit(['\\', '/']).next().unwrap_or(path)
}

impl ModuleMap {
    pub fn new() -> ModuleMap {
        ModuleMap::default()
    }

    /// Modules known, over all processes.
    pub fn len(&self) -> usize {
        self.by_pid.values().map(|m| m.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records that `path` is loaded at `start..end` in `pid` (replacing what overlaps it).
    pub fn insert(&mut self, pid: u32, start: u64, end: u64, path: &str) {
        self.insert_at(pid, start, end, 0, path, true)
    }

    /// An etwkit executable mapping (its file offset kept: offsets are file offsets).
    pub fn insert_mapping(&mut self, m: &ImageMapping) {
        self.insert_at(m.pid, m.start, m.end, m.file_offset, &m.path, true)
    }

    fn insert_at(&mut self, pid: u32, start: u64, end: u64, off: u64, path: &str, replace: bool) {
        if end <= start {
            self.malformed += 1;
            return;
        }
        let map = self.by_pid.entry(pid).or_default();
        let overlapping: Vec<u64> = map
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(s, _)| *s)
            .collect();
        if !overlapping.is_empty() && !replace {
            return;
        }
        for s in overlapping {
            map.remove(&s);
        }
        map.insert(
            start,
            Module {
                end,
                file_offset: off,
                path: Arc::from(path),
            },
        );
    }

    /// The module holding `addr` in `pid` (kernel images, listed under pid 0, serve every
    /// process): its file name and the address's offset in it.
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<(&str, u64)> {
        let (start, _, path, off) = self.find(pid, addr)?;
        Some((base_name(path), addr - start + off))
    }

    /// The module holding `addr` in `pid` (or a kernel image): start, end and path as loaded.
    pub fn module_at(&self, pid: u32, addr: u64) -> Option<(u64, u64, &str)> {
        self.find(pid, addr).map(|(s, e, p, _)| (s, e, p))
    }

    fn find(&self, pid: u32, addr: u64) -> Option<(u64, u64, &str, u64)> {
        let find = |pid: u32| {
            let (s, m) = self.by_pid.get(&pid)?.range(..=addr).next_back()?;
            (addr < m.end).then(|| (*s, m.end, &*m.path, m.file_offset))
        };
        find(pid).or_else(|| if pid != 0 { find(0) } else { None })
    }

    /// Feeds one record: image events are kept, others ignored. True when it was an image event.
    pub fn push(&mut self, r: &EventRecord<'_>) -> bool {
        let (image_id, load) = match (r.provider, r.descriptor.opcode) {
            (IMAGE_CLASS, 10 | 3 | 4) => (false, true),
            (IMAGE_ID_CLASS, 0) => (true, true),
            _ => (false, false),
        };
        if !load || r.header_type.is_event_header() {
            return false;
        }
        let dec = self.decoder.get_or_insert_with(|| {
            Box::new(crate::decode::Decoder::new(
                crate::schema::Registry::with_builtins(),
            ))
        });
        let ev = dec.decode(r);
        let p = &ev.properties;
        let num = |names: &[&str]| names.iter().find_map(|n| p.get(n)?.as_u64());
        let text = |names: &[&str]| names.iter().find_map(|n| p.get(n)?.as_str());
        let base = num(&["ImageBase", "BaseAddress"]);
        let size = num(&["ImageSize", "ModuleSize"]);
        let name = text(&["FileName", "ImageFileName", "OriginalFileName"]);
        let (Some(base), Some(size), Some(name)) = (base, size, name) else {
            self.malformed += 1;
            return true;
        };
        let name = name.to_string();
        // ImageID's own ProcessId is often 0: the rundown's header names the process.
        let pid = match image_id {
            true => r.pid,
            false => num(&["ProcessId", "ProcessID"])
                .map(|p| p as u32)
                .unwrap_or(r.pid),
        };
        // ImageID only fills ranges no Image event covers (Image events name the file loaded).
        self.insert_at(pid, base, base.saturating_add(size), 0, &name, !image_id);
        true
    }

    /// Every module of these processes (and pid 0's), as etwkit Image mappings.
    pub fn mappings_of(&self, pids: &[u32]) -> Vec<ImageMapping> {
        let mut keys: Vec<&u32> = self
            .by_pid
            .keys()
            .filter(|p| **p == 0 || pids.contains(p))
            .collect();
        keys.sort();
        keys.into_iter()
            .flat_map(|pid| {
                self.by_pid[pid].iter().map(|(s, m)| ImageMapping {
                    pid: *pid,
                    start: *s,
                    end: m.end,
                    file_offset: m.file_offset,
                    path: m.path.to_string(),
                })
            })
            .collect()
    }
}

/// Names frames `module+offset` from a [`ModuleMap`]; addresses outside every module stay bare.
pub struct ModuleNamer {
    pub modules: ModuleMap,
}

impl ModuleNamer {
    pub fn new(modules: ModuleMap) -> ModuleNamer {
        ModuleNamer { modules }
    }
}

impl StackNamer for ModuleNamer {
    fn name(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        stack
            .iter()
            .map(|&a| match self.modules.lookup(pid, a) {
                Some((m, off)) => Frame {
                    address: a,
                    module: Some(m.to_string()),
                    offset: Some(off),
                    ..Default::default()
                },
                None => Frame::unknown(a),
            })
            .collect()
    }
}

/// Turns Windows heap trace records (HeapTraceProvider Alloc/ReAlloc/Free with kernel StackWalk
/// stacks) into [`HeapOp`]s.
///
/// The few fields needed are read here by the heap.json layouts (pointer-sized HeapHandle, then
/// pointer/SizeT fields packed, per the record's pointer size) rather than through the generic
/// decoder, because StackWalk correlation needs the raw timestamp anyway.
/// Stack events follow their event: `(EventTimeStamp, StackThread)` matches the heap event's
/// `(raw_timestamp, tid)`; kernel and user halves may come as two StackWalk events (appended).
#[derive(Default)]
pub struct WindowsHeapEvents {
    ops: Vec<HeapOp>,
    by_key: HashMap<(i64, u32), usize>,
    stacks: HashMap<usize, Vec<u64>>,
    pub malformed: u64,
    /// Executable mappings (etwkit's Image events), in record order.
    pub images: Vec<ImageMapping>,
    pub heap_events: u64,
    pub stack_events: u64,
    pub unmatched_stacks: u64,
    /// Loaded modules, from the trace's own Windows image events.
    pub modules: ModuleMap,
}

impl WindowsHeapEvents {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one record (any record; non-heap ones are ignored).
    pub fn push(&mut self, r: &EventRecord<'_>) {
        let ps = r.pointer_size as usize;
        let p = &r.payload;
        let ptr = |o: usize| -> Option<u64> {
            let b = p.get(o..o + ps)?;
            Some(if ps == 4 {
                u32::from_le_bytes(b.try_into().ok()?) as u64
            } else {
                u64::from_le_bytes(b.try_into().ok()?)
            })
        };
        if r.provider == STACKWALK_GUID && r.descriptor.opcode == STACKWALK_STACK {
            self.stack_events += 1;
            let (Some(ts), Some(tid)) = (p.get(0..8), p.get(12..16)) else {
                self.malformed += 1;
                return;
            };
            let ts = i64::from_le_bytes(ts.try_into().unwrap());
            let tid = u32::from_le_bytes(tid.try_into().unwrap());
            let frames: Vec<u64> = (16..p.len()).step_by(ps).filter_map(ptr).collect();
            match self.by_key.get(&(ts, tid)) {
                Some(&i) => self.stacks.entry(i).or_default().extend(frames),
                None => self.unmatched_stacks += 1,
            }
            return;
        }
        if r.provider == image_provider() && r.descriptor.id == EVENT_IMAGE {
            let u64_at = |o: usize| {
                p.get(o..o + 8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            };
            let pid = p
                .get(0..4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()));
            let name = p.get(28..).and_then(|r| r.split(|&c| c == 0).next());
            match (pid, u64_at(4), u64_at(12), u64_at(20), name) {
                (Some(pid), Some(start), Some(size), Some(file_offset), Some(name)) => {
                    self.images.push(ImageMapping {
                        pid,
                        start,
                        end: start.saturating_add(size),
                        file_offset,
                        path: String::from_utf8_lossy(name).into_owned(),
                    })
                }
                _ => self.malformed += 1,
            }
            return;
        }
        if r.provider != HEAP_PROVIDER || ps == 0 {
            self.modules.push(r);
            return;
        }
        // heap.json (x64 offsets = pointer size 8; x86 = 4): Alloc {HeapHandle, AllocSize,
        // AllocAddress, SourceId}; ReAlloc {HeapHandle, NewAllocAddress, OldAllocAddress, NewAllocSize,
        // OldAllocSize, SourceId}; Free {HeapHandle, FreeAddress, SourceId}.
        let kind = match r.descriptor.opcode {
            EVENT_ALLOC => ptr(ps)
                .zip(ptr(2 * ps))
                .map(|(size, address)| (HeapOpKind::Alloc { address, size }, "HeapAlloc")),
            EVENT_REALLOC => match (ptr(ps), ptr(2 * ps), ptr(3 * ps)) {
                (Some(new_address), Some(old_address), Some(new_size)) => Some((
                    HeapOpKind::Realloc {
                        old_address,
                        new_address,
                        new_size,
                    },
                    "HeapReAlloc",
                )),
                _ => None,
            },
            EVENT_FREE => ptr(ps).map(|address| (HeapOpKind::Free { address }, "HeapFree")),
            _ => return,
        };
        self.heap_events += 1;
        let Some((kind, api)) = kind else {
            self.malformed += 1;
            return;
        };
        // TraceLogging heap events (written by etwkit on Linux) carry their stack and API inline.
        let stack = r.stack().map(|s| Arc::from(s.addresses));
        let api = if r.header_type.is_event_header() {
            tl_api(&r.payload, r.descriptor.opcode).unwrap_or(api)
        } else {
            api
        };
        let i = self.ops.len();
        if stack.is_none() {
            self.by_key.insert((r.raw_timestamp, r.tid), i);
        }
        self.ops.push(HeapOp {
            pid: r.pid,
            tid: r.tid,
            timestamp: r.timestamp,
            api,
            kind,
            stack,
        });
    }

    /// The operations in record order, stacks attached.
    pub fn finish(mut self) -> Vec<HeapOp> {
        for (i, s) in self.stacks.drain() {
            // StackWalk stacks: innermost first (kernel frames first when present); keep user frames.
            let user: Vec<u64> = s
                .into_iter()
                .filter(|a| *a < 0xffff_8000_0000_0000)
                .collect();
            self.ops[i].stack = Some(Arc::from(user));
        }
        self.ops
    }
}

/// Reads the heap events of a saved trace (HeapTraceProvider events: Windows traces, or etwkit's own
/// `-o` files) in time order: the analysis, and the executable mappings the file carries (to name
/// stacks with, e.g. `live::linux::unwind::LinuxStackNamer::from_images`). Unreadable parts, short
/// events and a file without heap events become notes.
pub fn analyze_file(file: &crate::etl::EtlFile) -> (HeapAnalyzer, Vec<ImageMapping>) {
    let (an, images, _) = analyze_file_modules(file);
    (an, images)
}

/// [`analyze_file`], and the modules the file's own Windows image events load (to name frames
/// `module+offset` with a [`ModuleNamer`]).
pub fn analyze_file_modules(
    file: &crate::etl::EtlFile,
) -> (HeapAnalyzer, Vec<ImageMapping>, ModuleMap) {
    let mut w = WindowsHeapEvents::new();
    let summary = file.for_each(crate::etl::Order::Time, |r| {
        w.push(&r.event);
        std::ops::ControlFlow::Continue(())
    });
    let mut an = HeapAnalyzer::new();
    an.add_lost(file.header().events_lost as u64 + summary.bad_records);
    if summary.bad_buffers > 0 {
        an.add_note(format!(
            "{} unreadable buffers were skipped",
            summary.bad_buffers
        ));
    }
    if w.malformed > 0 {
        an.add_note(format!("{} heap events too short to decode", w.malformed));
    }
    if w.heap_events == 0 {
        an.add_note(
            "no heap events (HeapTraceProvider 222962ab-6180-4b88-a825-346b75f2a24a) in this file",
        );
    }
    let images = std::mem::take(&mut w.images);
    let modules = std::mem::take(&mut w.modules);
    if modules.malformed > 0 {
        an.add_note(format!(
            "{} image events too short to decode",
            modules.malformed
        ));
    }
    for op in w.finish() {
        an.add(&op);
    }
    (an, images, modules)
}
