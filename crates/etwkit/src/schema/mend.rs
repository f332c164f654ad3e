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
//! - The CLR's manifests declare some enum and flag fields as bare integers whose values come from
//!   the runtime's own enums, which TraceEvent's compiled parsers name: GlobalHeapHistory's
//!   `Reason` (the gc_reason that GCStart's `Reason` names with the manifest's GCReasonMap),
//!   `GlobalMechanisms` and `PauseMode`, PerHeapHistory's `CompactMechanisms` and
//!   `ExpandMechanisms` (bit 31 set with the bit of the mechanism chosen), GCSettingsRundown's
//!   `BitSettings`, the private NgenBind's `ReasonCode`. They get those maps, named as the
//!   manifest or TraceEvent names the values (`"Reason":"Induced"`, `"GlobalMechanisms":
//!   "Compaction, Promotion"`); a value outside the map stays a number.

use std::sync::{Arc, OnceLock};

use crate::guid::Guid;

use super::types::in_type::{
    HEXINT32 as HEXINT32_IN, INT32, POINTER, SIZET, UINT32, UINT64, UINT8,
};
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
    let mut changed = match key {
        SchemaKey::Manifest {
            provider,
            id: 4,
            version: 2,
        } if *provider == CLR_PRIVATE && schema.properties.is_empty() => {
            schema.properties = gc_per_heap_history_v2();
            true
        }
        _ => clr_stack_walk(&mut schema.properties),
    };
    changed |= clr_maps(&mut schema.properties);
    changed
}

/// A value map or bitmap of the CLR's, built once.
struct ClrMap {
    name: &'static str,
    is_bitmap: bool,
    entries: &'static [(u64, &'static str)],
    built: OnceLock<Arc<ValueMap>>,
}

impl ClrMap {
    const fn new(
        name: &'static str,
        is_bitmap: bool,
        entries: &'static [(u64, &'static str)],
    ) -> ClrMap {
        ClrMap {
            name,
            is_bitmap,
            entries,
            built: OnceLock::new(),
        }
    }

    fn get(&self) -> Arc<ValueMap> {
        self.built
            .get_or_init(|| {
                Arc::new(ValueMap {
                    name: self.name.to_string(),
                    is_bitmap: self.is_bitmap,
                    entries: self
                        .entries
                        .iter()
                        .map(|(v, n)| (*v, n.to_string()))
                        .collect(),
                })
            })
            .clone()
    }
}

/// The runtime's `gc_reason`: the manifest's GCReasonMap (GCStart's Reason), and the reasons
/// later runtimes added, named as TraceEvent's GCReason names them.
static GC_REASON: ClrMap = ClrMap::new(
    "GCReasonMap",
    false,
    &[
        (0, "AllocSmall"),
        (1, "Induced"),
        (2, "LowMemory"),
        (3, "Empty"),
        (4, "AllocLarge"),
        (5, "OutOfSpaceSmallObjectHeap"),
        (6, "OutOfSpaceLargeObjectHeap"),
        (7, "InducedNoForce"),
        (8, "Stress"),
        (9, "InducedLowMemory"),
        (10, "InducedCompacting"),
        (11, "LowMemoryHost"),
        (12, "PMFullGC"),
        (13, "LowMemoryHostBlocking"),
    ],
);

/// GlobalHeapHistory's GlobalMechanisms (TraceEvent's GCGlobalMechanisms).
static GLOBAL_MECHANISMS: ClrMap = ClrMap::new(
    "GCGlobalMechanisms",
    true,
    &[
        (0, "None"),
        (0x1, "Concurrent"),
        (0x2, "Compaction"),
        (0x4, "Promotion"),
        (0x8, "Demotion"),
        (0x10, "CardBundles"),
    ],
);

/// GlobalHeapHistory's PauseMode, the GC latency mode (TraceEvent's GCPauseMode).
static PAUSE_MODE: ClrMap = ClrMap::new(
    "GCPauseMode",
    false,
    &[
        (0, "Batch"),
        (1, "Interactive"),
        (2, "LowLatency"),
        (3, "SustainedLowLatency"),
        (4, "NoGC"),
    ],
);

/// The runtime sets bit 31 of a heap's mechanism when it chose one, and the bit of the one it
/// chose; TraceEvent names the bit's index (its gc_heap_expand_mechanism and
/// gc_heap_compact_reason), 0 as not_specified. Any other value stays a number.
static EXPAND_MECHANISMS: ClrMap = ClrMap::new(
    "GCExpandMechanisms",
    false,
    &[
        (0, "not_specified"),
        (0x8000_0001, "expand_reuse_normal"),
        (0x8000_0002, "expand_reuse_bestfit"),
        (0x8000_0004, "expand_new_seg_ep"),
        (0x8000_0008, "expand_new_seg"),
        (0x8000_0010, "expand_no_memory"),
        (0x8000_0020, "expand_next_full_gc"),
    ],
);

/// See [`EXPAND_MECHANISMS`].
static COMPACT_REASONS: ClrMap = ClrMap::new(
    "GCCompactReasons",
    false,
    &[
        (0, "not_specified"),
        (0x8000_0001, "compact_low_ephemeral"),
        (0x8000_0002, "compact_high_frag"),
        (0x8000_0004, "compact_no_gaps"),
        (0x8000_0008, "compact_loh_forced"),
        (0x8000_0010, "compact_last_gc"),
        (0x8000_0020, "compact_induced_compacting"),
        (0x8000_0040, "compact_fragmented_gen0"),
        (0x8000_0080, "compact_high_mem_load"),
        (0x8000_0100, "compact_high_mem_frag"),
        (0x8000_0200, "compact_vhigh_mem_frag"),
        (0x8000_0400, "compact_no_gc_mode"),
    ],
);

/// GCSettingsRundown's BitSettings (TraceEvent's GCSettingsFlags).
static GC_SETTINGS: ClrMap = ClrMap::new(
    "GCSettingsFlags",
    true,
    &[
        (0x1, "GCSettingsConcurrent"),
        (0x2, "GCSettingsLargePages"),
        (0x4, "GCSettingsFrozenSegs"),
        (0x8, "GCSettingsHardLimitConfig"),
        (0x10, "GCSettingsNoAffinitize"),
    ],
);

/// NgenBind's ReasonCode (TraceEvent's NGenBind).
static NGEN_BIND: ClrMap = ClrMap::new(
    "NGenBind",
    false,
    &[
        (0, "START_BIND"),
        (1, "NO_INDEX"),
        (2, "SYSTEM_ASSEMBLY_NOT_AVAILABLE"),
        (3, "NO_NATIVE_IMAGE"),
        (4, "REJECT_CONFIG_MASK"),
        (5, "FAIL"),
        (6, "INDEX_CORRUPTION"),
        (7, "REJECT_TIMESTAMP"),
        (8, "REJECT_NATIVEIMAGE_NOT_FOUND"),
        (9, "REJECT_IL_SIG"),
        (10, "REJECT_LOADER_EVAL_FAIL"),
        (11, "MISSING_FOUND"),
        (12, "REJECT_HOSTASM"),
        (13, "REJECT_IL_NOT_FOUND"),
        (14, "REJECT_APPBASE_NOT_FILE"),
        (15, "BIND_DEPEND_REJECT_REF_DEF_MISMATCH"),
        (16, "BIND_DEPEND_REJECT_NGEN_SIG"),
        (17, "APPLY_EXTERNAL_RELOCS_FAILED"),
        (18, "SYSTEM_ASSEMBLY_NATIVEIMAGE_NOT_AVAILABLE"),
        (19, "ASSEMBLY_HAS_DIFFERENT_GRANT"),
        (20, "ASSEMBLY_NOT_DOMAIN_NEUTRAL"),
        (21, "NATIVEIMAGE_VERSION_MISMATCH"),
        (22, "LOADFROM_NOT_ALLOWED"),
        (23, "DEPENDENCY_HAS_DIFFERENT_IDENTITY"),
    ],
);

/// Gives the CLR's 32-bit enum and flag fields that its manifest declares without a map the map
/// their values come from (see the module's doc); fields with a map of their own keep it.
fn clr_maps(props: &mut [Property]) -> bool {
    let has = |n: &str| props.iter().any(|p| p.name == n);
    let (global, ngen) = (has("GlobalMechanisms"), has("BindingID"));
    let mut changed = false;
    for p in props.iter_mut() {
        let int32 = matches!(p.kind, PropertyKind::Scalar { in_type, .. }
            if matches!(in_type, UINT32 | INT32 | HEXINT32_IN));
        if p.map.is_some() || !int32 || p.count != Count::One {
            continue;
        }
        let map = match p.name.as_str() {
            "GlobalMechanisms" => &GLOBAL_MECHANISMS,
            "Reason" if global => &GC_REASON,
            "PauseMode" if global => &PAUSE_MODE,
            "ExpandMechanisms" => &EXPAND_MECHANISMS,
            "CompactMechanisms" => &COMPACT_REASONS,
            "BitSettings" => &GC_SETTINGS,
            "ReasonCode" if ngen => &NGEN_BIND,
            _ => continue,
        };
        p.map = Some(map.get());
        changed = true;
    }
    changed
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
    // Named by the CLR's own maps (see [`clr_maps`]).
    props.push(Property::scalar("ExpandMechanisms", UINT32, HEXINT32));
    props.push(Property::scalar("CompactMechanisms", UINT32, HEXINT32));
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
