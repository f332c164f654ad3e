//! The direct JSON writer of decoded properties (`Properties::write_json`, what `dump` uses) renders
//! exactly what their `serde::Serialize` implementation does, for every decoded record of every sample.

mod common;

use std::ops::ControlFlow;

use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;

#[test]
fn direct_json_equals_serde_json_on_every_sample() {
    let Some(files) = common::all_samples("direct_json_equals_serde_json_on_every_sample") else {
        return;
    };
    let mut compared = 0u64;
    for path in files {
        let f = EtlFile::open(&path).unwrap();
        let (decoder, _) = Decoder::for_file(Registry::with_builtins(), &f);
        let mut out = Vec::new();
        f.for_each(Order::File, |r| {
            let d = decoder.decode_etl(r);
            if d.properties.is_empty() {
                return ControlFlow::Continue(());
            }
            out.clear();
            d.properties.write_json(&mut out);
            let serde = serde_json::to_vec(&d.properties).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&serde),
                "{}: record at buffer {} offset {}",
                path.display(),
                r.buffer_index,
                r.offset
            );
            compared += 1;
            ControlFlow::Continue(())
        });
    }
    assert!(compared > 400_000, "compared {compared}");
}
