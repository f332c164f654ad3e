//! Loss accounting on the real kernel (requires root): a syscall storm into a deliberately tiny ring.
//! Every `close(-1)` of the child is either delivered or counted as lost — nothing disappears
//! silently. (Not a benchmark: `examples/live_storm.rs` measures throughput.)
#![cfg(target_os = "linux")]

mod common;

use std::ops::ControlFlow;
use std::process::{Command, Stdio};

use etwkit::live::linux::format::EventFormat;
use etwkit::live::linux::tracefs;
use etwkit::live::{Etw, Level};

#[test]
fn every_storm_event_is_delivered_or_reported_lost() {
    if !common::live_available("every_storm_event_is_delivered_or_reported_lost") {
        return;
    }
    let root = tracefs::root().unwrap_or_else(|e| {
        panic!("this test traces the real kernel and requires root with tracefs: {e}")
    });
    let enter = EventFormat::load(&root.join("events"), "syscalls", "sys_enter_close")
        .unwrap()
        .id;
    let exit = EventFormat::load(&root.join("events"), "syscalls", "sys_exit_close")
        .unwrap()
        .id;
    let n: u64 = 300_000;
    let etw = Etw::new();
    let mut t = etw.open_trace("t-loss", None, None);
    t.enable("syscalls", 0, Level::VERBOSE).unwrap();
    t.set_buffer_kb(16); // a few pages per CPU: the storm overruns it
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etwkit-netwl"));
    cmd.args(["storm", &n.to_string()]).stdout(Stdio::null());
    let mut child = t.spawn(&mut cmd).unwrap();
    let stop = t.stop_handle();
    let w = std::thread::spawn(move || {
        let st = child.wait().unwrap();
        stop.stop();
        st
    });
    let (mut storm, mut all) = (0u64, 0u64);
    t.process(
        |r| {
            all += 1;
            let v = r.payload.get(4..12);
            if (r.descriptor.id == enter && v == Some(&0xffff_ffffu64.to_le_bytes()[..]))
                || (r.descriptor.id == exit && v == Some(&(-9i64).to_le_bytes()[..]))
            {
                storm += 1;
            }
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    assert!(w.join().unwrap().success());
    let detail: std::collections::HashMap<_, _> = sum.lost_detail.iter().cloned().collect();
    // Each call raises an enter and an exit event. Besides the storm the child makes a few hundred
    // other syscalls (start-up, exit), which may be lost too.
    assert!(storm <= 2 * n);
    assert!(
        storm + sum.events_lost >= 2 * n,
        "unreported loss: {storm} delivered + {} lost < {} ({:?})",
        sum.events_lost,
        2 * n,
        sum.lost_detail
    );
    assert!(
        all + sum.events_lost <= 2 * n + 2000,
        "more events than the child raised: {all} + {}",
        sum.events_lost
    );
    assert!(
        sum.events_lost > 0,
        "a 16 KiB ring cannot hold a {n}-call storm: {sum:?}"
    );
    // Page headers and the per-CPU overrun counter count the same losses (overwrite mode), with
    // one exception: the kernel writes the count of events lost before a page into the page's
    // free tail, and a page with no room left carries the flag alone (RB_MISSED_EVENTS without
    // RB_MISSED_STORED). The headers then count fewer, and the session reports the counter's
    // figure. (Seen once in CI: 103 events behind one full page, 455,735 against 455,838.)
    let (headers, overrun) = (
        detail["page_header_missed"],
        detail["per_cpu_stats_overrun"],
    );
    if detail["pages_flagged_uncounted"] == 0 {
        assert_eq!(headers, overrun, "{:?}", sum.lost_detail);
    } else {
        assert!(headers < overrun, "{:?}", sum.lost_detail);
    }
    assert!(sum.events_lost >= overrun.max(headers), "{sum:?}");
}
