//! Naming stack addresses: [`Frame`], the [`StackNamer`] trait every namer implements (the Linux
//! ELF unwinder in `live::linux::unwind`, [`ModuleNamer`] here), and [`ModuleMap`], the modules a
//! trace's own image events load (Windows kernel Image Load/UnLoad/DCStart/DCEnd, KernelTraceControl
//! ImageID, etwkit's Image events), by process, address range and time, with each Windows image's
//! PDB signature (KernelTraceControl DbgID_RSDS) for [`pdb::Symbolizer`] to name functions and
//! lines from a [`store::SymbolPath`].

pub mod fetch;
pub mod pdb;
pub mod store;

pub use pdb::{PdbId, SymbolSummary, Symbolizer};
pub use store::SymbolPath;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::event::EventRecord;
use crate::guid::Guid;
use crate::schema::builtin::heap_events::ImageMapping;

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
    /// Code inlined into `function` at this address, innermost first (from a PDB): each
    /// function with the line of the instruction in it, or of its call into the one before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inlined: Vec<Inlined>,
}

/// One inlined call at an address: the function and its source line there.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Inlined {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl Frame {
    pub fn unknown(address: u64) -> Frame {
        Frame {
            address,
            ..Default::default()
        }
    }

    /// `function (file:line)` (`module!function (file:line)` for a Windows module's function, named
    /// from its PDB), `module+0xOFFSET`, `module!0xADDR` or `0xADDR`.
    pub fn display(&self) -> String {
        let mut s = match (&self.function, &self.module, self.offset) {
            (Some(f), Some(m), Some(_)) => format!("{m}!{f}"),
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

    /// [`StackNamer::name`] as the process's code stood at `time` (UTC FILETIME): a namer that
    /// knows when modules came and went names by those of that time; others name as `name` does.
    fn name_at(&mut self, pid: u32, stack: &[u64], time: i64) -> Vec<Frame> {
        let _ = time;
        self.name(pid, stack)
    }

    /// The PDB files a namer that reads them read and could not read (others: `None`).
    fn symbols(&self) -> Option<SymbolSummary> {
        None
    }
}

/// Kernel Image class (Load 10, UnLoad 2, DCStart 3, DCEnd 4).
pub const IMAGE_CLASS: Guid = Guid::from_str_const("2cb15d1d-5fc1-11d2-abe1-00a0c911f518");

/// KernelTraceControl ImageID (opcode 0): the rundown of loaded images with their original names.
pub const IMAGE_ID_CLASS: Guid = crate::schema::builtin::kernel_mof::KTC_IMAGE_ID;

/// Kernel Process class: its End (2) and Defunct (39) events end every module of the process (its
/// pid may then name another process, with modules of its own).
pub const PROCESS_CLASS: Guid = Guid::from_str_const("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c");

/// KernelTraceControl ImageID's DbgID_RSDS opcode: an image's PDB signature.
const DBGID_RSDS: u8 = 36;

/// Image event types.
const IMAGE_LOAD: u8 = 10;
const IMAGE_UNLOAD: u8 = 2;
const IMAGE_DC_START: u8 = 3;
const IMAGE_DC_END: u8 = 4;
/// Process event types that end a process.
const PROCESS_END: u8 = 2;
const PROCESS_DEFUNCT: u8 = 39;

/// One module of a process: its range's end, where it came from, and since when it was there.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Module {
    end: u64,
    /// Offset of `start` in the file (etwkit's Linux mappings; 0 for Windows images).
    file_offset: u64,
    /// The path as the event gives it.
    path: Arc<str>,
    /// When it was loaded (the event's timestamp); `i64::MIN` when that was before the trace or
    /// is not known (a rundown names it, or its unload is the first the trace shows of it).
    loaded: i64,
}

/// One process id's modules: those loaded now by address, those that ended, and how many times a
/// loaded module ended (the space's era: within one era every address names one module).
#[derive(Default)]
struct Space {
    current: BTreeMap<u64, Module>,
    /// Modules that ended: their start, the module, and when it ended (unloaded, loaded over, or
    /// its process ended), in the order they ended.
    ended: Vec<(u64, Module, i64)>,
    era: u32,
}

impl Space {
    /// Starts of the loaded modules overlapping `start..end`.
    fn overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        self.current
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(s, _)| *s)
            .collect()
    }

    /// Ends the loaded module at `start` at time `at`.
    fn end(&mut self, start: u64, at: i64) {
        if let Some(m) = self.current.remove(&start) {
            self.ended.push((start, m, at));
            self.era += 1;
        }
    }

    /// The latest end of a module that overlapped `start..end` (`i64::MIN`: none): a module the
    /// trace names with no time of its own was loaded after it.
    fn last_end_over(&self, start: u64, end: u64) -> i64 {
        self.ended
            .iter()
            .filter(|(s, m, _)| *s < end && m.end > start)
            .map(|(_, _, at)| *at)
            .max()
            .unwrap_or(i64::MIN)
    }

    /// The module holding `addr` that `keep` accepts (given when it ended, `None`: loaded now):
    /// the loaded one, else the one that ended last.
    fn find(
        &self,
        addr: u64,
        keep: impl Fn(&Module, Option<i64>) -> bool,
    ) -> Option<(u64, &Module)> {
        if let Some((s, m)) = self.current.range(..=addr).next_back() {
            if addr < m.end && keep(m, None) {
                return Some((*s, m));
            }
        }
        self.ended
            .iter()
            .rev()
            .find(|(s, m, at)| *s <= addr && addr < m.end && keep(m, Some(*at)))
            .map(|(s, m, _)| (*s, m))
    }
}

/// How an image event places its module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    /// Loaded at this time (Image Load).
    Load(i64),
    /// Named by a rundown (Image DCStart/DCEnd; etwkit's mappings): loaded before the trace, or
    /// after the last module the trace saw end in its range.
    Rundown,
    /// Unloaded at this time (Image UnLoad).
    Unload(i64),
    /// KernelTraceControl ImageID: names a range only where no Image event does.
    ImageId,
}

/// The modules loaded in each process, by address range and time, from a trace's own image
/// events: Windows kernel Image Load/UnLoad/DCStart/DCEnd, KernelTraceControl ImageID rundown (where
/// no Image event covers the range), etwkit's Image events, and kernel Process End/Defunct (the end
/// of every module of the process: its pid may then name another process).
///
/// [`ModuleMap::lookup_at`] names an address as it was at a time: a module unloaded, or one of a
/// process that ended, no longer names the addresses a later module (of the same or of a new process
/// with the same pid) holds, and the earlier module still names its own time's addresses.
/// [`ModuleMap::lookup`], without a time, names by the module loaded now, else the one that ended
/// last (the blocks a leak report shows may come from a module since unloaded).
#[derive(Default)]
pub struct ModuleMap {
    by_pid: HashMap<u32, Space>,
    /// PDB signatures (DbgID_RSDS) by image base, each with the process it was given for.
    pdbs: HashMap<u64, Vec<(u32, PdbId)>>,
    /// The link time stamps (PE TimeDateStamp) image events give, by process and image base.
    stamps: HashMap<(u32, u64), u32>,
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

/// A module found for an address: its file name, the address's offset in it and its PDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleRef<'m> {
    pub name: &'m str,
    pub offset: u64,
    pub pdb: Option<&'m PdbId>,
    /// The path as the image event gave it, the image's size and its link time stamp (when the
    /// event gave one): what finds and checks the image file on disk.
    pub path: &'m str,
    pub size: u64,
    pub time_date_stamp: Option<u32>,
}

impl ModuleRef<'_> {
    /// The frame of `address` in this module: `module+offset`, with the function, file and line
    /// `symbols` finds in the module's PDB (named by the trace, else by the image file on disk).
    pub fn frame(&self, address: u64, symbols: Option<&mut Symbolizer>) -> Frame {
        let mut f = Frame {
            address,
            module: Some(self.name.to_string()),
            offset: Some(self.offset),
            ..Default::default()
        };
        if let Some(s) = symbols {
            let id = match self.pdb {
                Some(id) => Some(id.clone()),
                None => s.image_pdb(self),
            };
            if let Some(r) = id.and_then(|id| s.resolve(&id, self.offset)) {
                f.function = r.function;
                f.file = r.file;
                f.line = r.line;
                f.inlined = r.inlined;
            }
        }
        f
    }
}

impl ModuleMap {
    pub fn new() -> ModuleMap {
        ModuleMap::default()
    }

    /// Modules known (loaded now or ended), over all processes.
    pub fn len(&self) -> usize {
        self.by_pid
            .values()
            .map(|s| s.current.len() + s.ended.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records that `path` is loaded at `start..end` in `pid` since before the trace (replacing
    /// what overlaps it).
    pub fn insert(&mut self, pid: u32, start: u64, end: u64, path: &str) {
        self.insert_at(pid, start, end, 0, path, Placed::Rundown)
    }

    /// Records that `path` was loaded at `start..end` in `pid` at `time`: what overlaps it ends then.
    pub fn insert_loaded(&mut self, pid: u32, start: u64, end: u64, path: &str, time: i64) {
        self.insert_at(pid, start, end, 0, path, Placed::Load(time))
    }

    /// Records that the module at `start` of `pid` was unloaded at `time`.
    pub fn unload(&mut self, pid: u32, start: u64, end: u64, path: &str, time: i64) {
        self.insert_at(pid, start, end, 0, path, Placed::Unload(time))
    }

    /// Records that the image at `base` in `pid` was built with the PDB `id` (pid 0 or 4: a
    /// kernel image).
    pub fn insert_pdb(&mut self, pid: u32, base: u64, id: PdbId) {
        let v = self.pdbs.entry(base).or_default();
        match v.iter_mut().find(|(p, _)| *p == pid) {
            Some(e) => e.1 = id,
            None => v.push((pid, id)),
        }
    }

    /// The PDB of the image at `base` of `pid`: the one given for that process, else one given
    /// for the kernel (pid 0 or 4), else the one every other process gives at that base (system
    /// DLLs share their base across processes).
    fn pdb_of(&self, pid: u32, base: u64) -> Option<&PdbId> {
        let v = self.pdbs.get(&base)?;
        if let Some((_, id)) = v.iter().find(|(p, _)| *p == pid) {
            return Some(id);
        }
        if let Some((_, id)) = v.iter().find(|(p, _)| *p == 0 || *p == 4) {
            return Some(id);
        }
        let first = &v.first()?.1;
        v.iter().all(|(_, id)| id == first).then_some(first)
    }

    /// Records that process `pid` ended at `time`: each of its modules ends then.
    pub fn end_process(&mut self, pid: u32, time: i64) {
        if let Some(space) = self.by_pid.get_mut(&pid) {
            let starts: Vec<u64> = space.current.keys().copied().collect();
            for s in starts {
                space.end(s, time);
            }
        }
    }

    /// An etwkit executable mapping (its file offset kept: offsets are file offsets).
    pub fn insert_mapping(&mut self, m: &ImageMapping) {
        self.insert_at(
            m.pid,
            m.start,
            m.end,
            m.file_offset,
            &m.path,
            Placed::Rundown,
        )
    }

    fn insert_at(&mut self, pid: u32, start: u64, end: u64, off: u64, path: &str, how: Placed) {
        if end <= start {
            self.malformed += 1;
            return;
        }
        let space = self.by_pid.entry(pid).or_default();
        let overlapping = space.overlapping(start, end);
        let module = |loaded: i64| Module {
            end,
            file_offset: off,
            path: Arc::from(path),
            loaded,
        };
        match how {
            Placed::Load(time) => {
                for s in overlapping {
                    space.end(s, time);
                }
                space.current.insert(start, module(time));
            }
            Placed::Rundown => {
                // The same module named again (a DCEnd after its Load or DCStart) keeps its time.
                let same = space
                    .current
                    .get(&start)
                    .filter(|m| m.end == end)
                    .map(|m| m.loaded);
                for s in overlapping {
                    space.current.remove(&s);
                }
                let loaded = same.unwrap_or_else(|| space.last_end_over(start, end));
                space.current.insert(start, module(loaded));
            }
            Placed::ImageId => {
                if overlapping.is_empty() {
                    let loaded = space.last_end_over(start, end);
                    space.current.insert(start, module(loaded));
                }
            }
            Placed::Unload(time) => {
                if space.current.contains_key(&start) {
                    space.end(start, time);
                } else if overlapping.is_empty() && !space.ended.iter().any(|(s, _, _)| *s == start)
                {
                    // First seen unloading: it was there until then.
                    let loaded = space.last_end_over(start, end);
                    space.ended.push((start, module(loaded), time));
                }
            }
        }
    }

    /// The module holding `addr` in `pid` (kernel images, listed under pid 0, serve every
    /// process): its file name and the address's offset in it. The module loaded now, else the
    /// one that ended last.
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<(&str, u64)> {
        let (start, m) = self.find(pid, addr, None)?;
        Some((base_name(&m.path), addr - start + m.file_offset))
    }

    /// [`ModuleMap::lookup`] as it was at `time`: the module loaded at or before `time` and not
    /// ended by then.
    pub fn lookup_at(&self, pid: u32, addr: u64, time: i64) -> Option<(&str, u64)> {
        let (start, m) = self.find(pid, addr, Some(time))?;
        Some((base_name(&m.path), addr - start + m.file_offset))
    }

    /// The module holding `addr` in `pid` at `time` (`None`: the module loaded now, else the one
    /// that ended last), with the address's offset and the module's PDB when the trace gives it.
    pub fn module_ref(&self, pid: u32, addr: u64, time: Option<i64>) -> Option<ModuleRef<'_>> {
        let (space, start, m) = self.find_in(pid, addr, time)?;
        Some(ModuleRef {
            name: base_name(&m.path),
            offset: addr - start + m.file_offset,
            pdb: self.pdb_of(space, start),
            path: &m.path,
            size: m.end - start,
            time_date_stamp: self.stamps.get(&(space, start)).copied(),
        })
    }

    /// [`ModuleMap::lookup_at`] with the path whole, as it was given (a map of other named code
    /// ranges, such as JIT-compiled methods, keeps its names there).
    pub fn path_at(&self, pid: u32, addr: u64, time: i64) -> Option<&str> {
        self.find(pid, addr, Some(time)).map(|(_, m)| &*m.path)
    }

    /// The module holding `addr` in `pid` (or a kernel image): start, end and path as loaded.
    pub fn module_at(&self, pid: u32, addr: u64) -> Option<(u64, u64, &str)> {
        self.find(pid, addr, None)
            .map(|(s, m)| (s, m.end, &*m.path))
    }

    /// How many times a module of `pid` in effect ended (unloaded, loaded over, its process
    /// ended): between two changes of this count every address names one module.
    pub fn era(&self, pid: u32) -> u32 {
        self.by_pid.get(&pid).map_or(0, |s| s.era)
    }

    fn find(&self, pid: u32, addr: u64, time: Option<i64>) -> Option<(u64, &Module)> {
        self.find_in(pid, addr, time).map(|(_, s, m)| (s, m))
    }

    /// [`ModuleMap::find`], and the process whose space held it (`pid`, or 0 for a kernel image).
    fn find_in(&self, pid: u32, addr: u64, time: Option<i64>) -> Option<(u32, u64, &Module)> {
        let find = |pid: u32| {
            let space = self.by_pid.get(&pid)?;
            let found = match time {
                // Loaded at or before `t`, and not ended by then.
                Some(t) => space.find(addr, |m, ended| {
                    m.loaded <= t && ended.is_none_or(|e| t < e)
                }),
                None => space.find(addr, |_, _| true),
            };
            found.map(|(s, m)| (pid, s, m))
        };
        find(pid).or_else(|| if pid != 0 { find(0) } else { None })
    }

    /// Feeds one record: image events are kept, Process End/Defunct end their process's modules,
    /// others are ignored. True when it was an image event.
    pub fn push(&mut self, r: &EventRecord<'_>) -> bool {
        let op = r.descriptor.opcode;
        let how = match (r.provider, op) {
            (IMAGE_CLASS, IMAGE_LOAD) => Placed::Load(r.timestamp),
            (IMAGE_CLASS, IMAGE_DC_START | IMAGE_DC_END) => Placed::Rundown,
            (IMAGE_CLASS, IMAGE_UNLOAD) => Placed::Unload(r.timestamp),
            (IMAGE_ID_CLASS, 0) => Placed::ImageId,
            (IMAGE_ID_CLASS, DBGID_RSDS) => {
                self.push_dbgid(r);
                return true;
            }
            (PROCESS_CLASS, _) => {
                self.push_process_end(r);
                return false;
            }
            _ => return false,
        };
        if r.header_type.is_event_header() {
            return false;
        }
        let ev = self.decoder().decode(r);
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
        let pid = match how {
            Placed::ImageId => r.pid,
            _ => num(&["ProcessId", "ProcessID"])
                .map(|p| p as u32)
                .unwrap_or(r.pid),
        };
        if let Some(t) = num(&["TimeDateStamp"]).filter(|t| *t != 0) {
            self.stamps.insert((pid, base), t as u32);
        }
        self.insert_at(pid, base, base.saturating_add(size), 0, &name, how);
        true
    }

    /// A DbgID_RSDS event: the PDB signature of the image at its ImageBase.
    fn push_dbgid(&mut self, r: &EventRecord<'_>) {
        let ev = self.decoder().decode(r);
        let p = &ev.properties;
        let base = p.get("ImageBase").and_then(|v| v.as_u64());
        let guid = match p.get("GuidSig") {
            Some(crate::decode::Value::Guid(g)) => Some(*g),
            _ => None,
        };
        let age = p.get("Age").and_then(|v| v.as_u64());
        let name = p.get("PdbFileName").and_then(|v| v.as_str());
        let (Some(base), Some(guid), Some(age), Some(name)) = (base, guid, age, name) else {
            self.malformed += 1;
            return;
        };
        // Like ImageID, its ProcessId is often 0 in a process's rundown: the header names it.
        let pid = match p.get("ProcessId").and_then(|v| v.as_u64()) {
            Some(0) | None => r.pid,
            Some(p) => p as u32,
        };
        let id = PdbId::new(guid, age as u32, name);
        self.insert_pdb(pid, base, id);
    }

    /// Feeds one record: a kernel Process End/Defunct ends its process's modules
    /// ([`ModuleMap::end_process`]), others are ignored. True when it was one.
    pub fn push_process_end(&mut self, r: &EventRecord<'_>) -> bool {
        let end = r.provider == PROCESS_CLASS
            && r.header_type.is_kernel()
            && matches!(r.descriptor.opcode, PROCESS_END | PROCESS_DEFUNCT);
        if !end {
            return false;
        }
        let pid = self
            .decoder()
            .decode(r)
            .properties
            .get("ProcessId")
            .and_then(|v| v.as_u64());
        match pid {
            Some(pid) => self.end_process(pid as u32, r.timestamp),
            None => self.malformed += 1,
        }
        true
    }

    fn decoder(&mut self) -> &crate::decode::Decoder {
        self.decoder.get_or_insert_with(|| {
            Box::new(crate::decode::Decoder::new(
                crate::schema::Registry::with_builtins(),
            ))
        })
    }

    /// Every module of these processes (and pid 0's), as etwkit Image mappings: those loaded now,
    /// then those that ended.
    pub fn mappings_of(&self, pids: &[u32]) -> Vec<ImageMapping> {
        let mut keys: Vec<&u32> = self
            .by_pid
            .keys()
            .filter(|p| **p == 0 || pids.contains(p))
            .collect();
        keys.sort();
        keys.into_iter()
            .flat_map(|pid| {
                let space = &self.by_pid[pid];
                let ended = space.ended.iter().map(|(s, m, _)| (s, m));
                space
                    .current
                    .iter()
                    .chain(ended)
                    .map(|(s, m)| ImageMapping {
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

/// Names frames `module+offset` from a [`ModuleMap`], with functions and lines from the modules'
/// PDBs when given a [`Symbolizer`]; addresses outside every module stay bare.
pub struct ModuleNamer {
    pub modules: ModuleMap,
    pub symbols: Option<Symbolizer>,
}

impl ModuleNamer {
    pub fn new(modules: ModuleMap) -> ModuleNamer {
        ModuleNamer {
            modules,
            symbols: None,
        }
    }

    /// A namer that also reads the modules' PDBs along `symbols`.
    pub fn with_symbols(modules: ModuleMap, symbols: Symbolizer) -> ModuleNamer {
        ModuleNamer {
            modules,
            symbols: Some(symbols),
        }
    }

    /// `stack`'s frames as the modules stood at `time` (`None`: now, else last ended).
    fn frames(&mut self, pid: u32, stack: &[u64], time: Option<i64>) -> Vec<Frame> {
        stack
            .iter()
            .map(|&a| match self.modules.module_ref(pid, a, time) {
                Some(m) => m.frame(a, self.symbols.as_mut()),
                None => Frame::unknown(a),
            })
            .collect()
    }
}

impl StackNamer for ModuleNamer {
    /// By the module loaded now, else the one that ended last ([`ModuleMap::lookup`]).
    fn name(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        self.frames(pid, stack, None)
    }

    /// By the module loaded at `time` ([`ModuleMap::lookup_at`]).
    fn name_at(&mut self, pid: u32, stack: &[u64], time: i64) -> Vec<Frame> {
        self.frames(pid, stack, Some(time))
    }

    fn symbols(&self) -> Option<SymbolSummary> {
        self.symbols.as_ref().map(Symbolizer::summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module name `lookup_at` gives, if any.
    fn at(m: &ModuleMap, pid: u32, addr: u64, time: i64) -> Option<String> {
        m.lookup_at(pid, addr, time).map(|(n, _)| n.to_string())
    }

    #[test]
    fn a_range_reloaded_names_each_module_in_its_time() {
        let mut m = ModuleMap::new();
        let b = 0x1000_0000;
        m.insert_loaded(7, b, b + 0x1000, r"C:\a.dll", 100);
        assert_eq!(m.era(7), 0);
        m.unload(7, b, b + 0x1000, r"\Device\HarddiskVolume1\a.dll", 200);
        assert_eq!(m.era(7), 1);
        m.insert_loaded(7, b, b + 0x2000, r"C:\b.dll", 300);
        assert_eq!(at(&m, 7, b + 0x10, 99), None, "before a.dll was loaded");
        assert_eq!(at(&m, 7, b + 0x10, 100).as_deref(), Some("a.dll"));
        assert_eq!(m.lookup_at(7, b + 0x10, 199), Some(("a.dll", 0x10)));
        assert_eq!(at(&m, 7, b + 0x10, 200), None, "unloaded at 200");
        assert_eq!(at(&m, 7, b + 0x10, 300).as_deref(), Some("b.dll"));
        assert_eq!(at(&m, 7, b + 0x1800, 150), None, "outside a.dll");
        assert_eq!(m.lookup_at(7, b + 0x1800, 400), Some(("b.dll", 0x1800)));
        // Without a time: the module loaded now, else the one that ended last.
        assert_eq!(m.lookup(7, b + 0x10), Some(("b.dll", 0x10)));
        m.unload(7, b, b + 0x2000, r"C:\b.dll", 500);
        assert_eq!(m.lookup(7, b + 0x10), Some(("b.dll", 0x10)));
        assert_eq!(m.module_at(7, b + 0x10), Some((b, b + 0x2000, r"C:\b.dll")));
        assert_eq!(at(&m, 7, b + 0x10, 500), None);
        assert_eq!((m.era(7), m.len()), (2, 2));
        // A load over a loaded module ends it.
        m.insert_loaded(7, 0x5000, 0x6000, "c.dll", 600);
        m.insert_loaded(7, 0x5800, 0x7000, "d.dll", 700);
        assert_eq!(m.era(7), 3);
        assert_eq!(at(&m, 7, 0x5900, 650).as_deref(), Some("c.dll"));
        assert_eq!(at(&m, 7, 0x5900, 700).as_deref(), Some("d.dll"));
        assert_eq!(at(&m, 7, 0x5100, 700), None, "c.dll ended at 700");
    }

    #[test]
    fn a_reused_pid_does_not_inherit_modules() {
        let mut m = ModuleMap::new();
        m.insert(9, 0x40_0000, 0x41_0000, r"C:\old.exe");
        m.insert(0, 0x8000_0000, 0x8010_0000, r"\SystemRoot\ntoskrnl.exe");
        m.end_process(9, 1_000);
        m.insert_loaded(9, 0x40_0000, 0x42_0000, r"C:\new.exe", 2_000);
        assert_eq!(at(&m, 9, 0x40_0100, 500).as_deref(), Some("old.exe"));
        assert_eq!(at(&m, 9, 0x40_0100, 1_500), None, "between the processes");
        assert_eq!(at(&m, 9, 0x40_0100, 2_500).as_deref(), Some("new.exe"));
        assert_eq!(at(&m, 9, 0x41_0100, 500), None, "beyond old.exe");
        // Kernel images (pid 0) serve every process at any time.
        assert_eq!(
            at(&m, 9, 0x8000_0010, 1_500).as_deref(),
            Some("ntoskrnl.exe")
        );
        assert_eq!(m.era(9), 1);
        assert_eq!(m.era(123), 0);
    }

    #[test]
    fn pdbs_by_process_and_base() {
        let id = |n: &str| {
            PdbId::new(
                Guid::from_str_const("ec83d8df-5559-46e0-b630-133ebd979266"),
                1,
                n,
            )
        };
        let mut m = ModuleMap::new();
        m.insert(7, 0x1000, 0x2000, r"C:\a.dll");
        m.insert(8, 0x1000, 0x2000, r"C:\a.dll");
        m.insert(9, 0x1000, 0x2000, r"C:\b.dll");
        m.insert(0, 0x8000_0000, 0x8010_0000, r"\SystemRoot\ntoskrnl.exe");
        m.insert_pdb(7, 0x1000, id("a.pdb"));
        m.insert_pdb(0, 0x8000_0000, id("ntkrnlmp.pdb"));
        fn pdb(m: &ModuleMap, pid: u32, addr: u64) -> Option<PdbId> {
            m.module_ref(pid, addr, None).and_then(|r| r.pdb.cloned())
        }
        assert_eq!(pdb(&m, 7, 0x1010), Some(id("a.pdb")));
        // Given for one process only: the others at that base share it (system DLLs do).
        assert_eq!(pdb(&m, 8, 0x1010), Some(id("a.pdb")));
        // Kernel images serve every process.
        let r = m.module_ref(8, 0x8000_0010, None).unwrap();
        assert_eq!(
            (r.name, r.offset, r.size),
            ("ntoskrnl.exe", 0x10, 0x10_0000)
        );
        assert_eq!(r.pdb, Some(&id("ntkrnlmp.pdb")));
        // Two processes disagree at a base: a third one's module there has none.
        m.insert_pdb(9, 0x1000, id("b.pdb"));
        assert_eq!(pdb(&m, 9, 0x1010), Some(id("b.pdb")));
        m.insert(10, 0x1000, 0x2000, r"C:\c.dll");
        assert_eq!(pdb(&m, 10, 0x1010), None);
        assert_eq!(pdb(&m, 8, 0x1010), None);
        assert_eq!(pdb(&m, 7, 0x3000), None, "outside every module");
    }

    #[test]
    fn rundowns_and_first_seen_unloads() {
        let mut m = ModuleMap::new();
        // Unloaded before anything else showed it: there until then.
        m.unload(5, 0x1000, 0x2000, "early.dll", 300);
        assert_eq!(at(&m, 5, 0x1100, 0).as_deref(), Some("early.dll"));
        assert_eq!(at(&m, 5, 0x1100, 300), None);
        assert_eq!(m.era(5), 0, "no loaded module ended");
        // Named only by the end rundown: loaded after the module that ended in its range.
        m.insert(5, 0x1000, 0x3000, "late.dll");
        assert_eq!(at(&m, 5, 0x1100, 299).as_deref(), Some("early.dll"));
        assert_eq!(at(&m, 5, 0x1100, 300).as_deref(), Some("late.dll"));
        assert_eq!(at(&m, 5, 0x2100, 10), None, "late.dll came after 300");
        // The end rundown of a module loaded in the trace keeps its load time.
        m.insert_loaded(5, 0x9000, 0xa000, "x.dll", 50);
        m.insert(5, 0x9000, 0xa000, r"\Device\HarddiskVolume1\x.dll");
        assert_eq!(at(&m, 5, 0x9000, 49), None);
        assert_eq!(at(&m, 5, 0x9000, 50).as_deref(), Some("x.dll"));
        // An unload seen twice counts once.
        m.unload(5, 0x9000, 0xa000, "x.dll", 60);
        m.unload(5, 0x9000, 0xa000, "x.dll", 70);
        assert_eq!(at(&m, 5, 0x9000, 65), None);
        assert_eq!(m.len(), 3);
    }
}
