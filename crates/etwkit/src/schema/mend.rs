//! Layouts that every copy of a producer's own description gets wrong, mended whichever way the
//! layout arrives: a built-in manifest, a user's `--manifest`, an EventSource manifest or the
//! TRACE_EVENT_INFO a merged trace embeds (which TDH builds from the same manifest, mistakes and all).
//!
//! - The .NET runtime's `ClrStackWalk` template (public, rundown and private providers) declares its
//!   `Stack` as `count="2"` pointers, while the runtime writes `FrameCount` of them: decoded as
//!   declared, every stack walk leaves all but its first two frames unread (perfview_net.4.5.2.x64.etl:
//!   14,983 records). TraceEvent's own parser reads `FrameCount` frames.

use crate::guid::Guid;

use super::types::in_type::{POINTER, UINT32};
use super::{Count, EventSchema, Property, PropertyKind};

/// Microsoft-Windows-DotNETRuntime, -DotNETRuntimeRundown and -DotNETRuntimePrivate.
const CLR_PROVIDERS: [Guid; 3] = [
    Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"),
    Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18"),
    Guid::from_str_const("763fd754-7086-4dfe-95eb-c01a46faf4ca"),
];

/// Mends `schema` in place when it is one of the layouts above; returns whether it changed.
pub fn mend(schema: &mut EventSchema) -> bool {
    if CLR_PROVIDERS.contains(&schema.provider) {
        return clr_stack_walk(&mut schema.properties);
    }
    false
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

    #[test]
    fn a_clr_stack_walk_reads_frame_count_frames() {
        let mut s = walk(CLR_PROVIDERS[0], Count::Fixed(2));
        assert!(mend(&mut s));
        assert_eq!(s.properties[2].count, Count::FromProperty(1));
        // Mended once: a second pass (an already mended built-in layout) changes nothing.
        assert!(!mend(&mut s));
    }

    #[test]
    fn other_providers_keep_their_declared_counts() {
        let mut s = walk(
            Guid::from_str_const("11111111-2222-3333-4444-555555555555"),
            Count::Fixed(2),
        );
        assert!(!mend(&mut s));
        assert_eq!(s.properties[2].count, Count::Fixed(2));
    }
}
