//! `etwkit net` end to end: on an ETL file of Windows AFD events written from the scenario (the
//! network workload's sockets, 64- and 32-bit producers), on a sample without AFD events, and live
//! (root) on the demo workload behind a shell that also writes to stdout.

mod common;
#[path = "../../etwkit/tests/net_scenario/mod.rs"]
mod net_scenario;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_etwkit");

fn scenario_file(test: &str) -> Option<PathBuf> {
    let samples = common::samples(test)?;
    let bytes = net_scenario::windows::scenario_etl(&samples.join("../schemas/winsock-afd.json"));
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{test}.etl"));
    std::fs::write(&p, bytes).unwrap();
    Some(p)
}

#[test]
fn net_on_a_windows_file_json_csv_failures_by_process() {
    let Some(file) = scenario_file("net_cli_file") else {
        return;
    };
    let f = file.to_str().unwrap();
    let procs = net_scenario::windows::processes();
    let (ok, out, err) = common::etwkit(&["net", f, "--format", "json"]);
    assert!(ok, "{err}");
    let rows = common::json_lines(&out);
    for (p, params, _) in &procs {
        let want = net_scenario::sockets(params);
        let mine: Vec<&Value> = rows.iter().filter(|r| r["pid"] == p.pid).collect();
        assert_eq!(mine.len(), want.len());
        for (w, r) in want.iter().zip(&mine) {
            assert_eq!(r["process"], p.image);
            assert_eq!(r["tx_bytes"], w.tx, "{} {r}", w.name);
            assert_eq!(r["rx_bytes"], w.rx, "{} {r}", w.name);
            if let net_scenario::Want::Exact(a) = &w.remote {
                assert_eq!(r["remote"], a.to_string(), "{} {r}", w.name);
            }
        }
        let refused = &mine[7];
        assert_eq!(refused["failures"][0]["kind"], "connect_failed");
        let (code, symbol, reason) = match p.codes {
            net_scenario::Codes::NtStatus => (
                0xC000_0236u64,
                "STATUS_CONNECTION_REFUSED",
                "connect failed: connection refused (0xc0000236 STATUS_CONNECTION_REFUSED)",
            ),
            _ => (
                10061,
                "WSAECONNREFUSED",
                "connect failed: connection refused (10061 WSAECONNREFUSED)",
            ),
        };
        assert_eq!(refused["failures"][0]["code"]["code"], code);
        assert_eq!(refused["failures"][0]["code"]["symbol"], symbol);
        assert_eq!(refused["failures"][0]["reason"], reason);
    }
    assert_eq!(rows.len(), 15 * procs.len());

    // --failures --format csv: a header and exactly the sockets that failed, reasons in words.
    let (ok, out, err) = common::etwkit(&["net", f, "--failures", "--format", "csv"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("pid,process,protocol,family,local,remote,tx_bytes"));
    let failing = net_scenario::sockets(&procs[0].1)
        .iter()
        .filter(|w| !w.failures.is_empty())
        .count();
    assert_eq!(lines.len() - 1, procs.len() * failing, "{out}");
    assert!(
        out.contains("connection reset by peer (10054 WSAECONNRESET)"),
        "{out}"
    );
    assert!(
        out.contains("address already in use (10048 WSAEADDRINUSE)"),
        "{out}"
    );
    assert!(
        out.contains("address already in use (0xc000020a STATUS_ADDRESS_ALREADY_EXISTS)"),
        "{out}"
    );
    assert!(
        out.contains("insufficient local buffer space (reason 2) x61"),
        "{out}"
    );

    // --by-process: totals per process, remotes inside.
    let (ok, out, err) = common::etwkit(&["net", f, "--by-process", "--format", "json"]);
    assert!(ok, "{err}");
    let by = common::json_lines(&out);
    assert_eq!(by.len(), procs.len());
    for (p, params, _) in &procs {
        let t = by.iter().find(|t| t["pid"] == p.pid).unwrap();
        let want = net_scenario::sockets(params);
        assert_eq!(t["tx_bytes"], want.iter().map(|w| w.tx).sum::<u64>());
        assert_eq!(t["rx_bytes"], want.iter().map(|w| w.rx).sum::<u64>());
        assert_eq!(t["sockets"], want.len());
    }

    // The table: a header and one line per socket.
    let (ok, out, err) = common::etwkit(&["net", f]);
    assert!(ok, "{err}");
    let head: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        ["PID", "PROCESS", "PROTO", "LOCAL", "REMOTE", "TX", "RX", "MS", "OUTCOME"]
    );
    assert_eq!(out.lines().count(), 1 + 15 * procs.len());
    assert!(err.contains("45 sockets (15 with failures)"), "{err}");
}

#[test]
fn net_reports_the_readable_files_and_names_the_unreadable_one() {
    let Some(file) = scenario_file("net_cli_bad_file") else {
        return;
    };
    let missing = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-such-trace.etl");
    let out = Command::new(EXE)
        .args(["net", missing.to_str().unwrap(), file.to_str().unwrap()])
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let rows = common::json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows.len(), 15 * net_scenario::windows::processes().len());
    assert!(stderr.contains("no-such-trace.etl"), "{stderr}");
}

#[test]
fn net_on_a_file_without_afd_events_says_so() {
    let Some(samples) = common::samples("net_cli_no_afd") else {
        return;
    };
    let f = samples.join("tx_WsRm01.etl");
    let (ok, out, err) = common::etwkit(&["net", f.to_str().unwrap(), "--format", "json"]);
    assert!(ok, "exit 0: {err}");
    assert_eq!(out, "", "nothing on stdout");
    assert_eq!(err.lines().count(), 1, "one sentence: {err}");
    assert!(
        err.contains("holds no Microsoft-Windows-Winsock-AFD events"),
        "{err}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn net_live_json_keeps_the_command_output_off_stdout() {
    if !common::require_root("net_cli_live") {
        return;
    }
    let script = format!("echo child-says-hello; exec {EXE} __demo-workload");
    let out = Command::new(EXE)
        .args(["net", "--format", "json", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("child-says-hello"), "{stdout}");
    assert!(stderr.contains("child-says-hello"), "{stderr}");
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("etwkit demo workload: "))
        .expect("workload facts on stderr");
    let facts: Value = serde_json::from_str(line).unwrap();
    let rows = common::json_lines(&stdout);
    assert!(rows.iter().all(|r| r["pid"] == facts["pid"]), "{stdout}");
    // 15 sockets, and one more for each port the workload gave up (it drew one an earlier step
    // had: IPv4 and IPv6 ports are chosen apart).
    assert_eq!(
        rows.len() as u64,
        15 + facts["port_retries"].as_u64().unwrap(),
        "one row per socket of the workload: {stdout}"
    );
    let refused = rows
        .iter()
        .find(|r| r["failures"][0]["kind"] == "connect_failed")
        .unwrap();
    assert_eq!(refused["failures"][0]["code"]["code"], 111);
    assert_eq!(
        refused["remote"],
        format!("127.0.0.1:{}", facts["refused_port"])
    );
    let udp_tx = rows
        .iter()
        .find(|r| r["protocol"] == "UDP" && r["tx_bytes"] != 0)
        .unwrap();
    assert_eq!(
        udp_tx["tx_bytes"],
        facts["udp_sent"].as_u64().unwrap() * 1000
    );
    // The process name comes from the live process (`sh` exec'ed the workload: /proc says etwkit).
    assert!(rows.iter().all(|r| r["process"].is_string()), "{stdout}");
}

#[cfg(target_os = "linux")]
#[test]
fn net_live_pid_and_duration() {
    if !common::require_root("net_cli_live_pid") {
        return;
    }
    // A process that starts its network work after etwkit is attached, then exits.
    let script = format!("sleep 1.5; exec {EXE} __demo-workload");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let out = Command::new(EXE)
        .args(["net", "--pid", &pid, "--duration", "5", "--format", "csv"])
        .output()
        .unwrap();
    let st = child.wait().unwrap();
    assert!(st.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("etwkit demo workload: "))
        .expect("workload facts on stderr");
    let facts: Value = serde_json::from_str(line).unwrap();
    assert_eq!(facts["pid"].to_string(), pid, "exec kept the pid");
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        rows.len() as u64,
        15 + facts["port_retries"].as_u64().unwrap(),
        "{stdout}"
    );
    assert!(
        rows.iter()
            .all(|r| r.starts_with(&format!("{pid},etwkit,"))),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("127.0.0.1:{},0,0,0,0", facts["refused_port"])),
        "{stdout}"
    );
}
