//! tracefs uprobes on the C library's `bind` and `connect`, fetching the `struct sockaddr` the
//! syscall tracepoints only carry as a user pointer. The kernel reads the address when the call
//! happens, so the value is the one the program passed (no race with later reuse of the descriptor).
//!
//! `uprobe_events` is shared by everyone: etwkit only appends its own definitions (group
//! `etwkit_<owner pid>_<n>`) and removes them with `-:group/event`; groups of dead owners are removed
//! by [`cleanup_orphans`]. These probes are placed on the library file, so every process calling
//! `bind`/`connect` takes the breakpoint (about a microsecond per call): acceptable for these rare
//! calls, which is why hot functions are never probed this way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::super::LiveError;
use super::tracefs;

/// The C library this process maps (the traced programs are assumed to use the same file).
pub fn find_libc() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            let name = p.rsplit('/').next().unwrap_or("");
            name == "libc.so.6" || (name.starts_with("libc-") && name.ends_with(".so"))
        })
        .map(PathBuf::from)
}

fn rd<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
    b.get(off..off + N)?.try_into().ok()
}
fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    rd::<2>(b, off).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    rd::<4>(b, off).map(u32::from_le_bytes)
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    rd::<8>(b, off).map(u64::from_le_bytes)
}

/// File offsets of exported functions of a 64-bit little-endian ELF shared object (`.dynsym`).
pub fn symbol_offsets(elf: &[u8], names: &[&str]) -> Result<HashMap<String, u64>, String> {
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let bad = || "truncated ELF headers".to_string();
    let phoff = u64_at(elf, 0x20).ok_or_else(bad)? as usize;
    let shoff = u64_at(elf, 0x28).ok_or_else(bad)? as usize;
    let phentsize = u16_at(elf, 0x36).ok_or_else(bad)? as usize;
    let phnum = u16_at(elf, 0x38).ok_or_else(bad)? as usize;
    let shentsize = u16_at(elf, 0x3a).ok_or_else(bad)? as usize;
    let shnum = u16_at(elf, 0x3c).ok_or_else(bad)? as usize;
    // Loadable segments: (vaddr, filesz, offset).
    let mut loads = Vec::new();
    for i in 0..phnum {
        let p = phoff + i * phentsize;
        if u32_at(elf, p).ok_or_else(bad)? == 1 {
            loads.push((
                u64_at(elf, p + 0x10).ok_or_else(bad)?,
                u64_at(elf, p + 0x20).ok_or_else(bad)?,
                u64_at(elf, p + 0x08).ok_or_else(bad)?,
            ));
        }
    }
    // .dynsym (type 11) and its string table (sh_link).
    let sh = |i: usize| shoff + i * shentsize;
    let dynsym = (0..shnum)
        .find(|&i| u32_at(elf, sh(i) + 4) == Some(11))
        .ok_or("no .dynsym section")?;
    let sym_off = u64_at(elf, sh(dynsym) + 0x18).ok_or_else(bad)? as usize;
    let sym_size = u64_at(elf, sh(dynsym) + 0x20).ok_or_else(bad)? as usize;
    let strtab = u32_at(elf, sh(dynsym) + 0x28).ok_or_else(bad)? as usize;
    let str_off = u64_at(elf, sh(strtab) + 0x18).ok_or_else(bad)? as usize;
    let mut out = HashMap::new();
    for k in 0..sym_size / 24 {
        let s = sym_off + k * 24;
        let name_off = u32_at(elf, s).ok_or_else(bad)? as usize;
        let info = *elf.get(s + 4).ok_or_else(bad)?;
        let shndx = u16_at(elf, s + 6).ok_or_else(bad)?;
        let value = u64_at(elf, s + 8).ok_or_else(bad)?;
        if info & 0xf != 2 || shndx == 0 {
            continue; // not a defined function
        }
        let Some(rest) = elf.get(str_off + name_off..) else {
            continue;
        };
        let end = rest.iter().position(|&c| c == 0).unwrap_or(0);
        let name = std::str::from_utf8(&rest[..end]).unwrap_or("");
        if !names.contains(&name) || out.contains_key(name) {
            continue;
        }
        if let Some(&(va, sz, off)) = loads
            .iter()
            .find(|&&(va, sz, _)| value >= va && value < va + sz)
        {
            let _ = sz;
            out.insert(name.to_string(), value - va + off);
        }
    }
    Ok(out)
}

/// The probes of one session.
pub struct Probes {
    pub group: String,
    pub events: Vec<String>,
    root: PathBuf,
}

const FETCH: &str =
    "fd=%di:s32 family=+0(%si):u16 port=+2(%si):u16 a4=+4(%si):u32 a6=+8(%si):u8[16]";

impl Probes {
    /// Defines `bind` and `connect` probes (x86-64 argument registers).
    pub fn define(root: &Path, group: &str) -> Result<Probes, LiveError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(LiveError::Unsupported(
                "socket-address uprobes are written for x86-64 registers".into(),
            ));
        }
        let libc = find_libc().ok_or_else(|| {
            LiveError::Other("cannot find the C library in /proc/self/maps".into())
        })?;
        let elf = std::fs::read(&libc).map_err(|e| LiveError::io(&libc, e))?;
        let offs = symbol_offsets(&elf, &["bind", "connect"])
            .map_err(|e| LiveError::Other(format!("{}: {e}", libc.display())))?;
        let mut p = Probes {
            group: group.to_string(),
            events: Vec::new(),
            root: root.to_path_buf(),
        };
        for name in ["bind", "connect"] {
            let Some(off) = offs.get(name) else { continue };
            let line = format!("p:{group}/{name} {}:{off:#x} {FETCH}\n", libc.display());
            tracefs::append(&root.join("uprobe_events"), &line)?;
            p.events.push(name.to_string());
        }
        Ok(p)
    }

    /// Removes the definitions (the events must be disabled everywhere first).
    pub fn remove(&mut self) -> Result<(), LiveError> {
        let mut first_err = None;
        for e in self.events.drain(..) {
            if let Err(err) = tracefs::append(
                &self.root.join("uprobe_events"),
                &format!("-:{}/{e}\n", self.group),
            ) {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Removes `etwkit_<pid>_*` uprobe groups whose owner is dead (never anyone else's).
pub fn cleanup_orphans(root: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(root.join("events")) else {
        return removed;
    };
    for e in rd.flatten() {
        let g = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = g
            .strip_prefix("etwkit_")
            .and_then(|r| r.split('_').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if tracefs::pid_alive(pid) {
            continue;
        }
        for ev in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            if ev.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                let n = ev.file_name().to_string_lossy().into_owned();
                if tracefs::append(&root.join("uprobe_events"), &format!("-:{g}/{n}\n")).is_ok() {
                    removed.push(format!("{g}/{n}"));
                }
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn finds_libc_functions() {
        let Some(p) = find_libc() else { return };
        let elf = std::fs::read(&p).unwrap();
        let offs = symbol_offsets(&elf, &["bind", "connect"]).unwrap();
        assert!(offs["bind"] > 0 && offs["connect"] > 0);
        assert_ne!(offs["bind"], offs["connect"]);
        assert!(symbol_offsets(b"not an elf", &["bind"]).is_err());
        assert!(symbol_offsets(&elf[..100], &["bind"]).is_err());
    }
}
