//! Loading the allocator shim into a running process, without gdb: ptrace stops one of its threads
//! where it is outside the allocator and the dynamic loader (see the `safe_point` module: the main
//! thread first, each one let run a moment and stopped again until it is at such a point) and
//! points it at a small loader stub that calls the process's own `dlopen` on the shim, then the
//! shim's attach entry point, and returns to where the thread was. The other threads keep running
//! (the shim's hooks go in with atomic stores; stopping them all would deadlock dlopen on a lock one
//! of them holds).
//!
//! The stub is self-contained (see `STUB`): it lives in executable slack no code uses, its frame
//! (arguments, the thread's registers, room for its FP/vector state) on the thread's own stack
//! below the red zone, and it restores every register, flags and vector state included, itself.
//! The tracer only sets rip and rsp, once, and then watches for the stub's marker system call to
//! read the result. So a tracer killed at any moment leaves a thread that either never saw the
//! stub or runs it to the end and resumes correctly; the shim it loads then finds nobody listening
//! and stays inert. A thread stopped inside an interrupted system call resumes with that call
//! restarted, as the kernel would have done.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::{Object, ObjectSegment, ObjectSymbol};

use super::safe_point::{At, CodeMap};

/// Why the shim could not be loaded.
#[derive(Debug)]
pub enum InjectError {
    /// Injection cannot work for this process (one sentence): fall back to uprobes.
    Unsupported(String),
    /// It was tried and failed (one sentence).
    Failed(String),
}

impl std::fmt::Display for InjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InjectError::Unsupported(s) | InjectError::Failed(s) => f.write_str(s),
        }
    }
}

/// The symbol the shim exports for attaching (see the shim crate's `attach` module).
const ATTACH_SYMBOL: &str = "etwkit_heapshim_attach";
/// How long loading the shim may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A mapped file of a process: its path and the lowest address it is mapped at with file offset 0.
fn mapped_file(pid: u32, want: impl Fn(&str) -> bool) -> Option<(PathBuf, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mut best: Option<(PathBuf, u64)> = None;
    for line in maps.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let path: String = it.skip(2).collect::<Vec<_>>().join(" ");
        if !path.starts_with('/') || !want(&path) || u64::from_str_radix(off, 16) != Ok(0) {
            continue;
        }
        let Some(start) = range
            .split_once('-')
            .and_then(|(a, _)| u64::from_str_radix(a, 16).ok())
        else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, s)| start < *s) {
            best = Some((PathBuf::from(path), start));
        }
    }
    best
}

/// The address of `names[0]` (else the next name) in a file mapped at `start` (offset 0) in `pid`.
fn symbol_address(pid: u32, path: &Path, start: u64, names: &[&str]) -> Option<u64> {
    // The file as the process sees it (its mount namespace).
    let in_ns = PathBuf::from(format!("/proc/{pid}/root{}", path.display()));
    let data = std::fs::read(&in_ns)
        .or_else(|_| std::fs::read(path))
        .ok()?;
    let file = object::File::parse(&data[..]).ok()?;
    let first = file.segments().map(|s| s.address()).min().unwrap_or(0);
    let bias = start.wrapping_sub(first & !0xfff);
    for name in names {
        if let Some(s) = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok(name) && s.is_definition())
        {
            return Some(bias.wrapping_add(s.address()));
        }
    }
    None
}

/// Offset of `name` in the shim file (from its load bias).
fn shim_symbol(shim: &Path, name: &str) -> Option<u64> {
    let data = std::fs::read(shim).ok()?;
    let file = object::File::parse(&data[..]).ok()?;
    let s = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(name) && s.is_definition())?;
    Some(s.address())
}

/// The loader stub, written once into a process (see [`find_cave`]) and entered by pointing a
/// stopped thread's rip at it, with rsp at a frame we wrote on that thread's stack below its red
/// zone. Everything it needs is in that frame, above its own rsp (so a signal handler that runs
/// meanwhile cannot overwrite it); it uses no tracer once entered. Frame, from rsp:
/// `+0 dlopen, +8 dlsym, +16 shim path, +24 attach symbol name, +32 arg0, +40 arg1, +48 FP save
/// area (64-aligned, zeroed), +56 1 = xsave / 0 = fxsave, +64 the register block`; the register
/// block is r15 r14 r13 r12 r11 r10 r9 r8 rbp rdi rsi rdx rcx rbx rax rflags rip and ends 128 bytes
/// below the thread's original rsp (its red zone), so the final `ret 128` leaves rsp exactly there.
///
/// ```text
///  0: mov rbx,[rsp+0x30]      5: cmp qword [rsp+0x38],0   b: je 1d
///  d: mov eax,-1             12: mov edx,-1              17: xsave64 [rbx]     1b: jmp 21
/// 1d: fxsave64 [rbx]         21: cld                     22: mov rdi,[rsp+0x10]
/// 27: mov esi,2 (RTLD_NOW)   2c: call [rsp]  (dlopen)    2f: test rax,rax      32: je 53
/// 34: mov rdi,rax            37: mov rsi,[rsp+0x18]      3c: call [rsp+8] (dlsym)
/// 40: test rax,rax           43: je 5c                   45: mov rdi,[rsp+0x20]
/// 4a: mov rsi,[rsp+0x28]     4f: call rax (attach)       51: jmp 63
/// 53: mov rax,-65537         5a: jmp 63                  5c: mov rax,-65538
/// 63: mov rdi,rax            66: mov eax,39 (getpid)     6b: syscall  <- the tracer's marker
/// 6d: mov rbx,[rsp+0x30]     72: cmp qword [rsp+0x38],0  78: je 8a
/// 7a: mov eax,-1             7f: mov edx,-1              84: xrstor64 [rbx]    88: jmp 8e
/// 8a: fxrstor64 [rbx]        8e: mov rsp,[rsp+0x40]      93: pop r15 … pop rax (15 pops)
/// aa: popfq                  ab: ret 0x80
/// ```
const STUB: [u8; 174] = [
    0x48, 0x8b, 0x5c, 0x24, 0x30, 0x48, 0x83, 0x7c, 0x24, 0x38, 0x00, 0x74, 0x10, 0xb8, 0xff, 0xff,
    0xff, 0xff, 0xba, 0xff, 0xff, 0xff, 0xff, 0x48, 0x0f, 0xae, 0x23, 0xeb, 0x04, 0x48, 0x0f, 0xae,
    0x03, 0xfc, 0x48, 0x8b, 0x7c, 0x24, 0x10, 0xbe, 0x02, 0x00, 0x00, 0x00, 0xff, 0x14, 0x24, 0x48,
    0x85, 0xc0, 0x74, 0x1f, 0x48, 0x89, 0xc7, 0x48, 0x8b, 0x74, 0x24, 0x18, 0xff, 0x54, 0x24, 0x08,
    0x48, 0x85, 0xc0, 0x74, 0x17, 0x48, 0x8b, 0x7c, 0x24, 0x20, 0x48, 0x8b, 0x74, 0x24, 0x28, 0xff,
    0xd0, 0xeb, 0x10, 0x48, 0xc7, 0xc0, 0xff, 0xff, 0xfe, 0xff, 0xeb, 0x07, 0x48, 0xc7, 0xc0, 0xfe,
    0xff, 0xfe, 0xff, 0x48, 0x89, 0xc7, 0xb8, 0x27, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x8b, 0x5c,
    0x24, 0x30, 0x48, 0x83, 0x7c, 0x24, 0x38, 0x00, 0x74, 0x10, 0xb8, 0xff, 0xff, 0xff, 0xff, 0xba,
    0xff, 0xff, 0xff, 0xff, 0x48, 0x0f, 0xae, 0x2b, 0xeb, 0x04, 0x48, 0x0f, 0xae, 0x0b, 0x48, 0x8b,
    0x64, 0x24, 0x40, 0x41, 0x5f, 0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, 0x41, 0x5b, 0x41, 0x5a, 0x41,
    0x59, 0x41, 0x58, 0x5d, 0x5f, 0x5e, 0x5a, 0x59, 0x5b, 0x58, 0x9d, 0xc2, 0x80, 0x00,
];
/// Offset in [`STUB`] just past its marker `syscall` (a syscall-entry stop there carries the result).
const STUB_MARKER: u64 = 0x6d;
const STUB_DLOPEN_FAILED: i64 = -65537;
const STUB_NO_SYMBOL: i64 = -65538;
const SYS_GETPID: u64 = 39;
const SYS_RESTART_SYSCALL: u64 = 219;

/// Test hook: `ETWKIT_INJECT_DIE_AT=N` makes etwkit SIGKILL itself at step N of an injection (1
/// thread stopped, 2 stub written, 3 frame written, 4 registers set, 5 thread running the stub,
/// 6 inside dlopen, 7 the shim attached, 8 thread let go; 9 the shim connected back, before it
/// got its configuration), so tests can check that every state in
/// between leaves the process running correctly.
pub(crate) fn die_at(step: u32) {
    static AT: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let at = *AT.get_or_init(|| {
        std::env::var("ETWKIT_INJECT_DIE_AT")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if at == Some(step) {
        // SAFETY: kill on our own pid.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

/// Where the stub goes: the slack between the end of a module's executable segment and the end of
/// its last page, which is mapped executable but holds no code of any module (nothing jumps there).
/// Returns its address when it holds what the file has there (never used) or already our stub.
fn find_cave(pid: u32, mem: &File, modules: &[(PathBuf, u64)]) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let executable = |a: u64, b: u64| {
        maps.lines().any(|l| {
            let mut it = l.split_whitespace();
            let (Some(range), Some(perms)) = (it.next(), it.next()) else {
                return false;
            };
            let Some((s, e)) = range.split_once('-') else {
                return false;
            };
            let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
                return false;
            };
            perms.as_bytes().get(2) == Some(&b'x') && s <= a && b <= e
        })
    };
    for (path, start) in modules {
        let in_ns = PathBuf::from(format!("/proc/{pid}/root{}", path.display()));
        let Ok(data) = std::fs::read(&in_ns).or_else(|_| std::fs::read(path)) else {
            continue;
        };
        let Ok(file) = object::File::parse(&data[..]) else {
            continue;
        };
        let first = file.segments().map(|s| s.address()).min().unwrap_or(0);
        let bias = start.wrapping_sub(first & !0xfff);
        let segs: Vec<(u64, u64, u64, bool)> = file
            .segments()
            .map(|s| {
                let x =
                    matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & 1 != 0);
                (
                    bias + s.address(),
                    bias + s.address() + s.size(),
                    s.file_range().0,
                    x,
                )
            })
            .collect();
        for &(s, e, off, x) in &segs {
            if !x {
                continue;
            }
            let cave = (e + 15) & !15;
            let page_end = (e + 0xfff) & !0xfff;
            let end = cave + STUB.len() as u64;
            if end > page_end
                || segs.iter().any(|&(s2, e2, _, _)| cave < e2 && s2 < end)
                || !executable(cave, end)
            {
                continue;
            }
            let mut now = [0u8; STUB.len()];
            if mem.read_exact_at(&mut now, cave).is_err() {
                continue;
            }
            // What the file has there (zeros past its end).
            let at = (off + (cave - s)) as usize;
            let mut orig = [0u8; STUB.len()];
            if at < data.len() {
                let n = (data.len() - at).min(STUB.len());
                orig[..n].copy_from_slice(&data[at..at + n]);
            }
            if now == orig || now == STUB {
                return Some(cave);
            }
        }
    }
    None
}

/// The registers a thread stopped in an interrupted system call would resume with: the kernel
/// restarts such a call (rip back over the `syscall`, the number back in rax) when nothing else is
/// done with it; the stub returns to that state itself.
fn resumed(r: &libc::user_regs_struct) -> libc::user_regs_struct {
    let mut r = *r;
    if (r.orig_rax as i64) >= 0 {
        match r.rax as i64 {
            // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND
            -514..=-512 => {
                r.rax = r.orig_rax;
                r.rip -= 2;
            }
            // ERESTART_RESTARTBLOCK
            -516 => {
                r.rax = SYS_RESTART_SYSCALL;
                r.rip -= 2;
            }
            _ => {}
        }
    }
    r
}

/// Size of the FP/vector save area and whether `xsave` is usable (else `fxsave`, 512 bytes).
fn fp_save_area() -> (u64, bool) {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    #[allow(unused_unsafe)]
    // SAFETY: cpuid is available on every x86-64 CPU.
    let (l1, ld) = unsafe { (__cpuid(1), __cpuid_count(0xd, 0)) };
    let osxsave = l1.ecx & (1 << 27) != 0;
    if osxsave && ld.ebx >= 576 && ld.ebx <= 64 * 1024 {
        (ld.ebx as u64, true)
    } else {
        (512, false)
    }
}

/// The stub's frame for a thread whose registers are `regs`: (its address, its bytes).
fn build_frame(
    regs: &libc::user_regs_struct,
    funcs: [u64; 2],
    path: &[u8],
    args: [u64; 2],
) -> (u64, Vec<u8>) {
    let r = resumed(regs);
    let block: [u64; 17] = [
        r.r15, r.r14, r.r13, r.r12, r.r11, r.r10, r.r9, r.r8, r.rbp, r.rdi, r.rsi, r.rdx, r.rcx,
        r.rbx, r.rax, r.eflags, r.rip,
    ];
    let block_at = regs.rsp - 128 - block.len() as u64 * 8;
    let sym = format!("{ATTACH_SYMBOL}\0");
    let strings_at = (block_at - (path.len() + sym.len()) as u64) & !7;
    let (fp_size, xsave) = fp_save_area();
    let fp_at = (strings_at - fp_size) & !63;
    let rsp = (fp_at - 80) & !15;
    let mut f = vec![0u8; (regs.rsp - 128 - rsp) as usize];
    let put = |f: &mut Vec<u8>, at: u64, b: &[u8]| {
        let o = (at - rsp) as usize;
        f[o..o + b.len()].copy_from_slice(b);
    };
    let header: [u64; 9] = [
        funcs[0],
        funcs[1],
        strings_at,
        strings_at + path.len() as u64,
        args[0],
        args[1],
        fp_at,
        xsave as u64,
        block_at,
    ];
    for (i, w) in header.iter().enumerate() {
        put(&mut f, rsp + i as u64 * 8, &w.to_le_bytes());
    }
    put(&mut f, strings_at, path);
    put(&mut f, strings_at + path.len() as u64, sym.as_bytes());
    for (i, w) in block.iter().enumerate() {
        put(&mut f, block_at + i as u64 * 8, &w.to_le_bytes());
    }
    (rsp, f)
}

/// Loads `shim` (a path the process can open) into `pid` and calls its attach entry point with
/// (our pid, `nonce`). Returns what that returned (GOT entries patched, or -errno).
///
/// Nothing the process needs is ever left for us to restore: the stub, written into executable
/// slack no code uses, and its frame, on the borrowed thread's stack below its red zone, are in
/// place before that thread's rip and rsp are pointed at them (one PTRACE_SETREGS); from then on the
/// thread loads the shim and returns to where it was by itself. We only watch for the stub's marker
/// system call to learn the result. Killed at any point, we leave the thread either untouched or
/// running the stub; the shim, finding no one listening, stays loaded and inert.
pub fn inject_shim(pid: u32, shim: &Path, nonce: u64) -> Result<i64, InjectError> {
    let is_libc = |p: &str| {
        let f = p.rsplit('/').next().unwrap_or("");
        f.starts_with("libc.so") || (f.starts_with("libc-") && f.ends_with(".so"))
    };
    if let Err(e) = std::fs::File::open(format!("/proc/{pid}/maps")) {
        return Err(InjectError::Unsupported(format!(
            "the memory map of process {pid} is not readable ({e})"
        )));
    }
    // The stub returns with `ret`, which a hardware shadow stack (CET) would refuse.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    if status
        .lines()
        .any(|l| l.starts_with("x86_Thread_features:") && l.contains("shstk"))
    {
        return Err(InjectError::Unsupported(format!(
            "process {pid} runs with x86 shadow stacks, which the shim's loader stub cannot return through"
        )));
    }
    let Some((libc_path, libc_start)) = mapped_file(pid, is_libc) else {
        return Err(InjectError::Unsupported(format!(
            "process {pid} has no glibc libc.so mapped (a static binary, or another C library), so it cannot load the shim"
        )));
    };
    let sym = |names: &[&str]| symbol_address(pid, &libc_path, libc_start, names);
    let (Some(dlopen), Some(dlsym)) = (
        sym(&["dlopen", "__libc_dlopen_mode"]),
        sym(&["dlsym", "__libc_dlsym"]),
    ) else {
        return Err(InjectError::Unsupported(format!(
            "the libc of process {pid} ({}) exports no dlopen",
            libc_path.display()
        )));
    };
    if shim_symbol(shim, ATTACH_SYMBOL).is_none() {
        return Err(InjectError::Failed(format!(
            "{} is not an etwkit heap shim with attach support",
            shim.display()
        )));
    }
    // Absolute: the process resolves a relative path from its own working directory.
    let shim = &std::path::absolute(shim)
        .map_err(|e| InjectError::Failed(format!("{}: {e}", shim.display())))?;
    let in_target = place_shim(pid, shim)?;
    let mut path = in_target.as_os_str().as_encoded_bytes().to_vec();
    path.push(0);
    let mut modules = vec![(libc_path.clone(), libc_start)];
    modules.extend(mapped_file(pid, |p| p.contains("/ld-linux")));

    let code = CodeMap::of(pid);
    if !code.knows_allocator() {
        return Err(InjectError::Unsupported(format!(
            "the code of process {pid}'s allocator could not be located, so no thread can be borrowed safely"
        )));
    }
    let mut t = borrow_thread(pid, &code)?;
    die_at(1);
    let r = t.run_stub(pid, &modules, [dlopen, dlsym], &path, nonce);
    t.release();
    die_at(8);
    let v = r?;
    match v {
        STUB_DLOPEN_FAILED => {
            let missing = missing_libraries(pid, shim);
            Err(InjectError::Unsupported(if missing.is_empty() {
                format!(
                    "dlopen of {} failed inside process {pid}",
                    in_target.display()
                )
            } else {
                format!(
                    "process {pid} could not load the shim: its filesystem lacks {}, which the shim needs",
                    missing.join(", ")
                )
            }))
        }
        STUB_NO_SYMBOL => Err(InjectError::Failed(format!(
            "{} loaded in process {pid} has no {ATTACH_SYMBOL}",
            shim.display()
        ))),
        v => Ok(v),
    }
}

/// The shim's needed libraries that process `pid` neither has loaded nor has in the usual library
/// directories of its filesystem.
fn missing_libraries(pid: u32, shim: &Path) -> Vec<String> {
    use object::read::elf::{Dyn, ElfFile64, FileHeader};
    let Ok(data) = std::fs::read(shim) else {
        return Vec::new();
    };
    let Ok(elf) = ElfFile64::<object::Endianness>::parse(&data[..]) else {
        return Vec::new();
    };
    let endian = elf.endian();
    let needed: Vec<String> = (|| {
        let sections = elf.elf_header().sections(endian, &data[..]).ok()?;
        let (dyns, link) = sections.dynamic(endian, &data[..]).ok()??;
        let strings = sections.strings(endian, &data[..], link).ok()?;
        Some(
            dyns.iter()
                .filter(|d| d.tag32(endian) == Some(object::elf::DT_NEEDED))
                .filter_map(|d| d.string(endian, strings).ok())
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect(),
        )
    })()
    .unwrap_or_default();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let dirs = [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ];
    needed
        .into_iter()
        .filter(|n| {
            !maps.lines().any(|l| l.ends_with(&format!("/{n}")))
                && !dirs
                    .iter()
                    .any(|d| Path::new(&format!("/proc/{pid}/root{d}/{n}")).exists())
        })
        .collect()
}

/// A path under which process `pid` opens `shim`: `shim` itself when its mount namespace shows the
/// same file there, else a copy written into its own filesystem (`/tmp`, `/dev/shm` or `/var/tmp`
/// as it sees them; resolved inside its root, never through its symlinks), named by content.
fn place_shim(pid: u32, shim: &Path) -> Result<PathBuf, InjectError> {
    use std::os::unix::fs::MetadataExt;
    let same =
        |a: &std::fs::Metadata, b: &std::fs::Metadata| a.dev() == b.dev() && a.ino() == b.ino();
    let ours = std::fs::metadata(shim)
        .map_err(|e| InjectError::Failed(format!("{}: {e}", shim.display())))?;
    let seen = std::fs::metadata(format!("/proc/{pid}/root{}", shim.display()));
    if seen.is_ok_and(|m| same(&m, &ours)) {
        return Ok(shim.to_path_buf());
    }
    let bytes =
        std::fs::read(shim).map_err(|e| InjectError::Failed(format!("{}: {e}", shim.display())))?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in &bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let root = std::fs::File::open(format!("/proc/{pid}/root")).map_err(|e| {
        InjectError::Unsupported(format!(
            "the root directory of process {pid} is not reachable ({e})"
        ))
    })?;
    let mut why = String::new();
    for dir in ["tmp", "dev/shm", "var/tmp"] {
        let rel = format!("{dir}/libetwkit_heapshim-{h:016x}.so");
        match write_in_root(&root, &rel, &bytes) {
            Ok(()) => return Ok(PathBuf::from(format!("/{rel}"))),
            Err(e) if why.is_empty() => why = format!("/{rel}: {e}"),
            Err(_) => {}
        }
    }
    Err(InjectError::Unsupported(format!(
        "process {pid} lives in another filesystem namespace where the shim could not be placed ({why})"
    )))
}

/// Creates `rel` (relative to `root`, resolved as if `root` were `/`) holding `bytes`, or checks that
/// it already holds exactly them.
fn write_in_root(root: &File, rel: &str, bytes: &[u8]) -> io::Result<()> {
    use std::io::{Read, Write};
    use std::os::fd::{AsRawFd, FromRawFd};
    let open = |flags: i32| -> io::Result<File> {
        // SAFETY: open_how is plain integers.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
        if flags & libc::O_CREAT != 0 {
            how.mode = 0o644;
        }
        how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
        let c = std::ffi::CString::new(rel).map_err(io::Error::other)?;
        // SAFETY: openat2 reads a NUL-terminated path and an open_how of the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor, ours.
        Ok(unsafe { File::from_raw_fd(fd as i32) })
    };
    match open(libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) {
        Ok(mut f) => {
            f.write_all(bytes)?;
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o644))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mut have = Vec::new();
            open(libc::O_RDONLY)?.read_to_end(&mut have)?;
            if have == bytes {
                Ok(())
            } else {
                Err(io::Error::other("a different file is already there"))
            }
        }
        Err(e) => Err(e),
    }
}

/// How long to look for a thread at a safe point before giving up (and tracing with uprobes).
const BORROW_TIMEOUT: Duration = Duration::from_secs(6);
/// Stops of one thread before the next is tried.
const STOPS_PER_THREAD: u32 = 25;

/// Seizes a thread of `pid` stopped where the loader stub may run (see `safe_point`): the main
/// thread first, then the threads asleep, then the rest; each is let run a moment and stopped
/// again until it is outside the allocator and the loader, or the next is tried.
fn borrow_thread(pid: u32, code: &CodeMap) -> Result<Tracee, InjectError> {
    let state = |tid: u32| -> Option<char> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        s.rsplit_once(')')?.1.trim_start().chars().next()
    };
    let deadline = Instant::now() + BORROW_TIMEOUT;
    let mut last_error = None;
    let mut seized_any = false;
    while Instant::now() < deadline {
        let mut tids = super::list_tids(pid);
        if tids.is_empty() {
            return Err(InjectError::Failed(format!("process {pid} ended")));
        }
        // Main thread first, then sleepers, then the others.
        tids.sort_by_cached_key(|&t| (t != pid, state(t) != Some('S'), t));
        for tid in tids {
            if Instant::now() >= deadline {
                break;
            }
            let mut t = match Tracee::seize(tid as i32) {
                Ok(t) => t,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EPERM) | Some(libc::EACCES) => {
                        return Err(InjectError::Unsupported(format!(
                            "ptrace of process {pid} was denied (not root, Yama ptrace_scope, seccomp, or another tracer)"
                        )))
                    }
                    // This thread ended meanwhile: the next one.
                    _ => {
                        last_error = Some(e);
                        continue;
                    }
                },
            };
            seized_any = true;
            match t.stop_at_safe_point(code, STOPS_PER_THREAD) {
                Ok(true) => return Ok(t),
                Ok(false) => t.release(),
                Err(e) => {
                    last_error = Some(e);
                    t.release();
                }
            }
        }
        if !super::process_alive(pid) {
            return Err(InjectError::Failed(format!("process {pid} ended")));
        }
    }
    Err(InjectError::Unsupported(match last_error {
        Some(_) if !super::process_alive(pid) => format!("process {pid} not found"),
        Some(e) if !seized_any => format!("ptrace of process {pid} failed: {e}"),
        _ => format!(
            "no thread of process {pid} could be stopped outside the C library, the dynamic loader and the allocator (or asleep in a system call they do not make) within {} s, so the shim could not be loaded safely",
            BORROW_TIMEOUT.as_secs()
        ),
    }))
}

/// A thread seized with ptrace (syscall stops marked with 0x80).
struct Tracee {
    tid: i32,
    regs: libc::user_regs_struct,
    /// A signal that was being delivered when we stopped it: delivered when it goes on.
    pending_sig: i32,
    /// In a ptrace stop (so it can be detached).
    stopped: bool,
    mem: File,
}

fn ptrace(req: libc::c_uint, tid: i32, addr: usize, data: usize) -> io::Result<i64> {
    // SAFETY: the requests used here take integer arguments or a pointer to a user_regs_struct we own.
    let r = unsafe { libc::ptrace(req, tid, addr, data) };
    if r == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(0) {
            return Err(e);
        }
    }
    Ok(r)
}

/// waitpid for one thread, polling until `deadline`.
fn wait_thread(tid: i32, deadline: Instant) -> io::Result<i32> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status through a valid pointer.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == tid {
            return Ok(status);
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the thread did not stop in time",
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn getregs(tid: i32) -> io::Result<libc::user_regs_struct> {
    // SAFETY: user_regs_struct is plain integers.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _ as usize)?;
    Ok(r)
}

impl Tracee {
    fn seize(tid: i32) -> io::Result<Tracee> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{tid}/mem"))?;
        ptrace(
            libc::PTRACE_SEIZE,
            tid,
            0,
            libc::PTRACE_O_TRACESYSGOOD as usize,
        )?;
        let mut t = Tracee {
            tid,
            // SAFETY: user_regs_struct is plain integers.
            regs: unsafe { std::mem::zeroed() },
            pending_sig: 0,
            stopped: false,
            mem,
        };
        ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0)?;
        let status = match wait_thread(tid, Instant::now() + Duration::from_secs(5)) {
            Ok(s) => s,
            Err(e) => {
                t.release();
                return Err(e);
            }
        };
        if let Err(e) = t.stopped_with(status) {
            t.release();
            return Err(e);
        }
        Ok(t)
    }

    /// Takes in a stop's wait status: the registers, and a signal that was on its way in (delivered
    /// when the thread goes on).
    fn stopped_with(&mut self, status: i32) -> io::Result<()> {
        if !libc::WIFSTOPPED(status) {
            self.stopped = false;
            return Err(io::Error::other("the thread exited"));
        }
        self.stopped = true;
        let sig = libc::WSTOPSIG(status);
        if status >> 16 != libc::PTRACE_EVENT_STOP && sig != libc::SIGTRAP {
            self.pending_sig = sig;
        }
        self.regs = getregs(self.tid)?;
        Ok(())
    }

    /// Lets the stopped thread run a moment and stops it again, up to `stops` times, until it is at
    /// a point where the loader stub may run; true when it is.
    fn stop_at_safe_point(&mut self, code: &CodeMap, stops: u32) -> io::Result<bool> {
        for i in 0..stops {
            if code.spot(At::from(&self.regs)).is_safe() {
                return Ok(true);
            }
            let sig = std::mem::take(&mut self.pending_sig);
            ptrace(libc::PTRACE_CONT, self.tid, 0, sig as usize)?;
            self.stopped = false;
            // Varied, so that a loop's period does not stop it at the same place every time.
            std::thread::sleep(Duration::from_micros(100 + u64::from(i * 373 % 900)));
            ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0)?;
            let status = wait_thread(self.tid, Instant::now() + Duration::from_secs(5))?;
            self.stopped_with(status)?;
        }
        Ok(code.spot(At::from(&self.regs)).is_safe())
    }

    /// Writes the stub and its frame, points the thread at it and waits for its marker system call;
    /// returns its result (what the shim's attach entry returned, or a STUB_* code).
    fn run_stub(
        &mut self,
        pid: u32,
        modules: &[(PathBuf, u64)],
        funcs: [u64; 2],
        path: &[u8],
        nonce: u64,
    ) -> Result<i64, InjectError> {
        let failed =
            |what: &str, e: io::Error| InjectError::Failed(format!("{what} in process {pid}: {e}"));
        let cave = find_cave(pid, &self.mem, modules).ok_or_else(|| {
            InjectError::Failed(format!(
                "process {pid} has no unused executable slack for the loader stub"
            ))
        })?;
        self.mem
            .write_all_at(&STUB, cave)
            .map_err(|e| failed("writing the loader stub", e))?;
        die_at(2);
        let (rsp, frame) = build_frame(&self.regs, funcs, path, [std::process::id() as u64, nonce]);
        self.mem
            .write_all_at(&frame, rsp)
            .map_err(|e| failed("writing the loader stub's frame on the thread's stack", e))?;
        die_at(3);
        let mut r = self.regs;
        r.rip = cave;
        r.rsp = rsp;
        // Not in a system call any more: the kernel must not restart one over our registers.
        r.orig_rax = u64::MAX;
        ptrace(libc::PTRACE_SETREGS, self.tid, 0, &r as *const _ as usize)
            .map_err(|e| failed("setting the registers", e))?;
        die_at(4);
        let sig = std::mem::take(&mut self.pending_sig);
        self.resume(sig)
            .map_err(|e| failed("resuming the thread", e))?;
        die_at(5);
        let deadline = Instant::now() + CALL_TIMEOUT;
        let mut syscalls = 0u32;
        loop {
            let status = match wait_thread(self.tid, deadline) {
                Ok(s) => s,
                Err(e) => return Err(failed("waiting for the shim to load", e)),
            };
            if !libc::WIFSTOPPED(status) {
                self.stopped = false;
                return Err(InjectError::Failed(format!(
                    "process {pid} ended while loading the shim"
                )));
            }
            self.stopped = true;
            let sig = libc::WSTOPSIG(status);
            if sig == libc::SIGTRAP | 0x80 {
                syscalls += 1;
                if syscalls == 3 {
                    die_at(6);
                }
                let now = getregs(self.tid).map_err(|e| failed("reading registers", e))?;
                if now.rip == cave + STUB_MARKER && now.orig_rax == SYS_GETPID {
                    die_at(7);
                    return Ok(now.rdi as i64);
                }
                self.resume(0)
                    .map_err(|e| failed("resuming the thread", e))?;
                continue;
            }
            // Group stops: go on; other signals: delivered as usual.
            let deliver = if status >> 16 == 0 && sig != libc::SIGTRAP {
                sig
            } else {
                0
            };
            self.resume(deliver)
                .map_err(|e| failed("resuming the thread", e))?;
        }
    }

    fn resume(&mut self, sig: i32) -> io::Result<()> {
        ptrace(libc::PTRACE_SYSCALL, self.tid, 0, sig as usize)?;
        self.stopped = false;
        Ok(())
    }

    /// Lets the thread go (it runs on unwatched; nothing to restore): stops it first when running.
    fn release(mut self) {
        if !self.stopped
            && ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0).is_ok()
            && wait_thread(self.tid, Instant::now() + Duration::from_secs(5))
                .is_ok_and(|s| libc::WIFSTOPPED(s))
        {
            self.stopped = true;
        }
        let _ = ptrace(libc::PTRACE_DETACH, self.tid, 0, self.pending_sig as usize);
    }
}
