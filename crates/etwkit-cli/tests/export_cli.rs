//! `etwkit export`: the Parquet dataset read back by DuckDB (its Python package, a real consumer)
//! and compared with `etwkit stats` and `etwkit dump --format json`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{etwkit, samples};

fn tmp(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// The Python with DuckDB (`crates/etwkit-cli/tests/export/setup_venv.sh` makes it), or `None`
/// after a loud SKIPPED line; with `ETWKIT_REQUIRE_PYTHON=1` (as `.ci/run` sets) a missing one
/// fails.
fn duckdb_python(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("ETWKIT_EXPORT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/export-venv/bin/python")
        });
    let ok = Command::new(&p)
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(p);
    }
    if std::env::var("ETWKIT_REQUIRE_PYTHON").is_ok_and(|v| v == "1") {
        panic!("{test}: no Python with duckdb at {} (run crates/etwkit-cli/tests/export/setup_venv.sh) and ETWKIT_REQUIRE_PYTHON=1", p.display());
    }
    eprintln!(
        "\n*** SKIPPED {test}: no Python with duckdb at {} (run crates/etwkit-cli/tests/export/setup_venv.sh) ***\n",
        p.display()
    );
    None
}

fn check(python: &Path, args: &[&str]) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/export/check_parquet.py");
    let o = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "check_parquet.py {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn etl_samples(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "etl"))
        .collect();
    v.sort();
    v
}

#[test]
fn events_parquet_of_every_sample_has_stats_provider_counts() {
    let test = "events_parquet_of_every_sample_has_stats_provider_counts";
    let (Some(dir), Some(py)) = (samples(test), duckdb_python(test)) else {
        return;
    };
    let files = etl_samples(&dir);
    assert!(files.len() > 40, "{} samples", files.len());
    // All samples into one dataset: the `file` column tells them apart.
    let out = tmp("export-all");
    let mut args: Vec<String> = vec!["export".into(), "-o".into(), out.display().to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, _, err) = etwkit(&args);
    assert!(ok, "export: {err}");
    let got = check(&py, &["counts", out.to_str().unwrap()]);
    let mut total = 0u64;
    for f in &files {
        let (ok, stats, err) = etwkit(&["stats", "--format", "json", f.to_str().unwrap()]);
        assert!(ok, "stats {}: {err}", f.display());
        let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
        let name = f.file_name().unwrap().to_str().unwrap();
        let want: BTreeMap<String, u64> =
            serde_json::from_value(stats["providers"].clone()).unwrap();
        let have: BTreeMap<String, u64> = got
            .get(name)
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .unwrap_or_default();
        assert_eq!(have, want, "{name}: rows per provider in events.parquet");
        assert_eq!(
            have.values().sum::<u64>(),
            stats["records"].as_u64().unwrap(),
            "{name}"
        );
        total += stats["records"].as_u64().unwrap();
    }
    assert!(total > 100_000, "{total} records in all");
}

/// Every typed table's values (and every events.parquet row) equal `dump --format json`.
fn typed_tables_equal_dump(test: &str, sample: &str) {
    let (Some(dir), Some(py)) = (samples(test), duckdb_python(test)) else {
        return;
    };
    let f = dir.join(sample);
    let out = tmp(&format!("export-{sample}"));
    let (ok, summary, err) = etwkit(&[
        "export",
        "--format",
        "json",
        "-o",
        out.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert!(ok, "export {sample}: {err}");
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let (ok, dump, err) = etwkit(&["dump", "--format", "json", f.to_str().unwrap()]);
    assert!(ok, "dump {sample}: {err}");
    let dump_path = out.with_extension("jsonl");
    std::fs::write(&dump_path, &dump).unwrap();
    let r = check(
        &py,
        &["typed", out.to_str().unwrap(), dump_path.to_str().unwrap()],
    );
    assert_eq!(r["mismatch_count"], 0, "{sample}: {:#}", r["mismatches"]);
    let lines = dump.lines().count() as u64;
    assert_eq!(
        r["events_rows"].as_u64(),
        Some(lines),
        "{sample}: events.parquet rows"
    );
    assert_eq!(summary["events"].as_u64(), Some(lines), "{sample}");
    // Every record with properties is in exactly one typed table (the script checks "once").
    assert_eq!(r["rows"], r["records_with_properties"], "{sample}");
    assert!(r["rows"].as_u64().unwrap() > 0, "{sample}");
    let tables = summary["tables"].as_object().unwrap();
    assert_eq!(r["tables"].as_u64(), Some(tables.len() as u64), "{sample}");
    // Values null in Parquet but not in the dump are exactly the ones the export counted, and
    // in these samples there are none: value maps that name some values and not others (IrpFlags
    // with unknown bits, enums with unlisted values) make text columns of what `dump` shows.
    let unfit: u64 = tables.values().map(|t| t["unfit"].as_u64().unwrap()).sum();
    assert_eq!(r["unfit_nulls"].as_u64(), Some(unfit), "{sample}");
    assert_eq!(unfit, 0, "{sample}: values written as null: {r}");
    assert!(r["values"].as_u64().unwrap() >= 20, "{sample}: {r}");
    // Every chunk's min/max/null-count statistics were compared with its row group's values
    // (`file`, `record`, the header numbers and times at least: 13 in events.parquet alone).
    assert!(r["statistics"].as_u64().unwrap() >= 13, "{sample}: {r}");
}

#[test]
fn typed_tables_equal_dump_kernel_mof() {
    // Kernel (SYSTEM/PERFINFO) and classic records with stacks, and CLR manifest events.
    typed_tables_equal_dump(
        "typed_tables_equal_dump_kernel_mof",
        "perfview_net.4.5.x86.etl",
    );
}

#[test]
fn typed_tables_equal_dump_manifest() {
    typed_tables_equal_dump("typed_tables_equal_dump_manifest", "tx_Process.etl");
}

#[test]
fn typed_tables_equal_dump_tracelogging() {
    // Every TraceLogging primitive type (strings, bools, signed/unsigned, GUID, FILETIME, SYSTEMTIME).
    typed_tables_equal_dump(
        "typed_tables_equal_dump_tracelogging",
        "perfview_primitive-types.etl",
    );
    typed_tables_equal_dump(
        "typed_tables_equal_dump_tracelogging_amsi",
        "etlparser_AMSITrace.etl",
    );
}

/// The samples the tests above check by name.
const NAMED: [&str; 4] = [
    "perfview_net.4.5.x86.etl",
    "tx_Process.etl",
    "perfview_primitive-types.etl",
    "etlparser_AMSITrace.etl",
];

#[test]
fn typed_tables_of_every_other_sample_equal_dump() {
    // PktMon, Winsock, kernel rundown, TraceLogging and EventSource traces from other producers:
    // the typed values of every one equal the dump and none is null where the dump has one.
    let test = "typed_tables_of_every_other_sample_equal_dump";
    let Some(dir) = samples(test) else {
        return;
    };
    let mut checked = 0;
    for f in etl_samples(&dir) {
        let name = f.file_name().unwrap().to_str().unwrap();
        if !NAMED.contains(&name) {
            typed_tables_equal_dump(test, name);
            checked += 1;
        }
    }
    assert!(checked > 30, "{checked} samples");
}

#[test]
fn unreadable_input_is_named_and_the_rest_exported() {
    let test = "unreadable_input_is_named_and_the_rest_exported";
    let Some(dir) = samples(test) else {
        return;
    };
    let out = tmp("export-bad");
    let missing = out.with_extension("missing.etl");
    let good = dir.join("tx_Process.etl");
    let (ok, stdout, err) = etwkit(&[
        "export",
        "-o",
        out.to_str().unwrap(),
        missing.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    assert!(!ok, "a missing input fails the command");
    assert!(stdout.is_empty());
    assert!(err.contains("missing.etl"), "{err}");
    assert!(
        err.contains("1 of 2 input files could not be read"),
        "{err}"
    );
    assert!(err.contains("wrote 10344 events"), "{err}");
    assert!(out.join("events.parquet").is_file());
}
