//! No silent misreads: a classic/kernel layout that fits its payload only with the other pointer
//! size is decoded with it and counted; any other layout leaving bytes unread (or running short)
//! carries a `decode_issue` and is counted by stats. Files built here with the writer: a 32-bit
//! logger (SYSTEM32 headers) carrying 64-bit Image/Load payloads, as a 32-bit logger on 64-bit
//! Windows writes them; plus the real Sawbuck sample that does the same.

mod common;

use std::ops::ControlFlow;

use etwkit::decode::{file_stats, Decoder, Value};
use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;

const START: i64 = 133_000_000_000_000_000;

/// An Image/Load (v2) payload: ImageBase, ImageSize, ProcessId, ImageChecksum, TimeDateStamp,
/// Reserved0, DefaultBase, Reserved1..4, FileName — pointers `ptr` bytes wide.
fn image_load(ptr: usize, base: u64, name: &str) -> Vec<u8> {
    let mut p = Vec::new();
    let pointer = |p: &mut Vec<u8>, v: u64| p.extend_from_slice(&v.to_le_bytes()[..ptr]);
    pointer(&mut p, base);
    pointer(&mut p, 0x2_1000);
    for v in [4242u32, 0x1234, 0x5f5e_0000, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    pointer(&mut p, base);
    for _ in 0..4 {
        p.extend_from_slice(&0u32.to_le_bytes());
    }
    for u in name.encode_utf16().chain([0]) {
        p.extend_from_slice(&u.to_le_bytes());
    }
    p
}

/// A SYSTEM32 kernel record of the Image group, opcode 10 (Load), version 2.
fn system32(clock_raw: i64, payload: &[u8]) -> Vec<u8> {
    let size = 0x20 + payload.len();
    let mut r = vec![0u8; size];
    r[0..2].copy_from_slice(&2u16.to_le_bytes());
    r[2] = 0x01; // SYSTEM32
    r[3] = 0xC0;
    r[4..6].copy_from_slice(&(size as u16).to_le_bytes());
    r[6..8].copy_from_slice(&0x140Au16.to_le_bytes()); // group 0x14 (Image), opcode 10
    r[8..0xC].copy_from_slice(&77u32.to_le_bytes());
    r[0xC..0x10].copy_from_slice(&4242u32.to_le_bytes());
    r[0x10..0x18].copy_from_slice(&clock_raw.to_le_bytes());
    r[0x20..].copy_from_slice(payload);
    r
}

fn build(payloads: &[Vec<u8>]) -> EtlFile {
    let mut o = WriterOptions::new(START);
    o.pointer_size = 4;
    let mut w = Writer::in_memory(o).unwrap();
    let clock = *w.clock();
    for (i, p) in payloads.iter().enumerate() {
        let raw = system32(clock.to_raw(START + 10 * (i as i64 + 1)), p);
        w.write_raw(&raw, 0, &clock).unwrap();
    }
    let (_, bytes) = w.finish_into_inner().unwrap();
    EtlFile::from_vec(bytes).unwrap()
}

#[test]
fn a_32_bit_logger_with_64_bit_image_payloads_decodes_with_8_byte_pointers() {
    let base64 = 0x7ff6_1234_0000u64;
    let name = r"\Device\HarddiskVolume3\Windows\System32\ntdll.dll";
    let mut garbage = image_load(4, 0x7734_0000, "a.dll");
    garbage.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    let f = build(&[
        image_load(8, base64, name),
        image_load(4, 0x7734_0000, name),
        garbage,
    ]);
    assert_eq!(f.header().logger_pointer_size(), 4);
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let mut seen = Vec::new();
    f.for_each(Order::File, |r| {
        if r.hook_id == Some(0x140A) {
            assert_eq!(r.pointer_size, 4, "SYSTEM32 header");
            seen.push(d.decode_etl(r));
        }
        ControlFlow::Continue(())
    });
    assert_eq!(seen.len(), 3);
    // 64-bit payload under a 32-bit header: decoded with 8-byte pointers, exactly.
    let wide = &seen[0];
    assert_eq!(wide.layout_pointer_size, Some(8));
    assert_eq!(wide.decode_issue, None);
    assert_eq!(wide.undecoded, None);
    assert_eq!(
        wide.properties.get("ImageBase"),
        Some(&Value::Pointer(base64))
    );
    assert_eq!(wide.properties.get("ProcessId"), Some(&Value::U64(4242)));
    assert_eq!(
        wide.properties.get("FileName").and_then(Value::as_str),
        Some(name)
    );
    // The matching 32-bit payload: the header's size fits, no fallback.
    let narrow = &seen[1];
    assert_eq!(narrow.layout_pointer_size, None);
    assert_eq!(narrow.decode_issue, None);
    assert_eq!(
        narrow.properties.get("ImageBase"),
        Some(&Value::Pointer(0x7734_0000))
    );
    assert_eq!(
        narrow.properties.get("FileName").and_then(Value::as_str),
        Some(name)
    );
    // Six stray bytes after the name: 8-byte pointers would read them as an unterminated name, which
    // is no fit; the header's size leaves them unread — said, not hidden.
    let odd = &seen[2];
    assert_eq!(odd.layout_pointer_size, None);
    assert_eq!(odd.unread_bytes, 6);
    let issue = odd.decode_issue.as_deref().unwrap();
    assert!(issue.contains("leaves 6 of the"), "{issue}");
    assert_eq!(
        odd.properties.get("FileName").and_then(Value::as_str),
        Some("a.dll")
    );
    // stats counts both kinds.
    let s = file_stats(&f, &d);
    assert_eq!(s.pointer_size_fallbacks, Some(1));
    assert_eq!(s.decode_issues, Some(1));
}

#[test]
fn a_payload_that_runs_short_carries_a_decode_issue() {
    let mut short = image_load(4, 0x7734_0000, "b.dll");
    short.truncate(10); // ends inside ProcessId
    let f = build(&[short]);
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let mut issues = Vec::new();
    f.for_each(Order::File, |r| {
        if r.hook_id == Some(0x140A) {
            let e = d.decode_etl(r);
            assert!(e.is_decoded());
            issues.push(e.decode_issue.clone());
            assert_eq!(e.undecoded, e.decode_issue);
            assert_eq!(
                e.properties.get("ImageSize"),
                Some(&Value::Pointer(0x2_1000))
            );
        }
        ControlFlow::Continue(())
    });
    assert_eq!(issues.len(), 1);
    let i = issues[0].as_deref().unwrap();
    assert!(
        i.contains("ProcessId") && i.contains("only 2 remain"),
        "{i}"
    );
    assert_eq!(file_stats(&f, &d).decode_issues, Some(1));
}

#[test]
fn sawbuck_sample_of_64_bit_image_payloads_from_a_32_bit_logger() {
    let Some(p) = common::sample(
        "syzygy_log_lib_image_data_64_v2.etl",
        "sawbuck_sample_of_64_bit_image_payloads",
    ) else {
        return;
    };
    let f = EtlFile::open(&p).unwrap();
    assert_eq!(f.header().logger_pointer_size(), 4);
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let s = file_stats(&f, &d);
    assert_eq!(s.pointer_size_fallbacks, Some(26));
    assert_eq!(s.decode_issues, Some(0));
    let mut names = Vec::new();
    f.for_each(Order::File, |r| {
        let e = d.decode_etl(r);
        if e.layout_pointer_size == Some(8) {
            let n = e
                .properties
                .get("FileName")
                .and_then(Value::as_str)
                .unwrap();
            names.push(n.to_string());
        }
        ControlFlow::Continue(())
    });
    assert_eq!(names.len(), 26);
    // Real module paths, not pointer bytes read as text.
    assert!(
        names.iter().all(|n| n.starts_with("C:\\")
            && [".dll", ".exe"]
                .iter()
                .any(|e| n.to_ascii_lowercase().ends_with(e))),
        "{names:?}"
    );
}
