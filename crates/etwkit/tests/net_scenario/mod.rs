//! The network workload as rows of `etwkit net`, described once: which sockets it opens, in which
//! order, their addresses, byte counts and failures. The live Linux test checks a real run against
//! it (numbers from the workload's own report); the Windows-format test writes AFD events for the
//! same sockets and checks the file against it.
#![allow(dead_code)]

pub mod windows;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use etwkit::analysis::net::{FailureKind, Os, SocketRow};

/// One TCP echo exchange.
#[derive(Clone, Debug)]
pub struct Echo {
    pub server_port: u16,
    pub client_port: u16,
    pub bytes: u64,
}

/// The numbers of one run of the workload.
#[derive(Clone, Debug)]
pub struct Params {
    pub v4: Echo,
    pub v6: Echo,
    pub refused_port: u16,
    pub busy_port: u16,
    pub reset_client_port: u16,
    pub reset_server_port: u16,
    pub udp_port: u16,
    pub udp_sent: u64,
    pub udp_received: u64,
    /// Size of each datagram.
    pub udp_size: u64,
}

#[cfg(target_os = "linux")]
impl Params {
    pub fn from_facts(f: &etwkit::live::linux::workload::Facts) -> Params {
        Params {
            v4: Echo {
                server_port: f.v4.server_port,
                client_port: f.v4.client_port,
                bytes: f.v4.bytes as u64,
            },
            v6: Echo {
                server_port: f.v6.server_port,
                client_port: f.v6.client_port,
                bytes: f.v6.bytes as u64,
            },
            refused_port: f.refused_port,
            busy_port: f.busy_port,
            reset_client_port: f.reset_client_port,
            reset_server_port: f.reset_server_port,
            udp_port: f.udp_port,
            udp_sent: f.udp_sent as u64,
            udp_received: f.udp_received as u64,
            udp_size: 1000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Listener,
    Client,
    Accepted,
    /// Bound, never listening: holds the refused port.
    Holder,
    RefusedClient,
    BusyListener,
    FailedBind,
    ResetListener,
    ResetClient,
    ResetServer,
    UdpReceiver,
    UdpSender,
}

/// What an address of a row must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Want {
    /// Unknown (no event says it).
    Unknown,
    Exact(SocketAddr),
    /// This address; the port is the kernel's choice, which the workload does not report.
    AnyPort(IpAddr),
    /// The local address of the named socket of the scenario.
    LocalOf(&'static str),
}

#[derive(Clone, Debug)]
pub struct WantFailure {
    pub kind: FailureKind,
    /// The code the event carries, per OS (None: the event carries none).
    pub linux: Option<i64>,
    pub windows: Option<i64>,
    /// The code of the newer (1000+) AFD events: an NTSTATUS.
    pub ntstatus: Option<i64>,
    /// The words the reason must contain.
    pub words: &'static str,
    pub count: u64,
}

/// One socket of the workload.
#[derive(Clone, Debug)]
pub struct Sock {
    pub name: &'static str,
    pub role: Role,
    pub v6: bool,
    pub udp: bool,
    pub local: Want,
    pub remote: Want,
    /// The local port is the kernel's choice for a bind to port 0 (see [`Lenience`]).
    pub kernel_chosen_bind: bool,
    /// The listener of an accepted socket, or the one a client connects to.
    pub listener: Option<&'static str>,
    pub tx: u64,
    pub rx: u64,
    pub failures: Vec<WantFailure>,
}

fn lo(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    }
}

const LO4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// The sockets in the order the workload opens them (the order of the rows).
pub fn sockets(p: &Params) -> Vec<Sock> {
    let tcp = |name, role, v6, local, remote, tx, rx, failures| Sock {
        name,
        role,
        v6,
        udp: false,
        local,
        remote,
        kernel_chosen_bind: matches!(
            role,
            Role::Listener | Role::Holder | Role::BusyListener | Role::ResetListener
        ),
        listener: None,
        tx,
        rx,
        failures,
    };
    let mut v = Vec::new();
    for (v6, e, tag) in [(false, &p.v4, "v4"), (true, &p.v6, "v6")] {
        let (l, c, s) = match tag {
            "v4" => ("v4 listener", "v4 client", "v4 server"),
            _ => ("v6 listener", "v6 client", "v6 server"),
        };
        v.push(tcp(
            l,
            Role::Listener,
            v6,
            Want::Exact(lo(v6, e.server_port)),
            Want::Unknown,
            0,
            0,
            vec![],
        ));
        v.push(tcp(
            c,
            Role::Client,
            v6,
            Want::Exact(lo(v6, e.client_port)),
            Want::Exact(lo(v6, e.server_port)),
            e.bytes,
            e.bytes,
            vec![],
        ));
        v.push(tcp(
            s,
            Role::Accepted,
            v6,
            Want::Exact(lo(v6, e.server_port)),
            Want::Exact(lo(v6, e.client_port)),
            e.bytes,
            e.bytes,
            vec![],
        ));
    }
    v.push(tcp(
        "refused-port holder",
        Role::Holder,
        false,
        Want::Exact(lo(false, p.refused_port)),
        Want::Unknown,
        0,
        0,
        vec![],
    ));
    v.push(tcp(
        "refused client",
        Role::RefusedClient,
        false,
        Want::Unknown,
        Want::Exact(lo(false, p.refused_port)),
        0,
        0,
        vec![WantFailure {
            kind: FailureKind::ConnectFailed,
            linux: Some(111),
            windows: Some(10061),
            ntstatus: Some(0xC000_0236),
            words: "connection refused",
            count: 1,
        }],
    ));
    v.push(tcp(
        "busy listener",
        Role::BusyListener,
        false,
        Want::Exact(lo(false, p.busy_port)),
        Want::Unknown,
        0,
        0,
        vec![],
    ));
    v.push(tcp(
        "bind to the busy port",
        Role::FailedBind,
        false,
        Want::Unknown,
        Want::Unknown,
        0,
        0,
        vec![WantFailure {
            kind: FailureKind::BindFailed,
            linux: Some(98),
            windows: Some(10048),
            ntstatus: Some(0xC000_020A),
            words: "address already in use",
            count: 1,
        }],
    ));
    v.push(tcp(
        "reset listener",
        Role::ResetListener,
        false,
        Want::Exact(lo(false, p.reset_server_port)),
        Want::Unknown,
        0,
        0,
        vec![],
    ));
    v.push(tcp(
        "reset client",
        Role::ResetClient,
        false,
        Want::Exact(lo(false, p.reset_client_port)),
        Want::Exact(lo(false, p.reset_server_port)),
        0,
        0,
        vec![
            WantFailure {
                kind: FailureKind::TransportAbort,
                linux: None,
                windows: None,
                ntstatus: None,
                words: "reset by peer",
                count: 1,
            },
            WantFailure {
                kind: FailureKind::ReceiveFailed,
                linux: Some(104),
                windows: Some(10054),
                ntstatus: Some(0xC000_020D),
                words: "connection reset by peer",
                count: 1,
            },
        ],
    ));
    v.push(tcp(
        "reset server",
        Role::ResetServer,
        false,
        Want::Exact(lo(false, p.reset_server_port)),
        Want::Exact(lo(false, p.reset_client_port)),
        0,
        0,
        vec![WantFailure {
            kind: FailureKind::AfdAbort,
            linux: None,
            windows: None,
            ntstatus: None,
            words: "reset sent",
            count: 1,
        }],
    ));
    for k in v.iter_mut() {
        k.listener = match k.name {
            "v4 client" | "v4 server" => Some("v4 listener"),
            "v6 client" | "v6 server" => Some("v6 listener"),
            "reset client" | "reset server" => Some("reset listener"),
            _ => None,
        };
    }
    v.push(Sock {
        name: "udp receiver",
        role: Role::UdpReceiver,
        v6: false,
        udp: true,
        local: Want::Exact(lo(false, p.udp_port)),
        remote: Want::LocalOf("udp sender"),
        kernel_chosen_bind: false,
        listener: None,
        tx: 0,
        rx: p.udp_received * p.udp_size,
        failures: vec![WantFailure {
            kind: FailureKind::DatagramDropped,
            linux: None,
            windows: None,
            ntstatus: None,
            words: "datagrams dropped",
            count: p.udp_sent - p.udp_received,
        }],
    });
    v.push(Sock {
        name: "udp sender",
        role: Role::UdpSender,
        v6: false,
        udp: true,
        local: Want::AnyPort(LO4),
        remote: Want::Exact(lo(false, p.udp_port)),
        kernel_chosen_bind: false,
        listener: None,
        tx: p.udp_sent * p.udp_size,
        rx: 0,
        failures: vec![],
    });
    v
}

fn fmt(a: Option<SocketAddr>) -> String {
    etwkit::analysis::net::fmt_addr(a.as_ref())
}

/// Whose codes the failures carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codes {
    Errno,
    Wsa,
    NtStatus,
}

/// How a kernel-chosen bind port (a bind to port 0: the listeners, the refused-port holder) is
/// checked. Windows events carry it; the Linux provider learns it after the call and, when it could
/// not before the socket was gone, sends the bind without Address/Port (docs/winsock-linux.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lenience {
    /// Exactly right.
    Exact,
    /// Right or unknown, never wrong; what the analysis derives from an unknown one must follow:
    /// an accepted socket's local address is its listener's row's, and a client's local address
    /// is exactly right when its listener's is, else right or unknown.
    RightOrUnknown,
}

/// What [`check`] saw of the kernel-chosen bind ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChosenPorts {
    pub right: usize,
    pub unknown: usize,
}

/// Checks `rows` (one process's rows, in report order) against the scenario.
pub fn check(
    rows: &[&SocketRow],
    p: &Params,
    codes: Codes,
    pid: u32,
    process: Option<&str>,
    lenience: Lenience,
) -> ChosenPorts {
    let want = sockets(p);
    let os = if codes == Codes::Errno {
        Os::Linux
    } else {
        Os::Windows
    };
    let table = rows
        .iter()
        .map(|r| {
            format!(
                "{:>6} {:<5} {:<22} {:<22} tx {:>6} rx {:>6} {} [{}]",
                r.pid,
                r.protocol.clone().unwrap_or_default(),
                fmt(r.local),
                fmt(r.remote),
                r.tx_bytes,
                r.rx_bytes,
                r.outcome,
                r.failures
                    .iter()
                    .map(|f| format!("{} x{}", f.reason, f.count))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        rows.len(),
        want.len(),
        "one row per socket the workload opened ({os:?}); params {p:?}; rows:\n{table}"
    );
    let mut chosen = ChosenPorts::default();
    let local_of = |name: &str| {
        let i = want.iter().position(|w| w.name == name).unwrap();
        rows[i].local
    };
    let lenient = lenience == Lenience::RightOrUnknown;
    // Whether a listener's row has its exact address.
    let listener_right = |name: &str| {
        let i = want.iter().position(|w| w.name == name).unwrap();
        matches!(&want[i].local, Want::Exact(a) if rows[i].local == Some(*a))
    };
    for (w, r) in want.iter().zip(rows) {
        let ctx = format!("{} ({os:?}); rows:\n{table}", w.name);
        assert_eq!(r.pid, pid, "{ctx}");
        assert_eq!(r.os, os, "{ctx}");
        if let Some(name) = process {
            assert_eq!(r.process.as_deref(), Some(name), "{ctx}");
        }
        assert_eq!(
            r.protocol.as_deref(),
            Some(if w.udp { "UDP" } else { "TCP" }),
            "{ctx}"
        );
        assert_eq!(r.family, Some(if w.v6 { "IPv6" } else { "IPv4" }), "{ctx}");
        // Local address.
        let via_listener = w.listener.filter(|l| lenient && !listener_right(l));
        match (&w.local, r.local) {
            (Want::Unknown, got) => assert_eq!(got, None, "local of {ctx}"),
            (Want::Exact(a), got) if w.kernel_chosen_bind => {
                if got == Some(*a) {
                    chosen.right += 1;
                } else {
                    assert!(
                        lenient && got.is_none_or(|g| g.port() == 0),
                        "local of {ctx}: expected {a} (or unknown), got {}",
                        fmt(got)
                    );
                    chosen.unknown += 1;
                }
            }
            (Want::Exact(_), got) if via_listener.is_some() && w.remote != Want::Unknown => {
                let l = via_listener.unwrap();
                match w.role {
                    // Accepted: the listener's address, as far as it is known.
                    Role::Accepted | Role::ResetServer => {
                        assert_eq!(got, local_of(l), "local of {ctx}")
                    }
                    // Client: joined with a listener of unknown port, or not joined.
                    _ => assert!(
                        got.is_none()
                            || got
                                == Some(match &w.local {
                                    Want::Exact(a) => *a,
                                    _ => unreachable!(),
                                }),
                        "local of {ctx}"
                    ),
                }
            }
            (Want::Exact(a), got) => assert_eq!(got, Some(*a), "local of {ctx}"),
            (Want::AnyPort(ip), got) => {
                let got = got.unwrap_or_else(|| panic!("local of {ctx}"));
                assert_eq!(got.ip(), *ip, "local of {ctx}");
                assert_ne!(got.port(), 0, "local port of {ctx}");
            }
            (Want::LocalOf(_), _) => unreachable!(),
        }
        match &w.remote {
            Want::Unknown => assert_eq!(r.remote, None, "remote of {ctx}"),
            Want::Exact(a) => assert_eq!(r.remote, Some(*a), "remote of {ctx}"),
            Want::AnyPort(_) => unreachable!(),
            Want::LocalOf(n) => {
                let other = local_of(n);
                assert!(other.is_some_and(|o| o.port() != 0), "local of {n}; {ctx}");
                assert_eq!(r.remote, other, "remote of {ctx}");
            }
        }
        assert_eq!((r.tx_bytes, r.rx_bytes), (w.tx, w.rx), "bytes of {ctx}");
        assert_eq!(r.state, "closed", "{ctx}");
        assert_eq!(
            r.failures.len(),
            w.failures.len(),
            "failures of {ctx}: {:#?}",
            r.failures
        );
        for wf in &w.failures {
            let f = r
                .failures
                .iter()
                .find(|f| f.kind == wf.kind)
                .unwrap_or_else(|| panic!("{:?} on {ctx}", wf.kind));
            let code = match codes {
                Codes::Errno => wf.linux,
                Codes::Wsa => wf.windows,
                Codes::NtStatus => wf.ntstatus,
            };
            assert_eq!(f.code.as_ref().map(|c| c.code), code, "code of {ctx}");
            assert!(
                f.reason.contains(wf.words),
                "reason {:?} says {:?}; {ctx}",
                f.reason,
                wf.words
            );
            assert_eq!(f.count, wf.count, "count of {:?}; {ctx}", wf.kind);
            if let Some(c) = &f.code {
                assert_eq!(c.words, Some(wf.words), "{ctx}");
                assert!(c.symbol.is_some(), "{ctx}");
            }
        }
    }
    chosen
}
