//! Time order and clock conversion against ground truth: pktmon's own text rendering of
//! pktmonvpn_PktMon.etl (reference/pktmonvpn_PktMon.txt, UTF-16LE, local time at bias -330 min).

mod common;

use std::ops::ControlFlow;

use etwkit::etl::{EtlFile, Order};
use etwkit::time::format_rfc3339;
use etwkit::Guid;

#[test]
fn time_order_is_monotonic_and_complete_for_every_sample() {
    let Some(files) = common::all_samples("time_order_is_monotonic_and_complete_for_every_sample")
    else {
        return;
    };
    for path in files {
        let f = EtlFile::open(&path).unwrap();
        let mut by_file = Vec::new();
        let s1 = f.for_each(Order::File, |r| {
            by_file.push((r.buffer_index, r.offset));
            ControlFlow::Continue(())
        });
        let mut by_time = Vec::new();
        let mut last = i64::MIN;
        let mut backwards = 0;
        let s2 = f.for_each(Order::Time, |r| {
            if r.raw_timestamp < last {
                backwards += 1;
            }
            last = r.raw_timestamp;
            by_time.push((r.buffer_index, r.offset));
            ControlFlow::Continue(())
        });
        let name = path.file_name().unwrap().to_string_lossy();
        assert_eq!(s1.records, s2.records, "{name}");
        assert_eq!(backwards, 0, "{name}: time order went backwards");
        by_time.sort();
        assert_eq!(
            by_file, by_time,
            "{name}: time order must yield every record exactly once"
        );
    }
}

#[test]
fn pktmon_events_match_pktmon_text_rendering() {
    let Some(etl) = common::sample(
        "pktmonvpn_PktMon.etl",
        "pktmon_events_match_pktmon_text_rendering",
    ) else {
        return;
    };
    let txt = etl.parent().unwrap().join("reference/pktmonvpn_PktMon.txt");
    let raw = std::fs::read(txt).unwrap();
    let units: Vec<u16> = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let text = String::from_utf16_lossy(&units);
    // "[02]0004.0270::2021-06-01 21:40:57.976239700 [Microsoft-Windows-PktMon] ..."
    let want: Vec<(u16, u32, u32, String)> = text
        .lines()
        .filter(|l| l.contains("[Microsoft-Windows-PktMon]"))
        .map(|l| {
            let l = l.trim_start_matches('\u{feff}');
            let cpu = u16::from_str_radix(&l[1..3], 16).unwrap();
            let pid = u32::from_str_radix(&l[4..8], 16).unwrap();
            let tid = u32::from_str_radix(&l[9..13], 16).unwrap();
            let local = &l[15..44];
            (cpu, pid, tid, local.to_string())
        })
        .collect();
    assert_eq!(want.len(), 4514);
    let f = EtlFile::open(&etl).unwrap();
    let pktmon: Guid = "4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac".parse().unwrap();
    let bias = f.header().bias_minutes as i64;
    assert_eq!(bias, -330);
    let mut got = Vec::new();
    f.for_each(Order::Time, |r| {
        if r.provider == pktmon {
            // Local time = UTC - bias; pktmon prints 9 fractional digits (100 ns + "00").
            let local = format_rfc3339(r.timestamp - bias * 60 * 10_000_000);
            let s = format!("{} {}00", &local[..10], &local[11..27]);
            got.push((r.cpu, r.pid, r.tid, s));
        }
        ControlFlow::Continue(())
    });
    assert_eq!(got.len(), want.len());
    let mismatches: Vec<_> = got
        .iter()
        .zip(&want)
        .enumerate()
        .filter(|(_, (g, w))| g != w)
        .take(5)
        .collect();
    assert!(
        mismatches.is_empty(),
        "first mismatches (index, ours, pktmon's): {mismatches:?}"
    );
}

/// A parity of a record's identifying fields, the same whether read from its head or from the
/// whole record: a filter on it checks every field of the head against the record.
fn parity(provider: &Guid, hook: Option<u16>, id: u16, opcode: u8, raw_timestamp: i64) -> bool {
    let p = provider.to_le_bytes();
    let x = p.iter().fold(0u8, |a, b| a ^ b)
        ^ hook.unwrap_or(0x5a5a) as u8
        ^ (hook.unwrap_or(0x5a5a) >> 8) as u8
        ^ id as u8
        ^ opcode
        ^ raw_timestamp as u8
        ^ (raw_timestamp >> 8) as u8;
    x.count_ones() % 2 == 1
}

#[test]
fn a_walk_passing_over_records_by_their_head_meets_the_same_records_and_errors() {
    let Some(files) = common::all_samples(
        "a_walk_passing_over_records_by_their_head_meets_the_same_records_and_errors",
    ) else {
        return;
    };
    let mut passed_over = 0usize;
    for path in files {
        let f = EtlFile::open(&path).unwrap();
        type Seen = Vec<(usize, bool)>;
        let (all, s_all) = f.par_map_buffers(|v: &mut Seen, r| {
            let e = &r.event;
            // Records the head cannot describe are always handed on.
            let headless = !(e.header_type.is_kernel()
                || e.header_type.is_classic()
                || (e.header_type.is_event_header()
                    && e.flags & etwkit::event::flags::EXTENDED_INFO == 0));
            let p = parity(
                &e.provider,
                e.hook_id,
                e.descriptor.id,
                e.descriptor.opcode,
                e.raw_timestamp,
            );
            v.push((r.offset, headless || p));
        });
        let (some, s_some) = f.par_map_buffers_where(
            |h| parity(&h.provider, h.hook_id, h.id, h.opcode, h.raw_timestamp),
            |v: &mut Seen, r| v.push((r.offset, true)),
        );
        assert_eq!(s_all, s_some, "{}: summaries differ", path.display());
        let want: Vec<Seen> = all
            .iter()
            .map(|b| b.iter().filter(|x| x.1).cloned().collect())
            .collect();
        assert_eq!(want, some, "{}", path.display());
        passed_over += all.iter().flatten().count() - some.iter().flatten().count();
    }
    assert!(passed_over > 50_000, "{passed_over}");
}
