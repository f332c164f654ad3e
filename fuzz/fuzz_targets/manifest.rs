//! Fuzzes a user's instrumentation manifest (`--manifest FILE.man`) and the decoding it drives:
//! the input's head is a payload, the rest the manifest's XML. Any manifest must parse or give an
//! error naming where; every event it defines must decode that payload (with either pointer size)
//! to values, an `undecoded` reason or a `decode_issue`, and render as JSON; never a panic, hang
//! or unbounded allocation.
//! Run: `cargo +nightly fuzz run manifest` (seed with crates/etwkit/tests/data/*.man and the
//! built-in manifests: `tools/fuzz_seeds.sh manifest`).
#![no_main]

use std::borrow::Cow;

use etwkit::decode::Decoder;
use etwkit::event::{EventDescriptor, EventRecord, HeaderType};
use etwkit::schema::manifest::parse_manifest;
use etwkit::schema::{Registry, SchemaKey, SchemaSource};
use etwkit::Guid;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (payload, xml) = rest.split_at((n as usize).min(rest.len()));
    let xml = String::from_utf8_lossy(xml);
    let Ok(m) = parse_manifest(&xml, SchemaSource::UserManifest) else {
        return;
    };
    let keys: Vec<SchemaKey> = m.events.iter().map(|(k, _)| k.clone()).take(64).collect();
    let mut reg = Registry::new();
    reg.add_manifest(m);
    let d = Decoder::new(reg);
    for key in keys {
        let (provider, id, version) = match key {
            SchemaKey::Manifest {
                provider,
                id,
                version,
            } => (provider, id, version),
            SchemaKey::Mof { .. } => continue,
        };
        for bits64 in [false, true] {
            let rec = EventRecord {
                header_type: if bits64 {
                    HeaderType::EventHeader64
                } else {
                    HeaderType::EventHeader32
                },
                flags: 0,
                provider,
                descriptor: EventDescriptor {
                    id,
                    version,
                    ..Default::default()
                },
                hook_id: None,
                pid: 1,
                tid: 2,
                cpu: 0,
                timestamp: 0,
                raw_timestamp: 0,
                kernel_time: 0,
                user_time: 0,
                activity_id: Guid::ZERO,
                pointer_size: if bits64 { 8 } else { 4 },
                payload: Cow::Borrowed(payload),
                ext: Cow::Owned(Vec::new()),
            };
            let ev = d.decode(&rec);
            let _ = serde_json::to_vec(&ev).expect("a decoded event serializes");
        }
    }
});
