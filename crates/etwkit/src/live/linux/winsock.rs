//! The Winsock provider on Linux: socket activity reported with the Microsoft-Windows-Winsock-AFD event
//! ids (1–41) and property names, from syscall, sock, tcp and udp tracepoints.
//!
//! The correlator joins three identities: a process's descriptor `(tgid, fd)`, the kernel's socket
//! pointer `sk` (reused within milliseconds) and etwkit's own 64-bit socket id (the `Endpoint` value,
//! stable from create to close). On one thread `sys_enter_X(fd)` … `sock event(sk)` … `sys_exit_X`
//! nest, which binds fd to sk; accepted sockets are matched to the listener's queue (FIFO, as the
//! kernel's accept queue). Softirq events (connection indications, resets, drops, data indications) are
//! attributed to the socket's owner, never to whatever task the softirq interrupted.
//!
//! Fields Linux cannot supply are absent from an event's TraceLogging metadata (never invented); see
//! `docs/winsock-linux.md` for the source of each id.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;

use super::super::{EnableSpec, LiveError, ProviderRef};
use super::bindhold::{BindHold, PortState};
use super::early::{EarlyPeek, Watched};
use super::format::{read_field, read_int, read_uint, EventFormat};
use super::procfd::{self, SockAddr};
use crate::event::EventRecord;
use crate::guid::Guid;
use crate::tlg::{self, Arity, InType, OutType, TlInstance, TlSchema, TlSchemaBuilder};

pub const PROVIDER_NAME: &str = "Microsoft-Windows-Winsock-AFD";
pub const PROVIDER_GUID: Guid = Guid::from_str_const("e53c6823-7bb8-44bb-90dc-3f86090d48a6");
/// Keyword of the datagram-drop events (ut:Dropped).
pub const KW_DROPPED: u64 = 0x100_0000_0000;

/// Every AFD id this provider can report on Linux.
pub const EVENT_IDS: &[u16] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 40, 41,
];

/// Whether a provider reference names this provider (by GUID, full name, or `winsock`).
pub fn matches(p: &ProviderRef) -> bool {
    match p {
        ProviderRef::Guid(g) => *g == PROVIDER_GUID,
        ProviderRef::Name(n) => {
            n.eq_ignore_ascii_case(PROVIDER_NAME)
                || n.eq_ignore_ascii_case("winsock")
                || n.eq_ignore_ascii_case("winsock-afd")
        }
    }
}

/// Field value types, as the AFD manifest declares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum T {
    /// win:Pointer (HexInt64).
    Ptr,
    U32,
    I32,
    Hex32,
    /// win:UInt32 rendered win:IPv4 (network order bytes).
    V4,
    /// win:Binary\[16\] rendered win:IPv6.
    V6,
    /// win:UInt16 rendered win:Port (big-endian).
    Port,
    /// win:UInt32 status/error; on Linux the errno (0 = success).
    Err,
    Bool,
}

const PE: [(&str, T); 2] = [("Process", T::Ptr), ("Endpoint", T::Ptr)];

/// The AFD field list of an event id (names exactly as winsock-afd.json).
pub fn fields(id: u16) -> &'static [(&'static str, T)] {
    use T::*;
    match id {
        1 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("AddressFamily", U32),
            ("SocketType", U32),
            ("Protocol", U32),
            ("UserModePid", Ptr),
        ],
        2 | 15 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Address", V4),
            ("Port", Port),
            ("Status", Err),
        ],
        3 | 16 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Address", V6),
            ("Port", Port),
            ("Status", Err),
        ],
        4 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Address", V4),
            ("Port", Port),
        ],
        5 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Address", V6),
            ("Port", Port),
        ],
        6 | 9 | 10 | 11 | 12 | 13 | 14 | 17 | 31 | 40 => {
            &[("Process", Ptr), ("Endpoint", Ptr), ("Error", Err)]
        }
        7 | 8 => &[("Process", Ptr), ("Endpoint", Ptr), ("Reason", I32)],
        18..=20 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("FastPath", Bool),
            ("BufferCount", I32),
            ("Buffer", Ptr),
            ("BufferLength", Hex32),
        ],
        21 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("FastPath", Bool),
            ("BufferCount", I32),
            ("Buffer", Ptr),
            ("BufferLength", Hex32),
            ("Address", V4),
            ("Port", Port),
        ],
        22 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("FastPath", Bool),
            ("BufferCount", I32),
            ("Buffer", Ptr),
            ("BufferLength", Hex32),
            ("Address", V6),
            ("Port", Port),
        ],
        23 | 24 | 25 | 28 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Buffer", Ptr),
            ("BufferLength", Hex32),
        ],
        26 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("BufferCount", I32),
            ("Buffer", Ptr),
            ("BufferLength", Hex32),
            ("Address", V4),
            ("Port", Port),
        ],
        27 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("BufferCount", I32),
            ("Buffer", Ptr),
            ("BufferLength", Hex32),
            ("Address", V6),
            ("Port", Port),
        ],
        29 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Option", Hex32),
            ("Value", Hex32),
        ],
        30 => &[("Process", Ptr), ("HandleCount", I32), ("Timeout", I32)],
        32 => &[("Process", Ptr), ("Endpoint", Ptr), ("EventMask", Hex32)],
        33 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("PacketSize", I32),
            ("Address", V4),
            ("Port", Port),
            ("Reason", I32),
        ],
        34 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("PacketSize", I32),
            ("Address", V6),
            ("Port", Port),
            ("Reason", I32),
        ],
        35 => &[
            ("Process", Ptr),
            ("Listen Endpoint", Ptr),
            ("Address", V4),
            ("Port", Port),
        ],
        36 => &[
            ("Process", Ptr),
            ("Listen Endpoint", Ptr),
            ("Address", V6),
            ("Port", Port),
        ],
        37 => &[
            ("Process", Ptr),
            ("Endpoint", Ptr),
            ("Bytes Indicated", I32),
        ],
        41 => &PE,
        _ => &[],
    }
}

/// AFD event title (the manifest's task-less event names).
pub fn title(id: u16) -> &'static str {
    match id {
        1 => "Socket creation",
        2 => "Socket bind (IPv4)",
        3 => "Socket bind (IPv6)",
        4 => "Socket connect (IPv4)",
        5 => "Socket connect (IPv6)",
        6 => "Connect completed",
        7 => "AFD-initiated abort",
        8 => "Transport-initiated abort",
        9 => "Failed send request",
        10 => "Failed WSASendMsg request",
        11 => "Failed recv request",
        12 => "Failed recvfrom request",
        13 => "Socket close",
        14 => "Socket cleanup",
        15 => "Socket accept (IPv4)",
        16 => "Socket accept (IPv6)",
        17 => "Accept failed",
        18 => "Send posted",
        19 => "Receive posted",
        20 => "RecvFrom posted",
        21 => "SendTo posted (IPv4)",
        22 => "SendTo posted (IPv6)",
        23 => "Recv completed",
        24 => "Send completed",
        25 => "SendMsg completed",
        26 => "RecvFrom completed (IPv4)",
        27 => "RecvFrom completed (IPv6)",
        28 => "SendTo completed",
        29 => "Socket option set",
        30 => "Select/Poll posted",
        31 => "Select/Poll completed",
        32 => "WSAEventSelect",
        33 => "Datagram dropped (IPv4)",
        34 => "Datagram dropped (IPv6)",
        35 => "Connection indicated (IPv4)",
        36 => "Connection indicated (IPv6)",
        37 => "Data indicated",
        40 => "Failed bind",
        41 => "Disconnect indicated from transport",
        _ => "",
    }
}

/// Manifest level: lifecycle events 4, data path 5.
pub fn level(id: u16) -> u8 {
    match id {
        1..=17 | 40 => 4,
        _ => 5,
    }
}

pub fn keywords(id: u16) -> u64 {
    if matches!(id, 33 | 34) {
        KW_DROPPED
    } else {
        0
    }
}

/// One value of an AFD event field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V {
    U64(u64),
    U32(u32),
    I32(i32),
    Addr(SockAddr),
    Port(u16),
}

/// An AFD event before encoding (plain values; absent fields are `None`).
#[derive(Clone, Copy, Debug)]
pub struct AfdEvent {
    pub id: u16,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u16,
    pub timestamp: i64,
    pub vals: [Option<V>; 8],
}

impl AfdEvent {
    fn new(id: u16, pid: u32, tid: u32, cpu: u16, timestamp: i64) -> AfdEvent {
        let mut e = AfdEvent {
            id,
            pid,
            tid,
            cpu,
            timestamp,
            vals: [None; 8],
        };
        e.set("Process", V::U64(pid as u64));
        e
    }
    fn set(&mut self, name: &str, v: V) -> &mut Self {
        if let Some(i) = fields(self.id).iter().position(|(n, _)| *n == name) {
            self.vals[i] = Some(v);
        }
        self
    }
    fn addr(&mut self, a: Option<SockAddr>) -> &mut Self {
        if let Some(a) = a {
            self.set("Address", V::Addr(a));
            self.set("Port", V::Port(a.port));
        }
        self
    }
    /// Sets the Address and Port fields, or removes both.
    pub(super) fn set_addr(&mut self, a: Option<SockAddr>) {
        for (name, v) in [
            ("Address", a.map(V::Addr)),
            ("Port", a.map(|a| V::Port(a.port))),
        ] {
            if let Some(i) = fields(self.id).iter().position(|(n, _)| *n == name) {
                self.vals[i] = v;
            }
        }
    }
    /// The Port field, when set.
    pub fn port(&self) -> Option<u16> {
        match self.get("Port") {
            Some(V::Port(p)) => Some(p),
            _ => None,
        }
    }
    /// The socket the event is about (Endpoint, or Listen Endpoint).
    fn endpoint(&self) -> Option<u64> {
        match self.get("Endpoint").or_else(|| self.get("Listen Endpoint")) {
            Some(V::U64(s)) => Some(s),
            _ => None,
        }
    }
    #[cfg(test)]
    pub(super) fn for_test(id: u16, sock: u64, timestamp: i64) -> AfdEvent {
        let mut e = AfdEvent::new(id, 1, 1, 0, timestamp);
        e.set("Endpoint", V::U64(sock));
        e
    }
    pub fn get(&self, name: &str) -> Option<V> {
        fields(self.id)
            .iter()
            .position(|(n, _)| *n == name)
            .and_then(|i| self.vals[i])
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sys {
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

const SYSCALLS: &[(Sys, &str, &[&str], bool)] = &[
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
enum Tp {
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
type Offs = [(usize, usize, bool); 6];

struct TpInfo {
    tp: Tp,
    offs: Offs,
}

const NET: &[(&str, &str, &[&str], bool)] = &[
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    None,
    Connecting,
    /// connect() returned EINPROGRESS: completion comes from the transport.
    ConnectPending,
    Connected,
    Refused(i32),
    Listening,
}

#[derive(Clone, Debug)]
struct Sock {
    id: u64,
    tgid: u32,
    last_tid: u32,
    /// Linux AF_* value.
    family: u16,
    stype: u32,
    proto: u32,
    sk: Option<u64>,
    fds: u32,
    local: Option<SockAddr>,
    remote: Option<SockAddr>,
    conn: Conn,
    connect_reported: bool,
    completed_reported: bool,
    closed: bool,
    /// The kernel destroyed its TCP sock.
    destroyed: bool,
    /// The first descriptor (for address look-ups).
    fd: i32,
    /// The local address the reader threads took shortly after bind/connect returned, and when
    /// (ring clock). It is this socket's only if the descriptor was still open then: trusted once
    /// the trace has passed that time without a close of it ([`Correlator::trusted_local`]).
    early: Option<(SockAddr, u64)>,
    /// Ring time of the first close() entered on it.
    close_enter: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Inflight {
    sys: Sys,
    args: [i64; 6],
    /// The sockaddr passed to bind/connect (uprobe).
    uaddr: Option<SockAddr>,
    sock: Option<u64>,
    sock_event_seen: bool,
}

/// A connection waiting in a listener's accept queue: (child sk, remote, local).
type Child = (u64, Option<SockAddr>, Option<SockAddr>);

/// Where the raw-field offsets of the events this correlator needs come from.
struct Formats {
    sys_offsets: HashMap<u16, TpInfo>,
    net_offsets: HashMap<u16, TpInfo>,
    ret_off: HashMap<u16, (usize, usize)>,
    /// (instance, system, event, id) of every tracepoint to enable.
    enable: Vec<(usize, String, String, u16)>,
    set_state_addrs: Option<AddrOffs>,
    /// inet_sk_error_report's addresses (same field names as set_state's).
    err_addrs: Option<AddrOffs>,
    /// tcp_destroy_sock's addresses (likewise).
    destroy_addrs: Option<AddrOffs>,
    /// Route lookups on the filtered instance: event id → (kind, offsets of proto, sport, src).
    fib: HashMap<u16, (Tp, Offs)>,
    udp_saddr: Option<(usize, usize)>,
    udp_daddr: Option<(usize, usize)>,
    /// uprobe event id → (which call, offsets of fd, family, port, a4, a6).
    uprobes: HashMap<u16, (Sys, Offs)>,
}

#[derive(Clone, Copy)]
struct AddrOffs {
    family: usize,
    saddr: usize,
    daddr: usize,
    saddr6: usize,
    daddr6: usize,
}

impl AddrOffs {
    /// The family and address fields of a sock/tcp tracepoint (`family`, `saddr`, `daddr`, `saddr_v6`,
    /// `daddr_v6`), when it has all of them.
    fn of(f: &EventFormat) -> Option<AddrOffs> {
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
    fn read(&self, data: &[u8], sport: u16, dport: u16) -> (Option<SockAddr>, Option<SockAddr>) {
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
fn unmapped(a: SockAddr) -> SockAddr {
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
fn accepts(bound: SockAddr, to: SockAddr) -> bool {
    let (b, t) = (unmapped(bound), unmapped(to));
    if b.port != t.port {
        return false;
    }
    if b.addr == [0; 16] {
        return b.v6 || !t.v6;
    }
    b.v6 == t.v6 && b.addr == t.addr
}

fn offs_of(f: &EventFormat, names: &[&str]) -> Result<Offs, LiveError> {
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
fn get(data: &[u8], o: (usize, usize, bool)) -> i64 {
    read_field(data, o.0, o.1, o.2).unwrap_or(0)
}

/// The Winsock correlator.
pub struct Correlator {
    spec: EnableSpec,
    fm: Formats,
    next_id: u64,
    socks: HashMap<u64, Sock>,
    fds: HashMap<(u32, i32), u64>,
    sks: HashMap<u64, u64>,
    inflight: HashMap<u32, Inflight>,
    /// Listener sk → handshaken children (child sk, remote, local), in the kernel's FIFO order.
    accept_q: HashMap<u64, VecDeque<Child>>,
    per_process: HashMap<u32, u32>,
    /// Addresses passed to bind/connect, by thread, until the syscall consumes them.
    uaddr: HashMap<u32, (Sys, i32, Option<SockAddr>)>,
    schemas: HashMap<(u16, u8), TlSchema>,
    payload: Vec<u8>,
    issues: Vec<String>,
    pub events_emitted: u64,
    /// Addresses the reader threads took when bind/connect returned (see [`super::early`]).
    early: Option<Arc<EarlyPeek>>,
    /// Raw (ring) timestamp of the record being handled: the key into `early`.
    raw_ts: u64,
    /// Bind events waiting for the port the kernel chose, and every event after them.
    hold: BindHold,
    /// Local addresses of sockets retired while a held bind event waited for them.
    retired_local: HashMap<u64, SockAddr>,
}

const SYN_SENT: i64 = 2;
const ESTABLISHED: i64 = 1;
const SYN_RECV: i64 = 3;
const CLOSE_WAIT: i64 = 8;
const LISTEN: i64 = 10;
const TCP_CLOSE: i64 = 7;

impl Correlator {
    pub fn new(
        events_dir: &Path,
        spec: EnableSpec,
        uprobe_group: Option<&str>,
    ) -> Result<Correlator, LiveError> {
        let verbose = spec.level == 0 || spec.level >= 5;
        let mut fm = Formats {
            sys_offsets: HashMap::new(),
            net_offsets: HashMap::new(),
            ret_off: HashMap::new(),
            enable: Vec::new(),
            set_state_addrs: None,
            err_addrs: None,
            destroy_addrs: None,
            fib: HashMap::new(),
            udp_saddr: None,
            udp_daddr: None,
            uprobes: HashMap::new(),
        };
        if let Some(g) = uprobe_group {
            for (sys, name) in [(Sys::Bind, "bind"), (Sys::Connect, "connect")] {
                let Ok(f) = EventFormat::load(events_dir, g, name) else {
                    continue;
                };
                fm.uprobes.insert(
                    f.id,
                    (sys, offs_of(&f, &["fd", "family", "port", "a4", "a6"])?),
                );
                fm.enable.push((0, g.to_string(), name.to_string(), f.id));
            }
        }
        for &(sys, name, args, data_path) in SYSCALLS {
            if data_path && !verbose {
                continue;
            }
            let en = format!("sys_enter_{name}");
            let ex = format!("sys_exit_{name}");
            let Ok(fe) = EventFormat::load(events_dir, "syscalls", &en) else {
                continue;
            };
            let fx = EventFormat::load(events_dir, "syscalls", &ex)?;
            fm.sys_offsets.insert(
                fe.id,
                TpInfo {
                    tp: Tp::Enter(sys),
                    offs: offs_of(&fe, args)?,
                },
            );
            let r = fx
                .field("ret")
                .ok_or_else(|| LiveError::Other(format!("syscalls:{ex} has no ret field")))?;
            fm.ret_off.insert(fx.id, (r.offset, r.size));
            fm.sys_offsets.insert(
                fx.id,
                TpInfo {
                    tp: Tp::Exit(sys),
                    offs: [(0, 0, false); 6],
                },
            );
            fm.enable.push((0, "syscalls".into(), en, fe.id));
            fm.enable.push((0, "syscalls".into(), ex, fx.id));
        }
        // The socket-layer events: sock:* may be missing on old kernels; the lifecycle needs set_state.
        for &(sys, name, args, data_path) in NET {
            if data_path && !verbose {
                continue;
            }
            let f = EventFormat::load(events_dir, sys, name)?;
            let tp = match name {
                "inet_sock_set_state" => {
                    fm.set_state_addrs = AddrOffs::of(&f);
                    Tp::SetState
                }
                "sock_send_length" => Tp::SendLen,
                "sock_recv_length" => Tp::RecvLen,
                "inet_sk_error_report" => {
                    fm.err_addrs = AddrOffs::of(&f);
                    Tp::ErrReport
                }
                "tcp_receive_reset" => Tp::RecvReset,
                "tcp_send_reset" => Tp::SendReset,
                "tcp_destroy_sock" => {
                    fm.destroy_addrs = AddrOffs::of(&f);
                    Tp::Destroy
                }
                "udp_fail_queue_rcv_skb" => {
                    fm.udp_saddr = f.field("saddr").map(|x| (x.offset, x.size));
                    fm.udp_daddr = f.field("daddr").map(|x| (x.offset, x.size));
                    Tp::UdpFail
                }
                _ => Tp::DataReady,
            };
            fm.net_offsets.insert(
                f.id,
                TpInfo {
                    tp,
                    offs: offs_of(&f, args)?,
                },
            );
            fm.enable.push((1, sys.into(), name.into(), f.id));
        }
        // Route lookups name the source port a socket bound to port 0 sends from (the kernel chose
        // it; bind() itself only shows the 0). They run in the sending thread: the filtered instance.
        for (sys, name, v6) in [
            ("fib", "fib_table_lookup", false),
            ("fib6", "fib6_table_lookup", true),
        ] {
            if let Ok(f) = EventFormat::load(events_dir, sys, name) {
                fm.fib.insert(
                    f.id,
                    (Tp::Fib { v6 }, offs_of(&f, &["proto", "sport", "src"])?),
                );
                fm.enable.push((0, sys.into(), name.into(), f.id));
            }
        }
        Ok(Correlator {
            hold: BindHold::default(),
            retired_local: HashMap::new(),
            spec,
            fm,
            next_id: 1,
            socks: HashMap::new(),
            fds: HashMap::new(),
            sks: HashMap::new(),
            inflight: HashMap::new(),
            accept_q: HashMap::new(),
            per_process: HashMap::new(),
            uaddr: HashMap::new(),
            schemas: HashMap::new(),
            payload: Vec::with_capacity(64),
            issues: Vec::new(),
            events_emitted: 0,
            early: None,
            raw_ts: 0,
        })
    }

    /// The early address taker the reader threads of the filtered instance feed (one per correlator).
    pub fn early_peek(&mut self) -> Arc<EarlyPeek> {
        if let Some(e) = &self.early {
            return e.clone();
        }
        let mut watched = Vec::new();
        for sys in [Sys::Bind, Sys::Connect] {
            let enter = self
                .fm
                .sys_offsets
                .iter()
                .find(|(_, i)| i.tp == Tp::Enter(sys))
                .map(|(&id, i)| (id, i.offs[0]));
            let exit = self
                .fm
                .sys_offsets
                .iter()
                .find(|(_, i)| i.tp == Tp::Exit(sys))
                .map(|(&id, _)| id);
            if let (Some((enter, fd)), Some(exit)) = (enter, exit) {
                if let Some(&ret) = self.fm.ret_off.get(&exit) {
                    watched.push(Watched {
                        enter,
                        exit,
                        fd,
                        ret,
                    });
                }
            }
        }
        let close = self
            .fm
            .sys_offsets
            .iter()
            .find(|(_, i)| i.tp == Tp::Enter(Sys::Close))
            .map(|(&id, i)| (id, i.offs[0]));
        let e = Arc::new(EarlyPeek::new(watched, close));
        self.early = Some(e.clone());
        e
    }

    /// The local address the reader threads saw right after the syscall being handled returned.
    fn early_local(&self, tid: u32) -> Option<(SockAddr, u64)> {
        self.early.as_ref()?.take(tid, self.raw_ts)
    }

    /// The socket's local address as far as it is certain: learned from the kernel's events, or
    /// taken from the process early and confirmed (the descriptor was not closed before it was
    /// taken, and the trace has passed that moment).
    fn trusted_local(&self, so: &Sock) -> Option<SockAddr> {
        if let Some(a) = so.local.filter(|a| a.port != 0) {
            return Some(a);
        }
        let (a, taken) = so.early?;
        (taken < self.raw_ts && so.close_enter.is_none_or(|c| taken < c)).then_some(a)
    }

    /// (instance, system, event, id): 0 = the pid-filtered instance, 1 = the unfiltered `.net` one.
    pub fn tracepoints(&self) -> Vec<(usize, String, String, u16)> {
        self.fm.enable.clone()
    }

    pub fn issues(&self) -> Vec<String> {
        let mut v = self.issues.clone();
        if self.hold.released_without_port > 0 {
            v.push(format!(
                "{} bind events lack Address/Port: the port the kernel chose could not be learned before the socket was gone",
                self.hold.released_without_port
            ));
        }
        v
    }

    fn new_sock(
        &mut self,
        tgid: u32,
        tid: u32,
        fd: i32,
        family: u16,
        stype: u32,
        proto: u32,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.socks.insert(
            id,
            Sock {
                id,
                tgid,
                last_tid: tid,
                family,
                stype,
                proto,
                sk: None,
                fds: 1,
                local: None,
                remote: None,
                conn: Conn::None,
                connect_reported: false,
                completed_reported: false,
                closed: false,
                destroyed: false,
                fd,
                early: None,
                close_enter: None,
            },
        );
        if let Some(old) = self.fds.insert((tgid, fd), id) {
            self.drop_fd_ref(old);
        }
        *self.per_process.entry(tgid).or_default() += 1;
        id
    }

    fn drop_fd_ref(&mut self, id: u64) -> bool {
        if let Some(s) = self.socks.get_mut(&id) {
            s.fds = s.fds.saturating_sub(1);
            if s.fds == 0 && !s.closed {
                s.closed = true;
                if let Some(n) = self.per_process.get_mut(&s.tgid) {
                    *n = n.saturating_sub(1);
                }
                return true;
            }
        }
        false
    }

    /// Forgets a closed socket once nothing can refer to it any more: at close, except for a
    /// connected TCP socket, which is forgotten when the kernel destroys its sock (resets and FINs
    /// after close still find it) or when its sock pointer starts a new life.
    fn retire(&mut self, id: u64) {
        let Some(so) = self.socks.get(&id) else {
            return;
        };
        if !so.closed {
            return;
        }
        // Only a connected TCP sock outlives close() (FIN handshake, resets after close); the kernel
        // frees one that never connected, was refused or only listened inside close() itself.
        let lingers = so.stype == libc::SOCK_STREAM as u32 && so.conn == Conn::Connected;
        if lingers && so.sk.is_some() && !so.destroyed {
            return;
        }
        if self.hold.waiting().any(|w| w == id) {
            if let Some(a) = self.trusted_local(so) {
                let a = to_family(a, so.family == libc::AF_INET6 as u16);
                self.retired_local.insert(id, a);
            }
        }
        // The pointer that named this socket stops naming it: the kernel reuses sock memory for
        // other processes' sockets, whose events must never land on a socket we retired. (bind_sk
        // keeps at most this one pointer per socket and never binds a retired one.)
        if let Some(sk) = so.sk {
            if self.sks.get(&sk) == Some(&id) {
                self.sks.remove(&sk);
            }
            self.accept_q.remove(&sk);
        }
        self.socks.remove(&id);
    }

    /// The live socket a kernel sock pointer names (never a retired one).
    fn sock_of_sk(&self, sk: u64) -> Option<u64> {
        self.sks
            .get(&sk)
            .copied()
            .filter(|s| self.socks.contains_key(s))
    }

    fn bind_sk(&mut self, id: u64, sk: u64) {
        if sk == 0 {
            return;
        }
        let Some(s) = self.socks.get_mut(&id) else {
            return; // retired: nothing may be attributed to it any more
        };
        if let Some(old) = s.sk {
            if old != sk && self.sks.get(&old) == Some(&id) {
                self.sks.remove(&old);
            }
        }
        s.sk = Some(sk);
        // A reused sk now belongs to this socket.
        self.sks.insert(sk, id);
    }

    /// Attribution of an event about socket `id` raised by task `tid`.
    fn who(&self, id: u64, tid: u32, tid_tgid: u32) -> (u32, u32) {
        match self.socks.get(&id) {
            Some(s) if s.tgid == tid_tgid => (s.tgid, tid),
            Some(s) => (s.tgid, s.last_tid),
            None => (tid_tgid, tid),
        }
    }

    fn ev(&self, id: u16, sock: u64, tid: u32, tgid: u32, cpu: u16, ts: i64) -> AfdEvent {
        let (pid, t) = self.who(sock, tid, tgid);
        let mut e = AfdEvent::new(id, pid, t, cpu, ts);
        if id == 35 || id == 36 {
            e.set("Listen Endpoint", V::U64(sock));
        } else {
            e.set("Endpoint", V::U64(sock));
        }
        e
    }

    /// Handles one raw record; emits AFD events through `emit` (false = stop).
    #[allow(clippy::too_many_arguments)]
    pub fn on_raw(
        &mut self,
        inst: usize,
        id: u16,
        tid: u32,
        tgid: u32,
        cpu: u16,
        (ts, raw_ts): (i64, u64),
        data: &[u8],
        emit: &mut dyn FnMut(&EventRecord<'_>) -> bool,
    ) -> bool {
        self.raw_ts = raw_ts;
        let mut out: Vec<AfdEvent> = Vec::new();
        if inst == 0 {
            if let Some(&(sys, o)) = self.fm.uprobes.get(&id) {
                let fd = get(data, o[0]) as i32;
                let family = get(data, o[1]) as i32;
                let port = u16::from_be_bytes((get(data, o[2]) as u16).to_le_bytes());
                let a4 = (get(data, o[3]) as u32).to_le_bytes();
                let addr = match family {
                    libc::AF_INET => Some(SockAddr::v4(a4, port)),
                    libc::AF_INET6 => data
                        .get(o[4].0..o[4].0 + 16)
                        .and_then(|b| b.try_into().ok())
                        .map(|b| SockAddr::v6(b, port)),
                    _ => None,
                };
                self.uaddr.insert(tid, (sys, fd, addr));
            } else if let Some(&(Tp::Fib { v6 }, o)) = self.fm.fib.get(&id) {
                self.on_fib(v6, &o, data, tid);
            } else if let Some(info) = self.fm.sys_offsets.get(&id) {
                match info.tp {
                    Tp::Enter(sys) => {
                        let mut args = [0i64; 6];
                        for (i, o) in info.offs.iter().enumerate() {
                            if o.1 > 0 {
                                args[i] = get(data, *o);
                            }
                        }
                        self.on_enter(sys, args, tid, tgid, cpu, ts, &mut out);
                    }
                    Tp::Exit(sys) => {
                        let (o, sz) = self.fm.ret_off.get(&id).copied().unwrap_or((16, 8));
                        let ret = read_int(data, o, sz).unwrap_or(0);
                        self.on_exit(sys, ret, tid, tgid, cpu, ts, &mut out);
                    }
                    _ => {}
                }
            }
        } else if let Some(info) = self.fm.net_offsets.get(&id) {
            let tp = info.tp;
            let offs = info.offs;
            self.on_net(tp, &offs, data, tid, tgid, cpu, ts, &mut out);
        }
        self.hand_out(out, ts, false, emit)
    }

    /// Queues `out` behind any bind event still waiting for its port, then hands out what may go.
    fn hand_out(
        &mut self,
        out: Vec<AfdEvent>,
        now: i64,
        force: bool,
        emit: &mut dyn FnMut(&EventRecord<'_>) -> bool,
    ) -> bool {
        for e in out {
            let waits = match (e.id, e.endpoint()) {
                (2 | 3, Some(s)) if e.port().is_none_or(|p| p == 0) => Some((s, e.id == 3)),
                _ => None,
            };
            if waits.is_none() && self.hold.is_empty() {
                // The common case: nothing waits, the event goes straight out.
                if !self.emit(&e, emit) {
                    return false;
                }
                continue;
            }
            self.hold.push(e, waits);
        }
        if self.hold.is_empty() {
            return true;
        }
        let mut hold = std::mem::take(&mut self.hold);
        let state = |s: u64| match self.socks.get(&s) {
            Some(so) => match self.trusted_local(so) {
                Some(a) => PortState::Known(to_family(a, so.family == libc::AF_INET6 as u16)),
                None if so.closed => PortState::Gone,
                None => PortState::Waiting,
            },
            None => match self.retired_local.get(&s) {
                Some(&a) => PortState::Known(a),
                None => PortState::Gone,
            },
        };
        let states: Vec<(u64, PortState)> = hold.waiting().map(|s| (s, state(s))).collect();
        let mut ready = Vec::new();
        hold.release(
            now,
            force,
            |s| {
                states
                    .iter()
                    .find(|(x, _)| *x == s)
                    .map(|(_, st)| *st)
                    .unwrap_or(PortState::Gone)
            },
            |e| {
                ready.push(*e);
                true
            },
        );
        self.hold = hold;
        if self.hold.is_empty() {
            self.retired_local.clear();
        }
        for e in &ready {
            if !self.emit(e, emit) {
                return false;
            }
        }
        true
    }

    /// The trace ends: every held event goes out (waiting binds without a port).
    pub fn finish(&mut self, ts: i64, emit: &mut dyn FnMut(&EventRecord<'_>) -> bool) -> bool {
        self.hand_out(Vec::new(), ts, true, emit)
    }

    /// A route lookup inside a syscall of ours on a socket whose port is unknown: the source port is
    /// the one the kernel bound it to.
    fn on_fib(&mut self, v6: bool, o: &Offs, data: &[u8], tid: u32) {
        let (proto, sport) = (get(data, o[0]), get(data, o[1]) as u16);
        if sport == 0 || !(proto == libc::IPPROTO_UDP as i64 || proto == libc::IPPROTO_TCP as i64) {
            return;
        }
        // Only a lookup the thread made itself, in its syscall: a softirq (a loopback packet being
        // received, say) runs on whatever thread it interrupted.
        if in_interrupt(data) {
            return;
        }
        let Some(inf) = self.inflight.get(&tid) else {
            return;
        };
        let sending = matches!(
            inf.sys,
            Sys::SendTo | Sys::SendMsg | Sys::Connect | Sys::Write | Sys::Writev
        );
        let Some(s) = inf.sock.filter(|_| sending) else {
            return;
        };
        if self.socks.get(&s).is_none_or(|so| so.proto != proto as u32) {
            return;
        }
        let src = if v6 {
            data.get(o[2].0..o[2].0 + 16)
                .and_then(|b| b.try_into().ok())
                .map(|b| SockAddr::v6(b, sport))
        } else {
            data.get(o[2].0..o[2].0 + 4)
                .and_then(|b| b.try_into().ok())
                .map(|b| SockAddr::v4(b, sport))
        };
        self.learn_port(s, sport, src);
    }

    /// The kernel named socket `s`'s local port: keep the bound address (it may be a wildcard) with
    /// that port, or `seen` when no address was bound.
    fn learn_port(&mut self, s: u64, port: u16, seen: Option<SockAddr>) {
        if let Some(so) = self.socks.get_mut(&s) {
            if so.local.is_none_or(|a| a.port == 0) {
                so.local = match so.local {
                    Some(a) => Some(SockAddr { port, ..a }),
                    None => seen,
                };
            }
        }
    }

    /// A thread exited; when it was the last of its process, its sockets are closed by the kernel.
    pub fn on_thread_exit(
        &mut self,
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        group_dead: bool,
        emit: &mut dyn FnMut(&EventRecord<'_>) -> bool,
    ) {
        self.inflight.remove(&tid);
        self.uaddr.remove(&tid);
        if !group_dead {
            return;
        }
        let mut ids: Vec<u64> = self
            .fds
            .iter()
            .filter(|((p, _), _)| *p == tgid)
            .map(|(_, &id)| id)
            .collect();
        ids.sort();
        ids.dedup();
        self.fds.retain(|(p, _), _| *p != tgid);
        let mut out = Vec::new();
        for id in ids {
            if let Some(s) = self.socks.get_mut(&id) {
                if !s.closed {
                    s.closed = true;
                    let mut e = self.ev(13, id, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(0));
                    out.push(e);
                    self.retire(id);
                }
            }
        }
        self.per_process.remove(&tgid);
        self.hand_out(out, ts, false, emit);
    }

    /// The address the C library passed to `sys` on this thread for `fd`, if a probe saw it.
    fn take_uaddr(&mut self, tid: u32, sys: Sys, fd: i32) -> Option<SockAddr> {
        match self.uaddr.remove(&tid) {
            Some((s, f, a)) if s == sys && f == fd => a,
            _ => None,
        }
    }

    fn sock_of_fd(&self, tgid: u32, fd: i64) -> Option<u64> {
        self.fds.get(&(tgid, fd as i32)).copied()
    }

    #[allow(clippy::too_many_arguments)]
    fn on_enter(
        &mut self,
        sys: Sys,
        args: [i64; 6],
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let fd_sock = match sys {
            Sys::Socket | Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 => None,
            Sys::EpollCtl => self.sock_of_fd(tgid, args[2]),
            _ => self.sock_of_fd(tgid, args[0]),
        };
        let has_sockets = self.per_process.get(&tgid).is_some_and(|&n| n > 0);
        match sys {
            Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 if has_sockets => {
                let mut e = AfdEvent::new(30, tgid, tid, cpu, ts);
                e.set("HandleCount", V::I32(args[0] as i32));
                if sys == Sys::Poll {
                    e.set("Timeout", V::I32(args[1] as i32));
                }
                out.push(e);
            }
            Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 => {}
            Sys::EpollCtl => {
                if let Some(s) = fd_sock {
                    out.push(self.ev(32, s, tid, tgid, cpu, ts));
                }
            }
            _ => {}
        }
        if let Some(s) = fd_sock {
            let raw = self.raw_ts;
            if let Some(so) = self.socks.get_mut(&s) {
                so.last_tid = tid;
                if sys == Sys::Close {
                    so.close_enter.get_or_insert(raw);
                }
            }
            let family = self.socks.get(&s).map(|x| x.family).unwrap_or(0);
            let v6 = family == libc::AF_INET6 as u16;
            let dgram = self
                .socks
                .get(&s)
                .is_some_and(|x| x.stype == libc::SOCK_DGRAM as u32);
            // Posted requests (level 5).
            let posted = match sys {
                Sys::SendTo if args[3] != 0 && dgram => {
                    Some((if v6 { 22 } else { 21 }, 1, args[1], args[2]))
                }
                Sys::SendTo | Sys::Write => Some((18, 1, args[1], args[2])),
                Sys::Writev => Some((18, args[2], args[1], -1)),
                Sys::SendMsg => Some((18, -1, -1, -1)),
                Sys::RecvFrom if args[3] != 0 => Some((20, 1, args[1], args[2])),
                Sys::RecvFrom | Sys::Read => Some((19, 1, args[1], args[2])),
                Sys::Readv => Some((19, args[2], args[1], -1)),
                Sys::RecvMsg => Some((19, -1, -1, -1)),
                _ => None,
            };
            if let Some((id, count, buf, len)) = posted {
                let mut e = self.ev(id, s, tid, tgid, cpu, ts);
                if count >= 0 {
                    e.set("BufferCount", V::I32(count as i32));
                }
                if buf >= 0 {
                    e.set("Buffer", V::U64(buf as u64));
                }
                if len >= 0 {
                    e.set("BufferLength", V::U32(len as u32));
                }
                out.push(e);
            }
            if sys == Sys::Connect {
                if let Some(so) = self.socks.get_mut(&s) {
                    so.conn = Conn::Connecting;
                    so.connect_reported = false;
                    so.completed_reported = false;
                }
            }
        }
        let uaddr = match sys {
            Sys::Bind | Sys::Connect => self.take_uaddr(tid, sys, args[0] as i32),
            _ => None,
        };
        if let (Sys::Connect, Some(s), Some(a)) = (sys, fd_sock, uaddr) {
            if let Some(so) = self.socks.get_mut(&s) {
                so.remote = Some(a);
            }
        }
        self.inflight.insert(
            tid,
            Inflight {
                sys,
                args,
                uaddr,
                sock: fd_sock,
                sock_event_seen: false,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn on_exit(
        &mut self,
        sys: Sys,
        ret: i64,
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let Some(inf) = self.inflight.remove(&tid) else {
            return;
        };
        if inf.sys != sys {
            return;
        }
        let err = if ret < 0 { (-ret) as u32 } else { 0 };
        match sys {
            Sys::Socket => {
                let family = inf.args[0] as i32;
                if ret < 0 || !(family == libc::AF_INET || family == libc::AF_INET6) {
                    return;
                }
                let stype = (inf.args[1] & 0xf) as u32;
                let mut proto = inf.args[2] as u32;
                if proto == 0 {
                    proto = match stype as i32 {
                        libc::SOCK_STREAM => libc::IPPROTO_TCP as u32,
                        libc::SOCK_DGRAM => libc::IPPROTO_UDP as u32,
                        _ => 0,
                    };
                }
                let id = self.new_sock(tgid, tid, ret as i32, family as u16, stype, proto);
                out.push(self.create_event(id, tid, tgid, cpu, ts));
            }
            Sys::Bind => {
                let Some(s) = inf.sock else { return };
                if ret < 0 {
                    let mut e = self.ev(40, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                    return;
                }
                // What the program passed; port 0 (or no probe) means the kernel chose: ask what it chose.
                let v6 = self
                    .socks
                    .get(&s)
                    .is_some_and(|x| x.family == libc::AF_INET6 as u16);
                let local = inf.uaddr;
                if local.is_none_or(|a| a.port == 0) {
                    // The reader asked the process about this descriptor a moment later; by then it
                    // may name another socket (closed and reused). Take the answer only when it is
                    // of this socket's family and at the address the program bound.
                    let passed = inf.uaddr;
                    let fits = |a: &SockAddr| {
                        a.v6 == v6
                            && a.port != 0
                            && passed.is_none_or(|p| p.addr == a.addr || p.addr == [0u8; 16])
                    };
                    if let Some(e) = self.early_local(tid).filter(|(a, _)| fits(a)) {
                        if let Some(so) = self.socks.get_mut(&s) {
                            so.early = Some(e);
                        }
                    }
                }
                if let Some(so) = self.socks.get_mut(&s) {
                    so.local = local.or(so.local);
                }
                let mut e = self.ev(if v6 { 3 } else { 2 }, s, tid, tgid, cpu, ts);
                e.addr(local.filter(|a| a.v6 == v6));
                e.set("Status", V::U32(0));
                out.push(e);
            }
            Sys::Listen => {
                if let (Some(s), true) = (inf.sock, ret == 0) {
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.conn = Conn::Listening;
                    }
                }
            }
            Sys::Connect => {
                let Some(s) = inf.sock else { return };
                let Some(so) = self.socks.get(&s).cloned() else {
                    return;
                };
                if ret == -(libc::EINPROGRESS as i64) {
                    if let Some(so) = self.socks.get_mut(&s) {
                        if so.conn == Conn::Connecting {
                            so.conn = Conn::ConnectPending;
                        }
                    }
                    self.report_connect(s, tid, tgid, cpu, ts, out);
                    return;
                }
                if !so.connect_reported {
                    // No SYN_SENT seen (UDP, or a failure before the transport): the address the
                    // program passed (uprobe) was set at entry.
                    self.report_connect(s, tid, tgid, cpu, ts, out);
                }
                if !so.completed_reported {
                    let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                    let code = match so.conn {
                        Conn::Refused(c) if ret < 0 => c as u32,
                        _ => err,
                    };
                    e.set("Error", V::U32(code));
                    out.push(e);
                }
                let early = if ret == 0 && so.local.is_none_or(|a| a.port == 0) {
                    // Only an answer of this socket's family can be this socket's (see Bind).
                    let v6 = so.family == libc::AF_INET6 as u16;
                    self.early_local(tid)
                        .filter(|(a, _)| a.v6 == v6 && a.port != 0)
                } else {
                    None
                };
                if let Some(so) = self.socks.get_mut(&s) {
                    // A connect binds implicitly: the local address (UDP has no other source of it).
                    so.early = early.or(so.early);
                    so.completed_reported = true;
                    so.conn = if ret == 0 {
                        Conn::Connected
                    } else {
                        Conn::None
                    };
                }
            }
            Sys::Accept | Sys::Accept4 => {
                let Some(l) = inf.sock else { return };
                if ret < 0 {
                    let mut e = self.ev(17, l, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                    return;
                }
                let Some(ls) = self.socks.get(&l).cloned() else {
                    return;
                };
                let child = ls
                    .sk
                    .and_then(|sk| self.accept_q.get_mut(&sk))
                    .and_then(|q| q.pop_front());
                let id = self.new_sock(tgid, tid, ret as i32, ls.family, ls.stype, ls.proto);
                let (remote, local) = match child {
                    Some((csk, remote, local)) => {
                        self.bind_sk(id, csk);
                        (remote, local)
                    }
                    None => (
                        procfd::peek(tgid, ret as i32, true)
                            .filter(|p| p.sock_type == libc::SOCK_STREAM)
                            .and_then(|p| p.addr),
                        None,
                    ),
                };
                if let Some(so) = self.socks.get_mut(&id) {
                    so.remote = remote;
                    so.local = local;
                    so.conn = Conn::Connected;
                }
                out.push(self.create_event(id, tid, tgid, cpu, ts));
                let v6 = ls.family == libc::AF_INET6 as u16;
                let mut e = self.ev(if v6 { 16 } else { 15 }, id, tid, tgid, cpu, ts);
                e.addr(remote.map(|r| to_family(r, v6)));
                e.set("Status", V::U32(0));
                out.push(e);
            }
            Sys::Close => {
                let Some(s) = inf.sock else { return };
                if ret < 0 {
                    return;
                }
                self.fds.remove(&(tgid, inf.args[0] as i32));
                if self.drop_fd_ref(s) {
                    let mut e = self.ev(13, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(0));
                    out.push(e);
                    self.retire(s);
                }
            }
            Sys::Shutdown => {
                let Some(s) = inf.sock else { return };
                let mut e = self.ev(14, s, tid, tgid, cpu, ts);
                e.set("Error", V::U32(err));
                out.push(e);
            }
            Sys::SetSockOpt | Sys::Ioctl => {
                let Some(s) = inf.sock else { return };
                let code = if sys == Sys::Ioctl {
                    (inf.args[1] as u32 == libc::FIONBIO as u32).then_some(2)
                } else {
                    afd_option(inf.args[1] as i32, inf.args[2] as i32)
                };
                if let (Some(code), true) = (code, ret == 0) {
                    let mut e = self.ev(29, s, tid, tgid, cpu, ts);
                    e.set("Option", V::U32(code));
                    out.push(e);
                }
            }
            Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 => {
                if self.per_process.get(&tgid).is_some_and(|&n| n > 0) {
                    let mut e = AfdEvent::new(31, tgid, tid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                }
            }
            Sys::Dup | Sys::Dup2 | Sys::Dup3 | Sys::Fcntl => {
                let Some(s) = inf.sock else { return };
                if ret < 0 {
                    return;
                }
                if sys == Sys::Fcntl
                    && !(inf.args[1] == libc::F_DUPFD as i64
                        || inf.args[1] == libc::F_DUPFD_CLOEXEC as i64)
                {
                    return;
                }
                let newfd = ret as i32;
                if let Some(old) = self.fds.insert((tgid, newfd), s) {
                    if old != s && self.drop_fd_ref(old) {
                        let mut e = self.ev(13, old, tid, tgid, cpu, ts);
                        e.set("Error", V::U32(0));
                        out.push(e);
                    }
                }
                if let Some(so) = self.socks.get_mut(&s) {
                    so.fds += 1;
                }
            }
            Sys::SendTo
            | Sys::RecvFrom
            | Sys::SendMsg
            | Sys::RecvMsg
            | Sys::Write
            | Sys::Read
            | Sys::Writev
            | Sys::Readv => {
                // Failures the socket layer never saw (bad arguments): reported from the syscall.
                if let (Some(s), true, false) = (inf.sock, ret < 0, inf.sock_event_seen) {
                    let id = match sys {
                        Sys::SendMsg => 10,
                        Sys::SendTo | Sys::Write | Sys::Writev => 9,
                        Sys::RecvFrom if inf.args[3] != 0 => 12,
                        _ => 11,
                    };
                    let mut e = self.ev(id, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                }
            }
            Sys::EpollCtl => {}
        }
    }

    fn create_event(&self, id: u64, tid: u32, tgid: u32, cpu: u16, ts: i64) -> AfdEvent {
        let s = &self.socks[&id];
        let mut e = self.ev(1, id, tid, tgid, cpu, ts);
        e.set("AddressFamily", V::U32(win_family(s.family)));
        e.set("SocketType", V::U32(s.stype));
        e.set("Protocol", V::U32(s.proto));
        e.set("UserModePid", V::U64(s.tgid as u64));
        e
    }

    fn report_connect(
        &mut self,
        s: u64,
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let Some(so) = self.socks.get(&s) else { return };
        if so.connect_reported {
            return;
        }
        let v6 = so.family == libc::AF_INET6 as u16;
        let remote = so.remote;
        let mut e = self.ev(if v6 { 5 } else { 4 }, s, tid, tgid, cpu, ts);
        e.addr(remote.map(|r| to_family(r, v6)));
        out.push(e);
        if let Some(so) = self.socks.get_mut(&s) {
            so.connect_reported = true;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_net(
        &mut self,
        tp: Tp,
        o: &Offs,
        data: &[u8],
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let inflight = self.inflight.get(&tid).copied();
        match tp {
            Tp::SetState => {
                let (sk, old, new, sport, dport, proto) = (
                    get(data, o[0]) as u64,
                    get(data, o[1]),
                    get(data, o[2]),
                    get(data, o[3]) as u16,
                    get(data, o[4]) as u16,
                    get(data, o[5]),
                );
                if proto != libc::IPPROTO_TCP as i64 {
                    return;
                }
                let (local, remote) = self.state_addrs(data, sport, dport);
                // The syscall in flight on this thread names the socket (connect, listen).
                if let Some(inf) = inflight {
                    if let Some(s) = inf.sock {
                        if (inf.sys == Sys::Connect && new == SYN_SENT)
                            || (inf.sys == Sys::Listen && new == LISTEN)
                        {
                            self.bind_sk(s, sk);
                            if let Some(i) = self.inflight.get_mut(&tid) {
                                i.sock_event_seen = true;
                            }
                            if new == SYN_SENT {
                                if let Some(so) = self.socks.get_mut(&s) {
                                    so.remote = remote;
                                }
                                self.report_connect(s, tid, tgid, cpu, ts, out);
                            } else if let Some(so) = self.socks.get_mut(&s) {
                                so.local = local.or(so.local);
                                so.conn = Conn::Listening;
                            }
                            return;
                        }
                    }
                }
                if old == SYN_RECV && new == ESTABLISHED {
                    // A child connection completed its handshake: queue it on its listener.
                    let listener = self
                        .socks
                        .values()
                        .filter(|s| {
                            s.conn == Conn::Listening
                                && !s.closed
                                && s.local.map(|a| a.port) == Some(sport)
                                && match (s.local, local) {
                                    (Some(b), Some(to)) => accepts(b, to),
                                    _ => true,
                                }
                        })
                        .map(|s| s.id)
                        .min();
                    if let Some(l) = listener {
                        let lsk = self.socks[&l].sk.unwrap_or(0);
                        self.accept_q
                            .entry(lsk)
                            .or_default()
                            .push_back((sk, remote, local));
                        let v6 = self.socks[&l].family == libc::AF_INET6 as u16;
                        let mut e = self.ev(if v6 { 36 } else { 35 }, l, tid, tgid, cpu, ts);
                        e.addr(remote.map(|r| to_family(r, v6)));
                        out.push(e);
                    }
                    return;
                }
                let Some(s) = self.sock_of_sk(sk) else { return };
                if old == TCP_CLOSE && inflight.and_then(|i| i.sock) != Some(s) {
                    // A sock leaving CLOSE starts a new life; ours start inside a syscall of ours on
                    // that socket (connect and listen are handled above). This pointer was freed and
                    // now belongs to another socket, possibly another process's: it no longer names ours.
                    self.sks.remove(&sk);
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.sk = None;
                        so.destroyed = true;
                    }
                    self.retire(s);
                    return;
                }
                if old == SYN_SENT && new == ESTABLISHED {
                    let mut pending = false;
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.local = local;
                        pending = so.conn == Conn::ConnectPending && !so.completed_reported;
                        if so.conn != Conn::ConnectPending {
                            so.conn = Conn::Connected;
                        }
                    }
                    if pending {
                        let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                        e.set("Error", V::U32(0));
                        out.push(e);
                        if let Some(so) = self.socks.get_mut(&s) {
                            so.completed_reported = true;
                            so.conn = Conn::Connected;
                        }
                    }
                } else if old == ESTABLISHED && new == CLOSE_WAIT {
                    out.push(self.ev(41, s, tid, tgid, cpu, ts));
                }
            }
            Tp::SendLen | Tp::RecvLen => {
                let (sk, family, ret) = (
                    get(data, o[0]) as u64,
                    get(data, o[1]) as i32,
                    get(data, o[2]) as i32,
                );
                if !(family == libc::AF_INET || family == libc::AF_INET6) {
                    return;
                }
                let s = match inflight.and_then(|i| i.sock) {
                    Some(s) => {
                        if self.sks.get(&sk) != Some(&s) {
                            self.bind_sk(s, sk);
                        }
                        if let Some(i) = self.inflight.get_mut(&tid) {
                            i.sock_event_seen = true;
                        }
                        s
                    }
                    None => match self.sock_of_sk(sk) {
                        Some(s) => s,
                        None => return,
                    },
                };
                let sys = inflight.filter(|i| i.sock == Some(s)).map(|i| i.sys);
                let with_addr = inflight.is_some_and(|i| {
                    matches!(i.sys, Sys::SendTo | Sys::RecvFrom) && i.args[3] != 0
                });
                let buf = inflight
                    .filter(|i| {
                        matches!(i.sys, Sys::SendTo | Sys::RecvFrom | Sys::Write | Sys::Read)
                    })
                    .map(|i| i.args[1] as u64);
                let dgram = self
                    .socks
                    .get(&s)
                    .is_some_and(|x| x.stype == libc::SOCK_DGRAM as u32);
                let v6 = self
                    .socks
                    .get(&s)
                    .is_some_and(|x| x.family == libc::AF_INET6 as u16);
                let send = matches!(tp, Tp::SendLen);
                let id = match (send, ret >= 0) {
                    (true, true) if sys == Some(Sys::SendMsg) => 25,
                    (true, true) if with_addr && dgram => 28,
                    (true, true) => 24,
                    (true, false) if sys == Some(Sys::SendMsg) => 10,
                    (true, false) => 9,
                    (false, true) if with_addr && dgram => {
                        if v6 {
                            27
                        } else {
                            26
                        }
                    }
                    (false, true) => 23,
                    (false, false) if with_addr => 12,
                    (false, false) => 11,
                };
                let mut e = self.ev(id, s, tid, tgid, cpu, ts);
                if ret >= 0 {
                    if let Some(b) = buf {
                        e.set("Buffer", V::U64(b));
                    }
                    e.set("BufferLength", V::U32(ret as u32));
                    if id == 26 || id == 27 {
                        e.set("BufferCount", V::I32(1));
                    }
                } else {
                    e.set("Error", V::U32((-ret) as u32));
                }
                out.push(e);
            }
            Tp::ErrReport => {
                let (error, sport, dport, proto) = (
                    get(data, o[0]) as i32,
                    get(data, o[1]) as u16,
                    get(data, o[2]) as u16,
                    get(data, o[3]),
                );
                if proto != libc::IPPROTO_TCP as i64 {
                    return;
                }
                // No sk in this event: find the connecting socket by its ports and peer address.
                let peer = self.fm.err_addrs.and_then(|a| a.read(data, sport, dport).1);
                let cand = self
                    .socks
                    .values()
                    .filter(|s| {
                        !s.closed
                            && matches!(s.conn, Conn::Connecting | Conn::ConnectPending)
                            && s.remote.map(|r| r.port) == Some(dport)
                            && s.local.is_none_or(|l| l.port == sport || l.port == 0)
                            && match (s.remote, peer) {
                                (Some(r), Some(p)) => unmapped(r) == unmapped(p),
                                _ => true,
                            }
                    })
                    .map(|s| s.id)
                    .min();
                let Some(s) = cand else { return };
                let pending = self.socks[&s].conn == Conn::ConnectPending
                    && !self.socks[&s].completed_reported;
                if let Some(so) = self.socks.get_mut(&s) {
                    so.conn = Conn::Refused(error);
                }
                if pending {
                    let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(error as u32));
                    out.push(e);
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.completed_reported = true;
                    }
                }
            }
            Tp::RecvReset => {
                let sk = get(data, o[0]) as u64;
                let Some(s) = self.sock_of_sk(sk) else { return };
                let conn = self.socks.get(&s).map(|x| x.conn);
                if matches!(conn, Some(Conn::Connecting | Conn::ConnectPending)) {
                    // A reset answering a SYN is a refused connect: reported by connect completed.
                    return;
                }
                out.push(self.ev(8, s, tid, tgid, cpu, ts));
            }
            Tp::SendReset => {
                let sk = get(data, o[0]) as u64;
                if sk == 0 {
                    return;
                }
                let Some(s) = self.sock_of_sk(sk) else { return };
                out.push(self.ev(7, s, tid, tgid, cpu, ts));
            }
            Tp::Destroy => {
                // The kernel frees this sock: the pointer no longer names any socket of ours. A sock
                // never connected nor listening is freed inside our close(), the last place its
                // bound port shows.
                let sk = get(data, o[0]) as u64;
                let closing = inflight
                    .filter(|i| i.sys == Sys::Close && !in_interrupt(data))
                    .and_then(|i| i.sock);
                // In our close() (process context) the sock destroyed is the one being closed (or a
                // child never accepted from it, with the same local port).
                if let Some(s) = closing.or_else(|| self.sock_of_sk(sk)) {
                    let sport = get(data, o[1]) as u16;
                    let local = self.fm.destroy_addrs.and_then(|a| a.read(data, sport, 0).0);
                    if sport != 0 {
                        self.learn_port(s, sport, local);
                    }
                }
                self.accept_q.remove(&sk);
                if let Some(s) = self.sks.remove(&sk) {
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.sk = None;
                        so.destroyed = true;
                    }
                    self.retire(s);
                }
            }
            Tp::UdpFail => {
                let rc = get(data, o[0]) as i32;
                let dport = get(data, o[2]) as u16;
                let src = self
                    .fm
                    .udp_saddr
                    .and_then(|(off, sz)| data.get(off..off + sz))
                    .and_then(SockAddr::from_sockaddr);
                let dst = self
                    .fm
                    .udp_daddr
                    .and_then(|(off, sz)| data.get(off..off + sz))
                    .and_then(SockAddr::from_sockaddr);
                let cand = self.udp_receiver(dport, dst);
                let Some(s) = cand else { return };
                let v6 = self.socks[&s].family == libc::AF_INET6 as u16;
                let mut e = self.ev(if v6 { 34 } else { 33 }, s, tid, tgid, cpu, ts);
                e.addr(src.map(|a| to_family(a, v6)));
                e.set("Reason", V::I32(rc));
                out.push(e);
            }
            Tp::DataReady => {
                let sk = get(data, o[0]) as u64;
                let Some(s) = self.sock_of_sk(sk) else { return };
                out.push(self.ev(37, s, tid, tgid, cpu, ts));
            }
            Tp::Enter(_) | Tp::Exit(_) | Tp::Fib { .. } => {}
        }
    }

    /// Our UDP socket that receives datagrams for `port` (at `dst`, when the event names it).
    fn udp_receiver(&mut self, port: u16, dst: Option<SockAddr>) -> Option<u64> {
        // The address taken early counts here even unconfirmed: a datagram drop needs its socket now.
        let find = |socks: &HashMap<u64, Sock>| {
            socks
                .values()
                .filter(|s| {
                    let local = s.local.filter(|a| a.port != 0).or(s.early.map(|e| e.0));
                    !s.closed
                        && s.stype == libc::SOCK_DGRAM as u32
                        && local.map(|a| a.port) == Some(port)
                        && match (local, dst) {
                            (Some(b), Some(to)) => accepts(b, to),
                            _ => true,
                        }
                })
                .map(|s| s.id)
                .min()
        };
        if let Some(s) = find(&self.socks) {
            return Some(s);
        }
        // Sockets whose local address is not known yet (implicit bind by sendto/connect).
        let unknown: Vec<(u64, u32, i32)> = self
            .socks
            .values()
            .filter(|s| {
                !s.closed
                    && s.stype == libc::SOCK_DGRAM as u32
                    && s.local.is_none_or(|a| a.port == 0)
                    && s.early.is_none()
            })
            .map(|s| (s.id, s.tgid, s.fd))
            .collect();
        for (id, pid, fd) in unknown {
            if let Some(a) = procfd::peek(pid, fd, false)
                .filter(|p| p.sock_type == libc::SOCK_DGRAM)
                .and_then(|p| p.addr)
            {
                let taken = super::ring::mono_now_ns();
                if let Some(s) = self.socks.get_mut(&id) {
                    s.early = Some((a, taken));
                }
            }
        }
        find(&self.socks)
    }

    fn state_addrs(
        &self,
        data: &[u8],
        sport: u16,
        dport: u16,
    ) -> (Option<SockAddr>, Option<SockAddr>) {
        match self.fm.set_state_addrs {
            Some(a) => a.read(data, sport, dport),
            None => (None, None),
        }
    }

    /// Encodes one AFD event (if the session's level/keywords want it) and hands it out.
    pub fn emit(&mut self, e: &AfdEvent, emit: &mut dyn FnMut(&EventRecord<'_>) -> bool) -> bool {
        if !self.spec.accepts(level(e.id), keywords(e.id)) {
            return true;
        }
        let flds = fields(e.id);
        let mut mask = 0u8;
        for (i, v) in e.vals.iter().enumerate().take(flds.len()) {
            if v.is_some() {
                mask |= 1 << i;
            }
        }
        if let std::collections::hash_map::Entry::Vacant(v) = self.schemas.entry((e.id, mask)) {
            match build_schema(e.id, mask) {
                Ok(s) => {
                    v.insert(s);
                }
                Err(err) => {
                    self.issues.push(format!("AFD event {}: {err}", e.id));
                    return true;
                }
            }
        }
        let schema = &self.schemas[&(e.id, mask)];
        self.payload.clear();
        for (i, (_, t)) in flds.iter().enumerate() {
            let Some(v) = e.vals[i] else { continue };
            pack(&mut self.payload, *t, v);
        }
        let inst = TlInstance {
            pid: e.pid,
            tid: e.tid,
            cpu: e.cpu,
            timestamp: e.timestamp,
            activity_id: Guid::ZERO,
        };
        let rec = tlg::event_record(schema, &inst, &self.payload[..]);
        self.events_emitted += 1;
        emit(&rec)
    }
}

/// Whether a tracepoint record was written in interrupt context (hard or soft IRQ, NMI), where
/// `common_pid` is merely the thread that was interrupted (`common_flags` bits).
fn in_interrupt(data: &[u8]) -> bool {
    const HARDIRQ: u8 = 0x08;
    const SOFTIRQ: u8 = 0x10;
    const NMI: u8 = 0x40;
    data.get(2)
        .is_some_and(|f| f & (HARDIRQ | SOFTIRQ | NMI) != 0)
}

fn to_family(a: SockAddr, v6: bool) -> SockAddr {
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

/// Windows AF_* numbering (AF_INET6 is 23 on Windows, 10 on Linux).
fn win_family(linux: u16) -> u32 {
    match linux as i32 {
        libc::AF_INET6 => 23,
        f => f as u32,
    }
}

/// Linux (level, optname) → AFD_OPTION_ValueMap code, for the options the map has.
fn afd_option(level: i32, name: i32) -> Option<u32> {
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => Some(1),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) | (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE) => Some(6),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) | (libc::SOL_SOCKET, libc::SO_SNDBUFFORCE) => Some(7),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => Some(13),
        _ => None,
    }
}

fn build_schema(id: u16, mask: u8) -> Result<TlSchema, crate::tlg::TlError> {
    let mut b = TlSchemaBuilder::new(PROVIDER_NAME, title(id))
        .provider_guid(PROVIDER_GUID)
        .id(id)
        .version(0)
        .level(level(id))
        .keywords(keywords(id))
        .opcode(0)
        .task(0)
        .channel(16);
    for (i, (name, t)) in fields(id).iter().enumerate() {
        if mask & (1 << i) == 0 {
            continue;
        }
        b = match t {
            T::Ptr => b.field(name, InType::U64, OutType::Hex),
            T::U32 | T::Err => b.field(name, InType::U32, OutType::Default),
            T::I32 => b.field(name, InType::I32, OutType::Default),
            T::Hex32 => b.field(name, InType::U32, OutType::Hex),
            T::V4 => b.field(name, InType::U32, OutType::Ipv4),
            T::V6 => b.field_ex(name, InType::Binary, OutType::Ipv6, Arity::Scalar, 0),
            T::Port => b.field(name, InType::U16, OutType::Port),
            T::Bool => b.field(name, InType::Bool32, OutType::Default),
        };
    }
    b.build()
}

fn pack(out: &mut Vec<u8>, t: T, v: V) {
    match (t, v) {
        (T::Ptr, V::U64(x)) => out.extend_from_slice(&x.to_le_bytes()),
        (T::V4, V::Addr(a)) => out.extend_from_slice(&a.addr[..4]),
        (T::V6, V::Addr(a)) => {
            out.extend_from_slice(&16u16.to_le_bytes());
            out.extend_from_slice(&a.addr);
        }
        (T::Port, V::Port(p)) => out.extend_from_slice(&p.to_be_bytes()),
        (_, V::U32(x)) => out.extend_from_slice(&x.to_le_bytes()),
        (_, V::I32(x)) => out.extend_from_slice(&x.to_le_bytes()),
        (_, V::U64(x)) => out.extend_from_slice(&(x as u32).to_le_bytes()),
        (_, V::Port(p)) => out.extend_from_slice(&(p as u32).to_le_bytes()),
        (_, V::Addr(a)) => out.extend_from_slice(&a.addr[..4]),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_port_alone_does_not_name_a_socket() {
        use super::{accepts, unmapped};
        let v4 = |a: [u8; 4], p| SockAddr::v4(a, p);
        let mut v6loop = [0u8; 16];
        v6loop[15] = 1;
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[127, 0, 0, 1]);
        let lo4 = v4([127, 0, 0, 1], 5000);
        assert!(accepts(lo4, lo4));
        assert!(!accepts(lo4, v4([127, 0, 0, 1], 5001)), "other port");
        assert!(!accepts(lo4, v4([127, 0, 0, 2], 5000)), "other address");
        assert!(
            !accepts(SockAddr::v6(v6loop, 5000), lo4),
            "::1 is not 127.0.0.1"
        );
        assert!(accepts(v4([0; 4], 5000), lo4), "IPv4 wildcard");
        assert!(!accepts(v4([0; 4], 5000), SockAddr::v6(v6loop, 5000)));
        assert!(
            accepts(SockAddr::v6([0; 16], 5000), lo4),
            "IPv6 wildcard is dual-stack"
        );
        assert!(accepts(lo4, SockAddr::v6(mapped, 5000)), "v4-mapped");
        assert_eq!(unmapped(SockAddr::v6(mapped, 7)), v4([127, 0, 0, 1], 7));
    }

    use super::*;

    #[test]
    fn field_names_match_the_afd_schema() {
        // Names and order checked against ../shared/schemas/winsock-afd.json when it is present.
        let Some(dir) = std::env::var_os("ETWKIT_SHARED")
            .map(std::path::PathBuf::from)
            .or_else(|| {
                let p =
                    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
                p.is_dir().then_some(p)
            })
        else {
            if std::env::var("ETWKIT_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
                panic!("field_names_match_the_afd_schema: ../shared is missing but ETWKIT_REQUIRE_SHARED=1");
            }
            std::io::Write::write_all(
                &mut std::io::stderr(),
                "\n*** SKIPPED field_names_match_the_afd_schema: ../shared not found ***\n\n"
                    .as_bytes(),
            )
            .ok();
            return;
        };
        let text = std::fs::read_to_string(dir.join("schemas/winsock-afd.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["provider"]["guid"].as_str().unwrap(),
            PROVIDER_GUID.to_string()
        );
        for ev in v["events"].as_array().unwrap() {
            let id = ev["id"].as_u64().unwrap() as u16;
            if !EVENT_IDS.contains(&id) {
                continue;
            }
            let names: Vec<&str> = ev["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["name"].as_str().unwrap())
                .collect();
            let ours: Vec<&str> = fields(id).iter().map(|f| f.0).collect();
            assert_eq!(ours, names, "event {id}");
            assert_eq!(
                level(id) as u64,
                ev["level"].as_u64().unwrap(),
                "level of {id}"
            );
            assert_eq!(
                format!("{:#x}", keywords(id)),
                ev["keywords"].as_str().unwrap(),
                "keywords of {id}"
            );
            assert_eq!(title(id), ev["title"].as_str().unwrap(), "title of {id}");
        }
    }

    #[test]
    fn absent_fields_are_absent_from_metadata() {
        let full = build_schema(4, 0b1111).unwrap();
        let partial = build_schema(4, 0b0011).unwrap();
        assert!(full.metadata().windows(7).any(|w| w == b"Address"));
        assert!(!partial.metadata().windows(7).any(|w| w == b"Address"));
        assert_eq!(full.descriptor.id, 4);
        assert_eq!(full.provider_guid(), PROVIDER_GUID);
    }
}
