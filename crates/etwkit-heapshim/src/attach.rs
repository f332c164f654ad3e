//! Attach mode: the shim loaded into a running process (etwkit calls the process's own `dlopen` on
//! it through ptrace, then [`etwkit_heapshim_attach`]). A dlopened library does not interpose, so
//! the shim writes its hooks into the GOT entries of malloc, calloc, realloc, free and the aligned
//! variants in every loaded module (the program, libc's own PLT calls, libstdc++ whose operator
//! new/delete call malloc/free through theirs...), after saving what was there; the hooks forward
//! to what the process resolved those names to before, so a program keeps its allocator.
//!
//! A control thread flushes every thread's records every 20 ms (with a MARK, as in full mode),
//! patches modules loaded later, and detaches when etwkit asks (a `DTCH` datagram) or goes away
//! (the socket hangs up, e.g. etwkit was killed): every GOT entry gets its saved value back,
//! recording stops, what was recorded is sent, then a BYE record, and the socket is closed. The
//! library stays mapped, unused (a thread may still be returning through a hook); a later attach
//! reuses it.
//!
//! Forked children: with the follow flag they keep tracing into the same socket under their own pid;
//! without it the child restores its copy of the GOT entries and runs untraced.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::{FD, FULL, MODULES, PID, REAL, STACK_MASK, STATE, THREADS, TLS_OFF};

const CONFIG_MAGIC: u32 = u32::from_le_bytes(*b"HSCF");
const DETACH_MAGIC: u32 = u32::from_le_bytes(*b"DTCH");
/// Record type sent last on detach: {reason} (1 asked, 2 tracer gone).
const T_BYE: u8 = 9;
const FLAG_EVERY_OP: u32 = 1;
const FLAG_FOLLOW_FORKS: u32 = 2;

static ATTACHED: AtomicBool = AtomicBool::new(false);
static FOLLOW: AtomicBool = AtomicBool::new(false);
static PEER_GONE: AtomicBool = AtomicBool::new(false);
static HANDLERS: std::sync::Once = std::sync::Once::new();
static DL_ADDS: AtomicU64 = AtomicU64::new(0);

/// A GOT entry we wrote: its address, what was there, what we wrote, and whether its page is
/// read-only (RELRO) outside our writes.
#[derive(Clone, Copy)]
struct Patch {
    slot: usize,
    old: usize,
    new: usize,
    relro: bool,
}
static PATCHES: Mutex<Vec<Patch>> = Mutex::new(Vec::new());

// The hooks written into GOT entries: local functions (their address is this library's code).
unsafe extern "C" fn h_malloc(size: usize) -> *mut libc::c_void {
    crate::malloc_impl(size)
}
unsafe extern "C" fn h_calloc(n: usize, size: usize) -> *mut libc::c_void {
    crate::calloc_impl(n, size)
}
unsafe extern "C" fn h_realloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    crate::realloc_impl(p, size)
}
unsafe extern "C" fn h_reallocarray(
    p: *mut libc::c_void,
    n: usize,
    size: usize,
) -> *mut libc::c_void {
    crate::reallocarray_impl(p, n, size)
}
unsafe extern "C" fn h_free(p: *mut libc::c_void) {
    crate::free_impl(p)
}
unsafe extern "C" fn h_posix_memalign(
    out: *mut *mut libc::c_void,
    align: usize,
    size: usize,
) -> i32 {
    crate::posix_memalign_impl(out, align, size)
}
unsafe extern "C" fn h_aligned_alloc(align: usize, size: usize) -> *mut libc::c_void {
    crate::aligned_alloc_impl(align, size)
}
unsafe extern "C" fn h_memalign(align: usize, size: usize) -> *mut libc::c_void {
    crate::memalign_impl(align, size)
}
unsafe extern "C" fn h_valloc(size: usize) -> *mut libc::c_void {
    crate::valloc_impl(size)
}
unsafe extern "C" fn h_pvalloc(size: usize) -> *mut libc::c_void {
    crate::pvalloc_impl(size)
}

fn hooks() -> [(&'static [u8], usize); 11] {
    [
        (b"malloc", h_malloc as *const () as usize),
        (b"calloc", h_calloc as *const () as usize),
        (b"realloc", h_realloc as *const () as usize),
        (b"reallocarray", h_reallocarray as *const () as usize),
        (b"free", h_free as *const () as usize),
        (b"cfree", h_free as *const () as usize),
        (b"posix_memalign", h_posix_memalign as *const () as usize),
        (b"aligned_alloc", h_aligned_alloc as *const () as usize),
        (b"memalign", h_memalign as *const () as usize),
        (b"valloc", h_valloc as *const () as usize),
        (b"pvalloc", h_pvalloc as *const () as usize),
    ]
}

pub(crate) fn attached() -> bool {
    ATTACHED.load(Ordering::Acquire)
}

/// The tracer's socket failed (EPIPE): stop recording; attached, the control thread detaches.
pub(crate) fn peer_gone() {
    PEER_GONE.store(true, Ordering::Release);
    if !attached() {
        STATE.store(3, Ordering::SeqCst);
    }
}

/// In a forked child: true when the child must not be traced (attached without the follow flag);
/// its copy of the GOT entries is restored then.
pub(crate) fn after_fork_child() -> bool {
    if !attached() {
        return false;
    }
    if FOLLOW.load(Ordering::Relaxed) {
        // The parent's control thread does not exist here: start one for this process.
        // SAFETY: fork has re-initialized the allocator and thread machinery in this child.
        unsafe { start_control() };
        return false;
    }
    // SAFETY: only this thread exists in the child.
    unsafe {
        restore_got();
        STATE.store(3, Ordering::SeqCst);
        let fd = FD.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            libc::close(fd);
        }
    }
    ATTACHED.store(false, Ordering::Release);
    true
}

/// Called by etwkit inside the process (through ptrace, on one of its threads): connects to the
/// abstract socket `etwkit-heap-<tracer pid>-<nonce as hex>`, reads the configuration, installs the
/// hooks and starts the control thread. Returns the number of GOT entries patched, or -errno.
///
/// # Safety
/// Called once per attach, by the tracer, on a thread it stopped outside the allocator.
#[no_mangle]
pub unsafe extern "C" fn etwkit_heapshim_attach(tracer_pid: u64, nonce: u64) -> i64 {
    crate::init();
    if STATE.load(Ordering::Acquire) == 2 {
        return -(libc::EBUSY as i64);
    }
    let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        return -(*libc::__errno_location() as i64);
    }
    let name = format!("etwkit-heap-{tracer_pid}-{nonce:x}");
    let mut addr: libc::sockaddr_un = std::mem::zeroed();
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, b) in name.bytes().enumerate() {
        addr.sun_path[1 + i] = b as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    if libc::connect(fd, &addr as *const _ as *const libc::sockaddr, len) != 0 {
        let e = *libc::__errno_location();
        libc::close(fd);
        return -(e as i64);
    }
    let tv = libc::timeval {
        tv_sec: 10,
        tv_usec: 0,
    };
    libc::setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        &tv as *const _ as *const libc::c_void,
        std::mem::size_of::<libc::timeval>() as libc::socklen_t,
    );
    let mut cfg = [0u32; 4];
    let n = libc::recv(fd, cfg.as_mut_ptr() as *mut libc::c_void, 16, 0);
    if n < 12 || cfg[0] != CONFIG_MAGIC {
        libc::close(fd);
        return -(libc::EPROTO as i64);
    }
    let no_timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    libc::setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        &no_timeout as *const _ as *const libc::c_void,
        std::mem::size_of::<libc::timeval>() as libc::socklen_t,
    );
    STACK_MASK.store(cfg[1], Ordering::Relaxed);
    FULL.store(cfg[2] & FLAG_EVERY_OP != 0, Ordering::Relaxed);
    FOLLOW.store(cfg[2] & FLAG_FOLLOW_FORKS != 0, Ordering::Relaxed);
    PID.store(libc::getpid() as u32, Ordering::Relaxed);
    PEER_GONE.store(false, Ordering::Release);
    // Dynamic TLS (dlopened): no fixed offset from the thread pointer.
    TLS_OFF.store(crate::TLS_OFF_DISABLED, Ordering::Release);
    resolve_real();
    // A previous attach of this copy: stacks and modules must be sent again to the new reader.
    for slot in THREADS.iter() {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            let b = &*p;
            (*b.sent.get()).fill(0);
            // A tracer killed before it detached us cleanly left records and kept-back
            // allocations behind (detach spills only when the tracer says goodbye).
            crate::forget_previous_session(b);
            // Its coarse clock dates from the last session: read the TSC afresh.
            b.coarse_left.set(0);
            b.oldest_check.set(crate::tsc());
        }
    }
    if let Ok(mut m) = MODULES.write() {
        *m = None;
    }
    FD.store(fd, Ordering::Release);
    HANDLERS.call_once(|| {
        libc::pthread_atfork(None, None, Some(crate::after_fork_child));
        libc::atexit(crate::at_exit);
    });
    ATTACHED.store(true, Ordering::Release);
    // Before recording starts: creating the thread allocates, and that is not the program's doing.
    start_control();
    STATE.store(2, Ordering::SeqCst);
    send_clock();
    patch_got() as i64
}

/// What the process resolves each allocator name to (never this library's own definitions).
unsafe fn resolve_real() {
    let own = own_range();
    let names: [(usize, &[u8]); 7] = [
        (crate::R_MALLOC, b"malloc\0"),
        (crate::R_CALLOC, b"calloc\0"),
        (crate::R_REALLOC, b"realloc\0"),
        (crate::R_FREE, b"free\0"),
        (crate::R_MEMALIGN, b"memalign\0"),
        (crate::R_VALLOC, b"valloc\0"),
        (crate::R_PVALLOC, b"pvalloc\0"),
    ];
    for (i, n) in names {
        let f = libc::dlsym(libc::RTLD_DEFAULT, n.as_ptr() as *const libc::c_char) as usize;
        let v = if f == 0 || (f >= own.0 && f < own.1) {
            0
        } else {
            f
        };
        REAL[i].store(v, Ordering::Relaxed);
    }
}

/// The address range of this library's code.
fn own_range() -> (usize, usize) {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = own_range as *const () as usize;
    // SAFETY: dladdr fills info for an address of ours.
    if unsafe { libc::dladdr(here as *const libc::c_void, &mut info) } == 0 {
        return (here, here + 1);
    }
    let base = info.dli_fbase as usize;
    // Good enough as a filter: our text is within 64 MiB of our base.
    (base, base + (64 << 20))
}

struct ModuleInfo {
    base: usize,
    dynamic: Option<(usize, usize)>,
    relro: Vec<(usize, usize)>,
    skip: bool,
}

/// Writes the hooks into every loaded module's GOT entries for the allocator names (not this
/// library's, not the dynamic loader's); returns how many entries were written.
unsafe fn patch_got() -> usize {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> i32 {
        let mods = &mut *(data as *mut Vec<ModuleInfo>);
        let info = &*info;
        let base = info.dlpi_addr as usize;
        let name = if info.dlpi_name.is_null() {
            &b""[..]
        } else {
            std::ffi::CStr::from_ptr(info.dlpi_name).to_bytes()
        };
        let here = patch_got as *const () as usize;
        let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
        let mut m = ModuleInfo {
            base,
            dynamic: None,
            relro: Vec::new(),
            skip: contains(name, b"ld-linux") || contains(name, b"linux-vdso"),
        };
        for ph in phdrs {
            let start = base + ph.p_vaddr as usize;
            let end = start + ph.p_memsz as usize;
            match ph.p_type {
                libc::PT_DYNAMIC => m.dynamic = Some((start, end)),
                libc::PT_GNU_RELRO => m.relro.push((start, end)),
                libc::PT_LOAD if ph.p_flags & libc::PF_X != 0 && here >= start && here < end => {
                    m.skip = true
                }
                _ => {}
            }
        }
        mods.push(m);
        0
    }
    let mut mods: Vec<ModuleInfo> = Vec::new();
    libc::dl_iterate_phdr(Some(cb), &mut mods as *mut _ as *mut libc::c_void);
    let hooks = hooks();
    let mut n = 0;
    let mut patches = match PATCHES.lock() {
        Ok(p) => p,
        Err(p) => p.into_inner(),
    };
    // Frees first, allocators after (and the reverse when restoring): a block allocated while only
    // one side is hooked is then at worst a free of an unseen block, never a leak that is not one.
    for frees in [true, false] {
        for m in mods.iter().filter(|m| !m.skip) {
            let Some((dstart, dend)) = m.dynamic else {
                continue;
            };
            let abs = |v: usize| if v < m.base { v + m.base } else { v };
            let (mut symtab, mut strtab) = (0usize, 0usize);
            let mut tables: [(usize, usize); 2] = [(0, 0); 2];
            let mut d = dstart;
            while d + 16 <= dend {
                let tag = *(d as *const i64);
                let val = *((d + 8) as *const u64) as usize;
                // DT_NULL 0, DT_PLTRELSZ 2, DT_STRTAB 5, DT_SYMTAB 6, DT_RELA 7, DT_RELASZ 8, DT_JMPREL 23.
                match tag {
                    0 => break,
                    6 => symtab = abs(val),
                    5 => strtab = abs(val),
                    7 => tables[0].0 = abs(val),
                    8 => tables[0].1 = val,
                    23 => tables[1].0 = abs(val),
                    2 => tables[1].1 = val,
                    _ => {}
                }
                d += 16;
            }
            if symtab == 0 || strtab == 0 {
                continue;
            }
            for (rela, size) in tables {
                if rela == 0 {
                    continue;
                }
                for i in 0..size / 24 {
                    let r = rela + i * 24;
                    let offset = *(r as *const u64) as usize;
                    let info = *((r + 8) as *const u64);
                    let typ = info & 0xffff_ffff;
                    // R_X86_64_GLOB_DAT (6), R_X86_64_JUMP_SLOT (7), and R_X86_64_64 (1): a
                    // function pointer in data (`= free` in a table), patched only when it holds
                    // exactly the function.
                    if typ != 6 && typ != 7 && typ != 1 {
                        continue;
                    }
                    if typ == 1 && *((r + 16) as *const i64) != 0 {
                        continue;
                    }
                    let sym = (info >> 32) as usize;
                    let st_name = *((symtab + sym * 24) as *const u32) as usize;
                    let name = std::ffi::CStr::from_ptr((strtab + st_name) as *const libc::c_char)
                        .to_bytes();
                    let Some(&(_, hook)) = hooks.iter().find(|(h, _)| *h == name) else {
                        continue;
                    };
                    if is_free(name) != frees {
                        continue;
                    }
                    let slot = m.base + offset;
                    let cur = std::ptr::read_volatile(slot as *const usize);
                    if cur == hook || cur == 0 {
                        continue;
                    }
                    if typ == 1 {
                        let mut cname = name.to_vec();
                        cname.push(0);
                        let f =
                            libc::dlsym(libc::RTLD_DEFAULT, cname.as_ptr() as *const libc::c_char);
                        if f as usize != cur {
                            continue;
                        }
                    }
                    let relro = m.relro.iter().any(|(s, e)| slot >= *s && slot < *e);
                    if write_slot(slot, hook, relro) {
                        patches.push(Patch {
                            slot,
                            old: cur,
                            new: hook,
                            relro,
                        });
                        n += 1;
                    }
                }
            }
        }
    }
    n
}

fn is_free(name: &[u8]) -> bool {
    name == b"free" || name == b"cfree"
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Stores `value` in a GOT entry (one aligned 8-byte store: a concurrent caller reads the old or the
/// new target), making a RELRO page writable for the moment.
unsafe fn write_slot(slot: usize, value: usize, relro: bool) -> bool {
    let page = slot & !4095;
    if relro
        && libc::mprotect(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
        ) != 0
    {
        return false;
    }
    (*(slot as *const std::sync::atomic::AtomicUsize)).store(value, Ordering::SeqCst);
    if relro {
        libc::mprotect(page as *mut libc::c_void, 4096, libc::PROT_READ);
    }
    true
}

/// Puts back every GOT entry we wrote (unless someone changed it since).
unsafe fn restore_got() {
    let mut patches = match PATCHES.lock() {
        Ok(p) => p,
        Err(p) => p.into_inner(),
    };
    // Allocators first, frees last (see patch_got).
    let free_hook = h_free as *const () as usize;
    let all: Vec<Patch> = patches.drain(..).collect();
    for frees in [false, true] {
        for p in all.iter().filter(|p| (p.new == free_hook) == frees) {
            let cur = std::ptr::read_volatile(p.slot as *const usize);
            if cur == p.new {
                write_slot(p.slot, p.old, p.relro);
            }
        }
    }
}

unsafe fn send_clock() {
    let c = crate::clock_record();
    let bytes = std::slice::from_raw_parts(c.as_ptr() as *const u8, 24);
    crate::send(0, bytes);
}

unsafe fn start_control() {
    extern "C" fn run(_: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: the control loop only touches registered (never freed) buffers and our socket.
        unsafe { control() };
        std::ptr::null_mut()
    }
    let mut t: libc::pthread_t = 0;
    let mut attr: libc::pthread_attr_t = std::mem::zeroed();
    libc::pthread_attr_init(&mut attr);
    libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
    libc::pthread_attr_setstacksize(&mut attr, 256 * 1024);
    libc::pthread_create(&mut t, &attr, run, std::ptr::null_mut());
    libc::pthread_attr_destroy(&mut attr);
}

unsafe fn control() {
    let mut ticks = 0u64;
    loop {
        let fd = FD.load(Ordering::Acquire);
        if fd < 0 || !attached() {
            return;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        libc::poll(&mut pfd, 1, 20);
        let mut reason = 0u64;
        if pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 || PEER_GONE.load(Ordering::Acquire) {
            reason = 2;
        } else if pfd.revents & libc::POLLIN != 0 {
            let mut m = [0u32; 4];
            let n = libc::recv(
                fd,
                m.as_mut_ptr() as *mut libc::c_void,
                16,
                libc::MSG_DONTWAIT,
            );
            if n == 0 {
                reason = 2;
            } else if n >= 4 && m[0] == DETACH_MAGIC {
                reason = 1;
            }
        }
        if reason != 0 {
            detach(reason);
            return;
        }
        // Libraries loaded since: patch them too.
        let adds = dl_adds();
        if adds != DL_ADDS.swap(adds, Ordering::AcqRel) {
            patch_got();
        }
        crate::flush_marked();
        ticks += 1;
        if ticks % 50 == 0 {
            send_clock();
        }
    }
}

/// Waits (at most 2 s) until every other thread of the process has either run for a while since
/// now, or is blocked in the kernel: the few instructions between loading a GOT entry and calling
/// it contain no system call, so such a thread holds no hook address read before the GOT entries
/// were restored. (A stopped or long-starved thread is given up on after 2 s; without /proc, a
/// fixed 200 ms.)
fn wait_past_stale_hooks() {
    fn read(path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
    let state = |tid: &str| -> Option<char> {
        let s = read(&format!("/proc/self/task/{tid}/stat"))?;
        s.rsplit_once(')')?.1.trim_start().chars().next()
    };
    let run_ns = |tid: &str| -> Option<u64> {
        read(&format!("/proc/self/task/{tid}/schedstat"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::syscall(libc::SYS_gettid) }.to_string();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        // No /proc where the process lives (a chroot without it): the threads cannot be watched;
        // a running thread is past that point within nanoseconds, a preempted one within a few
        // scheduler periods.
        std::thread::sleep(std::time::Duration::from_millis(200));
        return;
    };
    let mut pending: Vec<(String, u64)> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|t| *t != me)
        .filter_map(|t| {
            let r = run_ns(&t)?;
            Some((t, r))
        })
        .collect();
    let t0 = std::time::Instant::now();
    while !pending.is_empty() && t0.elapsed() < std::time::Duration::from_secs(2) {
        pending.retain(|(tid, r0)| match state(tid) {
            None | Some('S') | Some('D') | Some('Z') | Some('X') | Some('I') => false,
            _ => run_ns(tid).is_some_and(|r| r.saturating_sub(*r0) < 200_000),
        });
        if !pending.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// The loader's count of modules loaded so far (changes when a library is dlopened).
unsafe fn dl_adds() -> u64 {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> i32 {
        *(data as *mut u64) = (*info).dlpi_adds;
        1
    }
    let mut v = 0u64;
    libc::dl_iterate_phdr(Some(cb), &mut v as *mut u64 as *mut libc::c_void);
    v
}

/// Undoes the interposition, sends what was recorded and a BYE, closes the socket.
unsafe fn detach(reason: u64) {
    restore_got();
    // A thread that read a hook's address from a GOT entry just before it was restored is about to
    // call it: keep recording until every thread is past that point, so every call that reaches a
    // hook is counted.
    wait_past_stale_hooks();
    STATE.store(3, Ordering::SeqCst);
    // No thread can enter a hook any more; one still inside (e.g. blocked sending) finishes its
    // record. Its flag was set long enough ago to be visible here.
    for slot in THREADS.iter() {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            while (*p).in_hook.load(Ordering::SeqCst) {
                libc::sched_yield();
            }
        }
    }
    if reason == 1 {
        for slot in THREADS.iter() {
            let p = slot.load(Ordering::Acquire);
            if !p.is_null() {
                crate::spill(&*p, 0);
                crate::flush(&*p, false);
            }
        }
        let mark = [
            crate::hdr(crate::T_MARK, 0, 0),
            u64::MAX,
            crate::hdr(T_BYE, 0, 0),
            reason,
        ];
        crate::send(
            0,
            std::slice::from_raw_parts(mark.as_ptr() as *const u8, mark.len() * 8),
        );
    }
    ATTACHED.store(false, Ordering::Release);
    let _g = crate::SEND_LOCK.lock();
    let fd = FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        libc::close(fd);
    }
}
