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
//!
//! One concept per file: `afd` the events as emitted (fields, titles, encoding), `kernel` the
//! tracepoints read and their field offsets, `identity` the fd/sk/Endpoint joins, `syscalls` the
//! enter/exit pairing, `sockets` the kernel's socket events; here the dispatch, the bind hold and
//! the emission.

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

mod afd;
mod identity;
mod kernel;
mod sockets;
mod syscalls;

pub use afd::*;
use kernel::*;

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
