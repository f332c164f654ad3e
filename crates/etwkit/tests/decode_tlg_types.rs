#![recursion_limit = "512"]
//! Every TraceLogging in-type and the out-types that change meaning, encoded with etwkit's own
//! TraceLogging encoder (`tlg`, written independently of the decoder) and decoded back.

use etwkit::decode::{Decoder, Value};
use etwkit::schema::Registry;
use etwkit::tlg::{
    event_record, Arity, InType as I, OutType as O, TlInstance, TlPayload, TlSchemaBuilder,
};

#[test]
fn every_tracelogging_type_round_trips() {
    let schema = TlSchemaBuilder::new("Etwkit-Types", "AllTypes")
        .tags(0x0ABC_DEF1)
        .field("cstr16", I::CStr16, O::Default)
        .field("cstr8", I::CStr8, O::Utf8)
        .field("i8", I::I8, O::Default)
        .field("u8", I::U8, O::Default)
        .field("i16", I::I16, O::Default)
        .field("u16", I::U16, O::Default)
        .field("i32", I::I32, O::Default)
        .field("u32", I::U32, O::Default)
        .field("i64", I::I64, O::Default)
        .field("u64", I::U64, O::Default)
        .field("f32", I::F32, O::Default)
        .field("f64", I::F64, O::Default)
        .field("bool32", I::Bool32, O::Default)
        .field("binary", I::Binary, O::Default)
        .field("guid", I::Guid, O::Default)
        .field("filetime", I::FileTime, O::Default)
        .field("systemtime", I::SystemTime, O::Default)
        .field("sid", I::Sid, O::Default)
        .field("hex32", I::Hex32, O::Default)
        .field("hex64", I::Hex64, O::Default)
        .field("str16", I::Str16, O::Default)
        .field("str8", I::Str8, O::Default)
        .field("binaryc", I::BinaryC, O::Default)
        // Out-types that change meaning.
        .field("char8", I::U8, O::String)
        .field("char16", I::U16, O::String)
        .field("bool8", I::U8, O::Boolean)
        .field("hex_u16", I::U16, O::Hex)
        .field("port", I::U16, O::Port)
        .field("ipv4", I::U32, O::Ipv4)
        .field("ipv6", I::Binary, O::Ipv6)
        .field("sockaddr", I::Binary, O::SocketAddress)
        .field("win32", I::U32, O::Win32Error)
        .field("ntstatus", I::U32, O::NtStatus)
        .field("hresult", I::I32, O::HResult)
        .field("signed_u32", I::U32, O::Signed)
        .field("ft_u64", I::U64, O::FileTime)
        .field("pid", I::U32, O::Pid)
        .field("codeptr", I::Hex64, O::CodePointer)
        // Arrays and structs.
        .array("var_u32", I::U32, O::Default)
        .field_ex("const_i16", I::I16, O::Default, Arity::ConstCount(3), 0)
        .array("strings", I::CStr8, O::Default)
        .array("blobs", I::BinaryC, O::Default)
        .struct_array("points", 2)
        .field("x", I::I32, O::Default)
        .struct_field("inner", 1)
        .field("label", I::Str8, O::Default)
        .custom_field("custom", I::Binary, O::Default, &[1, 2, 3])
        .field("after_custom", I::U8, O::Default)
        .build()
        .unwrap();

    let sid = [1u8, 1, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0];
    let guid: etwkit::Guid = "a61ea624-4944-55fc-c2a8-37838829438d".parse().unwrap();
    let mut p = TlPayload::new();
    p.push_cstr16("wide ünïcode").push_cstr("utf8 ✓");
    p.push_i8(-8)
        .push_u8(200)
        .push_i16(-16_000)
        .push_u16(65_000)
        .push_i32(-2_000_000_000)
        .push_u32(4_000_000_000);
    p.push_i64(i64::MIN + 1)
        .push_u64(u64::MAX)
        .push_f32(1.5)
        .push_f64(-2.25)
        .push_bool32(true);
    p.push_bytes(&[0xde, 0xad])
        .push_guid(&guid)
        .push_filetime(132_670_374_575_408_593);
    p.push_systemtime([2021, 6, 2, 1, 16, 10, 57, 540])
        .push_sid(&sid)
        .push_u32(0xCAFE)
        .push_u64(0xFEED_F00D_0000_0001);
    p.push_str16("counted16")
        .push_str8("counted8")
        .push_bytes(&[1, 2, 3]);
    p.push_u8(b'Z')
        .push_u16('Ω' as u16)
        .push_u8(1)
        .push_u16(0xBEEF)
        .push_u16(443u16.to_be())
        .push_raw(&[10, 0, 0, 7]);
    p.push_bytes(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.push_bytes(&[2, 0, 0x00, 0x50, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]); // sockaddr_in 127.0.0.1:80
    p.push_u32(5)
        .push_u32(0xC000_0005)
        .push_i32(0x8007_000Eu32 as i32)
        .push_u32(u32::MAX)
        .push_u64(132_670_374_575_408_593)
        .push_u32(4242);
    p.push_u64(0x7ff6_1234_5678);
    p.push_count(3).push_u32(1).push_u32(2).push_u32(3);
    p.push_i16(-1).push_i16(0).push_i16(1);
    p.push_count(2).push_cstr("a").push_cstr("bc");
    p.push_count(2).push_bytes(&[9]).push_bytes(&[]);
    p.push_count(2)
        .push_i32(-5)
        .push_str8("p0")
        .push_i32(6)
        .push_str8("p1");
    p.push_bytes(&[0xAA, 0xBB]).push_u8(77);

    let rec = event_record(&schema, &TlInstance::default(), p.as_bytes().to_vec());
    let dec = Decoder::new(Registry::new());
    let d = dec.decode(&rec);
    assert_eq!(d.undecoded, None);
    assert_eq!(d.unread_bytes, 0);
    assert_eq!(d.provider_name.as_deref(), Some("Etwkit-Types"));
    assert_eq!(d.event_name.as_deref(), Some("AllTypes"));
    let j = serde_json::to_value(&d.properties).unwrap();
    let expect = serde_json::json!({
        "cstr16": "wide ünïcode", "cstr8": "utf8 ✓",
        "i8": -8, "u8": 200, "i16": -16000, "u16": 65000, "i32": -2000000000, "u32": 4000000000u64,
        "i64": i64::MIN + 1, "u64": u64::MAX, "f32": 1.5, "f64": -2.25, "bool32": true,
        "binary": "0xdead", "guid": "a61ea624-4944-55fc-c2a8-37838829438d",
        "filetime": "2021-06-01T16:10:57.5408593Z", "systemtime": "2021-06-01T16:10:57.540",
        "sid": "S-1-5-18", "hex32": "0xcafe", "hex64": "0xfeedf00d00000001",
        "str16": "counted16", "str8": "counted8", "binaryc": "0x010203",
        "char8": "Z", "char16": "Ω", "bool8": true, "hex_u16": "0xbeef", "port": 443, "ipv4": "10.0.0.7",
        "ipv6": "fe80::1", "sockaddr": "127.0.0.1:80", "win32": 5, "ntstatus": "0xc0000005",
        "hresult": "0x8007000e", "signed_u32": -1, "ft_u64": "2021-06-01T16:10:57.5408593Z", "pid": 4242,
        "codeptr": "0x7ff612345678",
        "var_u32": [1, 2, 3], "const_i16": [-1, 0, 1], "strings": ["a", "bc"], "blobs": ["0x09", "0x"],
        "points": [{"x": -5, "inner": {"label": "p0"}}, {"x": 6, "inner": {"label": "p1"}}],
        "custom": "0xaabb", "after_custom": 77
    });
    assert_eq!(j, expect);
    // Same metadata, same cached schema; different metadata under the same (zero) id is another one.
    let other = TlSchemaBuilder::new("Etwkit-Types", "Other")
        .field("v", I::U8, O::Default)
        .build()
        .unwrap();
    let d2 = dec.decode(&event_record(&other, &TlInstance::default(), vec![7u8]));
    assert_eq!(d2.event_name.as_deref(), Some("Other"));
    assert_eq!(serde_json::to_string(&d2.properties).unwrap(), r#"{"v":7}"#);
    dec.decode(&rec);
    assert_eq!(dec.registry().tracelogging_cached(), 2);
    // Truncated: every cut point gives a named error or a full decode, never a panic.
    for cut in 0..p.len() {
        let r = event_record(
            &schema,
            &TlInstance::default(),
            p.as_bytes()[..cut].to_vec(),
        );
        let d = dec.decode(&r);
        assert!(
            d.undecoded
                .as_deref()
                .is_some_and(|m| m.contains("property")),
            "cut {cut}: {:?}",
            d.undecoded
        );
    }
    assert!(matches!(d.properties.get("points"), Some(Value::Array(a)) if a.len() == 2));
}
