//! Layouts that every copy of a producer's own description gets wrong, mended whichever way the
//! layout arrives: a built-in manifest, a user's `--manifest`, an EventSource manifest or the
//! TRACE_EVENT_INFO a merged trace embeds (which TDH builds from the same manifest, mistakes and all).
//!
//! - The .NET runtime's `ClrStackWalk` template (public, rundown and private providers) declares its
//!   `Stack` as `count="2"` pointers, while the runtime writes `FrameCount` of them: decoded as
//!   declared, every stack walk leaves all but its first two frames unread (perfview_net.4.5.2.x64.etl:
//!   14,983 records). TraceEvent's own parser reads `FrameCount` frames.
//! - `GCPerHeapHistory` version 2 of Microsoft-Windows-DotNETRuntimePrivate (.NET 4.5 to 4.5.2)
//!   has an empty template: the runtime logs its per-heap GC history struct as is, so every record
//!   would stay undecoded (perfview_net.4.5.x86.etl: 1,050 records, perfview_net.4.5.2.x64.etl:
//!   264). The layout is the one TraceEvent's `GCPerHeapHistoryTraceData` reads for version 2: five
//!   generations (0-2, the large object heap, gen 0 again after its second pass) of ten
//!   pointer-sized sizes, six 32-bit values, .NET 4.5.2's 64-bit `ExtraGen0Commit` (4.5 logs
//!   none), and the runtime instance as the last byte (payloads of 225, 233 and 433 bytes: 200 or
//!   400 bytes of sizes + 24 + 8 or not + 1). TraceEvent reads `HeapIndex` and `ExtraGen0Commit`
//!   one byte early, as if the instance id were two bytes; they are read here where they are.

use std::sync::Arc;

use crate::guid::Guid;

use super::types::in_type::{POINTER, SIZET, UINT32, UINT64, UINT8};
use super::types::out_type::HEXINT32;
use super::{Count, EventSchema, Length, Property, PropertyKind, SchemaKey, ValueMap};

/// Microsoft-Windows-DotNETRuntime, -DotNETRuntimeRundown and -DotNETRuntimePrivate.
const CLR_PROVIDERS: [Guid; 3] = [
    Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"),
    Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18"),
    Guid::from_str_const("763fd754-7086-4dfe-95eb-c01a46faf4ca"),
];

/// Microsoft-Windows-DotNETRuntimePrivate.
const CLR_PRIVATE: Guid = CLR_PROVIDERS[2];

/// Mends `schema`, the layout of `key`, in place when it is one of the layouts above; returns
/// whether it changed.
pub fn mend(key: &SchemaKey, schema: &mut EventSchema) -> bool {
    if !CLR_PROVIDERS.contains(&schema.provider) {
        return false;
    }
    match key {
        SchemaKey::Manifest {
            provider,
            id: 4,
            version: 2,
        } if *provider == CLR_PRIVATE && schema.properties.is_empty() => {
            schema.properties = gc_per_heap_history_v2();
            true
        }
        _ => clr_stack_walk(&mut schema.properties),
    }
}

/// The names of a generation's ten sizes in GCPerHeapHistory v2 (TraceEvent's
/// `GCPerHeapHistoryGenData` for version 2; v3's manifest names the last three PinnedSurv,
/// NonePinnedSurv and NewAllocation).
const GEN_DATA_V2: [&str; 10] = [
    "SizeBefore",
    "FreeListSpaceBefore",
    "FreeObjSpaceBefore",
    "SizeAfter",
    "FreeListSpaceAfter",
    "FreeObjSpaceAfter",
    "In",
    "Out",
    "NewAllocation",
    "SurvRate",
];

/// The heap expansion mechanisms, by bit.
const EXPAND_MECHANISMS: [&str; 6] = [
    "expand_reuse_normal",
    "expand_reuse_bestfit",
    "expand_new_seg_ep",
    "expand_new_seg",
    "expand_no_memory",
    "expand_next_full_gc",
];

/// The reasons to compact, by bit.
const COMPACT_REASONS: [&str; 11] = [
    "compact_low_ephemeral",
    "compact_high_frag",
    "compact_no_gaps",
    "compact_loh_forced",
    "compact_last_gc",
    "compact_induced_compacting",
    "compact_fragmented_gen0",
    "compact_high_mem_load",
    "compact_high_mem_frag",
    "compact_vhigh_mem_frag",
    "compact_no_gc_mode",
];

/// GCPerHeapHistory v2's layout (see the module's doc).
fn gc_per_heap_history_v2() -> Vec<Property> {
    let gen = Property {
        name: "GenData".into(),
        kind: PropertyKind::Struct(
            GEN_DATA_V2
                .iter()
                .map(|n| Property::scalar(*n, SIZET, 0))
                .collect(),
        ),
        count: Count::Fixed(5),
        length: Length::Natural,
        map: None,
    };
    let mut props = vec![gen];
    for n in ["CondemnReasons0", "CondemnReasons1", "MemoryPressure"] {
        props.push(Property::scalar(n, UINT32, 0));
    }
    // The runtime sets bit 31 when it chose a mechanism and the bit of the one it chose; named
    // as TraceEvent names them (its gc_heap_expand_mechanism and gc_heap_compact_reason), 0 as
    // not_specified; any other value stays a number.
    for (n, names) in [
        ("ExpandMechanisms", &EXPAND_MECHANISMS[..]),
        ("CompactMechanisms", &COMPACT_REASONS[..]),
    ] {
        let mut entries = vec![(0, "not_specified".to_string())];
        entries.extend(
            names
                .iter()
                .enumerate()
                .map(|(i, name)| ((1u64 << 31) | (1 << i), name.to_string())),
        );
        props.push(Property {
            map: Some(Arc::new(ValueMap {
                name: format!("GCPerHeapHistory{n}"),
                is_bitmap: false,
                entries,
            })),
            ..Property::scalar(n, UINT32, HEXINT32)
        });
    }
    props.push(Property::scalar("HeapIndex", UINT32, 0));
    props.push(Property {
        count: Count::IfRoom,
        ..Property::scalar("ExtraGen0Commit", UINT64, 0)
    });
    props.push(Property::scalar("ClrInstanceID", UINT8, 0));
    props
}

/// `FrameCount` (UInt32) directly followed by `Stack`, a fixed-count pointer array: the array's
/// length becomes `FrameCount`.
fn clr_stack_walk(props: &mut [Property]) -> bool {
    let Some(i) = props.iter().position(|p| p.name == "Stack") else {
        return false;
    };
    let scalar = |p: &Property, want: u16| matches!(p.kind, PropertyKind::Scalar { in_type, .. } if in_type == want);
    let fits = i > 0
        && props[i - 1].name == "FrameCount"
        && scalar(&props[i - 1], UINT32)
        && props[i - 1].count == Count::One
        && scalar(&props[i], POINTER)
        && matches!(props[i].count, Count::Fixed(_));
    if fits {
        props[i].count = Count::FromProperty(i - 1);
    }
    fits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Length, SchemaSource};

    fn walk(provider: Guid, count: Count) -> EventSchema {
        EventSchema {
            provider,
            provider_name: None,
            event_name: Some("ClrStackWalk".into()),
            task_name: None,
            opcode_name: None,
            keywords_name: None,
            properties: vec![
                Property::scalar("ClrInstanceID", crate::schema::types::in_type::UINT16, 0),
                Property::scalar("FrameCount", UINT32, 0),
                Property {
                    count,
                    length: Length::Natural,
                    ..Property::scalar("Stack", POINTER, 0)
                },
            ],
            source: SchemaSource::Embedded,
        }
    }

    const KEY: SchemaKey = SchemaKey::Manifest {
        provider: CLR_PROVIDERS[0],
        id: 82,
        version: 0,
    };

    #[test]
    fn a_clr_stack_walk_reads_frame_count_frames() {
        let mut s = walk(CLR_PROVIDERS[0], Count::Fixed(2));
        assert!(mend(&KEY, &mut s));
        assert_eq!(s.properties[2].count, Count::FromProperty(1));
        // Mended once: a second pass (an already mended built-in layout) changes nothing.
        assert!(!mend(&KEY, &mut s));
    }

    #[test]
    fn gc_per_heap_history_v2_gets_the_runtime_s_struct_and_only_it() {
        let key = |version| SchemaKey::Manifest {
            provider: CLR_PRIVATE,
            id: 4,
            version,
        };
        let mut s = walk(CLR_PRIVATE, Count::Fixed(2));
        s.properties.clear();
        let mut v1 = s.clone();
        assert!(mend(&key(2), &mut s));
        let names: Vec<&str> = s.properties.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names.first(), Some(&"GenData"));
        assert_eq!(names.last(), Some(&"ClrInstanceID"));
        assert_eq!(s.properties.len(), 9);
        // Described by its producer (not empty), or another version: left as it is.
        assert!(!mend(&key(2), &mut s));
        assert!(!mend(&key(1), &mut v1));
        assert!(v1.properties.is_empty());
    }

    #[test]
    fn other_providers_keep_their_declared_counts() {
        let mut s = walk(
            Guid::from_str_const("11111111-2222-3333-4444-555555555555"),
            Count::Fixed(2),
        );
        assert!(!mend(&KEY, &mut s));
        assert_eq!(s.properties[2].count, Count::Fixed(2));
    }
}
