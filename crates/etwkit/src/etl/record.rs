//! Every record header type of the ETL format, parsed into an [`EventRecord`] that borrows the buffer.
//!
//! Markers: the first u32 of a record. `marker >> 24` with both top bits set means a typed header
//! (`(marker >> 16) & 0xFF` is the HeaderType); `0x80` without `0x40` is a WPP MESSAGE; anything else is
//! corruption. `0xFFFFFFFF` ends the buffer. Records are 8-byte aligned; SYSTEM/COMPACT/PERFINFO keep
//! their size at +4, every other header at +0.

use std::borrow::Cow;

use crate::event::{
    self, align8, encode_ext_item, ext_type, EventDescriptor, EventRecord, HeaderType,
};
use crate::guid::Guid;
use crate::time::Clock;

use super::kernel;

/// What the reader knows about the buffer a record sits in.
#[derive(Clone, Copy, Debug)]
pub struct BufferContext {
    pub cpu: u16,
    pub proc_index: bool,
    pub clock: Clock,
    /// Pointer size of the logger, for MESSAGE records that do not say.
    pub logger_pointer_size: u8,
}

/// A record that could not be parsed. The rest of its buffer cannot be walked either, since the
/// position of the next record is unknown.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("unknown record marker 0x{marker:08x}")]
    BadMarker { marker: u32 },
    #[error("record of type {header} claims {size} bytes, but its header alone needs {need}")]
    TooSmall {
        header: &'static str,
        size: usize,
        need: usize,
    },
    #[error("record of type {header} claims {size} bytes but only {left} remain in the buffer")]
    Overruns {
        header: &'static str,
        size: usize,
        left: usize,
    },
    #[error("extended data of an EVENT_HEADER record runs past the record ({size} bytes)")]
    BadExtendedData { size: usize },
}

/// Outcome of looking at the next position in a buffer.
pub enum Next<'a> {
    /// A record, its size in bytes (the raw record is `buf[pos..pos + size]`) and the position of the
    /// one after it.
    Record(EventRecord<'a>, usize, usize),
    /// End of the buffer (padding marker or no room for another header).
    End,
}

#[inline]
fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"))
}
#[inline]
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
#[inline]
fn i64_at(b: &[u8], o: usize) -> i64 {
    i64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
#[inline]
fn guid_at(b: &[u8], o: usize) -> Guid {
    Guid::from_le_bytes(&b[o..o + 16]).unwrap_or_default()
}

/// The header type at `pos` and the record's total size, without building the record.
#[inline(always)]
pub fn peek(buf: &[u8], pos: usize) -> Result<Option<(HeaderType, usize)>, RecordError> {
    if pos + 8 > buf.len() {
        return Ok(None);
    }
    let marker = u32_at(buf, pos);
    if marker == 0xFFFF_FFFF {
        return Ok(None);
    }
    let f = (marker >> 24) as u8;
    let ht = if f & 0xC0 == 0xC0 {
        HeaderType::from_byte(((marker >> 16) & 0xFF) as u8)
            .ok_or(RecordError::BadMarker { marker })?
    } else if f & 0xC0 == 0x80 {
        HeaderType::Message
    } else {
        return Err(RecordError::BadMarker { marker });
    };
    let size = if ht.is_kernel() {
        u16_at(buf, pos + 4)
    } else {
        u16_at(buf, pos)
    } as usize;
    let need = header_size(ht);
    if size < need {
        return Err(RecordError::TooSmall {
            header: ht.name(),
            size,
            need,
        });
    }
    let left = buf.len() - pos;
    if size > left {
        return Err(RecordError::Overruns {
            header: ht.name(),
            size,
            left,
        });
    }
    Ok(Some((ht, size)))
}

/// The identifying fields of a record, read without building it: what a pass that wants only a
/// few kinds of record looks at first (see [`head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub header_type: HeaderType,
    /// As [`EventRecord::hook_id`] (kernel records).
    pub hook_id: Option<u16>,
    /// As [`EventRecord::provider`] (for kernel records, the hook's group).
    pub provider: Guid,
    /// The descriptor's id and opcode, as [`EventRecord::descriptor`] has them.
    pub id: u16,
    pub opcode: u8,
    pub raw_timestamp: i64,
}

/// The [`Head`] of the record at `pos`, whose type and size [`peek`] gave, when building the whole
/// record cannot fail: kernel and classic records, and EVENT_HEADER records without extended
/// data. `None` for the others (parse those).
#[inline(always)]
pub fn head(buf: &[u8], pos: usize, ht: HeaderType, size: usize) -> Option<Head> {
    let r = &buf[pos..pos + size];
    let ts = |o: usize| i64_at(r, o);
    if ht.is_kernel() {
        let hook = u16_at(r, 6);
        let perfinfo = matches!(ht, HeaderType::PerfInfo32 | HeaderType::PerfInfo64);
        return Some(Head {
            header_type: ht,
            hook_id: Some(hook),
            provider: kernel::group_guid(hook),
            id: 0,
            opcode: hook as u8,
            raw_timestamp: ts(if perfinfo { 8 } else { 0x10 }),
        });
    }
    if ht.is_classic() || (ht.is_event_header() && u16_at(r, 4) & event::flags::EXTENDED_INFO == 0)
    {
        let event_header = ht.is_event_header();
        return Some(Head {
            header_type: ht,
            hook_id: None,
            provider: guid_at(r, 0x18),
            id: if event_header { u16_at(r, 0x28) } else { 0 },
            opcode: if event_header { r[0x2D] } else { r[4] },
            raw_timestamp: ts(0x10),
        });
    }
    None
}

/// Smallest size a record of this type can have.
pub fn header_size(ht: HeaderType) -> usize {
    use HeaderType::*;
    match ht {
        System32 | System64 => 0x20,
        Compact32 | Compact64 => 0x18,
        PerfInfo32 | PerfInfo64 => 0x10,
        FullHeader32 | FullHeader64 => 0x30,
        Instance32 | Instance64 => 0x48,
        EventHeader32 | EventHeader64 => 0x50,
        Message => 8,
        // TIMED / ERROR / WNODE: never seen; treated as a bare 8-byte marker + size.
        Timed | Error | Wnode => 8,
    }
}

/// Parses the record at `pos` of a buffer's valid bytes. `prev_timestamp` is used for MESSAGE records
/// that carry no timestamp.
#[inline(always)]
pub fn parse<'a>(
    buf: &'a [u8],
    pos: usize,
    ctx: &BufferContext,
    prev_timestamp: i64,
) -> Result<Next<'a>, RecordError> {
    let Some((ht, size)) = peek(buf, pos)? else {
        return Ok(Next::End);
    };
    let r = &buf[pos..pos + size];
    let next = pos + align8(size);
    let mut ev = EventRecord {
        header_type: ht,
        flags: 0,
        provider: Guid::ZERO,
        descriptor: EventDescriptor::default(),
        hook_id: None,
        pid: u32::MAX,
        tid: u32::MAX,
        cpu: ctx.cpu,
        timestamp: 0,
        raw_timestamp: 0,
        kernel_time: 0,
        user_time: 0,
        activity_id: Guid::ZERO,
        pointer_size: ht.pointer_size().unwrap_or(ctx.logger_pointer_size),
        payload: Cow::Borrowed(&[]),
        ext: Cow::Borrowed(&[]),
    };
    let bits = if ev.pointer_size == 4 {
        event::flags::HEADER_32_BIT
    } else {
        event::flags::HEADER_64_BIT
    };
    if ctx.proc_index {
        ev.flags |= event::flags::PROCESSOR_INDEX;
    }
    use HeaderType::*;
    match ht {
        System32 | System64 | Compact32 | Compact64 | PerfInfo32 | PerfInfo64 => {
            let version = u16_at(r, 0);
            let hook = u16_at(r, 6);
            ev.hook_id = Some(hook);
            ev.descriptor.version = version as u8;
            ev.descriptor.opcode = hook as u8;
            ev.provider = kernel::group_guid(hook);
            ev.flags |= bits | event::flags::CLASSIC_HEADER;
            let mut body = match ht {
                System32 | System64 => {
                    ev.tid = u32_at(r, 8);
                    ev.pid = u32_at(r, 0xC);
                    ev.raw_timestamp = i64_at(r, 0x10);
                    ev.kernel_time = u32_at(r, 0x18);
                    ev.user_time = u32_at(r, 0x1C);
                    0x20
                }
                Compact32 | Compact64 => {
                    ev.tid = u32_at(r, 8);
                    ev.pid = u32_at(r, 0xC);
                    ev.raw_timestamp = i64_at(r, 0x10);
                    0x18
                }
                _ => {
                    ev.raw_timestamp = i64_at(r, 8);
                    0x10
                }
            };
            // PEBS index and PMC counters sit between header and payload when the Version flags say so.
            let pebs = version & 0x8000 != 0;
            let pmc = ((version >> 8) & 0x7) as usize;
            if pebs || pmc > 0 {
                let extra = (pebs as usize) * 8 + pmc * 8;
                if body + extra <= size {
                    let mut ext = Vec::new();
                    if pebs {
                        encode_ext_item(
                            &mut ext,
                            ext_type::PEBS_INDEX,
                            &r[body..body + 8],
                            pmc > 0,
                        );
                    }
                    if pmc > 0 {
                        let at = body + pebs as usize * 8;
                        encode_ext_item(
                            &mut ext,
                            ext_type::PMC_COUNTERS,
                            &r[at..at + pmc * 8],
                            false,
                        );
                    }
                    ev.ext = Cow::Owned(ext);
                    ev.flags |= event::flags::EXTENDED_INFO;
                    body += extra;
                }
            }
            ev.payload = Cow::Borrowed(&r[body..]);
        }
        FullHeader32 | FullHeader64 | Instance32 | Instance64 => {
            ev.descriptor.opcode = r[4];
            ev.descriptor.level = r[5];
            ev.descriptor.version = u16_at(r, 6) as u8;
            ev.tid = u32_at(r, 8);
            ev.pid = u32_at(r, 0xC);
            ev.raw_timestamp = i64_at(r, 0x10);
            ev.provider = guid_at(r, 0x18);
            ev.kernel_time = u32_at(r, 0x28);
            ev.user_time = u32_at(r, 0x2C);
            ev.flags |= bits | event::flags::CLASSIC_HEADER;
            if matches!(ht, Instance32 | Instance64) {
                let mut ext = Vec::new();
                encode_ext_item(&mut ext, ext_type::INSTANCE_INFO, &r[0x30..0x48], false);
                ev.ext = Cow::Owned(ext);
                ev.flags |= event::flags::EXTENDED_INFO;
                ev.payload = Cow::Borrowed(&r[0x48..]);
            } else {
                ev.payload = Cow::Borrowed(&r[0x30..]);
            }
        }
        EventHeader32 | EventHeader64 => {
            let disk_flags = u16_at(r, 4);
            ev.flags |= disk_flags | bits;
            ev.tid = u32_at(r, 8);
            ev.pid = u32_at(r, 0xC);
            ev.raw_timestamp = i64_at(r, 0x10);
            ev.provider = guid_at(r, 0x18);
            ev.descriptor = EventDescriptor {
                id: u16_at(r, 0x28),
                version: r[0x2A],
                channel: r[0x2B],
                level: r[0x2C],
                opcode: r[0x2D],
                task: u16_at(r, 0x2E),
                keywords: u64::from_le_bytes(r[0x30..0x38].try_into().unwrap()),
            };
            ev.kernel_time = u32_at(r, 0x38);
            ev.user_time = u32_at(r, 0x3C);
            ev.activity_id = guid_at(r, 0x40);
            let mut data = 0x50;
            if disk_flags & event::flags::EXTENDED_INFO != 0 {
                let mut items = event::ExtItems::new(&r[0x50..]);
                for _ in items.by_ref() {}
                if items.malformed() {
                    return Err(RecordError::BadExtendedData { size });
                }
                data = 0x50 + items.consumed();
                if data > size {
                    return Err(RecordError::BadExtendedData { size });
                }
                ev.ext = Cow::Borrowed(&r[0x50..data]);
            }
            ev.payload = Cow::Borrowed(&r[data..]);
        }
        Message => {
            let number = u16_at(r, 4);
            let opts = u16_at(r, 6);
            ev.flags |= event::flags::TRACE_MESSAGE;
            ev.descriptor.id = number;
            ev.hook_id = Some(number);
            let mut p = 8usize;
            let mut take = |n: usize| -> Option<usize> {
                let at = p;
                if at + n > size {
                    return None;
                }
                p += n;
                Some(at)
            };
            let overrun = || RecordError::TooSmall {
                header: "MESSAGE",
                size,
                need: size + 1,
            };
            if opts & 0x01 != 0 {
                take(4).ok_or_else(overrun)?;
            }
            if opts & 0x04 != 0 {
                take(4).ok_or_else(overrun)?;
            } else if opts & 0x02 != 0 {
                let at = take(16).ok_or_else(overrun)?;
                ev.provider = guid_at(r, at);
            }
            ev.raw_timestamp = prev_timestamp;
            if opts & 0x18 != 0 {
                let at = take(8).ok_or_else(overrun)?;
                if opts & 0x08 != 0 {
                    ev.raw_timestamp = i64_at(r, at);
                }
            }
            if opts & 0x20 != 0 {
                let at = take(8).ok_or_else(overrun)?;
                ev.tid = u32_at(r, at);
                ev.pid = u32_at(r, at + 4);
            }
            if opts & 0x40 != 0 {
                ev.pointer_size = 4;
            } else if opts & 0x80 != 0 {
                ev.pointer_size = 8;
            }
            ev.payload = Cow::Borrowed(&r[p..]);
        }
        Timed | Error | Wnode => {
            ev.payload = Cow::Borrowed(&r[8..]);
        }
    }
    ev.timestamp = ctx.clock.to_filetime(ev.raw_timestamp);
    Ok(Next::Record(ev, size, next))
}

/// Byte offset of the raw timestamp inside a record of the given type (MESSAGE: variable, `None`).
pub fn timestamp_offset(ht: HeaderType) -> Option<usize> {
    use HeaderType::*;
    match ht {
        System32 | System64 | Compact32 | Compact64 => Some(0x10),
        PerfInfo32 | PerfInfo64 => Some(0x08),
        FullHeader32 | FullHeader64 | Instance32 | Instance64 | EventHeader32 | EventHeader64 => {
            Some(0x10)
        }
        _ => None,
    }
}

/// WPP MESSAGE fields beyond what [`EventRecord`] carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MessageFields {
    pub message_number: u16,
    pub option_flags: u16,
    pub sequence: Option<u32>,
    pub component_id: Option<u32>,
    pub guid: Option<Guid>,
    /// Offset of the timestamp inside the record, when present.
    pub timestamp_offset: Option<usize>,
}

/// Parses the optional items of a MESSAGE record (the whole record's bytes).
pub fn message_fields(r: &[u8]) -> Option<MessageFields> {
    let number = u16::from_le_bytes(r.get(4..6)?.try_into().ok()?);
    let opts = u16::from_le_bytes(r.get(6..8)?.try_into().ok()?);
    let mut m = MessageFields {
        message_number: number,
        option_flags: opts,
        ..Default::default()
    };
    let mut p = 8;
    if opts & 0x01 != 0 {
        m.sequence = Some(u32::from_le_bytes(r.get(p..p + 4)?.try_into().ok()?));
        p += 4;
    }
    if opts & 0x04 != 0 {
        m.component_id = Some(u32::from_le_bytes(r.get(p..p + 4)?.try_into().ok()?));
        p += 4;
    } else if opts & 0x02 != 0 {
        m.guid = Guid::from_le_bytes(r.get(p..p + 16)?);
        p += 16;
    }
    if opts & 0x18 != 0 {
        r.get(p..p + 8)?;
        m.timestamp_offset = Some(p);
    }
    Some(m)
}

/// The raw timestamp of the record at `pos`, reading only as far as the timestamp field (the record
/// may extend past `buf`). For ordering buffers without reading them whole.
pub fn raw_timestamp_at(buf: &[u8], pos: usize) -> Option<i64> {
    let marker = u32::from_le_bytes(buf.get(pos..pos + 4)?.try_into().ok()?);
    if marker == 0xFFFF_FFFF {
        return None;
    }
    let f = (marker >> 24) as u8;
    let ht = if f & 0xC0 == 0xC0 {
        HeaderType::from_byte(((marker >> 16) & 0xFF) as u8)?
    } else if f & 0xC0 == 0x80 {
        HeaderType::Message
    } else {
        return None;
    };
    let at = match timestamp_offset(ht) {
        Some(o) => pos + o,
        None => {
            let m = message_fields(buf.get(pos..)?)?;
            pos + m.timestamp_offset?
        }
    };
    Some(i64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}
