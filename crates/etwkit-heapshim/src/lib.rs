//! `libetwkit_heapshim.so`: the allocator shim of `etwkit heap` spawn mode (the heaptrack way, made
//! cheap). Preloaded into the traced program, it interposes malloc, calloc, realloc, reallocarray,
//! posix_memalign, aligned_alloc, memalign, valloc, pvalloc and free, forwards each to glibc's
//! `__libc_*` entry point, and records the operation in a per-thread buffer: binary records with a
//! TSC timestamp, plus the allocation stack unwound **in process** with DWARF CFI (framehop over the
//! loaded modules' `.eh_frame`, rules cached), interned by hash so each distinct stack is sent once
//! per thread. Full buffers go as one datagram to a SOCK_SEQPACKET socket the tracer reads (blocking
//! when the tracer lags: nothing is dropped). Thread exit, fork and process exit flush.
//!
//! Environment (set by the tracer): `ETWKIT_HEAP_FD` = the socket fd, `ETWKIT_HEAP_STACKS` = bit mask
//! of stacked events (1 alloc, 2 realloc, 4 free). Without `ETWKIT_HEAP_FD` the shim only forwards.
//!
//! Wire format (little endian; the reader is `etwkit::live::linux::heap::shim`): a datagram is
//! `u32 magic "HSPH", u32 pid, u32 tid, u32 length` then records, each starting with
//! `u8 type, u8 api, u16 count, u32 0`: 1 ALLOC {tsc, address, size, stack}, 2 REALLOC {tsc, old,
//! new, size, stack}, 3 FREE {tsc, address}, 4 STACK {hash, count × address}, 5 CLOCK {tsc,
//! CLOCK_MONOTONIC ns}, 6 MODULE {start, end, file offset, path bytes}, 7 TRANSIENT {stack, count,
//! bytes}, 8 MARK {tsc}.
//!
//! A flusher thread sends, every 20 ms, every thread's unsent records followed by a MARK: the
//! process has sent every record stamped before the MARK's tsc, so the reader can put records of
//! all threads in time order without holding the whole trace. The last MARK (tsc `u64::MAX`) goes
//! at process exit. With `ETWKIT_HEAP_FULL=1` every operation is sent (nothing paired in process)
//! and the reader delivers them all in that order; otherwise allocations are kept back in process
//! (`kept`) and only the frees need the order: a free must meet the allocation it frees, not one of
//! an earlier life of its address whose own free is still in another thread's buffer.
#![allow(clippy::missing_safety_doc)]

use std::cell::{Cell, UnsafeCell};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

mod attach;
mod kept;

use kept::*;

extern "C" {
    fn __libc_malloc(size: usize) -> *mut libc::c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut libc::c_void;
    fn __libc_realloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void;
    fn __libc_free(p: *mut libc::c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut libc::c_void;
    fn __libc_valloc(size: usize) -> *mut libc::c_void;
    fn __libc_pvalloc(size: usize) -> *mut libc::c_void;
    /// Where the main thread's stack starts (glibc records it at process start; it is what
    /// pthread_getattr_np starts from for the main thread).
    static __libc_stack_end: *mut libc::c_void;
}

/// The allocator the hooks forward to, by `R_*` index: 0 means glibc's `__libc_*` entry point (the
/// preloaded shim's own exported names would recurse); when attached to a running process, what
/// that process's own lookup of each name gives (set before any hook is installed), so a program
/// keeps the allocator it started with.
static REAL: [AtomicUsize; 7] = [const { AtomicUsize::new(0) }; 7];
const R_MALLOC: usize = 0;
const R_CALLOC: usize = 1;
const R_REALLOC: usize = 2;
const R_FREE: usize = 3;
const R_MEMALIGN: usize = 4;
const R_VALLOC: usize = 5;
const R_PVALLOC: usize = 6;

macro_rules! real {
    ($idx:expr, $libc:ident, $ty:ty) => {{
        let f = REAL[$idx].load(Ordering::Relaxed);
        if f == 0 {
            $libc as $ty
        } else {
            // SAFETY: set from the process's symbol of this very function (same signature).
            std::mem::transmute::<usize, $ty>(f)
        }
    }};
}
type FnAlloc = unsafe extern "C" fn(usize) -> *mut libc::c_void;
type FnCalloc = unsafe extern "C" fn(usize, usize) -> *mut libc::c_void;
type FnRealloc = unsafe extern "C" fn(*mut libc::c_void, usize) -> *mut libc::c_void;
type FnFree = unsafe extern "C" fn(*mut libc::c_void);
type FnMemalign = unsafe extern "C" fn(usize, usize) -> *mut libc::c_void;

const MAGIC: u32 = u32::from_le_bytes(*b"HSPH");
const T_ALLOC: u8 = 1;
const T_REALLOC: u8 = 2;
const T_FREE: u8 = 3;
const T_STACK: u8 = 4;
const T_CLOCK: u8 = 5;
const T_MODULE: u8 = 6;
const T_TRANSIENT: u8 = 7;
const T_MARK: u8 = 8;

/// API codes (index into the reader's name table).
const API_MALLOC: u8 = 0;
const API_CALLOC: u8 = 1;
const API_REALLOC: u8 = 2;
const API_REALLOCARRAY: u8 = 3;
const API_POSIX_MEMALIGN: u8 = 4;
const API_MEMALIGN: u8 = 5;
const API_ALIGNED_ALLOC: u8 = 6;
const API_VALLOC: u8 = 7;
const API_PVALLOC: u8 = 8;

const BUF_SIZE: usize = 60 * 1024;
const MAX_FRAMES: usize = 64;
const SENT_SLOTS: usize = 4096;

static STATE: AtomicU32 = AtomicU32::new(0); // 0 uninit, 1 initializing, 2 on, 3 off
static FD: AtomicI32 = AtomicI32::new(-1);
static STACK_MASK: AtomicU32 = AtomicU32::new(0);
static PID: AtomicU32 = AtomicU32::new(0);
static FINISHED: AtomicBool = AtomicBool::new(false);
/// `ETWKIT_HEAP_FULL=1`: send every operation (no local pairing), e.g. to write them all to ETL.
static FULL: AtomicBool = AtomicBool::new(false);

const AGG_SLOTS: usize = 256;
#[derive(Clone, Copy, Default)]
struct Agg {
    stack: u64,
    api: u8,
    count: u64,
    bytes: u64,
}
static SEND_LOCK: Mutex<()> = Mutex::new(());

/// Per-thread record buffer. Registered globally so exit can flush every thread's records.
struct ThreadBuf {
    data: UnsafeCell<[u8; BUF_SIZE]>,
    /// Bytes written by the owner (published after each record).
    committed: AtomicUsize,
    /// Bytes already sent.
    flushed: AtomicUsize,
    /// Whoever sends holds this (owner or the exit flush).
    busy: AtomicBool,
    tid: u32,
    sent: UnsafeCell<[u64; SENT_SLOTS]>,
    cache: UnsafeCell<Option<CacheX86_64>>,
    pend: UnsafeCell<[Pend; PEND_SLOTS]>,
    /// The newest kept-back allocation, outside `pend` (addr 0 when none): a block freed right after
    /// its allocation, the common case, then costs no hash-table insert and probe.
    last: UnsafeCell<Pend>,
    /// Live entries + tombstones in `pend`.
    pend_used: Cell<usize>,
    pend_live: Cell<usize>,
    oldest_check: Cell<u64>,
    /// Coarse per-thread clock for kept-back allocations: the TSC read every `COARSE_EVERY`
    /// allocations (one read per allocation was the largest cost of a malloc/free pair).
    coarse: Cell<u64>,
    coarse_left: Cell<u32>,
    agg: UnsafeCell<[Agg; AGG_SLOTS]>,
    /// Stack-cache entries (see `stack_id`) and the one hit last.
    scache: UnsafeCell<[SCache; SCACHE_SLOTS]>,
    /// Recursion guard: set while this thread is inside a hook.
    in_hook: AtomicBool,
    /// Offsets from `stack_id`'s sp of the first user return address, one per hook path seen.
    first_rel: UnsafeCell<[u64; 8]>,
    stack_hi: Cell<u64>,
    /// The stack-cache slot that matched last: tried first (a loop allocates from the same place).
    last_sc: Cell<usize>,
    /// The TRANSIENT counter used last (see `agg_add`).
    last_agg: Cell<usize>,
}

const MAX_THREADS: usize = 4096;
static THREADS: [std::sync::atomic::AtomicPtr<ThreadBuf>; MAX_THREADS] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static BUF: Cell<*mut ThreadBuf> = const { Cell::new(std::ptr::null_mut()) };
}

/// Module memory as framehop section data.
#[derive(Clone, Copy)]
struct Mem(&'static [u8]);
impl Deref for Mem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0
    }
}

struct Modules {
    unwinder: UnwinderX86_64<Mem>,
    /// (start, end) of every added executable range.
    ranges: Vec<(u64, u64)>,
    /// The shim's own code (frames skipped).
    own: (u64, u64),
    /// Modules found but not yet announced to the reader: (start, end, file offset, path).
    pending: Vec<(u64, u64, u64, Vec<u8>)>,
}

static MODULES: RwLock<Option<Modules>> = RwLock::new(None);

#[inline(always)]
fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64 (constant, non-stop TSC on current CPUs).
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn mono_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

unsafe fn init() {
    if STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let fd = std::env::var_os("ETWKIT_HEAP_FD").and_then(|v| v.to_str()?.parse::<i32>().ok());
    let mask = std::env::var_os("ETWKIT_HEAP_STACKS")
        .and_then(|v| v.to_str()?.parse::<u32>().ok())
        .unwrap_or(1);
    match fd {
        Some(fd) if fd >= 0 => {
            FD.store(fd, Ordering::Relaxed);
            STACK_MASK.store(mask, Ordering::Relaxed);
            FULL.store(
                std::env::var_os("ETWKIT_HEAP_FULL").is_some_and(|v| v == "1"),
                Ordering::Relaxed,
            );
            PID.store(libc::getpid() as u32, Ordering::Relaxed);
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(at_exit);
            STATE.store(2, Ordering::Release);
            // Both modes: the reader pairs frees in time order up to the marks.
            start_flusher();
        }
        _ => STATE.store(3, Ordering::Release),
    }
}

extern "C" fn after_fork_child() {
    // The parent's threads are gone; the forking thread keeps its thread pointer but gets a buffer
    // of its own.
    for k in TP_KEY.iter() {
        k.store(0, Ordering::Relaxed);
    }
    if attach::after_fork_child() {
        // Attached and not following children: this child runs untraced.
        return;
    }
    // The child keeps tracing into the same socket under its own pid; records the parent had not
    // sent yet stay the parent's (drop the copies).
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    for slot in THREADS.iter() {
        let p = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let _ = p;
    }
    BUF.with(|b| b.set(std::ptr::null_mut()));
    if STATE.load(Ordering::Acquire) == 2 && !attach::attached() {
        // SAFETY: fork has re-initialized the allocator and thread machinery in this child.
        unsafe { start_flusher() };
    }
}

/// Runs when the shim is loaded (after libc's own constructors): turns tracing on before the
/// program's first allocation of its own, and starts the flusher.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = on_load;
extern "C" fn on_load() {
    // SAFETY: init only reads the environment and registers handlers.
    unsafe { init() };
}

/// Every 20 ms, sends what every thread recorded and a MARK (see the crate docs): in full mode the
/// reader releases operations in time order up to it, otherwise it pairs frees in time order.
unsafe fn start_flusher() {
    extern "C" fn run(_: *mut libc::c_void) -> *mut libc::c_void {
        // This thread never allocates through the hooks it flushes for, and what glibc frees for
        // it when it ends (its TLS) is not the program's: it is never traced.
        let _ = IN_HOOK.try_with(|h| h.set(true));
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 20_000_000,
        };
        loop {
            // SAFETY: nanosleep reads one timespec.
            unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
            if FINISHED.load(Ordering::Acquire) || STATE.load(Ordering::Acquire) != 2 {
                return std::ptr::null_mut();
            }
            // SAFETY: registered buffers are never freed.
            unsafe { flush_marked() };
        }
    }
    let mut t: libc::pthread_t = 0;
    let mut attr: libc::pthread_attr_t = std::mem::zeroed();
    libc::pthread_attr_init(&mut attr);
    libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
    libc::pthread_attr_setstacksize(&mut attr, 64 * 1024);
    // What glibc allocates for the new thread (its TLS vector) is the shim's, not the program's:
    // made inside a hook, it is not traced.
    let mut create = || libc::pthread_create(&mut t, &attr, run, std::ptr::null_mut());
    if guarded(|_| create()).is_none() {
        create();
    }
    libc::pthread_attr_destroy(&mut attr);
}

/// ~1 ms of TSC ticks: a record stamped this little before a thread's hook flag became visible
/// still goes out before the MARK that covers it.
const MARK_MARGIN: u64 = 4_000_000;

/// Sends every thread's unsent records, then a MARK: no record stamped before it is still unsent.
/// A thread inside a hook (it may have read the TSC but not stored its record yet) is waited for.
unsafe fn flush_marked() {
    let t0 = tsc();
    for slot in THREADS.iter() {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        let b = &*p;
        while b.in_hook.load(Ordering::Acquire) {
            libc::sched_yield();
        }
        flush(b, false);
    }
    send_mark(t0.saturating_sub(MARK_MARGIN));
}

unsafe fn send_mark(t: u64) {
    let rec = [hdr(T_MARK, 0, 0), t];
    let bytes = std::slice::from_raw_parts(rec.as_ptr() as *const u8, 16);
    send(0, bytes);
}

extern "C" fn at_exit() {
    flush_all();
}

/// Runs after every atexit handler (ELF destructor): anything recorded later is sent at once.
#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = fini;
extern "C" fn fini() {
    flush_all();
    FINISHED.store(true, Ordering::Release);
    if STATE.load(Ordering::Acquire) == 2 {
        // Everything of this process is sent: the reader may release all it holds of it.
        // SAFETY: send only writes to the socket.
        unsafe { send_mark(u64::MAX) };
    }
}

fn flush_all() {
    for slot in THREADS.iter() {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: registered buffers are never freed (threads' buffers are leaked on purpose).
            // At exit other threads are normally idle; a thread still allocating while the process
            // exits could race with this spill (documented limitation).
            unsafe {
                spill(&*p, 0);
                flush(&*p, false);
            }
        }
    }
}

/// Forgets what `b` holds for a tracer that is gone (attach mode, before a new tracer's session
/// starts): records not sent, allocations kept back, pairs counted. A tracer killed mid-session
/// leaves them behind, and the frees done while nothing traced were not seen: sent to the next
/// tracer, a stale allocation would be reported as live, or as allocated twice.
///
/// # Safety
/// No thread may be recording (`STATE` is not 2), and `b` must be a registered buffer.
pub(crate) unsafe fn forget_previous_session(b: &ThreadBuf) {
    while b.busy.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    b.flushed
        .store(b.committed.load(Ordering::Acquire), Ordering::Relaxed);
    b.busy.store(false, Ordering::Release);
    (*b.last.get()).addr = 0;
    for e in (*b.pend.get()).iter_mut() {
        e.addr = 0;
    }
    b.pend_used.set(0);
    b.pend_live.set(0);
    for a in (*b.agg.get()).iter_mut() {
        a.count = 0;
        a.bytes = 0;
    }
}

/// Sends the unsent records of `b`. The owner resets the buffer (`reset`); the exit flush does not.
unsafe fn flush(b: &ThreadBuf, reset: bool) {
    while b.busy.swap(true, Ordering::Acquire) {
        std::hint::spin_loop();
    }
    let end = b.committed.load(Ordering::Acquire);
    let start = b.flushed.load(Ordering::Relaxed);
    if end > start {
        let all: &[u8; BUF_SIZE] = &*b.data.get();
        let data = &all[start..end];
        send(b.tid, data);
    }
    if reset {
        b.committed.store(0, Ordering::Release);
        b.flushed.store(0, Ordering::Relaxed);
    } else {
        b.flushed.store(end, Ordering::Relaxed);
    }
    b.busy.store(false, Ordering::Release);
}

unsafe fn send(tid: u32, data: &[u8]) {
    let hdr: [u32; 4] = [MAGIC, PID.load(Ordering::Relaxed), tid, data.len() as u32];
    let iov = [
        libc::iovec {
            iov_base: hdr.as_ptr() as *mut libc::c_void,
            iov_len: 16,
        },
        libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        },
    ];
    let _g = SEND_LOCK.lock();
    // Read under the lock: detaching closes the socket under it.
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 {
        return;
    }
    let msg = libc::msghdr {
        msg_name: std::ptr::null_mut(),
        msg_namelen: 0,
        msg_iov: iov.as_ptr() as *mut libc::iovec,
        msg_iovlen: 2,
        msg_control: std::ptr::null_mut(),
        msg_controllen: 0,
        msg_flags: 0,
    };
    loop {
        // MSG_NOSIGNAL: a tracer that went away must not kill the program with SIGPIPE.
        let r = libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL);
        if r >= 0 {
            break;
        }
        let e = *libc::__errno_location();
        if e != libc::EINTR {
            if e == libc::EPIPE || e == libc::ECONNRESET {
                // The tracer is gone: stop recording (attached: the control thread also undoes
                // the interposition when it notices).
                attach::peer_gone();
            }
            break;
        }
    }
}

/// This thread's buffer, created (and registered) on first use.
unsafe fn thread_buf() -> Option<&'static ThreadBuf> {
    let p = BUF.with(|b| b.get());
    if !p.is_null() {
        return Some(&*p);
    }
    let mem = __libc_malloc(std::mem::size_of::<ThreadBuf>()) as *mut ThreadBuf;
    if mem.is_null() {
        return None;
    }
    std::ptr::write_bytes(mem as *mut u8, 0, std::mem::size_of::<ThreadBuf>());
    std::ptr::addr_of_mut!((*mem).tid).write(gettid());
    std::ptr::addr_of_mut!((*mem).cache).write(UnsafeCell::new(None));
    let slot = THREADS.iter().find(|s| {
        s.compare_exchange(
            std::ptr::null_mut(),
            mem,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    });
    if slot.is_none() {
        // Registry full: this thread's records go out on every flush of its own only.
    }
    BUF.with(|b| b.set(mem));
    learn_tls_offset();
    // Flush this thread's records when it exits.
    static KEY: std::sync::OnceLock<libc::pthread_key_t> = std::sync::OnceLock::new();
    let key = *KEY.get_or_init(|| {
        let mut k: libc::pthread_key_t = 0;
        libc::pthread_key_create(&mut k, Some(thread_exit));
        k
    });
    libc::pthread_setspecific(key, mem as *const libc::c_void);
    let b = &*mem;
    b.oldest_check.set(tsc());
    push_raw(b, &clock_record());
    Some(b)
}

/// Thread pointer → buffer, for when the shim's TLS is dynamic (dlopened): one multiply and one
/// compare instead of a `__tls_get_addr` call. A slot holds one thread (a colliding thread uses
/// the TLS path); a thread's slot is cleared when it exits (its thread pointer may be reused).
const TP_SLOTS: usize = 8192;
static TP_KEY: [std::sync::atomic::AtomicU64; TP_SLOTS] =
    [const { std::sync::atomic::AtomicU64::new(0) }; TP_SLOTS];
static TP_VAL: [std::sync::atomic::AtomicPtr<ThreadBuf>; TP_SLOTS] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; TP_SLOTS];

#[inline(always)]
fn tp_slot(tp: u64) -> usize {
    ((tp >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) as usize % TP_SLOTS
}

#[inline(always)]
fn tp_lookup(tp: u64) -> *mut ThreadBuf {
    let i = tp_slot(tp);
    if TP_KEY[i].load(Ordering::Acquire) == tp {
        TP_VAL[i].load(Ordering::Relaxed)
    } else {
        std::ptr::null_mut()
    }
}

/// Claims the slot (0 → 1, a value no thread pointer has), writes the buffer, then publishes the key.
fn tp_insert(tp: u64, b: *mut ThreadBuf) {
    let i = tp_slot(tp);
    if TP_KEY[i]
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        TP_VAL[i].store(b, Ordering::Relaxed);
        TP_KEY[i].store(tp, Ordering::Release);
    }
}

fn tp_remove() {
    let tp: u64;
    // SAFETY: reads the thread pointer (fs:0 holds it on x86-64 Linux).
    unsafe {
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    let i = tp_slot(tp);
    if TP_KEY[i]
        .compare_exchange(tp, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        TP_VAL[i].store(std::ptr::null_mut(), Ordering::Relaxed);
        TP_KEY[i].store(0, Ordering::Release);
    }
}

const TLS_UNKNOWN: i64 = i64::MIN;
const TLS_OFF_DISABLED: i64 = i64::MIN + 1;
/// Offset of this thread's `BUF` slot from the thread pointer (same for every thread when the shim
/// is in the static TLS block), or a marker.
static TLS_OFF: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(TLS_UNKNOWN);

unsafe fn learn_tls_offset() {
    let tp: u64;
    core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    let slot = BUF.with(|b| b as *const Cell<*mut ThreadBuf> as i64);
    let off = slot - tp as i64;
    match TLS_OFF.compare_exchange(TLS_UNKNOWN, off, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(cur) if cur == off || cur == TLS_OFF_DISABLED => {}
        // Not at a fixed offset (dlopened, dynamic TLS): always use the TLS accessor.
        Err(_) => TLS_OFF.store(TLS_OFF_DISABLED, Ordering::Release),
    }
}

unsafe extern "C" fn thread_exit(p: *mut libc::c_void) {
    if !p.is_null() {
        let b = &*(p as *const ThreadBuf);
        spill(b, 0);
        flush(b, false);
        tp_remove();
    }
}

/// Counts a cancelled alloc/free pair under its stack.
///
/// Takes the fields, not the entry: copying a `Pend` (padding included) right after `pend_take`
/// wrote it made the loads wait on partial stores (a store-forwarding stall that was the largest
/// single cost of a malloc/free pair).
#[inline(always)]
unsafe fn agg_add(b: &ThreadBuf, stack: u64, api: u8, size: u64) {
    let last = &mut (*b.agg.get())[b.last_agg.get()];
    if last.count > 0 && last.stack == stack && last.api == api {
        last.count += 1;
        last.bytes += size;
        return;
    }
    agg_add_slow(b, stack, api, size)
}

#[inline(never)]
unsafe fn agg_add_slow(b: &ThreadBuf, stack: u64, api: u8, size: u64) {
    let t = &mut *b.agg.get();
    let i = ((stack ^ api as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % AGG_SLOTS;
    b.last_agg.set(i);
    let slot = &mut t[i];
    if slot.count > 0 && (slot.stack != stack || slot.api != api) {
        let old = *slot;
        // The slot starts afresh: its bytes were sent with its count.
        slot.count = 0;
        slot.bytes = 0;
        push(
            b,
            &[
                hdr(T_TRANSIENT, old.api, 0),
                old.stack,
                old.count,
                old.bytes,
            ],
        );
    }
    let slot = &mut t[i];
    slot.stack = stack;
    slot.api = api;
    slot.count += 1;
    slot.bytes += size;
}

/// Sends kept-back allocations (those older than `min_age` TSC ticks; 0 = all) and the pair counts.
unsafe fn spill(b: &ThreadBuf, min_age: u64) {
    let now = tsc();
    let all = min_age == 0;
    let last = &mut *b.last.get();
    if last.addr > 1 && (all || now.wrapping_sub(last.tsc) >= min_age) {
        let r = [
            hdr(T_ALLOC, last.api, 0),
            last.tsc,
            last.addr,
            last.size,
            last.stack,
        ];
        last.addr = 0;
        push_raw(b, &r);
    }
    let t = &mut *b.pend.get();
    let mut live = 0;
    for e in t.iter_mut() {
        if e.addr > 1 {
            if all || now.wrapping_sub(e.tsc) >= min_age {
                let r = [hdr(T_ALLOC, e.api, 0), e.tsc, e.addr, e.size, e.stack];
                e.addr = 1;
                push_raw(b, &r);
            } else {
                live += 1;
            }
        }
    }
    if live == 0 {
        for e in t.iter_mut() {
            e.addr = 0;
        }
        b.pend_used.set(0);
    }
    b.pend_live.set(live);
    if all {
        for a in (*b.agg.get()).iter_mut() {
            if a.count > 0 {
                let r = [hdr(T_TRANSIENT, a.api, 0), a.stack, a.count, a.bytes];
                a.count = 0;
                a.bytes = 0;
                push_raw(b, &r);
            }
        }
    }
}

fn clock_record() -> [u64; 3] {
    [T_CLOCK as u64, tsc(), mono_ns()]
}

/// Appends one record; every ~50 ms of TSC also sends kept-back allocations older than that.
#[inline]
unsafe fn push(b: &ThreadBuf, words: &[u64]) {
    push_raw(b, words);
    let now = tsc();
    // Every record sent is stamped before `now`; allocations kept back on any thread are stamped no
    // earlier (see `coarse_tsc`).
    LAST_PUSH_TSC.fetch_max(now, Ordering::Relaxed);
    if now.wrapping_sub(b.oldest_check.get()) > SPILL_TICKS {
        b.oldest_check.set(now);
        spill(b, SPILL_TICKS);
    }
}

/// ~50 ms at 2-4 GHz TSC.
const SPILL_TICKS: u64 = 150_000_000;

/// Appends one record (given as u64 words) to the buffer, flushing first when it would not fit.
#[inline]
unsafe fn push_raw(b: &ThreadBuf, words: &[u64]) {
    let len = words.len() * 8;
    let mut at = b.committed.load(Ordering::Relaxed);
    if at + len > BUF_SIZE {
        flush(b, true);
        // Re-anchor time for the reader after every flush.
        let c = clock_record();
        std::ptr::copy_nonoverlapping(c.as_ptr() as *const u8, (*b.data.get()).as_mut_ptr(), 24);
        at = 24;
        b.committed.store(at, Ordering::Release);
    }
    std::ptr::copy_nonoverlapping(
        words.as_ptr() as *const u8,
        (*b.data.get()).as_mut_ptr().add(at),
        len,
    );
    b.committed.store(at + len, Ordering::Release);
    if FINISHED.load(Ordering::Relaxed) {
        flush(b, true);
    }
}

fn hdr(t: u8, api: u8, count: u16) -> u64 {
    t as u64 | (api as u64) << 8 | (count as u64) << 16
}

// ---- stacks ----

unsafe fn load_modules(m: &mut Modules) {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> i32 {
        let m = &mut *(data as *mut Modules);
        let info = &*info;
        let base = info.dlpi_addr;
        let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let mut text: Option<(u64, u64)> = None;
        let mut text_off = 0u64;
        let mut eh_hdr: Option<(u64, u64)> = None;
        let mut loads: Vec<(u64, u64)> = Vec::new();
        for ph in phdrs {
            let start = base + ph.p_vaddr;
            let end = start + ph.p_memsz;
            if ph.p_type == libc::PT_LOAD {
                loads.push((start, end));
                if ph.p_flags & libc::PF_X != 0 {
                    text = Some((start, end));
                    text_off = ph.p_offset;
                }
            } else if ph.p_type == libc::PT_GNU_EH_FRAME {
                eh_hdr = Some((start, end));
            }
        }
        let (Some(text), Some(eh_hdr)) = (text, eh_hdr) else {
            return 0;
        };
        if m.ranges.contains(&text) {
            return 0;
        }
        // .eh_frame: eh_frame_hdr's eh_frame_ptr (encoding byte at +1; pcrel sdata4 is what linkers emit).
        let hdr_bytes =
            std::slice::from_raw_parts(eh_hdr.0 as *const u8, (eh_hdr.1 - eh_hdr.0) as usize);
        if hdr_bytes.len() < 8 || hdr_bytes[0] != 1 || hdr_bytes[1] != 0x1b {
            return 0;
        }
        let rel =
            i32::from_le_bytes([hdr_bytes[4], hdr_bytes[5], hdr_bytes[6], hdr_bytes[7]]) as i64;
        let eh_frame = (eh_hdr.0 as i64 + 4 + rel) as u64;
        let Some(seg) = loads.iter().find(|(s, e)| eh_frame >= *s && eh_frame < *e) else {
            return 0;
        };
        let mem =
            |a: u64, b: u64| Mem(std::slice::from_raw_parts(a as *const u8, (b - a) as usize));
        // Stated addresses (svma) are relative to the load bias `base` (framehop looks up u32
        // offsets from the module base).
        let sv = |a: u64| a - base;
        let sections = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(sv(text.0)..sv(text.1)),
            text: Some(mem(text.0, text.1)),
            stubs_svma: None,
            stub_helper_svma: None,
            got_svma: None,
            unwind_info: None,
            eh_frame_svma: Some(sv(eh_frame)..sv(seg.1)),
            eh_frame: Some(mem(eh_frame, seg.1)),
            eh_frame_hdr_svma: Some(sv(eh_hdr.0)..sv(eh_hdr.1)),
            eh_frame_hdr: Some(mem(eh_hdr.0, eh_hdr.1)),
            debug_frame: None,
            text_segment_svma: None,
            text_segment: None,
        };
        m.unwinder
            .add_module(Module::new(String::new(), text.0..text.1, base, sections));
        m.ranges.push(text);
        let name = std::ffi::CStr::from_ptr(info.dlpi_name).to_bytes();
        let path = if name.is_empty() {
            std::fs::read_link("/proc/self/exe")
                .map(|p| p.into_os_string().into_encoded_bytes())
                .unwrap_or_default()
        } else {
            name.to_vec()
        };
        if path.first() == Some(&b'/') {
            m.pending.push((text.0, text.1, text_off, path));
        }
        let own = capture_stack as *const () as usize as u64;
        if own >= text.0 && own < text.1 {
            m.own = text;
        }
        0
    }
    libc::dl_iterate_phdr(Some(cb), m as *mut Modules as *mut libc::c_void);
}

static RESCANS: AtomicU32 = AtomicU32::new(0);

/// The stack of this thread: [lo, hi) (hi found once per thread).
///
/// Not from pthread_getattr_np: glibc allocates inside it while it holds the thread's lock (for
/// the main thread it reads /proc/self/maps with fopen, for the others it sizes a CPU set with
/// realloc). A thread that asks it about itself (Rust's runtime does, for every thread it starts
/// and for the main thread before `main`) is inside that lock when the allocation reaches these
/// hooks, and asking it again from here would wait for the lock for ever. The main thread's top
/// is glibc's record of it, rounded up to its page; another thread's is the end of the mapping
/// that holds its stack, read from /proc/self/maps with plain system calls.
unsafe fn stack_hi(b: &ThreadBuf) -> u64 {
    let hi = b.stack_hi.get();
    if hi != 0 {
        return hi;
    }
    let hi = if libc::gettid() == libc::getpid() {
        // SAFETY: glibc sets the variable before any code of the program runs and never moves it.
        (__libc_stack_end as u64 | 0xfff) + 1
    } else {
        let here = 0u8;
        mapping_end(std::ptr::addr_of!(here) as u64).unwrap_or(u64::MAX)
    };
    b.stack_hi.set(hi);
    hi
}

/// The end of the mapping of this process that holds `addr`, from /proc/self/maps read with
/// open/read into buffers on the stack (no allocation: this runs inside the allocator's hooks).
unsafe fn mapping_end(addr: u64) -> Option<u64> {
    let fd = libc::open(
        c"/proc/self/maps".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 4096];
    // The start of the line being read: "start-end " is all that is needed.
    let mut head = [0u8; 40];
    let mut len = 0;
    let mut found = None;
    'read: loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n <= 0 {
            break;
        }
        for &c in &buf[..n as usize] {
            if c != b'\n' {
                if len < head.len() {
                    head[len] = c;
                    len += 1;
                }
                continue;
            }
            if let Some((lo, hi)) = maps_range(&head[..len]) {
                if lo <= addr && addr < hi {
                    found = Some(hi);
                    break 'read;
                }
            }
            len = 0;
        }
    }
    libc::close(fd);
    found
}

/// The address range at the start of a /proc/self/maps line (`7f01c000-7f01e000 rw-p ...`).
fn maps_range(line: &[u8]) -> Option<(u64, u64)> {
    let hex = |s: &[u8]| -> Option<u64> {
        if s.is_empty() || s.len() > 16 {
            return None;
        }
        s.iter().try_fold(0u64, |v, &c| {
            Some(v << 4 | (c as char).to_digit(16)? as u64)
        })
    };
    let dash = line.iter().position(|&c| c == b'-')?;
    let end = line.iter().position(|&c| c == b' ').unwrap_or(line.len());
    Some((hex(&line[..dash])?, hex(line.get(dash + 1..end)?)?))
}

/// Unwinds the current thread's stack into `out` (the shim's own frames skipped) and the offsets
/// (from this function's sp) of the slots holding each return address; returns the count.
#[inline(never)]
unsafe fn capture_stack(
    b: &ThreadBuf,
    out: &mut [u64; MAX_FRAMES],
    slots: &mut [u32; MAX_FRAMES],
    sp_out: &mut u64,
) -> usize {
    let (ip, sp, bp): (u64, u64, u64);
    core::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp);
    *sp_out = sp;
    let hi = stack_hi(b);
    {
        let known = MODULES.read().map(|m| m.is_some()).unwrap_or(false);
        if !known {
            let mut w = match MODULES.write() {
                Ok(w) => w,
                Err(_) => return 0,
            };
            if w.is_none() {
                let mut m = Modules {
                    unwinder: UnwinderX86_64::new(),
                    ranges: Vec::new(),
                    own: (0, 0),
                    pending: Vec::new(),
                };
                load_modules(&mut m);
                *w = Some(m);
            }
        }
    }
    announce_modules(b);
    let cache = &mut *b.cache.get();
    let cache = cache.get_or_insert_with(CacheX86_64::new);
    let mut n = 0;
    let mut missed = false;
    {
        let guard = match MODULES.read() {
            Ok(g) => g,
            Err(_) => return 0,
        };
        let Some(m) = guard.as_ref() else { return 0 };
        let mut read = |addr: u64| -> Result<u64, ()> {
            // Only this thread's live stack (between sp and its top) is read.
            if addr < sp || addr % 8 != 0 || addr + 8 > hi {
                return Err(());
            }
            Ok(std::ptr::read(addr as *const u64))
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut addr = framehop::FrameAddress::from_instruction_pointer(ip);
        while n < MAX_FRAMES {
            match m.unwinder.unwind_frame(addr, &mut regs, cache, &mut read) {
                Ok(Some(ra)) => {
                    // x86-64: the return address sits just below the caller's stack pointer.
                    let slot = regs.sp().wrapping_sub(8);
                    let Some(next) = framehop::FrameAddress::from_return_address(ra) else {
                        break;
                    };
                    addr = next;
                    if ra >= m.own.0 && ra < m.own.1 {
                        continue;
                    }
                    let off = slot.wrapping_sub(sp);
                    if off >= u32::MAX as u64 {
                        break;
                    }
                    out[n] = ra;
                    slots[n] = off as u32;
                    n += 1;
                }
                Ok(None) => break,
                Err(_) => {
                    missed = n > 0
                        && !m
                            .ranges
                            .iter()
                            .any(|(s, e)| out[n - 1] >= *s && out[n - 1] < *e);
                    break;
                }
            }
        }
    }
    if missed && RESCANS.fetch_add(1, Ordering::Relaxed) < 64 {
        // A library loaded after the scan (dlopen): add it.
        if let Ok(mut w) = MODULES.write() {
            if let Some(m) = w.as_mut() {
                load_modules(m);
            }
        }
        announce_modules(b);
    }
    n
}

/// Sends MODULE records (start, end, file offset, path) for modules not announced yet, so the reader
/// can symbolize after the process is gone.
unsafe fn announce_modules(b: &ThreadBuf) {
    let pending = match MODULES.write() {
        Ok(mut w) => match w.as_mut() {
            Some(m) if !m.pending.is_empty() => std::mem::take(&mut m.pending),
            _ => return,
        },
        Err(_) => return,
    };
    for (start, end, off, path) in pending {
        let mut rec = vec![hdr(T_MODULE, 0, path.len() as u16), start, end, off];
        for chunk in path.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            rec.push(u64::from_le_bytes(w));
        }
        push(b, &rec);
    }
}

/// A cached stack of this thread: the return addresses and where they sat relative to sp.
#[derive(Clone, Copy)]
struct SCache {
    hash: u64,
    sp_delta: u64,
    n: u32,
    offs: [u32; SC_FRAMES],
    addrs: [u64; SC_FRAMES],
}
const SCACHE_SLOTS: usize = 256;
const SC_FRAMES: usize = 24;

#[inline]
fn sc_index(return_address: u64) -> usize {
    (return_address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SCACHE_SLOTS
}

/// Stack record id for the current stack (0 when none), sending the stack the first time.
///
/// Fast path: a per-thread cache keyed by the caller's return address. A hit is verified by reading
/// every cached return-address slot (at the same offsets from the current sp) and comparing: equal
/// slots mean the same call chain, so the DWARF walk is skipped. Any difference: full unwind.
#[inline(always)]
unsafe fn stack_id(b: &ThreadBuf) -> u64 {
    let sp_now: u64;
    core::arch::asm!("mov {sp}, rsp", sp = out(reg) sp_now, options(nomem, nostack, preserves_flags));
    // Inline fast path: the entry that matched last, verified slot by slot.
    let hi = b.stack_hi.get();
    let e = &(*b.scache.get())[b.last_sc.get()];
    if e.n != 0 && hi != 0 {
        let base = sp_now.wrapping_sub(e.sp_delta);
        let mut ok = true;
        for i in 0..e.n as usize {
            let a = base.wrapping_add(e.offs[i] as u64);
            if a < sp_now || a + 8 > hi || std::ptr::read(a as *const u64) != e.addrs[i] {
                ok = false;
                break;
            }
        }
        if ok {
            return e.hash;
        }
    }
    stack_id_slow(b, sp_now)
}

/// [`stack_id`] past its fast path; `sp_now` is the stack pointer there (cache entries are kept
/// relative to it).
#[inline(never)]
unsafe fn stack_id_slow(b: &ThreadBuf, sp_now: u64) -> u64 {
    let hi = stack_hi(b);
    let sc = &mut *b.scache.get();
    // The key: the first user return address, at a fixed offset from this function's sp for a given
    // hook path. Try the slot of the entry last used at this depth class.
    let probe = |e: &SCache| -> bool {
        if e.n == 0 {
            return false;
        }
        // capture_stack's sp = our sp - sp_delta.
        let base = sp_now.wrapping_sub(e.sp_delta);
        for i in 0..e.n as usize {
            let a = base + e.offs[i] as u64;
            if a + 8 > hi || std::ptr::read(a as *const u64) != e.addrs[i] {
                return false;
            }
        }
        true
    };
    let rels = &mut *b.first_rel.get();
    for &rel in rels.iter() {
        if rel == 0 {
            break;
        }
        let a = sp_now.wrapping_add(rel);
        if a < sp_now || a + 8 > hi {
            continue;
        }
        let i = sc_index(std::ptr::read(a as *const u64));
        if probe(&sc[i]) {
            b.last_sc.set(i);
            return sc[i].hash;
        }
    }
    let mut frames = [0u64; MAX_FRAMES];
    let mut slots = [0u32; MAX_FRAMES];
    let mut cap_sp = 0u64;
    let n = capture_stack(b, &mut frames, &mut slots, &mut cap_sp);
    if n == 0 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ n as u64;
    for &f in &frames[..n] {
        h = (h ^ f).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29);
    }
    let h = h | 1;
    // Remember it (only complete walks that fit the cache entry).
    if n <= SC_FRAMES {
        let i = sc_index(frames[0]);
        let rel = cap_sp.wrapping_add(slots[0] as u64).wrapping_sub(sp_now);
        if let Some(r) = rels.iter_mut().find(|r| **r == rel || **r == 0) {
            *r = rel;
        }
        let e = &mut sc[i];
        e.hash = h;
        e.sp_delta = sp_now.wrapping_sub(cap_sp);
        e.n = n as u32;
        e.offs[..n].copy_from_slice(&slots[..n]);
        e.addrs[..n].copy_from_slice(&frames[..n]);
        b.last_sc.set(i);
    }
    let sent = &mut *b.sent.get();
    let slot = (h as usize >> 3) % SENT_SLOTS;
    if sent[slot] != h {
        let mut rec = [0u64; 2 + MAX_FRAMES];
        rec[0] = hdr(T_STACK, 0, n as u16);
        rec[1] = h;
        rec[2..2 + n].copy_from_slice(&frames[..n]);
        push(b, &rec[..2 + n]);
        sent[slot] = h;
    }
    h
}

// ---- the hooks ----

/// Runs `f` with the recursion guard when tracing is on; returns None when this call must not be
/// recorded (tracing off, or called from inside the shim).
#[inline(always)]
unsafe fn guarded<R>(f: impl FnOnce(&ThreadBuf) -> R) -> Option<R> {
    let st = STATE.load(Ordering::Acquire);
    if st != 2 {
        if st == 0 {
            init();
        }
        if STATE.load(Ordering::Acquire) != 2 {
            return None;
        }
    }
    // One TLS access on the fast path. A cdylib's TLS goes through __tls_get_addr; preloaded, the
    // shim sits in the static TLS block at a fixed offset from the thread pointer, so that offset
    // (learned and checked per thread in `thread_buf`) gives a plain load instead.
    // Dlopened (attach mode), the thread pointer keys a table instead (see `tp_lookup`).
    let off = TLS_OFF.load(Ordering::Relaxed);
    let tp: u64;
    core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    let p = if off != TLS_UNKNOWN && off != TLS_OFF_DISABLED {
        *((tp as i64 + off) as *const *mut ThreadBuf)
    } else {
        let p = tp_lookup(tp);
        if p.is_null() {
            let p = BUF.try_with(|b| b.get()).unwrap_or(std::ptr::null_mut());
            if !p.is_null() {
                tp_insert(tp, p);
            }
            p
        } else {
            p
        }
    };
    if !p.is_null() {
        let b = &*p;
        // Plain loads and stores (no locked instruction): the flag guards this thread against
        // itself; detaching only reads it once no thread can enter a hook any more (see attach).
        if b.in_hook.load(Ordering::Relaxed) {
            return None;
        }
        b.in_hook.store(true, Ordering::Relaxed);
        if STATE.load(Ordering::Relaxed) != 2 {
            b.in_hook.store(false, Ordering::Release);
            return None;
        }
        let r = f(b);
        b.in_hook.store(false, Ordering::Release);
        return Some(r);
    }
    // First call on this thread: create the buffer under the TLS recursion guard.
    let entered = IN_HOOK.try_with(|h| !h.replace(true)).unwrap_or(false);
    if !entered {
        return None;
    }
    let b = thread_buf();
    let _ = IN_HOOK.try_with(|h| h.set(false));
    let b = b?;
    b.in_hook.store(true, Ordering::Relaxed);
    if STATE.load(Ordering::Relaxed) != 2 {
        b.in_hook.store(false, Ordering::Release);
        return None;
    }
    let r = f(b);
    b.in_hook.store(false, Ordering::Release);
    Some(r)
}

/// Kept-back allocations read the TSC once per this many allocations of their thread: their time is
/// used to age them out (50 ms) and, for blocks still live at the end, as their allocation time, which
/// is thus early by at most the time of `COARSE_EVERY - 1` allocations (microseconds). Exact mode
/// (`-o`, every operation sent) reads the TSC for every record.
const COARSE_EVERY: u32 = 32;

#[inline(always)]
fn coarse_tsc(b: &ThreadBuf) -> u64 {
    let left = b.coarse_left.get();
    let t = if left == 0 {
        let t = tsc();
        b.coarse.set(t);
        b.coarse_left.set(COARSE_EVERY - 1);
        t
    } else {
        b.coarse_left.set(left - 1);
        b.coarse.get()
    };
    // A thread that allocates rarely has an old coarse clock: never stamp an allocation before a
    // record already sent (e.g. another thread's free of this very address, which the reader must
    // see as earlier).
    t.max(LAST_PUSH_TSC.load(Ordering::Relaxed))
}

/// The latest TSC read after sending a record, on any thread (see `coarse_tsc`).
static LAST_PUSH_TSC: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[inline(always)]
unsafe fn record_alloc(api: u8, addr: *mut libc::c_void, size: usize) {
    if addr.is_null() {
        return;
    }
    guarded(|b| {
        let st = if STACK_MASK.load(Ordering::Relaxed) & 1 != 0 {
            stack_id(b)
        } else {
            0
        };
        if FULL.load(Ordering::Relaxed) {
            push(
                b,
                &[hdr(T_ALLOC, api, 0), tsc(), addr as u64, size as u64, st],
            );
        } else {
            pend_insert(
                b,
                Pend {
                    addr: addr as u64,
                    tsc: coarse_tsc(b),
                    size: size as u64,
                    stack: st,
                    api,
                },
            );
        }
    });
}

#[inline(always)]
pub(crate) unsafe fn malloc_impl(size: usize) -> *mut libc::c_void {
    let p = real!(R_MALLOC, __libc_malloc, FnAlloc)(size);
    record_alloc(API_MALLOC, p, size);
    p
}

#[inline(always)]
pub(crate) unsafe fn calloc_impl(n: usize, size: usize) -> *mut libc::c_void {
    let p = real!(R_CALLOC, __libc_calloc, FnCalloc)(n, size);
    record_alloc(API_CALLOC, p, n.wrapping_mul(size));
    p
}

unsafe fn record_realloc(api: u8, old: *mut libc::c_void, new: *mut libc::c_void, size: usize) {
    if old.is_null() {
        record_alloc(api, new, size);
        return;
    }
    if new.is_null() {
        if size == 0 {
            // glibc frees the block and returns NULL.
            guarded(|b| {
                if settle_free(b, old as u64) {
                    return;
                }
                let t = tsc();
                note_free(old as u64, t);
                push(b, &[hdr(T_FREE, api, 0), t, old as u64]);
            });
        }
        return;
    }
    guarded(|b| {
        // The old block was kept back (maybe also a stale entry of it): send it first so the reader
        // can pair the realloc.
        while let Some(e) = pend_take(b, old as u64) {
            push_raw(b, &[hdr(T_ALLOC, e.api, 0), e.tsc, e.addr, e.size, e.stack]);
        }
        let st = if STACK_MASK.load(Ordering::Relaxed) & 2 != 0 {
            stack_id(b)
        } else {
            0
        };
        let t = tsc();
        note_free(old as u64, t);
        push(
            b,
            &[
                hdr(T_REALLOC, api, 0),
                t,
                old as u64,
                new as u64,
                size as u64,
                st,
            ],
        );
    });
}

#[inline(always)]
pub(crate) unsafe fn realloc_impl(old: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    let p = real!(R_REALLOC, __libc_realloc, FnRealloc)(old, size);
    record_realloc(API_REALLOC, old, p, size);
    p
}

#[inline(always)]
pub(crate) unsafe fn reallocarray_impl(
    old: *mut libc::c_void,
    n: usize,
    size: usize,
) -> *mut libc::c_void {
    let Some(total) = n.checked_mul(size) else {
        *libc::__errno_location() = libc::ENOMEM;
        return std::ptr::null_mut();
    };
    let p = real!(R_REALLOC, __libc_realloc, FnRealloc)(old, total);
    record_realloc(API_REALLOCARRAY, old, p, total);
    p
}

#[inline(always)]
pub(crate) unsafe fn free_impl(p: *mut libc::c_void) {
    if !p.is_null() {
        guarded(|b| {
            if settle_free(b, p as u64) {
                return;
            }
            let t = tsc();
            note_free(p as u64, t);
            if STACK_MASK.load(Ordering::Relaxed) & 4 != 0 {
                let st = stack_id(b);
                push(b, &[hdr(T_FREE, 9, 1), t, p as u64, st]);
            } else {
                push(b, &[hdr(T_FREE, 9, 0), t, p as u64]);
            }
        });
    }
    real!(R_FREE, __libc_free, FnFree)(p);
}

#[inline(always)]
pub(crate) unsafe fn posix_memalign_impl(
    out: *mut *mut libc::c_void,
    align: usize,
    size: usize,
) -> i32 {
    if align < std::mem::size_of::<usize>() || !align.is_power_of_two() {
        return libc::EINVAL;
    }
    let p = real!(R_MEMALIGN, __libc_memalign, FnMemalign)(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    *out = p;
    record_alloc(API_POSIX_MEMALIGN, p, size);
    0
}

#[inline(always)]
pub(crate) unsafe fn aligned_alloc_impl(align: usize, size: usize) -> *mut libc::c_void {
    let p = real!(R_MEMALIGN, __libc_memalign, FnMemalign)(align, size);
    record_alloc(API_ALIGNED_ALLOC, p, size);
    p
}

#[inline(always)]
pub(crate) unsafe fn memalign_impl(align: usize, size: usize) -> *mut libc::c_void {
    let p = real!(R_MEMALIGN, __libc_memalign, FnMemalign)(align, size);
    record_alloc(API_MEMALIGN, p, size);
    p
}

#[inline(always)]
pub(crate) unsafe fn valloc_impl(size: usize) -> *mut libc::c_void {
    let p = real!(R_VALLOC, __libc_valloc, FnAlloc)(size);
    record_alloc(API_VALLOC, p, size);
    p
}

#[inline(always)]
pub(crate) unsafe fn pvalloc_impl(size: usize) -> *mut libc::c_void {
    let p = real!(R_PVALLOC, __libc_pvalloc, FnAlloc)(size);
    record_alloc(API_PVALLOC, p, size);
    p
}

// The exported names (what a preloaded shim interposes). Attached, the hooks written into the
// process's GOT entries are the local functions of `attach` instead: an exported name, taken from
// inside a dlopened library, can resolve to the process's own malloc.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut libc::c_void {
    malloc_impl(size)
}
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut libc::c_void {
    calloc_impl(n, size)
}
#[no_mangle]
pub unsafe extern "C" fn realloc(old: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    realloc_impl(old, size)
}
#[no_mangle]
pub unsafe extern "C" fn reallocarray(
    old: *mut libc::c_void,
    n: usize,
    size: usize,
) -> *mut libc::c_void {
    reallocarray_impl(old, n, size)
}
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut libc::c_void) {
    free_impl(p)
}
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut libc::c_void) {
    free_impl(p)
}
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut libc::c_void,
    align: usize,
    size: usize,
) -> i32 {
    posix_memalign_impl(out, align, size)
}
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut libc::c_void {
    aligned_alloc_impl(align, size)
}
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut libc::c_void {
    memalign_impl(align, size)
}
#[no_mangle]
pub unsafe extern "C" fn valloc(size: usize) -> *mut libc::c_void {
    valloc_impl(size)
}
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut libc::c_void {
    pvalloc_impl(size)
}
