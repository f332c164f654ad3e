//! Shared by the heap_* tests: root check, building the C pattern program, checking a report.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use etwkit::analysis::heap::HeapReport;

pub const THREADS: u64 = 4;
pub const N: u64 = 200;
pub const K: u64 = 3;

/// Live heap tests need root (perf uprobes). CI runs as root; elsewhere they say loudly that they
/// did not run (and fail when ETWKIT_REQUIRE_ROOT=1).
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc_geteuid() };
    if euid == 0 {
        return true;
    }
    if std::env::var("ETWKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
        panic!("{test}: needs root but ETWKIT_REQUIRE_ROOT=1");
    }
    std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\n*** SKIPPED {test}: live heap tracing needs root ***\n\n").as_bytes(),
    )
    .ok();
    false
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Compiles tests/heap_progs/pattern.c (debug info, no frame pointers, -O1) into the test tmpdir.
pub fn build_pattern(test: &str) -> Option<PathBuf> {
    if !require_root(test) {
        return None;
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/heap_progs/pattern.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("heap_pattern_{test}"));
    let st = Command::new("cc")
        .args(["-g", "-O1", "-fomit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc (a C compiler) is needed to build the heap test program");
    assert!(st.success(), "cc failed on {}", src.display());
    Some(out)
}

/// The report must hold exactly THREADS*K outstanding blocks allocated by leaky_allocation_site,
/// with exactly their bytes, and every one of the THREADS*N pattern allocations must have been seen.
pub fn check_pattern(report: &HeapReport, pid: u32, pattern_allocs: u64) {
    assert_eq!(pattern_allocs, THREADS * N, "pattern allocations seen");
    let expected_bytes: u64 = (0..THREADS)
        .flat_map(|t| (0..K).map(move |i| 1000 + t * 100 + i))
        .sum();
    let groups: Vec<_> = report
        .outstanding_by_stack
        .iter()
        .filter(|g| {
            g.frames.first().and_then(|f| f.function.as_deref()) == Some("leaky_allocation_site")
        })
        .collect();
    assert!(
        !groups.is_empty(),
        "no outstanding group attributed to leaky_allocation_site"
    );
    let count: u64 = groups.iter().map(|g| g.count).sum();
    let bytes: u64 = groups.iter().map(|g| g.bytes).sum();
    assert_eq!(
        count,
        THREADS * K,
        "outstanding blocks from leaky_allocation_site"
    );
    assert_eq!(
        bytes, expected_bytes,
        "outstanding bytes from leaky_allocation_site"
    );
    // DWARF unwinding got past the leaf into its caller and the thread start (deeper than FP allows).
    let g = groups[0];
    assert!(g.frames.len() >= 3, "stack too short: {:?}", g.frames);
    assert!(
        g.frames
            .iter()
            .any(|f| f.function.as_deref() == Some("worker")),
        "worker frame missing: {:?}",
        g.frames
    );
    let f0 = &g.frames[0];
    assert!(
        f0.file.as_deref().is_some_and(|f| f.ends_with("pattern.c")),
        "file:line missing: {f0:?}"
    );
    assert!(f0.line.is_some());
    let p = report
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .expect("process summary");
    assert!(
        p.allocs >= THREADS * N && p.frees >= THREADS * (N - K),
        "{p:?}"
    );
    assert!(report.exact, "report not exact: {:?}", report.notes);
}

/// Builds the shim cdylib with the cargo running this test, into a target dir of our own.
pub fn build_shim() -> std::path::PathBuf {
    let target = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shim-target");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let st = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "etwkit-heapshim",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(&root)
        .status()
        .expect("cargo");
    assert!(st.success(), "building etwkit-heapshim failed");
    target.join("release/libetwkit_heapshim.so")
}
