//! Traces a command under the Winsock provider and prints each event with its properties.
use etwkit::live::{Etw, Level};
use std::ops::ControlFlow;
fn main() {
    let etw = Etw::new();
    let mut t = etw.open_trace("smoke", None, None);
    t.enable("Microsoft-Windows-Winsock-AFD", 0, Level::VERBOSE)
        .unwrap();
    let exe = std::env::args().nth(1).expect("usage: live_smoke PROGRAM");
    let mut child = t.spawn(&mut std::process::Command::new(exe)).unwrap();
    let stop = t.stop_handle();
    std::thread::spawn(move || {
        let _ = child.wait();
        std::thread::sleep(std::time::Duration::from_millis(100));
        stop.stop();
    });
    t.process(
        |ev| {
            let (name, p) = etwkit::live::props::properties(ev).unwrap_or_default();
            println!(
                "{} {} pid={} tid={} cpu={} {} {}",
                ev.timestamp,
                ev.descriptor.id,
                ev.pid,
                ev.tid,
                ev.cpu,
                name,
                serde_json::Value::Object(p)
            );
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let s = t.stop(false).unwrap();
    eprintln!("{s:?}");
}
