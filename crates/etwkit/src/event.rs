//! The one event model every source produces: ETL files, live Windows ETW, live Linux tracing.
//!
//! An [`EventRecord`] borrows its payload and extended data where it can (from a memory-mapped file,
//! a decompressed buffer or a ring page); [`EventRecord::into_owned`] gives a `'static` copy for queues
//! and callbacks that outlive the buffer.
//!
//! Extended data is kept in the on-disk ETW encoding (a chain of `EVENT_HEADER_EXTENDED_DATA_ITEM`s,
//! see [`ExtItems`]) whatever the source: live sources encode their stacks and TraceLogging schemas the
//! same way, so the decoder and the ETL writer need only one path.

use std::borrow::Cow;

use crate::guid::Guid;

/// How a record was framed on disk (or which framing a live source chose). Names are the contract of
/// `etwkit stats` (`header_types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum HeaderType {
    #[serde(rename = "SYSTEM32")]
    System32,
    #[serde(rename = "SYSTEM64")]
    System64,
    #[serde(rename = "COMPACT32")]
    Compact32,
    #[serde(rename = "COMPACT64")]
    Compact64,
    #[serde(rename = "PERFINFO32")]
    PerfInfo32,
    #[serde(rename = "PERFINFO64")]
    PerfInfo64,
    #[serde(rename = "FULL_HEADER32")]
    FullHeader32,
    #[serde(rename = "FULL_HEADER64")]
    FullHeader64,
    #[serde(rename = "INSTANCE32")]
    Instance32,
    #[serde(rename = "INSTANCE64")]
    Instance64,
    #[serde(rename = "EVENT_HEADER32")]
    EventHeader32,
    #[serde(rename = "EVENT_HEADER64")]
    EventHeader64,
    #[serde(rename = "MESSAGE")]
    Message,
    #[serde(rename = "TIMED")]
    Timed,
    #[serde(rename = "ERROR")]
    Error,
    #[serde(rename = "WNODE")]
    Wnode,
}

impl HeaderType {
    /// The on-disk `HeaderType` byte (TRACE_HEADER_TYPE_*), `MESSAGE` uses the pseudo value 0x0F.
    pub fn from_byte(b: u8) -> Option<Self> {
        use HeaderType::*;
        Some(match b {
            0x01 => System32,
            0x02 => System64,
            0x03 => Compact32,
            0x04 => Compact64,
            0x0A => FullHeader32,
            0x0B => Instance32,
            0x0C => Timed,
            0x0D => Error,
            0x0E => Wnode,
            0x0F => Message,
            0x10 => PerfInfo32,
            0x11 => PerfInfo64,
            0x12 => EventHeader32,
            0x13 => EventHeader64,
            0x14 => FullHeader64,
            0x15 => Instance64,
            _ => return None,
        })
    }

    pub fn to_byte(self) -> u8 {
        use HeaderType::*;
        match self {
            System32 => 0x01,
            System64 => 0x02,
            Compact32 => 0x03,
            Compact64 => 0x04,
            FullHeader32 => 0x0A,
            Instance32 => 0x0B,
            Timed => 0x0C,
            Error => 0x0D,
            Wnode => 0x0E,
            Message => 0x0F,
            PerfInfo32 => 0x10,
            PerfInfo64 => 0x11,
            EventHeader32 => 0x12,
            EventHeader64 => 0x13,
            FullHeader64 => 0x14,
            Instance64 => 0x15,
        }
    }

    pub fn name(self) -> &'static str {
        use HeaderType::*;
        match self {
            System32 => "SYSTEM32",
            System64 => "SYSTEM64",
            Compact32 => "COMPACT32",
            Compact64 => "COMPACT64",
            PerfInfo32 => "PERFINFO32",
            PerfInfo64 => "PERFINFO64",
            FullHeader32 => "FULL_HEADER32",
            FullHeader64 => "FULL_HEADER64",
            Instance32 => "INSTANCE32",
            Instance64 => "INSTANCE64",
            EventHeader32 => "EVENT_HEADER32",
            EventHeader64 => "EVENT_HEADER64",
            Message => "MESSAGE",
            Timed => "TIMED",
            Error => "ERROR",
            Wnode => "WNODE",
        }
    }

    /// Payload pointer size implied by the header type (MESSAGE records carry theirs in flags).
    pub fn pointer_size(self) -> Option<u8> {
        use HeaderType::*;
        match self {
            System32 | Compact32 | PerfInfo32 | FullHeader32 | Instance32 | EventHeader32 => {
                Some(4)
            }
            System64 | Compact64 | PerfInfo64 | FullHeader64 | Instance64 | EventHeader64 => {
                Some(8)
            }
            _ => None,
        }
    }

    /// Kernel (NT Kernel Logger style) records: identity is (group GUID, opcode = hook type, version).
    pub fn is_kernel(self) -> bool {
        use HeaderType::*;
        matches!(
            self,
            System32 | System64 | Compact32 | Compact64 | PerfInfo32 | PerfInfo64
        )
    }

    /// Classic (MOF) records: identity is (event class GUID, opcode = Class.Type, version).
    pub fn is_classic(self) -> bool {
        use HeaderType::*;
        matches!(self, FullHeader32 | FullHeader64 | Instance32 | Instance64)
    }

    pub fn is_event_header(self) -> bool {
        matches!(self, HeaderType::EventHeader32 | HeaderType::EventHeader64)
    }
}

impl std::fmt::Display for HeaderType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// EVENT_DESCRIPTOR. Kernel and classic records have no id (TraceEvent shows 0xFFFF; we use 0) and put
/// the hook type / Class.Type in `opcode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct EventDescriptor {
    pub id: u16,
    pub version: u8,
    pub channel: u8,
    pub level: u8,
    pub opcode: u8,
    pub task: u16,
    pub keywords: u64,
}

/// EVENT_HEADER flags (as the consumer API reports them; the reader synthesizes the ones that are
/// never on disk).
pub mod flags {
    pub const EXTENDED_INFO: u16 = 0x0001;
    pub const PRIVATE_SESSION: u16 = 0x0002;
    pub const STRING_ONLY: u16 = 0x0004;
    pub const TRACE_MESSAGE: u16 = 0x0008;
    pub const NO_CPUTIME: u16 = 0x0010;
    pub const HEADER_32_BIT: u16 = 0x0020;
    pub const HEADER_64_BIT: u16 = 0x0040;
    pub const DECODE_GUID: u16 = 0x0080;
    pub const CLASSIC_HEADER: u16 = 0x0100;
    pub const PROCESSOR_INDEX: u16 = 0x0200;
}

/// Extended data item types (EVENT_HEADER_EXT_TYPE_*).
pub mod ext_type {
    pub const RELATED_ACTIVITYID: u16 = 1;
    pub const SID: u16 = 2;
    pub const TS_ID: u16 = 3;
    pub const INSTANCE_INFO: u16 = 4;
    pub const STACK_TRACE32: u16 = 5;
    pub const STACK_TRACE64: u16 = 6;
    pub const PEBS_INDEX: u16 = 7;
    pub const PMC_COUNTERS: u16 = 8;
    pub const PSM_KEY: u16 = 9;
    pub const EVENT_KEY: u16 = 10;
    pub const EVENT_SCHEMA_TL: u16 = 11;
    pub const PROV_TRAITS: u16 = 12;
    pub const PROCESS_START_KEY: u16 = 13;
    pub const CONTROL_GUID: u16 = 14;
    pub const QPC_DELTA: u16 = 15;
    pub const CONTAINER_ID: u16 = 16;
    pub const STACK_KEY32: u16 = 17;
    pub const STACK_KEY64: u16 = 18;

    pub fn name(t: u16) -> &'static str {
        match t {
            RELATED_ACTIVITYID => "RELATED_ACTIVITYID",
            SID => "SID",
            TS_ID => "TS_ID",
            INSTANCE_INFO => "INSTANCE_INFO",
            STACK_TRACE32 => "STACK_TRACE32",
            STACK_TRACE64 => "STACK_TRACE64",
            PEBS_INDEX => "PEBS_INDEX",
            PMC_COUNTERS => "PMC_COUNTERS",
            PSM_KEY => "PSM_KEY",
            EVENT_KEY => "EVENT_KEY",
            EVENT_SCHEMA_TL => "EVENT_SCHEMA_TL",
            PROV_TRAITS => "PROV_TRAITS",
            PROCESS_START_KEY => "PROCESS_START_KEY",
            CONTROL_GUID => "CONTROL_GUID",
            QPC_DELTA => "QPC_DELTA",
            CONTAINER_ID => "CONTAINER_ID",
            STACK_KEY32 => "STACK_KEY32",
            STACK_KEY64 => "STACK_KEY64",
            _ => "UNKNOWN",
        }
    }
}

/// One extended data item, borrowed from its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtItem<'a> {
    pub ext_type: u16,
    pub data: &'a [u8],
}

/// Iterator over an on-disk chain of extended data items:
/// `u16 size, u16 ext_type, u16 linkage (bit 0: another item follows), u16 data_size, data...`,
/// each item starting 8-aligned. Stops (without panicking) at the first malformed item; check
/// [`ExtItems::malformed`] afterwards if it matters.
#[derive(Clone, Debug)]
pub struct ExtItems<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
    malformed: bool,
}

impl<'a> ExtItems<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        ExtItems {
            buf,
            pos: 0,
            done: buf.is_empty(),
            malformed: false,
        }
    }
    pub fn malformed(&self) -> bool {
        self.malformed
    }
    /// Bytes consumed by the chain so far, rounded up to 8 (where user data starts after the last item).
    pub fn consumed(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for ExtItems<'a> {
    type Item = ExtItem<'a>;
    fn next(&mut self) -> Option<ExtItem<'a>> {
        if self.done {
            return None;
        }
        let b = self.buf;
        let p = self.pos;
        let Some(h) = b.get(p..p + 8) else {
            self.done = true;
            self.malformed = true;
            return None;
        };
        let ext_type = u16::from_le_bytes([h[2], h[3]]);
        let linkage = u16::from_le_bytes([h[4], h[5]]) & 1;
        let size = u16::from_le_bytes([h[6], h[7]]) as usize;
        let Some(data) = b.get(p + 8..p + 8 + size) else {
            self.done = true;
            self.malformed = true;
            return None;
        };
        self.pos = align8(p + 8 + size);
        if linkage == 0 {
            self.done = true;
        }
        Some(ExtItem { ext_type, data })
    }
}

/// Appends one extended item in on-disk form (8-aligned; `linkage` says whether another follows).
pub fn encode_ext_item(out: &mut Vec<u8>, ext_type: u16, data: &[u8], linkage: bool) {
    let start = out.len();
    let total = align8(8 + data.len());
    out.extend_from_slice(&(total as u16).to_le_bytes());
    out.extend_from_slice(&ext_type.to_le_bytes());
    out.extend_from_slice(&(linkage as u16).to_le_bytes());
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(data);
    out.resize(start + total, 0);
}

/// Round up to a multiple of 8.
#[inline]
pub fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// A stack trace carried by an event (EVENT_HEADER STACK_TRACE32/64 item, or a kernel StackWalk
/// event attached by the decoder, or a live unwinder).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stack {
    pub match_id: u64,
    pub addresses: Vec<u64>,
}

impl Stack {
    /// Parses a STACK_TRACE32/64 item.
    pub fn from_ext(item: &ExtItem<'_>) -> Option<Stack> {
        let width = match item.ext_type {
            ext_type::STACK_TRACE32 => 4,
            ext_type::STACK_TRACE64 => 8,
            _ => return None,
        };
        let d = item.data;
        let match_id = u64::from_le_bytes(d.get(..8)?.try_into().ok()?);
        let addresses = d[8..]
            .chunks_exact(width)
            .map(|c| {
                if width == 4 {
                    u32::from_le_bytes(c.try_into().unwrap()) as u64
                } else {
                    u64::from_le_bytes(c.try_into().unwrap())
                }
            })
            .collect();
        Some(Stack {
            match_id,
            addresses,
        })
    }

    /// Encodes as a STACK_TRACE64 item payload.
    pub fn to_ext64(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + 8 * self.addresses.len());
        v.extend_from_slice(&self.match_id.to_le_bytes());
        for a in &self.addresses {
            v.extend_from_slice(&a.to_le_bytes());
        }
        v
    }
}

/// One event, whatever its source.
///
/// `timestamp` is UTC as a Windows FILETIME (100 ns ticks since 1601-01-01); `raw_timestamp` is the
/// value on disk in the logger's clock. For kernel (SYSTEM/PERFINFO) records `provider` is the group's
/// GUID and `descriptor.opcode` the hook type; for classic records `provider` is the event class GUID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord<'a> {
    pub header_type: HeaderType,
    /// EVENT_HEADER flags, including the synthesized ones (see [`flags`]).
    pub flags: u16,
    pub provider: Guid,
    pub descriptor: EventDescriptor,
    /// Kernel hook id (`group << 8 | type`) for SYSTEM/COMPACT/PERFINFO records; WPP MessageNumber for
    /// MESSAGE records.
    pub hook_id: Option<u16>,
    /// `u32::MAX` when the record carries none (PERFINFO records).
    pub pid: u32,
    /// `u32::MAX` when the record carries none (PERFINFO records).
    pub tid: u32,
    pub cpu: u16,
    pub timestamp: i64,
    pub raw_timestamp: i64,
    pub kernel_time: u32,
    pub user_time: u32,
    pub activity_id: Guid,
    /// 4 or 8: per record, never per file.
    pub pointer_size: u8,
    pub payload: Cow<'a, [u8]>,
    /// Extended data items in on-disk encoding (empty when none).
    pub ext: Cow<'a, [u8]>,
}

impl<'a> EventRecord<'a> {
    pub fn ext_items(&self) -> ExtItems<'_> {
        ExtItems::new(&self.ext)
    }

    /// First extended item of the given type.
    pub fn ext_item(&self, t: u16) -> Option<ExtItem<'_>> {
        self.ext_items().find(|i| i.ext_type == t)
    }

    /// The TraceLogging metadata item and the provider-traits item, found in one pass over the
    /// extended data (a record without metadata is not self-describing).
    pub fn tracelogging_items(&self) -> (Option<&[u8]>, Option<&[u8]>) {
        let (mut meta, mut traits) = (None, None);
        if !self.ext.is_empty() {
            for item in self.ext_items() {
                match item.ext_type {
                    ext_type::EVENT_SCHEMA_TL => meta = Some(item.data),
                    ext_type::PROV_TRAITS => traits = Some(item.data),
                    _ => {}
                }
            }
        }
        (meta, traits)
    }

    /// The stack trace carried in the extended data, if any.
    pub fn stack(&self) -> Option<Stack> {
        self.ext_items().find_map(|i| Stack::from_ext(&i))
    }

    pub fn related_activity_id(&self) -> Option<Guid> {
        self.ext_item(ext_type::RELATED_ACTIVITYID)
            .and_then(|i| Guid::from_le_bytes(i.data))
    }

    /// Provider name from the TraceLogging provider-traits item (u16 size, then a NUL-terminated
    /// UTF-8 name).
    pub fn traits_provider_name(&self) -> Option<&str> {
        let item = self.ext_item(ext_type::PROV_TRAITS)?;
        let rest = item.data.get(2..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    }

    pub fn into_owned(self) -> EventRecord<'static> {
        EventRecord {
            payload: Cow::Owned(self.payload.into_owned()),
            ext: Cow::Owned(self.ext.into_owned()),
            ..self
        }
    }

    pub fn to_owned_record(&self) -> EventRecord<'static> {
        self.clone().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_items_round_trip() {
        let mut v = Vec::new();
        encode_ext_item(&mut v, ext_type::RELATED_ACTIVITYID, &[7u8; 16], true);
        let st = Stack {
            match_id: 0,
            addresses: vec![0x1000, 0xffff_f800_0000_0001],
        };
        encode_ext_item(&mut v, ext_type::STACK_TRACE64, &st.to_ext64(), false);
        let items: Vec<_> = ExtItems::new(&v).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].data, &[7u8; 16]);
        assert_eq!(Stack::from_ext(&items[1]), Some(st));
        // Truncated chain: reported as malformed, no panic.
        let mut it = ExtItems::new(&v[..30]);
        assert!(it.next().is_some());
        assert!(it.next().is_none());
        assert!(it.malformed());
    }
}
