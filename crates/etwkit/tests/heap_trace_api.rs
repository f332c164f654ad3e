//! Heap tracing through the ordinary session API (PythonForWindows' shape): a `Trace` of the heap
//! provider, a command spawned suspended, `process(callback)`, and the events decoded by the one
//! shared decoder with heap.json's names. Root, real kernel.
//! Linux only: the heap provider there is uprobes on libc (Windows heap sessions: tests/win_session.rs).
#![cfg(target_os = "linux")]

mod heap_common;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::process::Command;

use etwkit::analysis::heap::HEAP_PROVIDER;
use etwkit::live::props::{as_u64, properties};
use etwkit::live::Etw;

#[test]
fn heap_trace_is_a_trace_like_any_other() {
    let test = "heap_trace_is_a_trace_like_any_other";
    if !heap_common::require_root(test) {
        return;
    }
    let Some(prog) = heap_common::build_pattern(test) else {
        return;
    };
    let etw = Etw::new();
    // Stacks on allocations only (the heap provider's Alloc id), like StartHeapTrace's stack filter.
    let mut t = etw.open_heap_trace("etwkit-heap-api", None, &[33]).unwrap();
    let child = t.spawn(&mut Command::new(&prog)).unwrap();
    let pid = child.id();
    let mut live: HashMap<u64, u64> = HashMap::new();
    let (mut pattern_allocs, mut frees, mut stacked, mut events) = (0u64, 0u64, 0u64, 0u64);
    let is_pattern =
        |size: u64| (1000..1000 + 100 * heap_common::THREADS + heap_common::N).contains(&size);
    t.process(
        |r| {
            events += 1;
            assert_eq!(r.provider, HEAP_PROVIDER);
            assert_eq!(r.pid, pid, "only the spawned process is traced");
            let (name, p) = properties(r).expect("heap events decode from their own metadata");
            match name.as_str() {
                "Alloc" => {
                    assert_eq!(r.descriptor.id, 33);
                    let size = as_u64(&p["AllocSize"]).unwrap();
                    let addr = as_u64(&p["AllocAddress"]).unwrap();
                    if is_pattern(size) {
                        pattern_allocs += 1;
                        stacked += r.stack().is_some_and(|s| s.addresses.len() >= 3) as u64;
                    }
                    live.insert(addr, size);
                }
                "Free" => {
                    assert_eq!(r.descriptor.id, 36);
                    assert!(r.stack().is_none(), "no stacks asked for Free");
                    frees += 1;
                    live.remove(&as_u64(&p["FreeAddress"]).unwrap());
                }
                "ReAlloc" => {
                    live.remove(&as_u64(&p["OldAllocAddress"]).unwrap());
                    live.insert(
                        as_u64(&p["NewAllocAddress"]).unwrap(),
                        as_u64(&p["NewAllocSize"]).unwrap(),
                    );
                }
                other => panic!("unexpected heap event {other}"),
            }
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    let mut child = child;
    assert!(child.wait().unwrap().success());
    assert_eq!(sum.events_lost, 0, "{sum:?}");
    assert_eq!(sum.events_delivered, events);
    let threads = heap_common::THREADS;
    assert_eq!(
        pattern_allocs,
        threads * heap_common::N,
        "every pattern allocation seen"
    );
    assert_eq!(
        stacked, pattern_allocs,
        "every allocation carries a stack of 3+ frames"
    );
    assert!(frees >= threads * (heap_common::N - heap_common::K));
    let leaked: Vec<u64> = live.values().copied().filter(|s| is_pattern(*s)).collect();
    assert_eq!(leaked.len() as u64, threads * heap_common::K);
    assert_eq!(leaked.iter().sum::<u64>(), 13_812);
}
