//! The scenario as a Windows trace: Microsoft-Windows-Winsock-AFD manifest events (EVENT_HEADER,
//! the provider's GUID, ids 1-41 version 0) whose payloads are laid out field by field from
//! ../shared/schemas/winsock-afd.json (pointer-sized Process/Endpoint, big-endian ports, IPv4 as 4
//! bytes in network order, IPv6 as 16 bytes), produced by a 64-bit and a 32-bit (EVENT_HEADER32)
//! process, with Windows error codes; plus kernel Process DCStart records naming the processes.
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::event::flags;
use etwkit::{EventDescriptor, EventRecord, Guid, HeaderType};

use super::{sockets, Params};

pub const AFD: Guid = Guid::from_str_const("e53c6823-7bb8-44bb-90dc-3f86090d48a6");
pub const START: i64 = 133_500_000_000_000_000;

/// A field value, encoded as the schema's inType says.
#[derive(Clone, Copy, Debug)]
pub enum V {
    N(u64),
    I(i64),
    Addr(IpAddr),
    /// A SOCKADDR_IN / SOCKADDR_IN6 (family little-endian, port big-endian), for `win:Binary`
    /// fields whose length is another field (`AddressLen`).
    Sock(SocketAddr),
}

/// The SOCKADDR bytes of `a` (AF_INET 2: 16 bytes; AF_INET6 23: 28 bytes).
pub fn sockaddr(a: SocketAddr) -> Vec<u8> {
    let mut v = Vec::new();
    match a {
        SocketAddr::V4(a) => {
            v.extend_from_slice(&2u16.to_le_bytes());
            v.extend_from_slice(&a.port().to_be_bytes());
            v.extend_from_slice(&a.ip().octets());
            v.extend_from_slice(&[0; 8]);
        }
        SocketAddr::V6(a) => {
            v.extend_from_slice(&23u16.to_le_bytes());
            v.extend_from_slice(&a.port().to_be_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
            v.extend_from_slice(&a.ip().octets());
            v.extend_from_slice(&0u32.to_le_bytes());
        }
    }
    v
}

/// One field: (name, inType, fixed length, length field).
type Field = (String, String, Option<u64>, Option<String>);

/// Field layouts by event id.
pub struct Layouts(HashMap<u16, Vec<Field>>);

impl Layouts {
    pub fn load(schema: &Path) -> Layouts {
        let j: serde_json::Value =
            serde_json::from_slice(&std::fs::read(schema).expect("winsock-afd.json")).unwrap();
        let mut m = HashMap::new();
        for e in j["events"].as_array().unwrap() {
            let id = e["id"].as_u64().unwrap() as u16;
            let fields = e["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (
                        f["name"].as_str().unwrap().to_string(),
                        f["inType"].as_str().unwrap().to_string(),
                        f["length"].as_u64(),
                        f["length"].as_str().map(str::to_string),
                    )
                })
                .collect();
            m.insert(id, fields);
        }
        Layouts(m)
    }

    /// The payload of event `id`: every field of the layout, in order, from `vals`.
    pub fn payload(&self, id: u16, ptr: usize, vals: &[(&str, V)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, in_type, len, _) in &self.0[&id] {
            let v = vals
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("event {id}: no value for field {name}"))
                .1;
            match (in_type.as_str(), v) {
                ("win:Pointer", V::N(n)) => out.extend_from_slice(&n.to_le_bytes()[..ptr]),
                ("win:UInt32" | "win:Boolean", V::N(n)) => {
                    out.extend_from_slice(&(n as u32).to_le_bytes())
                }
                ("win:Int32", V::I(n)) => out.extend_from_slice(&(n as i32).to_le_bytes()),
                ("win:Int32", V::N(n)) => out.extend_from_slice(&(n as u32).to_le_bytes()),
                // Ports are stored big-endian.
                ("win:UInt16", V::N(n)) => out.extend_from_slice(&(n as u16).to_be_bytes()),
                // IPv4: the 4 address bytes in network order.
                ("win:UInt32", V::Addr(IpAddr::V4(a))) => out.extend_from_slice(&a.octets()),
                ("win:Binary", V::Sock(a)) => {
                    assert_eq!(f_len_name(&self.0[&id], name), Some("AddressLen"));
                    out.extend_from_slice(&sockaddr(a))
                }
                ("win:Binary", V::Addr(IpAddr::V6(a))) => {
                    assert_eq!(*len, Some(16));
                    out.extend_from_slice(&a.octets())
                }
                (t, v) => panic!("event {id} field {name}: {t} cannot hold {v:?}"),
            }
        }
        out
    }
}

fn f_len_name<'a>(
    fields: &'a [(String, String, Option<u64>, Option<String>)],
    name: &str,
) -> Option<&'a str> {
    fields
        .iter()
        .find(|f| f.0 == name)
        .and_then(|f| f.3.as_deref())
}

/// One process of the file.
pub struct Proc {
    pub pid: u32,
    pub tid: u32,
    /// 8: EVENT_HEADER64 records; 4: EVENT_HEADER32 records.
    pub ptr: usize,
    /// The EPROCESS-style `Process` value of its events.
    pub process: u64,
    pub endpoint_base: u64,
    pub image: &'static str,
    /// Plays the scenario with the newer AFD events (1000+, enter/exit pairs, NTSTATUS codes).
    pub modern: bool,
    pub codes: super::Codes,
}

pub struct Timeline<'l> {
    pub layouts: &'l Layouts,
    pub t: i64,
    pub events: Vec<EventRecord<'static>>,
    pub kernel: Vec<(i64, Vec<u8>)>,
}

impl<'l> Timeline<'l> {
    pub fn new(layouts: &'l Layouts) -> Self {
        Timeline {
            layouts,
            t: START + 10_000_000,
            events: Vec::new(),
            kernel: Vec::new(),
        }
    }

    /// An AFD event of `p` with header pid `hdr_pid` (0 for transport-context events).
    fn ev_as(&mut self, p: &Proc, hdr_pid: u32, id: u16, vals: &[(&str, V)]) {
        let mut all: Vec<(&str, V)> = vec![("Process", V::N(p.process))];
        all.extend_from_slice(vals);
        let payload = self.layouts.payload(id, p.ptr, &all);
        self.t += 1_000;
        let (ht, fl) = if p.ptr == 8 {
            (HeaderType::EventHeader64, flags::HEADER_64_BIT)
        } else {
            (HeaderType::EventHeader32, flags::HEADER_32_BIT)
        };
        self.events.push(EventRecord {
            header_type: ht,
            flags: fl,
            provider: AFD,
            descriptor: EventDescriptor {
                id,
                version: 0,
                channel: 16,
                level: if (18..=39).contains(&id) && !(33..=34).contains(&id) || id == 41 {
                    5
                } else {
                    4
                },
                opcode: 0,
                task: 0,
                keywords: if id == 33 || id == 34 {
                    0x100_0000_0000
                } else {
                    0
                },
            },
            hook_id: None,
            pid: hdr_pid,
            tid: if hdr_pid == 0 { 0 } else { p.tid },
            cpu: 0,
            timestamp: self.t,
            raw_timestamp: self.t,
            kernel_time: 0,
            user_time: 0,
            activity_id: Guid::default(),
            pointer_size: p.ptr as u8,
            payload: Cow::Owned(payload),
            ext: Cow::Owned(Vec::new()),
        });
    }

    fn ev(&mut self, p: &Proc, id: u16, vals: &[(&str, V)]) {
        self.ev_as(p, p.pid, id, vals)
    }

    /// Kernel Process DCStart (version 3) for `p`, a SYSTEM_TRACE_HEADER record.
    pub fn process_rundown(&mut self, p: &Proc) {
        let w = p.ptr;
        let mut pl = Vec::new();
        pl.extend_from_slice(&p.process.to_le_bytes()[..w]); // UniqueProcessKey
        pl.extend_from_slice(&p.pid.to_le_bytes()); // ProcessId
        pl.extend_from_slice(&4u32.to_le_bytes()); // ParentId
        pl.extend_from_slice(&1u32.to_le_bytes()); // SessionId
        pl.extend_from_slice(&0i32.to_le_bytes()); // ExitStatus
        pl.extend_from_slice(&0x1a_d000u64.to_le_bytes()[..w]); // DirectoryTableBase
        pl.extend_from_slice(&0u32.to_le_bytes()); // UserSID: none (4 bytes of 0)
        pl.extend_from_slice(p.image.as_bytes()); // ImageFileName
        pl.push(0);
        for u in format!("C:\\bin\\{} --serve", p.image).encode_utf16() {
            pl.extend_from_slice(&u.to_le_bytes()); // CommandLine
        }
        pl.extend_from_slice(&[0, 0]);
        self.t += 1_000;
        let mut r = Vec::new();
        r.extend_from_slice(&3u16.to_le_bytes()); // version 3
        r.push(if w == 8 { 0x02 } else { 0x01 }); // SYSTEM64 / SYSTEM32
        r.push(0xC0);
        r.extend_from_slice(&((0x20 + pl.len()) as u16).to_le_bytes());
        r.extend_from_slice(&0x0303u16.to_le_bytes()); // Process group, DCStart
        r.extend_from_slice(&0u32.to_le_bytes());
        r.extend_from_slice(&0u32.to_le_bytes());
        r.extend_from_slice(&self.t.to_le_bytes());
        r.extend_from_slice(&[0u8; 8]);
        r.extend_from_slice(&pl);
        self.kernel.push((self.t, r));
    }

    /// Plays the scenario as process `p` did it.
    pub fn play(&mut self, p: &Proc, s: &Params, udp_sender_port: u16) {
        let socks = sockets(s);
        let ep = |name: &str| {
            // The UDP sender reuses the holder's endpoint address (closed long before): a pointer
            // reused after a close is a new socket.
            let name = if name == "udp sender" {
                "refused-port holder"
            } else {
                name
            };
            p.endpoint_base + 0x100 * socks.iter().position(|k| k.name == name).unwrap() as u64
        };
        let a = |port: u16, v6: bool| -> (IpAddr, u16) {
            let ip = if v6 {
                IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
            } else {
                IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
            };
            (ip, port)
        };
        let create = |t: &mut Self, name: &str, v6: bool, udp: bool| {
            t.ev(
                p,
                1,
                &[
                    ("Endpoint", V::N(ep(name))),
                    ("AddressFamily", V::N(if v6 { 23 } else { 2 })),
                    ("SocketType", V::N(if udp { 2 } else { 1 })),
                    ("Protocol", V::N(if udp { 17 } else { 6 })),
                    ("UserModePid", V::N(p.pid as u64)),
                ],
            )
        };
        let with_addr =
            |t: &mut Self, id4: u16, name: &str, (ip, port): (IpAddr, u16), extra: &[(&str, V)]| {
                let id = if ip.is_ipv6() { id4 + 1 } else { id4 };
                let mut v = vec![
                    ("Endpoint", V::N(ep(name))),
                    ("Address", V::Addr(ip)),
                    ("Port", V::N(port as u64)),
                ];
                v.extend_from_slice(extra);
                t.ev(p, id, &v)
            };
        let plain = |t: &mut Self, id: u16, name: &str, extra: &[(&str, V)]| {
            let mut v = vec![("Endpoint", V::N(ep(name)))];
            v.extend_from_slice(extra);
            t.ev(p, id, &v)
        };
        let buf = |n: u64| [("Buffer", V::N(0x7ff0_1000)), ("BufferLength", V::N(n))];
        let ok = [("Status", V::N(0))];
        for (v6, e, l, c, sv) in [
            (false, &s.v4, "v4 listener", "v4 client", "v4 server"),
            (true, &s.v6, "v6 listener", "v6 client", "v6 server"),
        ] {
            create(self, l, v6, false);
            with_addr(self, 2, l, a(e.server_port, v6), &ok);
            create(self, c, v6, false);
            with_addr(self, 4, c, a(e.server_port, v6), &[]);
            // The listener's connection indication arrives in transport context (header pid 0).
            let id = if v6 { 36 } else { 35 };
            let (ip, port) = a(e.client_port, v6);
            self.ev_as(
                p,
                0,
                id,
                &[
                    ("Listen Endpoint", V::N(ep(l))),
                    ("Address", V::Addr(ip)),
                    ("Port", V::N(port as u64)),
                ],
            );
            plain(self, 6, c, &[("Error", V::N(0))]);
            create(self, sv, v6, false);
            with_addr(self, 15, sv, a(e.client_port, v6), &ok);
            // Posted sends do not count; completions do.
            plain(
                self,
                18,
                c,
                &[
                    ("FastPath", V::N(1)),
                    ("BufferCount", V::I(1)),
                    ("Buffer", V::N(0x7ff0_1000)),
                    ("BufferLength", V::N(e.bytes)),
                ],
            );
            plain(self, 24, c, &buf(e.bytes / 2));
            plain(self, 24, c, &buf(e.bytes - e.bytes / 2));
            plain(self, 14, c, &[("Error", V::N(0))]);
            plain(self, 23, sv, &buf(e.bytes));
            plain(self, 24, sv, &buf(e.bytes));
            plain(self, 23, c, &buf(e.bytes - 100));
            plain(self, 23, c, &buf(100));
            plain(self, 13, c, &[("Error", V::N(0))]);
            plain(self, 13, sv, &[("Error", V::N(0))]);
            plain(self, 13, l, &[("Error", V::N(0))]);
        }
        let (h, rc) = ("refused-port holder", "refused client");
        create(self, h, false, false);
        with_addr(self, 2, h, a(s.refused_port, false), &ok);
        create(self, rc, false, false);
        with_addr(self, 4, rc, a(s.refused_port, false), &[]);
        plain(self, 6, rc, &[("Error", V::N(10061))]);
        plain(self, 13, rc, &[("Error", V::N(0))]);
        plain(self, 13, h, &[("Error", V::N(0))]);

        let (b, fb) = ("busy listener", "bind to the busy port");
        create(self, b, false, false);
        with_addr(self, 2, b, a(s.busy_port, false), &ok);
        create(self, fb, false, false);
        plain(self, 40, fb, &[("Error", V::N(10048))]);
        plain(self, 13, fb, &[("Error", V::N(0))]);
        plain(self, 13, b, &[("Error", V::N(0))]);

        let (rl, rcl, rs) = ("reset listener", "reset client", "reset server");
        create(self, rl, false, false);
        with_addr(self, 2, rl, a(s.reset_server_port, false), &ok);
        create(self, rcl, false, false);
        with_addr(self, 4, rcl, a(s.reset_server_port, false), &[]);
        let (ip, port) = a(s.reset_client_port, false);
        self.ev_as(
            p,
            0,
            35,
            &[
                ("Listen Endpoint", V::N(ep(rl))),
                ("Address", V::Addr(ip)),
                ("Port", V::N(port as u64)),
            ],
        );
        plain(self, 6, rcl, &[("Error", V::N(0))]);
        create(self, rs, false, false);
        with_addr(self, 15, rs, a(s.reset_client_port, false), &ok);
        // AFD_ABORT 2: abortive disconnect requested; 4: transport indicated abortive disconnect.
        plain(self, 7, rs, &[("Reason", V::I(2))]);
        plain(self, 13, rs, &[("Error", V::N(0))]);
        self.ev_as(p, 0, 8, &[("Endpoint", V::N(ep(rcl))), ("Reason", V::I(4))]);
        plain(self, 11, rcl, &[("Error", V::N(10054))]);
        plain(self, 13, rcl, &[("Error", V::N(0))]);
        plain(self, 13, rl, &[("Error", V::N(0))]);

        let (rx, tx) = ("udp receiver", "udp sender");
        create(self, rx, false, true);
        with_addr(self, 2, rx, a(s.udp_port, false), &ok);
        create(self, tx, false, true);
        with_addr(self, 2, tx, a(udp_sender_port, false), &ok);
        for _ in 0..s.udp_sent {
            with_addr(
                self,
                21,
                tx,
                a(s.udp_port, false),
                &[
                    ("FastPath", V::N(0)),
                    ("BufferCount", V::I(1)),
                    ("Buffer", V::N(0x7ff0_2000)),
                    ("BufferLength", V::N(s.udp_size)),
                ],
            );
            plain(self, 28, tx, &buf(s.udp_size));
        }
        let (ip, port) = a(udp_sender_port, false);
        for _ in 0..s.udp_sent - s.udp_received {
            // AFD_DGRAM_DROP 2: insufficient local buffer space; raised in transport context.
            self.ev_as(
                p,
                0,
                33,
                &[
                    ("Endpoint", V::N(ep(rx))),
                    ("PacketSize", V::I(s.udp_size as i64)),
                    ("Address", V::Addr(ip)),
                    ("Port", V::N(port as u64)),
                    ("Reason", V::I(2)),
                ],
            );
        }
        for _ in 0..s.udp_received {
            with_addr(
                self,
                26,
                rx,
                (ip, port),
                &[
                    ("BufferCount", V::I(1)),
                    ("Buffer", V::N(0x7ff0_3000)),
                    ("BufferLength", V::N(s.udp_size)),
                ],
            );
        }
        plain(self, 13, tx, &[("Error", V::N(0))]);
        plain(self, 13, rx, &[("Error", V::N(0))]);
    }

    /// Plays the scenario as process `p` did it, in the newer AFD events: each call an enter
    /// (`EnterExit` 0) and an exit (1, with its NTSTATUS); addresses as SOCKADDRs.
    pub fn play_modern(&mut self, p: &Proc, s: &Params, udp_sender_port: u16) {
        let socks = sockets(s);
        let ep = |name: &str| {
            let name = if name == "udp sender" {
                "refused-port holder"
            } else {
                name
            };
            p.endpoint_base + 0x100 * socks.iter().position(|k| k.name == name).unwrap() as u64
        };
        let lo = |port: u16, v6: bool| -> SocketAddr {
            if v6 {
                SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), port)
            } else {
                SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port)
            }
        };
        // One call: enter then exit, the fields of `vals` in both, Status on the exit.
        let call = |t: &mut Self, id: u16, name: &str, vals: &[(&str, V)], status: u64| {
            for (ee, st) in [(0u64, 0u64), (1, status)] {
                let mut v = vec![
                    ("EnterExit", V::N(ee)),
                    ("Location", V::N(0x40 + id as u64)),
                    ("Endpoint", V::N(ep(name))),
                    ("Status", V::N(st)),
                ];
                v.extend_from_slice(vals);
                t.ev(p, id, &v);
            }
        };
        let addr = |a: SocketAddr| {
            [
                ("AddressLen", V::N(sockaddr(a).len() as u64)),
                ("Address", V::Sock(a)),
            ]
        };
        let create = |t: &mut Self, name: &str, v6: bool, udp: bool| {
            call(
                t,
                1000,
                name,
                &[
                    ("AddressFamily", V::N(if v6 { 23 } else { 2 })),
                    ("SocketType", V::N(if udp { 2 } else { 1 })),
                    ("Protocol", V::N(if udp { 17 } else { 6 })),
                    ("ProcessId", V::N(p.pid as u64)),
                ],
                0,
            )
        };
        let bind = |t: &mut Self, name: &str, a: SocketAddr, status: u64| {
            call(t, 1030, name, &addr(a), status)
        };
        let io = |t: &mut Self, id: u16, name: &str, n: u64, status: u64| {
            call(
                t,
                id,
                name,
                &[
                    ("BufferCount", V::N(1)),
                    ("Buffer", V::N(0x7ff0_1000)),
                    ("BufferLength", V::N(n)),
                ],
                status,
            )
        };
        let io_addr = |t: &mut Self, id: u16, name: &str, n: u64, a: SocketAddr| {
            let [l, ad] = addr(a);
            call(
                t,
                id,
                name,
                &[
                    ("BufferCount", V::N(1)),
                    ("Buffer", V::N(0x7ff0_1000)),
                    ("BufferLength", V::N(n)),
                    l,
                    ad,
                ],
                0,
            )
        };
        let connect = |t: &mut Self, name: &str, a: SocketAddr, status: u64| {
            let [l, ad] = addr(a);
            call(
                t,
                1018,
                name,
                &[("Buffer", V::N(0)), ("BufferLength", V::N(0)), l, ad],
                status,
            )
        };
        let accept = |t: &mut Self, listener: &str, accepted: &str, a: SocketAddr| {
            let [l, ad] = addr(a);
            call(
                t,
                1024,
                listener,
                &[
                    ("Buffer", V::N(0)),
                    ("BufferLength", V::N(0)),
                    l,
                    ad,
                    ("AcceptEndpoint", V::N(ep(accepted))),
                    ("CurrentBacklog", V::N(0)),
                ],
                0,
            )
        };
        let close = |t: &mut Self, name: &str| call(t, 1001, name, &[], 0);
        let listen = |t: &mut Self, name: &str| call(t, 1037, name, &[("Backlog", V::N(128))], 0);
        for (v6, e, l, c, sv) in [
            (false, &s.v4, "v4 listener", "v4 client", "v4 server"),
            (true, &s.v6, "v6 listener", "v6 client", "v6 server"),
        ] {
            create(self, l, v6, false);
            bind(self, l, lo(e.server_port, v6), 0);
            listen(self, l);
            create(self, c, v6, false);
            // Winsock binds a connecting socket implicitly; the exit names the address it got.
            bind(self, c, lo(e.client_port, v6), 0);
            connect(self, c, lo(e.server_port, v6), 0);
            create(self, sv, v6, false);
            accept(self, l, sv, lo(e.client_port, v6));
            io(self, 1003, c, e.bytes / 2, 0);
            io(self, 1003, c, e.bytes - e.bytes / 2, 0);
            io(self, 1004, sv, e.bytes, 0);
            io(self, 1003, sv, e.bytes, 0);
            // A receive that would block is no failure and moves no bytes.
            io(self, 1004, c, 0, 0x103);
            io(self, 1004, c, e.bytes, 0);
            close(self, c);
            close(self, sv);
            close(self, l);
        }
        let (h, rc) = ("refused-port holder", "refused client");
        create(self, h, false, false);
        bind(self, h, lo(s.refused_port, false), 0);
        create(self, rc, false, false);
        connect(self, rc, lo(s.refused_port, false), 0xC000_0236);
        close(self, rc);
        close(self, h);

        let (b, fb) = ("busy listener", "bind to the busy port");
        create(self, b, false, false);
        bind(self, b, lo(s.busy_port, false), 0);
        listen(self, b);
        create(self, fb, false, false);
        bind(self, fb, lo(s.busy_port, false), 0xC000_020A);
        close(self, fb);
        close(self, b);

        let (rl, rcl, rs) = ("reset listener", "reset client", "reset server");
        create(self, rl, false, false);
        bind(self, rl, lo(s.reset_server_port, false), 0);
        listen(self, rl);
        create(self, rcl, false, false);
        bind(self, rcl, lo(s.reset_client_port, false), 0);
        connect(self, rcl, lo(s.reset_server_port, false), 0);
        create(self, rs, false, false);
        accept(self, rl, rs, lo(s.reset_client_port, false));
        let abort = |t: &mut Self, name: &str, reason: u64| {
            t.ev(
                p,
                1032,
                &[
                    ("EnterExit", V::N(1)),
                    ("Location", V::N(0x99)),
                    ("Endpoint", V::N(ep(name))),
                    ("Reason", V::N(reason)),
                ],
            )
        };
        abort(self, rs, 2);
        close(self, rs);
        abort(self, rcl, 4);
        io(self, 1004, rcl, 16, 0xC000_020D);
        close(self, rcl);
        close(self, rl);

        let (rx, tx) = ("udp receiver", "udp sender");
        create(self, rx, false, true);
        bind(self, rx, lo(s.udp_port, false), 0);
        create(self, tx, false, true);
        bind(self, tx, lo(udp_sender_port, false), 0);
        for _ in 0..s.udp_sent {
            io_addr(self, 1007, tx, s.udp_size, lo(s.udp_port, false));
        }
        let src = lo(udp_sender_port, false);
        for _ in 0..s.udp_sent - s.udp_received {
            let [l, ad] = addr(src);
            self.ev_as(
                p,
                0,
                1033,
                &[
                    ("EnterExit", V::N(1)),
                    ("Location", V::N(0x77)),
                    ("Endpoint", V::N(ep(rx))),
                    ("Buffer", V::N(0)),
                    ("BufferLength", V::N(s.udp_size)),
                    l,
                    ad,
                    ("Reason", V::N(2)),
                ],
            );
        }
        for _ in 0..s.udp_received {
            io_addr(self, 1009, rx, s.udp_size, src);
        }
        close(self, tx);
        close(self, rx);
    }

    /// The ETL file bytes.
    pub fn finish(self) -> Vec<u8> {
        let mut w = Writer::in_memory(WriterOptions::new(START)).unwrap();
        let clock = *w.clock();
        let mut kernel = self.kernel.into_iter().peekable();
        for e in &self.events {
            while let Some((t, _)) = kernel.peek() {
                if *t > e.timestamp {
                    break;
                }
                let (t, mut r) = kernel.next().unwrap();
                r[0x10..0x18].copy_from_slice(&clock.to_raw(t).to_le_bytes());
                w.write_raw(&r, 0, &clock).unwrap();
            }
            w.write_event(e).unwrap();
        }
        for (t, mut r) in kernel {
            r[0x10..0x18].copy_from_slice(&clock.to_raw(t).to_le_bytes());
            w.write_raw(&r, 0, &clock).unwrap();
        }
        w.finish_into_inner().unwrap().1
    }
}

/// The two processes of the file and their numbers: (process, params, UDP sender port).
pub fn processes() -> Vec<(Proc, Params, u16)> {
    let params = |base: u16| Params {
        v4: super::Echo {
            server_port: base + 1,
            client_port: base + 2,
            bytes: 1234,
        },
        v6: super::Echo {
            server_port: base + 3,
            client_port: base + 4,
            bytes: 4321,
        },
        refused_port: base + 5,
        busy_port: base + 6,
        reset_client_port: base + 7,
        reset_server_port: base + 8,
        udp_port: base + 9,
        udp_sent: 64,
        udp_received: 3,
        udp_size: 1000,
    };
    vec![
        (
            Proc {
                pid: 4100,
                tid: 4104,
                ptr: 8,
                process: 0xffff_c08a_1234_5080,
                endpoint_base: 0xffff_b20f_0000_1000,
                image: "netwl64.exe",
                modern: false,
                codes: super::Codes::Wsa,
            },
            params(50000),
            50010,
        ),
        (
            Proc {
                pid: 4200,
                tid: 4204,
                ptr: 4,
                process: 0x8612_3450,
                endpoint_base: 0x8a00_1000,
                image: "netwl32.exe",
                modern: false,
                codes: super::Codes::Wsa,
            },
            params(51000),
            51010,
        ),
        (
            Proc {
                pid: 4300,
                tid: 4304,
                ptr: 8,
                process: 0xffff_c08a_7777_0080,
                endpoint_base: 0xffff_b20f_4400_1000,
                image: "netwl10.exe",
                modern: true,
                codes: super::Codes::NtStatus,
            },
            params(52000),
            52010,
        ),
    ]
}

/// The whole file: rundown of both processes, then each process's scenario.
pub fn scenario_etl(schema: &Path) -> Vec<u8> {
    let layouts = Layouts::load(schema);
    let mut t = Timeline::new(&layouts);
    let procs = processes();
    for (p, _, _) in &procs {
        t.process_rundown(p);
    }
    for (p, s, tx) in &procs {
        if p.modern {
            t.play_modern(p, s, *tx);
        } else {
            t.play(p, s, *tx);
        }
    }
    t.finish()
}
