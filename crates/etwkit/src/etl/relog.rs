//! Relogging: copy the matching records of one or more ETL files into a new one, byte for byte,
//! merged in time order (each file in time order, then a k-way merge across files). Every record
//! stays on its original CPU's buffer stream.
//!
//! With one input the output keeps the input's clock, so records are copied unchanged. With several,
//! the output clock is FILETIME (clock type 2) and only each record's timestamp is rewritten.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use crate::event::EventRecord;
use crate::filter::{EventFilter, PidView};
use crate::guid::Guid;
use crate::time::{Clock, ClockType};
use crate::tlg::provider_guid_from_name;

use super::reader::{EtlFile, Order, ReadSummary, Record};
use super::writer::{WriteError, WriteSummary, Writer, WriterOptions};

/// The GUID of the TDH schema records (EventInfo / EventMapInfo) the Windows relogger and
/// KernelTraceControl embed: FULL_HEADER records whose payload starts with the provider GUID.
pub const EVENT_METADATA_GUID: Guid = Guid::from_str_const("bbccf6c1-6cd1-48c4-80ff-839482e37671");

/// Which records to keep: the shared [`EventFilter`] (time window, provider GUIDs, ids, pids) plus
/// provider names. A name matches a TraceLogging provider by its traits name and any provider by the
/// GUID ETW derives from the name (EventSource/TraceLogging). No filter keeps everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RelogFilter {
    /// Provider GUIDs (from `events.providers`) and name-derived GUIDs.
    providers: Vec<Guid>,
    names: Vec<String>,
    /// Time, id and pid conditions (providers handled above).
    rest: EventFilter,
    /// `rest` without its time window, for rundown records (see [`is_rundown`]); none when `rest`
    /// has no window.
    untimed: Option<EventFilter>,
    /// Per input (by position), the view through which the pid condition sees its kernel
    /// records: see [`RelogFilter::with_pid_views`].
    pid_views: PidViews,
}

/// The inputs' pid views, by position (none: a kernel record's header pid is matched).
#[derive(Clone, Default)]
struct PidViews(Vec<Option<std::sync::Arc<dyn PidView>>>);

impl std::fmt::Debug for PidViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PidViews({} inputs)", self.0.len())
    }
}

impl PartialEq for PidViews {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            })
    }
}

impl RelogFilter {
    pub fn new(events: EventFilter, provider_names: Vec<String>) -> RelogFilter {
        let mut providers = events.providers.clone();
        providers.extend(provider_names.iter().map(|n| provider_guid_from_name(n)));
        let rest = EventFilter {
            providers: Vec::new(),
            ..events
        };
        let untimed = (rest.begin.is_some() || rest.end.is_some()).then(|| EventFilter {
            begin: None,
            end: None,
            ..rest.clone()
        });
        RelogFilter {
            providers,
            names: provider_names,
            rest,
            untimed,
            pid_views: PidViews::default(),
        }
    }

    /// The pid condition matches a kernel record by the process `views[i]` (input `i`'s) attributes
    /// it to — with a `decode::Decoder` of the input, its payload's ProcessId, or the thread
    /// table's process for a header without one (sampled profile, DPC, context switch records), as
    /// `dump --pid` selects — not by the header's pid, the context it was logged in.
    pub fn with_pid_views<V: PidView + 'static>(mut self, views: Vec<Option<V>>) -> Self {
        self.pid_views = PidViews(
            views
                .into_iter()
                .map(|v| v.map(|v| std::sync::Arc::new(v) as std::sync::Arc<dyn PidView>))
                .collect(),
        );
        self
    }

    /// Whether the pid condition needs pid views to be exact ([`RelogFilter::with_pid_views`]).
    pub fn has_pids(&self) -> bool {
        !self.rest.pids.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty() && self.rest.is_empty()
    }

    fn provider_ok(&self, ev: &EventRecord<'_>) -> bool {
        crate::filter::provider_matches(&self.providers, &self.names, ev)
    }

    /// Was `ev` (which passed) kept only as rundown, from outside the time window?
    fn rundown_outside(&self, ev: &EventRecord<'_>) -> bool {
        self.untimed.is_some()
            && metadata_provider(ev).is_none()
            && !self.rest.in_window(ev.timestamp)
            && is_rundown(ev)
    }

    /// Is `ev` a TDH schema record (EventInfo/EventMapInfo)?
    pub fn is_schema(ev: &EventRecord<'_>) -> bool {
        metadata_provider(ev).is_some()
    }

    /// Does the record pass? Schema records (EventInfo/EventMapInfo) of a kept provider are kept
    /// whatever the id, pid and time conditions say, so the kept events stay decodable; rundown
    /// records ([`is_rundown`]) whatever the time window says, so the kept events keep their
    /// processes, images, file names and JIT-compiled methods.
    pub fn matches(&self, ev: &EventRecord<'_>) -> bool {
        self.matches_in(usize::MAX, ev)
    }

    /// [`RelogFilter::matches`] for a record of input `input` (its pid view sees kernel pids).
    fn matches_in(&self, input: usize, ev: &EventRecord<'_>) -> bool {
        if self.is_empty() {
            return true;
        }
        if let Some(p) = metadata_provider(ev) {
            return self.providers.is_empty() || self.providers.contains(&p);
        }
        let rest = match &self.untimed {
            Some(untimed) if is_rundown(ev) => untimed,
            _ => &self.rest,
        };
        self.provider_ok(ev)
            && match self.pid_views.0.get(input).and_then(Option::as_ref) {
                Some(v) => v.keeps(rest, ev),
                None => rest.matches(ev),
            }
    }
}

/// Is `ev` a rundown record: the state a trace's consumers need to read its other events, logged
/// at its start and end rather than when it arose? Kernel process, thread and image
/// DCStart/DCEnd (opcodes 3 and 4), FileIo names and FileRundown (0, 36), registry KCB rundown
/// (24, 25), every SysConfig record, KernelTraceControl's ImageID/DbgID (PDB signatures) and the
/// CLR rundown provider (JIT-compiled methods and loaded modules). A time-windowed relog keeps them
/// as PerfView's and xperf's trimming do, so a window in the middle of a trace stays symbolizable.
pub fn is_rundown(ev: &EventRecord<'_>) -> bool {
    const PROCESS: Guid = Guid::from_str_const("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c");
    const THREAD: Guid = Guid::from_str_const("3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c");
    const IMAGE: Guid = Guid::from_str_const("2cb15d1d-5fc1-11d2-abe1-00a0c911f518");
    const FILE_IO: Guid = Guid::from_str_const("90cbdc39-4a3e-11d1-84f4-0000f80464e3");
    const REGISTRY: Guid = Guid::from_str_const("ae53722e-c863-11d2-8659-00c04fa321a1");
    const SYS_CONFIG: Guid = Guid::from_str_const("01853a65-418f-4f36-aefc-dc0f1d2fd235");
    const KERNEL_TRACE_CONTROL: Guid = Guid::from_str_const("b3e675d7-2554-4f18-830b-2762732560de");
    const CLR_RUNDOWN: Guid = Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18");
    let op = ev.descriptor.opcode;
    match ev.provider {
        PROCESS | THREAD | IMAGE => op == 3 || op == 4,
        FILE_IO => op == 0 || op == 36,
        REGISTRY => op == 24 || op == 25,
        SYS_CONFIG | KERNEL_TRACE_CONTROL | CLR_RUNDOWN => true,
        _ => false,
    }
}

/// The provider a TDH schema record describes, if `ev` is one.
fn metadata_provider(ev: &EventRecord<'_>) -> Option<Guid> {
    if ev.header_type.is_classic() && ev.provider == EVENT_METADATA_GUID {
        Guid::from_le_bytes(&ev.payload)
    } else {
        None
    }
}

/// Is this the logfile-header record of its file (the writer writes its own)?
fn is_logfile_header(r: &Record<'_>) -> bool {
    r.buffer_index == 0
        && r.offset == super::buffer::BUFFER_HEADER_SIZE
        && r.header_type.is_kernel()
        && r.hook_id == Some(0)
}

/// What one input gave.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RelogInput {
    pub path: PathBuf,
    pub read: ReadSummary,
    /// Records that passed the filter and were written.
    pub kept: u64,
    /// Of `kept`, the TDH schema records (EventInfo/EventMapInfo) kept so that the kept events
    /// decode: a filter can keep them when it keeps no event at all.
    pub schema_kept: u64,
    /// Of `kept`, the rundown records ([`is_rundown`]) kept from outside the time window.
    pub rundown_kept: u64,
}

impl RelogInput {
    /// The events kept: `kept` less the schema records and the rundown outside the window.
    pub fn events_kept(&self) -> u64 {
        self.kept - self.schema_kept - self.rundown_kept
    }
}

/// The outcome of a relog.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RelogSummary {
    pub inputs: Vec<RelogInput>,
    pub written: WriteSummary,
}

/// Writer options for relogging `inputs`: one input keeps its header and clock; several get a
/// FILETIME clock starting at the earliest start, the widest pointer size and most processors.
pub fn relog_options(inputs: &[EtlFile]) -> WriterOptions {
    match inputs {
        [one] => WriterOptions::from_header(one.header(), one.clock()),
        _ => {
            let start = inputs
                .iter()
                .map(|f| f.header().start_time)
                .filter(|&t| t > 0)
                .min()
                .unwrap_or_else(super::writer::now_filetime);
            let mut o = match inputs.first() {
                Some(f) => WriterOptions::from_header(f.header(), f.clock()),
                None => WriterOptions::new(start),
            };
            o.clock = Clock {
                clock_type: ClockType::SystemTime,
                t0: start,
                start_time: start,
                frequency: 10_000_000,
            };
            o.logger_name = "etwkit relog".into();
            o.pointer_size = inputs
                .iter()
                .map(|f| f.header().logger_pointer_size())
                .max()
                .unwrap_or(8);
            o.number_of_processors = inputs
                .iter()
                .map(|f| f.header().number_of_processors)
                .filter(|n| (1..=4096).contains(n))
                .max()
                .unwrap_or(1);
            o
        }
    }
}

/// Relogs `inputs` into the file `out`. Unreadable buffers and records of the inputs are counted in
/// each input's [`ReadSummary`]; a record the writer refuses stops the relog with its error.
pub fn relog_to_file(
    inputs: &[EtlFile],
    filter: &RelogFilter,
    out: &Path,
    opts: WriterOptions,
) -> Result<RelogSummary, WriteError> {
    relog_to_file_with(
        inputs,
        filter,
        out,
        opts,
        super::parallel::default_threads(),
    )
}

/// As [`relog_to_file`], reading and filtering a single input on `threads` threads.
pub fn relog_to_file_with(
    inputs: &[EtlFile],
    filter: &RelogFilter,
    out: &Path,
    opts: WriterOptions,
    threads: usize,
) -> Result<RelogSummary, WriteError> {
    let w = Writer::create(out, opts)?;
    relog_with(inputs, filter, w, threads)
}

/// Relogs `inputs` through an open writer, then finishes it.
pub fn relog<W: super::writer::Output>(
    inputs: &[EtlFile],
    filter: &RelogFilter,
    w: Writer<W>,
) -> Result<RelogSummary, WriteError> {
    relog_with(inputs, filter, w, super::parallel::default_threads())
}

/// As [`relog`]. A single input is read and filtered on `threads` threads (buffers parsed and
/// filtered in parallel, merged in time order: the records reach the writer in exactly the order
/// of a single-threaded walk, so the output is the same file); `threads` ≤ 1 walks it on the
/// calling thread. Several inputs are read on a thread each.
pub fn relog_with<W: super::writer::Output>(
    inputs: &[EtlFile],
    filter: &RelogFilter,
    mut w: Writer<W>,
    threads: usize,
) -> Result<RelogSummary, WriteError> {
    let mut summaries = Vec::with_capacity(inputs.len());
    // Losses of the original sessions carry over, so the copy does not look more complete than it is.
    for f in inputs {
        w.add_events_lost(f.header().events_lost);
        w.add_buffers_lost(f.header().buffers_lost);
    }
    if let ([f], true) = (inputs, threads > 1) {
        summaries.push(relog_parallel(f, filter, &mut w, threads)?);
    } else if let [f] = inputs {
        let clock = f.clock();
        let mut err = None;
        let mut kept = 0u64;
        let mut schema_kept = 0u64;
        let mut rundown_kept = 0u64;
        let read = f.for_each(Order::Time, |r| {
            if is_logfile_header(r) || !filter.matches_in(0, r) {
                return ControlFlow::Continue(());
            }
            match w.write_raw(r.raw, r.cpu, &clock) {
                Ok(()) => {
                    kept += 1;
                    schema_kept += RelogFilter::is_schema(r) as u64;
                    rundown_kept += filter.rundown_outside(r) as u64;
                    ControlFlow::Continue(())
                }
                Err(e) => {
                    err = Some(e);
                    ControlFlow::Break(())
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        summaries.push(RelogInput {
            path: f.path().to_path_buf(),
            read,
            kept,
            schema_kept,
            rundown_kept,
        });
    } else if !inputs.is_empty() {
        summaries = merge_many(inputs, filter, &mut w)?;
    }
    // So do the buffers this copy could not take from them: the ones a cut file lacks and the ones
    // that could not be read (whole or in part). The copy is whole; what it holds is not.
    for (f, i) in inputs.iter().zip(&summaries) {
        // A buffer whose header is corrupt is a bad buffer of the chain (held, unreadable: not
        // among the missing ones); one cut short or with unreadable records is a bad buffer of
        // the walk; the missing ones are the rest the logger wrote. A corrupt header the resync
        // skipped more than one buffer for counts once, so the larger of the two stands.
        let corrupt = f.corrupt_buffers();
        let held_bad = i.read.bad_buffers.saturating_sub(corrupt);
        let gone = held_bad + (f.missing_buffers() as u64).max(corrupt);
        w.add_buffers_lost(u32::try_from(gone).unwrap_or(u32::MAX));
    }
    let written = w.finish()?;
    Ok(RelogSummary {
        inputs: summaries,
        written,
    })
}

/// One input relogged with its buffers parsed and filtered on `threads` worker threads: each kept
/// record travels to the writer as `u32 length, u16 cpu, raw record`.
fn relog_parallel<W: super::writer::Output>(
    f: &EtlFile,
    filter: &RelogFilter,
    w: &mut Writer<W>,
    threads: usize,
) -> Result<RelogInput, WriteError> {
    let clock = f.clock();
    let mut err = None;
    let mut kept = 0u64;
    let schema_kept = std::sync::atomic::AtomicU64::new(0);
    let rundown_kept = std::sync::atomic::AtomicU64::new(0);
    let s = f.par_render_vectored(
        Order::Time,
        threads,
        || (),
        |_, r, out| {
            if is_logfile_header(r) || !filter.matches_in(0, r) {
                return false;
            }
            if RelogFilter::is_schema(r) {
                schema_kept.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if filter.rundown_outside(r) {
                rundown_kept.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            out.extend_from_slice(&(r.raw.len() as u32).to_le_bytes());
            out.extend_from_slice(&r.cpu.to_le_bytes());
            out.extend_from_slice(r.raw);
            true
        },
        &mut |_| {},
        &mut |slices| {
            for s in slices {
                let mut b: &[u8] = s;
                while let Some((head, rest)) = b.split_first_chunk::<6>() {
                    let n = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
                    let cpu = u16::from_le_bytes([head[4], head[5]]);
                    let (raw, rest) = rest.split_at(n);
                    if let Err(e) = w.write_raw(raw, cpu, &clock) {
                        err = Some(e);
                        return ControlFlow::Break(());
                    }
                    kept += 1;
                    b = rest;
                }
            }
            ControlFlow::Continue(())
        },
    );
    if let Some(e) = err {
        return Err(e);
    }
    Ok(RelogInput {
        path: f.path().to_path_buf(),
        read: s.read,
        kept,
        schema_kept: schema_kept.into_inner(),
        rundown_kept: rundown_kept.into_inner(),
    })
}

/// A record taken out of its input for the cross-file merge.
struct Owned {
    utc: i64,
    cpu: u16,
    raw: Vec<u8>,
}

const BATCH: usize = 4096;

/// K-way merge of several inputs, each read in time order on its own thread.
fn merge_many<W: super::writer::Output>(
    inputs: &[EtlFile],
    filter: &RelogFilter,
    w: &mut Writer<W>,
) -> Result<Vec<RelogInput>, WriteError> {
    std::thread::scope(|scope| {
        let mut rxs = Vec::new();
        let mut handles = Vec::new();
        for (input, f) in inputs.iter().enumerate() {
            let (tx, rx) = mpsc::sync_channel::<Vec<Owned>>(4);
            rxs.push(rx);
            handles.push(scope.spawn(move || {
                let mut batch = Vec::with_capacity(BATCH);
                let mut kept = 0u64;
                let mut schema_kept = 0u64;
                let mut rundown_kept = 0u64;
                let mut hung_up = false;
                let read = f.for_each(Order::Time, |r| {
                    if is_logfile_header(r) || !filter.matches_in(input, r) {
                        return ControlFlow::Continue(());
                    }
                    kept += 1;
                    schema_kept += RelogFilter::is_schema(r) as u64;
                    rundown_kept += filter.rundown_outside(r) as u64;
                    batch.push(Owned {
                        utc: r.timestamp,
                        cpu: r.cpu,
                        raw: r.raw.to_vec(),
                    });
                    if batch.len() == BATCH && tx.send(std::mem::take(&mut batch)).is_err() {
                        hung_up = true;
                        return ControlFlow::Break(());
                    }
                    ControlFlow::Continue(())
                });
                if !batch.is_empty() && !hung_up {
                    let _ = tx.send(batch);
                }
                (read, kept, schema_kept, rundown_kept)
            }));
        }
        let clocks: Vec<Clock> = inputs.iter().map(|f| f.clock()).collect();
        let mut current: Vec<std::vec::IntoIter<Owned>> = Vec::new();
        let mut heads: Vec<Option<Owned>> = Vec::new();
        let mut heap = BinaryHeap::new();
        for (i, rx) in rxs.iter().enumerate() {
            let mut it = rx.recv().unwrap_or_default().into_iter();
            let head = it.next();
            if let Some(h) = &head {
                heap.push(Reverse((h.utc, i)));
            }
            current.push(it);
            heads.push(head);
        }
        let mut result = Ok(());
        while let Some(Reverse((_, i))) = heap.pop() {
            let rec = heads[i].take().expect("head present for heap entry");
            if let Err(e) = w.write_raw(&rec.raw, rec.cpu, &clocks[i]) {
                result = Err(e);
                break;
            }
            let next = match current[i].next() {
                Some(n) => Some(n),
                None => match rxs[i].recv() {
                    Ok(b) => {
                        current[i] = b.into_iter();
                        current[i].next()
                    }
                    Err(_) => None,
                },
            };
            if let Some(n) = &next {
                heap.push(Reverse((n.utc, i)));
            }
            heads[i] = next;
        }
        // Stop producers still running (on error) by dropping the receivers.
        drop(rxs);
        let mut out = Vec::new();
        for (f, h) in inputs.iter().zip(handles) {
            let Ok((read, kept, schema_kept, rundown_kept)) = h.join() else {
                return Err(WriteError::Failed(format!(
                    "the reader of {} panicked",
                    f.path().display()
                )));
            };
            out.push(RelogInput {
                path: f.path().to_path_buf(),
                read,
                kept,
                schema_kept,
                rundown_kept,
            });
        }
        result.map(|_| out)
    })
}
