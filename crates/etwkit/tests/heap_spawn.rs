//! Spawn mode against the real kernel (root): a C program built here makes a known pattern of
//! allocations across threads; the trace must account for every one of them.
#![cfg(target_os = "linux")]

mod heap_common;

use std::ops::ControlFlow;
use std::process::Command;

use etwkit::analysis::heap::{HeapAnalyzer, HeapOpKind};
use etwkit::live::linux::heap::{spawn_suspended, HeapOptions, HeapTrace};
use etwkit::live::linux::unwind::LinuxStackNamer;

#[test]
fn spawned_pattern_is_fully_accounted() {
    let Some(bin) = heap_common::build_pattern("heap_spawn") else {
        return;
    };
    let child = spawn_suspended(&mut Command::new(&bin)).expect("spawn suspended");
    let mut trace = HeapTrace::for_suspended(&child, HeapOptions::default()).expect("arm probes");
    let mut child = child.resume().expect("resume");
    let mut an = HeapAnalyzer::new();
    let mut pattern_allocs = 0u64;
    trace
        .process(|op| {
            if let HeapOpKind::Alloc { size, .. } = op.kind {
                if (1000..1000 + 4 * 100 + 200).contains(&size) && op.api == "malloc" {
                    pattern_allocs += 1;
                }
            }
            an.add(op);
            ControlFlow::Continue(())
        })
        .expect("process");
    assert!(child.wait().unwrap().success());
    let stats = trace.stats().clone();
    eprintln!("{stats:?}");
    assert_eq!(stats.lost_samples, 0);
    an.add_lost(stats.lost_samples);
    let mut namer = LinuxStackNamer::new(trace.unwinder().all_maps());
    let report = an.report(Some(&mut namer), 20, 8);
    eprintln!("{}", report.to_table());
    heap_common::check_pattern(&report, child.id(), pattern_allocs);
}
