//! `live::heap::HeapSession`, the one heap-tracing API, on Linux for real (root, real kernel): the
//! pattern program traced from its start through the API in auto mode (the allocator shim) and
//! in session mode (the heap provider through the ordinary `Trace` API, as Windows runs it), and
//! the options another platform's tracer cannot honour refused with one sentence.
#![cfg(target_os = "linux")]

mod heap_common;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::process::Command;

use etwkit::analysis::heap::{HeapAnalyzer, HeapOpKind};
use etwkit::live::heap::{HeapMode, HeapOptions, HeapSession, HeapStacks};
use heap_common::{K, N, THREADS};

/// What a traced run of the pattern program gave.
struct Run {
    report: etwkit::analysis::heap::HeapReport,
    pid: u32,
    /// Pattern allocations delivered.
    allocs: u64,
    /// Pattern blocks never freed: (count, bytes).
    left: (u64, u64),
    /// Pattern allocations with a stack of 3+ frames.
    stacked: u64,
    mode: String,
}

/// Traces the pattern program through the API.
fn trace_pattern(test: &str, mode: HeapMode) -> Option<Run> {
    let prog = heap_common::build_pattern(test)?;
    let mut cmd = Command::new(&prog);
    // The shim as an executable carries it (bytes; here built by the test).
    let shim = match mode {
        HeapMode::Session => None,
        _ => Some(Ok(&*Box::leak(
            std::fs::read(heap_common::build_shim())
                .unwrap()
                .into_boxed_slice(),
        ))),
    };
    let opts = HeapOptions {
        command: Some(&mut cmd),
        mode,
        stacks: HeapStacks::default(),
        shim,
        ..Default::default()
    };
    let mut s = HeapSession::start(opts).unwrap();
    let pid = s.command_pid().expect("the command's pid");
    let is_pattern = |size: u64| (1000..1000 + 100 * THREADS + N).contains(&size);
    let mut an = HeapAnalyzer::new();
    let mut live: HashMap<u64, u64> = HashMap::new();
    let (mut allocs, mut stacked) = (0u64, 0u64);
    s.process(&mut |_| {}, &mut |op| {
        an.add(op);
        if op.pid == pid {
            match op.kind {
                HeapOpKind::Alloc { address, size } if is_pattern(size) => {
                    allocs += 1;
                    stacked += op.stack.as_ref().is_some_and(|s| s.len() >= 3) as u64;
                    live.insert(address, size);
                }
                HeapOpKind::Free { address } => {
                    live.remove(&address);
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    let mut totals = etwkit::live::heap::HeapTotals::default();
    s.finish(&mut totals).unwrap();
    let mut end = s.wait(&mut totals).unwrap();
    an.add_totals(totals);
    assert!(end.status.unwrap().success());
    let report = an.report(Some(end.namer.as_mut()), 20, 8);
    let left = (live.len() as u64, live.values().sum());
    Some(Run {
        report,
        pid,
        allocs,
        left,
        stacked,
        mode: end.mode,
    })
}

fn expected_bytes() -> u64 {
    (0..THREADS)
        .flat_map(|t| (0..K).map(move |i| 1000 + t * 100 + i))
        .sum()
}

#[test]
fn api_auto_mode_traces_a_command_with_the_shim() {
    let test = "api_auto_mode_traces_a_command_with_the_shim";
    let Some(Run {
        report, pid, mode, ..
    }) = trace_pattern(test, HeapMode::Auto)
    else {
        return;
    };
    assert_eq!(mode, "traced with the allocator shim");
    // The shim counts short-lived pairs in process: the leak and the totals are what it reports.
    let p = report.processes.iter().find(|p| p.pid == pid).unwrap();
    assert!(p.allocs >= THREADS * N, "{p:?}");
    heap_common::check_pattern(&report, pid, THREADS * N);
}

#[test]
fn api_session_mode_traces_through_the_trace_api() {
    let test = "api_session_mode_traces_through_the_trace_api";
    let Some(Run {
        report,
        pid,
        allocs,
        left,
        stacked,
        mode,
    }) = trace_pattern(test, HeapMode::Session)
    else {
        return;
    };
    assert_eq!(mode, "traced with the heap provider's session");
    assert_eq!(allocs, THREADS * N, "every pattern allocation delivered");
    assert_eq!(
        left,
        (THREADS * K, expected_bytes()),
        "pattern blocks never freed"
    );
    assert_eq!(stacked, allocs, "stacks on allocations, as asked");
    let p = report.processes.iter().find(|p| p.pid == pid).unwrap();
    assert!(
        p.allocs >= THREADS * N && p.frees >= THREADS * (N - K),
        "{p:?}"
    );
    assert!(p.outstanding >= THREADS * K, "{p:?}");
}

#[test]
fn api_refuses_what_a_session_cannot_do() {
    // Runs without root: the checks come before anything is started.
    let mut cmd = Command::new("true");
    let e = HeapSession::start(HeapOptions {
        command: Some(&mut cmd),
        mode: HeapMode::Session,
        follow_forks: true,
        ..Default::default()
    })
    .err()
    .expect("follow_forks with a session");
    assert!(
        e.to_string()
            .starts_with("following forks is a Linux shim feature"),
        "{e}"
    );
    let e = HeapSession::start(HeapOptions::default()).err().unwrap();
    assert_eq!(
        e.to_string(),
        "nothing to trace: give processes or a command"
    );
    assert_eq!(
        HeapStacks::parse("alloc,free").unwrap().event_ids(),
        vec![33, 36]
    );
    assert!(HeapStacks::parse("allocs").is_err());
}
