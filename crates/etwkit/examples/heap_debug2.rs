use etwkit::live::linux::heap::{heap_trace, StackEvents};
use std::ops::ControlFlow;
use std::process::Command;
fn main() {
    let gate = "/tmp/ht/gate";
    let _ = std::fs::remove_file(gate);
    let _ = std::fs::remove_file("/tmp/ht/gate.done");
    let mut child = Command::new("/tmp/ht/pattern")
        .args(["wait", gate])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut trace = heap_trace(&[child.id()], StackEvents::ALLOC).unwrap();
    std::fs::write(gate, "").unwrap();
    let stop = trace.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(2));
        std::fs::write("/tmp/ht/gate.done", "").unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let mut n = std::collections::HashMap::new();
    trace
        .process(|op| {
            *n.entry((op.tid, op.api)).or_insert(0) += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    child.wait().unwrap();
    println!("{n:?}\n{:?}", trace.stats());
}
