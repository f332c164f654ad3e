//! Naming stack addresses: [`Frame`], the [`StackNamer`] trait every namer implements (the Linux
//! ELF unwinder in `live::linux::unwind`, [`ModuleNamer`] here), and [`ModuleMap`], the modules a
//! trace's own image events load (Windows kernel Image Load/DCStart/DCEnd, KernelTraceControl
//! ImageID, etwkit's Image events), by process and address range.

use std::collections::HashMap;
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
