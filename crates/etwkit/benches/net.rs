//! `analysis::net` throughput: 1 M Microsoft-Windows-Winsock-AFD events (manifest layouts, 64-bit
//! producer; 50 processes opening, connecting, sending, receiving and closing sockets, some refused,
//! some reset, some dropping datagrams, a third of the connections to a local server whose listener
//! indicates them, so the client join runs at scale) in an in-memory ETL file, walked on one core.
//! Three passes, best of 3 each: read + decode (the peer: what any consumer of these events pays),
//! read + decode + analyse + report, and analyse + report alone over events decoded beforehand.
//! `cargo bench -p etwkit --bench net`.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::time::Instant;

use etwkit::analysis::net::{AfdEvent, NetAnalyzer, Os, AFD_PROVIDER};
use etwkit::decode::Decoder;
use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::etl::{EtlFile, Order};
use etwkit::event::flags;
use etwkit::schema::Registry;
use etwkit::{EventDescriptor, EventRecord, Guid, HeaderType};

const EVENTS: usize = 1_000_000;
const START: i64 = 133_500_000_000_000_000;
const LISTENER: u64 = 0xffff_e000_0000_0100;

struct Gen {
    t: i64,
    n: usize,
    w: Writer<std::io::Cursor<Vec<u8>>>,
}

impl Gen {
    /// One AFD event: Process and Endpoint (8 bytes each), then `rest`.
    fn ev(&mut self, pid: u32, id: u16, endpoint: u64, rest: &[u8]) {
        let mut p = Vec::with_capacity(16 + rest.len());
        p.extend_from_slice(&(0xffff_c000_0000_0000u64 + pid as u64 * 0x1000).to_le_bytes());
        p.extend_from_slice(&endpoint.to_le_bytes());
        p.extend_from_slice(rest);
        self.t += 100;
        self.n += 1;
        let ev = EventRecord {
            header_type: HeaderType::EventHeader64,
            flags: flags::HEADER_64_BIT,
            provider: AFD_PROVIDER,
            descriptor: EventDescriptor {
                id,
                version: 0,
                channel: 16,
                level: 4,
                opcode: 0,
                task: 0,
                keywords: 0,
            },
            hook_id: None,
            pid,
            tid: pid + 1,
            cpu: 0,
            timestamp: self.t,
            raw_timestamp: self.t,
            kernel_time: 0,
            user_time: 0,
            activity_id: Guid::default(),
            pointer_size: 8,
            payload: Cow::Owned(p),
            ext: Cow::Owned(Vec::new()),
        };
        self.w.write_event(&ev).unwrap();
    }
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// IPv4 address (network order) and big-endian port, then `tail`.
fn v4(ip: [u8; 4], port: u16, tail: &[u8]) -> Vec<u8> {
    let mut v = ip.to_vec();
    v.extend_from_slice(&port.to_be_bytes());
    v.extend_from_slice(tail);
    v
}

fn buffer(len: u32) -> Vec<u8> {
    let mut v = 0x7ff0_1000u64.to_le_bytes().to_vec();
    v.extend_from_slice(&len.to_le_bytes());
    v
}

fn build() -> (Vec<u8>, usize) {
    let mut g = Gen {
        t: START + 10_000_000,
        n: 0,
        w: Writer::in_memory(WriterOptions::new(START)).unwrap(),
    };
    // The local server's listener.
    g.ev(
        5000,
        1,
        LISTENER,
        &[u32s(&[2, 1, 6]), 5000u64.to_le_bytes().to_vec()].concat(),
    );
    g.ev(
        5000,
        2,
        LISTENER,
        &v4([10, 0, 0, 5], 8443, &0u32.to_le_bytes()),
    );
    let mut k = 0u64;
    while g.n < EVENTS {
        k += 1;
        let pid = 1000 + (k % 50) as u32 * 4;
        // Endpoints come back after a close, as kernel pool addresses do.
        let ep = 0xffff_b000_0000_0000 + (k % 5000) * 0x200;
        let udp = k % 10 == 0;
        g.ev(
            pid,
            1,
            ep,
            &[
                u32s(&[2, if udp { 2 } else { 1 }, if udp { 17 } else { 6 }]),
                (pid as u64).to_le_bytes().to_vec(),
            ]
            .concat(),
        );
        let local_server = !udp && k % 3 == 0;
        if !local_server {
            let port = 40000 + (k % 20000) as u16;
            g.ev(pid, 2, ep, &v4([10, 0, 0, 5], port, &0u32.to_le_bytes()));
        }
        let remote = [93, 184, (k % 200) as u8, 34];
        if udp {
            for _ in 0..12 {
                g.ev(pid, 28, ep, &buffer(512));
                g.ev(
                    pid,
                    26,
                    ep,
                    &[
                        1i32.to_le_bytes().to_vec(),
                        buffer(512),
                        v4(remote, 53, &[]),
                    ]
                    .concat(),
                );
            }
            for _ in 0..4 {
                g.ev(
                    pid,
                    33,
                    ep,
                    &[
                        1000i32.to_le_bytes().to_vec(),
                        v4(remote, 53, &2i32.to_le_bytes()),
                    ]
                    .concat(),
                );
            }
        } else if local_server {
            // A connection to the local server (pid 5000): indicated on its listener, accepted
            // there; the client's local address comes from the join.
            let client_port = 20000 + (k % 40000) as u16;
            g.ev(pid, 4, ep, &v4([10, 0, 0, 5], 8443, &[]));
            g.ev(5000, 35, LISTENER, &v4([10, 0, 0, 5], client_port, &[]));
            g.ev(pid, 6, ep, &u32s(&[0]));
            let acc = 0xffff_d000_0000_0000 + (k % 5000) * 0x200;
            g.ev(
                5000,
                1,
                acc,
                &[u32s(&[2, 1, 6]), 5000u64.to_le_bytes().to_vec()].concat(),
            );
            g.ev(
                5000,
                15,
                acc,
                &v4([10, 0, 0, 5], client_port, &0u32.to_le_bytes()),
            );
            for i in 0..6 {
                g.ev(pid, 24, ep, &buffer(200 + i));
                g.ev(5000, 23, acc, &buffer(200 + i));
            }
            g.ev(5000, 13, acc, &u32s(&[0]));
        } else {
            g.ev(pid, 4, ep, &v4(remote, 443, &[]));
            let refused = k % 17 == 0;
            g.ev(pid, 6, ep, &u32s(&[if refused { 10061 } else { 0 }]));
            if !refused {
                for i in 0..14 {
                    g.ev(pid, 24, ep, &buffer(100 + i));
                    g.ev(pid, 23, ep, &buffer(1400));
                }
                if k % 23 == 0 {
                    g.ev(pid, 8, ep, &4i32.to_le_bytes());
                    g.ev(pid, 11, ep, &u32s(&[10054]));
                }
            }
        }
        g.ev(pid, 13, ep, &u32s(&[0]));
    }
    let n = g.n;
    (g.w.finish_into_inner().unwrap().1, n)
}

fn main() {
    let (bytes, n) = build();
    let f = EtlFile::from_vec(bytes).unwrap();
    let dec = Decoder::new(Registry::with_builtins());
    let mut best = [f64::MAX; 2];
    let mut sockets = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let mut props = 0usize;
        f.for_each(Order::File, |r| {
            props += dec.decode(&r.event).properties.len();
            ControlFlow::Continue(())
        });
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        assert!(props > n * 3);

        let t = Instant::now();
        let mut an = NetAnalyzer::new();
        f.for_each(Order::File, |r| {
            let d = dec.decode(&r.event);
            an.record(&r.event, &d);
            ControlFlow::Continue(())
        });
        let report = an.report();
        best[1] = best[1].min(t.elapsed().as_secs_f64());
        assert_eq!(report.afd_events as usize, n);
        // Every client of the local server got its local address from the join.
        let joined = report
            .sockets
            .iter()
            .filter(|s| s.remote.is_some_and(|r| r.port() == 8443))
            .filter(|s| s.local_source == etwkit::analysis::net::AddrSource::Joined)
            .count();
        let clients = report
            .sockets
            .iter()
            .filter(|s| s.remote.is_some_and(|r| r.port() == 8443) && !s.accepted)
            .count();
        assert_eq!(joined, clients);
        assert!(clients > 1000);
        sockets = report.sockets.len();
    }
    // The analysis alone, on events decoded beforehand (no reading or decoding in the timing).
    let mut decoded = Vec::with_capacity(n);
    f.for_each(Order::File, |r| {
        let d = dec.decode(&r.event);
        decoded.push((
            r.event.descriptor.id,
            r.event.pid,
            r.event.timestamp,
            d.properties,
        ));
        ControlFlow::Continue(())
    });
    let mut analysis = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let mut an = NetAnalyzer::new();
        for (id, pid, ts, props) in &decoded {
            an.add(&AfdEvent {
                id: *id,
                pid: *pid,
                timestamp: *ts,
                os: Os::Windows,
                props,
            });
        }
        let report = an.report();
        analysis = analysis.min(t.elapsed().as_secs_f64());
        assert_eq!(report.sockets.len(), sockets);
    }
    println!("{n} AFD events, {sockets} sockets, one core (best of 3):");
    println!(
        "  read + decode (peer):              {:.3} s  {:>12.0} events/s",
        best[0],
        n as f64 / best[0]
    );
    println!(
        "  read + decode + analyse + report:  {:.3} s  {:>12.0} events/s",
        best[1],
        n as f64 / best[1]
    );
    println!(
        "  analyse + report alone:            {:.3} s  {:>12.0} events/s ({:.0} ns/event)",
        analysis,
        n as f64 / analysis,
        analysis * 1e9 / n as f64
    );
}
