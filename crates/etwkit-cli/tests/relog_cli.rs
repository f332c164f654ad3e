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
