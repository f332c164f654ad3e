//! Shared by the CLI tests: where the samples are, running the `etwkit` binary, the `dump` JSON fields.
#![allow(dead_code)]

pub mod pcapng;

use std::path::PathBuf;
use std::process::Command;

/// `../shared/etl-samples`, or `None` after a loud SKIPPED line (which bypasses the test harness's
/// output capture); with `ETWKIT_REQUIRE_SHARED=1` (as `.ci/run` sets) a missing folder fails.
pub fn samples(test: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/etl-samples");
    if p.is_dir() {
        return Some(p);
    }
    if std::env::var("ETWKIT_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{test}: ../shared/etl-samples is missing but ETWKIT_REQUIRE_SHARED=1");
    }
    std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\n*** SKIPPED {test}: ../shared/etl-samples not found ***\n\n").as_bytes(),
    )
    .ok();
    None
}

/// Runs `etwkit ARGS`: (success, stdout, stderr).
pub fn etwkit(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs `etwkit ARGS`: (exit code, stdout, stderr).
pub fn etwkit_code(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Every line of `s` as JSON.
pub fn json_lines(s: &str) -> Vec<serde_json::Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The fields every `dump --format json` line carries (README.md); live `trace` adds
/// `provider_name` and `event_name`.
pub const DUMP_FIELDS: [&str; 18] = [
    "timestamp",
    "provider",
    "id",
    "version",
    "level",
    "opcode",
    "task",
    "keywords",
    "channel",
    "pid",
    "tid",
    "cpu",
    "header_type",
    "pointer_size",
    "activity_id",
    "payload",
    "stack",
    "properties",
];

/// Live tracing needs root (effective uid 0, from /proc/self/status). Without it a test prints a loud
/// SKIPPED line and gets `false`; with `ETWKIT_REQUIRE_ROOT=1` (as `.ci/run` sets) it fails.
pub fn require_root(test: &str) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        if std::env::var("ETWKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
            panic!("{test}: traces the real kernel and needs root, and ETWKIT_REQUIRE_ROOT=1");
        }
        std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("\n*** SKIPPED {test}: live tracing needs root ***\n\n").as_bytes(),
        )
        .ok();
    }
    root
}

/// `go` from PATH or Debian's golang-go (to read pprof files); `None` after a loud SKIPPED line, a
/// failure under ETWKIT_REQUIRE_TOOLS=1 (as `.ci/run` sets, installing golang-go).
pub fn go(test: &str) -> Option<PathBuf> {
    for p in ["go", "/usr/lib/go/bin/go"] {
        if Command::new(p)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(PathBuf::from(p));
        }
    }
    if std::env::var("ETWKIT_REQUIRE_TOOLS").is_ok_and(|v| v == "1") {
        panic!("{test}: Go (Debian golang-go) is needed to read the pprof file and ETWKIT_REQUIRE_TOOLS=1");
    }
    eprintln!(
        "\n*** SKIPPED {test}: no Go toolchain (Debian golang-go) to read the pprof file ***\n"
    );
    None
}

/// `go tool pprof ARGS FILE`'s stdout.
pub fn pprof(go: &std::path::Path, args: &[&str], file: &std::path::Path) -> String {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let o = Command::new(go)
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(file)
        // pprof keeps state in $HOME/pprof; Go wants a writable cache.
        .env("PPROF_TMPDIR", &tmp)
        .env("GOCACHE", tmp.join("gocache"))
        .output()
        .expect("go tool pprof");
    assert!(
        o.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
