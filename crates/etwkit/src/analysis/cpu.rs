//! Where the CPU time went: a sampling profile from kernel PerfInfo SampledProfile events, as
//! PerfView's CPU Stacks view starts from.
//!
//! Input: decoded SampledProfile records (PerfInfo group ce1dbfb4-…, opcode 46: InstructionPointer,
//! ThreadId, Count), each attributed to its process as the decoder attributes kernel records (the
//! payload's thread through the trace's thread table: [`crate::decode::Ids`]), with its stack when
//! the decoder's stack index joined a kernel StackWalk to it (the stack's first frame is the
//! instruction pointer); a sample without a stack stands for its instruction pointer alone. Frames
//! are named `module+0xOFFSET` from the trace's own image events ([`ModuleMap`]: Image
//! Load/UnLoad/DCStart/DCEnd, KernelTraceControl ImageID, Process End) as they stood when the sample
//! was taken (samples are grouped by process, the era of its modules and stack; a stack is named at
//! its group's last sample); kernel addresses are looked up in the kernel's
//! images (pid 0, else the System process, pid 4). An address in no module but in JIT-compiled
//! .NET code is named by the trace's .NET method events of its time (`Namespace.Method`; its module stays
//! unknown, `?`). No PDBs are read: frames stay module+offset, as PerfView shows frames it could
//! not resolve. The sampling interval comes from PerfInfo
//! CollectionStart/CollectionEnd (the timer source's NewInterval, in 100 ns units).
//!
//! [`CpuAnalyzer`] takes the events ([`CpuAnalyzer::add_event`], [`CpuAnalyzer::add_image`],
//! [`CpuAnalyzer::add_interval`]); [`CpuAnalyzer::report`] names the frames and ranks processes,
//! modules (exclusive: the leaf frame's; inclusive: anywhere in the stack, once per sample) and
//! stacks. [`analyze_file`] does it for a saved trace.

use std::collections::HashMap;
use std::sync::Arc;

use crate::decode::symbols::{Frame, ModuleMap, SymbolSummary, Symbolizer};
use crate::decode::{DecodedEvent, Decoder};
use crate::event::EventRecord;

// The PerfInfo group and its SampledProfile opcode (facts of the decoder's stack join).
pub use crate::decode::stacks::{OPCODE_SAMPLED_PROFILE, PERFINFO_GUID};
use crate::guid::Guid;
/// The .NET runtime and its rundown provider: their MethodLoadVerbose/MethodUnloadVerbose and
/// MethodDCStartVerbose/MethodDCStopVerbose events (ids 143, 144) place JIT-compiled methods.
pub const CLR_RUNTIME: Guid = Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4");
pub const CLR_RUNDOWN: Guid = Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18");
pub const CLR_METHOD_VERBOSE_IDS: [u16; 2] = [143, 144];

/// PerfInfo events carrying the sampling interval (SetInterval, CollectionStart, CollectionEnd).
pub const OPCODES_INTERVAL: [u8; 3] = [72, 73, 74];

/// The name of a frame outside every known module's exclusive/inclusive account.
pub const UNKNOWN_MODULE: &str = "?";

/// The end of a JIT-compiled method's code and its `Namespace.Name`; `None` for no code.
fn jit_method(start: u64, size: u64, namespace: &str, name: &str) -> Option<(u64, String)> {
    let full = match namespace {
        "" => name.to_string(),
        ns => format!("{ns}.{name}"),
    };
    (size > 0).then(|| (start.saturating_add(size), full))
}

/// Whether `rec` is a .NET method event that places JIT-compiled code (see [`CLR_RUNTIME`]).
pub fn is_clr_method(rec: &EventRecord<'_>) -> bool {
    (rec.provider == CLR_RUNTIME || rec.provider == CLR_RUNDOWN)
        && rec.header_type.is_event_header()
        && CLR_METHOD_VERBOSE_IDS.contains(&rec.descriptor.id)
}

/// Whether `rec` is a kernel SampledProfile record.
pub fn is_sample(rec: &EventRecord<'_>) -> bool {
    rec.header_type.is_kernel()
        && rec.provider == PERFINFO_GUID
        && rec.descriptor.opcode == OPCODE_SAMPLED_PROFILE
}

/// One CPU sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// The process it ran in (`None`: not attributed).
    pub pid: Option<u32>,
    pub process: Option<Arc<str>>,
    pub ip: u64,
    /// Innermost first, starting at `ip`; empty when the sample had no stack.
    pub stack: Vec<u64>,
    /// The record's pointer size (4 or 8): which addresses are kernel space.
    pub pointer_size: u8,
    /// When it was taken (the record's timestamp): which modules its addresses name.
    pub time: i64,
}

impl CpuSample {
    /// The sample of a decoded SampledProfile record; `None` for any other record, or one whose
    /// InstructionPointer did not decode.
    pub fn from_event(rec: &EventRecord<'_>, ev: &DecodedEvent) -> Option<CpuSample> {
        if !is_sample(rec) {
            return None;
        }
        let ip = ev.properties.get("InstructionPointer")?.as_u64()?;
        let pid = ev.ids.map_or(rec.pid, |i| i.pid);
        let mut stack = ev
            .stack
            .as_ref()
            .map(|s| s.addresses.clone())
            .unwrap_or_default();
        // The walk starts at the interrupted instruction; where it does not, the IP leads.
        if !stack.is_empty() && stack[0] != ip {
            stack.insert(0, ip);
        }
        Some(CpuSample {
            pid: (pid != u32::MAX).then_some(pid),
            process: ev.process_name.clone(),
            ip,
            stack,
            pointer_size: rec.pointer_size,
            time: rec.timestamp,
        })
    }
}

/// Samples of one (process, address stack) within one era of the process's modules.
struct Group {
    samples: u64,
    /// The last sample's time: its frames are named by the modules loaded then.
    time: i64,
}

/// What samples are grouped by: the process (id, and the name it had: a pid is reused), the era of
/// its modules ([`ModuleMap::era`]: the same address may name another module in another era),
/// and the frames (the stack, or the IP alone).
type GroupKey = (Option<u32>, Option<Arc<str>>, u32, Vec<u64>);

/// Accumulates samples, images and the sampling interval; [`CpuAnalyzer::report`] summarizes.
#[derive(Default)]
pub struct CpuAnalyzer {
    modules: ModuleMap,
    /// JIT-compiled methods by process, address range and time (`Namespace.Name` as the path).
    methods: ModuleMap,
    /// Samples by process, era and frames.
    groups: HashMap<GroupKey, Group>,
    /// The last name each pid had (for its samples that came without one).
    names: HashMap<Option<u32>, Arc<str>>,
    total: u64,
    with_stack: u64,
    pointer_size: u8,
    /// The timer's sampling interval, 100 ns units.
    interval: Option<u64>,
    /// SampledProfile records whose InstructionPointer did not decode.
    malformed: u64,
    notes: Vec<String>,
    lost_events: u64,
    lost_buffers: u64,
}

impl CpuAnalyzer {
    pub fn new() -> CpuAnalyzer {
        CpuAnalyzer::default()
    }

    /// Counts one sample.
    pub fn add(&mut self, s: CpuSample) {
        self.total += 1;
        self.pointer_size = s.pointer_size;
        let process = match s.process {
            Some(n) => {
                self.names.insert(s.pid, n.clone());
                Some(n)
            }
            None => self.names.get(&s.pid).cloned(),
        };
        let frames = match s.stack.is_empty() {
            true => vec![s.ip],
            false => {
                self.with_stack += 1;
                s.stack
            }
        };
        let era = s
            .pid
            .map_or(0, |p| self.modules.era(p).wrapping_add(self.methods.era(p)));
        let g = self
            .groups
            .entry((s.pid, process, era, frames))
            .or_insert(Group {
                samples: 0,
                time: s.time,
            });
        g.samples += 1;
        g.time = g.time.max(s.time);
    }

    /// A decoded SampledProfile record (others are ignored): true when it was one. One whose
    /// InstructionPointer did not decode is counted apart (a note).
    pub fn add_event(&mut self, rec: &EventRecord<'_>, ev: &DecodedEvent) -> bool {
        if !is_sample(rec) {
            return false;
        }
        match CpuSample::from_event(rec, ev) {
            Some(s) => self.add(s),
            None => self.malformed += 1,
        }
        true
    }

    /// An image event (kernel Image, KernelTraceControl ImageID) for naming frames, or a kernel
    /// Process End/Defunct (its modules end): true when it was an image event.
    pub fn add_image(&mut self, rec: &EventRecord<'_>) -> bool {
        let image = self.modules.push(rec);
        if !image {
            // A process's end ends its JIT-compiled code too.
            self.methods.push_process_end(rec);
        }
        image
    }

    /// A decoded .NET method event (MethodLoadVerbose, MethodUnloadVerbose, MethodDCStartVerbose,
    /// MethodDCStopVerbose): the method's code range in the record's process names the frames
    /// no module holds. True when it was one.
    pub fn add_method(&mut self, rec: &EventRecord<'_>, ev: &DecodedEvent) -> bool {
        if !is_clr_method(rec) {
            return false;
        }
        let p = &ev.properties;
        let start = p.get("MethodStartAddress").and_then(|v| v.as_u64());
        let size = p.get("MethodSize").and_then(|v| v.as_u64());
        let name = p.get("MethodName").and_then(|v| v.as_str());
        let ns = p.get("MethodNamespace").and_then(|v| v.as_str());
        let (Some(start), Some(size), Some(name)) = (start, size, name) else {
            return true;
        };
        let Some((end, full)) = jit_method(start, size, ns.unwrap_or(""), name) else {
            return true;
        };
        let (pid, t) = (rec.pid, rec.timestamp);
        // The runtime's MethodLoadVerbose (143) and MethodUnloadVerbose (144) place the code in
        // time; the rundown's MethodDCStartVerbose/MethodDCStopVerbose (the same ids) say it is there.
        match (rec.provider, rec.descriptor.id) {
            (CLR_RUNTIME, 143) => self.methods.insert_loaded(pid, start, end, &full, t),
            (CLR_RUNTIME, _) => self.methods.unload(pid, start, end, &full, t),
            _ => self.methods.insert(pid, start, end, &full),
        }
        true
    }

    /// Names `start..start+size` of process `pid` `namespace.name` (JIT-compiled code there for
    /// the whole trace).
    pub fn add_jit_method(&mut self, pid: u32, start: u64, size: u64, namespace: &str, name: &str) {
        if let Some((end, full)) = jit_method(start, size, namespace, name) {
            self.methods.insert(pid, start, end, &full);
        }
    }

    /// The JIT-compiled method holding `addr` in `pid` at `time`.
    fn method(&self, pid: Option<u32>, addr: u64, time: i64) -> Option<&str> {
        self.methods.path_at(pid?, addr, time)
    }

    /// The modules the image events loaded.
    pub fn modules_mut(&mut self) -> &mut ModuleMap {
        &mut self.modules
    }

    /// A decoded PerfInfo interval event (SetInterval, CollectionStart, CollectionEnd): the timer
    /// source's (Source 0) NewInterval, in 100 ns units, becomes the sampling interval. True
    /// when it was one.
    pub fn add_interval(&mut self, rec: &EventRecord<'_>, ev: &DecodedEvent) -> bool {
        if !(rec.header_type.is_kernel()
            && rec.provider == PERFINFO_GUID
            && OPCODES_INTERVAL.contains(&rec.descriptor.opcode))
        {
            return false;
        }
        let p = &ev.properties;
        let source = p.get("Source").and_then(|v| v.as_u64());
        let interval = p.get("NewInterval").and_then(|v| v.as_u64());
        if let (Some(0), Some(i)) = (source, interval) {
            if i > 0 {
                self.interval = Some(i);
            }
        }
        true
    }

    /// Sets the sampling interval (100 ns units).
    pub fn set_interval(&mut self, interval_100ns: u64) {
        self.interval = (interval_100ns > 0).then_some(interval_100ns);
    }

    /// Events the logger lost and buffers it lost (the figures are low by at least that much).
    pub fn add_lost(&mut self, events: u64, buffers: u64) {
        self.lost_events += events;
        self.lost_buffers += buffers;
    }

    pub fn add_note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Samples counted so far.
    pub fn samples(&self) -> u64 {
        self.total
    }

    /// Names `addr` of process `pid` at `time`: in the process's modules, then the kernel's (with
    /// the function and line from the module's PDB when `symbols` finds it), else a JIT-compiled
    /// method.
    fn frame(
        &self,
        pid: Option<u32>,
        addr: u64,
        time: i64,
        symbols: Option<&mut Symbolizer>,
    ) -> Frame {
        let kernel = match self.pointer_size {
            4 => addr >= 0x8000_0000,
            _ => addr >= 0x8000_0000_0000_0000,
        };
        let found = self
            .modules
            .module_ref(pid.unwrap_or(u32::MAX), addr, Some(time))
            .or_else(|| {
                kernel
                    .then(|| self.modules.module_ref(4, addr, Some(time)))
                    .flatten()
            });
        match found {
            Some(m) => m.frame(addr, symbols),
            None => Frame {
                function: self.method(pid, addr, time).map(|n| n.to_string()),
                ..Frame::unknown(addr)
            },
        }
    }

    /// The report: every process and module, the `top` stacks (all of them stay in
    /// [`CpuReport::stacks`] for profiles) with at most `frames` frames shown each.
    pub fn report(&self, top: usize, frames: usize) -> CpuReport {
        self.report_with(top, frames, None)
    }

    /// [`CpuAnalyzer::report`], naming the frames of Windows modules by function and line from
    /// the PDBs `symbols` finds (what it read and missed is the report's `symbols`).
    pub fn report_with(
        &self,
        top: usize,
        frames: usize,
        mut symbols: Option<&mut Symbolizer>,
    ) -> CpuReport {
        let total = self.total;
        let share = |n: u64| match total {
            0 => 0.0,
            t => n as f64 / t as f64,
        };
        let mut procs: HashMap<(Option<u32>, Option<&Arc<str>>), u64> = HashMap::new();
        let mut exclusive: HashMap<String, u64> = HashMap::new();
        let mut inclusive: HashMap<String, u64> = HashMap::new();
        // Named stacks by (process, era, frames): distinct addresses name distinct frames.
        let mut stacks: Vec<NamedStack> = Vec::with_capacity(self.groups.len());
        for ((pid, process, _, addrs), g) in &self.groups {
            *procs.entry((*pid, process.as_ref())).or_default() += g.samples;
            let named: Vec<Frame> = addrs
                .iter()
                .map(|&a| self.frame(*pid, a, g.time, symbols.as_deref_mut()))
                .collect();
            let module = |f: &Frame| f.module.clone().unwrap_or_else(|| UNKNOWN_MODULE.into());
            if let Some(leaf) = named.first() {
                *exclusive.entry(module(leaf)).or_default() += g.samples;
            }
            let mut seen: Vec<String> = named.iter().map(module).collect();
            seen.sort();
            seen.dedup();
            for m in seen {
                *inclusive.entry(m).or_default() += g.samples;
            }
            stacks.push(NamedStack {
                pid: *pid,
                process: process.as_ref().map(|n| n.to_string()),
                samples: g.samples,
                frames: named,
            });
        }
        // The same named stack from two eras of its process's modules is one stack.
        stacks.sort_by(|a, b| (a.pid, &a.process, &a.frames).cmp(&(b.pid, &b.process, &b.frames)));
        stacks.dedup_by(|later, kept| {
            let same = (later.pid, &later.process, &later.frames)
                == (kept.pid, &kept.process, &kept.frames);
            if same {
                kept.samples += later.samples;
            }
            same
        });
        stacks.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then(a.pid.cmp(&b.pid))
                .then_with(|| a.process.cmp(&b.process))
                .then_with(|| a.frames.cmp(&b.frames))
        });
        let mut processes: Vec<ProcessSamples> = procs
            .into_iter()
            .map(|((pid, name), samples)| ProcessSamples {
                pid,
                name: name.map(|n| n.to_string()),
                samples,
                share: share(samples),
            })
            .collect();
        processes.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then(a.pid.cmp(&b.pid))
                .then_with(|| a.name.cmp(&b.name))
        });
        let ranked = |m: HashMap<String, u64>| {
            let mut v: Vec<ModuleSamples> = m
                .into_iter()
                .map(|(module, samples)| ModuleSamples {
                    module,
                    samples,
                    share: share(samples),
                })
                .collect();
            v.sort_by(|a, b| {
                b.samples
                    .cmp(&a.samples)
                    .then_with(|| a.module.cmp(&b.module))
            });
            v
        };
        let top_stacks = stacks
            .iter()
            .take(top)
            .map(|s| StackSamples {
                pid: s.pid,
                process: s.process.clone(),
                samples: s.samples,
                share: share(s.samples),
                depth: s.frames.len(),
                frames: s.frames.iter().take(frames).map(Frame::display).collect(),
            })
            .collect();
        let mut notes = self.notes.clone();
        if self.malformed > 0 {
            notes.push(format!(
                "{} SampledProfile events had no readable InstructionPointer (not counted)",
                self.malformed
            ));
        }
        if self.modules.malformed > 0 {
            notes.push(format!(
                "{} image events too short to decode",
                self.modules.malformed
            ));
        }
        CpuReport {
            total_samples: total,
            samples_with_stack: self.with_stack,
            sampling_interval_ns: self.interval.map(|i| i * 100),
            lost_events: self.lost_events,
            lost_buffers: self.lost_buffers,
            notes,
            processes,
            modules_exclusive: ranked(exclusive),
            modules_inclusive: ranked(inclusive),
            top_stacks,
            stacks,
            symbols: symbols.map(|s| s.summary()),
        }
    }
}

/// A process's samples.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ProcessSamples {
    /// `None`: samples no process could be attributed to.
    pub pid: Option<u32>,
    pub name: Option<String>,
    pub samples: u64,
    /// Of all samples (0..1).
    pub share: f64,
}

/// A module's samples (`?`: addresses in no known module).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModuleSamples {
    pub module: String,
    pub samples: u64,
    pub share: f64,
}

/// A stack's samples, as shown: frames leaf first (`module+0xOFFSET` or `0xADDR`), cut to the
/// report's frame limit.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StackSamples {
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub samples: u64,
    pub share: f64,
    /// Frames in the whole stack.
    pub depth: usize,
    pub frames: Vec<String>,
}

/// A stack's samples with every frame named (for profiles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedStack {
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub samples: u64,
    /// Leaf first; the instruction pointer alone for a sample without a stack.
    pub frames: Vec<Frame>,
}

/// The CPU sampling report.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CpuReport {
    /// SampledProfile events counted.
    pub total_samples: u64,
    /// Of those, the ones with a stack (the rest stand for their instruction pointer).
    pub samples_with_stack: u64,
    /// The timer's sampling interval, when the trace gives it.
    pub sampling_interval_ns: Option<u64>,
    /// Events and buffers the logger says it lost.
    pub lost_events: u64,
    pub lost_buffers: u64,
    pub notes: Vec<String>,
    /// Every process, most samples first.
    pub processes: Vec<ProcessSamples>,
    /// Every module by the samples whose leaf frame is in it (they sum to `total_samples`).
    pub modules_exclusive: Vec<ModuleSamples>,
    /// Every module by the samples with it anywhere in the stack (once per sample).
    pub modules_inclusive: Vec<ModuleSamples>,
    /// The most sampled stacks.
    pub top_stacks: Vec<StackSamples>,
    /// Every stack, most samples first, every frame named.
    #[serde(skip)]
    pub stacks: Vec<NamedStack>,
    /// The PDB files read to name frames, and those wanted but not read (only when a symbol
    /// path was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbols: Option<SymbolSummary>,
}

impl CpuReport {
    /// Human-readable table: the header, every process, the `top` modules of each ranking and the
    /// report's top stacks.
    pub fn to_table(&self, top: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let pct = |x: f64| format!("{:.1}%", x * 100.0);
        let interval = match self.sampling_interval_ns {
            Some(ns) => format!(", sampling interval {:.4} ms", ns as f64 / 1e6),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "CPU samples: {} ({} with stacks){interval}",
            self.total_samples, self.samples_with_stack
        );
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        let _ = writeln!(s, "\nPer process:");
        let _ = writeln!(s, "{:>8} {:>10} {:>7}  name", "pid", "samples", "share");
        for p in &self.processes {
            let pid = p.pid.map_or_else(|| "?".to_string(), |p| p.to_string());
            let _ = writeln!(
                s,
                "{pid:>8} {:>10} {:>7}  {}",
                p.samples,
                pct(p.share),
                p.name.as_deref().unwrap_or("?")
            );
        }
        let modules = |s: &mut String, title: &str, v: &[ModuleSamples]| {
            let _ = writeln!(s, "\n{title}:");
            let _ = writeln!(s, "{:>10} {:>7}  module", "samples", "share");
            for m in v.iter().take(top) {
                let _ = writeln!(s, "{:>10} {:>7}  {}", m.samples, pct(m.share), m.module);
            }
            if v.len() > top {
                let _ = writeln!(s, "{:>10} {:>7}  ({} more)", "", "", v.len() - top);
            }
        };
        modules(
            &mut s,
            "Top modules by exclusive samples (leaf frame)",
            &self.modules_exclusive,
        );
        modules(
            &mut s,
            "Top modules by inclusive samples (anywhere in the stack)",
            &self.modules_inclusive,
        );
        let _ = writeln!(s, "\nTop stacks (leaf first):");
        for st in &self.top_stacks {
            let who = match (&st.process, st.pid) {
                (Some(n), Some(p)) => format!("{n} ({p})"),
                (None, Some(p)) => format!("pid {p}"),
                (Some(n), None) => n.clone(),
                (None, None) => "unknown process".into(),
            };
            let _ = writeln!(s, "  {} samples ({}), {who}", st.samples, pct(st.share));
            for f in &st.frames {
                let _ = writeln!(s, "      {f}");
            }
            if st.depth > st.frames.len() {
                let _ = writeln!(s, "      ... {} more frames", st.depth - st.frames.len());
            }
        }
        s
    }
}

/// The report as a stack profile: `samples`/count (the default, which flame graphs draw) and,
/// when the sampling interval is known, `cpu`/nanoseconds (samples times the interval); one
/// sample per stack of [`CpuReport::stacks`].
impl crate::export::profile::ToStackProfile for CpuReport {
    fn to_stack_profile(&self) -> crate::export::profile::StackProfile {
        use crate::export::profile::{FlameStyle, ProfileSample, StackProfile, ValueType};
        let mut sample_types = vec![ValueType::new("samples", "count")];
        let (period_type, period) = match self.sampling_interval_ns {
            Some(ns) => {
                sample_types.push(ValueType::new("cpu", "nanoseconds"));
                (ValueType::new("cpu", "nanoseconds"), ns)
            }
            None => (ValueType::new("samples", "count"), 1),
        };
        let samples = self
            .stacks
            .iter()
            .map(|s| {
                let mut values = vec![s.samples];
                if let Some(ns) = self.sampling_interval_ns {
                    values.push(s.samples * ns);
                }
                ProfileSample {
                    pid: s.pid,
                    process: s.process.clone(),
                    frames: s.frames.clone(),
                    values,
                }
            })
            .collect();
        StackProfile {
            sample_types,
            default_sample_type: 0,
            period_type,
            period,
            comments: self.notes.clone(),
            samples,
            flame: FlameStyle {
                title: "CPU samples by stack".into(),
                count_name: "samples".into(),
                memory: false,
                empty_subtitle: "no SampledProfile events".into(),
                empty_frame: "[no samples]".into(),
            },
        }
    }
}

/// What [`analyze_file`] read: the analysis, and the walk's summary (every part that could not be
/// read, by file offset and reason).
pub struct FileAnalysis {
    pub analyzer: CpuAnalyzer,
    pub read: crate::etl::ReadSummary,
    /// SampledProfile records in the file, kept by `filter` or not.
    pub samples_in_file: u64,
}

/// Reads a saved trace in time order: SampledProfile records that `filter` keeps (`--pid` by the
/// process the decoder attributes), decoded by `decoder` (made for this file, with its stack
/// index and thread table: [`Decoder::for_file`]); image and interval events whatever the filter.
/// The logger's losses become the report's `lost_events`/`lost_buffers`.
pub fn analyze_file(
    file: &crate::etl::EtlFile,
    decoder: &Decoder,
    filter: &crate::filter::EventFilter,
) -> FileAnalysis {
    let mut an = CpuAnalyzer::new();
    let keep_all = filter.is_empty();
    let mut in_file = 0u64;
    let read = file.for_each(crate::etl::Order::Time, |r| {
        let rec = &r.event;
        if is_sample(rec) {
            in_file += 1;
            if keep_all || decoder.matches(filter, rec) {
                an.add_event(rec, &decoder.decode(rec));
            }
        } else if rec.header_type.is_kernel() && rec.provider == PERFINFO_GUID {
            if OPCODES_INTERVAL.contains(&rec.descriptor.opcode) {
                an.add_interval(rec, &decoder.decode(rec));
            }
        } else if is_clr_method(rec) {
            an.add_method(rec, &decoder.decode(rec));
        } else {
            an.add_image(rec);
        }
        std::ops::ControlFlow::Continue(())
    });
    let h = file.header();
    an.add_lost(h.events_lost as u64, h.buffers_lost as u64);
    FileAnalysis {
        analyzer: an,
        read,
        samples_in_file: in_file,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Module totals of a report by name (for checks): exclusive and inclusive samples.
    fn module_totals(report: &CpuReport) -> BTreeMap<&str, (u64, u64)> {
        let mut m: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for x in &report.modules_exclusive {
            m.entry(&x.module).or_default().0 = x.samples;
        }
        for x in &report.modules_inclusive {
            m.entry(&x.module).or_default().1 = x.samples;
        }
        m
    }

    fn sample(pid: u32, ip: u64, stack: &[u64]) -> CpuSample {
        CpuSample {
            pid: Some(pid),
            process: Some(Arc::from(format!("p{pid}.exe").as_str())),
            ip,
            stack: stack.to_vec(),
            pointer_size: 8,
            time: 0,
        }
    }

    const K: u64 = 0xffff_f800_0000_0000;

    fn analyzer() -> CpuAnalyzer {
        let mut an = CpuAnalyzer::new();
        let m = an.modules_mut();
        m.insert(0, K, K + 0x10_0000, r"\SystemRoot\system32\ntoskrnl.exe");
        m.insert(10, 0x40_0000, 0x41_0000, r"C:\app\app.exe");
        m.insert(
            10,
            0x7ff0_0000,
            0x7ff1_0000,
            r"C:\Windows\System32\ntdll.dll",
        );
        m.insert(20, 0x50_0000, 0x51_0000, r"C:\other\other.exe");
        an
    }

    #[test]
    fn modules_exclusive_inclusive_and_stacks() {
        let mut an = analyzer();
        // Twice: kernel leaf over app code in pid 10.
        for _ in 0..2 {
            an.add(sample(
                10,
                K + 0x10,
                &[K + 0x10, 0x7ff0_0020, 0x40_0100, 0x40_0200],
            ));
        }
        // Once without a stack, in app.exe.
        an.add(sample(10, 0x40_0300, &[]));
        // Once in pid 20, at an address in no module, with app-like recursion in the stack.
        an.add(sample(20, 0x9999, &[0x9999, 0x50_0010, 0x50_0010]));
        // A kernel address from a process with no kernel images of its own: pid 0's serve it.
        an.add(sample(20, K + 0x20, &[]));
        let r = an.report(10, 3);
        assert_eq!(r.total_samples, 5);
        assert_eq!(r.samples_with_stack, 3);
        assert_eq!(
            r.processes
                .iter()
                .map(|p| (p.pid, p.samples))
                .collect::<Vec<_>>(),
            [(Some(10), 3), (Some(20), 2)]
        );
        assert_eq!(r.processes[0].name.as_deref(), Some("p10.exe"));
        let t = module_totals(&r);
        assert_eq!(t["ntoskrnl.exe"], (3, 3));
        assert_eq!(t["app.exe"], (1, 3));
        assert_eq!(t["ntdll.dll"], (0, 2));
        assert_eq!(t[UNKNOWN_MODULE], (1, 1));
        assert_eq!(t["other.exe"], (0, 1), "counted once per sample");
        let excl: u64 = r.modules_exclusive.iter().map(|m| m.samples).sum();
        assert_eq!(excl, r.total_samples);
        let top = &r.top_stacks[0];
        assert_eq!((top.pid, top.samples, top.depth), (Some(10), 2, 4));
        assert_eq!(
            top.frames,
            ["ntoskrnl.exe+0x10", "ntdll.dll+0x20", "app.exe+0x100"],
            "leaf first, cut to 3 frames"
        );
        assert!(r
            .top_stacks
            .iter()
            .any(|s| s.frames == ["0x9999", "other.exe+0x10", "other.exe+0x10"]));
        assert!((r.processes[0].share - 0.6).abs() < 1e-9);
    }

    #[test]
    fn jit_compiled_methods_name_frames_outside_modules() {
        let mut an = analyzer();
        an.add_jit_method(10, 0x9000, 0x100, "Test.Program", "Main");
        an.add_jit_method(20, 0x9000, 0x100, "", "Other");
        an.add(sample(10, 0x9010, &[0x9010, 0x40_0010, 0x9100]));
        an.add(sample(20, 0x90ff, &[]));
        let r = an.report(10, 10);
        let frames: Vec<&Vec<String>> = r.top_stacks.iter().map(|s| &s.frames).collect();
        assert!(frames.contains(&&vec![
            "Test.Program.Main".to_string(),
            "app.exe+0x10".into(),
            "0x9100".into()
        ]));
        assert!(frames.contains(&&vec!["Other".to_string()]), "{frames:?}");
        // Their module stays unknown.
        assert_eq!(module_totals(&r)[UNKNOWN_MODULE], (2, 2));
    }

    #[test]
    fn frames_are_named_by_the_modules_of_their_time() {
        let mut an = CpuAnalyzer::new();
        let at = |pid: u32, name: &str, ip: u64, stack: &[u64], time: i64| CpuSample {
            process: Some(Arc::from(name)),
            time,
            ..sample(pid, ip, stack)
        };
        let m = an.modules_mut();
        m.insert(0, K, K + 0x10_0000, r"\SystemRoot\system32\ntoskrnl.exe");
        m.insert_loaded(10, 0x40_0000, 0x41_0000, r"C:\a.exe", 100);
        m.insert_loaded(10, 0x7000_0000, 0x7001_0000, r"C:\one.dll", 100);
        // a.exe in one.dll, twice; then one.dll is unloaded and two.dll loaded at its address.
        an.add(at(10, "a.exe", 0x7000_0010, &[0x7000_0010, 0x40_0020], 150));
        an.add(at(10, "a.exe", 0x7000_0010, &[0x7000_0010, 0x40_0020], 160));
        an.add(at(10, "a.exe", 0x40_0030, &[], 170));
        let m = an.modules_mut();
        m.unload(10, 0x7000_0000, 0x7001_0000, r"C:\one.dll", 200);
        m.insert_loaded(10, 0x7000_0000, 0x7002_0000, r"C:\two.dll", 210);
        an.add(at(10, "a.exe", 0x7000_0010, &[0x7000_0010, 0x40_0020], 250));
        // The same IP alone in both eras: one stack.
        an.add(at(10, "a.exe", 0x40_0030, &[], 260));
        // Process 10 ends; pid 10 is then b.exe, which has a module where a.exe had its own.
        an.modules_mut().end_process(10, 300);
        an.modules_mut()
            .insert_loaded(10, 0x40_0000, 0x40_8000, r"C:\b.exe", 400);
        an.add(at(10, "b.exe", 0x40_0020, &[0x40_0020, K + 5], 500));
        an.add(at(10, "b.exe", 0x40_9000, &[], 510));
        let r = an.report(10, 10);
        let procs: Vec<(Option<u32>, Option<&str>, u64)> = r
            .processes
            .iter()
            .map(|p| (p.pid, p.name.as_deref(), p.samples))
            .collect();
        assert_eq!(
            procs,
            [(Some(10), Some("a.exe"), 5), (Some(10), Some("b.exe"), 2)]
        );
        let stacks: Vec<(&str, u64, Vec<&str>)> = r
            .top_stacks
            .iter()
            .map(|s| {
                let frames = s.frames.iter().map(|f| f.as_str()).collect();
                (s.process.as_deref().unwrap(), s.samples, frames)
            })
            .collect();
        assert_eq!(
            stacks,
            [
                ("a.exe", 2, vec!["a.exe+0x30"]),
                ("a.exe", 2, vec!["one.dll+0x10", "a.exe+0x20"]),
                ("a.exe", 1, vec!["two.dll+0x10", "a.exe+0x20"]),
                ("b.exe", 1, vec!["b.exe+0x20", "ntoskrnl.exe+0x5"]),
                ("b.exe", 1, vec!["0x409000"]),
            ]
        );
        let t = module_totals(&r);
        assert_eq!(
            (t["one.dll"], t["two.dll"], t["a.exe"], t["b.exe"]),
            ((2, 2), (1, 1), (2, 5), (1, 1))
        );
    }

    #[test]
    fn kernel_images_of_the_system_process() {
        let mut an = CpuAnalyzer::new();
        an.modules_mut()
            .insert(4, K, K + 0x1000, r"\SystemRoot\system32\drivers\x.sys");
        an.add(sample(30, K + 8, &[]));
        an.add(sample(30, 0x1234, &[]));
        let r = an.report(10, 10);
        let t = module_totals(&r);
        assert_eq!(t["x.sys"], (1, 1));
        assert_eq!(
            t[UNKNOWN_MODULE],
            (1, 1),
            "user addresses are not looked up in pid 4"
        );
    }

    #[test]
    fn profile_values_and_empty_report() {
        use crate::export::profile::ToStackProfile;
        let mut an = analyzer();
        an.set_interval(10_000);
        an.add(sample(10, 0x40_0010, &[0x40_0010, 0x40_0020]));
        an.add(sample(10, 0x40_0010, &[0x40_0010, 0x40_0020]));
        let r = an.report(10, 10);
        assert_eq!(r.sampling_interval_ns, Some(1_000_000));
        let p = r.to_stack_profile();
        assert_eq!(p.sample_types.len(), 2);
        assert_eq!(p.samples.len(), 1);
        assert_eq!(p.samples[0].values, [2, 2_000_000]);
        assert_eq!(p.period, 1_000_000);
        assert_eq!(
            crate::export::profile::frame_function(&p.samples[0].frames[1]),
            "app.exe+0x20"
        );

        let r = CpuAnalyzer::new().report(10, 10);
        assert_eq!(r.total_samples, 0);
        assert!(r.processes.is_empty() && r.top_stacks.is_empty());
        let p = r.to_stack_profile();
        assert_eq!(p.sample_types.len(), 1, "no interval: samples only");
        assert!(p.samples.is_empty());
    }
}
