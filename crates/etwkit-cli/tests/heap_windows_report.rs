//! `etwkit heap --report FILE.etl` of a Windows heap trace names frames `module+offset` from the
//! trace's own image events (a trace written here with the ETL writer: Image rundown and load
//! events, HeapTraceProvider Alloc/Free, StackWalk stacks). Runs on every OS.

#[path = "../../etwkit/tests/heap_common/windows_etl.rs"]
mod windows_etl;

use std::process::Command;

fn heap(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .arg("heap")
        .args(args)
        .output()
        .expect("run etwkit heap");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn report_of_a_windows_trace_shows_module_plus_offset() {
    let etl = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("win_heap_report.etl");
    windows_etl::write(&etl);
    let etl = etl.to_str().unwrap();

    let (code, out, err) = heap(&["--report", etl, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "one JSON line: {out}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let leak = &r["outstanding_by_stack"][0];
    assert_eq!(leak["pid"], windows_etl::PID);
    assert_eq!(leak["bytes"], windows_etl::LEAKED.iter().sum::<u64>());
    let frames: Vec<(String, u64)> = leak["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| Some((f["module"].as_str()?.to_string(), f["offset"].as_u64()?)))
        .collect();
    let s = windows_etl::LEAK_STACK;
    assert_eq!(
        frames,
        vec![
            ("ntdll.dll".to_string(), s[1] - windows_etl::NTDLL.0),
            ("mod.dll".to_string(), s[2] - windows_etl::MOD.0),
            ("app.exe".to_string(), s[3] - windows_etl::APP.0),
        ]
    );
    assert_eq!(leak["frames"][3]["address"], s[4], "outside every module");

    let (code, table, err) = heap(&["--report", etl]);
    assert_eq!(code, 0, "{err}");
    for want in [
        format!("ntdll.dll+{:#x}", s[1] - windows_etl::NTDLL.0),
        format!("mod.dll+{:#x}", s[2] - windows_etl::MOD.0),
        format!("app.exe+{:#x}", s[3] - windows_etl::APP.0),
    ] {
        assert!(table.contains(&want), "{want} missing from:\n{table}");
    }
}

#[test]
fn a_profile_is_never_written_over_the_trace_it_reports() {
    let etl = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("win_heap_same.etl");
    windows_etl::write(&etl);
    let before = std::fs::read(&etl).unwrap();
    let etl = etl.to_str().unwrap();
    for flag in ["--pprof", "--flamegraph"] {
        let (code, out, err) = heap(&["--report", etl, flag, etl]);
        assert_ne!(code, 0, "{flag}: {err}");
        assert!(out.is_empty(), "{flag}: {out}");
        assert!(err.contains("also an input"), "{flag}: {err}");
        assert_eq!(
            std::fs::read(etl).unwrap(),
            before,
            "{flag}: the trace was changed"
        );
    }
    // Both profiles into one file: refused rather than one overwriting the other.
    let both = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("win_heap_both.out");
    let both = both.to_str().unwrap();
    let (code, _, err) = heap(&["--report", etl, "--pprof", both, "--flamegraph", both]);
    assert_ne!(code, 0);
    assert!(err.contains("the same file"), "{err}");
}
