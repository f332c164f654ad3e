//! `etwkit dump` on every core prints what one thread prints; `--pid` sees kernel records whose
//! header carries no process id; `stats` counts layout misfits and pointer-size fallbacks.

mod common;

use common::{etwkit, json_lines, samples};

#[test]
fn dump_output_does_not_depend_on_the_thread_count() {
    let Some(dir) = samples("dump_output_does_not_depend_on_the_thread_count") else {
        return;
    };
    for name in ["perfview_net.4.5.x86.etl", "pktmonvpn_PktMon.etl"] {
        let p = dir.join(name);
        let p = p.to_str().unwrap();
        for format in ["json", "csv"] {
            for order in ["time", "file"] {
                let run = |threads: &str| {
                    let (ok, out, err) = etwkit(&[
                        "dump",
                        p,
                        "--format",
                        format,
                        "--order",
                        order,
                        "--threads",
                        threads,
                    ]);
                    assert!(ok, "{err}");
                    out
                };
                let one = run("1");
                assert!(one.lines().count() > 4000, "{name}");
                assert!(run("2") == one, "{name} {format} {order}: 2 threads differ");
                assert!(run("3") == one, "{name} {format} {order}: 3 threads differ");
            }
        }
    }
}

#[test]
fn pid_filter_sees_kernel_records_attributed_from_payload_and_thread_table() {
    let Some(dir) = samples("pid_filter_sees_kernel_records") else {
        return;
    };
    let p = dir.join("perfview_net.4.5.2.x64.etl");
    let (ok, out, err) = etwkit(&[
        "dump",
        p.to_str().unwrap(),
        "--format",
        "json",
        "--pid",
        "3988",
    ]);
    assert!(ok, "{err}");
    let evs = json_lines(&out);
    assert!(evs.iter().all(|e| e["pid"] == 3988));
    let perfinfo: Vec<_> = evs
        .iter()
        .filter(|e| e["header_type"] == "PERFINFO64")
        .collect();
    // CPU samples of PerfView's threads: the thread from the payload, the process from the table.
    let samples = perfinfo
        .iter()
        .filter(|e| e["opcode_name"] == "SampleProf")
        .count();
    assert!(samples > 100, "{samples}");
    for e in &perfinfo {
        assert!(
            e["pid_source"] == "payload" || e["pid_source"] == "thread_table",
            "{e}"
        );
    }
    // Records whose header has the ids say nothing more.
    assert!(evs
        .iter()
        .filter(|e| e["header_type"] != "PERFINFO64")
        .all(|e| e.get("pid_source").is_none()));
}

#[test]
fn stats_counts_misfits_and_fallbacks() {
    let Some(dir) = samples("stats_counts_misfits_and_fallbacks") else {
        return;
    };
    let stats = |name: &str| -> serde_json::Value {
        let (ok, out, err) = etwkit(&[
            "stats",
            dir.join(name).to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(ok, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let s = stats("syzygy_log_lib_image_data_64_v2.etl");
    assert_eq!(s["pointer_size_fallbacks"], 26);
    assert_eq!(s["decode_issues"], 0);
    let s = stats("tx_WsRm01.etl");
    // Three WinRM events whose payload is shorter than the manifest says.
    assert_eq!(s["decode_issues"], 3);
    let (ok, out, _) = etwkit(&[
        "dump",
        dir.join("tx_WsRm01.etl").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(ok);
    let issues: Vec<_> = json_lines(&out)
        .into_iter()
        .filter(|e| e.get("decode_issue").is_some())
        .collect();
    assert_eq!(issues.len(), 3);
    assert!(issues.iter().all(|e| e["id"] == 192));
}
