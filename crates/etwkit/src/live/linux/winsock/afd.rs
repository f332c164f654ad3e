//! The Microsoft-Windows-Winsock-AFD events as this provider emits them: ids, field lists and types,
//! titles, levels and keywords (names exactly as winsock-afd.json), and their TraceLogging encoding.

use super::*;

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

pub(super) const PE: [(&str, T); 2] = [("Process", T::Ptr), ("Endpoint", T::Ptr)];

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
    pub(super) fn new(id: u16, pid: u32, tid: u32, cpu: u16, timestamp: i64) -> AfdEvent {
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
    pub(super) fn set(&mut self, name: &str, v: V) -> &mut Self {
        if let Some(i) = fields(self.id).iter().position(|(n, _)| *n == name) {
            self.vals[i] = Some(v);
        }
        self
    }
    pub(super) fn addr(&mut self, a: Option<SockAddr>) -> &mut Self {
        if let Some(a) = a {
            self.set("Address", V::Addr(a));
            self.set("Port", V::Port(a.port));
        }
        self
    }
    /// Sets the Address and Port fields, or removes both.
    pub(in crate::live::linux) fn set_addr(&mut self, a: Option<SockAddr>) {
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
    pub(super) fn endpoint(&self) -> Option<u64> {
        match self.get("Endpoint").or_else(|| self.get("Listen Endpoint")) {
            Some(V::U64(s)) => Some(s),
            _ => None,
        }
    }
    #[cfg(test)]
    pub(in crate::live::linux) fn for_test(id: u16, sock: u64, timestamp: i64) -> AfdEvent {
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

/// Windows AF_* numbering (AF_INET6 is 23 on Windows, 10 on Linux).
pub(super) fn win_family(linux: u16) -> u32 {
    match linux as i32 {
        libc::AF_INET6 => 23,
        f => f as u32,
    }
}

/// Linux (level, optname) → AFD_OPTION_ValueMap code, for the options the map has.
pub(super) fn afd_option(level: i32, name: i32) -> Option<u32> {
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => Some(1),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) | (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE) => Some(6),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) | (libc::SOL_SOCKET, libc::SO_SNDBUFFORCE) => Some(7),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => Some(13),
        _ => None,
    }
}

pub(super) fn build_schema(id: u16, mask: u8) -> Result<TlSchema, crate::tlg::TlError> {
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

pub(super) fn pack(out: &mut Vec<u8>, t: T, v: V) {
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
