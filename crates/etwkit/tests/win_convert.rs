//! EVENT_RECORD → EventRecord, on real records: every record of real ETL samples (kernel SYSTEM and
//! PERFINFO, classic FULL_HEADER and 32-bit ones, manifest, TraceLogging with its schema items,
//! EVENT_HEADER32 from a 32-bit process, STACK_TRACE64 and RELATED_ACTIVITYID items, WPP messages) is
//! laid out as the EVENT_RECORD ProcessTrace hands a raw-timestamp callback, converted back, and
//! compared with what the ETL reader yields — field by field, and through the decoder. Runs on
//! Linux and, built for Windows, under wine (tools/windows-test.sh).

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order};
use etwkit::event::{ext_type, EventRecord, HeaderType};
use etwkit::guid::Guid;
use etwkit::live::windows::convert::{ConvertContext, RawEvent};
use etwkit::schema::builtin::kernel_group_guid;
use etwkit::schema::Registry;

/// The kernel group whose class GUID `g` is.
fn group_of(g: &Guid) -> Option<u8> {
    (0..=255u8).find(|n| kernel_group_guid(*n) == Some(*g))
}

/// What an EVENT_RECORD can tell of a record's framing (it has no header type; see
/// `live::windows::convert`): kernel framings and classic records under a kernel group GUID come
/// back as SYSTEM32/64 with hook = group << 8 | type; everything else as it was.
fn expected_framing(r: &EventRecord<'_>) -> (HeaderType, Option<u16>) {
    use HeaderType::*;
    let wide = r.pointer_size == 8;
    let system = if wide { System64 } else { System32 };
    match (r.header_type, group_of(&r.provider)) {
        (Message, _) => (Message, r.hook_id),
        (h, Some(g)) if h.is_kernel() || h.is_classic() => {
            (system, Some((g as u16) << 8 | r.descriptor.opcode as u16))
        }
        (h, _) => (h, r.hook_id),
    }
}

#[derive(Default, Debug)]
struct Seen {
    records: u64,
    by_type: BTreeMap<&'static str, u64>,
    stacks: u64,
    tl_schemas: u64,
    related: u64,
    decoded: u64,
    decode_compared: u64,
    reframed: u64,
}

/// Converts every record of `name` and compares; returns what was seen.
fn check(name: &str, test: &str) -> Option<Seen> {
    let path = common::sample(name, test)?;
    let file = EtlFile::open(&path).expect("open sample");
    let (decoder, _) = Decoder::for_file(Registry::with_builtins(), &file);
    let ctx = ConvertContext {
        clock: file.clock(),
        logger_pointer_size: file.header().pointer_size as u8,
    };
    let mut seen = Seen::default();
    let mut failures = Vec::new();
    file.for_each(Order::File, |r| {
        let ev = &r.event;
        seen.records += 1;
        *seen.by_type.entry(ev.header_type.name()).or_default() += 1;
        let raw = RawEvent::new(ev).expect("ETW records fit an EVENT_RECORD");
        let er = raw.record();
        // The EVENT_RECORD carries the on-disk values where EVENT_HEADER records have them.
        if ev.header_type.is_event_header() {
            let disk = r.raw;
            assert_eq!(er.EventHeader.TimeStamp.to_le_bytes(), disk[0x10..0x18]);
            assert_eq!(er.EventHeader.ThreadId.to_le_bytes(), disk[8..12]);
            assert_eq!(Guid::from_le_bytes(&disk[0x18..0x28]).unwrap(), ev.provider);
            assert_eq!(
                er.EventHeader.EventDescriptor.Id.to_le_bytes(),
                disk[0x28..0x2A]
            );
            assert_eq!(
                er.EventHeader.EventDescriptor.Keyword.to_le_bytes(),
                disk[0x30..0x38]
            );
            assert!(disk.ends_with(&ev.payload), "UserData is the record's tail");
        }
        assert_eq!(er.UserDataLength as usize, ev.payload.len());
        assert_eq!(er.ExtendedDataCount as usize, ev.ext_items().count());
        let back = raw.convert(&ctx);
        let (ht, hook) = expected_framing(ev);
        if (ht, hook) != (ev.header_type, ev.hook_id) {
            seen.reframed += 1;
        }
        let want = EventRecord {
            header_type: ht,
            hook_id: hook,
            ..ev.clone()
        };
        if back != want && failures.len() < 5 {
            failures.push(format!(
                "record {} at buffer {} +{}:\n got  {back:?}\n want {want:?}",
                seen.records, r.buffer_index, r.offset
            ));
        }
        if ev.stack().is_some() {
            seen.stacks += 1;
        }
        if ev.ext_item(ext_type::EVENT_SCHEMA_TL).is_some() {
            seen.tl_schemas += 1;
        }
        if ev.related_activity_id().is_some() {
            seen.related += 1;
        }
        // The decoder sees the same event either way.
        let a = decoder.decode(ev);
        let b = decoder.decode(&back);
        if a.source.is_some() {
            seen.decoded += 1;
        }
        seen.decode_compared += 1;
        let (ja, jb) = (
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap(),
        );
        if ja != jb && failures.len() < 5 {
            failures.push(format!(
                "record {} decodes differently:\n file {ja}\n live {jb}",
                seen.records
            ));
        }
        ControlFlow::Continue(())
    });
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
    eprintln!("{name}: {seen:?}");
    Some(seen)
}

#[test]
fn kernel_logger_system_and_perfinfo() {
    let Some(s) = check(
        "etlparser_ShutdownPerfDiagLogger.etl",
        "kernel_logger_system_and_perfinfo",
    ) else {
        return;
    };
    assert_eq!(s.records, 17_078);
    assert!(
        s.by_type["SYSTEM64"] > 1000 && s.by_type["PERFINFO64"] > 0,
        "{s:?}"
    );
    assert!(s.reframed > 0, "PERFINFO records come back as SYSTEM64");
    assert!(s.decoded > 10_000, "{s:?}");
}

#[test]
fn kernel_clr_stacks_and_32bit_events() {
    let Some(s) = check(
        "perfview_net.4.5.2.x64.etl",
        "kernel_clr_stacks_and_32bit_events",
    ) else {
        return;
    };
    assert_eq!(s.records, 179_474);
    for t in [
        "PERFINFO64",
        "SYSTEM64",
        "FULL_HEADER64",
        "EVENT_HEADER32",
        "EVENT_HEADER64",
    ] {
        assert!(
            s.by_type.get(t).copied().unwrap_or(0) > 0,
            "{t} missing: {s:?}"
        );
    }
    assert!(s.stacks > 100, "STACK_TRACE64 items: {s:?}");
}

#[test]
fn classic_mof_and_string_only() {
    let Some(s) = check("pyetw_out.etl", "classic_mof_and_string_only") else {
        return;
    };
    assert!(s.by_type["FULL_HEADER64"] >= 109, "{s:?}");
    assert!(s.by_type["EVENT_HEADER64"] >= 4, "{s:?}");
}

#[test]
fn classic_32bit_logger_with_kernel_classes() {
    let Some(s) = check(
        "syzygy_log_lib_image_data_32_v0.etl",
        "classic_32bit_logger_with_kernel_classes",
    ) else {
        return;
    };
    assert!(
        s.by_type.get("FULL_HEADER32").copied().unwrap_or(0) > 0,
        "{s:?}"
    );
    assert!(
        s.reframed > 0,
        "FULL_HEADER32 under the Image GUID comes back as SYSTEM32: {s:?}"
    );
    assert!(s.decoded > 0, "{s:?}");
}

#[test]
fn manifest_events() {
    let Some(s) = check("krabsetw_powershell.etl", "manifest_events") else {
        return;
    };
    assert!(s.by_type["EVENT_HEADER64"] >= 112, "{s:?}");
}

#[test]
fn tracelogging_with_schema_items() {
    let Some(s) = check("etlparser_AMSITrace.etl", "tracelogging_with_schema_items") else {
        return;
    };
    assert!(s.tl_schemas >= 19, "{s:?}");
    assert!(s.decoded >= 19, "{s:?}");
    let Some(p) = check(
        "perfview_primitive-types.etl",
        "tracelogging_with_schema_items",
    ) else {
        return;
    };
    assert!(p.tl_schemas >= 5 && p.decoded >= 5, "{p:?}");
}

#[test]
fn event_header32_from_32bit_logger() {
    let Some(s) = check(
        "perfview_smallEtlFile.etl",
        "event_header32_from_32bit_logger",
    ) else {
        return;
    };
    assert!(
        s.by_type.get("EVENT_HEADER32").copied().unwrap_or(0) >= 1,
        "{s:?}"
    );
}

#[test]
fn related_activity_items() {
    let Some(s) = check("tx_CrossMachineHTTP.etl", "related_activity_items") else {
        return;
    };
    assert_eq!(s.by_type["EVENT_HEADER64"], 3_396, "{s:?}");
    assert!(s.related > 0, "{s:?}");
}

#[test]
fn wpp_messages() {
    let Some(s) = check("s4_OneDrive_CldFlt0.etl", "wpp_messages") else {
        return;
    };
    assert_eq!(s.by_type["MESSAGE"], 13, "{s:?}");
}
