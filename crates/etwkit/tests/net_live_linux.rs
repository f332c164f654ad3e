//! `analysis::net` on a live trace of the Linux Winsock provider (requires root): the network
//! workload runs as a traced child and the analysis of its decoded AFD events must give exactly one
//! row per socket it opened, with the addresses, ports, byte counts and outcomes of the scenario
//! (numbers from the workload's own report), and nothing for any other process.
#![cfg(target_os = "linux")]

mod common;
mod net_scenario;

use std::ops::ControlFlow;
use std::process::{Command, Stdio};
use std::time::Duration;

use etwkit::analysis::net::NetAnalyzer;
use etwkit::decode::Decoder;
use etwkit::live::linux::winsock::PROVIDER_GUID;
use etwkit::live::linux::workload::Facts;
use etwkit::live::{Etw, Level};
use etwkit::schema::Registry;

#[test]
fn live_workload_gives_one_row_per_socket() {
    if !common::live_available("live_workload_gives_one_row_per_socket") {
        return;
    }
    let etw = Etw::new();
    // Unique per test process, so several copies of this binary can run side by side.
    let mut t = etw.open_trace(&format!("t-net-{}", std::process::id()), None, None);
    t.enable(PROVIDER_GUID, 0, Level::VERBOSE).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etwkit-netwl"));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = t.spawn(&mut cmd).unwrap();
    let stop = t.stop_handle();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output().unwrap();
        // The softirq tail (FINs, resets, drops) reaches the ring after the exit.
        std::thread::sleep(Duration::from_millis(150));
        stop.stop();
        out
    });
    let dec = Decoder::new(Registry::with_builtins());
    let mut an = NetAnalyzer::new();
    let mut undecoded = 0;
    t.process(
        |r| {
            let d = dec.decode(r);
            undecoded += (!d.is_decoded()) as u32;
            an.record(r, &d);
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    let out = waiter.join().unwrap();
    assert!(out.status.success(), "workload failed: {out:?}");
    let f: Facts = serde_json::from_slice(&out.stdout).expect("workload facts");
    println!("trace summary: {sum:?}\nfacts: {f:?}");
    assert_eq!(
        sum.events_lost, 0,
        "no events may be lost in this small trace"
    );
    assert_eq!(undecoded, 0);
    let report = an.report();
    println!("{}", report.to_table(false));
    assert!(report.afd_events > 100);
    let mine: Vec<_> = report.sockets.iter().collect();
    assert!(
        mine.iter().all(|r| r.pid == f.pid),
        "only the workload's sockets (pid {}):\n{}",
        f.pid,
        report.to_table(false)
    );
    let params = net_scenario::Params::from_facts(&f);
    // A port the kernel chose for a bind to port 0 is right, or absent when the provider could not
    // learn it before the socket was gone (docs/winsock-linux.md), never wrong.
    let chosen = net_scenario::check(
        &mine,
        &params,
        net_scenario::Codes::Errno,
        f.pid,
        None,
        net_scenario::Lenience::RightOrUnknown,
    );
    if chosen.unknown > 0 {
        std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "\n*** NOTE net_live_linux: {} of 5 kernel-chosen bind ports were unknown to the \
                 provider (sent without Address/Port) ***\n\n",
                chosen.unknown
            )
            .as_bytes(),
        )
        .ok();
    }
}
