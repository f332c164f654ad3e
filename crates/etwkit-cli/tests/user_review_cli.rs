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

/// Runs `etwkit ARGS`, killed after `secs` seconds: (exit code or None when killed, stderr).
fn etwkit_within(args: &[&str], secs: u64) -> (Option<i32>, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if start.elapsed() > std::time::Duration::from_secs(secs) {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, err)
}

/// `--duration inf` (or 1e30) panicked the timer thread ("cannot convert float seconds to
/// Duration") and traced on; `NaN` and `-1` traced "for NaN s" / "for -1 s" and stopped at once,
/// exit 0. Each is now refused before anything is traced, naming the option.
#[test]
fn duration_must_be_finite_non_negative_seconds() {
    for cmd in [
        &["trace", "--provider", "sched"][..],
        &["heap"][..],
        &["net"][..],
    ] {
        for bad in ["inf", "1e30", "NaN", "-1", "-0.5", "soon"] {
            let arg = format!("--duration={bad}");
            let mut args = cmd.to_vec();
            args.push(&arg);
            if cmd[0] != "trace" {
                args.extend(["--", "true"]);
            }
            let (code, err) = etwkit_within(&args, 10);
            assert!(
                code.is_some_and(|c| c != 0),
                "{args:?}: exit {code:?}, stderr {err}"
            );
            assert!(!err.contains("panicked"), "{args:?}: {err}");
            assert!(!err.contains("tracing"), "{args:?} traced: {err}");
            assert!(
                err.contains("--duration") && err.contains("is not a number of seconds"),
                "{args:?}: {err}"
            );
        }
    }
}

/// A keyword mask wider than 64 bits was called "not hex"; `0X10` (capital X) was refused and
/// `0x0x10` accepted (every leading "0x" was stripped).
#[test]
fn provider_keyword_masks_are_read_as_written() {
    let (ok, _, err) = etwkit(&[
        "trace",
        "--provider",
        "sched:5:ffffffffffffffffff",
        "--duration",
        "0",
    ]);
    assert!(!ok);
    assert!(
        err.contains("keywords \"ffffffffffffffffff\" do not fit 64 bits"),
        "{err}"
    );
    for bad in ["0x0x10", "0x", "zz"] {
        let p = format!("sched:5:{bad}");
        let (ok, _, err) = etwkit(&["trace", "--provider", &p, "--duration", "0"]);
        assert!(!ok, "{p}");
        assert!(
            err.contains(&format!("keywords {bad:?} are not a hex mask")),
            "{p}: {err}"
        );
    }
}

/// The relog tests' inputs (perfview_net.4.5.2.x64.etl, tx_Process.etl) and an output in a fresh
/// temporary folder; `None` after the samples helper's SKIPPED line.
struct RelogCase {
    tmp: std::path::PathBuf,
    net: String,
    process: String,
    out: String,
}

impl RelogCase {
    fn new(test: &str) -> Option<RelogCase> {
        let dir = samples(test)?;
        let tmp = std::env::temp_dir().join(format!("etwkit-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let path = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
        Some(RelogCase {
            net: path(dir.join("perfview_net.4.5.2.x64.etl")),
            process: path(dir.join("tx_Process.etl")),
            out: path(tmp.join("out.etl")),
            tmp,
        })
    }
}

/// A relog filter keeps the file's TDH schema records whatever its pid/id/time conditions say (so
/// kept events decode). A `--pid` no event has kept only those 85 records: `kept` said 85 and the
/// "no event matched the filter" warning `dump` gives was missing. `schema_kept` now says how many
/// of `kept` are schema records, and the warning counts events only; on every relog path (one
/// input on several threads or one, several inputs merged).
#[test]
fn relog_filter_keeping_only_schema_records_says_nothing_matched() {
    let test = "relog_filter_keeping_only_schema_records_says_nothing_matched";
    let Some(RelogCase {
        tmp,
        net,
        process,
        out,
    }) = RelogCase::new(test)
    else {
        return;
    };
    let (net, process, out) = (net.as_str(), process.as_str(), out.as_str());
    // The dump's count of the events `--id 1` selects.
    let (ok, dumped, err) = etwkit(&["dump", net, "--id", "1", "--format", "json"]);
    assert!(ok, "{err}");
    let id1 = json_lines(&dumped).len() as u64;
    assert_eq!(id1, 529);
    for extra in [
        &["--threads", "1"][..],
        &["--threads", "2"][..],
        &[process][..],
    ] {
        let relog = |filter: &[&str]| -> (serde_json::Value, String) {
            let mut args = vec!["relog", net];
            args.extend_from_slice(extra);
            args.extend_from_slice(filter);
            args.extend(["-o", out]);
            let (ok, stdout, err) = etwkit(&args);
            assert!(ok, "{args:?}: {err}");
            (serde_json::from_str(&stdout).unwrap(), err)
        };
        // pid 2496 has no event in either file.
        let (s, err) = relog(&["--pid", "2496"]);
        assert_eq!(s["inputs"][0]["kept"], 85, "{extra:?}");
        assert_eq!(s["inputs"][0]["schema_kept"], 85, "{extra:?}");
        assert_eq!(
            err.trim(),
            "etwkit: warning: no event matched the filter",
            "{extra:?}"
        );
        let (s, err) = relog(&["--id", "1"]);
        let i = &s["inputs"][0];
        assert_eq!(i["schema_kept"], 85, "{extra:?}");
        assert_eq!(
            i["kept"].as_u64().unwrap() - i["schema_kept"].as_u64().unwrap(),
            id1,
            "{extra:?}"
        );
        assert!(!err.contains("no event matched"), "{extra:?}: {err}");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// `trace --provider heap` with neither `--pid` nor a command armed nothing and ended with
/// "0 events delivered", exit 0: the heap provider traces processes. It is refused, by any of its
/// names or its GUID, before a session is made.
#[test]
fn heap_provider_without_a_process_is_refused() {
    for p in [
        "heap",
        "HeapTraceProvider",
        "microsoft-windows-heap:5:4",
        "222962ab-6180-4b88-a825-346b75f2a24a",
    ] {
        let (code, err) = etwkit_within(&["trace", "--provider", p, "--duration", "0.2"], 10);
        assert_eq!(code, Some(1), "{p}: {err}");
        assert_eq!(
            err.trim(),
            format!(
                "etwkit: --provider {p:?}: the heap provider traces processes, not the whole system: give --pid P or -- CMD"
            ),
            "{p}"
        );
    }
}

/// `relog --pid P` matched kernel records by their header's pid (the context they were logged
/// in), `dump --pid P` by the process their payload or the thread table names: relogging
/// perfview_net.4.5.2.x64.etl's pid 3988 dropped all 356 of its CPU samples (PERFINFO records
/// carry no pid) and kept records of other processes. Now the relog keeps what `dump --pid` shows,
/// on every relog path, and the copy's own `dump --pid` gives the same events.
#[test]
fn relog_pid_keeps_what_dump_pid_shows() {
    let test = "relog_pid_keeps_what_dump_pid_shows";
    let Some(RelogCase {
        tmp,
        net,
        process,
        out,
    }) = RelogCase::new(test)
    else {
        return;
    };
    let (net, process, out) = (net.as_str(), process.as_str(), out.as_str());
    // (timestamp, provider, opcode, pid, tid) of every event `dump --pid 3988` of `file` shows,
    // the logfile header left out (a relog writes its own).
    let events = |file: &str| -> Vec<(String, String, u64, u64, Option<u64>)> {
        let (ok, stdout, err) = etwkit(&["dump", file, "--pid", "3988", "--format", "json"]);
        assert!(ok, "{err}");
        let mut v: Vec<_> = json_lines(&stdout)
            .into_iter()
            .filter(|l| l["opcode_name"] != "Header")
            .map(|l| {
                (
                    l["timestamp"].as_str().unwrap().to_string(),
                    l["provider"].as_str().unwrap().to_string(),
                    l["opcode"].as_u64().unwrap(),
                    l["pid"].as_u64().unwrap(),
                    l["tid"].as_u64(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let want = events(net);
    assert_eq!(want.len(), 35_349);
    let samples_of = |v: &[(String, String, u64, u64, Option<u64>)]| {
        v.iter()
            .filter(|e| e.1 == "ce1dbfb4-137e-4da6-87b0-3f59aa102cbc" && e.2 == 46)
            .count()
    };
    assert_eq!(samples_of(&want), 356, "SampledProfile records of pid 3988");
    for extra in [
        &["--threads", "1"][..],
        &["--threads", "2"][..],
        &[process][..],
    ] {
        let mut args = vec!["relog", net];
        args.extend_from_slice(extra);
        args.extend(["--pid", "3988", "-o", out]);
        let (ok, stdout, err) = etwkit(&args);
        assert!(ok, "{args:?}: {err}");
        let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["inputs"][0]["kept"], 35_405, "{extra:?}");
        let got = events(out);
        assert_eq!(samples_of(&got), 356, "{extra:?}");
        assert!(
            got == want,
            "{extra:?}: {} events, not {}",
            got.len(),
            want.len()
        );
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// A non-blocking connect (curl, asyncio, Go, browsers) that the transport answers inside
/// connect() itself — on loopback the refusing reset, or the handshake, waits in the socket's
/// backlog until connect releases the socket, after it chose EINPROGRESS — had no "connect
/// completed" event: `net` showed a refused connect as plainly "closed" with no failure, and a
/// successful one with `connected: null`. Both now complete at connect's return.
#[cfg(target_os = "linux")]
#[test]
fn net_live_non_blocking_connects_complete() {
    let test = "net_live_non_blocking_connects_complete";
    if !common::require_root(test) {
        return;
    }
    let script = r#"
import json, select, socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); port = l.getsockname()[1]
gone = socket.socket(); gone.bind(("127.0.0.1", 0)); closed_port = gone.getsockname()[1]; gone.close()
def connect(p):
    s = socket.socket(); s.setblocking(False)
    rc = s.connect_ex(("127.0.0.1", p))
    select.select([], [s], [], 2)
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    return s, rc, err, s.getsockname()[1]
ok, ok_rc, ok_err, ok_local = connect(port)
c, _ = l.accept(); c.close(); ok.close()
bad, bad_rc, bad_err, _ = connect(closed_port)
bad.close(); l.close()
print("facts:", json.dumps(dict(port=port, closed_port=closed_port, ok_rc=ok_rc, ok_err=ok_err,
      ok_local=ok_local, bad_rc=bad_rc, bad_err=bad_err)), flush=True)
"#;
    let (code, out, err) = {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .args(["net", "--format", "json", "--", "python3", "-c", script])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{err}");
    let facts: serde_json::Value = serde_json::from_str(
        err.lines()
            .find_map(|l| l.strip_prefix("facts: "))
            .unwrap_or_else(|| panic!("no facts: {err}")),
    )
    .unwrap();
    // The program saw what the test is about: EINPROGRESS, then success / ECONNREFUSED.
    assert_eq!(facts["ok_rc"], 115, "{facts}");
    assert_eq!(facts["ok_err"], 0, "{facts}");
    assert_eq!(facts["bad_rc"], 115, "{facts}");
    assert_eq!(facts["bad_err"], 111, "{facts}");
    let rows = json_lines(&out);
    let remote = |p: &serde_json::Value| format!("127.0.0.1:{p}");
    let ok = rows
        .iter()
        .find(|r| r["remote"] == remote(&facts["port"]) && !r["accepted"].as_bool().unwrap())
        .unwrap_or_else(|| panic!("no client row: {out}"));
    assert!(ok["connected"].is_string(), "{ok}");
    assert_eq!(ok["local"], remote(&facts["ok_local"]), "{ok}");
    assert_eq!(ok["failures"].as_array().unwrap().len(), 0, "{ok}");
    let bad = rows
        .iter()
        .find(|r| r["remote"] == remote(&facts["closed_port"]))
        .unwrap_or_else(|| panic!("no refused row: {out}"));
    assert!(bad["connected"].is_null(), "{bad}");
    assert_eq!(bad["failures"][0]["kind"], "connect_failed", "{bad}");
    assert_eq!(bad["failures"][0]["code"]["code"], 111, "{bad}");
    assert_eq!(
        bad["outcome"], "connect failed: connection refused",
        "{bad}"
    );
}

#[path = "../../etwkit/tests/net_scenario/mod.rs"]
mod net_scenario;

/// `net` of a trace cut at a buffer boundary (a copy interrupted, a disk that filled up) said
/// nothing: no buffer is unreadable, yet the events of the missing buffers are gone, so sockets
/// show as open and counts are short. It now names the damage on stderr as `stats` does, and a
/// note says what it means for the report; the whole file gives neither.
#[test]
fn net_names_missing_buffers_of_a_cut_trace() {
    let test = "net_names_missing_buffers_of_a_cut_trace";
    let Some(samples) = samples(test) else {
        return;
    };
    let bytes = net_scenario::windows::scenario_etl(&samples.join("../schemas/winsock-afd.json"));
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let whole = dir.join(format!("{test}.etl"));
    std::fs::write(&whole, &bytes).unwrap();
    let whole = whole.to_str().unwrap();
    let (ok, out, err) = etwkit(&["info", whole, "--format", "json"]);
    assert!(ok, "{err}");
    let info: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (size, n) = (
        info["buffer_size"].as_u64().unwrap() as usize,
        info["buffers_in_file"].as_u64().unwrap() as usize,
    );
    assert_eq!(bytes.len(), size * n, "whole buffers");
    assert!(n >= 3, "{n} buffers");
    let (ok, out, err) = etwkit(&["net", whole, "--format", "json"]);
    assert!(ok, "{err}");
    let all = json_lines(&out).len();
    assert!(
        !err.contains("warning") && !err.contains("buffers the logger wrote"),
        "{err}"
    );
    // All but the last buffer.
    let cut = dir.join(format!("{test}.cut.etl"));
    std::fs::write(&cut, &bytes[..size * (n - 1)]).unwrap();
    let cut = cut.to_str().unwrap();
    let (ok, out, err) = etwkit(&["net", cut, "--format", "json"]);
    assert!(ok, "{err}");
    let rows = json_lines(&out).len();
    assert!(rows > 0 && rows <= all, "{rows} of {all}");
    let warning = format!(
        "etwkit: warning: file offset {}: file holds {} of the {n} buffers the logger wrote",
        size * (n - 1),
        n - 1
    );
    assert!(err.lines().any(|l| l == warning), "{err}");
    let note = format!(
        "etwkit net: note: {cut}: the file holds {} of the {n} buffers the logger wrote: the events of the other 1 are not in it, so sockets shown open may have closed and counts are lower bounds",
        n - 1
    );
    assert!(err.lines().any(|l| l == note), "{err}");
    // The same line as stats gives.
    let (ok, _, stats_err) = etwkit(&["stats", cut]);
    assert!(ok);
    assert!(stats_err.lines().any(|l| l == warning), "{stats_err}");
}

/// A relog carries its inputs' losses over "so the copy does not look more complete than it is",
/// but not what the copy itself could not take: relogging a cut tx_Process.etl (13 of its 182
/// buffers, the last cut short) wrote a copy with BuffersLost 0 that reads as whole and clean.
/// The buffers the input lacks (169) and the ones it could not read (1) are now BuffersLost; a
/// buffer with a corrupt header counts once (the reader counted it as missing too, until it
/// counted such a buffer as held and unreadable).
#[test]
fn relog_of_a_cut_file_counts_its_missing_buffers_as_lost() {
    let test = "relog_of_a_cut_file_counts_its_missing_buffers_as_lost";
    let Some(dir) = samples(test) else {
        return;
    };
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let whole = dir.join("tx_Process.etl");
    let bytes = std::fs::read(&whole).unwrap();
    let cut = tmp.join(format!("{test}.etl"));
    std::fs::write(&cut, &bytes[..100_000]).unwrap();
    // A whole copy whose 6th buffer header is zeroed: that one buffer is lost, counted once.
    let mut zeroed = bytes.clone();
    zeroed[5 * 8192..5 * 8192 + 72].fill(0);
    let zero = tmp.join(format!("{test}.zero.etl"));
    std::fs::write(&zero, &zeroed).unwrap();
    let out = tmp.join(format!("{test}.out.etl"));
    let (whole, cut, zero, out) = (
        whole.to_str().unwrap(),
        cut.to_str().unwrap(),
        zero.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    for (inputs, lost) in [
        (&[whole][..], 0),
        (&[cut][..], 170),
        (&[cut, whole][..], 170),
        (&[zero][..], 1),
        (&[zero, cut][..], 171),
    ] {
        let mut args = vec!["relog"];
        args.extend_from_slice(inputs);
        args.extend(["-o", out]);
        let (ok, stdout, err) = etwkit(&args);
        assert!(ok, "{err}");
        let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["written"]["buffers_lost"], lost, "{inputs:?}");
        let (ok, stdout, err) = etwkit(&["info", out, "--format", "json"]);
        assert!(ok, "{err}");
        let info: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(info["buffers_lost"], lost, "{inputs:?}");
    }
}

/// A trace read through a pipe (`zcat trace.etl.gz | etwkit stats /dev/stdin`, `<(...)`) or a file
/// whose size the filesystem does not give (/proc) was called "empty file (0 bytes), not an ETL
/// trace". Such inputs are read into memory: the same records as the file; a pipe carrying a cut
/// copy names its damage as the file would; a truly empty input still says it is empty.
#[cfg(unix)]
#[test]
fn traces_read_through_a_pipe() {
    let test = "traces_read_through_a_pipe";
    let Some(dir) = samples(test) else {
        return;
    };
    let path = dir.join("perfview_net.4.5.2.x64.etl");
    let bytes = std::fs::read(&path).unwrap();
    let piped = |args: &[&str], input: &[u8]| -> (Option<i32>, String, String) {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let o = child.wait_with_output().unwrap();
        writer.join().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, out, err) = etwkit(&["stats", path.to_str().unwrap(), "--format", "json"]);
    assert!(ok, "{err}");
    let want: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (code, out, err) = piped(&["stats", "/dev/stdin", "--format", "json"], &bytes);
    assert_eq!(code, Some(0), "{err}");
    let got: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["records"], 179_474);
    for k in [
        "records",
        "providers",
        "buffers",
        "compressed_buffers",
        "decoded",
        "last_event",
    ] {
        assert_eq!(got[k], want[k], "{k}");
    }
    assert_eq!(got["size"], bytes.len());
    // A cut copy through the pipe: read as far as it goes, its damage named.
    let (code, out, err) = piped(
        &["stats", "/dev/stdin", "--format", "json"],
        &bytes[..1_000_000],
    );
    assert_eq!(code, Some(0), "{err}");
    let got: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(got["records"].as_u64().unwrap() > 0);
    assert!(err.contains("buffers the logger wrote"), "{err}");
    // Nothing through the pipe is empty; procfs text is no ETL file (not "empty").
    let (code, _, err) = piped(&["info", "/dev/stdin"], b"");
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "etwkit: /dev/stdin: empty file (0 bytes), not an ETL trace"
    );
    let (ok, _, err) = etwkit(&["info", "/proc/self/status"]);
    assert!(!ok);
    assert!(
        err.starts_with("etwkit: /proc/self/status: not an ETL file: no WMI_BUFFER_HEADER"),
        "{err}"
    );
}

/// SIGTERM (`timeout`, `kill`, a service manager) killed `etwkit trace` on the spot: its tracefs
/// instance stayed, still tracing, as an orphan until the next etwkit run, and its `-o` file was
/// never closed (no EndTime). It now ends the trace as Ctrl-C does: the session is removed, the
/// file closed cleanly, the summary printed, exit 0; a traced command gets the signal too and
/// etwkit ends with its status (143) instead of waiting for it.
#[cfg(target_os = "linux")]
#[test]
fn sigterm_ends_a_live_trace_cleanly() {
    use std::io::{BufRead, BufReader};
    let test = "sigterm_ends_a_live_trace_cleanly";
    if !common::require_root(test) {
        return;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for (n, command) in [(0, &[][..]), (1, &["--", "sleep", "30"][..])] {
        let out = dir.join(format!("{test}-{n}.etl"));
        let name = format!("sigterm{n}");
        let mut args = vec![
            "trace",
            "--provider",
            "sched",
            "--name",
            &name,
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(command);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.starts_with("etwkit: tracing sched"), "{line}");
        std::thread::sleep(std::time::Duration::from_millis(300));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > std::time::Duration::from_secs(10) {
                child.kill().ok();
                panic!("{args:?}: still running 10 s after SIGTERM");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        assert_eq!(
            status.code(),
            Some(if command.is_empty() { 0 } else { 143 }),
            "{args:?}: {rest}"
        );
        assert!(rest.contains("events delivered"), "{rest}");
        let (ok, info, e) = etwkit(&["info", out.to_str().unwrap(), "--format", "json"]);
        assert!(ok, "{e}");
        let info: serde_json::Value = serde_json::from_str(&info).unwrap();
        assert_eq!(info["closed_cleanly"], true, "{args:?}");
        let (ok, sessions, e) = etwkit(&["sessions", "--format", "json"]);
        assert!(ok, "{e}");
        assert!(
            json_lines(&sessions).iter().all(|s| s["owner_pid"] != pid),
            "{args:?} left its session: {sessions}"
        );
    }
}

/// After a corrupt buffer header the reader scanned byte by byte for the next header that chains,
/// and record bytes can look like one: in a heap trace they did, and the "buffer" found there
/// claimed the real buffers after it, so `heap --report` of a copy with one zeroed header found
/// no heap events at all. Buffers written whole sit at multiples of the logger's buffer size;
/// the resync looks there first. Here: tx_Process.etl with buffer 5's header zeroed and a
/// header-like chain planted in its data that spans buffers 6 and 7.
#[test]
fn resync_after_a_corrupt_header_finds_the_next_real_buffer() {
    let test = "resync_after_a_corrupt_header_finds_the_next_real_buffer";
    let Some(dir) = samples(test) else {
        return;
    };
    let bytes = std::fs::read(dir.join("tx_Process.etl")).unwrap();
    let size = 8192;
    let k = 5;
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let records = |img: &[u8], name: &str| -> (serde_json::Value, String) {
        let p = tmp.join(format!("{test}.{name}.etl"));
        std::fs::write(&p, img).unwrap();
        let (ok, out, err) = etwkit(&["stats", p.to_str().unwrap(), "--format", "json"]);
        assert!(ok, "{err}");
        (serde_json::from_str(&out).unwrap(), err)
    };
    // Buffer k's header zeroed: that buffer is lost, nothing else.
    let mut zeroed = bytes.clone();
    zeroed[k * size..k * size + 72].fill(0);
    let (plain, _) = records(&zeroed, "zeroed");
    assert_eq!(plain["buffers"], 181);
    // A copy of a real header planted 512 bytes into buffer k, claiming to end exactly where
    // buffer k+3 starts: it chains, byte-wise, before the real buffer k+1.
    let mut planted = zeroed.clone();
    let fake_at = k * size + 512;
    let mut fake = bytes[(k + 1) * size..(k + 1) * size + 72].to_vec();
    fake[..4].copy_from_slice(&((3 * size - 512) as u32).to_le_bytes());
    planted[fake_at..fake_at + 72].copy_from_slice(&fake);
    let (got, err) = records(&planted, "planted");
    assert!(
        err.contains(&format!(
            "corrupt buffer header (BufferSize 0, flags 0x0); resumed at the next buffer found, offset {}",
            (k + 1) * size
        )),
        "{err}"
    );
    for key in [
        "records",
        "buffers",
        "bad_buffers",
        "providers",
        "last_event",
    ] {
        assert_eq!(got[key], plain[key], "{key}");
    }
}

/// A buffer with a corrupt header was counted twice: as a bad buffer and as missing ("file holds
/// 181 of the 182 buffers the logger wrote"), so `heap --report` gave `unreadable_buffers` 1 and
/// `buffers_missing` 1 for one damaged buffer, and `net` two notes. It is held (unreadable) now.
#[test]
fn a_corrupt_buffer_header_is_one_loss_not_two() {
    let test = "a_corrupt_buffer_header_is_one_loss_not_two";
    let Some(dir) = samples(test) else {
        return;
    };
    let mut bytes = std::fs::read(dir.join("tx_Process.etl")).unwrap();
    bytes[5 * 8192..5 * 8192 + 72].fill(0);
    let p = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{test}.etl"));
    std::fs::write(&p, &bytes).unwrap();
    let p = p.to_str().unwrap();
    let (ok, out, err) = etwkit(&["stats", p, "--format", "json"]);
    assert!(ok, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["bad_buffers"], 1);
    assert_eq!(s["buffers"], 181);
    assert_eq!(
        s["closed_cleanly"], false,
        "a corrupt buffer: the file is not whole"
    );
    assert!(!err.contains("buffers the logger wrote"), "{err}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "etwkit: warning: file offset 40960: corrupt buffer header (BufferSize 0, flags 0x0); resumed at the next buffer found, offset 49152",
            "etwkit: warning: 1 bad buffers and 0 bad records skipped; everything else was read",
        ]
    );
    let (ok, out, err) = etwkit(&["heap", "--report", p, "--format", "json"]);
    assert!(ok, "{err}");
    let h: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(h["unreadable_buffers"], 1);
    assert_eq!(h["buffers_missing"], 0);
}

/// `relog --buffer-kib` took any u32 and let the writer refuse it in bytes ("buffer size 0 must
/// be a multiple of 512 between 1024 and 67108864"), or said "buffer size too large": the option
/// is in KiB, so its range is now checked and named in KiB; 1 and 65536 (64 MiB) work.
#[test]
fn relog_buffer_kib_range_is_named_in_kib() {
    let test = "relog_buffer_kib_range_is_named_in_kib";
    let Some(dir) = samples(test) else {
        return;
    };
    let input = dir.join("tx_Process.etl");
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{test}.etl"));
    let (input, out_s) = (input.to_str().unwrap(), out.to_str().unwrap());
    for bad in ["0", "65537", "4194304"] {
        std::fs::remove_file(&out).ok();
        let (ok, _, err) = etwkit(&["relog", input, "--buffer-kib", bad, "-o", out_s]);
        assert!(!ok, "{bad}");
        assert!(
            err.contains("--buffer-kib") && err.contains("1..=65536") && !err.contains("67108864"),
            "{bad}: {err}"
        );
        assert!(!out.exists(), "{bad}: output written");
    }
    for good in ["1", "65536"] {
        let (ok, stdout, err) = etwkit(&["relog", input, "--buffer-kib", good, "-o", out_s]);
        assert!(ok, "{good}: {err}");
        let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(s["written"]["records"], 10_343, "{good}");
    }
}

/// An input given twice (`relog a.etl a.etl`, or `a.etl ./a.etl`) was read twice: every record
/// written, exported or counted twice, without a word. `relog`, `export` and `net` now refuse it in
/// one sentence naming both spellings, before opening anything (the file here is no ETL at all).
#[test]
fn an_input_given_twice_is_refused() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("twice");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("a.etl");
    std::fs::write(&f, b"not read").unwrap();
    let same = dir.join(".").join("a.etl");
    let out = dir.join("out.etl");
    let (a, b) = (f.to_str().unwrap(), same.to_str().unwrap());
    let ds = dir.join("ds");
    let (out_s, ds_s) = (out.to_str().unwrap(), ds.to_str().unwrap());
    let runs: [Vec<&str>; 4] = [
        vec!["relog", a, a, "-o", out_s],
        vec!["relog", a, b, "-o", out_s],
        vec!["export", a, b, "-o", ds_s],
        vec!["net", a, a],
    ];
    for args in runs {
        let (code, stdout, stderr) = common::etwkit_code(&args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        let line = stderr.trim_end();
        assert!(!line.contains('\n'), "{args:?}: {stderr}");
        assert!(
            line.starts_with(&format!("etwkit: {a} is given twice")),
            "{args:?}: {stderr}"
        );
        if args[2] == b {
            assert!(line.contains(&format!("(as {b})")), "{args:?}: {stderr}");
        }
    }
    assert!(!out.exists() && !ds.exists());
}
