//! `etwkit relog` end to end: filters from the command line, a JSON summary on stdout, a file that
//! `etwkit stats` reads, and clear errors for bad input.

mod common;

use std::path::PathBuf;

use common::{etwkit, samples};

#[test]
fn relog_command_filters_and_stats_reads_the_result() {
    let Some(s) = samples("relog_cli") else {
        return;
    };
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp.join("cli_relog.etl");
    let input = s.join("pktmonvpn_PktMon.etl");
    let (ok, stdout, stderr) = etwkit(&[
        "relog",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--provider",
        "4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac",
        "--id",
        "160",
    ]);
    assert!(ok, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let kept = summary["inputs"][0]["kept"].as_u64().unwrap();
    // 3,646 id-160 packet events plus the PktMon schema records (EventInfo/EventMapInfo).
    assert!(kept > 3646 && kept < 3646 + 84, "{kept}");
    let (ok, stdout, stderr) = etwkit(&["stats", out.to_str().unwrap(), "--format", "json"]);
    assert!(ok, "{stderr}");
    let st: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        st["records"].as_u64().unwrap(),
        kept + 1,
        "kept records + logfile header"
    );
    assert_eq!(st["closed_cleanly"], serde_json::json!(true));
    assert_eq!(st["bad_records"], serde_json::json!(0));
    assert_eq!(
        st["providers"]["4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac"],
        serde_json::json!(3646)
    );
    let _ = std::fs::remove_file(&out);

    // Time window given as seconds from the trace start, two inputs merged.
    let (ok, stdout, stderr) = etwkit(&[
        "relog",
        input.to_str().unwrap(),
        s.join("etlparser_AMSITrace.etl").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["written"]["records"].as_u64().unwrap(), 4600 + 20);
}

#[test]
fn relog_command_refuses_bad_input_clearly() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let bogus = tmp.join("not_an_etl.etl");
    std::fs::write(
        &bogus,
        b"this is not a trace at all, just text that goes on for a while.......",
    )
    .unwrap();
    let out = tmp.join("never.etl");
    let (ok, _, stderr) = etwkit(&[
        "relog",
        bogus.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("not an ETL file"), "{stderr}");
    let (ok, _, stderr) = etwkit(&[
        "relog",
        bogus.to_str().unwrap(),
        "-o",
        bogus.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("not an ETL file") || stderr.contains("also an input"),
        "{stderr}"
    );
    let Some(s) = samples("relog_cli") else {
        return;
    };
    let input = s.join("etlparser_AMSITrace.etl");
    let (ok, _, stderr) = etwkit(&[
        "relog",
        input.to_str().unwrap(),
        "-o",
        input.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("also an input"), "{stderr}");
    let (ok, _, stderr) = etwkit(&[
        "relog",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--begin",
        "yesterday",
    ]);
    assert!(!ok);
    assert!(stderr.contains("neither RFC 3339"), "{stderr}");
    let (ok, _, stderr) = etwkit(&[
        "relog",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--buffer-kib",
        "0",
    ]);
    assert!(!ok);
    // Named in the option's unit (KiB), not the writer's bytes.
    assert!(
        stderr.contains("--buffer-kib") && stderr.contains("1..=65536"),
        "{stderr}"
    );
}

/// A write that fails (the file-size limit of `ulimit -f`, SIGXFSZ ignored so the write returns
/// EFBIG) is one sentence naming the output — not the hidden file it was written as — with exit
/// code 1, and leaves neither the output nor that file behind.
#[test]
fn a_failed_write_names_the_output_and_leaves_nothing() {
    let Some(s) = samples("a_failed_write_names_the_output_and_leaves_nothing") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("relog-write-error");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.etl");
    let o = std::process::Command::new("sh")
        .args(["-c", "trap '' XFSZ; ulimit -f 8; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_etwkit"))
        .arg("relog")
        .arg(s.join("perfview_gcevents.etl"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("etwkit: cannot write {}: ", out.display()))
            && err.contains("os error 27"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

/// A time window in the middle of a trace keeps its rundown: the kernel's process, thread and
/// image DCStart/DCEnd records, file names, SysConfig, KernelTraceControl's image ids and the CLR
/// rundown — logged seconds before and after the window — stay in the output beside exactly the
/// input's records inside the window, so the window can still be symbolized.
#[test]
fn a_time_window_keeps_the_rundown() {
    let Some(s) = samples("a_time_window_keeps_the_rundown") else {
        return;
    };
    let input = s.join("perfview_net.4.5.x86.etl");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("window_rundown.etl");
    let (begin, end) = (
        "2016-05-26T20:17:24.0000000Z",
        "2016-05-26T20:17:25.0000000Z",
    );
    let (ok, summary, stderr) = etwkit(&[
        "relog",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--begin",
        begin,
        "--end",
        end,
    ]);
    assert!(ok, "{stderr}");
    let rundown = |e: &serde_json::Value| {
        let op = e["opcode"].as_u64().unwrap();
        match e["provider"].as_str().unwrap() {
            "3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c"
            | "3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c"
            | "2cb15d1d-5fc1-11d2-abe1-00a0c911f518" => op == 3 || op == 4,
            "90cbdc39-4a3e-11d1-84f4-0000f80464e3" => op == 0 || op == 36,
            "ae53722e-c863-11d2-8659-00c04fa321a1" => op == 24 || op == 25,
            "01853a65-418f-4f36-aefc-dc0f1d2fd235"
            | "b3e675d7-2554-4f18-830b-2762732560de"
            | "a669021c-c450-4609-a035-5af59af4df18" => true,
            // Not rundown, kept as well: the TDH schema records (EventInfo) whatever the window.
            "bbccf6c1-6cd1-48c4-80ff-839482e37671" => true,
            _ => false,
        }
    };
    let inside = |e: &serde_json::Value| {
        let t = e["timestamp"].as_str().unwrap();
        t >= begin && t <= end
    };
    // (in the window, rundown outside it) of a file's records.
    let split = |f: &std::path::Path| {
        let (ok, stdout, stderr) = etwkit(&["dump", f.to_str().unwrap(), "--format", "json"]);
        assert!(ok, "{stderr}");
        // The logfile header aside: the writer writes its own.
        let all: Vec<serde_json::Value> = common::json_lines(&stdout)
            .into_iter()
            .filter(|e| e["provider"] != "68fdd900-4a3e-11d1-84f4-0000f80464e3" || e["opcode"] != 0)
            .collect();
        let key = |e: &serde_json::Value| {
            format!(
                "{} {} {} {}",
                e["timestamp"], e["provider"], e["opcode"], e["payload"]
            )
        };
        let mut window: Vec<String> = all.iter().filter(|e| inside(e)).map(key).collect();
        let mut outside: Vec<String> = all
            .iter()
            .filter(|e| !inside(e) && rundown(e))
            .map(key)
            .collect();
        window.sort();
        outside.sort();
        let others = all.iter().filter(|e| !inside(e) && !rundown(e)).count();
        (window, outside, others)
    };
    let (win_in, rundown_in, _) = split(&input);
    let (win_out, rundown_out, others_out) = split(&out);
    assert!(win_in.len() > 1000, "{}", win_in.len());
    assert_eq!(win_out, win_in, "the window's records");
    assert_eq!(rundown_out, rundown_in, "the rundown outside the window");
    assert_eq!(
        others_out, 0,
        "records outside the window that are no rundown"
    );
    // The process and image DCStart/DCEnd of both ends and the CLR's method rundown.
    let count = |p: &str| rundown_out.iter().filter(|k| k.contains(p)).count();
    assert!(count("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c") > 50);
    assert!(count("2cb15d1d-5fc1-11d2-abe1-00a0c911f518") > 1000);
    assert!(count("a669021c-c450-4609-a035-5af59af4df18") > 400);
    // The summary counts them apart (the schema records have their own count).
    let summary: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    let schema = count("bbccf6c1-6cd1-48c4-80ff-839482e37671");
    assert_eq!(
        summary["inputs"][0]["rundown_kept"].as_u64().unwrap() as usize,
        rundown_out.len() - schema
    );
}
