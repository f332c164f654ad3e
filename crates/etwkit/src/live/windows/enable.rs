//! ENABLE_TRACE_PARAMETERS for EnableTraceEx2: stack capture and the scope filters (process ids,
//! event ids, which events get a stack), each an EVENT_FILTER_DESCRIPTOR pointing at data owned here.

use windows_sys::Win32::System::Diagnostics::Etw::{
    ENABLE_TRACE_PARAMETERS, ENABLE_TRACE_PARAMETERS_VERSION_2, EVENT_ENABLE_PROPERTY_STACK_TRACE,
    EVENT_FILTER_DESCRIPTOR, EVENT_FILTER_EVENT_ID, EVENT_FILTER_TYPE_EVENT_ID,
    EVENT_FILTER_TYPE_PID, EVENT_FILTER_TYPE_STACKWALK, MAX_EVENT_FILTER_EVENT_ID_COUNT,
    MAX_EVENT_FILTER_PID_COUNT,
};

const _: () = assert!(std::mem::size_of::<ENABLE_TRACE_PARAMETERS>() == 48);
const _: () = assert!(std::mem::offset_of!(ENABLE_TRACE_PARAMETERS, EnableFilterDesc) == 32);
const _: () = assert!(std::mem::offset_of!(ENABLE_TRACE_PARAMETERS, FilterDescCount) == 40);
const _: () = assert!(std::mem::size_of::<EVENT_FILTER_DESCRIPTOR>() == 16);
const _: () = assert!(std::mem::offset_of!(EVENT_FILTER_DESCRIPTOR, Type) == 12);
// EVENT_FILTER_EVENT_ID: FilterIn (BOOLEAN), Reserved, Count, then Count u16 ids.
const _: () = assert!(std::mem::offset_of!(EVENT_FILTER_EVENT_ID, Count) == 2);
const _: () = assert!(std::mem::offset_of!(EVENT_FILTER_EVENT_ID, Events) == 4);

/// Most processes ETW's PID filter takes.
pub const MAX_PIDS: usize = MAX_EVENT_FILTER_PID_COUNT as usize;
/// Most event ids one event-id filter takes.
pub const MAX_EVENT_IDS: usize = MAX_EVENT_FILTER_EVENT_ID_COUNT as usize;

/// What one EnableTraceEx2 call asks for beyond level and keywords.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnableOptions {
    /// EVENT_ENABLE_PROPERTY_* bits (STACK_TRACE = 4).
    pub enable_property: u32,
    /// Only events of these processes (at most [`MAX_PIDS`]).
    pub pids: Vec<u32>,
    /// Only these event ids (at most [`MAX_EVENT_IDS`]).
    pub event_ids: Vec<u16>,
    /// Stacks only on these event ids (with STACK_TRACE set).
    pub stack_event_ids: Vec<u16>,
}

/// Why the options cannot be expressed to ETW.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnableError {
    TooManyPids(usize),
    TooManyEventIds(usize),
}

impl std::fmt::Display for EnableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnableError::TooManyPids(n) => write!(
                f,
                "ETW's process filter takes at most {MAX_PIDS} processes, {n} were given"
            ),
            EnableError::TooManyEventIds(n) => write!(
                f,
                "ETW's event-id filter takes at most {MAX_EVENT_IDS} ids, {n} were given"
            ),
        }
    }
}

/// One filter in the form ETW reads it: type and the bytes `Ptr` points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub filter_type: u32,
    pub data: Vec<u8>,
}

/// EVENT_FILTER_EVENT_ID bytes: FilterIn = TRUE, Count, the ids.
pub fn event_id_filter_bytes(ids: &[u16]) -> Vec<u8> {
    let mut v = vec![1u8, 0];
    v.extend_from_slice(&(ids.len() as u16).to_le_bytes());
    for id in ids {
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// The filters of `o`, in the order they are passed.
pub fn filters(o: &EnableOptions) -> Result<Vec<Filter>, EnableError> {
    if o.pids.len() > MAX_PIDS {
        return Err(EnableError::TooManyPids(o.pids.len()));
    }
    for ids in [&o.event_ids, &o.stack_event_ids] {
        if ids.len() > MAX_EVENT_IDS {
            return Err(EnableError::TooManyEventIds(ids.len()));
        }
    }
    let mut v = Vec::new();
    if !o.pids.is_empty() {
        v.push(Filter {
            filter_type: EVENT_FILTER_TYPE_PID,
            data: o.pids.iter().flat_map(|p| p.to_le_bytes()).collect(),
        });
    }
    if !o.event_ids.is_empty() {
        v.push(Filter {
            filter_type: EVENT_FILTER_TYPE_EVENT_ID,
            data: event_id_filter_bytes(&o.event_ids),
        });
    }
    if !o.stack_event_ids.is_empty() && o.enable_property & EVENT_ENABLE_PROPERTY_STACK_TRACE != 0 {
        v.push(Filter {
            filter_type: EVENT_FILTER_TYPE_STACKWALK,
            data: event_id_filter_bytes(&o.stack_event_ids),
        });
    }
    Ok(v)
}

/// ENABLE_TRACE_PARAMETERS with its descriptors and their data, kept alive together. The pointers
/// are filled in by [`EnableParams::params`], right before the call, from the owned buffers.
pub struct EnableParams {
    enable_property: u32,
    /// Filter data, 8-aligned.
    data: Vec<Vec<u64>>,
    filters: Vec<Filter>,
    descs: Vec<EVENT_FILTER_DESCRIPTOR>,
}

impl EnableParams {
    pub fn new(o: &EnableOptions) -> Result<EnableParams, EnableError> {
        let filters = filters(o)?;
        let data = filters
            .iter()
            .map(|f| {
                let mut words = vec![0u64; f.data.len().div_ceil(8).max(1)];
                for (i, b) in f.data.iter().enumerate() {
                    words[i / 8] |= (*b as u64) << (8 * (i % 8));
                }
                words
            })
            .collect();
        Ok(EnableParams {
            enable_property: o.enable_property,
            data,
            descs: vec![EVENT_FILTER_DESCRIPTOR::default(); filters.len()],
            filters,
        })
    }

    pub fn filters(&self) -> &[Filter] {
        &self.filters
    }

    /// The struct EnableTraceEx2 reads; valid while `self` is neither moved nor dropped.
    pub fn params(&mut self) -> ENABLE_TRACE_PARAMETERS {
        for ((d, f), words) in self.descs.iter_mut().zip(&self.filters).zip(&self.data) {
            d.Ptr = words.as_ptr() as u64;
            d.Size = f.data.len() as u32;
            d.Type = f.filter_type;
        }
        ENABLE_TRACE_PARAMETERS {
            Version: ENABLE_TRACE_PARAMETERS_VERSION_2,
            EnableProperty: self.enable_property,
            ControlFlags: 0,
            SourceId: windows_sys::core::GUID::from_u128(0),
            EnableFilterDesc: if self.descs.is_empty() {
                std::ptr::null_mut()
            } else {
                self.descs.as_mut_ptr()
            },
            FilterDescCount: self.descs.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_in_etw_form() {
        let o = EnableOptions {
            enable_property: EVENT_ENABLE_PROPERTY_STACK_TRACE,
            pids: vec![4, 1234],
            event_ids: vec![1, 5],
            stack_event_ids: vec![33],
        };
        let f = filters(&o).unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].filter_type, 0x8000_0004);
        assert_eq!(f[0].data, [4, 0, 0, 0, 0xd2, 0x04, 0, 0]);
        assert_eq!(f[1].filter_type, 0x8000_0200);
        assert_eq!(f[1].data, [1, 0, 2, 0, 1, 0, 5, 0]);
        assert_eq!(f[2].filter_type, 0x8000_1000);
        assert_eq!(f[2].data, [1, 0, 1, 0, 33, 0]);
        // Stack ids without STACK_TRACE ask for nothing.
        let no_stacks = EnableOptions {
            enable_property: 0,
            ..o.clone()
        };
        assert_eq!(filters(&no_stacks).unwrap().len(), 2);
        let too_many = EnableOptions {
            pids: (0..9).collect(),
            ..o
        };
        assert_eq!(filters(&too_many), Err(EnableError::TooManyPids(9)));
        let mut p = EnableParams::new(&EnableOptions::default()).unwrap();
        let raw = p.params();
        assert_eq!((raw.Version, raw.FilterDescCount), (2, 0));
        assert!(raw.EnableFilterDesc.is_null());
    }
}
