//! Damage is named, not believed: a logfile header with bytes written over it, a heap trace cut
//! short, and the read issues `info`, `stats` and `heap --report` print on stderr. Real samples, and
//! damaged copies made here at run time in a temporary folder (never kept).

mod common;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use common::{etwkit, samples};
use etwkit::etl::{EtlFile, Order};
use serde_json::Value;

/// A fresh folder for one test's damaged copies, under the system's temporary folder; removed
/// when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("etwkit-damage-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Where the TRACE_LOGFILE_HEADER of a file with a 64-bit header starts: the first buffer's
/// header (0x48 bytes), then the SYSTEM64 record header (0x20).
const HEADER_PAYLOAD: usize = 0x48 + 0x20;

/// A copy of `from` with 0xA5 bytes over `len` bytes of its logfile header from `at` (offsets
/// into the TRACE_LOGFILE_HEADER, 64-bit layout).
fn damage_header(from: &Path, to: &Path, at: usize, len: usize) {
    let mut d = std::fs::read(from).unwrap();
    assert_eq!(
        u32::from_le_bytes(d[0x48..0x4C].try_into().unwrap()) >> 16,
        0xC002,
        "a SYSTEM64 logfile header"
    );
    d[HEADER_PAYLOAD + at..HEADER_PAYLOAD + at + len].fill(0xA5);
    std::fs::write(to, d).unwrap();
}

/// Every record's (converted, raw) timestamps in file order.
fn timestamps(f: &EtlFile) -> Vec<(i64, i64)> {
    let mut v = Vec::new();
    f.for_each(Order::File, |r| {
        v.push((r.timestamp, r.raw_timestamp));
        ControlFlow::Continue(())
    });
    v
}

/// Offsets (inside the buffer) of the records of buffer `index`.
fn record_offsets(f: &EtlFile, index: usize) -> Vec<usize> {
    let mut v = Vec::new();
    f.for_each(Order::File, |r| {
        if r.buffer_index == index {
            v.push(r.offset);
        }
        ControlFlow::Continue(())
    });
    v
}

/// The line of `text` that starts with `label`.
fn line<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{text}"))
}

#[test]
fn no_sample_header_is_damaged_nor_a_relog_of_them() {
    let test = "no_sample_header_is_damaged_nor_a_relog_of_them";
    let Some(dir) = samples(test) else {
        return;
    };
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "etl"))
        .collect();
    all.sort();
    assert!(all.len() >= 42, "{} samples", all.len());
    for p in &all {
        let f = EtlFile::open(p).unwrap();
        assert_eq!(f.header_damage(), [], "{}", p.display());
        assert_eq!(f.header_damage_issue(), None, "{}", p.display());
        assert!(!f.clock_damaged(), "{}", p.display());
    }
    // Relogged by Windows (pktmonvpn, stmcast: 'Relogger'; perfview: merged), and by etwkit: one
    // file (its header and clock kept) and two files 16 years apart (2010 and 2026; a FILETIME
    // clock from the earliest start).
    let tmp = Scratch::new("relogs");
    let one = tmp.path("one.etl");
    let years = tmp.path("years.etl");
    for (inputs, out) in [
        (vec!["stmcast_PktMon.etl"], &one),
        (vec!["tx_Process.etl", "stmcast_PktMon.etl"], &years),
    ] {
        let mut args = vec!["relog".to_string()];
        args.extend(inputs.iter().map(|n| s(&dir.join(n)).to_string()));
        args.extend(["-o".to_string(), s(out).to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, _, err) = etwkit(&args);
        assert!(ok, "{err}");
    }
    for (p, start, end) in [
        (&one, "2026-01-17T10:33:03", "2026-"),
        (&years, "2010-10-29T19:07:49", "2026-01-17"),
    ] {
        let (ok, out, err) = etwkit(&["info", s(p), "--format", "json"]);
        assert!(ok, "{err}");
        assert!(err.is_empty(), "{}: {err}", p.display());
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["damaged_fields"],
            serde_json::json!([]),
            "{}",
            p.display()
        );
        assert!(
            v["start_time_utc"].as_str().unwrap().starts_with(start),
            "{v}"
        );
        assert!(v["end_time_utc"].as_str().unwrap().starts_with(end), "{v}");
        assert_eq!(v["clock_damaged"], false);
    }
    let f = EtlFile::open(&years).unwrap();
    assert_eq!(f.header_damage(), []);
    let h = f.header();
    assert!(h.end_time - h.start_time > 15 * 365 * 864_000_000_000);
}

#[test]
fn a_damaged_header_is_named_and_every_event_keeps_its_timestamp() {
    let test = "a_damaged_header_is_named_and_every_event_keeps_its_timestamp";
    let Some(dir) = samples(test) else {
        return;
    };
    let tmp = Scratch::new("header");
    let whole = dir.join("stmcast_PktMon.etl");
    let bad = tmp.path("stmcast_damaged.etl");
    // BufferSize .. CpuSpeedInMHz (0x00..0x38): sizes, counts, EndTime; not the clock's fields.
    damage_header(&whole, &bad, 0, 0x38);
    let want = "etwkit: warning: file offset 0 (buffer 0, record at 0x48): logfile header damaged \
        (pointer size 2779096485, processors 2779096485, CPU speed 2779096485 MHz, buffer size \
        2779096485, end time -6510615555426900571 (FILETIME outside 1990..2200)): its fields are \
        not used";

    let (ok, out, err) = etwkit(&["info", s(&bad)]);
    assert!(ok, "{err}");
    assert_eq!(err.trim_end(), want);
    assert_eq!(
        line(&out, "pointer size"),
        "pointer size         unknown (header layout 64-bit)"
    );
    assert_eq!(
        line(&out, "processors"),
        "processors           unknown (unknown MHz)"
    );
    assert_eq!(line(&out, "buffer size"), "buffer size          unknown");
    assert_eq!(line(&out, "end time"), "end time             unknown");
    assert_eq!(
        line(&out, "start time"),
        "start time           2026-01-17T10:33:03.2242602Z"
    );
    assert!(!out.contains("1601-"), "{out}");

    let (ok, out, err) = etwkit(&["info", s(&bad), "--format", "json"]);
    assert!(ok, "{err}");
    assert_eq!(err.trim_end(), want);
    let v: Value = serde_json::from_str(&out).unwrap();
    for k in [
        "pointer_size",
        "number_of_processors",
        "cpu_speed_mhz",
        "buffer_size",
        "end_time",
        "end_time_utc",
    ] {
        assert_eq!(v[k], Value::Null, "{k}: {v}");
    }
    assert_eq!(
        v["damaged_fields"],
        serde_json::json!([
            "pointer_size",
            "number_of_processors",
            "cpu_speed_mhz",
            "buffer_size",
            "end_time"
        ])
    );
    assert_eq!(v["start_time_utc"], "2026-01-17T10:33:03.2242602Z");
    assert_eq!(v["perf_freq"], 10_000_000);
    assert_eq!(v["clock_damaged"], false);
    assert_eq!(v["closed_cleanly"], false);
    // Undamaged, the same fields are facts.
    let (ok, out, err) = etwkit(&["info", s(&whole), "--format", "json"]);
    assert!(ok && err.is_empty(), "{err}");
    let w: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(w["pointer_size"], 8);
    assert_eq!(w["number_of_processors"], 16);
    assert_eq!(w["end_time_utc"], "2026-01-17T10:36:09.4447542Z");

    // stats: the issue in its JSON and on stderr; no end time.
    let (ok, out, err) = etwkit(&["stats", s(&bad), "--raw", "--format", "json"]);
    assert!(ok, "{err}");
    assert_eq!(err.trim_end(), want);
    let st: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(st["records"], 31068);
    assert_eq!(st["end_time"], Value::Null);
    assert_eq!(st["pointer_size"], 8, "the header layout's");
    let issues = st["issues"].as_array().unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert!(issues[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("logfile header damaged (pointer size 2779096485, "));

    // Every event is still read, at exactly the time of the undamaged file.
    let (a, b) = (EtlFile::open(&whole).unwrap(), EtlFile::open(&bad).unwrap());
    assert!(!b.clock_damaged());
    assert_eq!(a.clock(), b.clock());
    let (ta, tb) = (timestamps(&a), timestamps(&b));
    assert_eq!(ta.len(), 31068);
    assert!(ta == tb, "timestamps differ");
    assert!(
        ta.iter().all(|&(t, raw)| t != raw),
        "QPC converted to FILETIME"
    );
    // dump reads it all the same, and says why the header is not believed.
    let (ok, dumped, err) = etwkit(&["dump", s(&bad), "--raw", "--format", "csv"]);
    assert!(ok, "{err}");
    assert_eq!(err.trim_end(), want);
    let (ok, original, _) = etwkit(&["dump", s(&whole), "--raw", "--format", "csv"]);
    assert!(ok);
    assert_eq!(dumped.lines().count(), original.lines().count());
    assert!(dumped == original, "dump of the damaged copy differs");
}

#[test]
fn a_damaged_clock_falls_back_to_raw_timestamps_and_says_so() {
    let test = "a_damaged_clock_falls_back_to_raw_timestamps_and_says_so";
    let Some(dir) = samples(test) else {
        return;
    };
    let tmp = Scratch::new("clock");
    let whole = dir.join("pktmonvpn_PktMon.etl");
    let bad = tmp.path("pktmonvpn_clock.etl");
    // StartTime (0x108 in the 64-bit layout).
    damage_header(&whole, &bad, 0x108, 8);
    let f = EtlFile::open(&bad).unwrap();
    assert!(f.clock_damaged());
    let ts = timestamps(&f);
    assert_eq!(ts.len(), 4601);
    assert!(ts.iter().all(|&(t, raw)| t == raw), "shown raw");
    let raw_whole: Vec<i64> = timestamps(&EtlFile::open(&whole).unwrap())
        .into_iter()
        .map(|t| t.1)
        .collect();
    assert_eq!(ts.iter().map(|t| t.1).collect::<Vec<_>>(), raw_whole);

    let (ok, out, err) = etwkit(&["info", s(&bad)]);
    assert!(ok, "{err}");
    assert_eq!(
        err.trim_end(),
        "etwkit: warning: file offset 0 (buffer 0, record at 0x48): logfile header damaged \
         (start time -6510615555426900571 (FILETIME outside 1990..2200)): its fields are not \
         used; timestamps are shown raw"
    );
    assert_eq!(line(&out, "start time"), "start time           unknown");
    assert!(line(&out, "clock").ends_with("(not used: timestamps are shown raw)"));
    // The end time is sound and still shown.
    assert_eq!(
        line(&out, "end time"),
        "end time             2021-06-01T16:11:11.1058559Z"
    );
}

#[path = "../../etwkit/tests/heap_common/windows_etl.rs"]
mod windows_etl;

/// `heap --report FILE --format json` and the table: (json, table, stderr of the JSON run).
fn heap_report(p: &Path) -> (Value, String, String) {
    let (ok, out, err) = etwkit(&["heap", "--report", s(p), "--format", "json"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1, "one JSON line: {out}");
    let (ok, table, err2) = etwkit(&["heap", "--report", s(p)]);
    assert!(ok, "{err2}");
    assert_eq!(err, err2, "the same warnings for both formats");
    (serde_json::from_str(&out).unwrap(), table, err)
}

fn notes(r: &Value) -> Vec<String> {
    r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_cut_heap_trace_names_its_missing_buffers_and_unreadable_parts() {
    // ../shared holds no heap trace: a Windows-style one (HeapTraceProvider Alloc/Free with
    // StackWalk stacks) is written here: 130,000 allocations (every other one freed) in 64 KiB
    // buffers, about 23 MB.
    let tmp = Scratch::new("heap");
    let whole = tmp.path("heap_whole.etl");
    windows_etl::write_storm(&whole, 130_000, 10_000);
    let f = EtlFile::open(&whole).unwrap();
    let written = f.buffers().len();
    assert_eq!(f.header().buffers_written as usize, written);
    assert!(written > 300, "{written} buffers");
    let (r, table, err) = heap_report(&whole);
    assert!(err.is_empty(), "{err}");
    assert_eq!(r["exact"], true, "{r}");
    assert_eq!(r["outstanding_total"], 65_000);
    assert_eq!(r["lost_events"], 0);
    assert_eq!(r["unreadable_records"], 0);
    assert!(table.contains("Figures are exact"), "{table}");

    // Cut to about 5 MB, inside the 77th buffer: 12 bytes into its first record past 1000 bytes
    // (its header there, its payload not).
    let bytes = std::fs::read(&whole).unwrap();
    let b = &f.buffers()[76];
    let rec = *record_offsets(&f, 76).iter().find(|&&o| o > 1000).unwrap();
    let at = b.file_offset as usize + rec + 12;
    let held = b.index + 1;
    let cut = tmp.path("heap_cut.etl");
    std::fs::write(&cut, &bytes[..at]).unwrap();
    let (r, table, err) = heap_report(&cut);
    let missing = format!(
        "the file holds {held} of the {written} buffers the logger wrote: the events of the other {} are not in it, so blocks shown outstanding may have been freed",
        written - held
    );
    let unreadable =
        "unreadable parts skipped (buffers: 1, records: 1): counts and bytes are lower bounds";
    assert_eq!(notes(&r), [missing.clone(), unreadable.to_string()], "{r}");
    assert_eq!(r["exact"], false);
    // The logger lost nothing: unreadable parts are not lost events.
    assert_eq!(r["lost_events"], 0);
    assert_eq!(r["unreadable_buffers"], 1);
    assert_eq!(r["unreadable_records"], 1);
    assert_eq!(r["buffers_missing"], written - held);
    for n in [&missing, unreadable] {
        assert!(
            table.contains(&format!("  - {n}\n")),
            "{n} not in:\n{table}"
        );
    }
    assert!(!table.contains("events were lost"), "{table}");
    // stderr names each damaged spot, as stats finds them.
    let (ok, out, stats_err) = etwkit(&["stats", s(&cut), "--raw", "--format", "json"]);
    assert!(ok);
    assert_eq!(stats_err, err, "stats and heap name the same spots");
    let st: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (st["bad_buffers"].as_u64(), st["bad_records"].as_u64()),
        (Some(1), Some(1))
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    let off = b.file_offset;
    assert_eq!(
        lines[0],
        format!(
            "etwkit: warning: file offset {off} (buffer {}): file ends inside this buffer: {} of 65536 bytes present",
            b.index,
            rec + 12
        )
    );
    assert!(
        lines[1].starts_with(&format!(
            "etwkit: warning: file offset {off} (buffer {}, record at 0x{rec:x}): ",
            b.index
        )),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[2],
        format!(
            "etwkit: warning: file offset {at}: file holds {held} of the {written} buffers the logger wrote"
        )
    );
    assert_eq!(
        lines[3],
        "etwkit: warning: 1 bad buffers and 1 bad records skipped; everything else was read"
    );
}

#[test]
fn the_loggers_losses_and_unreadable_records_stay_apart() {
    let test = "the_loggers_losses_and_unreadable_records_stay_apart";
    let Some(dir) = samples(test) else {
        return;
    };
    // AMSITrace: the logger lost 3 events (its header's EventsLost); no heap events.
    let whole = dir.join("etlparser_AMSITrace.etl");
    let (r, _, err) = heap_report(&whole);
    assert!(err.is_empty(), "{err}");
    assert_eq!(r["lost_events"], 3);
    assert_eq!(r["unreadable_records"], 0);
    assert!(notes(&r).contains(&"3 events were lost: counts and bytes are lower bounds".into()));
    // Cut inside its third buffer's last record: still the logger's 3, and the unreadable parts
    // beside them.
    let f = EtlFile::open(&whole).unwrap();
    let b = &f.buffers()[2];
    let tmp = Scratch::new("amsi");
    let cut = tmp.path("amsi_cut.etl");
    let at = b.file_offset as usize + record_offsets(&f, 2).last().unwrap() + 12;
    std::fs::write(&cut, &std::fs::read(&whole).unwrap()[..at]).unwrap();
    let (r, table, err) = heap_report(&cut);
    assert_eq!(r["lost_events"], 3);
    assert_eq!(r["unreadable_buffers"], 1);
    assert_eq!(r["unreadable_records"], 1);
    assert_eq!(r["buffers_missing"], f.buffers().len() - 3);
    let n = notes(&r);
    assert!(
        n.contains(&"3 events were lost: counts and bytes are lower bounds".into()),
        "{n:?}"
    );
    assert!(
        n.contains(
            &"unreadable parts skipped (buffers: 1, records: 1): counts and bytes are lower bounds"
                .into()
        ),
        "{n:?}"
    );
    assert!(table.contains("  - 3 events were lost"), "{table}");
    assert!(
        err.contains(&format!(
            "etwkit: warning: file offset {} (buffer 2): file ends inside this buffer",
            b.file_offset
        )),
        "{err}"
    );
}

#[test]
fn info_stats_and_heap_name_read_issues_on_stderr_as_dump_does() {
    let test = "info_stats_and_heap_name_read_issues_on_stderr_as_dump_does";
    let Some(dir) = samples(test) else {
        return;
    };
    // tx_KernelNetwork (8 KiB buffers) cut 12 bytes into the first record past 2000 bytes of its
    // 40th buffer: a cut buffer, a cut record, buffers missing.
    let whole = dir.join("tx_KernelNetwork.etl");
    let f = EtlFile::open(&whole).unwrap();
    let written = f.buffers().len();
    let b = &f.buffers()[39];
    let rec = *record_offsets(&f, 39).iter().find(|&&o| o > 2000).unwrap();
    let at = b.file_offset as usize + rec + 12;
    let tmp = Scratch::new("issues");
    let cut = tmp.path("kernelnetwork_cut.etl");
    std::fs::write(&cut, &std::fs::read(&whole).unwrap()[..at]).unwrap();
    let off = b.file_offset;
    let want = format!(
        "etwkit: warning: file offset {off} (buffer 39): file ends inside this buffer: {} of 8192 bytes present\n\
         etwkit: warning: file offset {off} (buffer 39, record at 0x{rec:x}): ",
        rec + 12
    );
    let (ok, dumped, dump_err) = etwkit(&["dump", s(&cut), "--raw", "--format", "json"]);
    assert!(ok, "{dump_err}");
    assert!(dump_err.starts_with(&want), "{dump_err}");
    let lines: Vec<&str> = dump_err.lines().collect();
    assert_eq!(lines.len(), 4, "{dump_err}");
    assert_eq!(
        lines[2],
        format!("etwkit: warning: file offset {at}: file holds 40 of the {written} buffers the logger wrote")
    );
    assert_eq!(
        lines[3],
        "etwkit: warning: 1 bad buffers and 1 bad records skipped; everything else was read"
    );
    assert!(!dumped.is_empty());

    // info: the same lines on stderr; stdout only the header.
    let (ok, out, err) = etwkit(&["info", s(&cut)]);
    assert!(ok, "{err}");
    assert_eq!(err, dump_err);
    assert!(!out.contains("warning"), "{out}");
    assert_eq!(
        line(&out, "buffers written"),
        format!("buffers written      {written}")
    );
    let (ok, out, err) = etwkit(&["info", s(&cut), "--format", "json"]);
    assert!(ok);
    assert_eq!(err, dump_err);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["closed_cleanly"], false);
    assert_eq!(v["buffers_in_file"], 40);

    // stats: the same lines; its JSON keeps the issues, its text no longer repeats them.
    let (ok, out, err) = etwkit(&["stats", s(&cut), "--format", "json"]);
    assert!(ok);
    assert_eq!(err, dump_err);
    let st: Value = serde_json::from_str(&out).unwrap();
    let reasons: Vec<&str> = st["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(
        reasons[2],
        format!("file holds 40 of the {written} buffers the logger wrote")
    );
    assert_eq!(
        (st["bad_buffers"].as_u64(), st["bad_records"].as_u64()),
        (Some(1), Some(1))
    );
    let (ok, out, err) = etwkit(&["stats", s(&cut)]);
    assert!(ok);
    assert_eq!(err, dump_err);
    assert!(
        !out.contains("issue at") && !out.contains("warning"),
        "{out}"
    );
    assert!(
        out.contains("damaged: 1 bad buffers, 1 bad records"),
        "{out}"
    );

    // heap --report: the same lines, and no heap events in this file.
    let (r, _, err) = heap_report(&cut);
    assert_eq!(err, dump_err);
    assert_eq!(r["unreadable_records"], 1);

    // The whole file: nothing on stderr from any of them.
    for args in [
        vec!["info", s(&whole)],
        vec!["stats", s(&whole), "--raw"],
        vec!["heap", "--report", s(&whole)],
    ] {
        let (ok, _, err) = etwkit(&args);
        assert!(ok && err.is_empty(), "{args:?}: {err}");
    }
}

/// A time-zone bias no zone has (outside UTC+14..UTC-12) is damage like the other fields: named
/// in the warning, `unknown` in `info`, null in its JSON, and not copied by `relog` (which writes
/// a zero bias and no zone names instead); the timestamps, which never use it, stay as they were.
#[test]
fn a_damaged_time_zone_is_not_shown() {
    let test = "a_damaged_time_zone_is_not_shown";
    let Some(dir) = samples(test) else {
        return;
    };
    let tmp = Scratch::new("time-zone");
    let whole = dir.join("stmcast_PktMon.etl");
    let bad = tmp.path("stmcast_tz.etl");
    // TIME_ZONE_INFORMATION.Bias of the 64-bit layout.
    damage_header(&whole, &bad, 0x48, 4);
    let (ok, out, err) = etwkit(&["info", s(&whole)]);
    assert!(ok, "{err}");
    assert_eq!(
        line(&out, "time zone"),
        "time zone            bias -60 min (@tzres.dll,-322 / @tzres.dll,-321)"
    );
    let (ok, out, err) = etwkit(&["info", s(&bad)]);
    assert!(ok, "{err}");
    assert!(
        err.contains("logfile header damaged (time-zone bias -1515870811 minutes)"),
        "{err}"
    );
    assert_eq!(line(&out, "time zone"), "time zone            unknown");
    let (ok, out, _) = etwkit(&["info", s(&bad), "--format", "json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["bias_minutes"], Value::Null);
    assert_eq!(v["damaged_fields"], serde_json::json!(["bias_minutes"]));
    assert_eq!(v["clock_damaged"], false);
    assert_eq!(
        timestamps(&EtlFile::open(&bad).unwrap()),
        timestamps(&EtlFile::open(&whole).unwrap())
    );
    let copy = tmp.path("copy.etl");
    let (ok, _, err) = etwkit(&["relog", s(&bad), "-o", s(&copy)]);
    assert!(ok, "{err}");
    let (ok, out, err) = etwkit(&["info", s(&copy)]);
    assert!(ok && err.is_empty(), "{err}");
    assert_eq!(
        line(&out, "time zone"),
        "time zone            bias 0 min ( / )"
    );
}
