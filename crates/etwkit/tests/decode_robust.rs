//! Corrupt payloads never panic the decoder, and its output stays output a script can trust: bits
//! flipped anywhere in the buffers of every sample up to 2 MB (metadata, stack walks, thread
//! events and payloads of every layout kind among them), then the whole file decoded as `dump` does
//! (the pre-scan, the JSON and CSV renderers' route straight from the payload) and by the value
//! route (`decode_etl`, serialized). Every record the reader walks is rendered, and every JSON line
//! parses.
//! (`fuzz/fuzz_targets/decode.rs` is the open-ended form of this test.)

mod common;

use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Local};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;
use etwkit::sink::{renderer, Format};

/// Decodes a file image as `dump` does; returns (records walked, JSON lines rendered).
fn decode_all(img: Vec<u8>, what: &str) -> (u64, u64) {
    let Ok(f) = EtlFile::from_vec(img) else {
        return (0, 0);
    };
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let (mut json, mut csv) = (renderer(Format::Json), renderer(Format::Csv));
    let (mut lj, mut lc) = (Local::default(), Local::default());
    let (mut line, mut other) = (Vec::new(), Vec::new());
    let mut lines = 0u64;
    let s = f.for_each(Order::Time, |r| {
        line.clear();
        let v = json.view_etl(&d, &mut lj, r);
        json.render(&v, &mut line);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(text) {
            panic!(
                "{what}: a JSON line does not parse ({e}): {}",
                String::from_utf8_lossy(text)
            );
        }
        lines += 1;
        other.clear();
        let v = csv.view_etl(&d, &mut lc, r);
        csv.render(&v, &mut other);
        let ev = d.decode_etl(r);
        serde_json::to_writer(&mut other, &ev).expect("a decoded event serializes");
        ControlFlow::Continue(())
    });
    (s.records, lines)
}

#[test]
fn flipped_bits_decode_to_json_lines_for_every_record() {
    let Some(files) = common::all_samples("flipped_bits_decode_to_json_lines_for_every_record")
    else {
        return;
    };
    let mut rng = common::Rng(0xD1B5_4A32_D192_ED03);
    let mut decoded_files = 0;
    let mut records = 0u64;
    for p in files {
        let full = std::fs::read(&p).unwrap();
        if full.len() > 2 << 20 {
            continue; // keeps the test quick
        }
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let f = EtlFile::open(&p).unwrap();
        // Past each buffer's header (the reader's own tests flip those): record headers and
        // payloads.
        let spans: Vec<(usize, usize)> = f
            .buffers()
            .iter()
            .filter_map(|b| {
                let off = b.file_offset as usize + 0x48;
                let end = (b.file_offset as usize + b.header.buffer_size as usize).min(full.len());
                (end > off).then_some((off, end - off))
            })
            .collect();
        if spans.is_empty() {
            continue;
        }
        let (clean, clean_lines) = decode_all(full.clone(), &name);
        assert_eq!(clean, clean_lines, "{name}: every record renders");
        for round in 0..6 {
            let mut img = full.clone();
            // A few bits in one buffer, or a burst over several.
            let flips = if round % 2 == 0 { 4 } else { 64 };
            for _ in 0..flips {
                let (off, len) = spans[(rng.next() as usize) % spans.len()];
                img[off + (rng.next() as usize) % len] ^= 1 << (rng.next() % 8);
            }
            let (walked, lines) = decode_all(img, &format!("{name} round {round}"));
            assert_eq!(
                walked, lines,
                "{name} round {round}: every record the reader walks is rendered"
            );
            records += walked;
        }
        decoded_files += 1;
    }
    assert!(decoded_files >= 30, "only {decoded_files} samples decoded");
    assert!(
        records > 100_000,
        "only {records} corrupted records decoded"
    );
}
