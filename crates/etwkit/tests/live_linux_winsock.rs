//! The Winsock provider against the real kernel (requires root): a child process doing loopback TCP
//! over IPv4 and IPv6, a refused connect, a bind to a busy port, a peer reset and a UDP burst into a
//! small receive buffer. Every expected value comes from the child's own report of what it did.
#![cfg(target_os = "linux")]

mod common;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::process::{Command, Stdio};
use std::time::Duration;

use etwkit::live::linux::props::{as_u64, properties};
use etwkit::live::linux::winsock::PROVIDER_GUID;
use etwkit::live::linux::workload::Facts;
use etwkit::live::{Etw, Level};
use serde_json::Value;

#[derive(Debug, Clone)]
struct Ev {
    id: u16,
    pid: u32,
    tid: u32,
    ts: i64,
    p: serde_json::Map<String, Value>,
}

impl Ev {
    fn u(&self, k: &str) -> Option<u64> {
        self.p.get(k).and_then(as_u64)
    }
    fn s(&self, k: &str) -> Option<&str> {
        self.p.get(k).and_then(Value::as_str)
    }
}

fn trace_workload(name: &str, level: u8) -> (Facts, Vec<Ev>, etwkit::live::TraceSummary) {
    let etw = Etw::new();
    // Unique per test process, so several copies of this binary can run side by side.
    let name = format!("{name}-{}", std::process::id());
    let mut t = etw.open_trace(&name, None, None);
    t.enable(PROVIDER_GUID, 0, level).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etwkit-netwl"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = t.spawn(&mut cmd).unwrap();
    let stop = t.stop_handle();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output().unwrap();
        std::thread::sleep(Duration::from_millis(150));
        stop.stop();
        out
    });
    let mut evs = Vec::new();
    t.process(
        |r| {
            assert_eq!(r.provider, PROVIDER_GUID);
            let (_, p) =
                properties(r).expect("every Winsock event decodes from its own TL metadata");
            evs.push(Ev {
                id: r.descriptor.id,
                pid: r.pid,
                tid: r.tid,
                ts: r.timestamp,
                p,
            });
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    let out = waiter.join().unwrap();
    assert!(out.status.success(), "workload failed: {out:?}");
    let facts: Facts = serde_json::from_slice(&out.stdout).expect("workload facts");
    (facts, evs, sum)
}

fn of_endpoint(evs: &[Ev], e: u64) -> Vec<&Ev> {
    evs.iter().filter(|x| x.u("Endpoint") == Some(e)).collect()
}

/// Checks that `want` appears in `ids` as a subsequence and returns the positions.
fn assert_in_order(ids: &[u16], want: &[u16], what: &str) {
    let mut it = ids.iter();
    for w in want {
        assert!(
            it.any(|x| x == w),
            "{what}: expected {want:?} in order within {ids:?}"
        );
    }
}

#[test]
fn tcp_udp_lifecycle_matches_what_the_child_did() {
    if !common::live_available("tcp_udp_lifecycle_matches_what_the_child_did") {
        return;
    }
    let (f, evs, sum) = trace_workload("t-winsock", Level::VERBOSE);
    // Shown with any failure below (libtest prints a failed test's output).
    println!("trace summary: {sum:?}");
    assert_eq!(
        sum.events_lost, 0,
        "no events may be lost in this small trace: {sum:?}"
    );
    assert!(
        evs.iter().all(|e| e.pid == f.pid),
        "every event carries the child's pid {}",
        f.pid
    );
    assert!(
        evs.windows(2).all(|w| w[0].ts <= w[1].ts),
        "events are delivered in time order"
    );

    for (fam, echo, conn_id, acc_id, addr) in [
        ("v4", &f.v4, 4u16, 15u16, "127.0.0.1"),
        ("v6", &f.v6, 5, 16, "::1"),
    ] {
        // Client: the connect to the server's address and port names the endpoint.
        let conn = evs
            .iter()
            .find(|e| e.id == conn_id && e.u("Port") == Some(echo.server_port as u64))
            .unwrap_or_else(|| panic!("{fam}: no connect event to port {}", echo.server_port));
        assert_eq!(conn.s("Address"), Some(addr), "{fam}: connect address");
        assert_eq!(conn.tid, echo.client_tid, "{fam}: connect tid");
        let ep = conn.u("Endpoint").unwrap();
        let mine = of_endpoint(&evs, ep);
        let ids: Vec<u16> = mine.iter().map(|e| e.id).collect();
        assert_in_order(&ids, &[1, conn_id, 6, 24, 14, 13], &format!("{fam} client"));
        let create = mine.iter().find(|e| e.id == 1).unwrap();
        assert_eq!(
            create.u("AddressFamily"),
            Some(if fam == "v4" { 2 } else { 23 })
        );
        assert_eq!(create.u("SocketType"), Some(1));
        assert_eq!(create.u("Protocol"), Some(6));
        let done = mine.iter().find(|e| e.id == 6).unwrap();
        assert_eq!(
            done.u("Error"),
            Some(0),
            "{fam}: connect completed without error"
        );
        let sent: u64 = mine
            .iter()
            .filter(|e| e.id == 24)
            .map(|e| e.u("BufferLength").unwrap())
            .sum();
        assert_eq!(
            sent, echo.bytes as u64,
            "{fam}: client send completed byte count; client socket: {mine:#?}"
        );
        let recvd: u64 = mine
            .iter()
            .filter(|e| e.id == 23)
            .map(|e| e.u("BufferLength").unwrap())
            .sum();
        assert_eq!(
            recvd, echo.bytes as u64,
            "{fam}: client received the echo; client socket: {mine:#?}"
        );
        for e in mine
            .iter()
            .filter(|e| [1, conn_id, 6, 24, 14, 13].contains(&e.id))
        {
            assert_eq!(e.tid, echo.client_tid, "{fam}: client event {} tid", e.id);
        }
        // Server: accept carries the client's address and port.
        let acc = evs
            .iter()
            .find(|e| e.id == acc_id && e.u("Port") == Some(echo.client_port as u64))
            .unwrap_or_else(|| panic!("{fam}: no accept from client port {}", echo.client_port));
        assert_eq!(acc.s("Address"), Some(addr), "{fam}: accept address");
        assert_eq!(acc.tid, echo.server_tid, "{fam}: accept tid");
        let srv = of_endpoint(&evs, acc.u("Endpoint").unwrap());
        let sids: Vec<u16> = srv.iter().map(|e| e.id).collect();
        assert_in_order(&sids, &[1, acc_id, 23, 24, 13], &format!("{fam} server"));
        let got: u64 = srv
            .iter()
            .filter(|e| e.id == 23)
            .map(|e| e.u("BufferLength").unwrap())
            .sum();
        assert_eq!(
            got, echo.bytes as u64,
            "{fam}: server receive completed byte count; server socket: {srv:#?}\nfacts: {f:?}"
        );
        for e in srv
            .iter()
            .filter(|e| [1, acc_id, 23, 24, 13].contains(&e.id))
        {
            assert_eq!(e.tid, echo.server_tid, "{fam}: server event {} tid", e.id);
        }
        // The listener saw the connection indicated (softirq, attributed to the listener's owner).
        assert!(
            evs.iter().any(|e| e.id == conn_id + 31
                && e.u("Port") == Some(echo.client_port as u64)
                && e.pid == f.pid),
            "{fam}: connection indicated"
        );
    }

    // Refused connect: connect completed with ECONNREFUSED.
    let rc = evs
        .iter()
        .find(|e| e.id == 4 && e.u("Port") == Some(f.refused_port as u64))
        .expect("refused connect event");
    let rmine = of_endpoint(&evs, rc.u("Endpoint").unwrap());
    let rdone: Vec<_> = rmine.iter().filter(|e| e.id == 6).collect();
    assert_eq!(rdone.len(), 1, "refused socket: {rmine:#?}");
    assert_eq!(
        rdone[0].u("Error"),
        Some(f.refused_errno as u64),
        "refused socket: {rmine:#?}\nfacts: {f:?}\nevery connect to that port: {:#?}",
        evs.iter()
            .filter(|e| e.u("Port") == Some(f.refused_port as u64))
            .collect::<Vec<_>>()
    );
    assert_eq!(f.refused_errno, 111);
    assert_eq!(rdone[0].tid, f.refused_tid);

    // Bind to a busy port: bind failed (40) with EADDRINUSE.
    let bf: Vec<_> = evs.iter().filter(|e| e.id == 40).collect();
    assert_eq!(bf.len(), 1, "exactly one failed bind");
    assert_eq!(bf[0].u("Error"), Some(f.bind_errno as u64));
    assert_eq!(f.bind_errno, 98);

    // Peer reset: the transport abort (8) on the client whose server closed with linger 0.
    let rconn = evs
        .iter()
        .find(|e| e.id == 4 && e.u("Port") == Some(f.reset_server_port as u64))
        .expect("reset client connect");
    let rep = rconn.u("Endpoint").unwrap();
    let aborts: Vec<_> = evs.iter().filter(|e| e.id == 8).collect();
    assert_eq!(
        aborts.len(),
        1,
        "one transport abort: {aborts:?}\nthe sockets: {:#?}\nthe reset client: {:#?}\nfacts: {f:?}",
        aborts
            .iter()
            .map(|a| of_endpoint(&evs, a.u("Endpoint").unwrap()))
            .collect::<Vec<_>>(),
        of_endpoint(&evs, rep)
    );
    assert_eq!(aborts[0].u("Endpoint"), Some(rep));
    assert_eq!(f.reset_errno, 104);
    // The failed receive that saw the reset.
    assert!(of_endpoint(&evs, rep)
        .iter()
        .any(|e| e.id == 11 && e.u("Error") == Some(104)));

    // UDP drops: one Datagram dropped per datagram sent and not received, on the receiver's endpoint
    // (the socket whose RecvFrom completed). It bound 127.0.0.1 port 0; the bind event carries the port
    // the kernel chose, which the workload read back with getsockname.
    let rx_ep = evs
        .iter()
        .find(|e| e.id == 26)
        .and_then(|e| e.u("Endpoint"))
        .expect("RecvFrom completed on the receiver");
    let rx_bind: Vec<_> = of_endpoint(&evs, rx_ep)
        .into_iter()
        .filter(|e| e.id == 2)
        .collect();
    assert_eq!(rx_bind.len(), 1);
    assert_eq!(
        (rx_bind[0].s("Address"), rx_bind[0].u("Port")),
        (Some("127.0.0.1"), Some(f.udp_port as u64))
    );
    let drops: Vec<_> = evs.iter().filter(|e| e.id == 33).collect();
    assert!(
        f.udp_sent > f.udp_received,
        "the burst overflowed the receive buffer"
    );
    assert_eq!(
        drops.len() as u32,
        f.udp_sent - f.udp_received,
        "drops = sent - received; receiver: {:#?}",
        of_endpoint(&evs, rx_ep)
    );
    assert!(drops.iter().all(|d| d.u("Endpoint") == Some(rx_ep)
        && d.s("Address") == Some("127.0.0.1")
        && d.tid == f.udp_tid));
    let rx_recv = of_endpoint(&evs, rx_ep)
        .iter()
        .filter(|e| e.id == 26)
        .count() as u32;
    assert_eq!(
        rx_recv, f.udp_received,
        "RecvFrom completed per datagram received"
    );
    // The sender's address is the drops' source.
    let tx_ep = evs
        .iter()
        .find(|e| e.id == 28)
        .and_then(|e| e.u("Endpoint"))
        .expect("SendTo completed");
    assert_eq!(
        evs.iter()
            .filter(|e| e.id == 28 && e.u("Endpoint") == Some(tx_ep))
            .count() as u32,
        f.udp_sent
    );

    // Endpoints are etwkit's own ids: unique per socket although the kernel reuses sock pointers.
    let creates: Vec<u64> = evs
        .iter()
        .filter(|e| e.id == 1)
        .map(|e| e.u("Endpoint").unwrap())
        .collect();
    let mut uniq = creates.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), creates.len());
    let closes: HashMap<u64, usize> =
        evs.iter()
            .filter(|e| e.id == 13)
            .fold(HashMap::new(), |mut m, e| {
                *m.entry(e.u("Endpoint").unwrap()).or_default() += 1;
                m
            });
    assert!(
        closes.values().all(|&n| n == 1),
        "each socket closes once: {closes:?}"
    );
    assert_eq!(
        closes.len(),
        creates.len(),
        "every created socket is closed"
    );
}

#[test]
fn level_4_gives_only_lifecycle_events() {
    if !common::live_available("level_4_gives_only_lifecycle_events") {
        return;
    }
    let (f, evs, _) = trace_workload("t-winsock-l4", Level::INFORMATIONAL);
    assert!(!evs.is_empty());
    let bad: Vec<u16> = evs
        .iter()
        .map(|e| e.id)
        .filter(|&id| !(1..=17).contains(&id) && id != 40)
        .collect();
    assert!(bad.is_empty(), "level 4 delivered data-path events {bad:?}");
    assert!(evs
        .iter()
        .any(|e| e.id == 4 && e.u("Port") == Some(f.v4.server_port as u64)));
    assert!(!evs.iter().any(|e| e.id == 24 || e.id == 33));
}
