//! CSV's properties column is written by its own property visitor (`Decoder::view_etl_csv`: the
//! JSON text with every quote already doubled), not by quoting the JSON text afterwards. On every
//! record of every sample, that text equals the JSON route's text with its quotes doubled, and
//! the CSV line dump prints from it equals the line rendered from the JSON route and from the
//! value path (`decode_etl` + `EventView::decoded`). The JSON line dump prints equals the value
//! path's too. Each route keeps one `Local` for the whole file, as a dump thread does, so the text
//! of repeated payloads comes from its memo (perfview_net.4.5.x86.etl: 107 k records whose
//! payloads repeat) and is checked here against text made afresh.

mod common;

use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Local};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;
use etwkit::sink::{renderer, EventView, Format};

/// `s` with every `"` doubled.
fn doubled(s: &[u8]) -> Vec<u8> {
    let mut o = Vec::with_capacity(s.len() * 2);
    for &c in s {
        o.push(c);
        if c == b'"' {
            o.push(c);
        }
    }
    o
}

#[derive(Default, Debug)]
struct Seen {
    records: u64,
    with_properties: u64,
    /// Records whose properties hold a string with an escaped quote (`\"` in the JSON).
    escaped_quotes: u64,
}

fn check(path: &std::path::Path) -> Seen {
    let f = EtlFile::open(path).unwrap();
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let (mut json_local, mut csv_local) = (Local::default(), Local::default());
    let mut dump_json_local = Local::default();
    let mut csv = renderer(Format::Csv);
    let mut json = renderer(Format::Json);
    let (mut json_line, mut json_values) = (Vec::new(), Vec::new());
    let mut props = Vec::new();
    let (mut via_json, mut via_csv, mut via_values) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen = Seen::default();
    f.for_each(Order::File, |r| {
        seen.records += 1;
        let j = d.view_etl(&mut json_local, r);
        let c = d.view_etl_csv(&mut csv_local, r);
        let (jp, cp) = (j.properties_json, c.properties_json);
        assert_eq!(
            cp,
            jp.map(doubled).as_deref(),
            "{}: record {} (event id {}): CSV text is not the JSON text with quotes doubled",
            path.display(),
            seen.records,
            r.descriptor.id
        );
        if let Some(p) = jp {
            seen.with_properties += 1;
            seen.escaped_quotes += p.windows(2).any(|w| w == b"\\\"") as u64;
        }
        via_json.clear();
        csv.render(&j, &mut via_json);
        via_csv.clear();
        // The route `etwkit dump --format csv` takes.
        let v = csv.view_etl(&d, &mut csv_local, r);
        csv.render(&v, &mut via_csv);
        assert!(
            via_csv == via_json,
            "{}: record {}: CSV line differs by route:\n{}\n{}",
            path.display(),
            seen.records,
            String::from_utf8_lossy(&via_csv),
            String::from_utf8_lossy(&via_json)
        );
        let dec = d.decode_etl(r);
        via_values.clear();
        csv.render(
            &EventView::decoded(&r.event, Some(&dec), &mut props),
            &mut via_values,
        );
        assert!(
            via_csv == via_values,
            "{}: record {}: CSV line differs from the value path's",
            path.display(),
            seen.records
        );
        // The route `etwkit dump --format json` takes, against the value path.
        json_line.clear();
        let v = json.view_etl(&d, &mut dump_json_local, r);
        json.render(&v, &mut json_line);
        json_values.clear();
        json.render(
            &EventView::decoded(&r.event, Some(&dec), &mut props),
            &mut json_values,
        );
        assert!(
            json_line == json_values,
            "{}: record {}: JSON line differs from the value path's:\n{}\n{}",
            path.display(),
            seen.records,
            String::from_utf8_lossy(&json_line),
            String::from_utf8_lossy(&json_values)
        );
        ControlFlow::Continue(())
    });
    seen
}

#[test]
fn csv_properties_are_the_json_text_with_quotes_doubled_on_every_sample() {
    let Some(files) = common::all_samples("csv_properties_on_every_sample") else {
        return;
    };
    assert!(files.len() > 20);
    let mut total = Seen::default();
    for path in &files {
        let s = check(path);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Samples known to hold strings with quotes in them (the fix-up path of the visitor).
        if ["ebpf_ebpforwindows.etl", "perfview_net.4.5.2.x64.etl"].contains(&name.as_str()) {
            assert!(s.escaped_quotes > 0, "{name}: {s:?}");
        }
        total.records += s.records;
        total.with_properties += s.with_properties;
        total.escaped_quotes += s.escaped_quotes;
    }
    assert!(total.with_properties > 200_000, "{total:?}");
    assert!(total.escaped_quotes > 0, "{total:?}");
}
