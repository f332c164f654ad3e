//! Spawn mode through the allocator shim (`libetwkit_heapshim.so`, crate `etwkit-heapshim`): the
//! command runs with the shim preloaded; the shim sends binary records over a SOCK_SEQPACKET socket
//! (format in the shim crate's docs). Orders of magnitude cheaper than a uprobe per call (see
//! tools/bench_heap.sh); uprobes remain the way to attach to a running process.
//!
//! Records of different threads arrive in per-thread batches; they are ordered by their TSC stamps
//! before delivery, so a block allocated on one thread and freed on another pairs up correctly.

use std::collections::HashMap;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{perf, HeapError, StackEvents};
use crate::live::linux::unwind::{Mapping, ProcessMaps};
use crate::schema::builtin::heap_events::{HeapOp, HeapOpKind, ALLOCATOR_APIS};

const MAGIC: u32 = u32::from_le_bytes(*b"HSPH");
const T_ALLOC: u8 = 1;
const T_REALLOC: u8 = 2;
const T_FREE: u8 = 3;
const T_STACK: u8 = 4;
const T_CLOCK: u8 = 5;
const T_MODULE: u8 = 6;
const T_TRANSIENT: u8 = 7;
const T_MARK: u8 = 8;
const T_BYE: u8 = 9;
const CONFIG_MAGIC: u32 = u32::from_le_bytes(*b"HSCF");
const DETACH_MAGIC: u32 = u32::from_le_bytes(*b"DTCH");
/// How long a detaching process may take to send what it recorded (it may wait up to 2 s for its
/// threads to get past the hooks, longer on a starved machine).
const DETACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Where the shim library is: `$ETWKIT_HEAPSHIM`, else next to the running executable or in its
/// parent directory (cargo puts test binaries in `target/<profile>/deps`).
pub fn find_shim() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ETWKIT_HEAPSHIM") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libetwkit_heapshim.so"),
        dir.parent()?.join("libetwkit_heapshim.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The shim library in an anonymous memory file (memfd), e.g. from bytes embedded in an executable.
/// Its path, `/proc/<our pid>/fd/<fd>`, opens for processes of our user while this value lives.
pub struct ShimFile {
    _fd: OwnedFd,
    path: PathBuf,
}

impl ShimFile {
    pub fn from_bytes(bytes: &[u8]) -> io::Result<ShimFile> {
        use std::io::Write;
        // SAFETY: memfd_create reads a NUL-terminated name; the descriptor it returns is ours.
        let fd = unsafe { libc::memfd_create(c"etwkit-heapshim.so".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut f = std::fs::File::from(fd.try_clone()?);
        f.write_all(bytes)?;
        Ok(ShimFile {
            path: PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                fd.as_raw_fd()
            )),
            _fd: fd,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A copy of the shim `bytes` on disk that any process can open (attach mode: the target loads it
/// by path): `/run/etwkit` as root, else `$TMPDIR/etwkit-<uid>`, a directory of ours that only we
/// can write, named by the bytes' hash (the same copy serves every attach of the same shim).
pub fn installed_copy(bytes: &[u8]) -> io::Result<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = if uid == 0 {
        PathBuf::from("/run/etwkit")
    } else {
        std::env::temp_dir().join(format!("etwkit-{uid}"))
    };
    installed_copy_in(&dir, uid, bytes)
}

/// [`installed_copy`] in `dir`, which only `uid` may write. Errors name the file or directory
/// they are about (`/run/etwkit: Not a directory (os error 20)`), never a bare OS reason.
fn installed_copy_in(dir: &Path, uid: u32, bytes: &[u8]) -> io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let named = |p: &Path| {
        let p = p.to_path_buf();
        move |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()))
    };
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(named(dir)(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(named(dir))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a directory that only this user can write",
            dir.display()
        )));
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let path = dir.join(format!("libetwkit_heapshim-{h:016x}.so"));
    if std::fs::read(&path).is_ok_and(|b| b == bytes) {
        return Ok(path);
    }
    let tmp = dir.join(format!(".shim-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(named(&tmp))?;
    f.write_all(bytes).map_err(named(&tmp))?;
    f.sync_all().map_err(named(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(named(&path))?;
    Ok(path)
}

/// Counters of a shim trace.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ShimStats {
    pub datagrams: u64,
    pub records: u64,
    pub malformed: u64,
    /// Allocation records naming a stack the thread never sent (should stay 0).
    pub unknown_stacks: u64,
}

/// Alloc/free pairs the shim counted in process: (pid, stack, api, count, bytes).
pub type Transient = (u32, Option<Arc<[u64]>>, &'static str, u64, u64);

/// Per-address bookkeeping that makes pairing independent of arrival order: threads send their
/// records in batches, and the shim keeps allocations back until they live long enough, so a free
/// on one thread can arrive before the allocation it frees. A free pairs with the latest earlier
/// allocation of its address; an allocation with the earliest later free.
#[derive(Default)]
struct AddrState {
    allocs: Vec<(u64, HeapOp)>,
    frees: Vec<(u64, HeapOp)>,
}

/// How the shim records.
#[derive(Clone, Copy, Debug)]
pub struct ShimOptions {
    /// The events that carry a stack.
    pub stacks: StackEvents,
    /// Send every operation, reallocations as such, delivered in time order (for writing them all,
    /// e.g. to ETL). Otherwise short-lived pairs are counted in process ([`ShimTrace::transient`]),
    /// reallocations arrive as a free and an allocation ([`ShimTrace::reallocs`] counts them), and
    /// operations arrive in no particular order. Costs more in the traced process.
    pub every_op: bool,
}

/// An operation held until every thread of its process has sent what came before it (every-op
/// mode), ordered by (tsc, arrival).
struct Held {
    tsc: u64,
    seq: u64,
    op: HeapOp,
}
impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.tsc, self.seq) == (o.tsc, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap pops the earliest first.
        (o.tsc, o.seq).cmp(&(self.tsc, self.seq))
    }
}

/// A command running with the heap shim preloaded, or a running process the shim was loaded into.
pub struct ShimTrace {
    every_op: bool,
    /// Attach mode: the process, when the detach request went out, whether its BYE arrived.
    attached: Option<u32>,
    detach_sent: Option<std::time::Instant>,
    /// Attach mode with forked children traced: every process sharing the socket must be asked.
    follow: bool,
    last_detach_request: Option<std::time::Instant>,
    bye: bool,
    clean_end: bool,
    /// UTC FILETIME when tracing began.
    started: i64,
    /// Every-op mode: operations not yet released, and per process the tsc before which it has
    /// sent everything (`u64::MAX` once it exited).
    held: std::collections::BinaryHeap<Held>,
    /// Pairing in process (every mode but every-op): frees (and the free half of reallocations)
    /// wait here until every thread has sent what came before them (the marks), then pair in time
    /// order. Allocations kept back in process may come much later, but never a free, and an
    /// allocation arriving late pairs with the earliest free after it still waiting: so a free
    /// meets the allocation it frees. Paired as they arrived, a free sent early could take the
    /// allocation of an earlier life of its address whose own free was still in another thread's
    /// buffer (`etwkit export` traced: ~1,000 frees left unpaired and as many blocks reported
    /// outstanding in 264 k allocations).
    held_frees: std::collections::BinaryHeap<Held>,
    marks: HashMap<u32, u64>,
    /// When `retire_dead_marks` last looked, and the processes it found ended.
    marks_checked: Option<std::time::Instant>,
    ended: std::collections::HashSet<u32>,
    seq: u64,
    /// Last delivered FILETIME (every-op mode delivers non-decreasing times).
    last_time: i64,
    child: Option<Child>,
    sock: OwnedFd,
    stacks: HashMap<(u32, u64), Arc<[u64]>>,
    maps: HashMap<u32, ProcessMaps>,
    addrs: HashMap<(u32, u64), AddrState>,
    /// Ops ready for delivery (pairs completed), in completion order.
    ready: Vec<HeapOp>,
    /// (pid, stack, api, count, bytes) of alloc/free pairs the shim cancelled locally.
    transient: Vec<Transient>,
    reallocs: HashMap<u32, u64>,
    /// (tsc, CLOCK_MONOTONIC ns) anchors: first and latest seen.
    anchors: Option<((u64, u64), (u64, u64))>,
    clock: (u64, u64),
    stop: Arc<AtomicBool>,
    stats: ShimStats,
    /// Attached to a process in another pid namespace: its pids (as the shim sees them) to ours.
    pid_ns: Option<PidNs>,
}

/// A pid namespace other than ours: translates the pids its processes see into ours (through
/// `NSpid` in /proc/PID/status), caching each answer.
struct PidNs {
    ino: u64,
    map: HashMap<u32, u32>,
}

impl PidNs {
    /// The pid namespace of `pid` when it is not ours, with `pid` itself mapped.
    fn of(pid: u32) -> Option<PidNs> {
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &str| std::fs::metadata(p).ok().map(|m| m.ino());
        let theirs = ino(&format!("/proc/{pid}/ns/pid"))?;
        if Some(theirs) == ino("/proc/self/ns/pid") {
            return None;
        }
        let mut ns = PidNs {
            ino: theirs,
            map: HashMap::new(),
        };
        if let Some(inner) = Self::inner_pid(pid) {
            ns.map.insert(inner, pid);
        }
        Some(ns)
    }

    /// The pid `pid` has in its own (innermost) namespace.
    fn inner_pid(pid: u32) -> Option<u32> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("NSpid:"))?
            .split_whitespace()
            .last()?
            .parse()
            .ok()
    }

    /// Our pid for `inner` (its pid in that namespace); `inner` itself when no process has it.
    fn ours(&mut self, inner: u32) -> u32 {
        if let Some(&p) = self.map.get(&inner) {
            return p;
        }
        use std::os::unix::fs::MetadataExt;
        let found = std::fs::read_dir("/proc").ok().and_then(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|&p| {
                    Self::inner_pid(p) == Some(inner)
                        && std::fs::metadata(format!("/proc/{p}/ns/pid"))
                            .is_ok_and(|m| m.ino() == self.ino)
                })
        });
        let p = found.unwrap_or(inner);
        if found.is_some() {
            self.map.insert(inner, p);
        }
        p
    }
}

/// Runs `f` on a thread that joined the network namespace of `pid` when it differs from ours
/// (sockets keep the namespace they were made in).
fn in_net_ns_of<T: Send>(pid: u32, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    use std::os::unix::fs::MetadataExt;
    let theirs = format!("/proc/{pid}/ns/net");
    let same = match (
        std::fs::metadata(&theirs),
        std::fs::metadata("/proc/self/ns/net"),
    ) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => true,
    };
    if same {
        return f();
    }
    let ns = std::fs::File::open(&theirs)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on this (short-lived) thread with a namespace descriptor we opened.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
    })
}

impl ShimTrace {
    /// Starts `cmd` with the shim preloaded. `stacks` selects the events that carry a stack.
    pub fn spawn(
        cmd: &mut Command,
        shim: &Path,
        stacks: StackEvents,
    ) -> Result<ShimTrace, HeapError> {
        Self::spawn_with(
            cmd,
            shim,
            ShimOptions {
                stacks,
                every_op: false,
            },
        )
    }

    /// Starts `cmd` with the shim preloaded, recording as `opts` says.
    pub fn spawn_with(
        cmd: &mut Command,
        shim: &Path,
        opts: ShimOptions,
    ) -> Result<ShimTrace, HeapError> {
        let stacks = opts.stacks;
        let mut fds = [0i32; 2];
        // SAFETY: socketpair writes two descriptors into the array we pass.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(HeapError::Io {
                context: "socketpair for the heap shim".into(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: both descriptors are fresh and owned by nobody else.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A larger receive queue lets the program run ahead of us a little (it blocks when full).
        let size: libc::c_int = 4 << 20;
        // SAFETY: setsockopt reads one c_int through a valid pointer.
        unsafe {
            libc::setsockopt(
                ours.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size as *const _ as *const libc::c_void,
                4,
            );
        }
        let child_fd = theirs.as_raw_fd();
        let mut preload = shim.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_PRELOAD") {
            preload.push(":");
            preload.push(old);
        }
        let mask = stacks.alloc as u32 | (stacks.realloc as u32) << 1 | (stacks.free as u32) << 2;
        cmd.env("LD_PRELOAD", preload)
            .env("ETWKIT_HEAP_FD", child_fd.to_string())
            .env("ETWKIT_HEAP_STACKS", mask.to_string());
        if opts.every_op {
            cmd.env("ETWKIT_HEAP_FULL", "1");
        } else {
            cmd.env_remove("ETWKIT_HEAP_FULL");
        }
        // SAFETY: runs in the forked child before exec; fcntl is async-signal-safe. It keeps the
        // shim's socket open across exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(child_fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| HeapError::Io {
            context: format!("cannot start {:?}", cmd.get_program()),
            source: e,
        })?;
        drop(theirs);
        Ok(ShimTrace::new(ours, Some(child), opts.every_op, None))
    }

    fn new(
        sock: OwnedFd,
        child: Option<Child>,
        every_op: bool,
        attached: Option<u32>,
    ) -> ShimTrace {
        let clock = perf::clocks_now();
        ShimTrace {
            attached,
            detach_sent: None,
            follow: false,
            last_detach_request: None,
            bye: false,
            clean_end: false,
            started: (clock.1 / 100) as i64 + 116_444_736_000_000_000,
            every_op,
            held: Default::default(),
            held_frees: Default::default(),
            marks: HashMap::new(),
            marks_checked: None,
            ended: Default::default(),
            seq: 0,
            last_time: i64::MIN,
            child,
            sock,
            stacks: HashMap::new(),
            maps: HashMap::new(),
            addrs: HashMap::new(),
            ready: Vec::new(),
            transient: Vec::new(),
            reallocs: HashMap::new(),
            anchors: None,
            clock,
            stop: Arc::new(AtomicBool::new(false)),
            stats: ShimStats::default(),
            pid_ns: None,
        }
    }

    /// Loads the shim into running process `pid` (ptrace, its own dlopen; see [`super::inject`]) and
    /// traces it from that moment until [`ShimTrace::stop_handle`] is set (then the process undoes
    /// the interposition and sends what it recorded) or it exits. `shim` must be a path the process
    /// can open. With `follow_forks`, children it forks later are traced too.
    pub fn attach(
        pid: u32,
        shim: &Path,
        opts: ShimOptions,
        follow_forks: bool,
    ) -> Result<ShimTrace, super::inject::InjectError> {
        use super::inject::InjectError;
        let failed = |what: &str, e: io::Error| InjectError::Failed(format!("{what}: {e}"));
        let nonce = perf::clocks_now().0 ^ ((pid as u64) << 32);
        let name = format!("etwkit-heap-{}-{nonce:x}", std::process::id());
        // In the target's network namespace: abstract socket names are per network namespace.
        let listener = in_net_ns_of(pid, || abstract_listener(&name))
            .map_err(|e| failed("listening for the shim", e))?;
        let mask = opts.stacks.alloc as u32
            | (opts.stacks.realloc as u32) << 1
            | (opts.stacks.free as u32) << 2;
        let flags = opts.every_op as u32 | (follow_forks as u32) << 1;
        let give_up = Arc::new(AtomicBool::new(false));
        let g = give_up.clone();
        let acceptor = std::thread::spawn(move || {
            accept_shim(listener, pid, [CONFIG_MAGIC, mask, flags, 0], &g)
        });
        let r = super::inject::inject_shim(pid, shim, nonce);
        give_up.store(true, Ordering::Relaxed);
        let sock = acceptor
            .join()
            .unwrap_or_else(|_| Err("the acceptor thread panicked".into()));
        let n = r?;
        if n < 0 {
            let e = io::Error::from_raw_os_error(-n as i32);
            return Err(InjectError::Failed(match -n as i32 {
                libc::EBUSY => format!("process {pid} is already traced by an etwkit heap shim"),
                _ => format!("the shim in process {pid} could not connect back: {e}"),
            }));
        }
        let sock = sock.map_err(InjectError::Failed)?;
        let size: libc::c_int = 4 << 20;
        // SAFETY: setsockopt reads one c_int through a valid pointer.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size as *const _ as *const libc::c_void,
                4,
            );
        }
        let mut t = ShimTrace::new(sock, None, opts.every_op, Some(pid));
        t.follow = follow_forks;
        t.pid_ns = PidNs::of(pid);
        Ok(t)
    }

    fn request_detach(&mut self) {
        let m = [DETACH_MAGIC, 0, 0, 0];
        // SAFETY: send reads 16 bytes from our array.
        unsafe {
            libc::send(
                self.sock.as_raw_fd(),
                m.as_ptr() as *const libc::c_void,
                16,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            );
        }
        self.last_detach_request = Some(std::time::Instant::now());
    }

    /// UTC FILETIME when tracing began (the attach, or the spawn).
    pub fn started(&self) -> i64 {
        self.started
    }

    /// The attached process, in attach mode.
    pub fn attached_pid(&self) -> Option<u32> {
        self.attached
    }

    /// Attach mode: the process confirmed the end of tracing (it undid its hooks and sent all it
    /// had), or exited.
    pub fn detached_cleanly(&self) -> bool {
        self.clean_end
    }

    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    pub fn stats(&self) -> &ShimStats {
        &self.stats
    }

    /// The executable mappings the shim announced, per process (for symbolizing).
    pub fn maps(&self) -> HashMap<u32, ProcessMaps> {
        self.maps.clone()
    }

    /// Reads until every process holding the socket (the command and its children) has exited or
    /// the stop flag is set; then delivers every operation in time order. `progress` is called
    /// with the number of records received so far, about once per datagram.
    pub fn process(
        &mut self,
        mut progress: impl FnMut(u64),
        mut f: impl FnMut(&HeapOp) -> ControlFlow<()>,
    ) -> Result<(), HeapError> {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            if self.stop.load(Ordering::Relaxed) {
                match (self.attached, self.detach_sent) {
                    (None, _) => break,
                    (Some(_), None) => {
                        // Ask the process to undo its hooks and send the rest; read until it has.
                        self.request_detach();
                        self.detach_sent = Some(std::time::Instant::now());
                    }
                    (Some(_), Some(t)) => {
                        if (self.bye && !self.follow) || t.elapsed() > DETACH_TIMEOUT {
                            break;
                        }
                        // Followed children share the socket: each takes one request; ask again
                        // until every copy of the socket is closed.
                        if self.follow
                            && self.last_detach_request.is_some_and(|r| {
                                r.elapsed() > std::time::Duration::from_millis(200)
                            })
                        {
                            self.request_detach();
                        }
                    }
                }
            }
            if let Some(pid) = self.attached.filter(|_| !self.follow) {
                if self.bye || (self.detach_sent.is_none() && !super::process_alive(pid)) {
                    // Detached, or gone (its last records are already queued: drain them).
                    self.stop.store(true, Ordering::Relaxed);
                    if !self.bye && self.detach_sent.is_none() {
                        self.detach_sent = Some(std::time::Instant::now());
                        self.bye = true;
                        self.clean_end = true;
                    }
                }
            }
            perf::poll_fds(&[self.sock.as_raw_fd()], 100).map_err(|e| HeapError::Io {
                context: "poll on the heap shim socket".into(),
                source: e,
            })?;
            // SAFETY: recv writes at most buf.len() bytes into our buffer.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n == 0 {
                // Every writer closed its end: for an attached process, it exited.
                self.clean_end |= self.attached.is_some_and(|p| !super::process_alive(p));
                break;
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                    if self.bye && !self.follow {
                        break; // nothing more queued
                    }
                    self.retire_dead_marks();
                    continue;
                }
                return Err(HeapError::Io {
                    context: "recv from the heap shim".into(),
                    source: e,
                });
            }
            self.stats.datagrams += 1;
            let msg = buf[..n as usize].to_vec();
            self.parse(&msg);
            progress(self.stats.records);
            if self.every_op {
                // Released up to the earliest mark of the processes still sending.
                let w = self.marks.values().copied().min().unwrap_or(0);
                if self.release(w, &mut f).is_break() {
                    return Ok(());
                }
                continue;
            }
            let w = self.marks.values().copied().min().unwrap_or(0);
            self.apply_frees(w);
            // Completed pairs can go now (their order does not matter to the analysis).
            let ready = std::mem::take(&mut self.ready);
            for op in &ready {
                if f(op).is_break() {
                    return Ok(());
                }
            }
        }
        if self.every_op {
            let _ = self.release(u64::MAX, &mut f);
            return Ok(());
        }
        self.apply_frees(u64::MAX);
        // Unpaired allocations are outstanding, unpaired frees hit blocks allocated before tracing
        // or inside the allocator; deliver them in time order after the pairs.
        let mut rest: Vec<(u64, HeapOp)> = Vec::new();
        for (_, st) in self.addrs.drain() {
            rest.extend(st.allocs);
            rest.extend(st.frees);
        }
        rest.sort_by_key(|r| r.0);
        let mut ready = std::mem::take(&mut self.ready);
        ready.extend(rest.into_iter().map(|(t, mut op)| {
            op.timestamp = self.filetime(t);
            op
        }));
        for op in &ready {
            if f(op).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// With nothing queued: a process that ended without its last mark (killed, `_exit`) has sent
    /// all it ever will, so its mark no longer holds the others' frees (or operations) back. Looked
    /// at every 200 ms at most; a process is retired once found ended at one look and the queue
    /// empty at a later one (whatever it sent while ending has been read by then).
    fn retire_dead_marks(&mut self) {
        let now = std::time::Instant::now();
        if self
            .marks_checked
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_millis(200))
        {
            return;
        }
        self.marks_checked = Some(now);
        for (&pid, m) in self.marks.iter_mut() {
            if *m != u64::MAX && !super::process_alive(pid) && !self.ended.insert(pid) {
                *m = u64::MAX;
            }
        }
    }

    /// Every-op mode: delivers, in time order, the held operations stamped before `w`.
    fn release(
        &mut self,
        w: u64,
        f: &mut impl FnMut(&HeapOp) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        while self.held.peek().is_some_and(|h| h.tsc < w) {
            let Held { tsc, mut op, .. } = self.held.pop().expect("peeked");
            // The tsc→time mapping is refined as anchors arrive: never let time go backwards.
            let t = self.filetime(tsc).max(self.last_time);
            self.last_time = t;
            op.timestamp = t;
            f(&op)?;
        }
        ControlFlow::Continue(())
    }

    /// Pairs the held frees stamped before `w`, in time order.
    fn apply_frees(&mut self, w: u64) {
        while self.held_frees.peek().is_some_and(|h| h.tsc < w) {
            let Held { tsc, op, .. } = self.held_frees.pop().expect("peeked");
            if let HeapOpKind::Free { address } = op.kind {
                self.add_free(tsc, op, address);
            }
        }
    }

    /// A free to pair once every thread of its process has sent what came before it (the marks).
    fn free_record(&mut self, tsc: u64, op: HeapOp) {
        let h = self.next_held(tsc, op);
        self.held_frees.push(h);
    }

    /// Every-op mode: an operation to release in time order once the marks pass it.
    fn hold(&mut self, tsc: u64, op: HeapOp) {
        let h = self.next_held(tsc, op);
        self.held.push(h);
    }

    /// `op` stamped `tsc`, numbered in arrival order (ties of `tsc` keep that order).
    fn next_held(&mut self, tsc: u64, op: HeapOp) -> Held {
        self.seq += 1;
        Held {
            tsc,
            seq: self.seq,
            op,
        }
    }

    /// Alloc/free pairs the shim counted without sending them: (pid, stack, api, count, bytes).
    pub fn transient(&self) -> &[Transient] {
        &self.transient
    }

    /// Reallocations per process.
    pub fn reallocs(&self) -> &HashMap<u32, u64> {
        &self.reallocs
    }

    fn add_alloc(&mut self, tsc: u64, op: HeapOp, address: u64) {
        let st = self.addrs.entry((op.pid, address)).or_default();
        // The earliest free after this allocation.
        let m = st
            .frees
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| *t > tsc)
            .min_by_key(|(_, (t, _))| *t)
            .map(|(i, _)| i);
        match m {
            Some(i) => {
                let (tf, mut free) = st.frees.swap_remove(i);
                let empty = st.allocs.is_empty() && st.frees.is_empty();
                let mut op = op;
                op.timestamp = self.filetime(tsc);
                free.timestamp = self.filetime(tf);
                let key = (op.pid, address);
                self.ready.push(op);
                self.ready.push(free);
                if empty {
                    self.addrs.remove(&key);
                }
            }
            None => st.allocs.push((tsc, op)),
        }
    }

    fn add_free(&mut self, tsc: u64, op: HeapOp, address: u64) {
        let st = self.addrs.entry((op.pid, address)).or_default();
        // The latest allocation before this free.
        let m = st
            .allocs
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| *t < tsc)
            .max_by_key(|(_, (t, _))| *t)
            .map(|(i, _)| i);
        match m {
            Some(i) => {
                let (ta, mut alloc) = st.allocs.swap_remove(i);
                let empty = st.allocs.is_empty() && st.frees.is_empty();
                let mut op = op;
                alloc.timestamp = self.filetime(ta);
                op.timestamp = self.filetime(tsc);
                let key = (op.pid, address);
                self.ready.push(alloc);
                self.ready.push(op);
                if empty {
                    self.addrs.remove(&key);
                }
            }
            None => st.frees.push((tsc, op)),
        }
    }

    fn filetime(&self, tsc: u64) -> i64 {
        let mono = match self.anchors {
            Some(((t0, m0), (t1, m1))) if t1 > t0 => {
                m0 as f64 + (tsc as f64 - t0 as f64) * (m1 - m0) as f64 / (t1 - t0) as f64
            }
            Some(((_, m0), _)) => m0 as f64,
            None => self.clock.0 as f64,
        };
        let real = self.clock.1 as f64 + (mono - self.clock.0 as f64);
        (real / 100.0) as i64 + 116_444_736_000_000_000
    }

    fn parse(&mut self, msg: &[u8]) {
        let w = |o: usize| {
            msg.get(o..o + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        let d = |o: usize| {
            msg.get(o..o + 4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        };
        let (Some(MAGIC), Some(pid), Some(tid), Some(len)) = (d(0), d(4), d(8), d(12)) else {
            self.stats.malformed += 1;
            return;
        };
        let pid = match self.pid_ns.as_mut() {
            Some(ns) => ns.ours(pid),
            None => pid,
        };
        self.marks.entry(pid).or_insert(0);
        let end = (16 + len as usize).min(msg.len());
        let mut o = 16;
        while o + 8 <= end {
            let h = w(o).unwrap_or(0);
            let (t, api, count) = (h as u8, (h >> 8) as u8, (h >> 16) as u16 as usize);
            let api_name = ALLOCATOR_APIS
                .get(api as usize)
                .copied()
                .unwrap_or("malloc");
            let words = match t {
                T_ALLOC => 5,
                T_REALLOC => 6,
                T_FREE => 3 + count,
                T_STACK => 2 + count,
                T_CLOCK => 3,
                T_MODULE => 4 + count.div_ceil(8),
                T_TRANSIENT => 4,
                T_MARK => 2,
                T_BYE => 2,
                _ => {
                    self.stats.malformed += 1;
                    return;
                }
            };
            if o + words * 8 > end {
                self.stats.malformed += 1;
                return;
            }
            let at = |i: usize| w(o + 8 * i).unwrap_or(0);
            self.stats.records += 1;
            let stack_of = |this: &mut Self, id: u64| -> Option<Arc<[u64]>> {
                if id == 0 {
                    return None;
                }
                let s = this.stacks.get(&(pid, id)).cloned();
                if s.is_none() {
                    this.stats.unknown_stacks += 1;
                }
                s
            };
            match t {
                T_ALLOC => {
                    let stack = stack_of(self, at(4));
                    let op = HeapOp {
                        pid,
                        tid,
                        timestamp: 0,
                        api: api_name,
                        kind: HeapOpKind::Alloc {
                            address: at(2),
                            size: at(3),
                        },
                        stack,
                    };
                    if self.every_op {
                        self.hold(at(1), op);
                    } else {
                        self.add_alloc(at(1), op, at(2));
                    }
                }
                T_REALLOC if self.every_op => {
                    let op = HeapOp {
                        pid,
                        tid,
                        timestamp: 0,
                        api: api_name,
                        kind: HeapOpKind::Realloc {
                            old_address: at(2),
                            new_address: at(3),
                            new_size: at(4),
                        },
                        stack: stack_of(self, at(5)),
                    };
                    self.hold(at(1), op);
                }
                T_MARK => {
                    let m = self.marks.entry(pid).or_insert(0);
                    *m = (*m).max(at(1));
                }
                T_BYE if Some(pid) == self.attached => {
                    self.bye = true;
                    self.clean_end = true;
                }
                T_REALLOC => {
                    let stack = stack_of(self, at(5));
                    // A reallocation frees the old block and allocates the new one at the same instant.
                    *self.reallocs.entry(pid).or_default() += 1;
                    let free = HeapOp {
                        pid,
                        tid,
                        timestamp: 0,
                        api: api_name,
                        kind: HeapOpKind::Free { address: at(2) },
                        stack: None,
                    };
                    self.free_record(at(1), free);
                    let alloc = HeapOp {
                        pid,
                        tid,
                        timestamp: 0,
                        api: api_name,
                        kind: HeapOpKind::Alloc {
                            address: at(3),
                            size: at(4),
                        },
                        stack,
                    };
                    self.add_alloc(at(1), alloc, at(3));
                }
                T_FREE => {
                    let kind = HeapOpKind::Free { address: at(2) };
                    let stack = if count > 0 {
                        stack_of(self, at(3))
                    } else {
                        None
                    };
                    let op = HeapOp {
                        pid,
                        tid,
                        timestamp: 0,
                        api: api_name,
                        kind,
                        stack,
                    };
                    if self.every_op {
                        self.hold(at(1), op);
                    } else {
                        self.free_record(at(1), op);
                    }
                }
                T_TRANSIENT => {
                    let stack = stack_of(self, at(1));
                    self.transient.push((pid, stack, api_name, at(2), at(3)));
                }
                T_STACK => {
                    let frames: Vec<u64> = (0..count).map(|i| at(2 + i)).collect();
                    self.stacks.insert((pid, at(1)), Arc::from(frames));
                }
                T_CLOCK => {
                    let a = (at(1), at(2));
                    self.anchors = Some(match self.anchors {
                        None => (a, a),
                        Some((first, last)) => (first, if a.0 > last.0 { a } else { last }),
                    });
                }
                T_MODULE => {
                    let bytes: Vec<u8> = (0..count.div_ceil(8))
                        .flat_map(|i| at(4 + i).to_le_bytes())
                        .take(count)
                        .collect();
                    let path = PathBuf::from(String::from_utf8_lossy(&bytes).into_owned());
                    self.maps.entry(pid).or_default().insert(Mapping {
                        start: at(1),
                        end: at(2),
                        pgoff: at(3),
                        path: Arc::from(path.as_path()),
                    });
                }
                _ => {}
            }
            o += words * 8;
        }
    }
}

/// A SOCK_SEQPACKET listener on the abstract Unix socket address `name`.
fn abstract_listener(name: &str) -> io::Result<OwnedFd> {
    // SAFETY: socket returns a fresh descriptor (checked).
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (i, b) in name.bytes().enumerate() {
        addr.sun_path[1 + i] = b as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    // SAFETY: bind and listen read a valid sockaddr_un of `len` bytes.
    unsafe {
        if libc::bind(
            fd.as_raw_fd(),
            &addr as *const _ as *const libc::sockaddr,
            len,
        ) != 0
            || libc::listen(fd.as_raw_fd(), 4) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

/// Accepts the shim's connection from process `pid` (checked with SO_PEERCRED) and sends it the
/// configuration; gives up when `give_up` is set and nothing came.
fn accept_shim(
    listener: OwnedFd,
    pid: u32,
    config: [u32; 4],
    give_up: &AtomicBool,
) -> Result<OwnedFd, String> {
    loop {
        perf::poll_fds(&[listener.as_raw_fd()], 100)
            .map_err(|e| format!("waiting for the shim to connect: {e}"))?;
        // SAFETY: accept4 with null address pointers returns a fresh descriptor or -1.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if fd < 0 {
            if give_up.load(Ordering::Relaxed) {
                return Err(format!("the shim in process {pid} did not connect back"));
            }
            continue;
        }
        // SAFETY: fd is fresh and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes into it.
        let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let ok = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                &mut cred as *mut _ as *mut libc::c_void,
                &mut len,
            )
        } == 0;
        if !ok || cred.pid as u32 != pid {
            continue; // not the process we loaded the shim into
        }
        super::inject::die_at(9);
        // SAFETY: send reads 16 bytes from the array.
        let sent = unsafe {
            libc::send(
                fd.as_raw_fd(),
                config.as_ptr() as *const libc::c_void,
                16,
                libc::MSG_NOSIGNAL,
            )
        };
        if sent != 16 {
            return Err(format!(
                "sending the configuration to process {pid}: {}",
                io::Error::last_os_error()
            ));
        }
        return Ok(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory that cannot be made is named in the error (the heap command shows it as "the
    /// built-in shim could not be written out (...)").
    #[test]
    fn installed_copy_names_the_directory_it_cannot_make() {
        let base = std::env::temp_dir().join(format!("etwkit-shim-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("file");
        std::fs::write(&file, b"x").unwrap();
        let dir = file.join("etwkit");
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let e = installed_copy_in(&dir, uid, b"shim").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: Not a directory (os error 20)", dir.display())
        );
        // And where it can, the copy is made and found again.
        let ok = base.join("ok");
        let p = installed_copy_in(&ok, uid, b"shim").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"shim");
        assert_eq!(installed_copy_in(&ok, uid, b"shim").unwrap(), p);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
