//! A file cut exactly at a buffer boundary (every buffer present is whole) is reported as truncated:
//! an issue naming how many of the logger's buffers it holds, and `closed_cleanly` false — for every
//! boundary of real samples. A file cut inside a buffer says the same beside the cut buffer's own
//! issue.

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use etwkit::etl::{stats::file_stats, EtlFile, Order};

/// A whole sample the tests cut: its bytes, the file, and its records per buffer.
struct Whole {
    name: &'static str,
    bytes: Vec<u8>,
    file: EtlFile,
    per_buffer: BTreeMap<usize, u64>,
}

/// The samples the tests cut, each whole (closed cleanly, every buffer the logger wrote present);
/// `None` when ../shared is missing.
fn whole_samples(test: &str) -> Option<Vec<Whole>> {
    let mut out = Vec::new();
    for name in [
        "perfview_gcevents.etl",
        "tx_WsRm01.etl",
        "krabsetw_powershell.etl",
        "pktmonvpn_PktMon.etl",
    ] {
        let p = common::sample(name, test)?;
        let bytes = std::fs::read(&p).unwrap();
        let file = EtlFile::open(&p).unwrap();
        assert!(file.closed_cleanly(), "{name}");
        assert_eq!(file.missing_buffers(), 0);
        assert_eq!(
            file.header().buffers_written as usize,
            file.buffers().len(),
            "{name}"
        );
        let mut per_buffer: BTreeMap<usize, u64> = BTreeMap::new();
        file.for_each(Order::File, |r| {
            *per_buffer.entry(r.buffer_index).or_default() += 1;
            ControlFlow::Continue(())
        });
        out.push(Whole {
            name,
            bytes,
            file,
            per_buffer,
        });
    }
    Some(out)
}

#[test]
fn samples_cut_at_every_buffer_boundary_report_truncation() {
    let mut cuts = 0;
    let Some(samples) = whole_samples("samples_cut_at_every_buffer_boundary") else {
        return;
    };
    for Whole {
        name,
        bytes,
        file: whole,
        per_buffer,
    } in samples
    {
        let written = whole.header().buffers_written as usize;
        for k in 1..written {
            let cut = whole.buffers()[k].file_offset as usize;
            let f = EtlFile::from_vec(bytes[..cut].to_vec()).unwrap();
            assert_eq!(f.buffers().len(), k);
            assert_eq!(f.missing_buffers(), written - k, "{name} cut {k}");
            assert!(!f.closed_cleanly(), "{name} cut {k}");
            let want = format!("file holds {k} of the {written} buffers the logger wrote");
            let s = file_stats(&f);
            assert!(!s.closed_cleanly, "{name} cut {k}");
            assert!(
                s.issues.iter().any(|i| i.reason == want),
                "{name} cut {k}: {:?}",
                s.issues
            );
            // Everything present is still read.
            let expect: u64 = per_buffer.range(..k).map(|(_, n)| n).sum();
            assert_eq!(s.records, expect, "{name} cut {k}");
            assert_eq!(s.bad_buffers + s.bad_records, 0, "{name} cut {k}");
            cuts += 1;
        }
    }
    assert!(cuts > 30, "{cuts}");
}

#[test]
fn dump_warns_about_a_file_cut_at_a_buffer_boundary() {
    let Some(p) = common::sample("perfview_gcevents.etl", "dump_warns_about_a_file_cut") else {
        return;
    };
    let bytes = std::fs::read(&p).unwrap();
    let whole = EtlFile::open(&p).unwrap();
    let cut = whole.buffers()[2].file_offset as usize;
    let dir = std::env::temp_dir().join(format!("etwkit-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.etl");
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let f = EtlFile::open(&path).unwrap();
    assert!(!f.closed_cleanly());
    let s = f.for_each(Order::Time, |_| ControlFlow::Continue(()));
    assert!(s
        .issues
        .iter()
        .any(|i| i.reason == "file holds 2 of the 5 buffers the logger wrote"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn samples_cut_inside_every_buffer_name_the_buffers_missing_too() {
    let mut cuts = 0;
    let Some(samples) = whole_samples("samples_cut_inside_every_buffer") else {
        return;
    };
    for Whole {
        name,
        bytes,
        file: whole,
        per_buffer,
    } in samples
    {
        let written = whole.header().buffers_written as usize;
        for (k, b) in whole.buffers().iter().enumerate() {
            // Half way through the buffer as it lies in the file.
            let next = whole
                .buffers()
                .get(k + 1)
                .map_or(bytes.len(), |n| n.file_offset as usize);
            let cut = b.file_offset as usize + (next - b.file_offset as usize) / 2;
            let f = EtlFile::from_vec(bytes[..cut].to_vec()).unwrap();
            assert_eq!(f.buffers().len(), k + 1, "{name} cut in {k}");
            assert!(f.buffers()[k].truncated);
            if f.header_error().is_some() {
                // The cut went through the logfile header: its BuffersWritten is not to be trusted.
                assert_eq!((k, f.missing_buffers()), (0, 0), "{name}");
                continue;
            }
            assert_eq!(f.missing_buffers(), written - k - 1, "{name} cut in {k}");
            let s = file_stats(&f);
            assert!(!s.closed_cleanly, "{name} cut in {k}");
            let cut_issue = s
                .issues
                .iter()
                .any(|i| i.reason.starts_with("file ends inside this buffer"));
            let held = format!(
                "file holds {} of the {written} buffers the logger wrote",
                k + 1
            );
            let held_issue = s.issues.iter().any(|i| i.reason == held);
            assert!(cut_issue, "{name} cut in {k}: {:?}", s.issues);
            // The last buffer cut: every buffer the logger wrote is there, in part.
            assert_eq!(
                held_issue,
                k + 1 < written,
                "{name} cut in {k}: {:?}",
                s.issues
            );
            // Every record of the buffers before the cut one is still read, none of later ones.
            let before: u64 = per_buffer.range(..k).map(|(_, n)| n).sum();
            let upto: u64 = per_buffer.range(..=k).map(|(_, n)| n).sum();
            assert!(
                (before..=upto).contains(&s.records),
                "{name} cut in {k}: {} records, {before}..={upto}",
                s.records
            );
            cuts += 1;
        }
    }
    assert!(cuts > 30, "{cuts}");
}
