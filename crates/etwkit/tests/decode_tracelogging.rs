//! TraceLogging decoding against the samples: exact primitive values, nested structs, and every
//! TraceLogging payload in ../shared consumed to its last byte.

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Value};
use etwkit::etl::{EtlFile, Order};
use etwkit::event::ext_type;
use etwkit::schema::{Registry, SchemaSource};
use etwkit::time::format_rfc3339;

/// An independent reading of a `PrimitiveTypesTest` payload, straight from the bytes, with the
/// layout the event's metadata declares (checked in the test): CStr8, U8, U8, I16, I32, U16, U32,
/// U64, U64, GUID, FILETIME, SYSTEMTIME.
struct Raw {
    s: String,
    b: u8,
    c: u8,
    i16: i16,
    i32: i32,
    u16: u16,
    u32: u32,
    i64_as_u64: u64,
    u64: u64,
    guid: [u8; 16],
    ft: i64,
    st: [u16; 8],
    end: usize,
}

fn read_raw(p: &[u8]) -> Raw {
    let nul = p.iter().position(|&b| b == 0).unwrap();
    let mut o = nul + 1;
    let mut take = |n: usize| {
        let s = &p[o..o + n];
        o += n;
        s.to_vec()
    };
    let b = take(1)[0];
    let c = take(1)[0];
    let i16 = i16::from_le_bytes(take(2).try_into().unwrap());
    let i32 = i32::from_le_bytes(take(4).try_into().unwrap());
    let u16 = u16::from_le_bytes(take(2).try_into().unwrap());
    let u32 = u32::from_le_bytes(take(4).try_into().unwrap());
    let i64_as_u64 = u64::from_le_bytes(take(8).try_into().unwrap());
    let u64 = u64::from_le_bytes(take(8).try_into().unwrap());
    let guid: [u8; 16] = take(16).try_into().unwrap();
    let ft = i64::from_le_bytes(take(8).try_into().unwrap());
    let st_b = take(16);
    let mut st = [0u16; 8];
    for i in 0..8 {
        st[i] = u16::from_le_bytes([st_b[2 * i], st_b[2 * i + 1]]);
    }
    Raw {
        s: String::from_utf8(p[..nul].to_vec()).unwrap(),
        b,
        c,
        i16,
        i32,
        u16,
        u32,
        i64_as_u64,
        u64,
        guid,
        ft,
        st,
        end: o,
    }
}

#[test]
fn primitive_types_decode_to_exact_values() {
    let Some(path) = common::sample(
        "perfview_primitive-types.etl",
        "primitive_types_decode_to_exact_values",
    ) else {
        return;
    };
    let file = EtlFile::open(path).unwrap();
    let dec = Decoder::new(Registry::new());
    let mut seen = Vec::new();
    file.for_each(Order::File, |r| {
        if r.event.ext_item(ext_type::EVENT_SCHEMA_TL).is_none() {
            return ControlFlow::Continue(());
        }
        let d = dec.decode(&r.event);
        assert_eq!(d.source, Some(SchemaSource::TraceLogging));
        assert_eq!(d.provider_name.as_deref(), Some("solar_system"));
        assert_eq!(d.event_name.as_deref(), Some("PrimitiveTypesTest"));
        assert_eq!(d.undecoded, None);
        assert_eq!(d.unread_bytes, 0);
        let raw = read_raw(&r.event.payload);
        assert_eq!(raw.end, r.event.payload.len());
        let p = &d.properties;
        let names: Vec<&str> = p.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "string_type",
                "boolean_type",
                "char_type",
                "int16_type",
                "int32_type",
                "uint16_type",
                "uint32_type",
                "int64_type",
                "uint64_type",
                "guid_type",
                "file_time_type",
                "system_time_type"
            ]
        );
        // Decoded values equal the independent reading, with the out-types applied.
        assert_eq!(p.get("string_type"), Some(&Value::String(raw.s.clone())));
        assert_eq!(p.get("boolean_type"), Some(&Value::Bool(raw.b != 0)));
        assert_eq!(
            p.get("char_type"),
            Some(&Value::String((raw.c as char).to_string()))
        );
        assert_eq!(p.get("int16_type"), Some(&Value::I64(raw.i16 as i64)));
        assert_eq!(p.get("int32_type"), Some(&Value::I64(raw.i32 as i64)));
        assert_eq!(p.get("uint16_type"), Some(&Value::U64(raw.u16 as u64)));
        assert_eq!(p.get("uint32_type"), Some(&Value::U64(raw.u32 as u64)));
        // The producer declared int64_type as UInt64 (in-type 10) in its metadata: the value is the
        // two's complement bit pattern, and that is what the file says.
        assert_eq!(p.get("int64_type"), Some(&Value::U64(raw.i64_as_u64)));
        assert_eq!(p.get("uint64_type"), Some(&Value::U64(raw.u64)));
        assert_eq!(
            p.get("guid_type"),
            Some(&Value::Guid(
                etwkit::Guid::from_le_bytes(&raw.guid).unwrap()
            ))
        );
        assert_eq!(p.get("file_time_type"), Some(&Value::FileTime(raw.ft)));
        assert_eq!(p.get("system_time_type"), Some(&Value::SystemTime(raw.st)));
        // The generator's own relations between the fields (derived from the names, not copied).
        let n = raw.u16 as i64;
        assert_eq!(
            raw.s.as_bytes()[0],
            raw.c,
            "char_type is the planet's initial"
        );
        assert_eq!(raw.i16 as i64, -n);
        assert_eq!(raw.u32 as i64, 2 * n);
        assert_eq!(raw.i32 as i64, -2 * n);
        assert_eq!(raw.u64 as i64, 4 * n);
        assert_eq!(raw.i64_as_u64 as i64, -4 * n);
        // FILETIME and SYSTEMTIME hold the same instant.
        let ft_text = format_rfc3339(raw.ft);
        let st_json = serde_json::to_value(p.get("system_time_type").unwrap()).unwrap();
        assert!(
            ft_text.starts_with(st_json.as_str().unwrap()),
            "{ft_text} vs {st_json}"
        );
        seen.push((
            raw.s,
            raw.u16,
            raw.b != 0,
            serde_json::to_string(&d.properties).unwrap(),
        ));
        ControlFlow::Continue(())
    });
    let planets: Vec<(&str, u16, bool)> = seen.iter().map(|s| (s.0.as_str(), s.1, s.2)).collect();
    assert_eq!(
        planets,
        [
            ("Mercury", 51, false),
            ("Venus", 95, true),
            ("Earth", 65, false),
            ("Mars", 29, false),
            ("Jupiter", 69, true)
        ]
    );
    // JSON: 64-bit values as exact numbers; GUID, FILETIME and SYSTEMTIME as strings.
    assert_eq!(
        seen[0].3,
        r#"{"string_type":"Mercury","boolean_type":false,"char_type":"M","int16_type":-51,"int32_type":-102,"uint16_type":51,"uint32_type":102,"int64_type":18446744073709551412,"uint64_type":204,"guid_type":"0ad614c4-0ef4-4225-8013-f44f37cb0397","file_time_type":"2021-09-09T14:59:35.7990000Z","system_time_type":"2021-09-09T14:59:35.799"}"#
    );
}

#[test]
fn eventsource_struct_field_nests() {
    let Some(path) = common::sample(
        "perfview_SelfDescribingSingleEvent.etl",
        "eventsource_struct_field_nests",
    ) else {
        return;
    };
    let file = EtlFile::open(path).unwrap();
    let dec = Decoder::new(Registry::new());
    let mut n = 0;
    file.for_each(Order::File, |r| {
        if r.event.traits_provider_name() == Some("MySource") {
            let d = dec.decode(&r.event);
            assert_eq!(d.event_name.as_deref(), Some("TestEvent"));
            assert_eq!(
                serde_json::to_string(&d.properties).unwrap(),
                r#"{"a":{"b":"Hello","c":"World!"}}"#
            );
            assert_eq!(d.unread_bytes, 0);
            n += 1;
        }
        ControlFlow::Continue(())
    });
    assert_eq!(n, 1);
}

/// Every TraceLogging record in every sample decodes without error and consumes its payload to the
/// last byte; the per-provider counts are those of the format survey (../shared/notes §6).
#[test]
fn every_tracelogging_payload_is_consumed_exactly() {
    let Some(files) = common::all_samples("every_tracelogging_payload_is_consumed_exactly") else {
        return;
    };
    let mut by_provider: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut schemas = 0;
    for f in files {
        let file = EtlFile::open(&f).unwrap();
        let dec = Decoder::new(Registry::new());
        file.for_each(Order::File, |r| {
            if r.event.ext_item(ext_type::EVENT_SCHEMA_TL).is_some() {
                let d = dec.decode(&r.event);
                let name = d
                    .provider_name
                    .as_deref()
                    .map(str::to_string)
                    .unwrap_or_else(|| r.event.provider.to_string());
                *by_provider.entry(name.clone()).or_default() += 1;
                if d.undecoded.is_some() || d.unread_bytes != 0 {
                    failures.push(format!(
                        "{}: {name} {:?} unread {}",
                        f.display(),
                        d.undecoded,
                        d.unread_bytes
                    ));
                }
            }
            ControlFlow::Continue(())
        });
        schemas += dec.registry().tracelogging_cached();
    }
    assert!(failures.is_empty(), "{failures:#?}");
    eprintln!("{by_provider:?}, {schemas} distinct schemas");
    let total: u64 = by_provider.values().sum();
    assert_eq!(by_provider.get("solar_system"), Some(&5));
    assert_eq!(by_provider.get("MySource"), Some(&1));
    assert_eq!(by_provider.get("AmsiTrace"), Some(&19));
    assert_eq!(
        total,
        19 + 5 + 1 + 13_841 + 80 + 17 + 2 + 1 + 9,
        "{by_provider:?}"
    );
}
