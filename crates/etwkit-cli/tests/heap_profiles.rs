//! Heap reports as pprof profiles and flame graphs (export::pprof, export::flamegraph), from a real
//! heap trace as root: the C pattern program (crates/etwkit/tests/heap_progs/pattern.c) makes
//! THREADS x N allocations of known sizes from leaky_allocation_site() and leaks K per thread. Go's
//! own pprof reads the profile back: the leak's function with its exact bytes and blocks, and every
//! allocation in alloc_space; the SVG names the function.
#![cfg(target_os = "linux")]

mod common;

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::Command;

use etwkit::analysis::heap::{HeapAnalyzer, HeapReport};
use etwkit::live::linux::heap::{spawn_suspended, HeapOptions, HeapTrace};
use etwkit::live::linux::unwind::LinuxStackNamer;

const THREADS: u64 = 4;
const N: u64 = 200;
const K: u64 = 3;

fn leaked_bytes() -> u64 {
    (0..THREADS)
        .flat_map(|t| (0..K).map(move |i| 1000 + t * 100 + i))
        .sum()
}

fn allocated_bytes() -> u64 {
    (0..THREADS)
        .flat_map(|t| (0..N).map(move |i| 1000 + t * 100 + i))
        .sum()
}

/// The pattern program traced from its first instruction; the report with function names.
fn pattern_report(test: &str) -> Option<HeapReport> {
    if !common::require_root(test) {
        return None;
    }
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../etwkit/tests/heap_progs/pattern.c");
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pattern_{test}"));
    let st = Command::new("cc")
        .args(["-g", "-O1", "-fomit-frame-pointer", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc (a C compiler) is needed to build the heap test program");
    assert!(st.success(), "cc failed on {}", src.display());
    let child = spawn_suspended(&mut Command::new(&bin)).expect("spawn suspended");
    let mut trace = HeapTrace::for_suspended(&child, HeapOptions::default()).expect("arm probes");
    let mut child = child.resume().expect("resume");
    let mut an = HeapAnalyzer::new();
    trace
        .process(|op| {
            an.add(op);
            ControlFlow::Continue(())
        })
        .expect("process");
    assert!(child.wait().unwrap().success());
    assert_eq!(trace.stats().lost_samples, 0);
    let mut namer = LinuxStackNamer::new(trace.unwinder().all_maps());
    let report = an.report(Some(&mut namer), 1000, 16);
    assert!(report.exact, "{:?}", report.notes);
    Some(report)
}

/// The flat value of `function` in `pprof -top` output (values printed as plain numbers).
fn flat_of(top: &str, function: &str) -> Option<u64> {
    let line = top
        .lines()
        .find(|l| l.split_whitespace().last() == Some(function))?;
    let v = line.split_whitespace().next()?;
    Some(
        v.trim_end_matches("byte")
            .trim_end_matches('B')
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("{e}: {line}")),
    )
}

#[test]
fn leak_in_pprof_read_by_go_pprof_and_in_flamegraph() {
    let test = "leak_in_pprof_read_by_go_pprof_and_in_flamegraph";
    let Some(go) = common::go(test) else {
        return;
    };
    let Some(report) = pattern_report(test) else {
        return;
    };
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let pb = tmp.join("pattern.pb.gz");
    etwkit::export::pprof::write_pprof(&report, std::fs::File::create(&pb).unwrap()).unwrap();

    for (index, want) in [
        ("inuse_space", leaked_bytes()),
        ("inuse_objects", THREADS * K),
        ("alloc_space", allocated_bytes()),
        ("alloc_objects", THREADS * N),
    ] {
        let top = common::pprof(
            &go,
            &[
                "-top",
                "-nodecount=1000",
                "-unit=byte",
                &format!("-sample_index={index}"),
            ],
            &pb,
        );
        assert_eq!(
            flat_of(&top, "leaky_allocation_site"),
            Some(want),
            "{index} of leaky_allocation_site in:\n{top}"
        );
        // The callers are there too, with the leak in their cumulative values.
        assert!(top.contains("worker"), "{top}");
    }
    // Source lines: the location of the allocating frame names pattern.c.
    let raw = common::pprof(&go, &["-raw"], &pb);
    assert!(
        raw.lines()
            .any(|l| l.contains("leaky_allocation_site") && l.contains("pattern.c:")),
        "{raw}"
    );

    let svg = tmp.join("pattern.svg");
    etwkit::export::flamegraph::write_flamegraph(
        &report,
        None,
        std::fs::File::create(&svg).unwrap(),
    )
    .unwrap();
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.contains("<svg"),
        "not an SVG"
    );
    assert!(
        svg.contains("leaky_allocation_site"),
        "function missing in the SVG"
    );
    // The leak's tower is titled with its exact bytes (inferno groups digits: 12,042).
    let digits = leaked_bytes().to_string();
    let mut leak_bytes = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            leak_bytes.push(',');
        }
        leak_bytes.push(c);
    }
    assert!(
        svg.lines()
            .any(|l| l.contains("leaky_allocation_site") && l.contains(&leak_bytes)),
        "no title with {leak_bytes} bytes for leaky_allocation_site"
    );
}

/// `etwkit heap --pprof --flamegraph -- PROGRAM`: the CLI writes both (every stack, though --top 1
/// cuts the printed report), live in shim mode and again from the `-o` file with `--report`.
#[test]
fn heap_command_writes_pprof_and_flamegraph() {
    let test = "heap_command_writes_pprof_and_flamegraph";
    let Some(go) = common::go(test) else {
        return;
    };
    if !common::require_root(test) {
        return;
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../etwkit/tests/heap_progs/pattern.c");
    let bin = tmp.join("pattern_cli_profiles");
    let st = Command::new("cc")
        .args(["-g", "-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success());
    let (pb, svg, etl) = (
        tmp.join("cli.pb.gz"),
        tmp.join("cli.svg"),
        tmp.join("cli_profiles.etl"),
    );
    let (ok, _, err) = common::etwkit(&[
        "heap",
        "--top",
        "1",
        "-o",
        etl.to_str().unwrap(),
        "--pprof",
        pb.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let check = |pb: &PathBuf, svg: &PathBuf| {
        let top = common::pprof(
            &go,
            &[
                "-top",
                "-nodecount=1000",
                "-unit=byte",
                "-sample_index=inuse_space",
            ],
            pb,
        );
        assert_eq!(
            flat_of(&top, "leaky_allocation_site"),
            Some(leaked_bytes()),
            "{top}"
        );
        let s = std::fs::read_to_string(svg).unwrap();
        assert!(s.contains("<svg") && s.contains("leaky_allocation_site"));
    };
    check(&pb, &svg);
    let (pb2, svg2) = (tmp.join("cli_report.pb.gz"), tmp.join("cli_report.svg"));
    let (ok, out, err) = common::etwkit(&[
        "heap",
        "--report",
        etl.to_str().unwrap(),
        "--format",
        "json",
        "--top",
        "1",
        "--pprof",
        pb2.to_str().unwrap(),
        "--flamegraph",
        svg2.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        r["outstanding_by_stack"].as_array().unwrap().len(),
        1,
        "--top 1"
    );
    check(&pb2, &svg2);
}
