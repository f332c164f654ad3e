//! Who talked to whom, how much, for how long, and what went wrong: one row per socket, from any
//! Microsoft-Windows-Winsock-AFD event stream (a Windows ETL file decoded with the built-in AFD
//! layouts, live Windows ETW, or etwkit's Linux Winsock provider).
//!
//! Events 1-41 and the newer 1000+ events (enter/exit pairs; counted at exit) are both followed.
//!
//! Input is **decoded** events ([`crate::decode::DecodedEvent`] properties, by AFD field name); a
//! socket is keyed by (process id, `Endpoint`). The process id is the one the socket-creation event
//! names (`UserModePid`), looked up again through the event's `Process` value, so events raised in
//! another context (transport indications) still land on the owner. Endpoints are pointer-sized on
//! Windows (and may be reused after a close: a new creation starts a new row) and etwkit's own
//! socket ids on Linux.
//!
//! Byte counts come from completed operations (ids 23-28), never from posted ones. Failures keep
//! their code and its name: Windows codes (WSA 10000+, NTSTATUS, Win32) for manifest-decoded events,
//! Linux errno for events of etwkit's Linux provider (TraceLogging-decoded).
//!
//! What the events do not say is filled in, and marked, only from exact joins inside the trace:
//! an accepted socket's local address is its listener's; a client's local address is the peer
//! address its listener saw indicated while the client's connect was in flight (the most recent
//! unpaired connect to that listener's address); a datagram sender's remote is the receiver whose
//! drops or receives name the sender's local address.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::decode::{DecodedEvent, Properties, Value};
use crate::event::EventRecord;
use crate::guid::Guid;
use crate::schema::registry::FastMap;

mod codes;
use crate::schema::SchemaSource;
use codes::{abort_reason, drop_reason, is_benign};
pub use codes::{error_code, ErrorCode};

/// Microsoft-Windows-Winsock-AFD.
pub const AFD_PROVIDER: Guid = Guid::from_str_const("e53c6823-7bb8-44bb-90dc-3f86090d48a6");
/// The kernel Process MOF class (Start/End/DCStart/DCEnd carry ProcessId and ImageFileName).
pub const KERNEL_PROCESS_CLASS: Guid = Guid::from_str_const("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c");
/// Microsoft-Windows-Kernel-Process (ProcessStart/ProcessRundown carry ProcessID and ImageName).
pub const KERNEL_PROCESS_PROVIDER: Guid =
    Guid::from_str_const("22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716");

/// Whose error numbers a socket's events carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Os {
    Windows,
    Linux,
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    BindFailed,
    ConnectFailed,
    AcceptFailed,
    SendFailed,
    ReceiveFailed,
    /// AFD (our side) aborted the connection: a reset was sent.
    AfdAbort,
    /// The transport aborted it: a reset was received.
    TransportAbort,
    DatagramDropped,
    CloseFailed,
}

impl FailureKind {
    pub fn words(self) -> &'static str {
        match self {
            FailureKind::BindFailed => "bind failed",
            FailureKind::ConnectFailed => "connect failed",
            FailureKind::AcceptFailed => "accept failed",
            FailureKind::SendFailed => "send failed",
            FailureKind::ReceiveFailed => "receive failed",
            FailureKind::AfdAbort => "aborted by this side (reset sent)",
            FailureKind::TransportAbort => "reset by peer",
            FailureKind::DatagramDropped => "datagrams dropped",
            FailureKind::CloseFailed => "close failed",
        }
    }
}

/// One kind of failure of one socket (repeats counted).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    /// The AFD event id that reported it.
    pub event_id: u16,
    /// Error/Status/Reason value, when the event carries one.
    pub code: Option<ErrorCode>,
    /// The reason in words ("connect failed: connection refused (10061 WSAECONNREFUSED)").
    pub reason: String,
    pub count: u64,
    /// UTC FILETIME of the first occurrence.
    #[serde(serialize_with = "ser_time")]
    pub first: i64,
}

fn ser_time<S: serde::Serializer>(t: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::time::format_rfc3339(*t))
}

fn ser_opt_time<S: serde::Serializer>(t: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&crate::time::format_rfc3339(*t)),
        None => s.serialize_none(),
    }
}

fn ser_opt_addr<S: serde::Serializer>(a: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
    match a {
        Some(a) => s.serialize_str(&fmt_addr(Some(a))),
        None => s.serialize_none(),
    }
}

/// `127.0.0.1:80`, `[::1]:80`, `127.0.0.1:*` (port unknown), `-` (unknown).
pub fn fmt_addr(a: Option<&SocketAddr>) -> String {
    match a {
        None => "-".into(),
        Some(a) if a.port() == 0 => match a.ip() {
            IpAddr::V4(ip) => format!("{ip}:*"),
            IpAddr::V6(ip) => format!("[{ip}]:*"),
        },
        Some(a) => a.to_string(),
    }
}

/// Where an address of a row came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddrSource {
    /// Not known.
    #[default]
    None,
    /// An event of this socket.
    Event,
    /// An exact join with another socket of the trace (see the module doc).
    Joined,
}

/// One socket.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SocketRow {
    pub pid: u32,
    pub process: Option<String>,
    pub endpoint: u64,
    pub os: Os,
    /// `IPv4`, `IPv6`.
    pub family: Option<&'static str>,
    /// `stream`, `datagram`, `raw`...
    pub socket_type: Option<&'static str>,
    /// `TCP`, `UDP`, or the protocol number.
    pub protocol: Option<String>,
    #[serde(serialize_with = "ser_opt_addr")]
    pub local: Option<SocketAddr>,
    pub local_source: AddrSource,
    #[serde(serialize_with = "ser_opt_addr")]
    pub remote: Option<SocketAddr>,
    pub remote_source: AddrSource,
    /// Distinct datagram peers seen (sources of receives and drops, destinations of sends).
    pub peers: u32,
    /// A listening socket (connections were indicated on it).
    pub listener: bool,
    pub accepted: bool,
    pub connections_indicated: u64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_ops: u64,
    pub rx_ops: u64,
    /// Calls that answered "would block" / "in progress" (not failures).
    pub would_block: u64,
    #[serde(serialize_with = "ser_opt_time")]
    pub opened: Option<i64>,
    #[serde(serialize_with = "ser_opt_time")]
    pub connected: Option<i64>,
    #[serde(serialize_with = "ser_opt_time")]
    pub closed: Option<i64>,
    #[serde(serialize_with = "ser_time")]
    pub first_seen: i64,
    #[serde(serialize_with = "ser_time")]
    pub last_seen: i64,
    /// From creation (or first event) to close (or last event).
    pub duration_ms: f64,
    /// `closed` or `open` (still open when the trace ended).
    pub state: &'static str,
    /// The peer closed its side (disconnect indicated).
    pub peer_closed: bool,
    pub failures: Vec<Failure>,
    /// One line: the state, or what went wrong.
    pub outcome: String,
    pub events: u64,
}

/// Totals of one remote endpoint of one process.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RemoteTotals {
    #[serde(serialize_with = "ser_opt_addr")]
    pub remote: Option<SocketAddr>,
    pub protocol: Option<String>,
    pub sockets: u64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub failures: u64,
}

/// Totals of one process.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ProcessTotals {
    pub pid: u32,
    pub process: Option<String>,
    pub sockets: u64,
    pub open: u64,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub failures: u64,
    pub remotes: Vec<RemoteTotals>,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NetReport {
    /// In order of first appearance.
    pub sockets: Vec<SocketRow>,
    /// AFD events analysed.
    pub afd_events: u64,
    /// AFD events carrying no socket this analysis follows (select/poll, newer 1000+ ids...).
    pub afd_events_skipped: u64,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug)]
struct Sock {
    pid: u32,
    endpoint: u64,
    os: Os,
    af: Option<u32>,
    stype: Option<u32>,
    proto: Option<u32>,
    local: Option<SocketAddr>,
    local_src: AddrSource,
    remote: Option<SocketAddr>,
    remote_src: AddrSource,
    peers: Vec<SocketAddr>,
    listener: bool,
    accepted: bool,
    /// The listener of an accepted socket (index into `socks`).
    listened_by: Option<usize>,
    indicated: u64,
    tx: u64,
    rx: u64,
    tx_ops: u64,
    rx_ops: u64,
    would_block: u64,
    created: Option<i64>,
    connect_start: Option<i64>,
    connected: Option<i64>,
    closed: Option<i64>,
    first: i64,
    last: i64,
    peer_closed: bool,
    failures: Vec<Failure>,
    events: u64,
}

impl Sock {
    fn new(pid: u32, endpoint: u64, os: Os, ts: i64) -> Sock {
        Sock {
            pid,
            endpoint,
            os,
            af: None,
            stype: None,
            proto: None,
            local: None,
            local_src: AddrSource::None,
            remote: None,
            remote_src: AddrSource::None,
            peers: Vec::new(),
            listener: false,
            accepted: false,
            listened_by: None,
            indicated: 0,
            tx: 0,
            rx: 0,
            tx_ops: 0,
            rx_ops: 0,
            would_block: 0,
            created: None,
            connect_start: None,
            connected: None,
            closed: None,
            first: ts,
            last: ts,
            peer_closed: false,
            failures: Vec::new(),
            events: 0,
        }
    }

    fn is_stream(&self) -> bool {
        self.stype == Some(1) || self.proto == Some(6)
    }
    fn is_datagram(&self) -> bool {
        self.stype == Some(2) || self.proto == Some(17)
    }

    fn fail(&mut self, kind: FailureKind, id: u16, code: Option<ErrorCode>, detail: &str, ts: i64) {
        if let Some(f) = self.failures.iter_mut().find(|f| {
            f.kind == kind && f.code.as_ref().map(|c| c.code) == code.as_ref().map(|c| c.code)
        }) {
            f.count += 1;
            return;
        }
        let reason = match (&code, detail) {
            (_, d) if !d.is_empty() => format!("{}: {d}", kind.words()),
            (Some(c), _) => format!("{}: {}", kind.words(), c.describe()),
            (None, _) => kind.words().to_string(),
        };
        self.failures.push(Failure {
            kind,
            event_id: id,
            code,
            reason,
            count: 1,
            first: ts,
        });
    }

    fn add_peer(&mut self, a: SocketAddr) {
        if !self.peers.contains(&a) {
            self.peers.push(a);
        }
        if self.remote.is_none() {
            self.remote = Some(a);
            self.remote_src = AddrSource::Event;
        }
    }
}

/// An AFD event, already decoded: the header facts the analysis needs and the properties.
#[derive(Clone, Copy, Debug)]
pub struct AfdEvent<'a> {
    pub id: u16,
    /// The header's process id (used when the event's `Process` was never tied to a pid).
    pub pid: u32,
    /// UTC FILETIME.
    pub timestamp: i64,
    pub os: Os,
    pub props: &'a Properties,
}

/// Accumulates AFD events (in time order) and process names; [`NetAnalyzer::report`] answers.
#[derive(Default)]
pub struct NetAnalyzer {
    socks: Vec<Sock>,
    /// (pid, endpoint) -> latest socket with that key.
    index: FastMap<(u32, u64), usize>,
    /// `Process` value (EPROCESS pointer on Windows, pid on Linux) -> pid.
    process_pid: FastMap<u64, u32>,
    names: HashMap<u32, String>,
    /// (pid, client address) -> listener socket, from connection indications awaiting their accept.
    indications: HashMap<(u32, SocketAddr), usize>,
    /// (listener, time, client address) of every connection indication, for the client join.
    indication_log: Vec<(usize, i64, SocketAddr)>,
    afd_events: u64,
    skipped: u64,
    notes: Vec<String>,
}

fn prop<'a>(p: &'a Properties, name: &str) -> Option<&'a Value> {
    p.0.iter().find(|(k, _)| &**k == name).map(|(_, v)| v)
}

fn num(p: &Properties, name: &str) -> Option<u64> {
    prop(p, name).and_then(|v| match v {
        Value::I64(i) => Some(*i as u64),
        v => v.as_u64(),
    })
}

fn signed(p: &Properties, name: &str) -> Option<i64> {
    prop(p, name).and_then(|v| match v {
        Value::I64(i) => Some(*i),
        // An Int32 field can reach us widened as unsigned.
        v => v.as_u64().map(|u| {
            if u > u32::MAX as u64 {
                u as i64
            } else {
                u as u32 as i32 as i64
            }
        }),
    })
}

/// An Error/Status field: NTSTATUS and WSA codes as the unsigned values they are.
fn status(p: &Properties, name: &str) -> Option<i64> {
    prop(p, name).and_then(|v| match v {
        Value::I64(i) => Some(*i),
        v => v.as_u64().map(|u| u as i64),
    })
}

fn ip(p: &Properties) -> Option<IpAddr> {
    match prop(p, "Address")? {
        Value::Ipv4(a) => Some(IpAddr::V4(*a)),
        Value::Ipv6(a) => Some(IpAddr::V6(*a)),
        Value::SocketAddress(s) => Some(s.ip()),
        Value::String(s) => s.parse().ok(),
        Value::Binary(b) if b.len() == 16 => Some(IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(&b[..]).ok()?,
        ))),
        Value::Binary(b) if b.len() == 4 => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        v => v
            .as_u64()
            .map(|u| IpAddr::V4(Ipv4Addr::from((u as u32).to_le_bytes()))),
    }
}

fn addr(p: &Properties) -> Option<SocketAddr> {
    let ip = ip(p)?;
    let port = match prop(p, "Address") {
        Some(Value::SocketAddress(s)) => s.port(),
        _ => num(p, "Port").unwrap_or(0) as u16,
    };
    Some(SocketAddr::new(ip, port))
}

/// Same address, or `wild` (unspecified address / port 0) matching anything of its family.
fn addr_matches(wild: &SocketAddr, a: &SocketAddr) -> bool {
    (wild.ip() == a.ip() || wild.ip().is_unspecified() && wild.is_ipv4() == a.is_ipv4())
        && (wild.port() == a.port() || wild.port() == 0)
}

/// The UTF-8 basename of an image path (`\Device\...\svchost.exe` -> `svchost.exe`).
fn image_base(s: &str) -> &str {
    s.rsplit(['\\', '/']).next().unwrap_or(s)
}

const PEER_LIMIT: usize = 64;

/// The newer AFD events this analysis follows: create, close, send/receive (with and without
/// address, messages), connect, accept, bind, abort, datagram drop, listen.
const MODERN: &[u16] = &[
    1000, 1001, 1003, 1004, 1005, 1006, 1007, 1009, 1011, 1012, 1013, 1015, 1017, 1018, 1020, 1021,
    1023, 1024, 1026, 1027, 1029, 1030, 1032, 1033, 1037,
];

impl NetAnalyzer {
    pub fn new() -> NetAnalyzer {
        NetAnalyzer::default()
    }

    /// Sets the name shown for process `pid` (a name from the trace wins over one set later).
    pub fn set_process_name(&mut self, pid: u32, name: impl Into<String>) {
        self.names.entry(pid).or_insert_with(|| name.into());
    }

    pub fn has_process_name(&self, pid: u32) -> bool {
        self.names.contains_key(&pid)
    }

    /// AFD events seen so far.
    pub fn afd_events(&self) -> u64 {
        self.afd_events
    }

    pub fn add_note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Any decoded record: AFD events are analysed, kernel process events name processes, the rest
    /// is ignored. Returns whether the record was an AFD event.
    pub fn record(&mut self, rec: &EventRecord<'_>, d: &DecodedEvent) -> bool {
        if rec.provider == AFD_PROVIDER {
            if !d.is_decoded() {
                self.skipped += 1;
                self.afd_events += 1;
                return true;
            }
            let os = if d.source == Some(SchemaSource::TraceLogging) {
                Os::Linux
            } else {
                Os::Windows
            };
            self.add(&AfdEvent {
                id: rec.descriptor.id,
                pid: rec.pid,
                timestamp: rec.timestamp,
                os,
                props: &d.properties,
            });
            return true;
        }
        if rec.provider == KERNEL_PROCESS_CLASS || rec.provider == KERNEL_PROCESS_PROVIDER {
            let p = &d.properties;
            let pid = num(p, "ProcessId").or_else(|| num(p, "ProcessID"));
            let image = prop(p, "ImageFileName")
                .or_else(|| prop(p, "ImageName"))
                .and_then(Value::as_str);
            if let (Some(pid), Some(image)) = (pid, image) {
                let base = image_base(image);
                if !base.is_empty() {
                    // The latest start/rundown names the pid (pids are reused over long traces).
                    self.names.insert(pid as u32, base.to_string());
                }
            }
        }
        false
    }

    fn sock_of(&mut self, pid: u32, endpoint: u64, os: Os, ts: i64) -> usize {
        if let Some(&i) = self.index.get(&(pid, endpoint)) {
            return i;
        }
        self.new_sock(pid, endpoint, os, ts)
    }

    fn new_sock(&mut self, pid: u32, endpoint: u64, os: Os, ts: i64) -> usize {
        let i = self.socks.len();
        self.socks.push(Sock::new(pid, endpoint, os, ts));
        self.index.insert((pid, endpoint), i);
        i
    }

    /// One decoded AFD event (ids 1-41; other ids are counted as skipped).
    pub fn add(&mut self, ev: &AfdEvent<'_>) {
        self.afd_events += 1;
        let p = ev.props;
        let ts = ev.timestamp;
        let process = num(p, "Process");
        if ev.id == 1 || ev.id == 1000 {
            let owner = num(
                p,
                if ev.id == 1 {
                    "UserModePid"
                } else {
                    "ProcessId"
                },
            )
            .filter(|&v| v != 0 && v <= u32::MAX as u64)
            .map(|v| v as u32)
            .unwrap_or(ev.pid);
            if let Some(pr) = process {
                self.process_pid.insert(pr, owner);
            }
        }
        let pid = process
            .and_then(|pr| self.process_pid.get(&pr).copied())
            .unwrap_or(ev.pid);
        let endpoint = match ev.id {
            35 | 36 => num(p, "Listen Endpoint").or_else(|| num(p, "ListenEndpoint")),
            _ => num(p, "Endpoint"),
        };
        let followed = (1..=41).contains(&ev.id) && ev.id != 30 || MODERN.contains(&ev.id);
        let (Some(endpoint), true) = (endpoint.filter(|&e| e != 0), followed) else {
            self.skipped += 1;
            return;
        };
        let os = ev.os;
        let i = match ev.id {
            1 => match self.index.get(&(pid, endpoint)) {
                // A creation after a close: the endpoint was reused; a creation for a socket that
                // only has its accept-time creation pending is the same socket.
                Some(&i) if self.socks[i].created.is_none() && self.socks[i].closed.is_none() => i,
                Some(&i) if self.socks[i].events == 0 => i,
                _ => self.new_sock(pid, endpoint, os, ts),
            },
            // AfdCreate comes as an enter and an exit: both name the same new socket.
            1000 => match self.index.get(&(pid, endpoint)) {
                Some(&i) if self.socks[i].closed.is_none() => i,
                _ => self.new_sock(pid, endpoint, os, ts),
            },
            _ => self.sock_of(pid, endpoint, os, ts),
        };
        if ev.id >= 1000 {
            self.add_modern(ev, pid, i);
            return;
        }
        let err = |name: &str| status(p, name).map(|c| error_code(os, c));
        let s = &mut self.socks[i];
        s.events += 1;
        s.last = s.last.max(ts);
        match ev.id {
            1 => {
                s.created = Some(ts);
                s.af = num(p, "AddressFamily").map(|v| v as u32);
                s.stype = num(p, "SocketType").map(|v| v as u32);
                s.proto = num(p, "Protocol").map(|v| v as u32);
            }
            2 | 3 => match err("Status").filter(|e| e.code != 0) {
                Some(e) => s.fail(FailureKind::BindFailed, ev.id, Some(e), "", ts),
                None => {
                    if let Some(a) = addr(p) {
                        // A later bind with a port beats an earlier one without.
                        if s.local.is_none_or(|l| l.port() == 0 || a.port() != 0) {
                            s.local = Some(a);
                            s.local_src = AddrSource::Event;
                        }
                    }
                }
            },
            4 | 5 => {
                if let Some(a) = addr(p) {
                    s.remote = Some(a);
                    s.remote_src = AddrSource::Event;
                }
                s.connect_start = Some(ts);
            }
            6 => match err("Error").filter(|e| e.code != 0) {
                Some(e) if is_benign(&e) => s.would_block += 1,
                Some(e) => s.fail(FailureKind::ConnectFailed, 6, Some(e), "", ts),
                None => s.connected = Some(ts),
            },
            7 | 8 => {
                let reason = signed(p, "Reason");
                let kind = if ev.id == 7 {
                    FailureKind::AfdAbort
                } else {
                    FailureKind::TransportAbort
                };
                let detail = match (os, reason) {
                    (Os::Windows, Some(r)) => abort_reason(r)
                        .map(|w| format!("{w} (reason {r})"))
                        .unwrap_or_else(|| format!("reason {r}")),
                    _ => String::new(),
                };
                s.fail(kind, ev.id, None, &detail, ts);
            }
            9..=12 => {
                let kind = if ev.id <= 10 {
                    FailureKind::SendFailed
                } else {
                    FailureKind::ReceiveFailed
                };
                match err("Error") {
                    Some(e) if is_benign(&e) => s.would_block += 1,
                    e => s.fail(kind, ev.id, e, "", ts),
                }
            }
            13 => {
                s.closed = Some(ts);
                if let Some(e) = err("Error").filter(|e| e.code != 0) {
                    s.fail(FailureKind::CloseFailed, 13, Some(e), "", ts);
                }
            }
            15 | 16 => match err("Status").filter(|e| e.code != 0) {
                Some(e) => s.fail(FailureKind::AcceptFailed, ev.id, Some(e), "", ts),
                None => {
                    s.accepted = true;
                    s.created.get_or_insert(ts);
                    s.connected.get_or_insert(ts);
                    if let Some(a) = addr(p) {
                        s.remote = Some(a);
                        s.remote_src = AddrSource::Event;
                        if let Some(l) = self.indications.remove(&(pid, a)) {
                            self.socks[i].listened_by = Some(l);
                        }
                    }
                }
            },
            17 => {
                let e = err("Error");
                match e {
                    Some(e) if is_benign(&e) => s.would_block += 1,
                    e => s.fail(FailureKind::AcceptFailed, 17, e, "", ts),
                }
            }
            21 | 22 if s.is_datagram() || s.remote.is_none() => {
                if let Some(a) = addr(p).filter(|_| s.peers.len() < PEER_LIMIT) {
                    s.add_peer(a);
                }
            }
            23 | 26 | 27 => {
                s.rx += num(p, "BufferLength").unwrap_or(0);
                s.rx_ops += 1;
                if ev.id != 23 {
                    if let Some(a) = addr(p).filter(|_| s.peers.len() < PEER_LIMIT) {
                        s.add_peer(a);
                    }
                }
            }
            24 | 25 | 28 => {
                s.tx += num(p, "BufferLength").unwrap_or(0);
                s.tx_ops += 1;
            }
            33 | 34 => {
                let reason = signed(p, "Reason");
                let detail = match (os, reason) {
                    (Os::Windows, Some(r)) => drop_reason(r)
                        .map(|w| format!("{w} (reason {r})"))
                        .unwrap_or_else(|| format!("reason {r}")),
                    (Os::Linux, Some(r)) => {
                        let e = error_code(Os::Linux, r);
                        if r.abs() == 12 {
                            format!("receive buffer full ({r} ENOMEM)")
                        } else {
                            e.describe()
                        }
                    }
                    (_, None) => String::new(),
                };
                s.fail(FailureKind::DatagramDropped, ev.id, None, &detail, ts);
                if let Some(a) = addr(p).filter(|_| s.peers.len() < PEER_LIMIT) {
                    s.add_peer(a);
                }
            }
            35 | 36 => {
                s.listener = true;
                s.indicated += 1;
                if let Some(a) = addr(p) {
                    self.indications.insert((pid, a), i);
                    self.indication_log.push((i, ts, a));
                }
            }
            40 => {
                let e = err("Error");
                s.fail(FailureKind::BindFailed, 40, e, "", ts);
            }
            41 => s.peer_closed = true,
            _ => {}
        }
    }

    /// The newer AFD events (1000+): an enter (`EnterExit` 0, the request) and an exit (1, the
    /// completion, with `Status`); byte counts and outcomes come from exits only.
    fn add_modern(&mut self, ev: &AfdEvent<'_>, pid: u32, i: usize) {
        let p = ev.props;
        let ts = ev.timestamp;
        let os = ev.os;
        let exit = num(p, "EnterExit") == Some(1);
        let status = self::status(p, "Status")
            .filter(|&c| c != 0)
            .map(|c| error_code(os, c));
        let s = &mut self.socks[i];
        s.events += 1;
        s.last = s.last.max(ts);
        let sockaddr = || match prop(p, "Address") {
            Some(Value::SocketAddress(a)) => Some(*a),
            _ => None,
        };
        // Sends and receives: 1003 send, 1005/1007 sendto, 1011/1013 sendmsg; 1004, 1006/1009,
        // 1012/1015 the receiving twins.
        let dir = match ev.id {
            1003 | 1005 | 1007 | 1011 | 1013 => Some(true),
            1004 | 1006 | 1009 | 1012 | 1015 => Some(false),
            _ => None,
        };
        if let Some(send) = dir {
            if let Some(a) = sockaddr().filter(|_| s.peers.len() < PEER_LIMIT) {
                s.add_peer(a);
            }
            if !exit {
                return;
            }
            match status {
                Some(e) if is_benign(&e) => s.would_block += 1,
                Some(e) => {
                    let kind = if send {
                        FailureKind::SendFailed
                    } else {
                        FailureKind::ReceiveFailed
                    };
                    s.fail(kind, ev.id, Some(e), "", ts)
                }
                None => {
                    let n = num(p, "BufferLength").unwrap_or(0);
                    if send {
                        s.tx += n;
                        s.tx_ops += 1;
                    } else {
                        s.rx += n;
                        s.rx_ops += 1;
                    }
                }
            }
            return;
        }
        match ev.id {
            1000 => {
                s.created.get_or_insert(ts);
                s.af = num(p, "AddressFamily").map(|v| v as u32).or(s.af);
                s.stype = num(p, "SocketType").map(|v| v as u32).or(s.stype);
                s.proto = num(p, "Protocol").map(|v| v as u32).or(s.proto);
            }
            1001 => {
                s.closed = Some(ts);
            }
            1017 | 1018 | 1020 | 1021 => {
                if let Some(a) = sockaddr() {
                    s.remote = Some(a);
                    s.remote_src = AddrSource::Event;
                }
                if !exit {
                    s.connect_start = Some(ts);
                    return;
                }
                match status {
                    Some(e) if is_benign(&e) => s.would_block += 1,
                    Some(e) => s.fail(FailureKind::ConnectFailed, ev.id, Some(e), "", ts),
                    None => s.connected = Some(ts),
                }
            }
            1029 | 1030 if exit => match status {
                Some(e) => s.fail(FailureKind::BindFailed, ev.id, Some(e), "", ts),
                None => {
                    if let Some(a) = sockaddr() {
                        if s.local.is_none_or(|l| l.port() == 0 || a.port() != 0) {
                            s.local = Some(a);
                            s.local_src = AddrSource::Event;
                        }
                    }
                }
            },
            1023 | 1024 | 1026 | 1027 if exit => match status {
                Some(e) if is_benign(&e) => s.would_block += 1,
                Some(e) => s.fail(FailureKind::AcceptFailed, ev.id, Some(e), "", ts),
                None => {
                    s.listener = true;
                    s.indicated += 1;
                    let remote = sockaddr();
                    if let Some(acc) = num(p, "AcceptEndpoint").filter(|&e| e != 0) {
                        let k = self.sock_of(pid, acc, os, ts);
                        let a = &mut self.socks[k];
                        a.events += 1;
                        a.accepted = true;
                        a.listened_by = Some(i);
                        a.created.get_or_insert(ts);
                        a.connected.get_or_insert(ts);
                        if let Some(r) = remote {
                            a.remote = Some(r);
                            a.remote_src = AddrSource::Event;
                        }
                    }
                }
            },
            1032 => {
                let r = signed(p, "Reason");
                // AFD_ABORT 4: the transport indicated an abortive disconnect (a reset arrived).
                let kind = if r == Some(4) {
                    FailureKind::TransportAbort
                } else {
                    FailureKind::AfdAbort
                };
                let detail = r
                    .map(|r| {
                        abort_reason(r)
                            .map(|w| format!("{w} (reason {r})"))
                            .unwrap_or_else(|| format!("reason {r}"))
                    })
                    .unwrap_or_default();
                s.fail(kind, ev.id, None, &detail, ts);
            }
            1033 => {
                let detail = signed(p, "Reason")
                    .map(|r| {
                        drop_reason(r)
                            .map(|w| format!("{w} (reason {r})"))
                            .unwrap_or_else(|| format!("reason {r}"))
                    })
                    .unwrap_or_default();
                s.fail(FailureKind::DatagramDropped, ev.id, None, &detail, ts);
                if let Some(a) = sockaddr().filter(|_| s.peers.len() < PEER_LIMIT) {
                    s.add_peer(a);
                }
            }
            1037 => s.listener = true,
            _ => {}
        }
    }

    /// Whether the analysis reads `rec` (AFD events; kernel process events name processes).
    pub fn wants(rec: &EventRecord<'_>) -> bool {
        rec.provider == AFD_PROVIDER
            || rec.provider == KERNEL_PROCESS_CLASS
            || rec.provider == KERNEL_PROCESS_PROVIDER
    }

    /// Reads the events of one ETL file in time order; unreadable parts and the logger's losses
    /// become notes (the figures may then be short). `decoder` is usually
    /// `Decoder::new(Registry::with_builtins())`: the AFD layouts are built in.
    /// Returns what the walk read (its issues: damaged spots, missing buffers), for the caller to
    /// name them.
    pub fn add_file(
        &mut self,
        file: &crate::etl::EtlFile,
        decoder: &crate::decode::Decoder,
    ) -> crate::etl::ReadSummary {
        let s = file.for_each(crate::etl::Order::Time, |r| {
            if Self::wants(&r.event) {
                self.record(&r.event, &decoder.decode(&r.event));
            }
            std::ops::ControlFlow::Continue(())
        });
        let name = file.path().display();
        if s.bad_buffers + s.bad_records > 0 {
            self.add_note(format!(
                "{name}: {} unreadable buffers and {} unreadable records were skipped",
                s.bad_buffers, s.bad_records
            ));
        }
        let missing = file.missing_buffers();
        if missing > 0 {
            // Cut at a buffer boundary nothing is unreadable, but events are missing all the same.
            let held = file.buffers_held();
            self.add_note(format!(
                "{name}: the file holds {held} of the {} buffers the logger wrote: the events of the other {missing} are not in it, so sockets shown open may have closed and counts are lower bounds",
                held + missing
            ));
        }
        let lost = file.header().events_lost;
        if lost > 0 {
            self.add_note(format!(
                "{name}: the logger lost {lost} events; figures may be short"
            ));
        }
        s
    }

    /// The rows, joins applied.
    pub fn report(&self) -> NetReport {
        let mut socks = self.socks.clone();
        join_clients(&mut socks, &self.indication_log);
        for k in 0..socks.len() {
            if let Some(l) = socks[k].listened_by {
                let ll = socks[l].local;
                let s = &mut socks[k];
                if let Some(ll) = ll {
                    if s.local.is_none_or(|a| a.port() == 0) {
                        s.local = Some(ll);
                        s.local_src = AddrSource::Joined;
                    }
                }
            }
        }
        join_datagrams(&mut socks);
        let end = socks.iter().map(|s| s.last).max().unwrap_or(0);
        let sockets = socks.iter().map(|s| self.row(s, end)).collect::<Vec<_>>();
        let mut notes = self.notes.clone();
        if self.skipped > 0 {
            notes.push(format!(
                "{} AFD events name no socket this analysis follows (select/poll, events 1000+, undecodable) and were skipped",
                self.skipped
            ));
        }
        NetReport {
            sockets,
            afd_events: self.afd_events,
            afd_events_skipped: self.skipped,
            notes,
        }
    }

    fn row(&self, s: &Sock, _end: i64) -> SocketRow {
        let start = s.created.unwrap_or(s.first);
        let stop = s.closed.unwrap_or(s.last);
        let family = match s.af {
            Some(2) => Some("IPv4"),
            Some(23) | Some(10) => Some("IPv6"),
            _ => match s.local.or(s.remote) {
                Some(SocketAddr::V4(_)) => Some("IPv4"),
                Some(SocketAddr::V6(_)) => Some("IPv6"),
                None => None,
            },
        };
        let socket_type = s.stype.map(|t| match t {
            1 => "stream",
            2 => "datagram",
            3 => "raw",
            4 => "rdm",
            5 => "seqpacket",
            _ => "other",
        });
        let protocol = match (s.proto, s.stype) {
            (Some(6), _) | (Some(0), Some(1)) | (None, Some(1)) => Some("TCP".to_string()),
            (Some(17), _) | (Some(0), Some(2)) | (None, Some(2)) => Some("UDP".to_string()),
            (Some(1), _) => Some("ICMP".to_string()),
            (Some(58), _) => Some("ICMPv6".to_string()),
            (Some(p), _) => Some(p.to_string()),
            (None, _) => None,
        };
        let state = if s.closed.is_some() { "closed" } else { "open" };
        let outcome = if s.failures.is_empty() {
            if s.listener {
                let n = s.indicated;
                format!(
                    "{state}, listened ({n} connection{})",
                    if n == 1 { "" } else { "s" }
                )
            } else {
                state.to_string()
            }
        } else {
            s.failures
                .iter()
                .map(|f| match f.kind {
                    FailureKind::DatagramDropped => format!("{} datagrams dropped", f.count),
                    FailureKind::AfdAbort => "aborted (reset sent)".to_string(),
                    FailureKind::TransportAbort => "reset by peer".to_string(),
                    k => match &f.code {
                        Some(c) => format!(
                            "{}: {}",
                            k.words(),
                            c.words.map(str::to_string).unwrap_or_else(|| c.describe())
                        ),
                        None => k.words().to_string(),
                    },
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        SocketRow {
            pid: s.pid,
            process: self.names.get(&s.pid).cloned(),
            endpoint: s.endpoint,
            os: s.os,
            family,
            socket_type,
            protocol,
            local: s.local,
            local_source: s.local_src,
            remote: s.remote,
            remote_source: s.remote_src,
            peers: s.peers.len() as u32,
            listener: s.listener,
            accepted: s.accepted,
            connections_indicated: s.indicated,
            tx_bytes: s.tx,
            rx_bytes: s.rx,
            tx_ops: s.tx_ops,
            rx_ops: s.rx_ops,
            would_block: s.would_block,
            opened: s.created,
            connected: s.connected,
            closed: s.closed,
            first_seen: s.first,
            last_seen: s.last,
            duration_ms: (stop - start).max(0) as f64 / 10_000.0,
            state,
            peer_closed: s.peer_closed,
            failures: s.failures.clone(),
            outcome,
            events: s.events,
        }
    }
}

/// A client whose local address no event gave: the listener its connect reached saw the client's
/// address indicated while the connect was in flight. Each indication pairs with the most recent
/// connect (started before it, not yet paired) to an address the listener is bound to; the listener
/// learns its port from the connect when its own bind did not say.
fn join_clients(socks: &mut [Sock], log: &[(usize, i64, SocketAddr)]) {
    if log.is_empty() {
        return;
    }
    // Connects by start time, all of them and per remote port.
    let mut all: Vec<(i64, usize)> = socks
        .iter()
        .enumerate()
        .filter(|(_, c)| c.is_stream() && c.remote.is_some())
        .filter_map(|(k, c)| c.connect_start.map(|t| (t, k)))
        .collect();
    all.sort_unstable();
    let mut by_port: FastMap<u16, Vec<(i64, usize)>> = FastMap::default();
    for &(t, k) in &all {
        if let Some(r) = socks[k].remote {
            by_port.entry(r.port()).or_default().push((t, k));
        }
    }
    let mut paired = vec![false; socks.len()];
    for &(l, t, client) in log {
        let laddr = socks[l].local;
        let list: &[(i64, usize)] = match laddr {
            Some(la) if la.port() != 0 => by_port.get(&la.port()).map_or(&[], |v| &v[..]),
            _ => &all,
        };
        // The most recent connect started before the indication; a bounded look back past
        // connects already paired or to other addresses.
        let end = list.partition_point(|&(s, _)| s <= t);
        let pick = list[..end]
            .iter()
            .rev()
            .take(JOIN_LOOK_BACK)
            .map(|&(_, k)| k)
            .find(|&k| {
                !paired[k]
                    && k != l
                    && socks[k].remote.is_some_and(|r| {
                        r.is_ipv4() == client.is_ipv4()
                            && laddr.is_none_or(|la| addr_matches(&la, &r))
                    })
            });
        let Some(k) = pick else { continue };
        paired[k] = true;
        let r = socks[k].remote;
        let c = &mut socks[k];
        if c.local.is_none_or(|a| a.port() == 0) {
            c.local = Some(client);
            c.local_src = AddrSource::Joined;
        }
        let lst = &mut socks[l];
        if let Some(r) = r {
            match lst.local {
                None => {
                    lst.local = Some(r);
                    lst.local_src = AddrSource::Joined;
                }
                Some(la) if la.port() == 0 => {
                    lst.local = Some(SocketAddr::new(la.ip(), r.port()));
                    lst.local_src = AddrSource::Joined;
                }
                _ => {}
            }
        }
    }
}

/// How many earlier connects the client join looks at per connection indication.
const JOIN_LOOK_BACK: usize = 4096;

/// A datagram socket with no remote: the receiver whose drops or receives came from its local
/// address is its peer (only when exactly one other socket of the trace qualifies).
fn join_datagrams(socks: &mut [Sock]) {
    // Peer address -> the datagram sockets that saw it (up to 3 kept: 2 already say "not one").
    let mut seen: FastMap<SocketAddr, Vec<usize>> = FastMap::default();
    for (j, d) in socks.iter().enumerate().filter(|(_, d)| d.is_datagram()) {
        for a in &d.peers {
            let v = seen.entry(*a).or_default();
            if v.len() < 3 {
                v.push(j);
            }
        }
    }
    for k in 0..socks.len() {
        let s = &socks[k];
        if !s.is_datagram() || s.remote.is_some() {
            continue;
        }
        let Some(local) = s.local.filter(|a| a.port() != 0) else {
            continue;
        };
        let Some(v) = seen.get(&local) else { continue };
        let mut hits = v.iter().filter(|&&j| j != k);
        if let (Some(&j), None) = (hits.next(), hits.next()) {
            if let Some(r) = socks[j].local.filter(|a| a.port() != 0) {
                socks[k].remote = Some(r);
                socks[k].remote_src = AddrSource::Joined;
            }
        }
    }
}

impl NetReport {
    /// Only the sockets where something went wrong.
    pub fn failures(&self) -> impl Iterator<Item = &SocketRow> {
        self.sockets.iter().filter(|s| !s.failures.is_empty())
    }

    /// Totals per process and, inside, per remote endpoint (sockets without a remote grouped as one).
    pub fn by_process(&self) -> Vec<ProcessTotals> {
        let mut procs: BTreeMap<u32, ProcessTotals> = BTreeMap::new();
        let mut remotes: BTreeMap<(u32, String, Option<String>), RemoteTotals> = BTreeMap::new();
        for s in &self.sockets {
            let p = procs.entry(s.pid).or_insert_with(|| ProcessTotals {
                pid: s.pid,
                process: s.process.clone(),
                sockets: 0,
                open: 0,
                tx_bytes: 0,
                rx_bytes: 0,
                failures: 0,
                remotes: Vec::new(),
            });
            let nfail: u64 = s.failures.iter().map(|f| f.count).sum();
            p.sockets += 1;
            p.open += (s.state == "open") as u64;
            p.tx_bytes += s.tx_bytes;
            p.rx_bytes += s.rx_bytes;
            p.failures += nfail;
            let r = remotes
                .entry((s.pid, fmt_addr(s.remote.as_ref()), s.protocol.clone()))
                .or_insert_with(|| RemoteTotals {
                    remote: s.remote,
                    protocol: s.protocol.clone(),
                    sockets: 0,
                    tx_bytes: 0,
                    rx_bytes: 0,
                    failures: 0,
                });
            r.sockets += 1;
            r.tx_bytes += s.tx_bytes;
            r.rx_bytes += s.rx_bytes;
            r.failures += nfail;
        }
        for ((pid, _, _), r) in remotes {
            if let Some(p) = procs.get_mut(&pid) {
                p.remotes.push(r);
            }
        }
        let mut v: Vec<ProcessTotals> = procs.into_values().collect();
        for p in &mut v {
            p.remotes
                .sort_by_key(|r| std::cmp::Reverse(r.tx_bytes + r.rx_bytes));
        }
        v.sort_by_key(|p| std::cmp::Reverse(p.tx_bytes + p.rx_bytes));
        v
    }

    /// The tcplife-style table: PID, process, protocol, local, remote, TX, RX, duration, outcome.
    pub fn to_table(&self, failures_only: bool) -> String {
        let rows: Vec<&SocketRow> = if failures_only {
            self.failures().collect()
        } else {
            self.sockets.iter().collect()
        };
        let head = [
            "PID", "PROCESS", "PROTO", "LOCAL", "REMOTE", "TX", "RX", "MS", "OUTCOME",
        ];
        let cells: Vec<[String; 9]> = rows
            .iter()
            .map(|s| {
                let fam = match (s.protocol.as_deref(), s.family) {
                    (Some(p), Some("IPv6")) => format!("{p}6"),
                    (Some(p), _) => p.to_string(),
                    (None, _) => "?".into(),
                };
                let outcome = if failures_only {
                    s.failures
                        .iter()
                        .map(|f| {
                            if f.count > 1 {
                                format!("{} x{}", f.reason, f.count)
                            } else {
                                f.reason.clone()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                } else {
                    s.outcome.clone()
                };
                [
                    s.pid.to_string(),
                    s.process.clone().unwrap_or_else(|| "?".into()),
                    fam,
                    fmt_addr(s.local.as_ref()),
                    fmt_addr(s.remote.as_ref()),
                    s.tx_bytes.to_string(),
                    s.rx_bytes.to_string(),
                    format!("{:.3}", s.duration_ms),
                    outcome,
                ]
            })
            .collect();
        let mut w = head.map(str::len);
        for c in &cells {
            for (i, x) in c.iter().enumerate() {
                w[i] = w[i].max(x.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, c: &[&str]| {
            for (i, x) in c.iter().enumerate() {
                let right = matches!(i, 0 | 5 | 6 | 7);
                if i == c.len() - 1 {
                    out.push_str(x);
                } else if right {
                    let _ = write!(out, "{x:>width$}  ", width = w[i]);
                } else {
                    let _ = write!(out, "{x:<width$}  ", width = w[i]);
                }
            }
            out.push('\n');
        };
        line(&mut out, &head);
        for c in &cells {
            let r: Vec<&str> = c.iter().map(String::as_str).collect();
            line(&mut out, &r);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(v: &[(&str, Value)]) -> Properties {
        let mut p = Properties::default();
        for (k, x) in v {
            p.push(*k, x.clone());
        }
        p
    }

    fn ev(an: &mut NetAnalyzer, id: u16, ts: i64, v: &[(&str, Value)]) {
        let mut all = vec![("Process", Value::Pointer(0xffff_8000_0000_1000))];
        all.extend_from_slice(v);
        let p = props(&all);
        an.add(&AfdEvent {
            id,
            pid: 77,
            timestamp: ts,
            os: Os::Windows,
            props: &p,
        });
    }

    #[test]
    fn open_at_the_end_before_the_trace_and_would_block() {
        let mut an = NetAnalyzer::new();
        let ep = |e| ("Endpoint", Value::Pointer(e));
        // A socket created in the trace, connected, sending, never closed.
        ev(
            &mut an,
            1,
            10_000,
            &[
                ep(0xa0),
                ("AddressFamily", Value::U64(2)),
                (
                    "SocketType",
                    Value::Mapped {
                        value: 1,
                        name: "SOCK_STREAM".into(),
                    },
                ),
                ("Protocol", Value::U64(6)),
                ("UserModePid", Value::Pointer(4242)),
            ],
        );
        ev(
            &mut an,
            4,
            20_000,
            &[
                ep(0xa0),
                ("Address", Value::Ipv4(Ipv4Addr::new(192, 0, 2, 7))),
                ("Port", Value::Port(443)),
            ],
        );
        ev(
            &mut an,
            6,
            30_000,
            &[ep(0xa0), ("Error", Value::NtStatus(0))],
        );
        ev(
            &mut an,
            24,
            40_000,
            &[ep(0xa0), ("BufferLength", Value::Hex(300))],
        );
        // A receive that would block (WSAEWOULDBLOCK): counted, not a failure.
        ev(
            &mut an,
            11,
            45_000,
            &[ep(0xa0), ("Error", Value::NtStatus(10035))],
        );
        // A socket that existed before the trace: only a receive and its close are seen; its events
        // name the same Process, so they belong to pid 4242 although the header says 77.
        ev(
            &mut an,
            23,
            50_000,
            &[ep(0xb0), ("BufferLength", Value::Hex(20))],
        );
        ev(
            &mut an,
            13,
            60_000,
            &[ep(0xb0), ("Error", Value::NtStatus(0))],
        );
        let r = an.report();
        assert_eq!(r.sockets.len(), 2);
        let a = &r.sockets[0];
        assert_eq!((a.pid, a.state, a.outcome.as_str()), (4242, "open", "open"));
        assert_eq!(a.protocol.as_deref(), Some("TCP"));
        assert_eq!(a.remote, Some("192.0.2.7:443".parse().unwrap()));
        assert_eq!((a.tx_bytes, a.tx_ops, a.would_block), (300, 1, 1));
        assert!(a.failures.is_empty());
        assert_eq!(a.duration_ms, 3.5, "from creation to the last event");
        let b = &r.sockets[1];
        assert_eq!(
            (b.pid, b.state, b.opened, b.rx_bytes),
            (4242, "closed", None, 20)
        );
        assert_eq!(b.family, None);
    }
}
