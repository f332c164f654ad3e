//! The typed property walk (`PropertyVisitor`): on every record of every sample, the callbacks a
//! plan makes straight from the payload (`Decoder::decode_etl_visit`) are the ones the decoded
//! values make (`Properties::visit` of `Decoder::decode_etl`), in the same order with the same
//! typed values; text handed as UTF-16 or Latin-1 bytes reads as the decoded string. And a
//! `PropertiesBuilder` beside another visitor (`Tee`, what `etwkit export` runs) rebuilds exactly
//! the decoded properties from one walk.

mod common;

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;

use etwkit::decode::{Decoder, PropertiesBuilder, PropertyVisitor, Tee};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;
use etwkit::Guid;

/// Writes one line per callback.
#[derive(Default)]
struct Log(String);

impl PropertyVisitor for Log {
    fn field(&mut self, index: usize, name: &str) {
        let _ = writeln!(self.0, "field {index} {name}");
    }
    fn begin_array(&mut self, count: u64) {
        let _ = writeln!(self.0, "[{count}");
    }
    fn element(&mut self, i: u64) {
        let _ = writeln!(self.0, "#{i}");
    }
    fn end_array(&mut self) {
        self.0.push_str("]\n");
    }
    fn begin_struct(&mut self) {
        self.0.push_str("{\n");
    }
    fn end_struct(&mut self) {
        self.0.push_str("}\n");
    }
    fn null(&mut self) {
        self.0.push_str("null\n");
    }
    fn bool(&mut self, v: bool) {
        let _ = writeln!(self.0, "bool {v}");
    }
    fn unsigned(&mut self, v: u64) {
        let _ = writeln!(self.0, "u {v}");
    }
    fn signed(&mut self, v: i64) {
        let _ = writeln!(self.0, "i {v}");
    }
    fn f32(&mut self, v: f32) {
        let _ = writeln!(self.0, "f32 {:x}", v.to_bits());
    }
    fn f64(&mut self, v: f64) {
        let _ = writeln!(self.0, "f64 {:x}", v.to_bits());
    }
    fn hex(&mut self, v: u64) {
        let _ = writeln!(self.0, "hex {v:x}");
    }
    fn pointer(&mut self, v: u64) {
        let _ = writeln!(self.0, "ptr {v:x}");
    }
    fn str(&mut self, v: &str) {
        let _ = writeln!(self.0, "s {v:?}");
    }
    fn latin1(&mut self, v: &[u8]) {
        let s: String = v.iter().map(|&c| c as char).collect();
        self.str(&s);
    }
    fn utf16(&mut self, units: &[u8]) {
        let u = units
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]));
        let s: String = char::decode_utf16(u)
            .map(|r| r.unwrap_or('\u{FFFD}'))
            .collect();
        self.str(&s);
    }
    fn binary(&mut self, v: &[u8]) {
        let _ = writeln!(self.0, "bin {v:02x?}");
    }
    fn guid(&mut self, v: &Guid) {
        let _ = writeln!(self.0, "guid {v}");
    }
    fn sid(&mut self, v: &str) {
        let _ = writeln!(self.0, "sid {v}");
    }
    fn filetime(&mut self, v: i64) {
        let _ = writeln!(self.0, "ft {v}");
    }
    fn systemtime(&mut self, v: &[u16; 8]) {
        let _ = writeln!(self.0, "st {v:?}");
    }
    fn mapped(&mut self, value: u64, name: &str) {
        let _ = writeln!(self.0, "map {value} {name:?}");
    }
    fn ip(&mut self, v: IpAddr) {
        let _ = writeln!(self.0, "ip {v}");
    }
    fn port(&mut self, v: u16) {
        let _ = writeln!(self.0, "port {v}");
    }
    fn socket_address(&mut self, v: SocketAddr) {
        let _ = writeln!(self.0, "sa {v}");
    }
    fn win32_error(&mut self, v: u32) {
        let _ = writeln!(self.0, "w32 {v}");
    }
    fn ntstatus(&mut self, v: u32) {
        let _ = writeln!(self.0, "nt {v:x}");
    }
    fn hresult(&mut self, v: u32) {
        let _ = writeln!(self.0, "hr {v:x}");
    }
}

#[test]
fn payload_walk_makes_the_callbacks_of_the_decoded_values() {
    let Some(files) = common::all_samples("payload_walk_makes_the_callbacks_of_the_decoded_values")
    else {
        return;
    };
    let (mut straight, mut want) = (Log::default(), Log::default());
    let (mut records, mut restarts, mut typed) = (0u64, 0u64, [0u64; 4]);
    for path in &files {
        let f = EtlFile::open(path).unwrap();
        let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
        f.for_each(Order::File, |r| {
            straight.0.clear();
            want.0.clear();
            let slow = d.decode_etl(r);
            let fast = d.decode_etl_visit(
                r,
                &mut straight,
                |l| {
                    restarts += 1;
                    l.0.clear()
                },
                true,
            );
            if !slow.properties.is_empty() {
                slow.properties.visit(&mut want);
            }
            assert!(
                straight.0 == want.0,
                "{} record at buffer {} offset {}:\n{}\n---\n{}",
                path.display(),
                r.buffer_index,
                r.offset,
                straight.0,
                want.0
            );
            assert!(fast.properties.is_empty());
            assert_eq!(
                (&fast.event_name, fast.ids, &fast.stack, &fast.dos_path),
                (&slow.event_name, slow.ids, &slow.stack, &slow.dos_path)
            );
            records += 1;
            for (i, k) in ["\nu ", "\ns ", "\nptr ", "\nmap "].iter().enumerate() {
                typed[i] += straight.0.contains(k) as u64;
            }
            ControlFlow::Continue(())
        });
    }
    // The walk saw real variety: integers, text, pointers and mapped names on many records, and
    // records whose layout does not fit took the value path.
    assert!(records > 300_000, "{records}");
    assert!(typed.iter().all(|&n| n > 1000), "{typed:?}");
    assert!(restarts > 0);
}

#[test]
fn one_walk_rebuilds_the_decoded_properties_beside_another_visitor() {
    let Some(files) =
        common::all_samples("one_walk_rebuilds_the_decoded_properties_beside_another_visitor")
    else {
        return;
    };
    let mut values = PropertiesBuilder::default();
    let mut log = Log::default();
    let (mut records, mut with_props, mut skipped) = (0u64, 0u64, 0u64);
    for path in &files {
        let f = EtlFile::open(path).unwrap();
        let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
        f.for_each(Order::File, |r| {
            log.0.clear();
            values.reset();
            let slow = d.decode_etl(r);
            let mut tee = Tee(&mut log, &mut values);
            let fast = d.decode_etl_visit(
                r,
                &mut tee,
                |t| {
                    t.0 .0.clear();
                    t.1.reset()
                },
                false,
            );
            let got = values.take();
            assert_eq!(
                got,
                slow.properties,
                "{} record at buffer {} offset {}",
                path.display(),
                r.buffer_index,
                r.offset
            );
            // Asked for no stack, the straight walk looks none up (the value path still has it).
            if fast.stack.is_some() {
                assert_eq!(fast.stack, slow.stack);
            }
            skipped += (slow.stack.is_some() && fast.stack.is_none()) as u64;
            records += 1;
            with_props += !got.is_empty() as u64;
            ControlFlow::Continue(())
        });
    }
    assert!(
        records > 300_000 && with_props > 300_000,
        "{records} {with_props}"
    );
    assert!(skipped > 1000, "{skipped}");
}
