//! The demo's loopback network workload for Windows, in plain std::net (so it also runs, and is
//! tested, elsewhere): a TCP echo over IPv4 and over IPv6 (when the machine has IPv6 loopback), a
//! refused connect, a bind to a busy port and a UDP burst. It returns what it did (pid, ports, byte
//! counts) so a trace of it can be checked against the facts; the Winsock-AFD provider reports each
//! step (socket creation, bind, connect, accept, send/receive, close).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

/// One TCP echo exchange.
#[derive(Clone, Debug, Default, serde::Serialize, PartialEq, Eq)]
pub struct EchoFacts {
    pub server_port: u16,
    pub client_port: u16,
    pub bytes: usize,
}

/// What the workload did.
#[derive(Clone, Debug, Default, serde::Serialize, PartialEq, Eq)]
pub struct Facts {
    pub pid: u32,
    pub v4: EchoFacts,
    /// `None` when the machine has no IPv6 loopback.
    pub v6: Option<EchoFacts>,
    pub refused_port: u16,
    pub busy_port: u16,
    pub udp_port: u16,
    pub udp_sent: u32,
}

fn echo(bind: SocketAddr) -> std::io::Result<EchoFacts> {
    let listener = TcpListener::bind(bind)?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = listener.accept()?;
        let mut buf = [0u8; 4096];
        let mut total = 0;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            s.write_all(&buf[..n])?;
            total += n;
        }
    });
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let client_port = c.local_addr()?.port();
    let msg = b"etwkit demo: hello over loopback";
    let mut back = [0u8; 32];
    for _ in 0..4 {
        c.write_all(msg)?;
        c.read_exact(&mut back)?;
        if &back != msg {
            return Err(std::io::Error::other("the echo came back different"));
        }
    }
    c.shutdown(std::net::Shutdown::Write)?;
    let bytes = server
        .join()
        .map_err(|_| std::io::Error::other("echo server panicked"))??;
    Ok(EchoFacts {
        server_port: addr.port(),
        client_port,
        bytes,
    })
}

/// Runs the workload in this process.
pub fn run() -> std::io::Result<Facts> {
    let v4 = echo((Ipv4Addr::LOCALHOST, 0).into())?;
    let v6 = echo((Ipv6Addr::LOCALHOST, 0).into()).ok();
    // A port that is bound (so nobody else listens there) but never listening: connects are refused.
    let holder = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let refused_port = holder.local_addr()?.port();
    drop(holder);
    let refused = TcpStream::connect_timeout(
        &(Ipv4Addr::LOCALHOST, refused_port).into(),
        Duration::from_secs(5),
    );
    if refused.is_ok() {
        return Err(std::io::Error::other(format!(
            "port {refused_port} accepted a connection that should have been refused"
        )));
    }
    // A second bind to a port in use fails.
    let busy = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let busy_port = busy.local_addr()?.port();
    if TcpListener::bind((Ipv4Addr::LOCALHOST, busy_port)).is_ok() {
        return Err(std::io::Error::other(format!(
            "a second bind to busy port {busy_port} succeeded"
        )));
    }
    drop(busy);
    // A UDP burst to a socket that reads some of it.
    let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    rx.set_read_timeout(Some(Duration::from_millis(200)))?;
    let udp_port = rx.local_addr()?.port();
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let mut udp_sent = 0;
    for i in 0..64u32 {
        tx.send_to(&i.to_le_bytes(), (Ipv4Addr::LOCALHOST, udp_port))?;
        udp_sent += 1;
    }
    let mut buf = [0u8; 16];
    while rx.recv_from(&mut buf).is_ok() {}
    Ok(Facts {
        pid: std::process::id(),
        v4,
        v6,
        refused_port,
        busy_port,
        udp_port,
        udp_sent,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn workload_runs_on_loopback() {
        let f = super::run().expect("loopback workload");
        assert_eq!(f.pid, std::process::id());
        assert_eq!(f.v4.bytes, 4 * 32, "four 32-byte echoes");
        assert_ne!(f.v4.server_port, f.v4.client_port);
        if let Some(v6) = &f.v6 {
            assert_eq!(v6.bytes, 128);
        }
        assert_ne!(f.refused_port, 0);
        assert_eq!(f.udp_sent, 64);
    }
}
