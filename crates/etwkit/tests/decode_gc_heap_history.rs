//! GCPerHeapHistory v2 (Microsoft-Windows-DotNETRuntimePrivate, .NET 4.5 to 4.5.2), whose
//! manifest template declares no fields: the runtime logs its per-heap GC history struct as is,
//! and etwkit reads it with the layout TraceEvent's parser uses (`schema::mend`). The layout is
//! checked against what the same runtime says elsewhere in the trace, not against itself: each
//! heap history's generation sizes after the GC are the sizes the public provider's GCHeapStats
//! of that GC reports (one heap per process in these traces), and the trailing byte is the
//! ClrInstanceID that the process's GCStart events carry.

mod common;

use std::collections::HashMap;
use std::ops::ControlFlow;

use etwkit::decode::{DecodedEvent, Decoder, Value};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;
use etwkit::Guid;

const CLR: Guid = Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4");
const CLR_PRIVATE: Guid = Guid::from_str_const("763fd754-7086-4dfe-95eb-c01a46faf4ca");

fn num(v: Option<&Value>, what: &str) -> u64 {
    v.and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("{what}: {v:?}"))
}

fn prop(d: &DecodedEvent, name: &str) -> u64 {
    num(d.properties.get(name), name)
}

#[derive(Default, Debug, PartialEq)]
struct Seen {
    histories: usize,
    /// Histories whose four generation sizes equal the next GCHeapStats of their process.
    sizes_agree: usize,
    /// Histories whose ClrInstanceID is the one of their process's GCStart.
    instance_agrees: usize,
    /// By payload length: (records, of them with ExtraGen0Commit).
    by_len: HashMap<usize, (usize, usize)>,
}

fn check(sample: &str, test: &str) -> Option<Seen> {
    let p = common::sample(sample, test)?;
    let f = EtlFile::open(&p).unwrap();
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let mut seen = Seen::default();
    // Per process: the sizes after the GC of the last history not yet paired, its GCStart's id.
    let mut pending: HashMap<u32, [u64; 4]> = HashMap::new();
    let mut instance: HashMap<u32, u64> = HashMap::new();
    f.for_each(Order::Time, |r| {
        let pid = r.event.pid;
        match (r.provider, r.descriptor.id, r.descriptor.version) {
            (CLR, 1, _) => {
                let e = d.decode_etl(r);
                instance.insert(pid, prop(&e, "ClrInstanceID"));
            }
            (CLR, 4, _) => {
                let e = d.decode_etl(r);
                if let Some(after) = pending.remove(&pid) {
                    let stats = [
                        "GenerationSize0",
                        "GenerationSize1",
                        "GenerationSize2",
                        "GenerationSize3",
                    ]
                    .map(|n| prop(&e, n));
                    assert_eq!(after, stats, "{sample}: pid {pid} at {}", r.event.timestamp);
                    seen.sizes_agree += 1;
                }
            }
            (CLR_PRIVATE, 4, 2) => {
                let e = d.decode_etl(r);
                assert_eq!(e.decode_issue, None, "{sample}");
                assert_eq!(e.unread_bytes, 0);
                assert_eq!(e.event_name.as_deref(), Some("GCPerHeapHistory"));
                let gens = match e.properties.get("GenData") {
                    Some(Value::Array(g)) => g,
                    v => panic!("GenData: {v:?}"),
                };
                assert_eq!(gens.len(), 5);
                let mut after = [0; 4];
                for (i, g) in gens.iter().enumerate() {
                    let Value::Struct(g) = g else {
                        panic!("GenData[{i}]: {g:?}")
                    };
                    assert_eq!(g.len(), 10);
                    let v = |n| num(g.get(n), n);
                    // A generation's size counts its free-list and free-object space.
                    assert!(v("SizeBefore") >= v("FreeListSpaceBefore") + v("FreeObjSpaceBefore"));
                    assert!(v("SizeAfter") >= v("FreeListSpaceAfter") + v("FreeObjSpaceAfter"));
                    if i < 4 {
                        after[i] = v("SizeAfter");
                    }
                }
                pending.insert(pid, after);
                // One heap (workstation GC) in every process of these traces.
                assert_eq!(prop(&e, "HeapIndex"), 0);
                for m in ["ExpandMechanisms", "CompactMechanisms"] {
                    assert!(
                        matches!(e.properties.get(m), Some(Value::Mapped { .. })),
                        "{m} is not a mechanism the runtime names: {:?}",
                        e.properties.get(m)
                    );
                }
                if instance.get(&pid) == Some(&prop(&e, "ClrInstanceID")) {
                    seen.instance_agrees += 1;
                }
                let n = seen.by_len.entry(r.event.payload.len()).or_default();
                n.0 += 1;
                n.1 += e.properties.get("ExtraGen0Commit").is_some() as usize;
                seen.histories += 1;
            }
            _ => {}
        }
        ControlFlow::Continue(())
    });
    Some(seen)
}

#[test]
fn net_4_5_x86_heap_histories_read_as_the_runtime_wrote_them() {
    let t = "net_4_5_x86_heap_histories_read_as_the_runtime_wrote_them";
    let Some(s) = check("perfview_net.4.5.x86.etl", t) else {
        return;
    };
    // .NET 4.5: 5 x 10 x 4 bytes of sizes, 6 x 4, the instance byte; no ExtraGen0Commit.
    assert_eq!(s.by_len, HashMap::from([(225, (1050, 0))]));
    assert_eq!(
        (s.histories, s.sizes_agree, s.instance_agrees),
        (1050, 1050, 1050)
    );
}

#[test]
fn net_4_5_2_x64_heap_histories_read_as_the_runtime_wrote_them() {
    let t = "net_4_5_2_x64_heap_histories_read_as_the_runtime_wrote_them";
    let Some(s) = check("perfview_net.4.5.2.x64.etl", t) else {
        return;
    };
    // .NET 4.5.2 adds the 8-byte ExtraGen0Commit: a 64-bit process (400 bytes of sizes) and
    // PerfView's own 32-bit one (200).
    assert_eq!(s.by_len, HashMap::from([(433, (263, 263)), (233, (1, 1))]));
    assert_eq!(
        (s.histories, s.sizes_agree, s.instance_agrees),
        (264, 264, 264)
    );
}
