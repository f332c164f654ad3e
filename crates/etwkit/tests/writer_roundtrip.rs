//! Round trip: relogging every sample unfiltered and reading the result gives the same records as
//! reading the original (header fields, payload, extended data, UTC timestamps, raw bytes), in the
//! same order, and a header that says the file was closed cleanly.

mod common;

use std::ops::ControlFlow;

use etwkit::etl::relog::{relog_options, relog_to_file, RelogFilter};
use etwkit::etl::writer::closed_cleanly;
use etwkit::etl::{EtlFile, Order};
use etwkit::event::flags;
use etwkit::EventRecord;

/// Everything a record carries, as read. PROCESSOR_INDEX is a property of the buffer (the writer
/// always sets PROC_INDEX, Win7 files do not), so it is left out of the flags.
type Rec = (EventRecord<'static>, Vec<u8>);

fn records(f: &EtlFile) -> (Vec<Rec>, etwkit::etl::ReadSummary) {
    let mut v = Vec::new();
    let mut first = true;
    let s = f.for_each(Order::Time, |r| {
        // The logfile header record is the writer's own, not copied.
        if first && r.buffer_index == 0 && r.hook_id == Some(0) {
            first = false;
            return ControlFlow::Continue(());
        }
        let mut e = r.event.to_owned_record();
        e.flags &= !flags::PROCESSOR_INDEX;
        v.push((e, r.raw.to_vec()));
        ControlFlow::Continue(())
    });
    // The time merge orders simultaneous records of different CPUs by buffer rank, which the copy
    // changes (it packs each CPU's records into fresh buffers); the format does not define that order.
    // So compare per CPU: a stable sort by (time, cpu) keeps each CPU's order, ties included.
    v.sort_by_key(|(e, _)| (e.raw_timestamp, e.cpu));
    (v, s)
}

#[test]
fn relog_round_trips_every_sample() {
    let Some(files) = common::all_samples("relog_round_trips_every_sample") else {
        return;
    };
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_roundtrip");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut total = 0usize;
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let f = EtlFile::open(path).unwrap();
        let out = tmp.join(&name);
        let summary = relog_to_file(
            std::slice::from_ref(&f),
            &RelogFilter::default(),
            &out,
            relog_options(std::slice::from_ref(&f)),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = EtlFile::open(&out).unwrap();
        let (a, sa) = records(&f);
        let (b, sb) = records(&g);
        assert_eq!(sa.bad_records, 0, "{name}: original has bad records");
        assert_eq!(
            sb.bad_records + sb.bad_buffers,
            0,
            "{name}: {:?}",
            sb.issues
        );
        assert!(sb.issues.is_empty(), "{name}: {:?}", sb.issues);
        assert_eq!(a.len(), b.len(), "{name}: record count");
        assert_eq!(
            summary.written.records as usize,
            a.len(),
            "{name}: written count"
        );
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x.0, y.0, "{name}: record {i} differs");
            assert_eq!(x.1, y.1, "{name}: record {i} raw bytes differ");
        }
        // Header: closed cleanly, every buffer counted, clock and pointer size carried over.
        let h = g.header();
        assert!(closed_cleanly(h), "{name}: not closed cleanly");
        assert!(h.closed_cleanly());
        assert_eq!(
            h.buffers_written as u64, sb.buffers,
            "{name}: BuffersWritten"
        );
        assert_eq!(h.buffers_written, summary.written.buffers, "{name}");
        assert_eq!(g.clock(), f.clock(), "{name}: clock");
        assert_eq!(
            h.logger_pointer_size(),
            f.header().logger_pointer_size(),
            "{name}"
        );
        assert_eq!(h.logger_name, f.header().logger_name, "{name}");
        assert_eq!(h.events_lost, f.header().events_lost, "{name}: EventsLost");
        assert_eq!(
            h.buffers_lost,
            f.header().buffers_lost,
            "{name}: BuffersLost"
        );
        assert!(
            h.number_of_processors >= f.header().number_of_processors,
            "{name}"
        );
        // End time: the last record's time.
        if let Some(last) = a.iter().map(|(e, _)| e.timestamp).max() {
            assert_eq!(h.end_time, last, "{name}: EndTime");
        }
        // Every data buffer of the copy belongs to one CPU and is in time order.
        for bi in g.buffers().iter().skip(1) {
            let data = g.buffer_data(bi).unwrap();
            let mut prev = i64::MIN;
            let mut s = etwkit::etl::ReadSummary::default();
            let _ = g.walk_buffer(bi, &data, &mut s, &mut |r| {
                assert_eq!(r.cpu, bi.header.cpu());
                assert!(
                    r.raw_timestamp >= prev,
                    "{name}: buffer {} goes back in time",
                    bi.index
                );
                prev = r.raw_timestamp;
                ControlFlow::Continue(())
            });
        }
        total += a.len();
        let _ = std::fs::remove_file(&out);
    }
    // 461,603 records in the 42 samples, minus one logfile header each.
    assert_eq!(total, 461_603 - files.len());
}
