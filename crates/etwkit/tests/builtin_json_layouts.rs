//! Heap and kernel MOF tables against ../shared/schemas/{heap.json, kernel-mof.json}: for every field
//! list in the JSON, a payload is laid out from the JSON types (32- and 64-bit), its fixed offsets are
//! checked against the JSON's own `offset` facts, and every built-in schema with the same field names
//! must place each field at the same offset and consume the payload exactly. The heap constants the
//! Linux heap tracer uses are checked against heap.json too.

mod builtin_support;
mod common;

use builtin_support::layout;
use etwkit::schema::builtin::{self, heap};
use etwkit::schema::{Count, EventSchema, PropertyKind, SchemaKey};
use serde_json::Value as J;

fn load(name: &str) -> Option<J> {
    let dir = common::shared_dir()?;
    let text = std::fs::read_to_string(dir.join("schemas").join(name)).ok()?;
    Some(serde_json::from_str(&text).expect("schema JSON parses"))
}

/// Every array of field objects (`{"name", "inType", ...}`) in the JSON, with a path for messages.
fn field_lists<'a>(v: &'a J, path: String, out: &mut Vec<(String, &'a Vec<J>)>) {
    match v {
        J::Object(m) => {
            for (k, x) in m {
                if k == "fields" {
                    if let J::Array(a) = x {
                        if a.first().is_some_and(|f| f.get("inType").is_some()) {
                            out.push((path.clone(), a));
                            continue;
                        }
                    }
                }
                if k != "element" {
                    field_lists(x, format!("{path}/{k}"), out);
                }
            }
        }
        J::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                field_lists(x, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The TDH in-type our tables use for a JSON inType (None: a struct array).
fn tdh_in(f: &J) -> Option<u16> {
    Some(match f["inType"].as_str().unwrap() {
        "win:UnicodeString" => 1,
        "win:AnsiString" => 2,
        "win:Int8" => 3,
        "win:UInt8" => 4,
        "win:Int16" => 5,
        "win:UInt16" => 6,
        "win:Int32" => 7,
        "win:UInt32" => 8,
        "win:Int64" => 9,
        // FILETIME-valued UInt64s (notes say so) become in-type FILETIME
        "win:UInt64" if f["notes"].as_str().is_some_and(|n| n.contains("FILETIME")) => 17,
        "win:UInt64" => 10,
        "win:Binary" => 14,
        "win:GUID" => 15,
        "win:Pointer" => 16,
        "win:SID" => 310,
        "win:SizeT" => 308,
        _ => return None,
    })
}

/// Lays out one JSON field list: fixed types by size, strings "ab" + NUL, a SID as the kernel's
/// 4-byte "no SID", arrays with their count field set to 2. A field whose count is an expression over
/// the payload length (StackWalk frames) ends the list, with no elements. Returns (names, in-types, offsets, payload).
type Built = (Vec<String>, Vec<Option<u16>>, Vec<usize>, Vec<u8>);
fn build(fields: &[J], ptr: usize, path: &str) -> Built {
    let arch = if ptr == 4 { "x86" } else { "x64" };
    let counted: Vec<&str> = fields.iter().filter_map(|f| f["count"].as_str()).collect();
    let (mut names, mut offs, mut p, mut types) = (vec![], vec![], vec![], vec![]);
    for f in fields {
        if f["count"]
            .as_str()
            .is_some_and(|c| c.contains("EventDataLength"))
        {
            // Frames to the end of the payload: one array property in the tables (`Stack` for
            // "Stack1..StackN", `StackFrame` for "StackFrame[]"), here with no frames.
            let name = f["name"].as_str().unwrap();
            let name = if name.starts_with("Stack1..") {
                "Stack"
            } else {
                name.trim_end_matches("[]")
            };
            offs.push(p.len());
            names.push(name.to_string());
            types.push(tdh_in(f));
            break;
        }
        let name = f["name"].as_str().unwrap();
        if let Some(o) = f["offset"][arch].as_u64() {
            assert_eq!(
                o as usize,
                p.len(),
                "{path} {name}: JSON {arch} offset vs packed layout"
            );
        }
        offs.push(p.len());
        names.push(name.to_string());
        types.push(tdh_in(f));
        let n = |v: u64, size: usize| v.to_le_bytes()[..size].to_vec();
        let v = if counted.contains(&name) { 2 } else { 0x11 };
        let bytes = match f["inType"].as_str().unwrap() {
            "win:Pointer" | "win:SizeT" => n(0x1234_5678, ptr),
            "win:UInt64" | "win:Int64" => n(v, 8),
            "win:UInt32" | "win:Int32" => n(v, 4),
            "win:UInt16" | "win:Int16" => n(v, 2),
            "win:UInt8" | "win:Int8" => n(v, 1),
            "win:GUID" => vec![0x22; 16],
            "win:Binary" => vec![0x33; f["length"].as_u64().expect("fixed binary") as usize],
            "win:UnicodeString" => vec![b'a', 0, b'b', 0, 0, 0],
            "win:AnsiString" => b"ab\0".to_vec(),
            "win:SID" => vec![0; 4],
            "win:Array" => {
                let mut b = vec![];
                for _ in 0..2 {
                    b.extend(build(f["element"].as_array().unwrap(), ptr, path).3);
                }
                b
            }
            t => panic!("{path} {name}: type {t}"),
        };
        if let Some(sz) = f["size"][arch].as_u64() {
            assert_eq!(bytes.len(), sz as usize, "{path} {name}: JSON {arch} size");
        }
        p.extend(bytes);
    }
    (names, types, offs, p)
}

/// (JSON field lists checked, schema layouts checked)
fn check(json: &J, what: &str, schemas: &[(SchemaKey, EventSchema)]) -> (usize, usize) {
    let mut lists = vec![];
    field_lists(json, what.to_string(), &mut lists);
    let (mut n_lists, mut n_layouts) = (0, 0);
    for (path, fields) in lists {
        for ptr in [4usize, 8] {
            let (names, types, offs, payload) = build(fields, ptr, &path);
            if names.is_empty() {
                continue;
            }
            // A layout may end in fields later builds append (kernel-mof-extra.json "appended",
            // Count::IfRoom): absent from these payloads, they are read as absent.
            let documented = |s: &EventSchema| {
                let n = s.properties.len()
                    - s.properties
                        .iter()
                        .rev()
                        .take_while(|p| p.count == Count::IfRoom)
                        .count();
                s.properties[..n].iter().map(|p| &p.name).eq(names.iter())
            };
            let same: Vec<&(SchemaKey, EventSchema)> = schemas
                .iter()
                .filter(|(_, s)| documented(s))
                .filter(|(_, s)| {
                    s.properties
                        .iter()
                        .zip(&types)
                        .all(|(p, t)| match (&p.kind, t) {
                            (PropertyKind::Scalar { in_type, .. }, Some(t)) => in_type == t,
                            (PropertyKind::Struct(_), None) => true,
                            _ => false,
                        })
                })
                .collect();
            let override_66 = path.contains("EventTrace") && names == ["BuildString"];
            assert!(
                override_66 || !same.is_empty(),
                "{path}: no built-in schema has the fields {names:?} {types:?}"
            );
            for (key, s) in same {
                let (placed, end) = layout(s, &payload, ptr as u8)
                    .unwrap_or_else(|e| panic!("{path} {key:?}: {e}"));
                assert_eq!(
                    end,
                    payload.len(),
                    "{path} {key:?} ptr {ptr}: payload consumed exactly"
                );
                let got: Vec<usize> = placed.iter().map(|p| p.offset).collect();
                assert_eq!(got, offs, "{path} {key:?} ptr {ptr}: offsets");
                n_layouts += 1;
            }
            // kernel-mof.json lists EventTrace BuildInfo (type 66) as UTF-16; the s4_* samples hold ANSI,
            // so the tables override it (tools/kernel-mof-extra.json "overrides")
            n_lists += usize::from(!override_66);
        }
    }
    (n_lists, n_layouts)
}

#[test]
fn heap_tables_follow_heap_json() {
    let Some(j) = load("heap.json") else {
        common::samples_dir("heap_tables_follow_heap_json");
        return;
    };
    let all = builtin::schemas();
    let (lists, layouts) = check(&j["events"], "heap.json/events", &all);
    assert_eq!(
        lists,
        2 * 29,
        "heap event versions with fields, both pointer sizes"
    );
    assert!(layouts >= lists);
    let (lists, _) = check(&j["heapRangeEvents"], "heap.json/heapRangeEvents", &all);
    assert_eq!(lists, 2 * 5);
    // the constants the Linux heap tracer uses
    assert_eq!(
        heap::PROVIDER.to_string(),
        j["provider"]["guid"].as_str().unwrap()
    );
    let op = |name: &str| {
        j["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap()["opcode"]
            .as_u64()
            .unwrap() as u8
    };
    assert_eq!(heap::opcode::ALLOC, op("Alloc"));
    assert_eq!(heap::opcode::REALLOC, op("ReAlloc"));
    assert_eq!(heap::opcode::FREE, op("Free"));
    assert_eq!(heap::opcode::CREATE, op("Create"));
    assert_eq!(
        (
            heap::opcode::ALLOC,
            heap::opcode::REALLOC,
            heap::opcode::FREE
        ),
        (33, 34, 36)
    );
    assert_eq!(heap::field::ALLOC_ADDRESS, "AllocAddress");
    assert_eq!(heap::field::ALLOC_SIZE, "AllocSize");
    assert_eq!(heap::field::HEAP_HANDLE, "HeapHandle");
    assert_eq!(heap::field::FREE_ADDRESS, "FreeAddress");
    // Alloc v2 keyed as it appears in ETL: (class GUID = provider GUID, opcode 33, version 2)
    let alloc = all
        .iter()
        .find(|(k, _)| {
            *k == SchemaKey::Mof {
                class: heap::PROVIDER,
                opcode: 33,
                version: 2,
            }
        })
        .expect("heap Alloc v2");
    let names: Vec<&str> = alloc.1.properties.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["HeapHandle", "AllocSize", "AllocAddress", "SourceId"]
    );
    assert_eq!(
        alloc.1.properties[3].map.as_ref().unwrap().entries[0],
        (1, "MEMORY_FROM_LOOKASIDE".to_string())
    );
}

#[test]
fn kernel_tables_follow_kernel_mof_json() {
    let Some(j) = load("kernel-mof.json") else {
        common::samples_dir("kernel_tables_follow_kernel_mof_json");
        return;
    };
    let (lists, layouts) = check(
        &j["classes"],
        "kernel-mof.json/classes",
        &builtin::schemas(),
    );
    // 44 field lists (minus the overridden BuildInfo) in both pointer sizes; several schemas share a
    // list (type groups, versions), hence more layouts than lists
    assert_eq!(
        lists, 88,
        "kernel-mof.json field lists checked, both pointer sizes"
    );
    assert_eq!(layouts, 292, "built-in layouts checked against them");
}
