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
        // The workload is `etwkit __demo-workload`: comm `etwkit`.
        assert_eq!(e["process_name"], "etwkit", "{e}");
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
    // The heap tracer is a provider too (`trace --provider HeapTraceProvider -- CMD`).
    let heap = provs
        .iter()
        .find(|p| p["name"] == "HeapTraceProvider")
        .expect("the heap provider");
    assert_eq!(heap["guid"], "222962ab-6180-4b88-a825-346b75f2a24a");
    assert_eq!(heap["events"], 3);
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

/// The columns of the live table (`sink::table`), found in its title line: each right-aligned
/// number column by where its title ends, PROCESS and PROVIDER / EVENT by where they start.
struct TableColumns {
    /// (title, end) of CPU, PID, TID, ID, VER, OP.
    numbers: Vec<(&'static str, usize)>,
    process: usize,
    event: usize,
}

impl TableColumns {
    fn of(header: &str) -> TableColumns {
        let end = |t: &str| header.find(&format!(" {t} ")).unwrap() + 1 + t.len();
        let numbers = ["CPU", "PID", "TID", "ID", "VER", "OP"]
            .iter()
            .map(|t| (*t, end(t)))
            .collect();
        let c = TableColumns {
            numbers,
            process: header.find("PROCESS").unwrap(),
            event: header.find("PROVIDER / EVENT").unwrap(),
        };
        // The numbers and the process come before the event name, which only the details follow.
        assert!(
            c.numbers.iter().all(|(_, e)| *e < c.event) && c.process < c.event,
            "{header}"
        );
        c
    }

    /// Checks that every column of `row` is where the title says; returns (pid, process, event).
    fn check<'r>(&self, row: &'r str) -> (&'r str, &'r str, &'r str) {
        assert!(row.is_ascii(), "{row}");
        for (t, end) in &self.numbers {
            let cell = row[..*end].rsplit(' ').next().unwrap();
            assert!(
                !cell.is_empty() && (cell == "-" || cell.parse::<u64>().is_ok()),
                "{t} ends at column {end}: {row}"
            );
            assert_eq!(&row[*end..*end + 1], " ", "{t} ends at column {end}: {row}");
        }
        let pid_end = self.numbers[1].1;
        let pid = row[..pid_end].rsplit(' ').next().unwrap();
        assert_eq!(&row[self.process - 1..self.process], " ", "{row}");
        let process = row[self.process..self.process + 16].trim_end();
        assert!(!process.is_empty(), "{row}");
        assert_eq!(&row[self.event - 2..self.event], "  ", "{row}");
        let event = row[self.event..].split(' ').next().unwrap();
        (pid, process, event)
    }
}

#[test]
fn the_demo_table_names_the_workload_and_keeps_its_columns() {
    if !common::require_root("live_linux_trace") {
        return;
    }
    let out = Command::new(EXE).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let f = facts(&stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let cols = TableColumns::of(lines.next().unwrap());
    let rows: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
    assert!(rows.len() > 20, "{stdout}");
    let mut long = 0;
    for r in &rows {
        let (pid, process, event) = cols.check(r);
        assert_eq!(pid, f["pid"].to_string(), "{r}");
        assert_eq!(process, "etwkit", "{r}");
        assert!(event.starts_with("Microsoft-Windows-Winsock-AFD/"), "{r}");
        long += (r[cols.event..].split("  {").next().unwrap().len() > 40) as usize;
    }
    // Names longer than their column (`.../Connection indicated (IPv4)`) push only the details.
    assert!(long > 0, "no event name longer than its column: {stdout}");
}

/// `etwkit trace -p sched FORMAT -- sh -c 'exec sleep 1.2'`: stdout, stderr.
fn trace_exec_sleep(format: &str, name: &str) -> (String, String) {
    let out = Command::new(EXE)
        .args(["trace", "--name", name, "-p", "sched", "--format", format])
        .args(["--", "sh", "-c", "exec sleep 1.2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

#[test]
fn an_exec_renames_the_traced_process() {
    if !common::require_root("live_linux_trace") {
        return;
    }
    let (stdout, _) = trace_exec_sleep("json", "t-cli-exec");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &Value| e.get("etwkit_summary").is_none())
        .collect();
    let exec = events
        .iter()
        .find(|e| {
            e["event_name"] == "sched_process_exec"
                && e["properties"]["filename"]
                    .as_str()
                    .is_some_and(|f| f.ends_with("/sleep"))
        })
        .unwrap_or_else(|| panic!("the exec of sleep: {stdout}"));
    let child = exec["pid"].clone();
    // Before the exec the child is the shell. A name is asked again once a second, so an event
    // printed within a second of a lookup made before the exec still shows `sh`; the exit, over a
    // second later, shows `sleep`.
    let mine: Vec<&Value> = events.iter().filter(|e| e["pid"] == child).collect();
    for e in &mine {
        let n = e["process_name"].as_str().unwrap_or_else(|| panic!("{e}"));
        assert!(n == "sleep" || n == "sh", "{e}");
    }
    let exit = mine
        .iter()
        .find(|e| e["event_name"] == "sched_process_exit")
        .unwrap_or_else(|| panic!("the child's exit: {stdout}"));
    assert_eq!(exit["process_name"], "sleep", "{exit}");
    assert_eq!(
        exit["properties"]["comm"], "sleep",
        "the kernel's own comm: {exit}"
    );
    // sched_switch from the idle task of a CPU to the child: pid 0, `swapper`.
    for e in events.iter().filter(|e| e["pid"] == 0) {
        assert_eq!(e["process_name"], "swapper", "{e}");
    }

    // The table: the same names in the PROCESS column, every column in line.
    let (stdout, _) = trace_exec_sleep("table", "t-cli-exec-table");
    let mut lines = stdout.lines();
    let cols = TableColumns::of(lines.next().unwrap());
    let mut exits = 0;
    for r in lines {
        let (pid, process, event) = cols.check(r);
        if pid == "0" {
            assert_eq!(process, "swapper", "{r}");
        }
        if event == "sched/sched_process_exit" && r.contains("\"comm\":\"sleep\"") {
            assert_eq!(process, "sleep", "{r}");
            exits += 1;
        }
    }
    assert_eq!(exits, 1, "the child's exit in the table: {stdout}");
}
