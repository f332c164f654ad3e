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

// The heap provider's events (provider facts, shared with the live tracers), heap records as
// operations, and stack naming: all below the analysis, re-exported for its users.
pub use crate::decode::heap::{WindowsHeapEvents, STACKWALK_GUID, STACKWALK_STACK};
pub use crate::decode::symbols::{
    Frame, ModuleMap, ModuleNamer, StackNamer, IMAGE_CLASS, IMAGE_ID_CLASS,
};
pub use crate::schema::builtin::heap_events::{
    HeapEventEncoder, HeapOp, HeapOpKind, HeapTotals, ImageMapping, ATTACHED_LOGGER_NAME,
    EVENT_ALLOC, EVENT_FREE, EVENT_IMAGE, EVENT_REALLOC, HEAP_PROVIDER, IMAGE_PROVIDER_NAME,
};

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
    /// When each stack last allocated (UTC FILETIME; `None`: only counted transients): its
    /// frames are named by the modules of that time.
    stack_times: Vec<Option<i64>>,
    stack_ids: HashMap<(u32, Arc<[u64]>), u32>,
    /// Allocations (count, bytes) per stack id.
    alloc_by_stack: HashMap<u32, (u64, u64)>,
    outstanding: HashMap<(u32, u64), Block>,
    procs: HashMap<u32, ProcStats>,
    ops: u64,
    /// Events the source (the logger, the live tracer) says it lost.
    lost_events: u64,
    /// Buffers and records of a saved trace that could not be read (not losses of the logger).
    unreadable_buffers: u64,
    unreadable_records: u64,
    /// Buffers the logger wrote that a saved trace does not hold.
    buffers_missing: u64,
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
        self.stack_times.push(None);
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
        if let Some(t) = self.stack_times.get_mut(stack as usize) {
            if !matches!(op.kind, HeapOpKind::Free { .. }) {
                *t = Some(t.map_or(op.timestamp, |t| t.max(op.timestamp)));
            }
        }
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

    /// Parts of a saved trace that could not be read: whole buffers, records. Counted apart from the
    /// logger's own losses ([`HeapAnalyzer::add_lost`]); the report then says its figures are not
    /// exact.
    pub fn add_unreadable(&mut self, buffers: u64, records: u64) {
        self.unreadable_buffers += buffers;
        self.unreadable_records += records;
    }

    /// A saved trace holds `held` of the `written` buffers its logger wrote (cut short): the
    /// events of the others are missing, so blocks shown outstanding may have been freed.
    pub fn set_buffers_missing(&mut self, held: u64, written: u64) {
        if written > held {
            self.buffers_missing = written - held;
            self.notes.push(format!(
                "the file holds {held} of the {written} buffers the logger wrote: the events of the other {} are not in it, so blocks shown outstanding may have been freed",
                written - held
            ));
        }
    }

    /// A reason the figures may be inexact, stated by the source.
    pub fn add_note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Takes in what a tracer reported besides its operations (`live::heap::HeapSession`).
    pub fn add_totals(&mut self, t: HeapTotals) {
        for (pid, stack, count, bytes) in &t.transient {
            self.add_transient(*pid, stack, *count, *bytes);
        }
        for (pid, n) in t.reallocs {
            self.add_reallocs(pid, n);
        }
        self.add_lost(t.lost);
        for n in t.notes {
            self.add_note(n);
        }
        if let Some(ts) = t.tracing_started {
            self.set_tracing_started(ts);
        }
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
            let all: Vec<Frame> = match (namer.as_deref_mut(), self.stack_times[id as usize]) {
                (Some(n), Some(t)) => n.name_at(*pid, addrs, t),
                (Some(n), None) => n.name(*pid, addrs),
                (None, _) => addrs.iter().map(|&a| Frame::unknown(a)).collect(),
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
        if self.unreadable_buffers + self.unreadable_records > 0 {
            exact = false;
            notes.push(format!(
                "unreadable parts skipped (buffers: {}, records: {}): counts and bytes are lower bounds",
                self.unreadable_buffers, self.unreadable_records
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
            unreadable_buffers: self.unreadable_buffers,
            unreadable_records: self.unreadable_records,
            buffers_missing: self.buffers_missing,
            operations: self.ops,
            outstanding_total: self.outstanding.len() as u64,
            outstanding_bytes_total: self.outstanding_bytes(),
            processes,
            outstanding_by_stack: outstanding,
            top_allocating_stacks: top_alloc,
            symbols: namer.and_then(|n| n.symbols()),
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
                    // The UCRT's and ntdll's own layers (named from their PDBs).
                    | "malloc_base"
                    | "calloc_base"
                    | "realloc_base"
                    | "free_base"
                    | "calloc_impl"
            ) || n.starts_with("operator new")
                || n.starts_with("operator delete")
                || (n.starts_with("Rtlp") && (n.contains("Heap") || n.starts_with("RtlpHp")))
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
    /// Events the logger (or the live tracer) says it lost.
    pub lost_events: u64,
    /// Buffers and records of a saved trace that could not be read (each named on stderr by
    /// `etwkit heap --report`); not counted in `lost_events`.
    pub unreadable_buffers: u64,
    pub unreadable_records: u64,
    /// Buffers the logger wrote (the header's BuffersWritten) that the saved trace does not hold.
    pub buffers_missing: u64,
    pub operations: u64,
    pub outstanding_total: u64,
    pub outstanding_bytes_total: u64,
    pub processes: Vec<ProcessSummary>,
    pub outstanding_by_stack: Vec<StackGroup>,
    pub top_allocating_stacks: Vec<StackGroup>,
    /// The PDB files read to name Windows frames, and those wanted but not read (only when a
    /// symbol path was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbols: Option<crate::decode::symbols::SymbolSummary>,
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
    let (an, images, modules, _) = analyze_file_read(file);
    (an, images, modules)
}

/// [`analyze_file_modules`], and the walk's summary: every part that could not be read, by file
/// offset and reason (`etwkit heap --report` names each on stderr).
pub fn analyze_file_read(
    file: &crate::etl::EtlFile,
) -> (
    HeapAnalyzer,
    Vec<ImageMapping>,
    ModuleMap,
    crate::etl::ReadSummary,
) {
    let mut an = HeapAnalyzer::new();
    if file.header().logger_name == ATTACHED_LOGGER_NAME {
        an.set_tracing_started(file.header().start_time);
    }
    let mut w = WindowsHeapEvents::new();
    let summary = file.for_each(crate::etl::Order::Time, |r| {
        w.push(&r.event);
        w.release(&mut |op| an.add(&op));
        std::ops::ControlFlow::Continue(())
    });
    w.drain(&mut |op| an.add(&op));
    // The logger's own losses (header, buffer flags) apart from what this file lost since.
    let h = file.header();
    an.add_lost(h.events_lost as u64);
    if h.buffers_lost > 0 {
        an.add_note(format!("the logger lost {} buffers", h.buffers_lost));
    }
    let flagged = file
        .buffers()
        .iter()
        .filter(|b| {
            b.header.flags
                & (crate::etl::buffer::flag::EVENTS_LOST | crate::etl::buffer::flag::BUFFER_LOST)
                != 0
        })
        .count();
    if flagged > 0 {
        an.add_note(format!(
            "{flagged} buffers are flagged by the logger as having lost events"
        ));
    }
    let held = file.buffers_held() as u64;
    an.set_buffers_missing(held, held + file.missing_buffers() as u64);
    an.add_unreadable(summary.bad_buffers, summary.bad_records);
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
    (an, images, modules, summary)
}

/// The report as a stack profile (for `export::pprof` and `export::flamegraph`): sample types in
/// Go's heap-profile order, `alloc_objects`/count, `alloc_space`/bytes, `inuse_objects`/count,
/// `inuse_space`/bytes (the default, which the flame graph draws); one sample per stack of
/// [`HeapReport::outstanding_by_stack`] and of [`HeapReport::top_allocating_stacks`] (a stack in
/// both lists is one sample; one in only one list has zeros in the other's values). Every
/// allocation is one event: the period is 1 of space/bytes. The notes are its comments.
impl crate::export::profile::ToStackProfile for HeapReport {
    fn to_stack_profile(&self) -> crate::export::profile::StackProfile {
        use crate::export::profile::{FlameStyle, ProfileSample, StackProfile, ValueType};
        let mut samples: Vec<ProfileSample> = Vec::new();
        let mut at: std::collections::BTreeMap<(Option<u32>, &[Frame]), usize> =
            std::collections::BTreeMap::new();
        let groups = self
            .outstanding_by_stack
            .iter()
            .map(|g| (g, true))
            .chain(self.top_allocating_stacks.iter().map(|g| (g, false)));
        for (g, inuse) in groups {
            let i = *at.entry((g.pid, g.frames.as_slice())).or_insert_with(|| {
                samples.push(ProfileSample {
                    pid: g.pid,
                    process: None,
                    frames: g.frames.clone(),
                    values: vec![0; 4],
                });
                samples.len() - 1
            });
            let v = &mut samples[i].values;
            let k = if inuse { 2 } else { 0 };
            v[k] += g.count;
            v[k + 1] += g.bytes;
        }
        StackProfile {
            sample_types: vec![
                ValueType::new("alloc_objects", "count"),
                ValueType::new("alloc_space", "bytes"),
                ValueType::new("inuse_objects", "count"),
                ValueType::new("inuse_space", "bytes"),
            ],
            default_sample_type: 3,
            period_type: ValueType::new("space", "bytes"),
            period: 1,
            comments: self.notes.clone(),
            samples,
            flame: FlameStyle {
                title: "Outstanding heap bytes by allocation stack".into(),
                count_name: "bytes".into(),
                memory: true,
                empty_subtitle: "no outstanding blocks".into(),
                empty_frame: "[nothing outstanding]".into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Frame {
                address: i as u64,
                function: (!n.is_empty()).then(|| n.to_string()),
                ..Default::default()
            })
            .collect()
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames
            .iter()
            .map(|f| f.function.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn allocator_frames_trimmed_from_the_top() {
        // Windows, named from PDBs: ntdll's layers, the heap API, the UCRT's malloc.
        let w = named(&[
            "RtlpHpAllocWithExceptionProtection",
            "RtlpAllocateHeapInternal",
            "RtlAllocateHeap",
            "_malloc_base",
            "leaky_alloc",
            "RtlpHeapHelper",
            "main",
        ]);
        assert_eq!(
            names(&trim_allocator_frames(w)),
            ["leaky_alloc", "RtlpHeapHelper", "main"]
        );
        // glibc and C++; an unnamed frame stops the trim.
        let l = named(&["__libc_malloc", "operator new(unsigned long)", "", "f"]);
        assert_eq!(names(&trim_allocator_frames(l)), ["", "f"]);
        // All allocator frames: kept whole.
        let all = named(&["malloc", "RtlAllocateHeap"]);
        assert_eq!(
            names(&trim_allocator_frames(all)),
            ["malloc", "RtlAllocateHeap"]
        );
    }
}
