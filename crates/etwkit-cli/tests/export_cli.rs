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
    typed_tables_equal_filtered_dump(test, sample, &[]);
}

/// As [`typed_tables_equal_dump`], export and dump both given `filter` (options they share);
/// returns the rows exported (0 when the test did not run).
fn typed_tables_equal_filtered_dump(test: &str, sample: &str, filter: &[&str]) -> u64 {
    let (Some(dir), Some(py)) = (samples(test), duckdb_python(test)) else {
        return 0;
    };
    let f = dir.join(sample);
    let out = tmp(&format!("export-{sample}{}", filter.len()));
    let mut args = vec![
        "export",
        "--format",
        "json",
        "-o",
        out.to_str().unwrap(),
        f.to_str().unwrap(),
    ];
    args.extend(filter);
    let (ok, summary, err) = etwkit(&args);
    assert!(ok, "export {sample}: {err}");
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let mut args = vec!["dump", "--format", "json", f.to_str().unwrap()];
    args.extend(filter);
    let (ok, dump, err) = etwkit(&args);
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
    lines
}

#[test]
fn filtered_export_equals_filtered_dump() {
    // dump's filter options select the same events in export: kernel records by the process id
    // the decoder attributes to them (their headers carry none) within a time window, and a
    // manifest provider by name; `record` numbers the kept events as dump numbers its lines.
    let test = "filtered_export_equals_filtered_dump";
    let Some(dir) = samples(test) else {
        return;
    };
    for (sample, filter) in [
        (
            "perfview_net.4.5.x86.etl",
            &["--pid", "3884", "--begin", "0.5"][..],
        ),
        (
            "tx_Process.etl",
            &[
                "--provider",
                "Microsoft-Windows-Kernel-Process",
                "--id",
                "5",
            ][..],
        ),
    ] {
        let kept = typed_tables_equal_filtered_dump(test, sample, filter);
        if kept == 0 && duckdb_python(test).is_none() {
            return;
        }
        let (ok, stats, _) = etwkit(&[
            "stats",
            "--format",
            "json",
            dir.join(sample).to_str().unwrap(),
        ]);
        assert!(ok);
        let all: serde_json::Value = serde_json::from_str(&stats).unwrap();
        let all = all["records"].as_u64().unwrap();
        assert!(
            kept > 0 && kept < all / 2,
            "{sample} {filter:?}: {kept} of {all} kept"
        );
    }
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

/// `--format json` lists every input in the order given: its read summary (the object `relog`
/// gives for the same file) or the error that made export skip it.
#[test]
fn json_lists_each_inputs_read_summary_or_error() {
    let Some(dir) = samples("json_lists_each_inputs_read_summary_or_error") else {
        return;
    };
    let out = tmp("export-json-inputs");
    let missing = out.with_extension("missing.etl");
    let a = dir.join("tx_Process.etl");
    let b = dir.join("perfview_smallEtlFile.etl");
    let (a, b, missing) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        missing.to_str().unwrap(),
    );
    let not_a_file = dir.to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(["export", "--format", "json", "-o", out.to_str().unwrap()])
        .args([a, missing, not_a_file, b])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "two unreadable inputs fail the run: {err}"
    );
    let stdout = String::from_utf8(o.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["events"].as_u64(), Some(10344 + 2), "{v}");
    let inputs = v["inputs"].as_array().unwrap();
    let paths: Vec<&str> = inputs.iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!(paths, [a, missing, not_a_file, b]);
    for (i, file) in [(0, a), (3, b)] {
        let relogged = tmp(&format!("export-json-inputs-{i}.etl"));
        let (ok, r, rerr) = etwkit(&["relog", file, "-o", relogged.to_str().unwrap()]);
        assert!(ok, "{rerr}");
        let r: serde_json::Value = serde_json::from_str(r.trim()).unwrap();
        assert_eq!(inputs[i]["read"], r["inputs"][0]["read"], "{file}");
        assert!(inputs[i]["read"]["records"].as_u64().unwrap() > 0, "{file}");
        assert!(inputs[i].get("error").is_none(), "{}", inputs[i]);
    }
    assert_eq!(
        inputs[1]["error"],
        format!("cannot open {missing}: No such file or directory (os error 2)")
    );
    assert_eq!(
        inputs[2]["error"],
        format!("{not_a_file} is a directory, not an ETL file")
    );
    for i in [1, 2] {
        assert!(inputs[i].get("read").is_none(), "{}", inputs[i]);
    }
}

/// Every file under `dir` (relative paths) with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Hidden entries (staging directories) beside `dir`.
fn hidden_beside(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.contains(dir.file_name().unwrap().to_str().unwrap()))
        .collect()
}

/// An export never leaves a dataset half old, half new: a directory that holds files is refused
/// (and kept) unless `--overwrite`; an export that fails keeps the earlier dataset whole; with
/// `--overwrite` the new dataset replaces the old one entirely (no typed table of the earlier
/// export stays beside it), and no staging directory is left behind.
#[test]
fn earlier_dataset_is_refused_kept_on_failure_and_replaced_when_asked() {
    let test = "earlier_dataset_is_refused_kept_on_failure_and_replaced_when_asked";
    let (Some(dir), Some(py)) = (samples(test), duckdb_python(test)) else {
        return;
    };
    let parent = tmp("export-replace");
    std::fs::create_dir_all(&parent).unwrap();
    let out = parent.join("ds");
    let out_s = out.to_str().unwrap();
    let first = dir.join("tx_Process.etl");
    let second = dir.join("perfview_primitive-types.etl");
    let (ok, _, err) = etwkit(&["export", "-o", out_s, first.to_str().unwrap()]);
    assert!(ok, "export: {err}");
    let before = tree(&out);
    let old_table = "Microsoft-Windows-Kernel-Process";
    assert!(
        before.keys().any(|k| k.starts_with(old_table)),
        "{:?}",
        before.keys()
    );

    // Not asked to replace: refused, one sentence naming the directory and the flag.
    let (ok, stdout, err) = etwkit(&["export", "-o", out_s, second.to_str().unwrap()]);
    assert!(!ok);
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(out_s) && err.contains("--overwrite"), "{err}");
    assert!(tree(&out) == before, "a refused export changed the dataset");

    // Asked, but nothing readable: the earlier dataset stays, whole.
    let missing = parent.join("missing.etl");
    let (ok, _, err) = etwkit(&[
        "export",
        "--overwrite",
        "-o",
        out_s,
        missing.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("none of the input files could be read"),
        "{err}"
    );
    assert!(tree(&out) == before, "a failed export changed the dataset");

    // Not a dataset: never replaced, even when asked.
    let notes = parent.join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), b"keep me").unwrap();
    let (ok, _, err) = etwkit(&[
        "export",
        "--overwrite",
        "-o",
        notes.to_str().unwrap(),
        second.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("not a dataset"), "{err}");
    assert_eq!(tree(&notes).len(), 1);

    // Asked: replaced by the new dataset alone.
    let (ok, summary, err) = etwkit(&[
        "export",
        "--overwrite",
        "--format",
        "json",
        "-o",
        out_s,
        second.to_str().unwrap(),
    ]);
    assert!(ok, "export --overwrite: {err}");
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let after = tree(&out);
    assert!(
        !after.keys().any(|k| k.starts_with(old_table)),
        "a typed table of the earlier export stayed: {:?}",
        after.keys()
    );
    let tables = summary["tables"].as_object().unwrap();
    assert_eq!(after.len(), tables.len() + 1, "{:?}", after.keys());
    let (ok, stats, _) = etwkit(&["stats", "--format", "json", second.to_str().unwrap()]);
    assert!(ok);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let counts = check(&py, &["counts", out_s]);
    let name = second.file_name().unwrap().to_str().unwrap();
    assert_eq!(counts.as_object().unwrap().len(), 1, "{counts}");
    let have: BTreeMap<String, u64> = serde_json::from_value(counts[name].clone()).unwrap();
    let want: BTreeMap<String, u64> = serde_json::from_value(stats["providers"].clone()).unwrap();
    assert_eq!(have, want);
    assert!(hidden_beside(&out).is_empty(), "{:?}", hidden_beside(&out));

    // A trace kept inside the dataset: replacing the dataset would delete it, so it is refused.
    let kept = out.join("trace.etl");
    std::fs::copy(&second, &kept).unwrap();
    let (ok, _, err) = etwkit(&["export", "--overwrite", "-o", out_s, kept.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("trace.etl") && err.contains("not replaced"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&kept).unwrap(),
        std::fs::read(&second).unwrap()
    );
}

/// A write that fails half way (here: the file-size limit of `ulimit -f`, with SIGXFSZ ignored so
/// the write returns EFBIG) ends the export with exit code 1 and an error naming the file as the
/// dataset would have held it — not the hidden staging directory, gone by then — and leaves
/// neither the dataset nor its staging directory behind.
#[test]
fn a_failed_write_names_the_dataset_file_and_leaves_nothing() {
    let Some(dir) = samples("a_failed_write_names_the_dataset_file_and_leaves_nothing") else {
        return;
    };
    let parent = tmp("export-write-error");
    std::fs::create_dir_all(&parent).unwrap();
    let out = parent.join("ds");
    let input = dir.join("perfview_net.4.5.x86.etl");
    let o = Command::new("sh")
        .args(["-c", "trap '' XFSZ; ulimit -f 64; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_etwkit"))
        .args([
            "export",
            "-o",
            out.to_str().unwrap(),
            input.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty());
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("etwkit: writing {}/", out.display()))
            && last.contains(".parquet"),
        "{err}"
    );
    assert!(last.contains("os error 27"), "{err}");
    assert!(!err.contains(".partial"), "{err}");
    assert!(!out.exists());
    assert!(hidden_beside(&out).is_empty(), "{:?}", hidden_beside(&out));
}

/// etwkit's Parquet writer (`etwkit::export::pq`) on what the samples do not reach: a text column
/// whose dictionary outgrows its limit within a row group (the rest of the chunk goes plain),
/// nulls in every column, negative integers and floats with statistics, a list of text with null
/// lists, empty lists and null items, booleans, three row groups. DuckDB reads it back: counts,
/// sums, distinct values, each row group's statistics, and filters that pruning must not break.
#[test]
fn pq_writer_edge_cases_read_back_by_duckdb() {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use etwkit::export::pq::{FileWriter, Options};

    let Some(py) = duckdb_python("pq_writer_edge_cases_read_back_by_duckdb") else {
        return;
    };
    let dir = tmp("pq_edge");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("edge.parquet");
    let item = Arc::new(Field::new("item", DataType::Utf8, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("s", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("l", DataType::List(item.clone()), true),
    ]));
    let opts = Options {
        statistics: ["s", "n", "f"].iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    };
    let mut w =
        FileWriter::new(std::fs::File::create(&path).unwrap(), schema.clone(), opts).unwrap();
    // Expected aggregates, computed as the rows are made.
    let (mut rows, mut s_count, mut n_count, mut n_sum, mut f_count) = (0i64, 0i64, 0i64, 0i64, 0);
    let (mut b_true, mut items, mut null_items, mut null_lists) = (0i64, 0i64, 0i64, 0i64);
    for batch in 0..30i64 {
        let n = 10_000;
        let s: Vec<Option<String>> = (0..n)
            .map(|i| {
                (i % 7 != 0).then(|| format!("value {i} of batch {batch} {}", "x".repeat(i % 50)))
            })
            .collect();
        let ints: Vec<Option<i64>> = (0..n)
            .map(|i| (i % 5 != 0).then_some(i as i64 * (batch - 15)))
            .collect();
        let floats: Vec<Option<f64>> = (0..n)
            .map(|i| (i % 3 != 0).then_some(i as f64 / 7.0 - 500.0))
            .collect();
        let bools: Vec<Option<bool>> = (0..n)
            .map(|i| (i % 11 != 0).then_some(i % 2 == 0))
            .collect();
        let mut lb = ListBuilder::new(StringBuilder::new()).with_field(item.clone());
        for i in 0..n {
            match i % 4 {
                0 => {
                    lb.append(false);
                    null_lists += 1;
                }
                1 => lb.append(true),
                _ => {
                    for k in 0..i % 13 {
                        if k == 3 {
                            lb.values().append_null();
                            null_items += 1;
                        } else {
                            lb.values().append_value(format!("0x{:x}", i * 16 + k));
                        }
                        items += 1;
                    }
                    lb.append(true);
                }
            }
        }
        rows += n as i64;
        s_count += s.iter().flatten().count() as i64;
        n_count += ints.iter().flatten().count() as i64;
        n_sum += ints.iter().flatten().sum::<i64>();
        f_count += floats.iter().flatten().count() as i64;
        b_true += bools.iter().filter(|b| **b == Some(true)).count() as i64;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(s)),
            Arc::new(Int64Array::from(ints)),
            Arc::new(Float64Array::from(floats)),
            Arc::new(BooleanArray::from(bools)),
            Arc::new(lb.finish()),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), columns).unwrap())
            .unwrap();
    }
    w.close().unwrap();
    let f = path.to_str().unwrap();
    let got = check(
        &py,
        &[
            "sql",
            &format!(
                "SELECT count(*), count(s), count(DISTINCT s), count(n), sum(n), count(f), \
                 count(*) FILTER (WHERE b), sum(len(l)), count(*) FILTER (WHERE l IS NULL), \
                 (SELECT count(*) FROM (SELECT unnest(l) AS x FROM '{f}') WHERE x IS NULL), \
                 count(*) FILTER (WHERE f < -499.9), count(*) FILTER (WHERE n = -149985), \
                 count(*) FILTER (WHERE s = 'value 9998 of batch 29 ' || repeat('x', 48)) \
                 FROM '{f}'"
            ),
        ],
    );
    let want = serde_json::json!([[
        rows, s_count, s_count, n_count, n_sum, f_count, b_true, items, null_lists, null_items, 0,
        1, 1
    ]]);
    assert_eq!(got, want, "DuckDB's aggregates of the written file");
    // Each row group's statistics are its own values (check_parquet's check on this file).
    let stats = check(
        &py,
        &[
            "sql",
            &format!(
                "SELECT row_group_id, path_in_schema, stats_min_value, stats_max_value, \
                 stats_null_count FROM parquet_metadata('{f}') \
                 WHERE path_in_schema IN ('s', 'n', 'f') ORDER BY 1, 2"
            ),
        ],
    );
    let groups = stats.as_array().unwrap();
    assert_eq!(
        groups.len(),
        9,
        "three row groups of three columns: {stats}"
    );
    for g in groups {
        let (id, col) = (g[0].as_i64().unwrap(), g[1].as_str().unwrap());
        let q = format!(
            "SELECT min({col})::VARCHAR, max({col})::VARCHAR, count(*) - count({col}) \
             FROM read_parquet('{f}', file_row_number=true) \
             WHERE file_row_number >= {a} AND file_row_number < {b}",
            a = id * 131_072,
            b = (id + 1) * 131_072
        );
        let want = check(&py, &["sql", &q]);
        let want = &want[0];
        assert_eq!(g[2], want[0], "row group {id} {col} min");
        assert_eq!(g[3], want[1], "row group {id} {col} max");
        assert_eq!(g[4], want[2], "row group {id} {col} null count");
    }
}
