//! Attach mode on an already running multi-threaded process, and the cost to processes that are not
//! traced (real kernel, root).
#![cfg(target_os = "linux")]

mod heap_common;

use std::ops::ControlFlow;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etwkit::analysis::heap::{HeapAnalyzer, HeapOpKind};
use etwkit::live::linux::heap::{heap_trace, list_tids, StackEvents};
use etwkit::live::linux::unwind::LinuxStackNamer;

#[test]
fn attach_sees_every_thread() {
    let Some(bin) = heap_common::build_pattern("heap_attach") else {
        return;
    };
    let gate = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("heap_gate_{}", std::process::id()));
    let done = gate.with_extension("done");
    let _ = std::fs::remove_file(&gate);
    let _ = std::fs::remove_file(&done);
    let mut child = Command::new(&bin)
        .arg("wait")
        .arg(&gate)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until its worker threads exist (they block on the gate file).
    let t0 = Instant::now();
    while list_tids(child.id()).len() < 1 + heap_common::THREADS as usize {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "pattern threads did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut trace = heap_trace(&[child.id()], StackEvents::ALLOC).expect("attach");
    assert_eq!(trace.stats().threads_attached, 1 + heap_common::THREADS);
    std::fs::write(&gate, b"").unwrap();
    let stop = trace.stop_handle();
    let pid = child.id();
    let mut an = HeapAnalyzer::new();
    let mut pattern_allocs = 0;
    let mut tids = std::collections::HashSet::new();
    let started = Instant::now();
    trace
        .process(|op| {
            if let HeapOpKind::Alloc { size, .. } = op.kind {
                if (1000..1600).contains(&size) && op.api == "malloc" {
                    pattern_allocs += 1;
                    tids.insert(op.tid);
                }
            }
            an.add(op);
            // Every pattern allocation and free seen: let the program exit.
            let frees = an
                .report(None, 0, 0)
                .processes
                .iter()
                .map(|p| p.frees)
                .sum::<u64>();
            if pattern_allocs == heap_common::THREADS * heap_common::N
                && frees >= heap_common::THREADS * (heap_common::N - heap_common::K)
            {
                let _ = std::fs::write(&done, b"");
            }
            if started.elapsed() > Duration::from_secs(60) {
                stop.store(true, Ordering::Relaxed);
            }
            ControlFlow::Continue(())
        })
        .expect("process");
    let _ = std::fs::write(&done, b"");
    assert!(child.wait().unwrap().success());
    assert_eq!(
        tids.len() as u64,
        heap_common::THREADS,
        "allocations of every worker thread"
    );
    an.add_lost(trace.stats().lost_samples);
    let mut namer = LinuxStackNamer::new(trace.unwinder().all_maps());
    let report = an.report(Some(&mut namer), 20, 8);
    eprintln!("{}", report.to_table());
    heap_common::check_pattern(&report, pid, pattern_allocs);
}

/// A busy malloc/free loop in C; prints its iterations per second.
fn storm(bin: &std::path::Path, secs: &str) -> Command {
    let mut c = Command::new(bin);
    c.arg(secs).stdout(Stdio::piped());
    c
}

/// Iterations per CPU second of the storm process (immune to CPU sharing with the tracer).
fn rate(out: std::process::Output) -> f64 {
    let s = String::from_utf8_lossy(&out.stdout);
    s.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("storm output {s:?} ({})", out.status))
}

#[test]
fn untraced_process_runs_at_full_speed() {
    if !heap_common::require_root("heap_untraced") {
        return;
    }
    let src = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/heap_progs/storm.c");
    let bin = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("heap_storm");
    assert!(Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap()
        .success());
    let baseline = rate(storm(&bin, "0.5").output().unwrap());
    // A traced process hammering the same libc functions.
    let mut traced = storm(&bin, "3").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut trace = heap_trace(&[traced.id()], StackEvents::NONE).expect("attach");
    let stop = trace.stop_handle();
    let bin2 = bin.clone();
    let untraced = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let r = rate(storm(&bin2, "0.5").output().unwrap());
        stop.store(true, Ordering::Relaxed);
        r
    });
    let mut ops = 0u64;
    trace
        .process(|_| {
            ops += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    let during = untraced.join().unwrap();
    let _ = traced.kill();
    let _ = traced.wait();
    eprintln!("untraced storm: {baseline:.0}/CPU-s alone, {during:.0}/CPU-s while another process is traced ({ops} ops traced)");
    assert!(ops > 1000, "the traced process was traced ({ops} ops)");
    // The probes live in the traced process's memory map only: per CPU second the other process
    // keeps its speed (an inode-wide tracefs uprobe makes every libc user ~1000x slower; the wide
    // bound leaves room for cache and frequency effects of the busy neighbours).
    assert!(
        during > baseline / 2.0,
        "untraced process slowed from {baseline:.0} to {during:.0} iterations per CPU second"
    );
}
