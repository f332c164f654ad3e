//! Loading the allocator shim into a running process, without gdb: ptrace stops one of its threads
//! (one asleep in a system call when there is one), makes it call the process's own `dlopen` on the
//! shim and then the shim's attach entry point, and lets it go on where it was. The other threads keep running (the shim's hooks go in with atomic
//! stores; stopping them all would deadlock dlopen on a lock one of them holds).
//!
//! A call is made by saving the thread's registers, pointing rip at the function with the System V
//! arguments in rdi/rsi, below the red zone of its stack, with a return address of 0: the return
//! faults at address 0, which ptrace sees as a SIGSEGV stop with rip 0 (the result is in rax), and
//! the saved registers are put back. `orig_rax = -1` keeps the kernel from restarting a system call
//! the thread was stopped in, until the original registers are back.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::{Object, ObjectSegment, ObjectSymbol};

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
const RTLD_NOW: u64 = 2;
/// How long one injected call may take.
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

/// Loads `shim` (a path the process can open) into `pid` and calls its attach entry point with
/// (our pid, `nonce`). Returns what that returned (GOT entries patched, or -errno).
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
    let Some((libc_path, libc_start)) = mapped_file(pid, is_libc) else {
        return Err(InjectError::Unsupported(format!(
            "process {pid} has no glibc libc.so mapped (a static binary, or another C library), so it cannot load the shim"
        )));
    };
    let Some(dlopen) = symbol_address(
        pid,
        &libc_path,
        libc_start,
        &["dlopen", "__libc_dlopen_mode"],
    ) else {
        return Err(InjectError::Unsupported(format!(
            "the libc of process {pid} ({}) exports no dlopen",
            libc_path.display()
        )));
    };
    let attach_off = shim_symbol(shim, ATTACH_SYMBOL).ok_or_else(|| {
        InjectError::Failed(format!(
            "{} is not an etwkit heap shim with attach support",
            shim.display()
        ))
    })?;
    let mut path = shim.as_os_str().as_encoded_bytes().to_vec();
    path.push(0);

    let tid = quiet_thread(pid) as i32;
    let mut t = Tracee::seize(tid).map_err(|e| {
        InjectError::Unsupported(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => format!(
                "ptrace of process {pid} was denied (not root, Yama ptrace_scope, seccomp, or another tracer)"
            ),
            Some(libc::ESRCH) => format!("process {pid} not found"),
            _ => format!("ptrace of process {pid} failed: {e}"),
        })
    })?;
    let r = (|| {
        let handle = t
            .call(dlopen, [0, RTLD_NOW], Some(&path))
            .map_err(|e| InjectError::Failed(format!("calling dlopen in process {pid}: {e}")))?;
        if handle == 0 {
            return Err(InjectError::Failed(format!(
                "dlopen of {} failed inside process {pid}",
                shim.display()
            )));
        }
        // glibc's handle is its link_map, whose first field is the load bias.
        let mut b = [0u8; 8];
        t.mem
            .read_exact_at(&mut b, handle)
            .map_err(|e| InjectError::Failed(format!("reading process {pid}: {e}")))?;
        let bias = u64::from_le_bytes(b);
        let nonce_arg = nonce;
        t.call(
            bias.wrapping_add(attach_off),
            [std::process::id() as u64, nonce_arg],
            None,
        )
        .map(|v| v as i64)
        .map_err(|e| InjectError::Failed(format!("calling the shim in process {pid}: {e}")))
    })();
    t.release()
        .map_err(|e| InjectError::Failed(format!("resuming process {pid}: {e}")))?;
    r
}

/// The thread to borrow: one asleep in a system call (the main thread first), as such a thread holds
/// no allocator lock that the shim's loading would then wait for forever; else the main thread.
fn quiet_thread(pid: u32) -> u32 {
    let state = |tid: u32| -> Option<char> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        s.rsplit_once(')')?.1.trim_start().chars().next()
    };
    if state(pid) == Some('S') {
        return pid;
    }
    super::list_tids(pid)
        .into_iter()
        .find(|&t| state(t) == Some('S'))
        .unwrap_or(pid)
}

/// A thread stopped under ptrace, with its registers saved.
struct Tracee {
    tid: i32,
    saved: libc::user_regs_struct,
    /// A signal that was being delivered when we stopped it: delivered when we let go.
    pending_sig: i32,
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

impl Tracee {
    fn seize(tid: i32) -> io::Result<Tracee> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{tid}/mem"))?;
        ptrace(libc::PTRACE_SEIZE, tid, 0, 0)?;
        let mut t = Tracee {
            tid,
            // SAFETY: user_regs_struct is plain integers.
            saved: unsafe { std::mem::zeroed() },
            pending_sig: 0,
            mem,
        };
        if let Err(e) = t.interrupt() {
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
            return Err(e);
        }
        Ok(t)
    }

    fn interrupt(&mut self) -> io::Result<()> {
        ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0)?;
        let status = wait_thread(self.tid, Instant::now() + Duration::from_secs(5))?;
        if !libc::WIFSTOPPED(status) {
            return Err(io::Error::other("the thread exited"));
        }
        let sig = libc::WSTOPSIG(status);
        if status >> 16 != libc::PTRACE_EVENT_STOP && sig != libc::SIGTRAP {
            // A signal on its way in: deliver it when we let go.
            self.pending_sig = sig;
        }
        ptrace(
            libc::PTRACE_GETREGS,
            self.tid,
            0,
            &mut self.saved as *mut _ as usize,
        )?;
        Ok(())
    }

    /// Calls `func(args[0], args[1])` on this thread; with `data`, args[0] is replaced by the address
    /// of a copy of `data` on the thread's stack. Returns rax.
    fn call(&mut self, func: u64, mut args: [u64; 2], data: Option<&[u8]>) -> io::Result<u64> {
        let mut r = self.saved;
        // Below the 128-byte red zone, with room to spare.
        let mut sp = (self.saved.rsp - 4096) & !0xf;
        if let Some(d) = data {
            sp = (sp - d.len() as u64) & !0xf;
            self.mem.write_all_at(d, sp)?;
            args[0] = sp;
        }
        sp -= 8;
        self.mem.write_all_at(&0u64.to_le_bytes(), sp)?;
        r.rsp = sp;
        r.rip = func;
        r.rdi = args[0];
        r.rsi = args[1];
        r.rax = 0;
        r.orig_rax = u64::MAX;
        ptrace(libc::PTRACE_SETREGS, self.tid, 0, &r as *const _ as usize)?;
        ptrace(libc::PTRACE_CONT, self.tid, 0, 0)?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let status = wait_thread(self.tid, deadline)?;
            if !libc::WIFSTOPPED(status) {
                return Err(io::Error::other("the process ended during the call"));
            }
            let sig = libc::WSTOPSIG(status);
            if sig == libc::SIGSEGV {
                let mut now: libc::user_regs_struct =
                    // SAFETY: plain integers.
                    unsafe { std::mem::zeroed() };
                ptrace(
                    libc::PTRACE_GETREGS,
                    self.tid,
                    0,
                    &mut now as *mut _ as usize,
                )?;
                if now.rip == 0 {
                    return Ok(now.rax);
                }
                return Err(io::Error::other(format!(
                    "the call faulted at {:#x}",
                    now.rip
                )));
            }
            // Group stops and other signals: let the thread go on (signals delivered as usual).
            let deliver = if status >> 16 == 0 && sig != libc::SIGTRAP {
                sig
            } else {
                0
            };
            ptrace(libc::PTRACE_CONT, self.tid, 0, deliver as usize)?;
        }
    }

    /// Puts the registers back and detaches (delivering a signal we held).
    fn release(self) -> io::Result<()> {
        ptrace(
            libc::PTRACE_SETREGS,
            self.tid,
            0,
            &self.saved as *const _ as usize,
        )?;
        ptrace(libc::PTRACE_DETACH, self.tid, 0, self.pending_sig as usize)?;
        Ok(())
    }
}
