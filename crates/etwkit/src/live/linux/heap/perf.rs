//! perf_event_open plumbing for the heap tracer: uprobe PMU events bound to one task, per-CPU mmap
//! rings, and the record layouts we ask for. This is the only module of the heap tracer with
//! `unsafe` (syscalls and the shared ring memory).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{fence, Ordering};

/// `struct perf_event_attr` (PERF_ATTR_SIZE_VER8, 136 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved2: u16,
    pub aux_sample_size: u32,
    pub aux_action: u32,
    pub sig_data: u64,
    pub config3: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 136);

// perf_event_attr flag bits.
pub const FLAG_DISABLED: u64 = 1 << 0;
pub const FLAG_INHERIT: u64 = 1 << 1;
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
pub const FLAG_MMAP: u64 = 1 << 8;
pub const FLAG_COMM: u64 = 1 << 9;
pub const FLAG_TASK: u64 = 1 << 13;
pub const FLAG_WATERMARK: u64 = 1 << 14;
pub const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
pub const FLAG_MMAP2: u64 = 1 << 23;
pub const FLAG_USE_CLOCKID: u64 = 1 << 25;

// sample_type bits.
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_CPU: u64 = 1 << 7;
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;

/// x86-64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
pub mod reg {
    pub const AX: u32 = 0;
    pub const DX: u32 = 3;
    pub const SI: u32 = 4;
    pub const DI: u32 = 5;
    pub const BP: u32 = 6;
    pub const SP: u32 = 7;
    pub const IP: u32 = 8;
}
/// The registers every heap sample carries, in the order the kernel writes them (ascending number).
pub const REGS_MASK: u64 = 1 << reg::AX
    | 1 << reg::DX
    | 1 << reg::SI
    | 1 << reg::DI
    | 1 << reg::BP
    | 1 << reg::SP
    | 1 << reg::IP;
/// Index of each register in a sample's register array (order of `REGS_MASK` bits).
pub mod reg_idx {
    pub const AX: usize = 0;
    pub const DX: usize = 1;
    pub const SI: usize = 2;
    pub const DI: usize = 3;
    pub const BP: usize = 4;
    pub const SP: usize = 5;
    pub const IP: usize = 6;
    pub const COUNT: usize = 7;
}

// Record types.
pub const RECORD_LOST: u32 = 2;
pub const RECORD_COMM: u32 = 3;
pub const RECORD_EXIT: u32 = 4;
pub const RECORD_FORK: u32 = 7;
pub const RECORD_SAMPLE: u32 = 9;
pub const RECORD_MMAP2: u32 = 10;
pub const RECORD_LOST_SAMPLES: u32 = 13;

const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const PERF_EVENT_IOC_ID: libc::c_ulong = 0x8008_2407;

/// The uprobe PMU: its type number and the config bit that makes a probe a return probe.
#[derive(Clone, Copy, Debug)]
pub struct UprobePmu {
    pub type_: u32,
    pub retprobe_bit: u32,
}

impl UprobePmu {
    pub fn detect() -> io::Result<UprobePmu> {
        let dir = Path::new("/sys/bus/event_source/devices/uprobe");
        let t = std::fs::read_to_string(dir.join("type")).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "uprobe PMU not available ({}/type: {e}); kernel needs CONFIG_UPROBE_EVENTS",
                    dir.display()
                ),
            )
        })?;
        let type_ = t
            .trim()
            .parse()
            .map_err(|_| io::Error::other(format!("bad uprobe PMU type {t:?}")))?;
        let f = std::fs::read_to_string(dir.join("format/retprobe"))
            .unwrap_or_else(|_| "config:0".into());
        let retprobe_bit = f
            .trim()
            .strip_prefix("config:")
            .and_then(|b| b.parse().ok())
            .unwrap_or(0);
        Ok(UprobePmu {
            type_,
            retprobe_bit,
        })
    }
}

/// Opens one event. `pid` is a thread id; `cpu` a CPU number.
pub fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: `attr` is a valid, fully initialized perf_event_attr of the size it declares; the
    // kernel only reads it. The returned descriptor is owned by us alone.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid as libc::c_int,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor returned by the kernel and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Opens a uprobe (or uretprobe) at `offset` in the ELF file `path` for thread `tid` on `cpu`.
pub fn open_uprobe(
    pmu: &UprobePmu,
    path: &Path,
    offset: u64,
    ret: bool,
    tid: i32,
    cpu: i32,
    template: &PerfEventAttr,
) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with NUL byte"))?;
    let mut attr = *template;
    attr.type_ = pmu.type_;
    attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
    attr.config = if ret { 1u64 << pmu.retprobe_bit } else { 0 };
    attr.config1 = cpath.as_ptr() as u64;
    attr.config2 = offset;
    attr.sample_period = 1;
    perf_event_open(&attr, tid, cpu)
}

/// Opens a tracepoint event (`config` = id from tracefs `events/GROUP/NAME/id`) for thread `tid` on
/// `cpu`. Used for uprobes defined (never enabled) in tracefs: unlike the uprobe PMU, whose
/// `config1` is a path pointer the kernel re-reads from the *child's* memory when a thread inherits
/// the event (so `inherit` breaks clone()), tracepoint events inherit into new threads.
pub fn open_tracepoint(
    id: u64,
    tid: i32,
    cpu: i32,
    template: &PerfEventAttr,
) -> io::Result<OwnedFd> {
    const PERF_TYPE_TRACEPOINT: u32 = 2;
    let mut attr = *template;
    attr.type_ = PERF_TYPE_TRACEPOINT;
    attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
    attr.config = id;
    attr.sample_period = 1;
    perf_event_open(&attr, tid, cpu)
}

/// The kernel's id for an event (what PERF_SAMPLE_IDENTIFIER carries; inherited copies report the
/// parent's id).
pub fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id: u64 = 0;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64 to the pointer we pass, which points to `id`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_ID as _, &mut id as *mut u64) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(id)
}

/// Sends `fd`'s records into the ring of `ring_fd` (same CPU).
pub fn set_output(fd: &OwnedFd, ring_fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain ioctl on two descriptors we own; no memory is passed.
    let r = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_SET_OUTPUT as _,
            ring_fd.as_raw_fd() as libc::c_ulong,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn enable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain ioctl on a descriptor we own; no memory is passed.
    let r = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_ENABLE as _,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One per-CPU perf ring: metadata page + 2^n data pages, mapped read-write (we own data_tail).
pub struct Ring {
    pub fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    /// Scratch buffer for records that wrap around the end of the ring.
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this struct and only touched through &mut self.
unsafe impl Send for Ring {}

impl Ring {
    pub fn map(fd: OwnedFd, data_pages: usize) -> io::Result<Ring> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = page * (1 + data_pages);
        // SAFETY: mapping a perf event descriptor we own, shared, with the size the kernel expects
        // (1 + 2^n pages); the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base as *mut u8;
        // SAFETY: the metadata page is mapped and at least 1056 bytes long; data_offset (1040) and
        // data_size (1048) are u64 fields of struct perf_event_mmap_page.
        let (data_offset, data_size) = unsafe {
            let off = std::ptr::read_volatile(base.add(1040) as *const u64) as usize;
            let size = std::ptr::read_volatile(base.add(1048) as *const u64) as usize;
            (off, size)
        };
        let (data_offset, data_size) = if data_size == 0 {
            (page, page * data_pages)
        } else {
            (data_offset, data_size)
        };
        Ok(Ring {
            fd,
            base,
            map_len,
            data_offset,
            data_size,
            scratch: Vec::new(),
        })
    }

    /// Calls `f(position, record)` for every complete record now in the ring (header included);
    /// with `consume`, releases them to the kernel afterwards. Returns the head position reached.
    pub fn read(&mut self, consume: bool, mut f: impl FnMut(u64, &[u8])) -> u64 {
        // SAFETY: data_head (offset 1024) is written by the kernel; read it volatile, then an acquire
        // fence orders our reads of the data after it (the protocol of perf_event_mmap_page).
        let head = unsafe { std::ptr::read_volatile(self.base.add(1024) as *const u64) };
        fence(Ordering::Acquire);
        // SAFETY: data_tail (offset 1032) is ours to read and write.
        let mut tail = unsafe { std::ptr::read_volatile(self.base.add(1032) as *const u64) };
        let size = self.data_size as u64;
        while tail + 8 <= head {
            let off = (tail % size) as usize;
            let mut hdr = [0u8; 8];
            self.copy_out(off, &mut hdr);
            let len = u16::from_le_bytes([hdr[6], hdr[7]]) as usize;
            if len < 8 || tail + len as u64 > head {
                break;
            }
            if off + len <= self.data_size {
                // SAFETY: [off, off+len) lies inside the data area, which the kernel will not
                // overwrite before we advance data_tail past it.
                let rec = unsafe {
                    std::slice::from_raw_parts(self.base.add(self.data_offset + off), len)
                };
                f(tail, rec);
            } else {
                let mut buf = std::mem::take(&mut self.scratch);
                buf.resize(len, 0);
                self.copy_out(off, &mut buf);
                f(tail, &buf);
                self.scratch = buf;
            }
            tail += len as u64;
        }
        if consume {
            fence(Ordering::Release);
            // SAFETY: publish the new tail so the kernel may reuse the space (release fence above).
            unsafe { std::ptr::write_volatile(self.base.add(1032) as *mut u64, tail) };
        }
        tail
    }

    fn copy_out(&self, off: usize, out: &mut [u8]) {
        let first = out.len().min(self.data_size - off);
        // SAFETY: both source ranges lie inside the mapped data area (`off < data_size`, `first` is
        // clamped to the end of it, the remainder starts at the beginning), and `out` is our own buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.add(self.data_offset + off),
                out.as_mut_ptr(),
                first,
            );
            std::ptr::copy_nonoverlapping(
                self.base.add(self.data_offset),
                out.as_mut_ptr().add(first),
                out.len() - first,
            );
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in `Ring::map`; nothing borrows it any more.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.map_len);
        }
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes.
pub fn poll_fds(fds: &[i32], timeout_ms: i32) -> io::Result<()> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is a valid array of pollfd of the length we pass.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// CLOCK_MONOTONIC and CLOCK_REALTIME now, in ns (to map perf times, taken on CLOCK_MONOTONIC, to UTC).
pub fn clocks_now() -> (u64, u64) {
    let mut m = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut r = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to each valid pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut m);
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut r);
    }
    let ns = |t: libc::timespec| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
    (ns(m), ns(r))
}

/// Number of configured CPUs (perf wants a ring on each possible CPU that may run the target).
pub fn online_cpus() -> Vec<i32> {
    if let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        let mut v = Vec::new();
        for part in s.trim().split(',') {
            if let Some((a, b)) = part.split_once('-') {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    v.extend(a..=b);
                }
            } else if let Ok(a) = part.parse() {
                v.push(a);
            }
        }
        if !v.is_empty() {
            return v;
        }
    }
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (0..n as i32).collect()
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (each probe costs one fd per thread and CPU).
pub fn raise_fd_limit() {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read/write one rlimit struct through valid pointers.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

/// ptrace requests used by the spawn-suspended helper.
pub fn ptrace_traceme() -> io::Result<()> {
    // SAFETY: PTRACE_TRACEME takes no pointers; called in the child between fork and exec.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_TRACEME,
            0,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for `pid` to stop (after exec under PTRACE_TRACEME). Returns Err if it exited instead.
pub fn wait_stopped(pid: i32) -> io::Result<()> {
    let mut status = 0;
    // SAFETY: waitpid writes the status through a valid pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if libc::WIFSTOPPED(status) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "child {pid} did not stop after exec (wait status {status:#x})"
        )))
    }
}

/// Detaches from a ptrace-stopped child and lets it run (no signal delivered).
pub fn ptrace_detach(pid: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH with data 0 (no signal); no pointers are dereferenced.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads `len` bytes of another process's memory (used for posix_memalign's out-pointer when it is
/// not in the copied stack).
pub fn read_process_memory(pid: i32, addr: u64, out: &mut [u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut libc::c_void,
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` describes our own writable buffer; the kernel checks the remote range.
    let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r as usize != out.len() {
        return Err(io::Error::other("short read"));
    }
    Ok(())
}
