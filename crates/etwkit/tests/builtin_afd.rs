//! Winsock-AFD, table-driven from ../shared/schemas/winsock-afd.json: no public trace carries AFD
//! events, so this test lays out each event's exact bytes from the JSON (types, sizes, offsets) for
//! 32- and 64-bit records — independently of the generated tables and of the decoder — and checks the
//! built-in schema against them: every name, in/out type, length/count link and value map, the place
//! of every field in both layouts, and each discrepancy the JSON records against Microsoft's prose.
//! Then the decoder decodes every built payload with the built-in schema and must give back exactly
//! the values written (ports big-endian, IPv6 text, 4-byte booleans, pointer-sized Process/Endpoint).

mod builtin_support;
mod common;

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use builtin_support::layout;
use etwkit::decode::{Plan, Value};
use etwkit::schema::builtin::{self, winsock_afd};
use etwkit::schema::{Count, EventSchema, Length, PropertyKind, SchemaKey};
use serde_json::Value as J;

/// What the bytes of one field mean, as the test wrote them.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Pointer(u64),
    Uint(u64),
    /// an unsigned integer with a hex out-type
    Hex(u64),
    Int(i64),
    Bool(bool),
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// host-order port value (stored big-endian)
    Port(u16),
    Status(u32),
    /// SOCKADDR: family, port, address text
    SockAddr(u16, u16, String),
    Mapped(u64, String),
}

struct Built {
    payload: Vec<u8>,
    /// per JSON field: name, offset written at, expected meaning
    fields: Vec<(String, usize, Expect)>,
}

fn json() -> Option<J> {
    let dir = common::shared_dir()?;
    let text = std::fs::read_to_string(dir.join("schemas/winsock-afd.json")).ok()?;
    Some(serde_json::from_str(&text).expect("winsock-afd.json parses"))
}

/// Lays out one event from its JSON description with values chosen per field (distinct per event and
/// field so a misplaced field cannot match by accident).
fn build(ev: &J, maps: &J, ptr: usize, ipv6_sockaddr: bool) -> Built {
    let id = ev["id"].as_u64().unwrap();
    let arch = if ptr == 4 { "x86" } else { "x64" };
    let mut p: Vec<u8> = vec![];
    let mut fields = vec![];
    let mut ints: HashMap<String, u64> = HashMap::new();
    for (i, f) in ev["fields"].as_array().unwrap().iter().enumerate() {
        let name = f["name"].as_str().unwrap().to_string();
        let in_t = f["inType"].as_str().unwrap();
        let out_t = f["outType"].as_str().unwrap_or("");
        let off = p.len();
        if let Some(o) = f["offset"][arch].as_u64() {
            assert_eq!(
                o as usize, off,
                "event {id} {name}: JSON {arch} offset vs packed layout"
            );
        }
        let seed = id * 100 + i as u64;
        let map_name = f["map"].as_str().or_else(|| {
            f["mapByBuild"]
                .as_object()
                .and_then(|m| m.values().find_map(|v| v.as_str()))
        });
        let exp = match (in_t, out_t) {
            ("win:Pointer", _) => {
                let v = 0x7000_0000 + seed * 8;
                p.extend_from_slice(&v.to_le_bytes()[..ptr]);
                Expect::Pointer(v)
            }
            ("win:UInt32", "win:IPv4") => {
                let a = Ipv4Addr::new(10, (id % 250) as u8, i as u8, 7);
                p.extend_from_slice(&a.octets());
                Expect::Ipv4(a)
            }
            ("win:UInt16", "win:Port") => {
                let port = (1000 + seed % 60000) as u16 | 0x0100; // never byte-symmetric
                p.extend_from_slice(&port.to_be_bytes());
                Expect::Port(port)
            }
            ("win:Binary", "win:IPv6") => {
                assert_eq!(
                    f["length"].as_u64(),
                    Some(16),
                    "event {id}: IPv6 Address is a fixed 16 bytes"
                );
                let a = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, id as u16, i as u16 + 1);
                p.extend_from_slice(&a.octets());
                Expect::Ipv6(a)
            }
            ("win:Binary", "win:SocketAddress") => {
                let len = ints[f["length"].as_str().unwrap()] as usize;
                let port = 8000 + (id % 1000) as u16;
                let mut sa = vec![];
                let text = if ipv6_sockaddr {
                    let a = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, id as u16);
                    sa.extend_from_slice(&23u16.to_le_bytes());
                    sa.extend_from_slice(&port.to_be_bytes());
                    sa.extend_from_slice(&0u32.to_le_bytes()); // flowinfo
                    sa.extend_from_slice(&a.octets());
                    sa.extend_from_slice(&0u32.to_le_bytes()); // scope id
                    a.to_string()
                } else {
                    let a = Ipv4Addr::new(192, 168, (id % 250) as u8, 1);
                    sa.extend_from_slice(&2u16.to_le_bytes());
                    sa.extend_from_slice(&port.to_be_bytes());
                    sa.extend_from_slice(&a.octets());
                    sa.extend_from_slice(&[0; 8]);
                    a.to_string()
                };
                assert_eq!(
                    sa.len(),
                    len,
                    "event {id}: AddressLen written before Address"
                );
                p.extend_from_slice(&sa);
                Expect::SockAddr(if ipv6_sockaddr { 23 } else { 2 }, port, text)
            }
            ("win:Boolean", _) => {
                p.extend_from_slice(&1u32.to_le_bytes());
                Expect::Bool(true)
            }
            ("win:UInt32", "win:NTStatus") => {
                let v = 0xC000_0000 | seed as u32;
                p.extend_from_slice(&v.to_le_bytes());
                Expect::Status(v)
            }
            ("win:UInt32", _) => {
                let v = if name == "AddressLen" {
                    if ipv6_sockaddr {
                        28
                    } else {
                        16
                    }
                } else if let Some(m) = map_name {
                    // the smallest key of the map, so the value has a name
                    let keys = maps[m]
                        .as_object()
                        .unwrap()
                        .keys()
                        .filter_map(|k| k.parse::<u64>().ok());
                    keys.min().unwrap()
                } else {
                    seed
                };
                ints.insert(name.clone(), v);
                p.extend_from_slice(&(v as u32).to_le_bytes());
                match map_name {
                    Some(m) => {
                        Expect::Mapped(v, maps[m][v.to_string()].as_str().unwrap().to_string())
                    }
                    None if out_t == "win:HexInt32" => Expect::Hex(v),
                    None => Expect::Uint(v),
                }
            }
            ("win:Int32", _) => {
                let v = -(seed as i64);
                p.extend_from_slice(&(v as i32).to_le_bytes());
                Expect::Int(v)
            }
            ("win:UInt8", _) => {
                let v = (seed % 200) as u8 + 1;
                p.push(v);
                Expect::Uint(v as u64)
            }
            other => panic!("event {id} {name}: type {other:?} not in the builder"),
        };
        if let Some(sz) = f["size"][arch].as_u64() {
            assert_eq!(
                p.len() - off,
                sz as usize,
                "event {id} {name}: JSON {arch} size"
            );
        }
        fields.push((name, off, exp));
    }
    Built { payload: p, fields }
}

fn afd_schemas() -> HashMap<u16, EventSchema> {
    builtin::schemas()
        .into_iter()
        .filter_map(|(k, s)| match k {
            SchemaKey::Manifest {
                provider,
                id,
                version: 0,
            } if provider == winsock_afd::PROVIDER => Some((id, s)),
            _ => None,
        })
        .collect()
}

fn in_out(s: &EventSchema, name: &str) -> (u16, u16) {
    match s
        .properties
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .kind
    {
        PropertyKind::Scalar { in_type, out_type } => (in_type, out_type),
        _ => panic!("{name} is a struct"),
    }
}

#[test]
fn every_afd_event_matches_the_json_in_both_layouts() {
    let Some(j) = json() else {
        common::samples_dir("every_afd_event_matches_the_json_in_both_layouts");
        return;
    };
    let schemas = afd_schemas();
    let events = j["events"].as_array().unwrap();
    assert_eq!(events.len(), 96);
    assert_eq!(schemas.len(), 96, "one built-in schema per JSON event");
    let maps = &j["valueMaps"];
    let (mut checked_fields, mut decoded_fields) = (0, 0);
    for ev in events {
        let id = ev["id"].as_u64().unwrap() as u16;
        let s = &schemas[&id];
        assert_eq!(
            s.provider_name.as_deref(),
            Some("Microsoft-Windows-Winsock-AFD")
        );
        assert_eq!(
            s.event_name.as_deref(),
            ev["title"].as_str(),
            "event {id} name"
        );
        assert_eq!(
            s.task_name.as_deref(),
            ev["taskName"].as_str(),
            "event {id} task"
        );
        let names: Vec<&str> = s.properties.iter().map(|p| p.name.as_str()).collect();
        let json_names: Vec<&str> = ev["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, json_names, "event {id} field names and order");
        for (p, f) in s.properties.iter().zip(ev["fields"].as_array().unwrap()) {
            let (in_t, out_t) = match p.kind {
                PropertyKind::Scalar { in_type, out_type } => (in_type, out_type),
                _ => panic!("event {id}: struct in AFD"),
            };
            let want_in = match f["inType"].as_str().unwrap() {
                "win:Pointer" => 16,
                "win:UInt32" => 8,
                "win:Int32" => 7,
                "win:UInt16" => 6,
                "win:UInt8" => 4,
                "win:Boolean" => 13,
                "win:Binary" => 14,
                t => panic!("{t}"),
            };
            let want_out = match f["outType"].as_str() {
                None => 0,
                Some("win:HexInt64") => 19,
                Some("xs:unsignedInt") => 8,
                Some("xs:int") => 7,
                Some("xs:boolean") => 13,
                Some("win:HexInt32") => 18,
                Some("win:NTStatus") => 31,
                Some("win:Port") => 22,
                Some("win:IPv4") => 23,
                Some("win:IPv6") => 24,
                Some("win:SocketAddress") => 25,
                Some(t) => panic!("{t}"),
            };
            assert_eq!(
                (in_t, out_t),
                (want_in, want_out),
                "event {id} {}: in/out type",
                p.name
            );
            match &f["length"] {
                J::Number(n) => assert_eq!(p.length, Length::Fixed(n.as_u64().unwrap() as u16)),
                J::String(l) => {
                    let idx = json_names.iter().position(|n| n == l).unwrap();
                    assert_eq!(
                        p.length,
                        Length::FromProperty(idx),
                        "event {id} {}: length from {l}",
                        p.name
                    );
                }
                _ => assert_eq!(p.length, Length::Natural),
            }
            assert_eq!(p.count, Count::One);
            let want_map = f["map"].as_str().or_else(|| {
                f["mapByBuild"]
                    .as_object()
                    .and_then(|m| m.values().find_map(|v| v.as_str()))
            });
            assert_eq!(
                p.map.as_ref().map(|m| m.name.as_str()),
                want_map,
                "event {id} {}: map",
                p.name
            );
            if let Some(m) = &p.map {
                let jm = maps[&m.name].as_object().unwrap();
                assert_eq!(
                    m.entries.len(),
                    jm.keys().filter(|k| !k.starts_with('_')).count()
                );
                for (v, name) in &m.entries {
                    assert_eq!(jm[&v.to_string()].as_str(), Some(name.as_str()));
                }
            }
        }
        // bytes: both pointer sizes; events with a SOCKADDR also with an IPv6 one
        let has_sockaddr = ev["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["outType"] == "win:SocketAddress");
        for ptr in [4usize, 8] {
            for v6 in if has_sockaddr {
                vec![false, true]
            } else {
                vec![false]
            } {
                let b = build(ev, maps, ptr, v6);
                let (placed, end) = layout(s, &b.payload, ptr as u8)
                    .unwrap_or_else(|e| panic!("event {id} ptr {ptr}: {e}"));
                assert_eq!(
                    end,
                    b.payload.len(),
                    "event {id} ptr {ptr}: schema consumes the payload exactly"
                );
                for ((name, off, exp), pl) in b.fields.iter().zip(&placed) {
                    assert_eq!(&pl.name, name);
                    assert_eq!(pl.offset, *off, "event {id} ptr {ptr} {name}: offset");
                    let bytes = &b.payload[pl.offset..pl.offset + pl.len];
                    // the schema's out-type says how to read the bytes; reading them that way gives back
                    // what the builder meant
                    let (in_t, out_t) = in_out(s, name);
                    let got = match (in_t, out_t) {
                        (16, _) => Expect::Pointer(le(bytes)),
                        (8, 23) => {
                            Expect::Ipv4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).unwrap()))
                        }
                        (6, 22) => Expect::Port(u16::from_be_bytes([bytes[0], bytes[1]])),
                        (14, 24) => {
                            Expect::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap()))
                        }
                        (14, 25) => {
                            let fam = u16::from_le_bytes([bytes[0], bytes[1]]);
                            let port = u16::from_be_bytes([bytes[2], bytes[3]]);
                            let text = match fam {
                                2 => Ipv4Addr::from(<[u8; 4]>::try_from(&bytes[4..8]).unwrap())
                                    .to_string(),
                                23 => Ipv6Addr::from(<[u8; 16]>::try_from(&bytes[8..24]).unwrap())
                                    .to_string(),
                                f => panic!("family {f}"),
                            };
                            Expect::SockAddr(fam, port, text)
                        }
                        (13, _) => {
                            assert_eq!(bytes.len(), 4, "win:Boolean is 4 bytes");
                            Expect::Bool(le(bytes) != 0)
                        }
                        (8, 31) => Expect::Status(le(bytes) as u32),
                        (8, 18) if in_map(s, name, le(bytes)).is_none() => Expect::Hex(le(bytes)),
                        (7, _) => Expect::Int(le(bytes) as u32 as i32 as i64),
                        (8 | 4, _) => match in_map(s, name, le(bytes)) {
                            Some(n) => Expect::Mapped(le(bytes), n),
                            None => Expect::Uint(le(bytes)),
                        },
                        t => panic!("{t:?}"),
                    };
                    assert_eq!(&got, exp, "event {id} ptr {ptr} {name}");
                    checked_fields += 1;
                }
                // the decoder, with the built-in schema, gives back every value the builder wrote
                let (props, used) = Plan::new(s)
                    .decode_counted(&b.payload, ptr as u8)
                    .unwrap_or_else(|e| panic!("event {id} ptr {ptr}: {e}"));
                assert_eq!(
                    used,
                    b.payload.len(),
                    "event {id} ptr {ptr}: decoder consumed the payload"
                );
                assert_eq!(props.len(), b.fields.len());
                for (name, _, exp) in &b.fields {
                    let v = props
                        .get(name)
                        .unwrap_or_else(|| panic!("event {id}: decoded no {name}"));
                    assert!(
                        decoded_is(v, exp),
                        "event {id} ptr {ptr} {name}: decoded {v:?}, wrote {exp:?}"
                    );
                    decoded_fields += 1;
                }
            }
        }
    }
    assert!(checked_fields > 1000, "{checked_fields}");
    assert_eq!(decoded_fields, checked_fields);
}

/// A decoded value against what the builder wrote: ports already in host order, IPv6 as an address,
/// 4-byte booleans, pointer-sized Process/Endpoint, SOCKADDRs as socket addresses, map names.
fn decoded_is(v: &Value, exp: &Expect) -> bool {
    match (exp, v) {
        (Expect::Pointer(x), Value::Pointer(y) | Value::Hex(y)) => x == y,
        (Expect::Uint(x), Value::U64(y)) => x == y,
        (Expect::Hex(x), Value::Hex(y)) => x == y,
        (Expect::Int(x), Value::I64(y)) => x == y,
        (Expect::Bool(x), Value::Bool(y)) => x == y,
        (Expect::Ipv4(x), Value::Ipv4(y)) => x == y,
        (Expect::Ipv6(x), Value::Ipv6(y)) => x == y,
        (Expect::Port(x), Value::Port(y)) => x == y,
        (Expect::Status(x), Value::NtStatus(y)) => x == y,
        (Expect::SockAddr(fam, port, text), Value::SocketAddress(sa)) => {
            sa.port() == *port && sa.ip().to_string() == *text && (*fam == 23) == sa.is_ipv6()
        }
        (Expect::Mapped(x, n), Value::Mapped { value, name }) => x == value && n == name,
        _ => false,
    }
}

fn le(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(v)
}

fn in_map(s: &EventSchema, field: &str, v: u64) -> Option<String> {
    let m = s
        .properties
        .iter()
        .find(|p| p.name == field)?
        .map
        .as_ref()?;
    m.entries
        .iter()
        .find(|(k, _)| *k == v)
        .map(|(_, n)| n.clone())
}

/// Each entry of the JSON's "discrepancies" that concerns the manifest layout, checked on the tables.
#[test]
fn afd_discrepancies_with_the_prose_docs_are_respected() {
    let Some(j) = json() else {
        common::samples_dir("afd_discrepancies_with_the_prose_docs_are_respected");
        return;
    };
    let ids: Vec<&str> = j["discrepancies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    for want in [
        "S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "R2",
    ] {
        assert!(
            ids.contains(&want),
            "discrepancy {want} still recorded in the JSON"
        );
    }
    let s = afd_schemas();
    let names = |id: u16| {
        s[&id]
            .properties
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
    };
    // S1: event 1 has AddressFamily 3rd; UserModePid is pointer-sized
    assert_eq!(
        names(1),
        [
            "Process",
            "Endpoint",
            "AddressFamily",
            "SocketType",
            "Protocol",
            "UserModePid"
        ]
    );
    assert_eq!(in_out(&s[&1], "UserModePid").0, 16);
    assert_eq!(
        s[&1].properties[3].map.as_ref().unwrap().name,
        "WINSOCK_SocketType_ValueMap"
    );
    // S2/S3: 25 and 28 have the 4-field template, no BufferCount/Address/Port
    for id in [25, 28] {
        assert_eq!(
            names(id),
            ["Process", "Endpoint", "Buffer", "BufferLength"],
            "event {id}"
        );
    }
    // S4: 'Listen Endpoint' with a space
    for id in [35, 36] {
        assert_eq!(names(id)[1], "Listen Endpoint");
    }
    // S5: 'Bytes Indicated' Int32; Process a pointer
    for id in [37, 38, 39] {
        assert!(names(id).contains(&"Bytes Indicated".to_string()));
        assert_eq!(in_out(&s[&id], "Bytes Indicated"), (7, 7));
        assert_eq!(in_out(&s[&id], "Process").0, 16);
    }
    // S6: event 30 Process pointer, HandleCount, Timeout (no Endpoint)
    assert_eq!(names(30), ["Process", "HandleCount", "Timeout"]);
    assert_eq!(in_out(&s[&30], "Process").0, 16);
    // S7: 7/8 Reason Int32 without a map
    for id in [7, 8] {
        let r = s[&id]
            .properties
            .iter()
            .find(|p| p.name == "Reason")
            .unwrap();
        assert!(r.map.is_none());
        assert_eq!(in_out(&s[&id], "Reason"), (7, 7));
    }
    // S8: AFD_OPTION map on 29 (Win7) and 1035 (Win10); internal codes, e.g. 13 = AFD_IPV6_V6ONLY
    for id in [29, 1035] {
        assert_eq!(
            in_map(&s[&id], "Option", 13).as_deref(),
            Some("AFD_IPV6_V6ONLY")
        );
    }
    assert_eq!(
        in_map(&s[&1032], "Reason", 19).as_deref(),
        Some("Plug and play event caused abort")
    );
    // S9: IPv6 legacy events carry a fixed 16-byte Address before Port
    for id in [3, 5, 16, 22, 27, 34, 36, 39] {
        let n = names(id);
        let a = n.iter().position(|x| x == "Address").unwrap();
        assert_eq!(n[a + 1], "Port", "event {id}");
        assert_eq!(s[&id].properties[a].length, Length::Fixed(16));
        assert_eq!(in_out(&s[&id], "Address"), (14, 24));
    }
    // S10: every Port is big-endian (out PORT)
    let ports = s
        .values()
        .flat_map(|e| e.properties.iter())
        .filter(|p| p.name == "Port")
        .count();
    assert_eq!(ports, 16);
    for e in s.values() {
        for p in e.properties.iter().filter(|p| p.name == "Port") {
            assert_eq!(
                p.kind,
                PropertyKind::Scalar {
                    in_type: 6,
                    out_type: 22
                }
            );
        }
    }
    // S11: FastPath 4-byte Boolean, BufferCount signed
    for id in 18..=22 {
        assert_eq!(in_out(&s[&id], "FastPath"), (13, 13));
        assert_eq!(in_out(&s[&id], "BufferCount"), (7, 7));
    }
    // S12: ut:Dropped keyword on 33/34/1033
    for id in [33, 34, 1033] {
        assert!(
            s[&id]
                .keywords_name
                .as_deref()
                .unwrap()
                .contains("ut:Dropped"),
            "event {id}"
        );
    }
    // R2: keyed by (provider, id, version) — event 1030 is found whatever opcode it came with
    assert!(builtin::schemas().iter().any(|(k, _)| *k
        == SchemaKey::Manifest {
            provider: winsock_afd::PROVIDER,
            id: 1030,
            version: 0
        }));
    // 1000+ with an address: AddressLen (UInt32) then Address (Binary, length = AddressLen, SOCKADDR)
    for (id, e) in &s {
        if let Some(a) = e
            .properties
            .iter()
            .position(|p| p.name == "Address" && *id >= 1000)
        {
            let l = e
                .properties
                .iter()
                .position(|p| p.name == "AddressLen")
                .unwrap();
            assert_eq!(
                e.properties[a].length,
                Length::FromProperty(l),
                "event {id}"
            );
            assert_eq!(in_out(e, "Address"), (14, 25));
        }
    }
}
