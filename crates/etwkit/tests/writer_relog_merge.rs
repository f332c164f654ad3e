//! Relogging several files merges them in time order (each record's timestamp converted to the
//! output's FILETIME clock, nothing else changed), and filters keep exactly the matching records.

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use etwkit::etl::record::{message_fields, timestamp_offset};
use etwkit::etl::relog::{relog_options, relog_to_file, RelogFilter};
use etwkit::etl::writer::closed_cleanly;
use etwkit::etl::{EtlFile, Order, Record};
use etwkit::filter::EventFilter;
use etwkit::time::ClockType;
use etwkit::{Guid, HeaderType};

/// The raw bytes with the timestamp zeroed, plus the UTC time and CPU.
fn key(r: &Record<'_>) -> (i64, u16, Vec<u8>) {
    let mut raw = r.raw.to_vec();
    let at = match r.header_type {
        HeaderType::Message => message_fields(r.raw)
            .filter(|m| m.option_flags & 0x08 != 0)
            .and_then(|m| m.timestamp_offset),
        h => timestamp_offset(h),
    };
    if let Some(o) = at {
        raw[o..o + 8].fill(0);
    }
    (r.timestamp, r.cpu, raw)
}

fn all_but_header(f: &EtlFile) -> Vec<(i64, u16, Vec<u8>)> {
    let mut v = Vec::new();
    let mut first = true;
    f.for_each(Order::Time, |r| {
        if !std::mem::take(&mut first) {
            v.push(key(r));
        }
        ControlFlow::Continue(())
    });
    v
}

#[test]
fn several_inputs_merge_in_time_order() {
    let test = "several_inputs_merge_in_time_order";
    let names = [
        "pktmonvpn_PktMon.etl",    // QPC clock, compressed
        "s4_OneDrive_CldFlt0.etl", // FILETIME clock, WPP messages with timestamps
        "etlparser_AMSITrace.etl", // QPC, TraceLogging
        "perfview_primitive-types.etl",
    ];
    let mut files = Vec::new();
    for n in names {
        let Some(p) = common::sample(n, test) else {
            return;
        };
        files.push(EtlFile::open(p).unwrap());
    }
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_relog_merge");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = tmp.join("merged.etl");
    let s = relog_to_file(&files, &RelogFilter::default(), &out, relog_options(&files)).unwrap();
    let g = EtlFile::open(&out).unwrap();
    assert!(closed_cleanly(g.header()));
    assert_eq!(g.header().clock_type, ClockType::SystemTime);
    assert_eq!(g.header().logger_name, "etwkit relog");
    let earliest = files.iter().map(|f| f.header().start_time).min().unwrap();
    assert_eq!(g.header().start_time, earliest);
    assert_eq!(
        g.header().events_lost,
        files.iter().map(|f| f.header().events_lost).sum::<u32>()
    );
    // Every input record (but the logfile headers) is there once, with the same UTC time, CPU and
    // bytes apart from the timestamp field; in time order.
    let mut want: Vec<_> = files.iter().flat_map(all_but_header).collect();
    let got = all_but_header(&g);
    assert_eq!(got.len(), want.len());
    assert_eq!(s.written.records as usize, want.len());
    assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "time order");
    // Everything but the FILETIME-clock input had its timestamps converted.
    let filetime_input: usize = files
        .iter()
        .filter(|f| f.clock().clock_type == ClockType::SystemTime)
        .map(|f| all_but_header(f).len())
        .sum();
    assert_eq!(s.written.retimed as usize, want.len() - filetime_input);
    let mut got_sorted = got.clone();
    got_sorted.sort();
    want.sort();
    assert_eq!(got_sorted, want);
    // Per input, the kept count.
    for (i, f) in files.iter().enumerate() {
        assert_eq!(s.inputs[i].kept as usize, all_but_header(f).len());
    }
}

#[test]
fn filters_keep_exactly_the_matching_records() {
    let test = "filters_keep_exactly_the_matching_records";
    let Some(p) = common::sample("pktmonvpn_PktMon.etl", test) else {
        return;
    };
    let f = EtlFile::open(p).unwrap();
    let inputs = std::slice::from_ref(&f);
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_relog_merge");
    std::fs::create_dir_all(&tmp).unwrap();
    let pktmon = Guid::from_str_const("4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac");
    let all = all_but_header(&f);
    let mut recs = Vec::new();
    f.for_each(Order::Time, |r| {
        recs.push(r.event.to_owned_record());
        ControlFlow::Continue(())
    });
    recs.remove(0);
    // A time window in the middle of the trace.
    let mid = recs[recs.len() / 2].timestamp;
    let filters = [
        (
            "id 160",
            RelogFilter::new(
                EventFilter {
                    ids: vec![160],
                    ..Default::default()
                },
                vec![],
            ),
        ),
        (
            "provider PktMon by GUID, pid 4",
            RelogFilter::new(
                EventFilter {
                    providers: vec![pktmon],
                    pids: vec![4],
                    ..Default::default()
                },
                vec![],
            ),
        ),
        (
            "window",
            RelogFilter::new(
                EventFilter {
                    begin: Some(mid - 5_000_000),
                    end: Some(mid + 5_000_000),
                    ..Default::default()
                },
                vec![],
            ),
        ),
    ];
    for (what, filter) in filters {
        let out = tmp.join("filtered.etl");
        let s = relog_to_file(inputs, &filter, &out, relog_options(inputs)).unwrap();
        let want: Vec<_> = recs
            .iter()
            .zip(&all)
            .filter(|(e, _)| filter.matches(e))
            .map(|(_, k)| k.clone())
            .collect();
        let got = all_but_header(&EtlFile::open(&out).unwrap());
        assert_eq!(got, want, "{what}");
        assert_eq!(s.written.records as usize, want.len(), "{what}");
        assert!(
            !got.is_empty() && got.len() < all.len(),
            "{what}: {} of {}",
            got.len(),
            all.len()
        );
    }
    // id 160 = the 3,646 packet events (tracerpt summary), plus the PktMon schema records that keep
    // them decodable (EventInfo/EventMapInfo naming the PktMon provider).
    let f160 = RelogFilter::new(
        EventFilter {
            ids: vec![160],
            ..Default::default()
        },
        vec![],
    );
    let mut by_kind = BTreeMap::new();
    for e in recs.iter().filter(|e| f160.matches(e)) {
        *by_kind.entry((e.header_type, e.descriptor.id)).or_insert(0) += 1;
    }
    assert_eq!(by_kind[&(HeaderType::EventHeader64, 160)], 3646);
    let schema_records: usize = by_kind
        .iter()
        .filter(|((h, _), _)| h.is_classic())
        .map(|(_, n)| n)
        .sum();
    assert!(schema_records > 0, "schema records kept: {by_kind:?}");
    // A provider given by name matches TraceLogging events by their traits name.
    let Some(amsi) = common::sample("etlparser_AMSITrace.etl", test) else {
        return;
    };
    let a = EtlFile::open(amsi).unwrap();
    let out = tmp.join("amsi.etl");
    let inputs = std::slice::from_ref(&a);
    let s = relog_to_file(
        inputs,
        &RelogFilter::new(EventFilter::default(), vec!["amsitrace".into()]),
        &out,
        relog_options(inputs),
    )
    .unwrap();
    assert_eq!(s.written.records, 19, "the 19 AmsiTrace events");
}

#[test]
fn a_record_the_output_cannot_hold_stops_the_relog_with_its_error() {
    let test = "a_record_the_output_cannot_hold_stops_the_relog_with_its_error";
    let Some(p) = common::sample("pktmonvpn_PktMon.etl", test) else {
        return;
    };
    let f = EtlFile::open(p).unwrap();
    let inputs = std::slice::from_ref(&f);
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_relog_merge");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = tmp.join("too_small.etl");
    let mut o = relog_options(inputs);
    // 1 KiB buffers cannot hold the 942-byte EventInfo records plus the buffer header.
    o.buffer_size = 1024;
    let e = relog_to_file(inputs, &RelogFilter::default(), &out, o).unwrap_err();
    assert!(
        matches!(
            e,
            etwkit::etl::writer::WriteError::RecordTooLarge {
                buffer_size: 1024,
                ..
            }
        ),
        "{e}"
    );
    // What was written before stays readable, and says it was not closed cleanly.
    let g = EtlFile::open(&out).unwrap();
    assert!(!closed_cleanly(g.header()));
    assert!(g.buffers().len() > 1);
}
