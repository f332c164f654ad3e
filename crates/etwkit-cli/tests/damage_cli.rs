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
        (buffer size 2779096485, processors 2779096485, end time -6510615555426900571 (FILETIME \
        outside 1990..2200), pointer size 2779096485, CPU speed 2779096485 MHz): its fields are \
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
            "buffer_size",
            "number_of_processors",
            "end_time",
            "pointer_size",
            "cpu_speed_mhz"
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
        .starts_with("logfile header damaged (buffer size 2779096485, "));

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
