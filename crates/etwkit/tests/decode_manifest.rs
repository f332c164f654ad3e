//! A user's instrumentation manifest (`--manifest FILE.man`): tests/data/decode_test.man, events
//! encoded by hand here (byte by byte, independently of the decoder), decoded, every value checked.

use std::borrow::Cow;

use etwkit::decode::{Decoder, Value};
use etwkit::event::{EventDescriptor, EventRecord, HeaderType};
use etwkit::schema::{Registry, SchemaKey, SchemaSource};
use etwkit::Guid;

const PROVIDER: Guid = Guid::from_str_const("6b1e0ac3-5c1d-4f0e-9a43-2f7e3a1d9b10");

fn man() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/decode_test.man")
}

fn record(id: u16, version: u8, bits64: bool, payload: Vec<u8>) -> EventRecord<'static> {
    EventRecord {
        header_type: if bits64 {
            HeaderType::EventHeader64
        } else {
            HeaderType::EventHeader32
        },
        flags: 0,
        provider: PROVIDER,
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
        payload: Cow::Owned(payload),
        ext: Cow::Owned(Vec::new()),
    }
}

fn utf16z(s: &str) -> Vec<u8> {
    s.encode_utf16()
        .chain([0])
        .flat_map(|u| u.to_le_bytes())
        .collect()
}

fn decoder() -> Decoder {
    let mut reg = Registry::new();
    let n = reg.add_manifest_file(man()).unwrap();
    assert_eq!(n, 4);
    Decoder::new(reg)
}

#[test]
fn manifest_names_and_keys() {
    let dec = decoder();
    let reg = dec.registry();
    let v0 = reg
        .get(&SchemaKey::Manifest {
            provider: PROVIDER,
            id: 1,
            version: 0,
        })
        .unwrap();
    let v1 = reg
        .get(&SchemaKey::Manifest {
            provider: PROVIDER,
            id: 1,
            version: 1,
        })
        .unwrap();
    assert_eq!(v0.source, SchemaSource::UserManifest);
    assert_eq!(v0.provider_name.as_deref(), Some("Etwkit-Test-Decoder"));
    assert_eq!(v0.event_name.as_deref(), Some("ConnectV0Sym"));
    assert_eq!(v0.task_name.as_deref(), Some("Connection"));
    // A task-scoped opcode, a standard win: opcode, a provider-level opcode.
    assert_eq!(v0.opcode_name.as_deref(), Some("Handshake"));
    assert_eq!(v1.opcode_name.as_deref(), Some("Start"));
    assert_eq!(v1.keywords_name.as_deref(), Some("Net Io"));
    let blob = reg
        .get(&SchemaKey::Manifest {
            provider: PROVIDER,
            id: 2,
            version: 0,
        })
        .unwrap();
    assert_eq!(blob.opcode_name.as_deref(), Some("Flush"));
    assert_eq!(v0.properties.len(), 12);
    assert_eq!(v1.properties.len(), 9);
    // Localized map text came through the stringTable.
    let state = v0.properties[1].map.as_ref().unwrap();
    assert_eq!(
        state.entries,
        vec![
            (0, "Idle".to_string()),
            (1, "Open".to_string()),
            (0x10, "Closed".to_string())
        ]
    );
}

#[test]
fn version_0_event_every_value_32_and_64_bit() {
    let dec = decoder();
    for bits64 in [false, true] {
        let mut p = Vec::new();
        if bits64 {
            p.extend_from_slice(&0xffff_e001_2345_6780u64.to_le_bytes());
        } else {
            p.extend_from_slice(&0x8123_4560u32.to_le_bytes());
        }
        p.extend_from_slice(&0x10u32.to_le_bytes()); // State = Closed
        p.extend_from_slice(&0x0000_000Bu32.to_le_bytes()); // Flags = Read|Write + 0x8
        p.extend_from_slice(&[192, 168, 1, 20]); // IPv4 in network order
        p.extend_from_slice(&[0x01, 0xBB]); // port 443, big-endian
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&1u32.to_le_bytes()); // win:Boolean is 4 bytes
        p.extend_from_slice(&0xC000_0022u32.to_le_bytes());
        p.extend_from_slice(&10054u32.to_le_bytes());
        p.extend_from_slice(&0x8007_0005u32.to_le_bytes());
        p.extend_from_slice(&utf16z("héllo"));
        p.extend_from_slice(b"tag\0");
        let d = dec.decode(&record(1, 0, bits64, p));
        assert_eq!(d.undecoded, None);
        assert_eq!(d.unread_bytes, 0);
        assert_eq!(d.provider_name.as_deref(), Some("Etwkit-Test-Decoder"));
        let process = if bits64 {
            "0xffffe00123456780"
        } else {
            "0x81234560"
        };
        assert_eq!(
            serde_json::to_string(&d.properties).unwrap(),
            format!(
                r#"{{"Process":"{process}","State":"Closed","Flags":"Read|Write|0x8","LocalAddress":"192.168.1.20","LocalPort":443,"RemoteAddress":"2001:db8::1","Success":true,"Status":"0xc0000022","Error":10054,"Result":"0x80070005","Name":"héllo","Tag":"tag"}}"#
            )
        );
        assert_eq!(
            d.properties.get("Status"),
            Some(&Value::NtStatus(0xC000_0022))
        );
        assert_eq!(
            d.properties.get("Result"),
            Some(&Value::HResult(0x8007_0005))
        );
    }
}

#[test]
fn version_1_event_socket_address_guid_filetime_sid() {
    let dec = decoder();
    let mut p = Vec::new();
    p.extend_from_slice(&0x1234u64.to_le_bytes());
    p.extend_from_slice(&7u32.to_le_bytes()); // State 7: not in the map, stays a number
                                              // SOCKADDR_IN6: family 23, port 8080 BE, flowinfo, address, scope id.
    let mut sa = vec![23, 0, 0x1f, 0x90, 0, 0, 0, 0];
    sa.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x2a]);
    sa.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&(sa.len() as u32).to_le_bytes());
    p.extend_from_slice(&sa);
    let g: Guid = "0ad614c4-0ef4-4225-8013-f44f37cb0397".parse().unwrap();
    p.extend_from_slice(&g.to_le_bytes());
    p.extend_from_slice(&132_670_374_575_408_593i64.to_le_bytes());
    p.extend_from_slice(&[1, 2, 0, 0, 0, 0, 0, 5, 32, 0, 0, 0, 0x20, 0x02, 0, 0]); // S-1-5-32-544
    p.extend_from_slice(&0xdead_beef_0000_0001u64.to_le_bytes());
    p.extend_from_slice(&0.25f64.to_le_bytes());
    let d = dec.decode(&record(1, 1, true, p));
    assert_eq!(d.undecoded, None);
    assert_eq!(
        serde_json::to_string(&d.properties).unwrap(),
        r#"{"Process":"0x1234","State":7,"AddressLength":28,"Address":"[fe80::2a]:8080","Id":"0ad614c4-0ef4-4225-8013-f44f37cb0397","When":"2021-06-01T16:10:57.5408593Z","User":"S-1-5-32-544","Mask":"0xdeadbeef00000001","Ratio":0.25}"#
    );
}

#[test]
fn counted_arrays_binary_structs_and_truncation() {
    let dec = decoder();
    let mut p = Vec::new();
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&[0x00, 0x50, 0x1f, 0x90]); // ports 80, 8080
    p.extend_from_slice(&3u32.to_le_bytes());
    p.extend_from_slice(&[0xaa, 0xbb, 0xcc]);
    p.push(2);
    p.extend_from_slice(&[1, 0xff, 0xff, 2, 0x10, 0x00]); // {1,-1}, {2,16}
    p.extend_from_slice(
        &"ab\0\0"
            .encode_utf16()
            .flat_map(|u| u.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    p.extend_from_slice(&[7, 8, 9]);
    for v in [2024u16, 2, 4, 29, 13, 5, 9, 250] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    let full = p.clone();
    let d = dec.decode(&record(2, 0, true, full));
    assert_eq!(d.undecoded, None);
    assert_eq!(d.unread_bytes, 0);
    assert_eq!(
        serde_json::to_string(&d.properties).unwrap(),
        r#"{"Count":2,"Ports":[80,8080],"Size":3,"Data":"0xaabbcc","PairCount":2,"Pairs":[{"Key":1,"Value":-1},{"Key":2,"Value":16}],"Fixed":"ab","Three":[7,8,9],"When":"2024-02-29T13:05:09.250"}"#
    );
    // Cut inside the second struct element: the error names the property path and the offset, and
    // what came before is kept.
    let cut = 2 + 4 + 4 + 3 + 1 + 3 + 2;
    let d = dec.decode(&record(2, 0, true, p[..cut].to_vec()));
    let msg = d.undecoded.unwrap();
    assert!(
        msg.contains("\"Pairs[1].Value\"") && msg.contains("offset 18"),
        "{msg}"
    );
    assert_eq!(
        d.properties.get("Data"),
        Some(&Value::Binary(vec![0xaa, 0xbb, 0xcc]))
    );
    assert!(matches!(d.properties.get("Pairs"), Some(Value::Array(a)) if a.len() == 1));
    // An event without a template; an unknown version has no schema.
    let d = dec.decode(&record(3, 0, true, vec![]));
    assert!(d.is_decoded() && d.properties.is_empty());
    assert_eq!(d.opcode_name.as_deref(), Some("Stop"));
    let d = dec.decode(&record(2, 5, true, vec![]));
    assert!(!d.is_decoded());
}

#[test]
fn bad_manifests_are_clear_errors() {
    let mut reg = Registry::new();
    let e = reg.add_manifest_file("/nonexistent/x.man").unwrap_err();
    // The OS's own words for the missing path (Linux: "No such file or directory (os error 2)",
    // Windows: "Path not found. (os error 3)").
    let os = std::fs::read_to_string("/nonexistent/x.man").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot read the instrumentation manifest /nonexistent/x.man: {os}")
    );
    let e = reg.add_manifest_file(std::env::temp_dir()).unwrap_err();
    assert!(e.to_string().ends_with(" is a directory"), "{e}");
    assert!(!e.to_string().contains("at byte"), "{e}");
    let text = std::fs::read_to_string(man()).unwrap();
    let broken = text.replace(r#"length="AddressLength""#, r#"length="NoSuchField""#);
    let e =
        etwkit::schema::manifest::parse_manifest(&broken, SchemaSource::UserManifest).unwrap_err();
    assert!(
        e.reason.contains("NoSuchField") && e.reason.contains("no earlier field"),
        "{e}"
    );
    let e = etwkit::schema::manifest::parse_manifest("<a", SchemaSource::UserManifest).unwrap_err();
    assert!(e.reason.contains("not well-formed"), "{e}");
    let bad_type = text.replace("win:Double", "win:Quad");
    let e = etwkit::schema::manifest::parse_manifest(&bad_type, SchemaSource::UserManifest)
        .unwrap_err();
    assert!(e.reason.contains("unknown inType \"win:Quad\""), "{e}");
}

/// A manifest that is not well-formed XML names the file once and where the XML breaks, in bytes:
/// the line and column the parser gives, or the document's end for a root element never closed.
#[test]
fn malformed_manifests_name_the_file_once_and_the_place() {
    let dir = std::env::temp_dir().join(format!("etwkit-malformed-man-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut reg = Registry::new();
    for (name, xml, want) in [
        (
            "unclosed.man",
            "<instrumentationManifest><events>",
            "not well-formed XML: the root node was opened but never closed (at byte 33)",
        ),
        (
            "twice.man",
            "<a>\n  <b x=\"1\" x=\"2\"/></a>",
            "not well-formed XML: attribute 'x' at 2:12 is already defined (at byte 15)",
        ),
        (
            "utf8.man",
            "<a>\n<b>\u{e9}\u{e9}</c></a>",
            "not well-formed XML: expected 'b' tag, not 'c' at 2:6 (at byte 11)",
        ),
        ("none.man", "<a/>", "no <provider> element (at byte 0)"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, xml).unwrap();
        let e = reg.add_manifest_file(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("the instrumentation manifest {}: {want}", path.display())
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
