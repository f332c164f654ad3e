//! Defects a demanding user found (session 26): each test runs the binary on a sample or a damaged
//! copy and checks the values or the sentence a script relies on.

mod common;

use common::{etwkit, json_lines, samples};

/// Sawbuck's re-emitted kernel Process events carry TOKEN_USER with a null SID pointer followed by
/// the SID. The decoder read the zero as "no SID" (4 bytes), so ImageFileName and CommandLine read
/// the SID's bytes: `""` and `""` with a `decode_issue`. Now every field is read, with the 64-bit
/// payloads of the `_64_` file through the pointer-size fallback.
#[test]
fn sawbuck_process_events_keep_their_sid_image_and_command_line() {
    let test = "sawbuck_process_events_keep_their_sid_image_and_command_line";
    let Some(dir) = samples(test) else {
        return;
    };
    let user = "S-1-5-21-753675414-103939432-3550797041-1000";
    for (name, version, layout_ptr) in [
        ("syzygy_log_lib_process_data_32_v1.etl", 1, None),
        ("syzygy_log_lib_process_data_32_v3.etl", 3, None),
        ("syzygy_log_lib_process_data_64_v3.etl", 3, Some(8)),
    ] {
        let path = dir.join(name);
        let (ok, out, err) = etwkit(&["dump", path.to_str().unwrap(), "--format", "json"]);
        assert!(ok, "{name}: {err}");
        let lines = json_lines(&out);
        let procs: Vec<_> = lines
            .iter()
            .filter(|l| l["task_name"] == "Process")
            .collect();
        assert_eq!(procs.len(), if version == 1 { 2 } else { 8 }, "{name}");
        for l in &procs {
            assert!(l.get("decode_issue").is_none(), "{name}: {l}");
            assert_eq!(
                l.get("layout_pointer_size").and_then(|v| v.as_u64()),
                layout_ptr,
                "{name}"
            );
            let p = &l["properties"];
            match l["opcode_name"].as_str().unwrap() {
                "Start" | "End" => {
                    assert_eq!(p["ProcessId"], 1776, "{name}");
                    assert_eq!(p["ParentId"], 988, "{name}");
                    assert_eq!(p["UserSID"], user, "{name}");
                    assert_eq!(p["ImageFileName"], "notepad.exe", "{name}");
                    if version == 3 {
                        assert_eq!(
                            p["CommandLine"], "\"C:\\Windows\\system32\\notepad.exe\" ",
                            "{name}"
                        );
                    }
                }
                _ => {
                    // Rundown: Idle, System, smss.exe, all LocalSystem.
                    assert_eq!(p["UserSID"], "S-1-5-18", "{name}");
                    let want = match p["ProcessId"].as_u64().unwrap() {
                        0 => "Idle",
                        4 => "System",
                        264 => "smss.exe",
                        other => panic!("{name}: pid {other}"),
                    };
                    assert_eq!(p["ImageFileName"], want, "{name}");
                }
            }
        }
        let (ok, out, err) = etwkit(&["stats", path.to_str().unwrap(), "--format", "json"]);
        assert!(ok, "{name}: {err}");
        let s: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(s["decode_issues"], 0, "{name}");
        assert_eq!(
            s["pointer_size_fallbacks"],
            if layout_ptr.is_some() { 8 } else { 0 },
            "{name}"
        );
    }
}
