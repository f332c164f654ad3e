//! Where to put the probes: allocator entry points of a libc, as file offsets.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

/// The allocator functions we trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    Malloc,
    Calloc,
    Realloc,
    ReallocArray,
    PosixMemalign,
    Memalign,
    Valloc,
    Pvalloc,
    Free,
}

impl Func {
    pub const ALL: [Func; 9] = [
        Func::Malloc,
        Func::Calloc,
        Func::Realloc,
        Func::ReallocArray,
        Func::PosixMemalign,
        Func::Memalign,
        Func::Valloc,
        Func::Pvalloc,
        Func::Free,
    ];

    /// Symbol names (the first found wins; aliases at the same address are probed once).
    pub fn symbols(self) -> &'static [&'static str] {
        match self {
            Func::Malloc => &["malloc"],
            Func::Calloc => &["calloc"],
            Func::Realloc => &["realloc"],
            Func::ReallocArray => &["reallocarray"],
            Func::PosixMemalign => &["posix_memalign"],
            Func::Memalign => &["memalign", "aligned_alloc"],
            Func::Valloc => &["valloc"],
            Func::Pvalloc => &["pvalloc"],
            Func::Free => &["free"],
        }
    }

    pub fn name(self) -> &'static str {
        self.symbols()[0]
    }

    /// Functions that return an address (so need a return probe).
    pub fn returns(self) -> bool {
        self != Func::Free
    }

    pub fn is_realloc(self) -> bool {
        matches!(self, Func::Realloc | Func::ReallocArray)
    }
}

/// One probe site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSite {
    pub func: Func,
    pub path: PathBuf,
    /// File offset of the probed instruction.
    pub offset: u64,
    /// Bytes skipped past the symbol (free's NULL check, see [`skip_null_check`]).
    pub skipped: u64,
}

/// Finds the probe sites of every allocator function in a libc (or any ELF exporting them).
pub fn resolve(path: &Path) -> Result<Vec<ProbeSite>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = object::File::parse(&data[..])
        .map_err(|e| format!("{} is not an ELF file: {e}", path.display()))?;
    let segs: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), off, size)
        })
        .collect();
    let to_off = |vaddr: u64| -> Option<u64> {
        segs.iter()
            .find(|(va, _, size)| vaddr >= *va && vaddr < va + size)
            .map(|(va, off, _)| vaddr - va + off)
    };
    let mut by_name = std::collections::HashMap::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if sym.kind() != object::SymbolKind::Text || sym.address() == 0 {
            continue;
        }
        if let Ok(name) = sym.name() {
            by_name.entry(name.to_string()).or_insert(sym.address());
        }
    }
    let mut out: Vec<ProbeSite> = Vec::new();
    for func in Func::ALL {
        let Some(vaddr) = func.symbols().iter().find_map(|s| by_name.get(*s).copied()) else {
            continue;
        };
        let Some(offset) = to_off(vaddr) else {
            continue;
        };
        if out.iter().any(|p| p.offset == offset) {
            continue;
        }
        let mut site = ProbeSite {
            func,
            path: path.to_path_buf(),
            offset,
            skipped: 0,
        };
        if func == Func::Free {
            let code = data
                .get(offset as usize..offset as usize + 16)
                .unwrap_or(&[]);
            site.skipped = skip_null_check(code);
            site.offset += site.skipped;
        }
        out.push(site);
    }
    if !out.iter().any(|p| p.func == Func::Malloc) || !out.iter().any(|p| p.func == Func::Free) {
        return Err(format!("{} exports no malloc/free", path.display()));
    }
    Ok(out)
}

/// free() starts with `test %rdi,%rdi; je ...` on glibc. Probing that `test` costs an out-of-line
/// single step (~12 µs measured, linux-tracing.md §3); the next instruction (a push, emulated) is ~5×
/// cheaper and only skips free(NULL), a no-op. Returns how many bytes to skip (0 when the code does
/// not look exactly like that).
pub fn skip_null_check(code: &[u8]) -> u64 {
    match code {
        // test %rdi,%rdi ; je rel32
        [0x48, 0x85, 0xff, 0x0f, 0x84, _, _, _, _, ..] => 9,
        // test %rdi,%rdi ; je rel8
        [0x48, 0x85, 0xff, 0x74, _, ..] => 5,
        _ => 0,
    }
}

/// The libc a process uses (from /proc/PID/maps), or ours when the process has not mapped it yet
/// (a child stopped right after exec).
pub fn libc_path(pid: Option<u32>) -> Result<PathBuf, String> {
    let find = |maps: &str| -> Option<PathBuf> {
        maps.lines().find_map(|l| {
            let path = l.split_whitespace().nth(5)?;
            let name = Path::new(path).file_name()?.to_str()?;
            (name.starts_with("libc.so") || name.starts_with("libc-")).then(|| PathBuf::from(path))
        })
    };
    if let Some(pid) = pid {
        if let Ok(m) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            if let Some(p) = find(&m) {
                return Ok(p);
            }
        }
    }
    let m =
        std::fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
    find(&m).ok_or_else(|| "no libc mapped in this process".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_glibc_allocators() {
        let libc = libc_path(None).unwrap();
        let sites = resolve(&libc).unwrap();
        for f in [
            Func::Malloc,
            Func::Calloc,
            Func::Realloc,
            Func::Free,
            Func::PosixMemalign,
            Func::Memalign,
        ] {
            assert!(
                sites.iter().any(|s| s.func == f),
                "{f:?} missing in {}",
                libc.display()
            );
        }
        // Offsets are distinct and inside the file.
        let len = std::fs::metadata(&libc).unwrap().len();
        assert!(sites.iter().all(|s| s.offset < len));
    }

    #[test]
    fn null_check_skip() {
        assert_eq!(
            skip_null_check(&[0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55]),
            9
        );
        assert_eq!(skip_null_check(&[0x48, 0x85, 0xff, 0x74, 0x10, 0x55]), 5);
        assert_eq!(skip_null_check(&[0x41, 0x54]), 0);
    }
}
