//! `etwkit info | stats | dump` as a user runs them: the JSON contracts of README.md, filters
//! (provider by GUID and by name, id, time bounds), and clear errors.

mod common;

use common::{etwkit, json_lines, samples, DUMP_FIELDS};
use serde_json::Value;

#[test]
fn dump_json_contract_and_filters() {
    let Some(dir) = samples("dump_cli") else {
        return;
    };
    let pktmon = dir.join("pktmonvpn_PktMon.etl");
    let p = pktmon.to_str().unwrap();
    let (ok, out, err) = etwkit(&["dump", p, "--format", "json"]);
    assert!(ok, "{err}");
    let all = json_lines(&out);
    assert_eq!(all.len(), 4601);
    for v in &all {
        for k in DUMP_FIELDS {
            assert!(v.get(k).is_some(), "missing {k} in {v}");
        }
    }
    // Provider by GUID, and by the name the file's embedded metadata gives it.
    let guid = "4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac";
    let by_guid = json_lines(&etwkit(&["dump", p, "--format", "json", "--provider", guid]).1);
    let by_name = json_lines(
        &etwkit(&[
            "dump",
            p,
            "--format",
            "json",
            "--provider",
            "Microsoft-Windows-PktMon",
        ])
        .1,
    );
    assert_eq!(by_guid.len(), 4514);
    assert_eq!(by_name, by_guid);
    let first = &by_guid.iter().find(|v| v["id"] == 160).unwrap();
    assert_eq!(first["provider_name"], "Microsoft-Windows-PktMon");
    assert_eq!(first["timestamp"], "2021-06-01T16:10:57.9762397Z");
    assert_eq!(first["properties"]["DirTag"], "Rx");
    assert_eq!(first["properties"]["OriginalPayloadSize"], 197);
    // --id and seconds-from-start bounds.
    let ids = json_lines(&etwkit(&["dump", p, "--format", "json", "--id", "160"]).1);
    assert_eq!(ids.len(), 3646);
    let start = all[0]["timestamp"].as_str().unwrap().to_string();
    let window =
        json_lines(&etwkit(&["dump", p, "--format", "json", "--begin", "3", "--end", "6"]).1);
    assert!(!window.is_empty() && window.len() < all.len());
    // The trace starts at 16:10:57.5408593 (logfile header): the window is 16:11:00.54..16:11:03.54.
    assert_eq!(start, "2021-06-01T16:10:57.5408593Z");
    for v in &window {
        let t = v["timestamp"].as_str().unwrap();
        assert!(
            ("2021-06-01T16:11:00.5408593Z"..="2021-06-01T16:11:03.5408593Z").contains(&t),
            "{t}"
        );
    }
    let inside = all
        .iter()
        .filter(|v| {
            ("2021-06-01T16:11:00.5408593Z"..="2021-06-01T16:11:03.5408593Z")
                .contains(&v["timestamp"].as_str().unwrap())
        })
        .count();
    assert_eq!(window.len(), inside);
    // A TraceLogging provider by its traits name.
    let amsi = dir.join("etlparser_AMSITrace.etl");
    let tl = json_lines(
        &etwkit(&[
            "dump",
            amsi.to_str().unwrap(),
            "--format",
            "json",
            "--provider",
            "AmsiTrace",
        ])
        .1,
    );
    assert_eq!(tl.len(), 19);
    assert!(tl
        .iter()
        .all(|v| v["provider_name"] == "AmsiTrace" && v["properties"].is_object()));
    // CSV: header + one row per event.
    let (_, csv, _) = etwkit(&["dump", amsi.to_str().unwrap(), "--format", "csv"]);
    assert!(
        csv.starts_with("timestamp,provider,provider_name,event_name,task_name,opcode_name,id,")
    );
    assert_eq!(csv.lines().count(), 1 + 21);
}

#[test]
fn stats_and_info_json_contracts() {
    let Some(dir) = samples("dump_cli") else {
        return;
    };
    let f = dir.join("perfview_net.4.5.2.x64.etl");
    let (ok, out, err) = etwkit(&["stats", f.to_str().unwrap(), "--format", "json"]);
    assert!(ok, "{err}");
    let s: Value = serde_json::from_str(&out).unwrap();
    for k in [
        "records",
        "header_types",
        "providers",
        "buffers",
        "compressed_buffers",
        "bad_buffers",
        "bad_records",
        "events_lost",
        "buffers_lost",
        "pointer_size",
        "logger_name",
        "start_time",
        "end_time",
        "decoded",
        "undecoded_by_provider",
    ] {
        assert!(s.get(k).is_some(), "stats lacks {k}");
    }
    assert_eq!(s["records"], 179_474);
    assert_eq!(s["compressed_buffers"], 359);
    assert_eq!(s["header_types"]["EVENT_HEADER32"], 33_378);
    assert_eq!(
        s["providers"]["def2fe46-7bd6-4b80-bd94-f57fe20d0ce3"],
        12_280
    ); // StackWalk group
    assert!(s["decoded"].as_u64().unwrap() > 170_000);
    let (ok, out, _) = etwkit(&["info", f.to_str().unwrap(), "--format", "json"]);
    assert!(ok);
    let h: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(h["logger_name"], "Relogger");
    assert_eq!(h["pointer_size"], 8);
    assert_eq!(h["closed_cleanly"], true);
}

/// `stats` names every provider as `dump` names its records (`provider_name`): TraceLogging
/// providers by their traits (which the registry does not know), the others by the registry; in
/// the text report too. With `--raw`, only the file's own names.
#[test]
fn stats_names_providers_as_dump_does() {
    let Some(dir) = samples("stats_names_providers_as_dump_does") else {
        return;
    };
    for name in [
        "ebpf_ebpforwindows.etl",
        "perfview_net.4.5.x86.etl",
        "krabsetw_powershell.etl",
        "perfview_SelfDescribingSingleEvent.etl",
    ] {
        let f = dir.join(name);
        let f = f.to_str().unwrap();
        let (ok, out, err) = etwkit(&["dump", f, "--format", "json"]);
        assert!(ok, "{err}");
        let mut want: std::collections::BTreeMap<String, String> = Default::default();
        for e in json_lines(&out) {
            let (Some(g), Some(n)) = (e["provider"].as_str(), e["provider_name"].as_str()) else {
                continue;
            };
            let had = want.insert(g.to_string(), n.to_string());
            assert!(
                had.as_deref().is_none_or(|h| h == n),
                "{name}: {g} named {had:?} and {n}"
            );
        }
        let (ok, out, err) = etwkit(&["stats", f, "--format", "json"]);
        assert!(ok, "{err}");
        let s: Value = serde_json::from_str(&out).unwrap();
        let have: std::collections::BTreeMap<String, String> =
            serde_json::from_value(s["provider_names"].clone()).unwrap();
        assert_eq!(have, want, "{name}");
        let (ok, text, _) = etwkit(&["stats", f]);
        assert!(ok);
        for (g, n) in &want {
            assert!(
                text.lines()
                    .any(|l| l.contains(g.as_str()) && l.contains(n.as_str())),
                "{name}: {g} {n} not in the report"
            );
        }
        if name == "ebpf_ebpforwindows.etl" {
            assert_eq!(
                want["394f321c-5cf4-404c-aa34-4df1428a7f9c"],
                "EbpfForWindowsProvider"
            );
            // --raw: no registry, the file's own names still.
            let (ok, out, _) = etwkit(&["stats", f, "--raw", "--format", "json"]);
            assert!(ok);
            let s: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(
                s["provider_names"]["394f321c-5cf4-404c-aa34-4df1428a7f9c"],
                "EbpfForWindowsProvider"
            );
            assert!(s["provider_names"]
                .get("9b79ee91-b5fd-41c0-a243-4248e266e9d0")
                .is_none());
        }
    }
}

#[test]
fn bad_input_gets_one_clear_sentence() {
    let dir = std::env::temp_dir().join(format!("etwkit-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let txt = dir.join("notes.txt");
    std::fs::write(&txt, "hello, not a trace\n".repeat(20)).unwrap();
    let (ok, _, err) = etwkit(&["stats", txt.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.starts_with("etwkit: ") && err.contains("not an ETL file"),
        "{err}"
    );
    let (ok, _, err) = etwkit(&["dump", dir.join("missing.etl").to_str().unwrap()]);
    assert!(
        !ok && err.contains("cannot open") && err.contains("missing.etl"),
        "{err}"
    );
    let (ok, _, err) = etwkit(&["dump", txt.to_str().unwrap(), "--begin", "yesterday"]);
    assert!(!ok, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
