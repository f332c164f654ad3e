//! Where a thread of a running process may be borrowed to load the allocator shim.
//!
//! The loader stub calls the process's `dlopen`, which allocates. On a thread stopped inside
//! `malloc` or `free`, that call re-enters the allocator halfway through an update: a process with
//! one thread takes no allocator lock at all, and even with locks the per-thread cache has none.
//! The interrupted call then finishes with stale pointers and the process aborts later (glibc:
//! "malloc assertion failure in sysmalloc"). The same holds for the dynamic loader, whose state
//! `dlopen` changes. So a thread is borrowed only at a point outside both:
//!
//! - interrupted in user mode at an address outside every allocator module (libc, the dynamic
//!   loader, any library that defines `malloc`, the shim), or
//! - asleep in a system call that neither the allocator nor the loader makes (a `read`, a sleep, a
//!   `poll`, a condition-variable or join wait), issued from outside the loader.
//!
//! [`CodeMap`] holds the address ranges of a process's allocator and loader code and judges a
//! stopped thread's registers; the tracer stops the thread again and again until it is at such a
//! point (see `inject`).

use std::path::PathBuf;

use object::{Object, ObjectSymbol};

/// System call numbers (x86-64) the allocator makes (glibc's malloc: `brk`, `mmap` and friends,
/// `getrandom` for its cache key, `prctl` to name its arenas, futex waits for its locks) and, when
/// the call has not blocked, the ones glibc makes once to count CPUs for its arenas.
mod nr {
    pub const READ: u64 = 0;
    pub const OPEN: u64 = 2;
    pub const CLOSE: u64 = 3;
    pub const MMAP: u64 = 9;
    pub const MPROTECT: u64 = 10;
    pub const MUNMAP: u64 = 11;
    pub const BRK: u64 = 12;
    pub const MREMAP: u64 = 25;
    pub const MADVISE: u64 = 28;
    pub const PRCTL: u64 = 157;
    pub const FUTEX: u64 = 202;
    pub const SCHED_GETAFFINITY: u64 = 204;
    pub const OPENAT: u64 = 257;
    pub const GETRANDOM: u64 = 318;
}

/// `FUTEX_WAIT_BITSET`: the wait of condition variables, joins and semaphores. glibc's internal
/// locks (the allocator's arenas, the loader's lock) wait with plain `FUTEX_WAIT` instead.
const FUTEX_WAIT_BITSET: u64 = 9;
/// The futex operation without its private and clock flags.
const FUTEX_CMD_MASK: u64 = 0x7f;

/// What a system call returns when a stop interrupted it while it slept (`-EINTR`, and the
/// kernel's restart codes `-ERESTARTSYS`, `-ERESTARTNOINTR`, `-ERESTARTNOHAND`,
/// `-ERESTART_RESTARTBLOCK`).
fn interrupted_while_asleep(rax: u64) -> bool {
    matches!(rax as i64, -4 | -514..=-512 | -516)
}

/// The registers that say where a stopped thread is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    pub rip: u64,
    /// The system call the thread is in or just past (`-1`: none).
    pub orig_rax: u64,
    /// Its result (or what a stop interrupting it left there).
    pub rax: u64,
    /// Its second argument (a futex operation).
    pub rsi: u64,
}

impl From<&libc::user_regs_struct> for At {
    fn from(r: &libc::user_regs_struct) -> At {
        At {
            rip: r.rip,
            orig_rax: r.orig_rax,
            rax: r.rax,
            rsi: r.rsi,
        }
    }
}

/// The executable address ranges of a process's allocator and dynamic loader.
#[derive(Debug, Default)]
pub(crate) struct CodeMap {
    allocator: Vec<(u64, u64)>,
    loader: Vec<(u64, u64)>,
}

/// Where a stopped thread is, for the loader stub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spot {
    /// Running code outside the allocator and the loader: safe.
    OwnCode,
    /// Asleep in a system call neither the allocator nor the loader makes: safe.
    Asleep,
    /// Somewhere in the allocator's code (or the loader's), or in a system call they make.
    Allocator,
    /// Just past a system call that completed: its caller is not known, so not trusted.
    AfterSystemCall,
}

impl Spot {
    pub(crate) fn is_safe(self) -> bool {
        matches!(self, Spot::OwnCode | Spot::Asleep)
    }
}

impl CodeMap {
    /// Reads `/proc/PID/maps` and the mapped files' dynamic symbols (through the process's root,
    /// so a process in another mount namespace is read as it sees its files).
    pub(crate) fn of(pid: u32) -> CodeMap {
        let mut map = CodeMap::default();
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return map;
        };
        // (path, executable ranges), in the order first seen.
        let mut files: Vec<(String, Vec<(u64, u64)>)> = Vec::new();
        for line in maps.lines() {
            let mut it = line.split_whitespace();
            let (Some(range), Some(perms)) = (it.next(), it.next()) else {
                continue;
            };
            if perms.as_bytes().get(2) != Some(&b'x') {
                continue;
            }
            let path = it.skip(3).collect::<Vec<_>>().join(" ");
            if !path.starts_with('/') {
                continue;
            }
            let Some((s, e)) = range.split_once('-') else {
                continue;
            };
            let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
                continue;
            };
            match files.iter_mut().find(|(p, _)| *p == path) {
                Some((_, r)) => r.push((s, e)),
                None => files.push((path, vec![(s, e)])),
            }
        }
        for (path, ranges) in files {
            let name = path.rsplit('/').next().unwrap_or("");
            if name.starts_with("ld-linux") || name.starts_with("ld64.so") {
                map.loader.extend(ranges);
            } else if name.starts_with("libc.so")
                || (name.starts_with("libc-") && name.ends_with(".so"))
                || name.contains("etwkit_heapshim")
                || defines_malloc(pid, &path)
            {
                map.allocator.extend(ranges);
            }
        }
        map
    }

    /// True when the map knows where libc's code is (else every judgement would say "own code").
    pub(crate) fn knows_allocator(&self) -> bool {
        !self.allocator.is_empty()
    }

    /// Where a thread stopped with registers `r` is.
    pub(crate) fn spot(&self, r: At) -> Spot {
        let within = |ranges: &[(u64, u64)]| ranges.iter().any(|&(s, e)| r.rip >= s && r.rip < e);
        if within(&self.loader) {
            return Spot::Allocator;
        }
        if (r.orig_rax as i64) < 0 {
            // Stopped in user mode, not in a system call.
            return if within(&self.allocator) {
                Spot::Allocator
            } else {
                Spot::OwnCode
            };
        }
        let asleep = interrupted_while_asleep(r.rax);
        let allocators_call = match r.orig_rax {
            nr::MMAP
            | nr::MUNMAP
            | nr::MPROTECT
            | nr::BRK
            | nr::MREMAP
            | nr::MADVISE
            | nr::PRCTL
            | nr::GETRANDOM => true,
            nr::FUTEX => r.rsi & FUTEX_CMD_MASK != FUTEX_WAIT_BITSET,
            nr::READ | nr::OPEN | nr::OPENAT | nr::CLOSE | nr::SCHED_GETAFFINITY => !asleep,
            _ => false,
        };
        if allocators_call {
            Spot::Allocator
        } else if asleep {
            Spot::Asleep
        } else if within(&self.allocator) {
            Spot::AfterSystemCall
        } else {
            Spot::OwnCode
        }
    }
}

/// Whether the ELF file at `path` (as process `pid` sees it) defines `malloc`: an allocator such as
/// jemalloc, tcmalloc or mimalloc, whose code is as unsafe to interrupt as libc's.
fn defines_malloc(pid: u32, path: &str) -> bool {
    let in_ns = PathBuf::from(format!("/proc/{pid}/root{path}"));
    let Ok(file) = std::fs::File::open(&in_ns).or_else(|_| std::fs::File::open(path)) else {
        return false;
    };
    // Read as needed (headers, dynamic symbols), not whole: a process may map a large binary.
    let cache = object::ReadCache::new(file);
    let Ok(obj) = object::File::parse(&cache) else {
        return false;
    };
    obj.dynamic_symbols()
        .any(|s| s.is_definition() && s.name() == Ok("malloc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(rip: u64, orig_rax: i64, rax: i64, rsi: u64) -> At {
        At {
            rip,
            orig_rax: orig_rax as u64,
            rax: rax as u64,
            rsi,
        }
    }

    /// This process's own map: libc's `malloc` is allocator code, this test's code is not, and
    /// the system calls are judged by what the allocator makes.
    #[test]
    fn judges_this_process() {
        let map = CodeMap::of(std::process::id());
        assert!(map.knows_allocator());
        assert!(!map.loader.is_empty());
        let in_libc = libc::malloc as *const () as u64;
        let here = judges_this_process as *const () as u64;
        assert_eq!(map.spot(regs(in_libc, -1, 0, 0)), Spot::Allocator);
        assert_eq!(map.spot(regs(here, -1, 0, 0)), Spot::OwnCode);
        // Asleep in clock_nanosleep (230), interrupted: restart code in rax.
        assert_eq!(map.spot(regs(in_libc, 230, -516, 0)), Spot::Asleep);
        // Asleep in a condition-variable wait (FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG).
        assert_eq!(map.spot(regs(in_libc, 202, -512, 9 | 128)), Spot::Asleep);
        // Asleep on a lock (FUTEX_WAIT | FUTEX_PRIVATE_FLAG): maybe the allocator's.
        assert_eq!(map.spot(regs(in_libc, 202, -512, 128)), Spot::Allocator);
        // Just past an mmap (a result in rax), and a completed write in libc.
        assert_eq!(
            map.spot(regs(in_libc, 9, 0x7f00_0000_0000, 0)),
            Spot::Allocator
        );
        assert_eq!(map.spot(regs(in_libc, 1, 5, 0)), Spot::AfterSystemCall);
        // A read that slept is a wait; one that returned may be glibc counting CPUs for malloc.
        assert_eq!(map.spot(regs(in_libc, 0, -512, 0)), Spot::Asleep);
        assert_eq!(map.spot(regs(in_libc, 0, 12, 0)), Spot::Allocator);
        let loader = map.loader[0].0;
        assert_eq!(map.spot(regs(loader, 0, -512, 0)), Spot::Allocator);
    }

    /// libc defines malloc; this test program does not.
    #[test]
    fn finds_the_libraries_defining_malloc() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.rsplit('/').next().unwrap().starts_with("libc.so"))
            .expect("libc mapped");
        let pid = std::process::id();
        assert!(defines_malloc(pid, libc));
        let me = std::env::current_exe().unwrap();
        assert!(!defines_malloc(pid, me.to_str().unwrap()));
        assert!(!defines_malloc(pid, "/nonexistent/lib.so"));
    }
}
