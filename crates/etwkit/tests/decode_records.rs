//! Record kinds with no schema of their own: STRING_ONLY events and WPP MESSAGE records.

mod common;

use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Value};
use etwkit::etl::{EtlFile, Order};
use etwkit::event::{flags, HeaderType};
use etwkit::schema::Registry;

#[test]
fn string_only_events_are_one_utf16_string() {
    let Some(path) = common::sample("pyetw_user.etl", "string_only_events_are_one_utf16_string")
    else {
        return;
    };
    let file = EtlFile::open(path).unwrap();
    let dec = Decoder::new(Registry::new());
    let mut strings = Vec::new();
    file.for_each(Order::File, |r| {
        if r.event.flags & flags::STRING_ONLY != 0 {
            let d = dec.decode(&r.event);
            assert!(d.is_decoded() && d.undecoded.is_none());
            let Some(Value::String(s)) = d.properties.get("String") else {
                panic!("{d:?}")
            };
            // The string and its NUL fill the payload exactly.
            assert_eq!(s.encode_utf16().count() * 2 + 2, r.event.payload.len());
            strings.push(s.clone());
        }
        ControlFlow::Continue(())
    });
    assert_eq!(strings.len(), 4);
    assert!(
        strings
            .iter()
            .all(|s| s.starts_with("<messages.Provider object at 0x") && s.ends_with('>')),
        "{strings:?}"
    );
}

#[test]
fn wpp_messages_show_raw_fields_and_say_no_tmf() {
    let Some(path) = common::sample(
        "s4_OneDrive_CldFlt0.etl",
        "wpp_messages_show_raw_fields_and_say_no_tmf",
    ) else {
        return;
    };
    let file = EtlFile::open(path).unwrap();
    let dec = Decoder::new(Registry::new());
    let mut n = 0;
    file.for_each(Order::File, |r| {
        if r.event.header_type != HeaderType::Message {
            return ControlFlow::Continue(());
        }
        let d = dec.decode_etl(r);
        assert!(!d.is_decoded());
        assert_eq!(
            d.undecoded.as_deref(),
            Some("WPP message: no TMF available, raw fields only")
        );
        let j = serde_json::to_value(&d.properties).unwrap();
        if n == 0 {
            // ../shared/notes/etl-format.md §3: marker 0x9000003C, MessageNumber 43, OptionFlags 0xAA,
            // GUID 2818ef08-…, TID 244 / PID 4, 20 argument bytes.
            assert_eq!(j["MessageNumber"], 43);
            assert_eq!(j["OptionFlags"], "0xaa");
            assert_eq!(j["MessageGuid"], "2818ef08-6a54-396f-2244-5a6ea4a98cf0");
            assert_eq!((r.event.tid, r.event.pid), (244, 4));
            assert_eq!(j["PointerSize"], 8);
            let args = j["Arguments"].as_str().unwrap();
            assert_eq!(args.len(), 2 + 2 * 20);
            assert_eq!(
                args,
                format!(
                    "0x{}",
                    r.event
                        .payload
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                )
            );
        }
        n += 1;
        ControlFlow::Continue(())
    });
    assert_eq!(n, 13);
}
