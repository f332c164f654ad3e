//! EVENT_RECORD (what ProcessTrace hands an EventRecordCallback) ⇄ etwkit's [`EventRecord`].
//!
//! The session is consumed with `PROCESS_TRACE_MODE_RAW_TIMESTAMP`, so `EventHeader.TimeStamp` is in
//! the logger's clock, like `raw_timestamp` of a record read from a file; [`ConvertContext::clock`]
//! turns it into UTC exactly as the ETL reader does. Extended data items (stacks, TraceLogging
//! schemas, provider traits, instance info...) become the on-disk chain [`EventRecord::ext`] holds,
//! so the one decoder and the ETL writer read them as they read a file's.
//!
//! EVENT_RECORD does not say how a record was framed (`EventHeader.HeaderType` is reserved), so
//! [`EventRecord::header_type`] is named from the flags: `TRACE_MESSAGE` → MESSAGE; `CLASSIC_HEADER`
//! with a kernel group GUID → SYSTEM32/64 (hook id = group << 8 | opcode; COMPACT and PERFINFO
//! framing, and the Process-group image hook 0x030A, are not told apart); other classic events →
//! FULL_HEADER32/64, or INSTANCE32/64 when an INSTANCE_INFO item is present; the rest
//! EVENT_HEADER32/64. Every other field is carried over unchanged.

use std::borrow::Cow;
use std::marker::PhantomData;

use windows_sys::Win32::System::Diagnostics::Etw::{
    ETW_BUFFER_CONTEXT, ETW_BUFFER_CONTEXT_0, ETW_BUFFER_CONTEXT_0_0, EVENT_DESCRIPTOR,
    EVENT_HEADER, EVENT_HEADER_0, EVENT_HEADER_0_0, EVENT_HEADER_EXTENDED_DATA_ITEM,
    EVENT_HEADER_EXTENDED_DATA_ITEM_0, EVENT_RECORD,
};

use super::{from_win_guid, to_win_guid};
use crate::event::{encode_ext_item, ext_type, flags, EventDescriptor, EventRecord, HeaderType};
use crate::guid::Guid;
use crate::schema::builtin::kernel_mof::GROUPS;
use crate::time::Clock;

const _: () = assert!(std::mem::size_of::<EVENT_RECORD>() == 112);
const _: () = assert!(std::mem::size_of::<EVENT_HEADER>() == 80);
const _: () = assert!(std::mem::size_of::<EVENT_DESCRIPTOR>() == 16);
const _: () = assert!(std::mem::size_of::<ETW_BUFFER_CONTEXT>() == 4);
const _: () = assert!(std::mem::size_of::<EVENT_HEADER_EXTENDED_DATA_ITEM>() == 16);
const _: () = assert!(std::mem::offset_of!(EVENT_HEADER, TimeStamp) == 16);
const _: () = assert!(std::mem::offset_of!(EVENT_HEADER, ProviderId) == 24);
const _: () = assert!(std::mem::offset_of!(EVENT_HEADER, EventDescriptor) == 40);
const _: () = assert!(std::mem::offset_of!(EVENT_HEADER, ActivityId) == 64);
const _: () = assert!(std::mem::offset_of!(EVENT_RECORD, BufferContext) == 80);
const _: () = assert!(std::mem::offset_of!(EVENT_RECORD, ExtendedDataCount) == 84);
const _: () = assert!(std::mem::offset_of!(EVENT_RECORD, UserDataLength) == 86);
const _: () = assert!(std::mem::offset_of!(EVENT_RECORD, ExtendedData) == 88);
const _: () = assert!(std::mem::offset_of!(EVENT_RECORD, UserData) == 96);
const _: () = assert!(std::mem::offset_of!(EVENT_RECORD, UserContext) == 104);
const _: () = assert!(std::mem::offset_of!(EVENT_HEADER_EXTENDED_DATA_ITEM, DataSize) == 6);
const _: () = assert!(std::mem::offset_of!(EVENT_HEADER_EXTENDED_DATA_ITEM, DataPtr) == 8);

/// What a conversion needs beyond the record: the session's clock and pointer size.
#[derive(Clone, Copy, Debug)]
pub struct ConvertContext {
    /// Raw timestamps → UTC FILETIME.
    pub clock: Clock,
    /// For records whose flags carry no 32/64-bit bit (WPP messages).
    pub logger_pointer_size: u8,
}

/// The kernel group whose GUID `g` is, if any.
pub fn kernel_group_of(g: &Guid) -> Option<u8> {
    GROUPS
        .iter()
        .find(|(_, guid, _)| guid == g)
        .map(|(n, _, _)| *n)
}

/// The EventRecord of an EVENT_RECORD's parts: header, buffer context, user data and extended items.
pub fn convert_parts<'a, 'i>(
    h: &EVENT_HEADER,
    bc: &ETW_BUFFER_CONTEXT,
    user: &'a [u8],
    items: impl ExactSizeIterator<Item = (u16, &'i [u8])>,
    ctx: &ConvertContext,
) -> EventRecord<'a> {
    let f = h.Flags;
    let pointer_size = if f & flags::HEADER_32_BIT != 0 {
        4
    } else if f & flags::HEADER_64_BIT != 0 {
        8
    } else {
        ctx.logger_pointer_size
    };
    let wide = pointer_size == 8;
    let provider = from_win_guid(&h.ProviderId);
    let d = &h.EventDescriptor;
    let descriptor = EventDescriptor {
        id: d.Id,
        version: d.Version,
        channel: d.Channel,
        level: d.Level,
        opcode: d.Opcode,
        task: d.Task,
        keywords: d.Keyword,
    };
    let n = items.len();
    let mut ext = Vec::new();
    let mut instance = false;
    for (i, (t, data)) in items.enumerate() {
        instance |= t == ext_type::INSTANCE_INFO;
        encode_ext_item(&mut ext, t, data, i + 1 < n);
    }
    let (header_type, hook_id) = if f & flags::TRACE_MESSAGE != 0 {
        (HeaderType::Message, Some(d.Id))
    } else if f & flags::CLASSIC_HEADER != 0 {
        match kernel_group_of(&provider) {
            Some(g) => (
                if wide {
                    HeaderType::System64
                } else {
                    HeaderType::System32
                },
                Some((g as u16) << 8 | d.Opcode as u16),
            ),
            None if instance => (
                if wide {
                    HeaderType::Instance64
                } else {
                    HeaderType::Instance32
                },
                None,
            ),
            None => (
                if wide {
                    HeaderType::FullHeader64
                } else {
                    HeaderType::FullHeader32
                },
                None,
            ),
        }
    } else if wide {
        (HeaderType::EventHeader64, None)
    } else {
        (HeaderType::EventHeader32, None)
    };
    // SAFETY: both union members are plain integers over the same 4 (resp. 8) bytes; reading either
    // is sound whatever was written.
    let (cpu, (kernel_time, user_time)) = unsafe {
        (
            if f & flags::PROCESSOR_INDEX != 0 {
                bc.Anonymous.ProcessorIndex
            } else {
                bc.Anonymous.Anonymous.ProcessorNumber as u16
            },
            (
                h.Anonymous.Anonymous.KernelTime,
                h.Anonymous.Anonymous.UserTime,
            ),
        )
    };
    EventRecord {
        header_type,
        flags: f,
        provider,
        descriptor,
        hook_id,
        pid: h.ProcessId,
        tid: h.ThreadId,
        cpu,
        timestamp: ctx.clock.to_filetime(h.TimeStamp),
        raw_timestamp: h.TimeStamp,
        kernel_time,
        user_time,
        activity_id: from_win_guid(&h.ActivityId),
        pointer_size,
        payload: Cow::Borrowed(user),
        ext: if ext.is_empty() {
            Cow::Borrowed(&[])
        } else {
            Cow::Owned(ext)
        },
    }
}

/// Converts the EVENT_RECORD ProcessTrace passed to a callback.
///
/// # Safety
/// `rec` must be a valid EVENT_RECORD whose `UserData` points to `UserDataLength` readable bytes (or
/// is null with length 0) and whose `ExtendedData` points to `ExtendedDataCount` items, each with
/// `DataSize` readable bytes at `DataPtr` — what ProcessTrace guarantees during the callback.
pub unsafe fn from_event_record<'a>(
    rec: &'a EVENT_RECORD,
    ctx: &ConvertContext,
) -> EventRecord<'a> {
    let user: &'a [u8] = if rec.UserData.is_null() || rec.UserDataLength == 0 {
        &[]
    } else {
        // SAFETY: guaranteed by the caller (see above).
        unsafe {
            std::slice::from_raw_parts(rec.UserData as *const u8, rec.UserDataLength as usize)
        }
    };
    let items: &[EVENT_HEADER_EXTENDED_DATA_ITEM] =
        if rec.ExtendedData.is_null() || rec.ExtendedDataCount == 0 {
            &[]
        } else {
            // SAFETY: guaranteed by the caller.
            unsafe { std::slice::from_raw_parts(rec.ExtendedData, rec.ExtendedDataCount as usize) }
        };
    let items = items.iter().map(|i| {
        let data: &[u8] = if i.DataPtr == 0 || i.DataSize == 0 {
            &[]
        } else {
            // SAFETY: guaranteed by the caller.
            unsafe { std::slice::from_raw_parts(i.DataPtr as *const u8, i.DataSize as usize) }
        };
        (i.ExtType, data)
    });
    convert_parts(&rec.EventHeader, &rec.BufferContext, user, items, ctx)
}

/// An EVENT_RECORD laid out the way ProcessTrace hands one to a raw-timestamp callback, pointing
/// into an [`EventRecord`] (its payload and extended items): for feeding Win32 consumers (TDH) with
/// records read from files, and for testing the conversion on real records.
pub struct RawEvent<'a> {
    record: EVENT_RECORD,
    _items: Vec<EVENT_HEADER_EXTENDED_DATA_ITEM>,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> RawEvent<'a> {
    /// `None` when the payload is longer than an EVENT_RECORD can say (64 KiB).
    pub fn new(ev: &'a EventRecord<'_>) -> Option<RawEvent<'a>> {
        let user_len = u16::try_from(ev.payload.len()).ok()?;
        let chain: Vec<_> = ev.ext_items().collect();
        let mut items: Vec<EVENT_HEADER_EXTENDED_DATA_ITEM> = chain
            .iter()
            .enumerate()
            .map(|(i, it)| EVENT_HEADER_EXTENDED_DATA_ITEM {
                Reserved1: 0,
                ExtType: it.ext_type,
                Anonymous: EVENT_HEADER_EXTENDED_DATA_ITEM_0 {
                    _bitfield: (i + 1 < chain.len()) as u16,
                },
                DataSize: it.data.len() as u16,
                DataPtr: it.data.as_ptr() as u64,
            })
            .collect();
        let d = &ev.descriptor;
        let bc = if ev.flags & flags::PROCESSOR_INDEX != 0 {
            ETW_BUFFER_CONTEXT_0 {
                ProcessorIndex: ev.cpu,
            }
        } else {
            ETW_BUFFER_CONTEXT_0 {
                Anonymous: ETW_BUFFER_CONTEXT_0_0 {
                    ProcessorNumber: ev.cpu as u8,
                    Alignment: 0,
                },
            }
        };
        let record = EVENT_RECORD {
            EventHeader: EVENT_HEADER {
                Size: (80 + ev.ext.len() + ev.payload.len()).min(u16::MAX as usize) as u16,
                HeaderType: 0,
                Flags: ev.flags,
                EventProperty: 0,
                ThreadId: ev.tid,
                ProcessId: ev.pid,
                TimeStamp: ev.raw_timestamp,
                ProviderId: to_win_guid(&ev.provider),
                EventDescriptor: EVENT_DESCRIPTOR {
                    Id: d.id,
                    Version: d.version,
                    Channel: d.channel,
                    Level: d.level,
                    Opcode: d.opcode,
                    Task: d.task,
                    Keyword: d.keywords,
                },
                Anonymous: EVENT_HEADER_0 {
                    Anonymous: EVENT_HEADER_0_0 {
                        KernelTime: ev.kernel_time,
                        UserTime: ev.user_time,
                    },
                },
                ActivityId: to_win_guid(&ev.activity_id),
            },
            BufferContext: ETW_BUFFER_CONTEXT {
                Anonymous: bc,
                LoggerId: 0,
            },
            ExtendedDataCount: items.len() as u16,
            UserDataLength: user_len,
            ExtendedData: if items.is_empty() {
                std::ptr::null_mut()
            } else {
                items.as_mut_ptr()
            },
            UserData: if ev.payload.is_empty() {
                std::ptr::null_mut()
            } else {
                ev.payload.as_ptr() as *mut core::ffi::c_void
            },
            UserContext: std::ptr::null_mut(),
        };
        Some(RawEvent {
            record,
            _items: items,
            _borrow: PhantomData,
        })
    }

    /// The EVENT_RECORD (valid while `self` lives).
    pub fn record(&self) -> &EVENT_RECORD {
        &self.record
    }

    /// Converts back, as the session callback does.
    pub fn convert(&self, ctx: &ConvertContext) -> EventRecord<'_> {
        // SAFETY: every pointer in `record` was made in `new` from slices of the borrowed
        // EventRecord (alive for 'a) or from `_items`, owned by self; lengths match those slices.
        unsafe { from_event_record(&self.record, ctx) }
    }
}
