//! Reading a traced process's socket addresses through a duplicate of its descriptor
//! (`pidfd_open` + `pidfd_getfd`, Linux 5.6+, needs ptrace rights: root).
//!
//! Syscall tracepoints carry `struct sockaddr *` as a user pointer the kernel does not dereference, so
//! the addresses of `bind` (all of UDP) and UDP `connect` come from `getsockname`/`getpeername` on a
//! duplicate of the traced descriptor, taken when the correlator handles the syscall's exit.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A socket address: IPv4 addresses are kept in the first 4 bytes of `addr`; the port in host order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SockAddr {
    pub v6: bool,
    pub addr: [u8; 16],
    pub port: u16,
}

impl SockAddr {
    /// Parses a kernel `struct sockaddr_in`/`sockaddr_in6` image (family u16 LE, port BE, address).
    pub fn from_sockaddr(b: &[u8]) -> Option<SockAddr> {
        let family = u16::from_le_bytes([*b.first()?, *b.get(1)?]);
        let port = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
        let mut addr = [0u8; 16];
        match family as i32 {
            libc::AF_INET => {
                addr[..4].copy_from_slice(b.get(4..8)?);
                Some(SockAddr {
                    v6: false,
                    addr,
                    port,
                })
            }
            libc::AF_INET6 => {
                addr.copy_from_slice(b.get(8..24)?);
                Some(SockAddr {
                    v6: true,
                    addr,
                    port,
                })
            }
            _ => None,
        }
    }

    pub fn v4(a: [u8; 4], port: u16) -> SockAddr {
        let mut addr = [0u8; 16];
        addr[..4].copy_from_slice(&a);
        SockAddr {
            v6: false,
            addr,
            port,
        }
    }

    pub fn v6(a: [u8; 16], port: u16) -> SockAddr {
        SockAddr {
            v6: true,
            addr: a,
            port,
        }
    }
}

/// The process (thread group) a thread belongs to, from `/proc/TID/status`.
pub fn tgid_of(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// What [`peek`] found: the socket's family/type and its local or peer address.
#[derive(Clone, Copy, Debug)]
pub struct Peek {
    pub sock_type: i32,
    pub addr: Option<SockAddr>,
}

/// `getsockname` (or `getpeername` when `peer`) of descriptor `fd` of process `pid`.
pub fn peek(pid: u32, fd: i32, peer: bool) -> Option<Peek> {
    // SAFETY: plain syscalls with integer arguments; a returned descriptor is owned right away.
    let pidfd =
        unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0 as libc::c_uint) };
    if pidfd < 0 {
        return None;
    }
    // SAFETY: pidfd is a fresh descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    // SAFETY: as above.
    let dup = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd(),
            fd as libc::c_int,
            0 as libc::c_uint,
        )
    };
    if dup < 0 {
        return None;
    }
    // SAFETY: dup is a fresh descriptor we own.
    let dup = unsafe { OwnedFd::from_raw_fd(dup as i32) };
    let mut sock_type: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: sock_type/len are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            dup.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut sock_type as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None; // not a socket (any more)
    }
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut sl = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: p points to a sockaddr_storage of sl bytes.
    let rc = unsafe {
        if peer {
            libc::getpeername(dup.as_raw_fd(), p, &mut sl)
        } else {
            libc::getsockname(dup.as_raw_fd(), p, &mut sl)
        }
    };
    let addr = if rc == 0 {
        // SAFETY: ss is sl (<= its size) initialised bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&ss as *const libc::sockaddr_storage).cast::<u8>(),
                sl as usize,
            )
        };
        SockAddr::from_sockaddr(bytes)
    } else {
        None
    };
    Some(Peek { sock_type, addr })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn peeks_own_socket() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
        // Needs ptrace rights over ourselves, which every process has.
        let p = peek(std::process::id(), fd, false).expect("pidfd_getfd on own process");
        assert_eq!(p.sock_type, libc::SOCK_DGRAM);
        assert_eq!(p.addr, Some(SockAddr::v4([127, 0, 0, 1], port)));
    }
}

#[cfg(test)]
mod tests_v6 {
    use super::*;
    #[test]
    fn peeks_own_v6_socket() {
        let s = std::net::TcpListener::bind("[::1]:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
        let p = peek(std::process::id(), fd, false).expect("pidfd_getfd on own process");
        assert_eq!(p.sock_type, libc::SOCK_STREAM);
        let mut a = [0u8; 16];
        a[15] = 1;
        assert_eq!(p.addr, Some(SockAddr::v6(a, port)));
    }
}
