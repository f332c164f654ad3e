use etwkit::live::linux::heap::{spawn_suspended, HeapOptions, HeapTrace};
use std::ops::ControlFlow;
use std::process::Command;
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let child = spawn_suspended(Command::new(&args[0]).args(&args[1..])).unwrap();
    let mut trace = HeapTrace::for_suspended(&child, HeapOptions::default()).unwrap();
    let mut child = child.resume().unwrap();
    trace
        .process(|op| {
            println!(
                "{} {} {:?} {:?}",
                op.tid,
                op.api,
                op.kind,
                op.stack.as_ref().map(|s| s.len())
            );
            ControlFlow::Continue(())
        })
        .unwrap();
    child.wait().unwrap();
    println!("{:?}", trace.stats());
}
