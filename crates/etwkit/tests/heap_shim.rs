//! Spawn mode through the LD_PRELOAD shim (crate etwkit-heapshim), same pattern and same
//! exactness as the uprobe spawn test.
#![cfg(target_os = "linux")]

mod heap_common;

use std::ops::ControlFlow;
use std::process::Command;

use etwkit::analysis::heap::{HeapAnalyzer, HeapOpKind};
use etwkit::live::linux::heap::shim::ShimTrace;
use etwkit::live::linux::heap::StackEvents;
use etwkit::live::linux::unwind::LinuxStackNamer;

#[test]
fn shim_spawned_pattern_is_fully_accounted() {
    let Some(bin) = heap_common::build_pattern("heap_shim") else {
        return;
    };
    let shim = heap_common::build_shim();
    let mut trace = ShimTrace::spawn(&mut Command::new(&bin), &shim, StackEvents::ALLOC)
        .expect("spawn with shim");
    let mut an = HeapAnalyzer::new();
    let mut pattern_allocs = 0;
    trace
        .process(
            |_| {},
            |op| {
                if let HeapOpKind::Alloc { size, .. } = op.kind {
                    if (1000..1600).contains(&size) && op.api == "malloc" {
                        pattern_allocs += 1;
                    }
                }
                an.add(op);
                ControlFlow::Continue(())
            },
        )
        .expect("process");
    for (pid, stack, api, count, bytes) in trace.transient() {
        if *api == "malloc" {
            // Pairs freed on their own thread are counted in the shim, not sent one by one.
            pattern_allocs += count;
            let _ = bytes;
        }
        an.add_transient(*pid, stack, *count, *bytes);
    }
    let child = trace.child_mut().unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    eprintln!("{:?}", trace.stats());
    assert_eq!(trace.stats().malformed, 0);
    assert_eq!(trace.stats().unknown_stacks, 0);
    let mut namer = LinuxStackNamer::new(trace.maps());
    let report = an.report(Some(&mut namer), 20, 8);
    eprintln!("{}", report.to_table());
    heap_common::check_pattern(&report, pid, pattern_allocs);
}
