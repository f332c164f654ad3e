//! `etwkit heap` end to end as root against the real kernel: a C program (built here) makes
//! THREADS x N allocations of known sizes from leaky_allocation_site() and frees all but K per
//! thread. Spawned through the command, in shim mode and in uprobe mode, the report must show exactly
//! THREADS x K outstanding blocks with exactly their bytes, attributed to that function; the ETL file
//! written with -o must give the same outstanding figures through `--report`.
#![cfg(target_os = "linux")]

mod common;

use std::path::PathBuf;
use std::process::Command;

const THREADS: u64 = 4;
const K: u64 = 3;

fn setup(test: &str) -> Option<(PathBuf, PathBuf)> {
    if !common::require_root(test) {
        return None;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../etwkit/tests/heap_progs/pattern.c");
    let bin = tmp.join(format!("cli_pattern_{test}"));
    let st = Command::new("cc")
        .args(["-g", "-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success());
    let target = tmp.join("shim-target");
    let st = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "etwkit-heapshim",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .status()
        .expect("cargo");
    assert!(st.success(), "building etwkit-heapshim");
    Some((bin, target.join("release/libetwkit_heapshim.so")))
}

fn heap(shim: &PathBuf, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .arg("heap")
        .args(args)
        .env("ETWKIT_HEAPSHIM", shim)
        .output()
        .expect("run etwkit heap");
    assert!(
        out.status.success(),
        "etwkit heap {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn expected_bytes() -> u64 {
    (0..THREADS)
        .flat_map(|t| (0..K).map(move |i| 1000 + t * 100 + i))
        .sum()
}

/// The groups attributed to leaky_allocation_site: (count, bytes).
fn leak_of_site(r: &serde_json::Value) -> (u64, u64) {
    let groups = r["outstanding_by_stack"]
        .as_array()
        .expect("outstanding_by_stack");
    groups
        .iter()
        .filter(|g| g["frames"][0]["function"] == "leaky_allocation_site")
        .fold((0, 0), |(c, b), g| {
            (
                c + g["count"].as_u64().unwrap(),
                b + g["bytes"].as_u64().unwrap(),
            )
        })
}

fn check_live_and_etl(mode: &str) {
    let test = format!("heap_cli_{mode}");
    let Some((bin, shim)) = setup(&test) else {
        return;
    };
    let etl = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{test}.etl"));
    let live = heap(
        &shim,
        &[
            "--mode",
            mode,
            "--format",
            "json",
            "-o",
            etl.to_str().unwrap(),
            "--",
            bin.to_str().unwrap(),
        ],
    );
    assert_eq!(live["exact"], true, "{}", live["notes"]);
    assert_eq!(
        leak_of_site(&live),
        (THREADS * K, expected_bytes()),
        "live report, {mode} mode"
    );
    // The frame under the allocator carries file:line from the DWARF of the test program.
    let g = live["outstanding_by_stack"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["frames"][0]["function"] == "leaky_allocation_site")
        .unwrap();
    assert!(g["frames"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("pattern.c"));
    assert!(g["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["function"] == "worker"));

    // The same trace from the ETL file: identical outstanding figures (addresses unsymbolized).
    let saved = heap(
        &shim,
        &["--report", etl.to_str().unwrap(), "--format", "json"],
    );
    assert_eq!(saved["outstanding_total"], live["outstanding_total"]);
    assert_eq!(
        saved["outstanding_bytes_total"],
        live["outstanding_bytes_total"]
    );
    let pid_live = &live["processes"][0];
    let pid_saved = &saved["processes"][0];
    assert_eq!(pid_live["allocs"], pid_saved["allocs"]);
    assert_eq!(pid_live["frees"], pid_saved["frees"]);
    // The 12 leaked blocks share one allocation stack in the file too.
    let groups = saved["outstanding_by_stack"].as_array().unwrap();
    assert!(
        groups
            .iter()
            .any(|g| g["count"] == THREADS * K && g["bytes"] == expected_bytes()),
        "no group of {} blocks / {} bytes in {groups:?}",
        THREADS * K,
        expected_bytes()
    );
}

#[test]
fn heap_command_shim_mode() {
    check_live_and_etl("shim");
}

#[test]
fn heap_command_uprobe_mode() {
    check_live_and_etl("uprobe");
}

/// C++ `new[]`/`delete[]`: libstdc++'s operators call malloc/free, so both modes see them; the
/// allocator frames (operator new, malloc) are trimmed and the leak is attributed to the C++ caller.
#[test]
fn heap_command_cxx_operator_new() {
    let Some((_, shim)) = setup("heap_cli_cxx") else {
        return;
    };
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../etwkit/tests/heap_progs/cxx.cpp");
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli_cxx");
    let st = Command::new("g++")
        .args(["-g", "-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("g++");
    assert!(st.success());
    let expected: u64 = (0..5).map(|i| 2000 + i).sum();
    for mode in ["shim", "uprobe"] {
        let r = heap(
            &shim,
            &[
                "--mode",
                mode,
                "--format",
                "json",
                "--",
                bin.to_str().unwrap(),
            ],
        );
        let groups = r["outstanding_by_stack"].as_array().unwrap();
        let site: Vec<_> = groups
            .iter()
            .filter(|g| g["frames"][0]["function"] == "cxx_allocation_site(int)")
            .collect();
        assert_eq!(site.len(), 1, "{mode}: {groups:?}");
        assert_eq!(
            (site[0]["count"].as_u64(), site[0]["bytes"].as_u64()),
            (Some(5), Some(expected)),
            "{mode}"
        );
    }
}
