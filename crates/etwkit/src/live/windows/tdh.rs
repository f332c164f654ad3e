//! TDH as the fallback layout source, for events etwkit has no layout for.
//!
//! The first time a session delivers a manifest or MOF event whose (provider, id, version) /
//! (class, type, version) no built-in layout covers, TdhGetEventInformation describes it, and the
//! consumer hands a KernelTraceControl MetaData/EventInfo record (class bbccf6c1, type 32, payload =
//! the TRACE_EVENT_INFO) to the callback before the event — what `xperf -merge` puts into merged
//! files. The shared decoder learns layouts from such records ([`crate::decode::Decoder::learn`],
//! [`crate::live::props`]), and a logfile written from the session carries them, so the decoding is
//! still etwkit's own. TraceLogging events describe themselves and never reach TDH; nor does anything
//! under wine, whose tdh.dll aborts the process.

use std::borrow::Cow;
use std::collections::HashSet;

use windows_sys::Win32::System::Diagnostics::Etw::{
    TdhGetEventInformation, TdhGetEventMapInformation, EVENT_MAP_INFO, EVENT_RECORD,
    TRACE_EVENT_INFO,
};

use crate::event::{ext_type, flags, EventDescriptor, EventRecord, HeaderType};
use crate::schema::tdh::{METADATA_CLASS, OPCODE_EVENT_INFO, OPCODE_MAP_INFO};
use crate::schema::{Property, PropertyKind, Registry, SchemaKey};

const _: () = assert!(std::mem::size_of::<TRACE_EVENT_INFO>() == 136);

const ERROR_INSUFFICIENT_BUFFER: u32 = 122;

/// Runs a TDH call that fills a caller buffer and says the size it needs (ERROR_INSUFFICIENT_BUFFER
/// first, then the answer): `call(buffer, &mut size)`. The buffer is u64-aligned, as TDH's structs
/// need. The bytes written, or the Win32 error.
fn sized_query(mut call: impl FnMut(*mut u8, &mut u32) -> u32) -> Result<Vec<u8>, u32> {
    let mut size = 0u32;
    let mut words: Vec<u64> = Vec::new();
    for _ in 0..3 {
        match call(words.as_mut_ptr() as *mut u8, &mut size) {
            0 => {
                // SAFETY: viewing the initialized u64 buffer as bytes.
                let b = unsafe {
                    std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8)
                };
                return Ok(b[..(size as usize).min(b.len())].to_vec());
            }
            ERROR_INSUFFICIENT_BUFFER => words = vec![0u64; (size as usize).div_ceil(8) + 1],
            code => return Err(code),
        }
    }
    Err(ERROR_INSUFFICIENT_BUFFER)
}

/// TdhGetEventInformation for one delivered record: the TRACE_EVENT_INFO bytes, or the Win32 error.
pub fn event_info(rec: &EVENT_RECORD) -> Result<Vec<u8>, u32> {
    sized_query(|buf, size| {
        // SAFETY: `rec` is a record ProcessTrace delivered (valid during the callback); the buffer
        // has room for `size` bytes (or is empty with size 0, the size query).
        unsafe {
            TdhGetEventInformation(rec, 0, std::ptr::null(), buf as *mut TRACE_EVENT_INFO, size)
        }
    })
}

/// TdhGetEventMapInformation for one map a delivered record's layout names: EVENT_MAP_INFO bytes.
pub fn map_info(rec: &EVENT_RECORD, map_name: &str) -> Result<Vec<u8>, u32> {
    let name = super::wide(map_name);
    sized_query(|buf, size| {
        // SAFETY: as in `event_info`; `name` is NUL-terminated and outlives the call.
        unsafe { TdhGetEventMapInformation(rec, name.as_ptr(), buf as *mut EVENT_MAP_INFO, size) }
    })
}

/// The value-map names a layout's properties refer to.
fn map_names(props: &[Property], out: &mut Vec<String>) {
    for p in props {
        if let Some(m) = &p.map {
            if !out.contains(&m.name) {
                out.push(m.name.clone());
            }
        }
        if let PropertyKind::Struct(inner) = &p.kind {
            map_names(inner, out);
        }
    }
}

/// The MetaData/EventInfo record announcing `info` (a TRACE_EVENT_INFO) for the event `ev`.
pub fn metadata_record(ev: &EventRecord<'_>, info: Vec<u8>) -> EventRecord<'static> {
    EventRecord {
        header_type: HeaderType::FullHeader64,
        flags: flags::CLASSIC_HEADER | flags::HEADER_64_BIT,
        provider: METADATA_CLASS,
        descriptor: EventDescriptor {
            opcode: OPCODE_EVENT_INFO,
            ..Default::default()
        },
        hook_id: None,
        pid: ev.pid,
        tid: ev.tid,
        cpu: ev.cpu,
        timestamp: ev.timestamp,
        raw_timestamp: ev.raw_timestamp,
        kernel_time: 0,
        user_time: 0,
        activity_id: Default::default(),
        pointer_size: 8,
        payload: Cow::Owned(info),
        ext: Cow::Borrowed(&[]),
    }
}

/// The MetaData/EventMapInfo record carrying a value map (provider GUID, then EVENT_MAP_INFO).
pub fn map_record(ev: &EventRecord<'_>, map: &[u8]) -> EventRecord<'static> {
    let mut payload = ev.provider.to_le_bytes().to_vec();
    payload.extend_from_slice(map);
    let mut r = metadata_record(ev, payload);
    r.descriptor.opcode = OPCODE_MAP_INFO;
    r
}

/// Which events TDH is asked about (each layout once, each map once per provider).
pub struct Fallback {
    builtins: Registry,
    asked: HashSet<SchemaKey>,
    maps: HashSet<(crate::guid::Guid, String)>,
    /// Layouts TDH described.
    pub described: u64,
    /// Layouts TDH did not know either.
    pub unknown: u64,
}

impl Fallback {
    /// `None` under wine.
    pub fn new() -> Option<Fallback> {
        if super::wine_version().is_some() {
            return None;
        }
        Some(Fallback {
            builtins: Registry::with_builtins(),
            asked: HashSet::new(),
            maps: HashSet::new(),
            described: 0,
            unknown: 0,
        })
    }

    /// The key TDH should be asked about for `ev`, if any: a manifest or MOF event without a
    /// built-in layout, not asked before.
    pub fn needs(&mut self, ev: &EventRecord<'_>) -> Option<SchemaKey> {
        if ev.flags & (flags::TRACE_MESSAGE | flags::STRING_ONLY) != 0
            || ev.ext_item(ext_type::EVENT_SCHEMA_TL).is_some()
            || ev.provider == METADATA_CLASS
        {
            return None;
        }
        let key = Registry::key_for(ev)?;
        if self.builtins.get(&key).is_some() || !self.asked.insert(key) {
            return None;
        }
        Some(key)
    }

    /// The metadata records to deliver before `ev` (its EventInfo, then the value maps it names),
    /// when TDH knows a layout etwkit lacks.
    pub fn lookup(
        &mut self,
        rec: &EVENT_RECORD,
        ev: &EventRecord<'_>,
    ) -> Vec<EventRecord<'static>> {
        if self.needs(ev).is_none() {
            return Vec::new();
        }
        let info = match event_info(rec) {
            Ok(info) => info,
            Err(_) => {
                self.unknown += 1;
                return Vec::new();
            }
        };
        self.described += 1;
        let mut names = Vec::new();
        if let Ok(Some(parsed)) = crate::schema::tdh::parse_event_info(&info) {
            map_names(&parsed.schema.properties, &mut names);
        }
        let mut out = vec![metadata_record(ev, info)];
        for name in names {
            if !self.maps.insert((ev.provider, name.clone())) {
                continue;
            }
            if let Ok(m) = map_info(rec, &name) {
                out.push(map_record(ev, &m));
            }
        }
        out
    }
}
