//! `live::heap::HeapSession` on Windows: the ETW heap session behind the one heap-tracing API
//! (what `etwkit heap` runs), built for Windows.
//!
//! Under wine (whose ETW is a stub, ../shared/notes/windows-build.md) the API's calls are asserted
//! step by step: a command is created suspended, the heap session starts for its pid (StartTraceW
//! returns 0) and the command is resumed — its exit code shows it ran —, then consuming is refused
//! by wine's OpenTraceW in one sentence, and the report notes why frames have no module names (the
//! kernel image session cannot be consumed either). Asking for stacks fails at
//! TraceSetInformation (not implemented by wine) and leaves no process behind. TDH is never called.
//!
//! On real Windows, elevated, the command is traced for real: heap operations arrive and frames
//! are named `module+offset` from the kernel session's image events. Not elevated it skips loudly
//! (fails with ETWKIT_REQUIRE_ROOT=1).
#![cfg(windows)]

use std::ops::ControlFlow;
use std::process::Command;

use etwkit::analysis::heap::HeapAnalyzer;
use etwkit::live::heap::{HeapMode, HeapOptions, HeapSession, HeapStacks};
use etwkit::live::windows::wine_version;
use etwkit::live::LiveError;

fn cmd_exit(code: u32) -> Command {
    let mut c = Command::new("cmd.exe");
    c.args(["/c", "exit", &code.to_string()]);
    c
}

#[test]
fn heap_session_api_on_etw() {
    let mut cmd = cmd_exit(5);
    let r = HeapSession::start(HeapOptions {
        command: Some(&mut cmd),
        stacks: match wine_version() {
            // Wine has no TraceSetInformation: without stacks the session starts.
            Some(_) => HeapStacks::NONE,
            None => HeapStacks::default(),
        },
        ..HeapOptions::default()
    });
    let mut s = match r {
        Err(LiveError::NotElevated) if wine_version().is_none() => {
            if std::env::var("ETWKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
                panic!("heap_session_api_on_etw: needs an elevated prompt");
            }
            eprintln!(
                "\n*** SKIPPED heap_session_api_on_etw: needs an elevated Administrator ***\n"
            );
            return;
        }
        r => r.expect("spawn suspended, start the heap session, resume"),
    };
    let pid = s.command_pid().expect("the command's pid");
    let mut an = HeapAnalyzer::new();
    let mut ops = 0u64;
    let r = s.process(&mut |_| {}, &mut |op| {
        ops += (op.pid == pid) as u64;
        an.add(op);
        ControlFlow::Continue(())
    });
    let mut totals = etwkit::live::heap::HeapTotals::default();
    let fin = s.finish(&mut totals).expect("finish");
    let mut end = s.wait(&mut totals).expect("wait for the command");
    an.add_totals(totals);
    assert_eq!(
        end.status.and_then(|s| s.code()),
        Some(5),
        "the command ran to its end"
    );
    assert_eq!(end.mode, "traced with an ETW heap session");
    let report = an.report(Some(end.namer.as_mut()), 10, 8);
    match wine_version() {
        Some(v) => {
            eprintln!("wine {v}");
            let e = r.expect_err("wine's OpenTraceW refuses");
            assert!(
                e.to_string()
                    .starts_with("OpenTraceW is refused by wine's ETW"),
                "{e}"
            );
            assert_eq!(ops, 0);
            assert!(fin.images.is_empty());
            assert!(
                report
                    .notes
                    .iter()
                    .any(|n| n.starts_with("frames are addresses only")
                        && n.contains("OpenTraceW is refused by wine's ETW")),
                "{:?}",
                report.notes
            );
        }
        None => {
            r.expect("events delivered");
            assert!(ops > 0, "no heap operations of cmd.exe");
            let named = report
                .top_allocating_stacks
                .iter()
                .flat_map(|g| &g.frames)
                .filter(|f| f.module.is_some() && f.offset.is_some())
                .count();
            assert!(named > 0, "no frame named module+offset: {report:?}");
        }
    }
}

#[test]
fn stacks_need_trace_set_information() {
    if wine_version().is_none() {
        return; // Real Windows runs stacks in heap_session_api_on_etw.
    }
    let mut cmd = cmd_exit(0);
    let e = HeapSession::start(HeapOptions {
        command: Some(&mut cmd),
        stacks: HeapStacks::default(),
        ..HeapOptions::default()
    })
    .err()
    .expect("wine has no TraceSetInformation");
    let m = e.to_string();
    assert!(
        m.contains("TraceSetInformation") && m.contains("wine's ETW is a stub"),
        "{m}"
    );
}

#[test]
fn linux_modes_are_refused_in_one_sentence() {
    for mode in [HeapMode::Shim, HeapMode::Uprobe] {
        let e = HeapSession::start(HeapOptions {
            pids: vec![std::process::id()],
            mode,
            ..HeapOptions::default()
        })
        .err()
        .expect("no shim or uprobes on Windows");
        assert!(
            matches!(e, LiveError::Unsupported(ref m) if m.starts_with("the shim and uprobe heap modes are Linux's")),
            "{e}"
        );
    }
}
