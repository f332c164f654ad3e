//! Metadata embedded in merged/relogged traces (KernelTraceControl EventInfo / EventMapInfo records):
//! pktmonvpn_PktMon.etl against `netsh pktmon format` output (reference/pktmonvpn_PktMon.txt).

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Value};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::{Registry, SchemaKey, SchemaSource};
use etwkit::Guid;

const PKTMON: Guid = Guid::from_str_const("4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac");

/// One "PktGroupId ..." line of the reference, with its header.
#[derive(Debug, PartialEq)]
struct PacketLine {
    cpu: u16,
    pid: u32,
    tid: u32,
    local_time: String,
    fields: Vec<(String, String)>,
}

fn reference_packets(text: &str) -> Vec<PacketLine> {
    let mut out = Vec::new();
    for l in text.lines() {
        let Some(i) = l.find("[Microsoft-Windows-PktMon] PktGroupId") else {
            continue;
        };
        // [02]0004.0270::2021-06-01 21:40:57.976239700 [Microsoft-Windows-PktMon] PktGroupId 5629..., ...
        let cpu = u16::from_str_radix(&l[1..3], 16).unwrap();
        let pid = u32::from_str_radix(&l[4..8], 16).unwrap();
        let tid = u32::from_str_radix(&l[9..13], 16).unwrap();
        let local_time = l[15..i].trim().to_string();
        let body = &l[i + "[Microsoft-Windows-PktMon] ".len()..];
        let fields = body
            .split(", ")
            .map(|kv| {
                let kv = kv.trim();
                let (k, v) = kv.split_once(' ').unwrap();
                (k.to_string(), v.trim().to_string())
            })
            .collect();
        out.push(PacketLine {
            cpu,
            pid,
            tid,
            local_time,
            fields,
        });
    }
    out
}

/// `YYYY-MM-DD HH:MM:SS.fffffff00` local time, as `netsh pktmon format` prints it.
fn local_text(utc_filetime: i64, bias_minutes: i32) -> String {
    let local = utc_filetime - bias_minutes as i64 * 60 * 10_000_000;
    let t = etwkit::time::format_rfc3339(local); // 2021-06-01T21:40:57.9762397Z
    format!("{} {}00", &t[..10], &t[11..t.len() - 1])
}

#[test]
fn pktmon_events_match_netsh_format_output() {
    let t = "pktmon_events_match_netsh_format_output";
    let Some(path) = common::sample("pktmonvpn_PktMon.etl", t) else {
        return;
    };
    let Some(refp) = common::sample("reference/pktmonvpn_PktMon.txt", t) else {
        return;
    };
    let raw = std::fs::read(refp).unwrap();
    let units: Vec<u16> = raw[2..]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let text = String::from_utf16(&units).unwrap();
    let expected = reference_packets(&text);
    assert_eq!(expected.len(), 3646);

    let file = EtlFile::open(path).unwrap();
    let bias = file.header().bias_minutes;
    let mut reg = Registry::new();
    let learned = reg.learn_from_file(&file);
    assert_eq!(
        (
            learned.event_infos,
            learned.map_infos,
            learned.schemas_added
        ),
        (11, 7, 11)
    );
    assert!(learned.errors.is_empty(), "{:?}", learned.errors);
    let schema = reg
        .get(&SchemaKey::Manifest {
            provider: PKTMON,
            id: 160,
            version: 0,
        })
        .unwrap()
        .clone();
    assert_eq!(schema.source, SchemaSource::Embedded);
    assert_eq!(
        schema.provider_name.as_deref(),
        Some("Microsoft-Windows-PktMon")
    );
    let dec = Decoder::new(reg);

    let mut by_id: BTreeMap<u16, u64> = BTreeMap::new();
    let mut got = Vec::new();
    let mut first = None;
    file.for_each(Order::Time, |r| {
        if r.event.provider != PKTMON {
            return ControlFlow::Continue(());
        }
        let d = dec.decode(&r.event);
        assert!(
            d.is_decoded() && d.undecoded.is_none() && d.unread_bytes == 0,
            "{d:?}"
        );
        assert_eq!(d.provider_name.as_deref(), Some("Microsoft-Windows-PktMon"));
        *by_id.entry(r.event.descriptor.id).or_default() += 1;
        if r.event.descriptor.id == 160 {
            if first.is_none() {
                first = Some((d.properties.clone(), r.event.payload.len()));
            }
            let p = &d.properties;
            let s = |n: &str| match p.get(n).unwrap() {
                Value::Mapped { name, .. } => name.clone(),
                v => v.as_u64().unwrap().to_string(),
            };
            got.push(PacketLine {
                cpu: r.event.cpu,
                pid: r.event.pid,
                tid: r.event.tid,
                local_time: local_text(r.event.timestamp, bias),
                fields: vec![
                    ("PktGroupId".into(), s("PktGroupId")),
                    ("PktNumber".into(), s("PktNumber")),
                    ("Appearance".into(), s("AppearanceCount")),
                    ("Direction".into(), s("DirTag")),
                    ("Type".into(), s("PacketType")),
                    ("Component".into(), s("ComponentId")),
                    ("Edge".into(), s("EdgeId")),
                    ("Filter".into(), s("FilterId")),
                    ("OriginalSize".into(), s("OriginalPayloadSize")),
                    ("LoggedSize".into(), s("LoggedPayloadSize")),
                ],
            });
        }
        ControlFlow::Continue(())
    });
    // Event counts per id, as in reference/pktmonvpn_summary.txt.
    let want: BTreeMap<u16, u64> = [
        (20, 131),
        (30, 279),
        (40, 15),
        (60, 18),
        (65, 8),
        (66, 8),
        (70, 7),
        (75, 113),
        (80, 131),
        (90, 158),
        (160, 3646),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_id, want);
    assert_eq!(by_id.values().sum::<u64>(), 4514);

    // The first packet: the table in ../shared/notes/etl-format.md §7.
    let (p, len) = first.unwrap();
    assert_eq!(len, 242 - 0x50);
    let j = serde_json::to_value(&p).unwrap();
    assert_eq!(j["PktGroupId"], 562949953421313u64);
    assert_eq!(
        (j["PktNumber"].clone(), j["AppearanceCount"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(
        (j["DirTag"].as_str(), j["PacketType"].as_str()),
        (Some("Rx"), Some("WiFi"))
    );
    assert_eq!(
        (
            j["ComponentId"].clone(),
            j["EdgeId"].clone(),
            j["FilterId"].clone()
        ),
        (11.into(), 1.into(), 0.into())
    );
    assert_eq!(j["DropReason"].as_str(), Some("Unspecified"));
    assert_eq!(j["DropLocation"].as_str(), Some("0x0"));
    assert_eq!(
        (
            j["OriginalPayloadSize"].clone(),
            j["LoggedPayloadSize"].clone()
        ),
        (197.into(), 128.into())
    );
    match p.get("Payload") {
        Some(Value::Binary(b)) => {
            assert_eq!(b.len(), 128);
            // 802.11 frame control 0x0862, then DA 01-00-5E-7F-FF-FA (the reference's next line).
            assert_eq!(
                &b[..10],
                &[0x08, 0x62, 0x00, 0x00, 0x01, 0x00, 0x5e, 0x7f, 0xff, 0xfa]
            );
        }
        other => panic!("Payload is {other:?}"),
    }

    // Every packet line of the reference, in order: CPU, PID.TID, local time to 100 ns, all fields.
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "packet line {i}");
    }
}

/// Corrupt metadata and payloads never panic: every EventInfo/EventMapInfo blob of two real files is
/// truncated at every length and has bytes flipped; each schema that still parses decodes random
/// payloads (errors name a property, or the decode succeeds).
#[test]
fn corrupt_metadata_and_payloads_never_panic() {
    let t = "corrupt_metadata_and_payloads_never_panic";
    let mut blobs: Vec<(u8, Vec<u8>)> = Vec::new();
    for name in ["pktmonvpn_PktMon.etl", "perfview_net.4.5.2.x64.etl"] {
        let Some(path) = common::sample(name, t) else {
            return;
        };
        let file = EtlFile::open(path).unwrap();
        file.for_each(Order::File, |r| {
            if r.event.header_type.is_classic()
                && r.event.provider == etwkit::schema::tdh::METADATA_CLASS
            {
                blobs.push((r.event.descriptor.opcode, r.event.payload.to_vec()));
            }
            ControlFlow::Continue(())
        });
    }
    assert_eq!(blobs.len(), 11 + 7 + 61 + 24);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut parsed, mut decoded_ok, mut decode_err) = (0, 0, 0);
    for (op, blob) in &blobs {
        let mut variants: Vec<Vec<u8>> = (0..blob.len())
            .step_by(7)
            .map(|n| blob[..n].to_vec())
            .collect();
        for _ in 0..40 {
            let mut b = blob.clone();
            for _ in 0..4 {
                let i = (next() as usize) % b.len();
                b[i] = next() as u8;
            }
            variants.push(b);
        }
        for v in variants {
            if *op == 33 {
                let _ = etwkit::schema::tdh::parse_map_info(&v);
                continue;
            }
            let Ok(Some(info)) = etwkit::schema::tdh::parse_event_info(&v) else {
                continue;
            };
            parsed += 1;
            let plan = etwkit::decode::Plan::new(&info.schema);
            for len in [0usize, 3, 17, 64, 300] {
                let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                match plan.decode(&payload, if len % 2 == 0 { 8 } else { 4 }) {
                    Ok(_) => decoded_ok += 1,
                    Err(e) => {
                        assert!(!e.property.is_empty() && e.offset <= payload.len(), "{e:?}");
                        decode_err += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "{parsed} corrupt schemas parsed, {decoded_ok} decodes ok, {decode_err} decode errors"
    );
    assert!(parsed > 100 && decode_err > 100);
}

/// Learning while streaming (no pre-scan): in file order some events come before the metadata that
/// describes them (../shared/notes §7: pktmonvpn 1,176, stmcast 7,626) and stay undecoded; in time
/// order the metadata precedes its first instance and every event decodes.
#[test]
fn streaming_learning_matches_the_metadata_placement() {
    for (name, total, early) in [
        ("pktmonvpn_PktMon.etl", 4514u64, 1176u64),
        ("stmcast_PktMon.etl", 30973, 7626),
    ] {
        let Some(path) = common::sample(name, "streaming_learning_matches_the_metadata_placement")
        else {
            return;
        };
        let file = EtlFile::open(path).unwrap();
        for (order, want_undecoded) in [(Order::File, early), (Order::Time, 0)] {
            let mut dec = Decoder::new(Registry::new());
            let (mut decoded, mut undecoded) = (0u64, 0u64);
            file.for_each(order, |r| {
                dec.learn(&r.event);
                if r.event.provider == PKTMON {
                    if dec.decode(&r.event).is_decoded() {
                        decoded += 1;
                    } else {
                        undecoded += 1;
                    }
                }
                ControlFlow::Continue(())
            });
            assert_eq!(
                (decoded + undecoded, undecoded),
                (total, want_undecoded),
                "{name} {order:?}"
            );
            assert!(dec.learned().errors.is_empty());
        }
    }
}

/// perfview_net.4.5.2.x64.etl embeds the TRACE_EVENT_INFO of the CLR's ClrStackWalk event, built
/// by TDH from the runtime's manifest: `Stack` as two pointers. The runtime writes `FrameCount` of
/// them, and the layout is mended whatever its source (`schema::mend`): every stack walk of the
/// file is read whole, its frames the payload's pointers in order.
#[test]
fn embedded_clr_stack_walks_read_frame_count_frames() {
    let t = "embedded_clr_stack_walks_read_frame_count_frames";
    let Some(path) = common::sample("perfview_net.4.5.2.x64.etl", t) else {
        return;
    };
    const CLR: Guid = Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4");
    let file = EtlFile::open(path).unwrap();
    let mut reg = Registry::with_builtins();
    reg.learn_from_file(&file);
    let key = SchemaKey::Manifest {
        provider: CLR,
        id: 82,
        version: 0,
    };
    let schema = reg.get(&key).unwrap();
    assert_eq!(schema.source, SchemaSource::Embedded);
    let names: Vec<&str> = schema.properties.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ClrInstanceID",
            "Reserved1",
            "Reserved2",
            "FrameCount",
            "Stack"
        ]
    );
    assert_eq!(
        schema.properties[4].count,
        etwkit::schema::Count::FromProperty(3)
    );
    let dec = Decoder::new(reg);

    let (mut walks, mut frames, mut longest) = (0u64, 0u64, 0usize);
    file.for_each(Order::Time, |r| {
        let e = &r.event;
        if e.provider != CLR || e.descriptor.id != 82 {
            return ControlFlow::Continue(());
        }
        let d = dec.decode(e);
        assert!(
            d.is_decoded() && d.decode_issue.is_none() && d.unread_bytes == 0,
            "{d:?}"
        );
        let n = d.properties.get("FrameCount").unwrap().as_u64().unwrap() as usize;
        let ps = e.pointer_size as usize;
        assert_eq!(e.payload.len(), 8 + n * ps);
        let Some(Value::Array(stack)) = d.properties.get("Stack") else {
            panic!("no Stack array: {d:?}");
        };
        let want: Vec<u64> = e.payload[8..]
            .chunks_exact(ps)
            .map(|c| c.iter().rev().fold(0u64, |v, &b| v << 8 | b as u64))
            .collect();
        let got: Vec<u64> = stack.iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(got, want);
        walks += 1;
        frames += n as u64;
        longest = longest.max(n);
        ControlFlow::Continue(())
    });
    eprintln!("{walks} stack walks, {frames} frames, longest {longest}");
    assert_eq!(walks, 14_983);
    assert!(longest > 2, "longest stack walk {longest} frames");
}

/// The TRACE_EVENT_INFO that KernelTraceControl embeds for perfview_net.4.5.2.x64.etl's CLR events
/// names their tasks and opcodes but not the events. With the built-in manifests, each such layout
/// takes the manifest's name for the same provider, id and version, and stays the embedded layout:
/// the same properties as without the built-ins, only `event_name` added.
#[test]
fn embedded_clr_layouts_take_the_builtin_manifest_s_event_names() {
    let t = "embedded_clr_layouts_take_the_builtin_manifest_s_event_names";
    let Some(path) = common::sample("perfview_net.4.5.2.x64.etl", t) else {
        return;
    };
    const CLR: Guid = Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4");
    const RUNDOWN: Guid = Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18");
    let file = EtlFile::open(path).unwrap();
    let mut with = Registry::with_builtins();
    with.learn_from_file(&file);
    let mut without = Registry::new();
    without.learn_from_file(&file);
    let (with, without) = (Decoder::new(with), Decoder::new(without));
    let mut named: BTreeMap<String, u64> = BTreeMap::new();
    let mut records = 0u64;
    file.for_each(Order::File, |r| {
        let e = &r.event;
        if e.provider != CLR && e.provider != RUNDOWN {
            return ControlFlow::Continue(());
        }
        let (a, b) = (with.decode(e), without.decode(e));
        assert_eq!(a.source, Some(SchemaSource::Embedded));
        assert_eq!(b.source, Some(SchemaSource::Embedded));
        assert_eq!(b.event_name, None, "{b:?}");
        assert_eq!((&a.properties, &a.task_name), (&b.properties, &b.task_name));
        let key = SchemaKey::Manifest {
            provider: e.provider,
            id: e.descriptor.id,
            version: e.descriptor.version,
        };
        let builtin = etwkit::schema::builtin::manifests::lookup(&key).expect("a built-in layout");
        assert_eq!(
            a.event_name.as_deref(),
            builtin.event_name.as_deref(),
            "{key:?}"
        );
        *named.entry(a.event_name.unwrap().to_string()).or_default() += 1;
        records += 1;
        ControlFlow::Continue(())
    });
    assert_eq!(records, 65_741);
    // TraceEvent's COUNT of GC/Stop (reference/perfview_net.4.5.2.x64.baseline.txt).
    assert_eq!(named.get("GCStop_V1"), Some(&264));
    assert_eq!(named.get("ClrStackWalk"), Some(&14_983));
}
