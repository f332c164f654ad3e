//! Benchmark: a syscall storm (`close(-1)` in a loop, from the `etwkit-netwl storm N` helper) traced
//! live through the `syscalls` provider. Prints the events delivered per second and the loss
//! accounting: storm events delivered + events the kernel reported lost must cover every call.
//!
//! `cargo run --release -p etwkit --example live_storm -- [N] [BUFFER_KB]` (root).

use std::ops::ControlFlow;
use std::process::{Command, Stdio};
use std::time::Instant;

use etwkit::live::linux::format::EventFormat;
use etwkit::live::linux::tracefs;
use etwkit::live::{Etw, Level};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000_000);
    let buffer_kb: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(32768);
    let root = tracefs::root().unwrap_or_else(|e| {
        eprintln!("live_storm: {e}");
        std::process::exit(2);
    });
    let ev = root.join("events");
    let enter = EventFormat::load(&ev, "syscalls", "sys_enter_close")
        .unwrap()
        .id;
    let exit = EventFormat::load(&ev, "syscalls", "sys_exit_close")
        .unwrap()
        .id;
    let helper = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("../etwkit-netwl");
    let etw = Etw::new();
    let mut t = etw.open_trace("storm", None, None);
    t.enable("syscalls", 0, Level::VERBOSE).unwrap();
    t.set_buffer_kb(buffer_kb);
    let mut cmd = Command::new(&helper);
    cmd.args(["storm", &n.to_string()]).stdout(Stdio::null());
    let started = Instant::now();
    let mut child = t
        .spawn(&mut cmd)
        .unwrap_or_else(|e| panic!("{}: {e}", helper.display()));
    let stop = t.stop_handle();
    let gen = std::thread::spawn(move || {
        let st = child.wait().unwrap();
        let el = started.elapsed();
        stop.stop();
        (st, el)
    });
    let (mut storm, mut all, mut first, mut last) = (0u64, 0u64, None, Instant::now());
    t.process(
        |r| {
            all += 1;
            let id = r.descriptor.id;
            if id == enter || id == exit {
                // close(-1): fd (u64 after the 4-byte __syscall_nr) is 0xffffffff, or ret is -EBADF.
                let v = r
                    .payload
                    .get(4..12)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
                if (id == enter && v == Some(0xffff_ffff))
                    || (id == exit && v == Some((-9i64) as u64))
                {
                    storm += 1;
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                }
            }
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    let (st, gen_time) = gen.join().unwrap();
    assert!(st.success());
    let expected = 2 * n;
    let span = first
        .map(|f| last.duration_since(f).as_secs_f64())
        .unwrap_or(0.0)
        .max(1e-9);
    println!(
        "storm: {n} close(-1) calls in {:.3} s = {:.2} M syscalls/s",
        gen_time.as_secs_f64(),
        n as f64 / gen_time.as_secs_f64() / 1e6
    );
    println!("delivered: {all} events ({storm} storm events of {expected}) in {span:.3} s = {:.2} M events/s", storm as f64 / span / 1e6);
    println!(
        "lost (kernel counters): {} {:?}",
        sum.events_lost, sum.lost_detail
    );
    let unreported = expected.saturating_sub(storm + sum.events_lost);
    println!("unreported loss: {unreported}");
    if unreported > 0 {
        std::process::exit(1);
    }
}
