//! Fuzzes everything above the container: the pre-scan (stack table, thread table, embedded
//! EventInfo/EventMapInfo and EventSource manifests), every layout's decode (MOF, manifest,
//! TraceLogging metadata, LZNT1-compressed text), the JSON and CSV renderers' fast route, the
//! value route and the export's typed columns. Any byte string must decode to values, an
//! `undecoded` reason or a `decode_issue`, never a panic, hang or unbounded allocation.
//! Run: `cargo +nightly fuzz run decode -- -max_len=262144` (seed the corpus with ../shared samples
//! cut to their first buffers: `tools/fuzz_seeds.sh`).
#![no_main]

use std::collections::HashMap;
use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Local};
use etwkit::etl::{EtlFile, Order};
use etwkit::export::arrow::{Columns, EventColumns};
use etwkit::export::typed::TypedColumns;
use etwkit::schema::Registry;
use etwkit::sink::{renderer, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The payload codec on its own (KernelTraceControl's compressed XML): any bytes inflate within
    // the limit or fail.
    if let Ok(t) = etwkit::decode::lznt1::decompress(data, 1 << 16) {
        assert!(t.len() <= 1 << 16);
    }
    let Ok(f) = EtlFile::from_vec(data.to_vec()) else {
        return;
    };
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let (mut json, mut csv) = (renderer(Format::Json), renderer(Format::Csv));
    let (mut lj, mut lc) = (Local::default(), Local::default());
    let mut out = Vec::new();
    let mut events = EventColumns::new(Columns::EVENTS);
    let mut tables: HashMap<(etwkit::Guid, u16, u8, u8), TypedColumns> = HashMap::new();
    let mut n = 0u64;
    f.for_each(Order::Time, |r| {
        out.clear();
        let v = json.view_etl(&d, &mut lj, r);
        json.render(&v, &mut out);
        let v = csv.view_etl(&d, &mut lc, r);
        csv.render(&v, &mut out);
        let mut ev = d.decode_etl(r);
        serde_json::to_writer(&mut out, &ev).expect("a decoded event serializes");
        let e = &r.event;
        events.push("fuzz", n, e, &ev);
        if !ev.properties.is_empty() {
            let key = (
                e.provider,
                e.descriptor.id,
                e.descriptor.version,
                e.descriptor.opcode,
            );
            tables.entry(key).or_default().push("fuzz", n, e, &mut ev);
        }
        n += 1;
        ControlFlow::Continue(())
    });
    let _ = events.finish();
    for t in tables.values_mut() {
        let _ = t.finish();
    }
});
