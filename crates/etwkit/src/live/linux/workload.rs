//! The built-in network workload: a loopback TCP echo over IPv4 and IPv6, a refused connect, a bind
//! to a busy port, a peer reset and a UDP burst that overflows a small receive buffer. It returns what
//! it did (pids, tids, ports, byte counts) so a trace of it can be checked against the facts.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// One TCP echo exchange.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct EchoFacts {
    pub client_tid: u32,
    pub server_tid: u32,
    pub server_addr: String,
    pub server_port: u16,
    pub client_port: u16,
    pub bytes: usize,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Facts {
    pub pid: u32,
    pub v4: EchoFacts,
    pub v6: EchoFacts,
    pub refused_port: u16,
    pub refused_errno: i32,
    pub refused_tid: u32,
    pub busy_port: u16,
    pub bind_errno: i32,
    pub reset_client_port: u16,
    pub reset_server_port: u16,
    pub reset_errno: i32,
    pub udp_port: u16,
    pub udp_sent: u32,
    pub udp_received: u32,
    pub udp_tid: u32,
    /// Every successful bind, in order, as the kernel reported it (`getsockname`): `addr:port`.
    #[serde(default)]
    pub bound: Vec<String>,
    /// Sockets bound and closed again only because the kernel gave them a port an earlier step
    /// used (IPv4 and IPv6 ports are chosen apart): each is one more socket in a trace of the run.
    #[serde(default)]
    pub port_retries: u32,
}

/// Sockets given up for their port so far (see [`Facts::port_retries`]).
static RETRIES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Successful binds of this run (the binds happen in one thread, but helpers have no `Facts`).
static BOUND: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn bound(a: SocketAddr) {
    BOUND
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(a.to_string());
}

fn tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn setsockopt_int(fd: i32, level: i32, name: i32, v: i32) -> std::io::Result<()> {
    // SAFETY: v lives for the call; its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn echo(addr: SocketAddr, bytes: usize) -> std::io::Result<EchoFacts> {
    let listener = TcpListener::bind(addr)?;
    bound(listener.local_addr()?);
    let server_addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<u32> {
        let (mut s, _) = listener.accept()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)?;
        s.write_all(&buf)?;
        drop(s);
        Ok(tid())
    });
    let mut c = TcpStream::connect(server_addr)?;
    let client_port = c.local_addr()?.port();
    let payload: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    c.write_all(&payload)?;
    c.shutdown(Shutdown::Write)?;
    let mut back = Vec::new();
    c.read_to_end(&mut back)?;
    if back != payload {
        return Err(std::io::Error::other("echo mismatch"));
    }
    drop(c);
    let server_tid = server
        .join()
        .map_err(|_| std::io::Error::other("server thread panicked"))??;
    Ok(EchoFacts {
        client_tid: tid(),
        server_tid,
        server_addr: server_addr.ip().to_string(),
        server_port: server_addr.port(),
        client_port,
        bytes,
    })
}

/// A loopback listener whose port is none of `used`.
fn listener_except(used: &[u16]) -> std::io::Result<TcpListener> {
    loop {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        bound(l.local_addr()?);
        if !used.contains(&l.local_addr()?.port()) {
            return Ok(l);
        }
        RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Names the step an error came from, so a failed workload says what failed.
fn step<T>(what: &str, r: std::io::Result<T>) -> std::io::Result<T> {
    r.map_err(|e| std::io::Error::new(e.kind(), format!("{what}: {e}")))
}

/// Runs the workload and returns its facts.
pub fn run() -> std::io::Result<Facts> {
    let mut f = Facts {
        pid: std::process::id(),
        ..Default::default()
    };
    f.v4 = step(
        "IPv4 echo",
        echo(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), 1234),
    )?;
    f.v6 = step(
        "IPv6 echo",
        echo(SocketAddr::from((Ipv6Addr::LOCALHOST, 0)), 4321),
    )?;
    step("refused connect", refused(&mut f))?;
    step("bind to a busy port", busy_bind(&mut f))?;
    step("peer reset", reset(&mut f))?;
    step("UDP burst", udp_burst(&mut f))?;
    f.bound = std::mem::take(&mut *BOUND.lock().unwrap_or_else(|e| e.into_inner()));
    f.port_retries = RETRIES.swap(0, std::sync::atomic::Ordering::Relaxed);
    Ok(f)
}

/// A connect to a port nobody listens on. The port is held by a TCP socket of ours that is bound
/// without SO_REUSEADDR and never listens: connects to it are refused, and no other process (another
/// copy of this workload, say) can start listening there meanwhile, as it could on a port merely freed.
fn refused(f: &mut Facts) -> std::io::Result<()> {
    let (_holder, port) = unlistened_port_except(&[f.v4.server_port, f.v6.server_port])?;
    f.refused_port = port;
    f.refused_tid = tid();
    match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
        Ok(_) => Err(std::io::Error::other("connect to a closed port succeeded")),
        Err(e) => {
            f.refused_errno = e.raw_os_error().unwrap_or(0);
            Ok(())
        }
    }
}

/// A TCP socket bound to 127.0.0.1 on a kernel-chosen port (none of `used`), not listening.
fn unlistened_port_except(used: &[u16]) -> std::io::Result<(OwnedFd, u16)> {
    loop {
        // SAFETY: plain syscall with integer arguments; the descriptor is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(Ipv4Addr::LOCALHOST.octets());
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let p = (&mut sa as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
        // SAFETY: p points to a sockaddr_in of len bytes that lives for both calls.
        if unsafe { libc::bind(fd.as_raw_fd(), p, len) } != 0
            || unsafe { libc::getsockname(fd.as_raw_fd(), p, &mut len) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        let port = u16::from_be(sa.sin_port);
        bound(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        if !used.contains(&port) {
            return Ok((fd, port));
        }
        RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn busy_bind(f: &mut Facts) -> std::io::Result<()> {
    let busy = listener_except(&[f.v4.server_port, f.v6.server_port, f.refused_port])?;
    f.busy_port = busy.local_addr()?.port();
    match TcpListener::bind((Ipv4Addr::LOCALHOST, f.busy_port)) {
        Ok(_) => Err(std::io::Error::other("second bind succeeded")),
        Err(e) => {
            f.bind_errno = e.raw_os_error().unwrap_or(0);
            Ok(())
        }
    }
}

/// The server closes with SO_LINGER 0: the client's next read fails with ECONNRESET.
fn reset(f: &mut Facts) -> std::io::Result<()> {
    let l = listener_except(&[f.v4.server_port, f.v6.server_port, f.refused_port])?;
    f.reset_server_port = l.local_addr()?.port();
    let mut c = TcpStream::connect(l.local_addr()?)?;
    f.reset_client_port = c.local_addr()?.port();
    let (s, _) = l.accept()?;
    let lg = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: lg lives for the call; its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&lg as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    drop(s);
    let mut b = [0u8; 16];
    match c.read(&mut b) {
        Ok(n) => Err(std::io::Error::other(format!(
            "read after peer reset did not fail (returned {n})"
        ))),
        Err(e) => {
            f.reset_errno = e.raw_os_error().unwrap_or(0);
            Ok(())
        }
    }
}

/// 64 datagrams of 1000 bytes into a 2 KiB receive buffer, then whatever fits is read back.
fn udp_burst(f: &mut Facts) -> std::io::Result<()> {
    let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    bound(rx.local_addr()?);
    setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 2048)?;
    f.udp_port = rx.local_addr()?.port();
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    bound(tx.local_addr()?);
    f.udp_tid = tid();
    let dgram = [0x5au8; 1000];
    for _ in 0..64 {
        tx.send_to(&dgram, rx.local_addr()?)?;
        f.udp_sent += 1;
    }
    rx.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 2048];
    while rx.recv_from(&mut buf).is_ok() {
        f.udp_received += 1;
    }
    Ok(())
}

/// A syscall storm: `n` calls of `close(-1)` (each fails with EBADF without touching any file).
pub fn storm(n: u64) {
    for _ in 0..n {
        // SAFETY: closing descriptor -1 only returns EBADF.
        unsafe { libc::close(-1) };
    }
}
