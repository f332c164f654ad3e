//! User stacks deeper than frame pointers, and their names.
//!
//! Live samples carry the user registers (ip, sp, bp) and a copy of the top of the user stack
//! (PERF_SAMPLE_STACK_USER). [`Unwinder`] walks that copy with DWARF call-frame information from each
//! mapped ELF file's `.eh_frame` (through `framehop`), which works where frame pointers are missing
//! (Debian's glibc, most -O2 code). [`Symbolizer`] turns addresses into function names (DWARF, else
//! the ELF symbol tables) and file:line when debug info exists (through `addr2line`).

use std::collections::HashMap;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use crate::decode::symbols::{Frame, StackNamer};

/// A file-backed executable mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    pub path: Arc<Path>,
}

/// The executable mappings of one process, sorted by start address.
#[derive(Clone, Debug, Default)]
pub struct ProcessMaps {
    pub mappings: Vec<Mapping>,
}

impl ProcessMaps {
    /// Parses `/proc/PID/maps`, keeping file-backed executable mappings.
    pub fn read(pid: u32) -> std::io::Result<ProcessMaps> {
        let path = format!("/proc/{pid}/maps");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{path}: {e}")))?;
        let mut m = ProcessMaps::default();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(range), Some(perms), Some(off), Some(_dev), Some(_ino)) =
                (it.next(), it.next(), it.next(), it.next(), it.next())
            else {
                continue;
            };
            let path: String = it.collect::<Vec<_>>().join(" ");
            if !perms.contains('x') || !path.starts_with('/') {
                continue;
            }
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(pgoff)) = (
                u64::from_str_radix(a, 16),
                u64::from_str_radix(b, 16),
                u64::from_str_radix(off, 16),
            ) else {
                continue;
            };
            m.insert(Mapping {
                start,
                end,
                pgoff,
                path: Arc::from(Path::new(&path)),
            });
        }
        Ok(m)
    }

    /// Adds a mapping (replacing any it overlaps: the address space was remapped).
    pub fn insert(&mut self, map: Mapping) -> bool {
        if self.mappings.contains(&map) {
            return false;
        }
        self.mappings
            .retain(|m| m.end <= map.start || m.start >= map.end);
        let pos = self.mappings.partition_point(|m| m.start < map.start);
        self.mappings.insert(pos, map);
        true
    }

    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.start <= addr);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }
}

/// Bytes of an ELF file shared by every module that maps it.
#[derive(Clone)]
pub struct FileBytes(Arc<Vec<u8>>, Range<usize>);

impl Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0[self.1.clone()]
    }
}

/// What we keep of one ELF file for unwinding.
struct ElfInfo {
    data: Arc<Vec<u8>>,
    /// (p_vaddr, p_offset, p_filesz) of every PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
    sections: HashMap<&'static str, (Range<u64>, Range<usize>)>,
}

impl ElfInfo {
    fn load(path: &Path) -> Option<ElfInfo> {
        let data = Arc::new(std::fs::read(path).ok()?);
        let file = object::File::parse(&data[..]).ok()?;
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (s.address(), off, size)
            })
            .collect();
        let mut sections = HashMap::new();
        for name in [".text", ".eh_frame", ".eh_frame_hdr", ".got"] {
            if let Some(s) = file.section_by_name(name) {
                let svma = s.address()..s.address() + s.size();
                let bytes = s
                    .file_range()
                    .map(|(o, l)| o as usize..(o + l) as usize)
                    .unwrap_or(0..0);
                sections.insert(name, (svma, bytes));
            }
        }
        Some(ElfInfo {
            data,
            segments,
            sections,
        })
    }

    /// The address the file's vaddr 0 lands at, for a mapping of it.
    fn base_avma(&self, map: &Mapping) -> u64 {
        // The segment whose file range holds the mapping's offset.
        let seg = self
            .segments
            .iter()
            .find(|(_, off, size)| map.pgoff >= *off & !0xfff && map.pgoff < off + size.max(&1))
            .copied()
            .unwrap_or((map.pgoff, map.pgoff, 0));
        // avma = start + (file_off - pgoff); file_off = svma - p_vaddr + p_offset.
        map.start
            .wrapping_sub(map.pgoff)
            .wrapping_add(seg.1)
            .wrapping_sub(seg.0)
    }

    fn module(&self, map: &Mapping) -> Module<FileBytes> {
        let bytes = |name: &str| {
            self.sections
                .get(name)
                .map(|(_, r)| FileBytes(self.data.clone(), r.clone()))
        };
        let svma = |name: &str| self.sections.get(name).map(|(s, _)| s.clone());
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: svma(".text"),
            text: bytes(".text"),
            got_svma: svma(".got"),
            eh_frame_svma: svma(".eh_frame"),
            eh_frame: bytes(".eh_frame"),
            eh_frame_hdr_svma: svma(".eh_frame_hdr"),
            eh_frame_hdr: bytes(".eh_frame_hdr"),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Module::new(
            map.path.display().to_string(),
            map.start..map.end,
            self.base_avma(map),
            info,
        )
    }
}

struct ProcUnwind {
    maps: ProcessMaps,
    unwinder: UnwinderX86_64<FileBytes>,
    refreshed_for_miss: bool,
}

/// DWARF (.eh_frame) unwinder over copied user stacks, for any number of processes.
pub struct Unwinder {
    files: HashMap<Arc<Path>, Option<Arc<ElfInfo>>>,
    procs: HashMap<u32, ProcUnwind>,
    cache: CacheX86_64,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self::new()
    }
}

/// User registers needed to start an unwind.
#[derive(Clone, Copy, Debug)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

impl Unwinder {
    pub fn new() -> Unwinder {
        Unwinder {
            files: HashMap::new(),
            procs: HashMap::new(),
            cache: CacheX86_64::new(),
        }
    }

    fn proc(&mut self, pid: u32) -> &mut ProcUnwind {
        self.procs.entry(pid).or_insert_with(|| ProcUnwind {
            maps: ProcessMaps::default(),
            unwinder: UnwinderX86_64::new(),
            refreshed_for_miss: false,
        })
    }

    fn elf(&mut self, path: &Arc<Path>) -> Option<Arc<ElfInfo>> {
        self.files
            .entry(path.clone())
            .or_insert_with(|| ElfInfo::load(path).map(Arc::new))
            .clone()
    }

    /// Records a new executable mapping of `pid`.
    pub fn add_mapping(&mut self, pid: u32, map: Mapping) {
        let elf = self.elf(&map.path);
        let p = self.proc(pid);
        if p.maps.insert(map.clone()) {
            if let Some(elf) = elf {
                p.unwinder.remove_module(map.start);
                p.unwinder.add_module(elf.module(&map));
            }
        }
    }

    /// Loads every current executable mapping of a live process from /proc.
    pub fn load_proc_maps(&mut self, pid: u32) -> std::io::Result<()> {
        let maps = ProcessMaps::read(pid)?;
        for m in maps.mappings {
            self.add_mapping(pid, m);
        }
        Ok(())
    }

    /// Copies the mappings of `parent` to a forked `child`.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if let Some(maps) = self.procs.get(&parent).map(|p| p.maps.clone()) {
            for m in maps.mappings {
                self.add_mapping(child, m);
            }
        }
    }

    pub fn maps(&self, pid: u32) -> Option<&ProcessMaps> {
        self.procs.get(&pid).map(|p| &p.maps)
    }

    /// All processes' mappings (for symbolizing after the processes are gone).
    pub fn all_maps(&self) -> HashMap<u32, ProcessMaps> {
        self.procs
            .iter()
            .map(|(k, v)| (*k, v.maps.clone()))
            .collect()
    }

    /// Unwinds from `regs` over `stack` (the copy of user memory starting at `regs.sp`). The first
    /// address is `regs.ip`; the rest are return addresses. At most `max` frames.
    pub fn unwind(&mut self, pid: u32, regs: UserRegs, stack: &[u8], max: usize) -> Vec<u64> {
        let known = self
            .procs
            .get(&pid)
            .is_some_and(|p| p.maps.find(regs.ip).is_some());
        if !known {
            let p = self.proc(pid);
            if !p.refreshed_for_miss {
                p.refreshed_for_miss = true;
                let _ = self.load_proc_maps(pid);
            }
        }
        let Some(p) = self.procs.get(&pid) else {
            return vec![regs.ip];
        };
        let sp = regs.sp;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(off..off + 8).ok_or(())?;
            Ok(u64::from_le_bytes(b.try_into().map_err(|_| ())?))
        };
        let mut out = Vec::with_capacity(16);
        let mut it = p.unwinder.iter_frames(
            regs.ip,
            UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
            &mut self.cache,
            &mut read,
        );
        while out.len() < max {
            match it.next() {
                Ok(Some(f)) => out.push(f.address()),
                _ => break,
            }
        }
        if out.is_empty() {
            out.push(regs.ip);
        }
        // A later miss (new library) may refresh again.
        if let Some(p) = self.procs.get_mut(&pid) {
            if known {
                p.refreshed_for_miss = false;
            }
        }
        out
    }
}

/// Names addresses from ELF files: DWARF function names and lines when present, symbol tables
/// otherwise. One loader per file, kept for the Symbolizer's lifetime.
#[derive(Default)]
pub struct Symbolizer {
    loaders: HashMap<PathBuf, Option<(addr2line::Loader, ElfBase)>>,
    cache: HashMap<(PathBuf, u64), Frame>,
}

/// The PT_LOAD segments of a file (to turn a mapping into a load bias) and its function symbols
/// (address, size, name), sorted: a name is given only to an address inside the symbol's extent
/// (Debian's libc has no .symtab; the nearest exported symbol is usually the wrong function).
struct ElfBase {
    segments: Vec<(u64, u64, u64)>,
    funcs: Vec<(u64, u64, String)>,
}

impl ElfBase {
    fn symbol(&self, probe: u64) -> Option<&str> {
        let i = self.funcs.partition_point(|(a, _, _)| *a <= probe);
        let (a, size, name) = self.funcs.get(i.checked_sub(1)?)?;
        (probe < a + (*size).max(1)).then_some(name.as_str())
    }
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    /// Symbolizes `addr` in a process with mappings `maps`. `is_return` means the address is a return
    /// address: the call instruction before it is looked up.
    pub fn symbolize(&mut self, maps: Option<&ProcessMaps>, addr: u64, is_return: bool) -> Frame {
        let Some(map) = maps.and_then(|m| m.find(addr)) else {
            return Frame::unknown(addr);
        };
        let path = map.path.to_path_buf();
        let entry = self.loaders.entry(path.clone()).or_insert_with(|| {
            let loader = addr2line::Loader::new(&path).ok()?;
            let data = std::fs::read(&path).ok()?;
            let file = object::File::parse(&data[..]).ok()?;
            let segments = file
                .segments()
                .map(|s| {
                    let (off, size) = s.file_range();
                    (s.address(), off, size)
                })
                .collect();
            let mut funcs: Vec<(u64, u64, String)> = file
                .symbols()
                .chain(file.dynamic_symbols())
                .filter(|s| {
                    s.kind() == object::SymbolKind::Text && s.address() != 0 && s.size() > 0
                })
                .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
                .collect();
            funcs.sort();
            funcs.dedup_by_key(|f| f.0);
            Some((loader, ElfBase { segments, funcs }))
        });
        let module = path.file_name().map(|f| f.to_string_lossy().into_owned());
        let Some((loader, base)) = entry else {
            return Frame {
                address: addr,
                module,
                ..Default::default()
            };
        };
        let seg = base
            .segments
            .iter()
            .find(|(_, off, size)| map.pgoff >= *off & !0xfff && map.pgoff < off + size.max(&1))
            .copied()
            .unwrap_or((map.pgoff, map.pgoff, 0));
        let bias = map
            .start
            .wrapping_sub(map.pgoff)
            .wrapping_add(seg.1)
            .wrapping_sub(seg.0);
        let svma = addr.wrapping_sub(bias);
        let probe = if is_return {
            svma.saturating_sub(1)
        } else {
            svma
        };
        if let Some(f) = self.cache.get(&(path.clone(), probe)) {
            return Frame {
                address: addr,
                ..f.clone()
            };
        }
        let mut frame = Frame {
            address: addr,
            module,
            ..Default::default()
        };
        if let Ok(mut frames) = loader.find_frames(probe) {
            // Innermost first: the function the source code shows at this address (possibly inlined).
            if let Ok(Some(f)) = frames.next() {
                frame.function = f
                    .function
                    .as_ref()
                    .and_then(|n| n.demangle().ok().map(|s| s.into_owned()));
                frame.file = f
                    .location
                    .as_ref()
                    .and_then(|l| l.file.map(|s| s.to_string()));
                frame.line = f.location.as_ref().and_then(|l| l.line);
            }
        }
        if frame.function.is_none() {
            frame.function = base
                .symbol(probe)
                .map(|s| addr2line::demangle_auto(s.into(), None).into_owned());
        }
        self.cache.insert((path, probe), frame.clone());
        frame
    }

    /// Symbolizes a whole stack (first address is an instruction pointer, the rest return addresses).
    pub fn symbolize_stack(&mut self, maps: Option<&ProcessMaps>, stack: &[u64]) -> Vec<Frame> {
        stack
            .iter()
            .enumerate()
            .map(|(i, &a)| self.symbolize(maps, a, i > 0))
            .collect()
    }
}

/// A [`StackNamer`] over the mappings recorded while tracing (works after the processes exited).
pub struct LinuxStackNamer {
    pub symbolizer: Symbolizer,
    pub maps: HashMap<u32, ProcessMaps>,
}

impl LinuxStackNamer {
    pub fn new(maps: HashMap<u32, ProcessMaps>) -> LinuxStackNamer {
        LinuxStackNamer {
            symbolizer: Symbolizer::new(),
            maps,
        }
    }

    /// A namer over the executable mappings a saved trace carries (its Image events), reading the
    /// mapped files on this machine; `None` when there are none.
    pub fn from_images(
        images: &[crate::schema::builtin::heap_events::ImageMapping],
    ) -> Option<LinuxStackNamer> {
        if images.is_empty() {
            return None;
        }
        let mut maps: HashMap<u32, ProcessMaps> = HashMap::new();
        for m in images {
            maps.entry(m.pid).or_default().insert(Mapping {
                start: m.start,
                end: m.end,
                pgoff: m.file_offset,
                path: std::sync::Arc::from(std::path::Path::new(&m.path)),
            });
        }
        Some(LinuxStackNamer::new(maps))
    }
}

impl StackNamer for LinuxStackNamer {
    fn name(&mut self, pid: u32, stack: &[u64]) -> Vec<Frame> {
        self.symbolizer.symbolize_stack(self.maps.get(&pid), stack)
    }
}

#[cfg(test)]
mod tests {
    use super::ProcessMaps;

    #[test]
    fn maps_of_a_missing_process_name_the_file() {
        let e = ProcessMaps::read(u32::MAX).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(
            e.to_string(),
            "/proc/4294967295/maps: No such file or directory (os error 2)"
        );
        assert!(!ProcessMaps::read(std::process::id())
            .unwrap()
            .mappings
            .is_empty());
    }
}
