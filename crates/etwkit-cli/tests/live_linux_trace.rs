//! `etwkit trace` on the real kernel (requires root): JSON lines with the same fields as `dump` plus
//! provider/event names and properties, the loss summary, logfile mode, and the listing commands.
#![cfg(target_os = "linux")]

mod common;

use std::process::Command;

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_etwkit");

/// The demo workload's facts, from the traced child's stderr.
fn facts(stderr: &str) -> Value {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("etwkit demo workload: "))
        .expect("workload facts on stderr");
    serde_json::from_str(line).unwrap()
}

#[test]
fn trace_json_lines_carry_dump_fields_names_and_properties() {
    if !common::require_root("live_linux_trace") {
        return;
    }
    let out = Command::new(EXE)
        .args([
            "trace",
            "--name",
            "t-cli-json",
            "-p",
            "winsock:5",
            "--format",
            "json",
            "--",
            EXE,
            "__demo-workload",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let f = facts(&stderr);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let (summary, events) = lines.split_last().unwrap();
    assert_eq!(summary["etwkit_summary"]["events_lost"], 0, "{summary}");
    assert_eq!(
        summary["etwkit_summary"]["events_delivered"]
            .as_u64()
            .unwrap() as usize,
        events.len()
    );
    let keys = common::DUMP_FIELDS
        .iter()
        .chain(&["provider_name", "event_name"]);
    for e in events {
        for k in keys.clone() {
            assert!(e.get(k).is_some(), "missing {k} in {e}");
        }
        let ts = e["timestamp"].as_str().unwrap();
        assert!(
            ts.len() == 28 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.',
            "RFC 3339 with 7 digits: {ts}"
        );
        assert_eq!(e["provider"], "e53c6823-7bb8-44bb-90dc-3f86090d48a6");
        assert_eq!(e["provider_name"], "Microsoft-Windows-Winsock-AFD");
        assert_eq!(e["header_type"], "EVENT_HEADER64");
        assert!(e["keywords"].as_str().unwrap().starts_with("0x"));
        assert_eq!(e["pid"], f["pid"]);
        assert!(e["properties"].is_object());
    }
    let connect = events
        .iter()
        .find(|e| e["id"] == 4 && e["properties"]["Port"] == f["v4"]["server_port"])
        .expect("IPv4 connect to the echo server");
    assert_eq!(connect["event_name"], "Socket connect (IPv4)");
    assert_eq!(connect["properties"]["Address"], "127.0.0.1");
    assert_eq!(connect["level"], 4);
    assert_eq!(connect["tid"], f["v4"]["client_tid"]);
    let drop = events
        .iter()
        .find(|e| e["id"] == 33)
        .expect("datagram dropped");
    assert_eq!(drop["keywords"], "0x10000000000");
    assert_eq!(drop["level"], 5);
}

#[test]
fn trace_to_logfile_then_dump() {
    if !common::require_root("live_linux_trace") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("etwkit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let etl = dir.join("winsock.etl");
    let out = Command::new(EXE)
        .args([
            "trace",
            "--name",
            "t-cli-etl",
            "-p",
            "Microsoft-Windows-Winsock-AFD:4",
            "-o",
        ])
        .arg(&etl)
        .args(["--", EXE, "__demo-workload"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let f = facts(&stderr);
    let delivered: u64 = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("etwkit: ")
                .and_then(|l| l.split(" events delivered").next())
                .and_then(|n| n.parse().ok())
        })
        .expect("summary line");
    let dump = Command::new(EXE)
        .arg("dump")
        .arg(&etl)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let evs: Vec<Value> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["provider"] == "e53c6823-7bb8-44bb-90dc-3f86090d48a6")
        .collect();
    assert_eq!(
        evs.len() as u64,
        delivered,
        "every delivered event is in the file"
    );
    assert!(evs
        .iter()
        .all(|e| e["pid"] == f["pid"] && e["level"].as_u64().unwrap() <= 4));
    for id in [1, 2, 4, 6, 13, 14, 15, 40] {
        assert!(
            evs.iter().any(|e| e["id"] == id),
            "event {id} in the logfile"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn providers_and_sessions_list() {
    if !common::require_root("live_linux_trace") {
        return;
    }
    let out = Command::new(EXE)
        .args(["providers", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let provs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ws = provs
        .iter()
        .find(|p| p["name"] == "Microsoft-Windows-Winsock-AFD")
        .unwrap();
    assert_eq!(ws["guid"], "e53c6823-7bb8-44bb-90dc-3f86090d48a6");
    let sched = provs
        .iter()
        .find(|p| p["name"] == "sched")
        .expect("tracepoint system sched");
    assert!(sched["events"].as_u64().unwrap() > 5);
    // The name hash is stable: the same GUID from the TraceLogging rule.
    assert_eq!(
        sched["guid"].as_str().unwrap(),
        etwkit::tlg::provider_guid_from_name("sched").to_string()
    );
    let out = Command::new(EXE)
        .args(["sessions", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let s: Value = serde_json::from_str(l).unwrap();
        assert!(s["instance"].is_string() && s["etwkit"].is_boolean());
    }
    let text = Command::new(EXE).arg("providers").output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout)
        .lines()
        .next()
        .unwrap()
        .starts_with("NAME"));
}

#[test]
fn not_root_gets_one_clear_sentence() {
    if !common::require_root("live_linux_trace") {
        return;
    }
    // Drop to nobody with setpriv (util-linux).
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            EXE,
            "trace",
            "-p",
            "sched",
        ])
        .output()
        .expect("setpriv (util-linux) runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs root"), "{err}");
}
