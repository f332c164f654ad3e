//! `analysis::net` on a Windows-format trace: the workload's sockets as Microsoft-Windows-Winsock-AFD
//! manifest events laid out from ../shared/schemas/winsock-afd.json, from a 64-bit and a 32-bit
//! (EVENT_HEADER32) process, with Windows error codes and kernel Process rundown naming both
//! processes, and a third process doing the same with the newer AFD events (1000+: enter/exit
//! pairs, SOCKADDR addresses, NTSTATUS codes), written with the ETL writer, read back, decoded with the built-in AFD layouts and
//! checked against the scenario the live Linux test also checks.

mod common;
mod net_scenario;

use std::ops::ControlFlow;

use etwkit::analysis::net::{NetAnalyzer, Os, AFD_PROVIDER};
use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;

#[test]
fn windows_afd_file_gives_the_scenario_rows() {
    let Some(samples) = common::samples_dir("windows_afd_file_gives_the_scenario_rows") else {
        return;
    };
    let schema = samples.join("../schemas/winsock-afd.json");
    let bytes = net_scenario::windows::scenario_etl(&schema);
    let f = EtlFile::from_vec(bytes).unwrap();
    let dec = Decoder::new(Registry::with_builtins());
    let mut an = NetAnalyzer::new();
    let (mut afd, mut p32, mut p64) = (0u64, 0u64, 0u64);
    let sum = f.for_each(Order::Time, |r| {
        let d = dec.decode(&r.event);
        if r.event.provider == AFD_PROVIDER {
            afd += 1;
            // The built-in layout consumes each payload exactly.
            assert!(d.is_decoded() && d.undecoded.is_none(), "{d:?}");
            assert_eq!(d.unread_bytes, 0, "event {}", r.event.descriptor.id);
            match r.event.pointer_size {
                4 => p32 += 1,
                _ => p64 += 1,
            }
        }
        an.record(&r.event, &d);
        ControlFlow::Continue(())
    });
    assert_eq!((sum.bad_buffers, sum.bad_records), (0, 0));
    assert!(
        p32 > 100 && p64 > 100,
        "both producers: {p32} 32-bit, {p64} 64-bit"
    );
    let report = an.report();
    assert_eq!(report.afd_events, afd);
    assert_eq!(report.afd_events_skipped, 0, "{:?}", report.notes);
    println!("{}", report.to_table(false));
    let procs = net_scenario::windows::processes();
    for (p, params, _) in &procs {
        let rows: Vec<_> = report.sockets.iter().filter(|r| r.pid == p.pid).collect();
        let chosen = net_scenario::check(
            &rows,
            params,
            p.codes,
            p.pid,
            Some(p.image),
            net_scenario::Lenience::Exact,
        );
        assert_eq!((chosen.right, chosen.unknown), (5, 0));
        // Endpoints are the producer's pointers (4 bytes wide for the 32-bit one).
        assert!(rows
            .iter()
            .all(|r| (r.endpoint > u32::MAX as u64) == (p.ptr == 8)));
    }
    assert_eq!(
        report.sockets.len(),
        procs.len() * net_scenario::sockets(&procs[0].1).len(),
        "no row for anything else (the transport-context events land on their owners)"
    );
    // The client's local address came from a join (no event of its own says it), the listener's
    // from its bind event.
    let c = report
        .sockets
        .iter()
        .find(|r| r.pid == 4100 && r.remote.is_some_and(|a| a.port() == 50001))
        .unwrap();
    assert_eq!(c.local_source, etwkit::analysis::net::AddrSource::Joined);
    // Per process and per remote endpoint.
    let by = report.by_process();
    assert_eq!(by.len(), procs.len());
    for (p, params, _) in &procs {
        let t = by.iter().find(|t| t.pid == p.pid).unwrap();
        let want = net_scenario::sockets(params);
        assert_eq!(t.sockets, want.len() as u64);
        assert_eq!(t.tx_bytes, want.iter().map(|w| w.tx).sum::<u64>());
        assert_eq!(t.rx_bytes, want.iter().map(|w| w.rx).sum::<u64>());
        let fails: u64 = want.iter().flat_map(|w| &w.failures).map(|f| f.count).sum();
        assert_eq!(t.failures, fails);
        let udp = t
            .remotes
            .iter()
            .find(|r| r.remote.is_some_and(|a| a.port() == params.udp_port))
            .unwrap();
        assert_eq!(udp.tx_bytes, params.udp_sent * params.udp_size);
    }
}

#[test]
fn error_codes_have_names_in_words() {
    use etwkit::analysis::net::error_code;
    for (os, code, words, symbol) in [
        (Os::Windows, 10061, "connection refused", "WSAECONNREFUSED"),
        (
            Os::Windows,
            10054,
            "connection reset by peer",
            "WSAECONNRESET",
        ),
        (
            Os::Windows,
            0xC000_0236,
            "connection refused",
            "STATUS_CONNECTION_REFUSED",
        ),
        (
            Os::Windows,
            1225,
            "connection refused",
            "ERROR_CONNECTION_REFUSED",
        ),
        (Os::Linux, 111, "connection refused", "ECONNREFUSED"),
        (Os::Linux, -104, "connection reset by peer", "ECONNRESET"),
    ] {
        let e = error_code(os, code);
        assert_eq!(
            (e.words, e.symbol),
            (Some(words), Some(symbol)),
            "{os:?} {code}"
        );
    }
    assert_eq!(
        error_code(Os::Windows, 10061).describe(),
        "connection refused (10061 WSAECONNREFUSED)"
    );
    assert_eq!(error_code(Os::Linux, 4242).describe(), "error 4242");
}
