//! Function names, source files and lines of Windows modules from their PDB files.
//!
//! A module's PDB is named by its CodeView record (`RSDS`: GUID, age, file name), which a trace
//! carries as KernelTraceControl ImageID/DbgID_RSDS events beside each image (PerfView, xperf and
//! WPR traces do). [`Symbolizer`] looks for that PDB along a [`SymbolPath`], takes a file only
//! when its GUID and age are the module's (another build's file would name the wrong functions),
//! and names a module-relative address (RVA) by the function that holds it, its source line there,
//! and the calls inlined into it at that address (each with its own line). What was read and what
//! was not found is kept for the report ([`Symbolizer::summary`]): nothing is left out silently.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pdb_addr2line::pdb::{FallibleIterator, SymbolData, PDB};
use pdb_addr2line::{Context, ContextPdbData};

use super::store::{Candidate, SymbolPath};
use crate::guid::Guid;

/// A PDB as a module's CodeView record names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdbId {
    pub guid: Guid,
    pub age: u32,
    /// The PDB's file name or path as the image gives it (often the build machine's path).
    pub name: Arc<str>,
}

impl PdbId {
    pub fn new(guid: Guid, age: u32, name: &str) -> PdbId {
        PdbId {
            guid,
            age,
            name: Arc::from(name),
        }
    }

    /// The file name of the PDB, without the build machine's directories.
    pub fn file_name(&self) -> &str {
        self.name.rsplit(['\\', '/']).next().unwrap_or(&self.name)
    }

    /// The symbol store's key: the GUID as 32 upper-case hex digits and the age in hex.
    pub fn store_key(&self) -> String {
        let g = &self.guid;
        let mut s = format!("{:08X}{:04X}{:04X}", g.data1, g.data2, g.data3);
        for b in g.data4 {
            s.push_str(&format!("{b:02X}"));
        }
        s.push_str(&format!("{:X}", self.age));
        s
    }
}

/// What a PDB says of one address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The function (procedure) holding the address: the outermost of any inlined calls.
    pub function: Option<String>,
    /// Its source file and line at the address: the instruction's, or where it calls the
    /// outermost inlined function whose code the address is in.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The inlined calls at the address, innermost first.
    pub inlined: Vec<super::Inlined>,
}

type Data = ContextPdbData<'static, 'static, std::fs::File>;
type Ctx<'a> = Context<'a, 'static>;

self_cell::self_cell!(
    /// A PDB's parsed streams and the lookup context that borrows them.
    struct Streams {
        owner: Data,
        #[not_covariant]
        dependent: Ctx,
    }
);

/// A read PDB: its lookup context, and the code ranges it knows, as RVAs.
struct Loaded {
    streams: Streams,
    /// Every procedure's code, `(start, end)`, sorted.
    procedures: Vec<(u32, u32)>,
    /// Public function symbols, `(start, name)`, sorted.
    publics: Vec<(u32, Arc<str>)>,
}

impl Loaded {
    /// What the PDB says of `rva`, as Windows' DIA and LLVM's PDB reader name addresses: inside
    /// a procedure, its name, its own line there and the calls inlined into it; else
    /// the public symbol at or before it, with no line (code the PDB has no procedure for, such
    /// as a runtime library built without debug information, or padding after a function).
    fn lookup(&self, rva: u32) -> Option<Resolved> {
        let i = self.procedures.partition_point(|&(s, _)| s <= rva);
        let in_procedure = i > 0 && rva < self.procedures[i - 1].1;
        if in_procedure {
            let found = self.streams.with_dependent(|_, ctx| {
                // Innermost first; the last is the procedure.
                let ff = ctx.find_frames(rva).ok()??;
                let (outer, inner) = ff.frames.split_last()?;
                outer.function.as_ref()?;
                let file = |f: &pdb_addr2line::Frame<'_>| f.file.as_ref().map(|s| s.to_string());
                Some(Resolved {
                    function: outer.function.clone(),
                    file: file(outer),
                    line: outer.line,
                    inlined: inner
                        .iter()
                        .map(|f| super::Inlined {
                            function: f.function.clone(),
                            file: file(f),
                            line: f.line,
                        })
                        .collect(),
                })
            });
            if found.is_some() {
                return found;
            }
        }
        let j = self.publics.partition_point(|(s, _)| *s <= rva);
        let (_, name) = self.publics.get(j.checked_sub(1)?)?;
        Some(Resolved {
            function: Some(name.to_string()),
            ..Default::default()
        })
    }
}

/// The procedures of every module and the public function symbols of `pdb`, as sorted RVAs.
type Ranges = (Vec<(u32, u32)>, Vec<(u32, Arc<str>)>);

fn code_ranges(pdb: &mut PDB<'static, std::fs::File>) -> pdb_addr2line::pdb::Result<Ranges> {
    let map = pdb.address_map()?;
    let mut procedures = Vec::new();
    let dbi = pdb.debug_information()?;
    let x86 = matches!(dbi.machine_type(), Ok(pdb_addr2line::pdb::MachineType::X86));
    let mut modules = dbi.modules()?;
    while let Some(m) = modules.next()? {
        let Some(info) = pdb.module_info(&m)? else {
            continue;
        };
        let mut syms = info.symbols()?;
        while let Some(sym) = syms.next()? {
            if let Ok(SymbolData::Procedure(p)) = sym.parse() {
                if let Some(rva) = p.offset.to_rva(&map) {
                    procedures.push((rva.0, rva.0.saturating_add(p.len)));
                }
            }
        }
    }
    procedures.sort_unstable();
    let mut publics = Vec::new();
    let globals = pdb.global_symbols()?;
    let mut syms = globals.iter();
    while let Some(sym) = syms.next()? {
        // Every public: import thunks (`malloc`'s jump) carry no function flag.
        if let Ok(SymbolData::Public(p)) = sym.parse() {
            if let Some(rva) = p.offset.to_rva(&map) {
                let raw = p.name.to_string();
                publics.push((rva.0, Arc::from(undecorate(&raw, x86).as_ref())));
            }
        }
    }
    // Of the names at one address (aliases such as `_fpreset` and `fpreset`), the last by name,
    // as LLVM's reader picks from the PDB's own address-sorted map.
    publics.sort();
    publics.reverse();
    publics.dedup_by_key(|(rva, _)| *rva);
    publics.reverse();
    Ok((procedures, publics))
}

/// One PDB: read (from where), or why not.
enum Slot {
    Read {
        pdb: Loaded,
        path: PathBuf,
        /// Addresses named through it.
        named: u64,
    },
    Missing(String),
}

/// A PDB that was read, for the report.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PdbRead {
    pub pdb: String,
    pub guid: String,
    pub age: u32,
    pub path: String,
    /// Distinct addresses it named.
    pub addresses: u64,
}

/// A PDB that was wanted and not read, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PdbMissing {
    pub pdb: String,
    pub guid: String,
    pub age: u32,
    /// Where a symbol store keeps it: `pdb/store_key/pdb`.
    pub store_key: String,
    pub reason: String,
}

/// What a [`Symbolizer`] read and could not read (`symbols` in the JSON reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SymbolSummary {
    pub read: Vec<PdbRead>,
    pub missing: Vec<PdbMissing>,
}

impl SymbolSummary {
    /// One line for stderr: how many PDBs were read, and which were not, by reason (the most
    /// common first, a few names each).
    pub fn line(&self) -> String {
        let mut s = format!("symbols: read {} PDB files", self.read.len());
        if self.missing.is_empty() {
            return s;
        }
        let mut by_reason: Vec<(&str, Vec<&str>)> = Vec::new();
        for m in &self.missing {
            match by_reason.iter_mut().find(|(r, _)| *r == m.reason) {
                Some((_, names)) => names.push(&m.pdb),
                None => by_reason.push((&m.reason, vec![&m.pdb])),
            }
        }
        by_reason.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
        let groups: Vec<String> = by_reason
            .iter()
            .map(|(reason, names)| {
                let shown: Vec<&str> = names.iter().take(3).copied().collect();
                let more = match names.len() > 3 {
                    true => format!(" and {} more", names.len() - 3),
                    false => String::new(),
                };
                format!("{} {reason} ({}{more})", names.len(), shown.join(", "))
            })
            .collect();
        s.push_str(&format!(
            "; {} not read: {}",
            self.missing.len(),
            groups.join("; ")
        ));
        s
    }
}

/// Names module-relative addresses from the PDBs a [`SymbolPath`] holds; each PDB is read once,
/// when an address of its module is first asked for, and each address is looked up once.
pub struct Symbolizer {
    path: SymbolPath,
    pdbs: HashMap<PdbId, Slot>,
    /// Symbol servers that could not be reached, and why: not asked again.
    down: HashMap<String, String>,
    /// The PDB each image file on disk names (by path, size and time stamp), or none.
    images: HashMap<(String, u64, Option<u32>), Option<PdbId>>,
    named: HashMap<(PdbId, u32), Option<Resolved>>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("path", &self.path)
            .field("pdbs", &self.pdbs.len())
            .finish()
    }
}

impl Symbolizer {
    pub fn new(path: SymbolPath) -> Symbolizer {
        Symbolizer {
            path,
            pdbs: HashMap::new(),
            down: HashMap::new(),
            images: HashMap::new(),
            named: HashMap::new(),
        }
    }

    /// What the PDB of module `id` says of address `rva` (relative to the module's base): `None`
    /// when the PDB was not read or holds no function there.
    pub fn resolve(&mut self, id: &PdbId, rva: u64) -> Option<Resolved> {
        let rva = u32::try_from(rva).ok()?;
        let key = (id.clone(), rva);
        if let Some(r) = self.named.get(&key) {
            return r.clone();
        }
        let slot = self
            .pdbs
            .entry(id.clone())
            .or_insert_with(|| load(&self.path, id, &mut self.down));
        let r = match slot {
            Slot::Read { pdb, named, path } => match guarded(|| pdb.lookup(rva)) {
                Ok(r) => {
                    *named += u64::from(r.is_some());
                    r
                }
                // A PDB whose reader fails on it is not asked again.
                Err(e) => {
                    let why = format!(
                        "{}: not a readable PDB (at RVA {rva:#x}: {e})",
                        path.display()
                    );
                    *slot = Slot::Missing(why);
                    None
                }
            },
            Slot::Missing(_) => None,
        };
        self.named.insert(key, r.clone());
        r
    }

    /// The PDB a module's image file names, for a module whose trace gives none (a live session's,
    /// a trace never merged): the file at the path its image event gave (on Windows, a device
    /// path is opened through `\\?\GLOBALROOT`), taken only when its size, and its link time
    /// stamp where the event gave one, are the module's: a file rebuilt or updated since would
    /// name another build's PDB.
    pub fn image_pdb(&mut self, m: &super::ModuleRef<'_>) -> Option<PdbId> {
        let key = (m.path.to_string(), m.size, m.time_date_stamp);
        self.images
            .entry(key)
            .or_insert_with(|| {
                image_file_pdb(&local_path(m.path)?, Some(m.size), m.time_date_stamp)
            })
            .clone()
    }

    /// The PDBs read and those wanted but not read, each sorted by name.
    pub fn summary(&self) -> SymbolSummary {
        let mut s = SymbolSummary::default();
        for (id, slot) in &self.pdbs {
            let (pdb, guid, age) = (id.file_name().to_string(), id.guid.to_string(), id.age);
            match slot {
                Slot::Read { path, named, .. } => s.read.push(PdbRead {
                    pdb,
                    guid,
                    age,
                    path: path.display().to_string(),
                    addresses: *named,
                }),
                Slot::Missing(reason) => s.missing.push(PdbMissing {
                    pdb,
                    guid,
                    age,
                    store_key: id.store_key(),
                    reason: reason.clone(),
                }),
            }
        }
        s.read
            .sort_by(|a, b| (&a.pdb, &a.guid).cmp(&(&b.pdb, &b.guid)));
        s.missing
            .sort_by(|a, b| (&a.pdb, &a.guid).cmp(&(&b.pdb, &b.guid)));
        s
    }
}

/// The GUID and age a PDB file says it has (`None`: not a readable PDB); its name is the file's.
pub fn signature(file: &std::path::Path) -> Option<PdbId> {
    let mut pdb = PDB::open(std::fs::File::open(file).ok()?).ok()?;
    let (guid, age) = guid_age(&mut pdb).ok()?;
    Some(PdbId::new(guid, age, &file.file_name()?.to_string_lossy()))
}

/// A PDB's GUID and age as an image's CodeView record names them: the age is the DBI stream's
/// (the info stream's counts every rewrite of the file).
fn guid_age(pdb: &mut PDB<'static, std::fs::File>) -> pdb_addr2line::pdb::Result<(Guid, u32)> {
    let info = pdb.pdb_information()?;
    let age = pdb
        .debug_information()
        .ok()
        .and_then(|d| d.age())
        .unwrap_or(info.age);
    let (d1, d2, d3, d4) = info.guid.as_fields();
    Ok((Guid::new(d1, d2, d3, *d4), age))
}

/// Where an image event's path is on this machine: Windows device and system-root paths through
/// the object namespace (on Windows), any other path as it is.
fn local_path(path: &str) -> Option<PathBuf> {
    if cfg!(windows) {
        let lower = path.to_ascii_lowercase();
        if lower.starts_with(r"\device\") {
            return Some(PathBuf::from(format!(r"\\?\GLOBALROOT{path}")));
        }
        if let Some(rest) = lower
            .starts_with(r"\systemroot\")
            .then(|| &path[r"\SystemRoot".len()..])
        {
            let root = std::env::var_os("SystemRoot")?;
            return Some(PathBuf::from(format!("{}{rest}", root.to_string_lossy())));
        }
    }
    let p = PathBuf::from(path);
    p.is_absolute().then_some(p)
}

/// The PDB a PE image file (an .exe, .dll or .sys) names in its CodeView record: `None` when the
/// file is not a PE image or names no PDB.
pub fn image_pdb_id(path: &std::path::Path) -> Option<PdbId> {
    image_file_pdb(path, None, None)
}

/// The PDB a PE image file names in its CodeView record, when the file is the module's: its
/// SizeOfImage `size` and its COFF TimeDateStamp `stamp`, each when given.
fn image_file_pdb(path: &std::path::Path, size: Option<u64>, stamp: Option<u32>) -> Option<PdbId> {
    use object::read::pe::{PeFile32, PeFile64};
    use object::{LittleEndian as LE, Object};
    let data = std::fs::read(path).ok()?;
    // The CodeView record (GUID, age, PDB path), SizeOfImage and the link time stamp.
    macro_rules! read {
        ($pe:ty) => {{
            let pe = <$pe>::parse(&*data).ok()?;
            let info = pe.pdb_info().ok()??;
            let h = pe.nt_headers();
            (
                info.guid(),
                info.age(),
                String::from_utf8_lossy(info.path()).into_owned(),
                h.optional_header.size_of_image.get(LE),
                h.file_header.time_date_stamp.get(LE),
            )
        }};
    }
    let (guid, age, name, image_size, time) = match object::FileKind::parse(&*data).ok()? {
        object::FileKind::Pe64 => read!(PeFile64),
        object::FileKind::Pe32 => read!(PeFile32),
        _ => return None,
    };
    if size.is_some_and(|s| s != u64::from(image_size)) || stamp.is_some_and(|s| s != time) {
        return None;
    }
    Some(PdbId::new(Guid::from_le_bytes(&guid)?, age, &name))
}

/// A public symbol's name as the debuggers and PerfView show it: a C++ name (`?Foo@Bar@@...`)
/// demangled without its arguments (`Bar::Foo`); on x86, a C name without its calling
/// convention's decoration (`_malloc`, `_Sleep@4`, `@Fast@8` are `malloc`, `Sleep`, `Fast`).
pub fn undecorate(name: &str, x86: bool) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    if name.starts_with('?') {
        let flags = msvc_demangler::DemangleFlags::NAME_ONLY;
        return match msvc_demangler::demangle(name, flags) {
            Ok(d) => Cow::Owned(d),
            Err(_) => Cow::Borrowed(name),
        };
    }
    if !x86 {
        return Cow::Borrowed(name);
    }
    let (lead, rest) = match name.as_bytes().first() {
        Some(b'_') | Some(b'@') => (true, &name[1..]),
        _ => (false, name),
    };
    // A stdcall/fastcall suffix: `@` and the argument bytes.
    let base = match rest.rsplit_once('@') {
        Some((b, n)) if !b.is_empty() && !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => {
            b
        }
        _ => rest,
    };
    match (lead, base.len() == name.len()) {
        (false, true) => Cow::Borrowed(name),
        _ => Cow::Owned(base.to_string()),
    }
}

/// Looks for `id` along `path` and reads the first file whose GUID and age are the module's.
fn load(path: &SymbolPath, id: &PdbId, down: &mut HashMap<String, String>) -> Slot {
    let mut others: Vec<String> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut candidates = path.candidates(id);
    // The path the image itself names (a PDB built on this machine).
    let own = PathBuf::from(&*id.name);
    if own.is_absolute() && own.is_file() && !candidates.contains(&Candidate::File(own.clone())) {
        candidates.push(Candidate::File(own));
    }
    for c in candidates {
        let file = match c {
            Candidate::File(p) => p,
            Candidate::Server { url, cache } => {
                if let Some(e) = down.get(&url) {
                    failures.push(format!("{url}: {e}"));
                    continue;
                }
                match super::fetch::fetch(&url, id, cache.as_deref()) {
                    Ok(Some(p)) => p,
                    Ok(None) => continue,
                    Err(e) => {
                        failures.push(format!("{url}: {e}"));
                        if e.unreachable {
                            down.insert(url, e.to_string());
                        }
                        continue;
                    }
                }
            }
        };
        match guarded(|| open(&file, id)).unwrap_or_else(|e| Err(Open::Unreadable(e))) {
            Ok(pdb) => {
                return Slot::Read {
                    pdb,
                    path: file,
                    named: 0,
                }
            }
            Err(Open::Other(what)) => others.push(format!("{} is {what}", file.display())),
            Err(Open::Unreadable(e)) => failures.push(format!("{}: {e}", file.display())),
        }
    }
    let mut why = Vec::new();
    if path.is_empty() && others.is_empty() && failures.is_empty() {
        why.push("no symbol path given".to_string());
    } else if others.is_empty() && failures.is_empty() {
        why.push("not on the symbol path".to_string());
    }
    why.extend(others);
    why.extend(failures);
    Slot::Missing(why.join("; "))
}

/// Runs `f`, and a panic in it (the PDB readers index and add what a damaged file says, and a few
/// such paths panic) as an error naming it: a damaged PDB costs its own names, not the report.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        format!("its reader failed: {what}")
    })
}

enum Open {
    /// Another build's PDB (its GUID and age).
    Other(String),
    Unreadable(String),
}

/// Opens `file` as the PDB of `id`.
fn open(file: &std::path::Path, id: &PdbId) -> Result<Loaded, Open> {
    let unreadable =
        |e: &dyn std::fmt::Display| Open::Unreadable(format!("not a readable PDB ({e})"));
    let f = std::fs::File::open(file).map_err(|e| Open::Unreadable(e.to_string()))?;
    let mut pdb = PDB::open(f).map_err(|e| unreadable(&e))?;
    let (guid, age) = guid_age(&mut pdb).map_err(|e| unreadable(&e))?;
    if guid != id.guid || age != id.age {
        return Err(Open::Other(format!(
            "another build (GUID {guid}, age {age})"
        )));
    }
    let (procedures, publics) = code_ranges(&mut pdb).map_err(|e| unreadable(&e))?;
    let data = ContextPdbData::try_from_pdb(pdb).map_err(|e| unreadable(&e))?;
    // Names without argument lists, as PerfView and WPA show frames (`ntdll.dll!RtlAllocateHeap`).
    let flags = pdb_addr2line::TypeFormatterFlags::NO_ARGUMENTS
        | pdb_addr2line::TypeFormatterFlags::NO_FUNCTION_RETURN;
    let streams = Streams::try_new(data, |d| d.make_context_with_formatter_flags(flags))
        .map_err(|e| unreadable(&e))?;
    Ok(Loaded {
        streams,
        procedures,
        publics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_names_undecorated() {
        assert_eq!(undecorate("?Foo@Bar@@QEAAXH@Z", false), "Bar::Foo");
        assert_eq!(
            undecorate("??0Widget@ui@@QAE@XZ", true),
            "ui::Widget::Widget"
        );
        assert_eq!(undecorate("_fpreset", false), "_fpreset");
        assert_eq!(undecorate("_malloc", true), "malloc");
        assert_eq!(undecorate("_Sleep@4", true), "Sleep");
        assert_eq!(undecorate("@Fast@8", true), "Fast");
        assert_eq!(undecorate("RtlAllocateHeap", true), "RtlAllocateHeap");
        assert_eq!(undecorate("?bad", false), "?bad");
    }

    #[test]
    fn a_reader_panic_is_an_error_naming_it() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r: Result<u32, String> = guarded(|| {
            let sizes: Vec<u32> = vec![u32::MAX, 1];
            sizes
                .iter()
                .fold(0u32, |a, b| a.checked_add(*b).expect("overflow in a size"))
        });
        std::panic::set_hook(hook);
        assert_eq!(r, Err("its reader failed: overflow in a size".into()));
        assert_eq!(guarded(|| 7), Ok(7));
    }

    #[test]
    fn store_keys_and_file_names() {
        let id = PdbId::new(
            Guid::from_str_const("6048fdb6-2dcd-41c1-8835-594844ce7143"),
            0x1f,
            r"D:\os\obj\amd64fre\ntdll.pdb",
        );
        assert_eq!(id.file_name(), "ntdll.pdb");
        assert_eq!(id.store_key(), "6048FDB62DCD41C18835594844CE71431F");
    }
}
