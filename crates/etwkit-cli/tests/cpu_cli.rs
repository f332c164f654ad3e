//! `etwkit cpu` on PerfView's CPU-sampling traces (../shared/etl-samples): every figure is checked
//! against what `etwkit dump --format json` shows of the same file, counted here — the
//! SampledProfile records (kernel PerfInfo ce1dbfb4-…, opcode 46), their `pid`, their stacks, and
//! the modules the trace's Image events load. Go's pprof reads the `--pprof` file back.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

const PERFINFO: &str = "ce1dbfb4-137e-4da6-87b0-3f59aa102cbc";
const IMAGE: &str = "2cb15d1d-5fc1-11d2-abe1-00a0c911f518";
const X64: &str = "perfview_net.4.5.2.x64.etl";
const X86: &str = "perfview_net.4.5.x86.etl";

/// What `dump --format json` shows of a file's samples and images.
#[derive(Debug, Default)]
struct Dumped {
    samples: u64,
    with_stack: u64,
    /// Samples whose stack does not start at their InstructionPointer.
    ip_not_first: u64,
    by_pid: BTreeMap<u64, u64>,
    /// Image file names (no directory, lower case) by the ProcessId of their Image event.
    images: BTreeMap<u64, BTreeSet<String>>,
    /// JIT-compiled methods (.NET method events flagged Jitted) by pid: (start, end, `Namespace.Name`).
    jitted: BTreeMap<u64, Vec<(u64, u64, String)>>,
    /// Sample stacks by pid (for a check of JIT names).
    stacks: BTreeMap<u64, Vec<Vec<u64>>>,
}

fn dumped(file: &Path, extra: &[&str]) -> Dumped {
    let mut args = vec!["dump", "--format", "json", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (ok, out, err) = common::etwkit(&args);
    assert!(ok, "dump: {err}");
    let mut d = Dumped::default();
    for e in common::json_lines(&out) {
        if e["provider"] == PERFINFO && e["opcode"] == 46 {
            d.samples += 1;
            *d.by_pid.entry(e["pid"].as_u64().unwrap()).or_default() += 1;
            if let Some(s) = e["stack"].as_array().filter(|s| !s.is_empty()) {
                d.stacks
                    .entry(e["pid"].as_u64().unwrap())
                    .or_default()
                    .push(s.iter().map(hex).collect());
                d.with_stack += 1;
                d.ip_not_first += (s[0] != e["properties"]["InstructionPointer"]) as u64;
            }
        }
        let p = &e["properties"];
        if p["MethodFlags"]
            .as_str()
            .is_some_and(|f| f.contains("Jitted"))
        {
            let (start, size) = (hex(&p["MethodStartAddress"]), hex(&p["MethodSize"]));
            let name = match p["MethodNamespace"].as_str().unwrap() {
                "" => p["MethodName"].as_str().unwrap().to_string(),
                ns => format!("{ns}.{}", p["MethodName"].as_str().unwrap()),
            };
            d.jitted
                .entry(e["pid"].as_u64().unwrap())
                .or_default()
                .push((start, start + size, name));
        }
        if e["provider"] == IMAGE {
            let p = &e["properties"];
            if let (Some(pid), Some(name)) = (p["ProcessId"].as_u64(), p["FileName"].as_str()) {
                let base = name.rsplit(['\\', '/']).next().unwrap().to_lowercase();
                d.images.entry(pid).or_default().insert(base);
            }
        }
    }
    d
}

/// An address or size of dump's JSON: a `"0x…"` string, or a number.
fn hex(v: &Value) -> u64 {
    match v.as_str() {
        Some(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap(),
        None => v.as_u64().unwrap(),
    }
}

/// The dump of a sample file, made once per test process.
fn dump_of(name: &'static str) -> &'static Dumped {
    static X64_DUMP: OnceLock<Dumped> = OnceLock::new();
    static X86_DUMP: OnceLock<Dumped> = OnceLock::new();
    let cell = match name {
        X64 => &X64_DUMP,
        _ => &X86_DUMP,
    };
    cell.get_or_init(|| dumped(&sample(name).unwrap(), &[]))
}

fn sample(name: &str) -> Option<PathBuf> {
    common::samples(&format!("cpu_cli {name}")).map(|d| d.join(name))
}

/// `etwkit cpu FILE --format json ARGS`: the report (stdout is that one object) and stderr.
fn cpu_json(file: &Path, args: &[&str]) -> (Value, String) {
    let mut a = vec!["cpu", file.to_str().unwrap(), "--format", "json"];
    a.extend_from_slice(args);
    let (code, out, err) = common::etwkit_code(&a);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1, "one JSON object on stdout: {out}");
    (serde_json::from_str(&out).unwrap(), err)
}

fn samples_by_pid(r: &Value) -> BTreeMap<u64, u64> {
    r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pid"].as_u64().unwrap(), p["samples"].as_u64().unwrap()))
        .collect()
}

fn modules(r: &Value, list: &str) -> BTreeMap<String, u64> {
    r[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["module"].as_str().unwrap().to_string(),
                m["samples"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The figures of a report agree with the dump of its file.
fn check_against_dump(name: &'static str) {
    let Some(file) = sample(name) else {
        return;
    };
    let d = dump_of(name);
    assert!(d.samples > 0, "{name}: the dump shows no SampledProfile");
    let (r, err) = cpu_json(&file, &[]);
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(r["total_samples"].as_u64(), Some(d.samples), "{name}");
    assert_eq!(
        r["samples_with_stack"].as_u64(),
        Some(d.with_stack),
        "{name}"
    );
    assert_eq!(samples_by_pid(&r), d.by_pid, "{name}: samples per pid");
    let excl = modules(&r, "modules_exclusive");
    let incl = modules(&r, "modules_inclusive");
    assert_eq!(
        excl.values().sum::<u64>(),
        d.samples,
        "{name}: exclusive sum"
    );
    for (m, n) in &excl {
        assert!(incl[m] >= *n, "{name}: {m} inclusive below exclusive");
        assert!(incl[m] <= d.samples);
    }
    // The kernel: an image of the kernel's rundown (pid 0) with samples of its own.
    let kernel = &d.images[&0];
    assert!(kernel.contains("ntoskrnl.exe"), "{kernel:?}");
    assert!(excl.get("ntoskrnl.exe").is_some_and(|&n| n > 0), "{excl:?}");
    // A user module: loaded by the Image events of the busiest process other than Idle and
    // System (a .dll none of the kernel's), and on that process's stacks.
    let (&busiest, _) = d
        .by_pid
        .iter()
        .filter(|(p, _)| **p > 4)
        .max_by_key(|(_, n)| **n)
        .unwrap();
    let user: BTreeSet<String> = d.images[&busiest]
        .iter()
        .filter(|m| m.ends_with(".dll") && !kernel.contains(*m))
        .cloned()
        .collect();
    let (rp, _) = cpu_json(&file, &["--pid", &busiest.to_string()]);
    let seen: Vec<String> = modules(&rp, "modules_inclusive")
        .into_keys()
        .filter(|m| user.contains(&m.to_lowercase()))
        .collect();
    assert!(
        !seen.is_empty(),
        "{name}: no module of pid {busiest}'s Image events on its stacks"
    );
    for m in &seen {
        assert!(incl.contains_key(m), "{m} in the whole report too");
    }
    // The stacks are the samples' own: they start at the sampled InstructionPointer (a few
    // whose kernel half was not logged excepted).
    assert!(
        d.ip_not_first * 100 <= d.with_stack,
        "{name}: {} of {} stacks do not start at their sample's InstructionPointer",
        d.ip_not_first,
        d.with_stack
    );
    // JIT-compiled .NET code is named by the trace's method events: the method on most of the
    // busiest process's stacks (by dump's stacks and method ranges) is on as many of the
    // report's.
    if let Some(methods) = d.jitted.get(&busiest) {
        let mut on: BTreeMap<&str, u64> = BTreeMap::new();
        for st in &d.stacks[&busiest] {
            let mut names: Vec<&str> = st
                .iter()
                .filter_map(|&a| {
                    let m = methods.iter().find(|m| m.0 <= a && a < m.1)?;
                    Some(m.2.as_str())
                })
                .collect();
            names.sort();
            names.dedup();
            for n in names {
                *on.entry(n).or_default() += 1;
            }
        }
        let (&top_method, &n) = on.iter().max_by_key(|(_, n)| **n).unwrap();
        let (all, _) = cpu_json(
            &file,
            &[
                "--pid",
                &busiest.to_string(),
                "--top",
                "1000000",
                "--frames",
                "100000",
            ],
        );
        let in_report: u64 = all["top_stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f == top_method)
            })
            .map(|s| s["samples"].as_u64().unwrap())
            .sum();
        assert_eq!(
            in_report, n,
            "{name}: samples with {top_method} on the stack"
        );
    }
    // Top stacks: at most --top (10), frames leaf first as module+0xOFFSET, 0xADDR or a
    // method's name.
    let top = r["top_stacks"].as_array().unwrap();
    assert!(!top.is_empty() && top.len() <= 10);
    let n: Vec<u64> = top.iter().map(|s| s["samples"].as_u64().unwrap()).collect();
    assert!(n.windows(2).all(|w| w[0] >= w[1]), "{n:?}");
    for s in top {
        for f in s["frames"].as_array().unwrap() {
            let f = f.as_str().unwrap();
            let method = d.jitted.values().flatten().any(|m| m.2 == f);
            assert!(
                f.contains("+0x") || f.starts_with("0x") || method,
                "frame {f} is neither module+0xOFFSET nor 0xADDR nor a JIT-compiled method"
            );
        }
    }
}

#[test]
fn x64_report_agrees_with_dump() {
    check_against_dump(X64);
}

#[test]
fn x86_report_agrees_with_dump() {
    check_against_dump(X86);
}

/// `--pid P` keeps that process's samples, all of them; `--frames` cuts the stacks shown.
#[test]
fn pid_keeps_one_process() {
    let Some(file) = sample(X64) else {
        return;
    };
    let d = dump_of(X64);
    let (&pid, &n) = d
        .by_pid
        .iter()
        .filter(|(p, _)| **p > 4)
        .max_by_key(|(_, n)| **n)
        .unwrap();
    let (r, _) = cpu_json(&file, &["--pid", &pid.to_string(), "--frames", "2"]);
    assert_eq!(samples_by_pid(&r), BTreeMap::from([(pid, n)]));
    assert_eq!(r["total_samples"].as_u64(), Some(n));
    for s in r["top_stacks"].as_array().unwrap() {
        assert_eq!(s["pid"].as_u64(), Some(pid));
        assert!(s["frames"].as_array().unwrap().len() <= 2);
    }
}

/// `--begin/--end` select samples as `dump` does.
#[test]
fn begin_end_as_dump() {
    let Some(file) = sample(X86) else {
        return;
    };
    let range = ["--begin", "1", "--end", "2.5"];
    let d = dumped(&file, &range);
    assert!(d.samples > 0 && d.samples < dump_of(X86).samples);
    let (r, _) = cpu_json(&file, &range);
    assert_eq!(r["total_samples"].as_u64(), Some(d.samples));
    assert_eq!(samples_by_pid(&r), d.by_pid);
}

/// The table's first line counts the samples.
#[test]
fn table_counts_samples() {
    let Some(file) = sample(X64) else {
        return;
    };
    let (code, out, err) = common::etwkit_code(&["cpu", file.to_str().unwrap(), "--top", "3"]);
    assert_eq!(code, Some(0), "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("CPU samples: {} ", dump_of(X64).samples)),
        "{first}"
    );
    for title in [
        "Per process:",
        "Top modules by exclusive samples",
        "Top modules by inclusive samples",
        "Top stacks",
    ] {
        assert!(out.contains(title), "{title} missing:\n{out}");
    }
    assert!(out.contains("ntoskrnl.exe"));
}

/// A trace without SampledProfile events: said on stderr, status 0, an empty report.
#[test]
fn no_samples_is_said_and_empty() {
    let Some(dir) = common::samples("no_samples_is_said_and_empty") else {
        return;
    };
    let file = dir.join("perfview_gcevents.etl");
    assert_eq!(dumped(&file, &[]).samples, 0, "the dump shows none either");
    let (r, err) = cpu_json(&file, &[]);
    assert!(
        err.contains(&format!(
            "etwkit: {} holds no SampledProfile events",
            file.display()
        )),
        "{err}"
    );
    assert_eq!(r["total_samples"].as_u64(), Some(0));
    assert!(r["processes"].as_array().unwrap().is_empty());
    assert!(r["top_stacks"].as_array().unwrap().is_empty());
}

/// `--pprof` read back by Go's pprof: the same total, the top stack's leaf as the top function,
/// CPU time at the trace's interval; `--flamegraph` names the top module.
#[test]
fn pprof_and_flamegraph() {
    let test = "cpu_cli pprof_and_flamegraph";
    let Some(file) = sample(X64) else {
        return;
    };
    let Some(go) = common::go(test) else {
        return;
    };
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (pb, svg) = (tmp.join("cpu_x64.pb.gz"), tmp.join("cpu_x64.svg"));
    let (r, err) = cpu_json(
        &file,
        &[
            "--pprof",
            pb.to_str().unwrap(),
            "--flamegraph",
            svg.to_str().unwrap(),
        ],
    );
    assert!(err.contains("wrote the pprof profile"), "{err}");
    let total = dump_of(X64).samples;
    assert_eq!(r["total_samples"].as_u64(), Some(total));

    let top = common::pprof(&go, &["-top", "-sample_index=samples"], &pb);
    assert!(top.contains(&format!("of {total} total")), "{top}");
    // The first row after the header: the function with the most flat samples.
    let row = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    let leaf = r["top_stacks"][0]["frames"][0].as_str().unwrap();
    assert_eq!(cols.last(), Some(&leaf), "{top}");
    let flat: u64 = cols[0].parse().unwrap();
    assert!(flat >= r["top_stacks"][0]["samples"].as_u64().unwrap());

    let raw = common::pprof(&go, &["-raw"], &pb);
    let ns = r["sampling_interval_ns"].as_u64().unwrap();
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    assert!(raw.contains(&format!("Period: {ns}")), "{raw}");
    assert!(raw.contains("samples/count[dflt] cpu/nanoseconds"), "{raw}");

    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("<svg"));
    let top_module = r["modules_exclusive"][0]["module"].as_str().unwrap();
    assert!(svg.contains(top_module), "{top_module} missing in the SVG");
}
