//! The kernel side: the syscalls and socket tracepoints the correlator reads, and where their raw
//! fields sit (offsets from each event's tracefs `format`).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sys {
    Socket,
    Bind,
    Listen,
    Connect,
    Accept,
    Accept4,
    Close,
    Shutdown,
    SendTo,
    RecvFrom,
    SendMsg,
    RecvMsg,
    SetSockOpt,
    Ioctl,
    Poll,
    PPoll,
    Select,
    PSelect6,
    EpollCtl,
    Dup,
    Dup2,
    Dup3,
    Fcntl,
    Write,
    Read,
    Writev,
    Readv,
}

pub(super) const SYSCALLS: &[(Sys, &str, &[&str], bool)] = &[
    (
        Sys::Socket,
        "socket",
        &["family", "type", "protocol"],
        false,
    ),
    (Sys::Bind, "bind", &["fd"], false),
    (Sys::Listen, "listen", &["fd", "backlog"], false),
    (Sys::Connect, "connect", &["fd"], false),
    (Sys::Accept, "accept", &["fd"], false),
    (Sys::Accept4, "accept4", &["fd"], false),
    (Sys::Close, "close", &["fd"], false),
    (Sys::Shutdown, "shutdown", &["fd", "how"], false),
    (Sys::SendTo, "sendto", &["fd", "buff", "len", "addr"], false),
    (
        Sys::RecvFrom,
        "recvfrom",
        &["fd", "ubuf", "size", "addr"],
        false,
    ),
    (Sys::SendMsg, "sendmsg", &["fd"], false),
    (Sys::RecvMsg, "recvmsg", &["fd"], false),
    (
        Sys::SetSockOpt,
        "setsockopt",
        &["fd", "level", "optname"],
        false,
    ),
    (Sys::Ioctl, "ioctl", &["fd", "cmd"], false),
    (Sys::Poll, "poll", &["nfds", "timeout_msecs"], true),
    (Sys::PPoll, "ppoll", &["nfds"], true),
    (Sys::Select, "select", &["n"], true),
    (Sys::PSelect6, "pselect6", &["n"], true),
    (Sys::EpollCtl, "epoll_ctl", &["epfd", "op", "fd"], true),
    (Sys::Dup, "dup", &["fildes"], false),
    (Sys::Dup2, "dup2", &["oldfd", "newfd"], false),
    (Sys::Dup3, "dup3", &["oldfd", "newfd"], false),
    (Sys::Fcntl, "fcntl", &["fd", "cmd"], false),
    (Sys::Write, "write", &["fd", "buf", "count"], true),
    (Sys::Read, "read", &["fd", "buf", "count"], true),
    (Sys::Writev, "writev", &["fd", "vec", "vlen"], true),
    (Sys::Readv, "readv", &["fd", "vec", "vlen"], true),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tp {
    Enter(Sys),
    Exit(Sys),
    SetState,
    SendLen,
    RecvLen,
    ErrReport,
    RecvReset,
    SendReset,
    Destroy,
    UdpFail,
    DataReady,
    /// A route lookup (fib:fib_table_lookup, fib6:fib6_table_lookup) made inside a syscall of ours.
    Fib {
        v6: bool,
    },
}

/// (offset, size, signed) of up to 6 fields.
pub(super) type Offs = [(usize, usize, bool); 6];

pub(super) struct TpInfo {
    pub(super) tp: Tp,
    pub(super) offs: Offs,
}

pub(super) const NET: &[(&str, &str, &[&str], bool)] = &[
    (
        "sock",
        "inet_sock_set_state",
        &[
            "skaddr", "oldstate", "newstate", "sport", "dport", "protocol",
        ],
        false,
    ),
    (
        "sock",
        "sock_send_length",
        &["sk", "family", "ret", "protocol"],
        false,
    ),
    (
        "sock",
        "sock_recv_length",
        &["sk", "family", "ret", "protocol"],
        false,
    ),
    (
        "sock",
        "inet_sk_error_report",
        &["error", "sport", "dport", "protocol", "family"],
        false,
    ),
    ("tcp", "tcp_receive_reset", &["skaddr"], false),
    ("tcp", "tcp_send_reset", &["skaddr"], false),
    ("tcp", "tcp_destroy_sock", &["skaddr", "sport"], false),
    (
        "udp",
        "udp_fail_queue_rcv_skb",
        &["rc", "sport", "dport", "family"],
        false,
    ),
    (
        "sock",
        "sk_data_ready",
        &["skaddr", "family", "protocol"],
        true,
    ),
];

/// Where the raw-field offsets of the events this correlator needs come from.
pub(super) struct Formats {
    pub(super) sys_offsets: HashMap<u16, TpInfo>,
    pub(super) net_offsets: HashMap<u16, TpInfo>,
    pub(super) ret_off: HashMap<u16, (usize, usize)>,
    /// (instance, system, event, id) of every tracepoint to enable.
    pub(super) enable: Vec<(usize, String, String, u16)>,
    pub(super) set_state_addrs: Option<AddrOffs>,
    /// inet_sk_error_report's addresses (same field names as set_state's).
    pub(super) err_addrs: Option<AddrOffs>,
    /// tcp_destroy_sock's addresses (likewise).
    pub(super) destroy_addrs: Option<AddrOffs>,
    /// Route lookups on the filtered instance: event id → (kind, offsets of proto, sport, src).
    pub(super) fib: HashMap<u16, (Tp, Offs)>,
    pub(super) udp_saddr: Option<(usize, usize)>,
    pub(super) udp_daddr: Option<(usize, usize)>,
    /// uprobe event id → (which call, offsets of fd, family, port, a4, a6).
    pub(super) uprobes: HashMap<u16, (Sys, Offs)>,
}

#[derive(Clone, Copy)]
pub(super) struct AddrOffs {
    pub(super) family: usize,
    pub(super) saddr: usize,
    pub(super) daddr: usize,
    pub(super) saddr6: usize,
    pub(super) daddr6: usize,
}

impl AddrOffs {
    /// The family and address fields of a sock/tcp tracepoint (`family`, `saddr`, `daddr`, `saddr_v6`,
    /// `daddr_v6`), when it has all of them.
    pub(super) fn of(f: &EventFormat) -> Option<AddrOffs> {
        let g = |n: &str| f.field(n).map(|x| x.offset);
        Some(AddrOffs {
            family: g("family")?,
            saddr: g("saddr")?,
            daddr: g("daddr")?,
            saddr6: g("saddr_v6")?,
            daddr6: g("daddr_v6")?,
        })
    }

    /// (source, destination) of one record, with the ports given.
    pub(super) fn read(
        &self,
        data: &[u8],
        sport: u16,
        dport: u16,
    ) -> (Option<SockAddr>, Option<SockAddr>) {
        let family = read_uint(data, self.family, 2).unwrap_or(0) as i32;
        let b4 = |off: usize| -> Option<[u8; 4]> { data.get(off..off + 4)?.try_into().ok() };
        let b16 = |off: usize| -> Option<[u8; 16]> { data.get(off..off + 16)?.try_into().ok() };
        if family == libc::AF_INET6 {
            (
                b16(self.saddr6).map(|x| SockAddr::v6(x, sport)),
                b16(self.daddr6).map(|x| SockAddr::v6(x, dport)),
            )
        } else {
            (
                b4(self.saddr).map(|x| SockAddr::v4(x, sport)),
                b4(self.daddr).map(|x| SockAddr::v4(x, dport)),
            )
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it carries.
pub(super) fn unmapped(a: SockAddr) -> SockAddr {
    if a.v6 && a.addr[..10] == [0; 10] && a.addr[10..12] == [0xff, 0xff] {
        SockAddr::v4([a.addr[12], a.addr[13], a.addr[14], a.addr[15]], a.port)
    } else {
        a
    }
}

/// Whether a socket bound to `bound` receives what is addressed to `to`: same port, and the same
/// address or a wildcard bind (an IPv6 wildcard also takes IPv4). Another process may use the same
/// port on another address (127.0.0.1 and ::1 are different endpoints), so the port alone is not
/// enough to name our socket.
pub(super) fn accepts(bound: SockAddr, to: SockAddr) -> bool {
    let (b, t) = (unmapped(bound), unmapped(to));
    if b.port != t.port {
        return false;
    }
    if b.addr == [0; 16] {
        return b.v6 || !t.v6;
    }
    b.v6 == t.v6 && b.addr == t.addr
}

pub(super) fn offs_of(f: &EventFormat, names: &[&str]) -> Result<Offs, LiveError> {
    let mut o = [(0usize, 0usize, false); 6];
    for (i, n) in names.iter().enumerate() {
        let fld = f.field(n).ok_or_else(|| {
            LiveError::Other(format!(
                "tracepoint {}:{} has no field {n} on this kernel",
                f.system, f.name
            ))
        })?;
        o[i] = (fld.offset, fld.size, fld.signed);
    }
    Ok(o)
}

#[inline]
pub(super) fn get(data: &[u8], o: (usize, usize, bool)) -> i64 {
    read_field(data, o.0, o.1, o.2).unwrap_or(0)
}

/// Whether a tracepoint record was written in interrupt context (hard or soft IRQ, NMI), where
/// `common_pid` is merely the thread that was interrupted (`common_flags` bits).
pub(super) fn in_interrupt(data: &[u8]) -> bool {
    const HARDIRQ: u8 = 0x08;
    const SOFTIRQ: u8 = 0x10;
    const NMI: u8 = 0x40;
    data.get(2)
        .is_some_and(|f| f & (HARDIRQ | SOFTIRQ | NMI) != 0)
}

pub(super) fn to_family(a: SockAddr, v6: bool) -> SockAddr {
    if a.v6 == v6 {
        return a;
    }
    if v6 {
        // IPv4 peer of a dual-stack socket: ::ffff:a.b.c.d
        let mut b = [0u8; 16];
        b[10] = 0xff;
        b[11] = 0xff;
        b[12..].copy_from_slice(&a.addr[..4]);
        SockAddr::v6(b, a.port)
    } else {
        a
    }
}
