//! Realtime consumption: OpenTraceW on a session name, ProcessTrace on this thread (the callback
//! runs here), a watcher that ends it with CloseTrace once the stop flag is set or the callback
//! breaks. Timestamps stay raw (QPC) and are converted like a file's, against a sync point taken
//! at open time.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use windows_sys::Win32::Foundation::{GetLastError, FILETIME};
use windows_sys::Win32::System::Diagnostics::Etw::{
    CloseTrace, OpenTraceW, ProcessTrace, EVENT_RECORD, EVENT_TRACE_CONTROL_FLUSH,
    EVENT_TRACE_LOGFILEW, PROCESSTRACE_HANDLE, PROCESS_TRACE_MODE_EVENT_RECORD,
    PROCESS_TRACE_MODE_RAW_TIMESTAMP, PROCESS_TRACE_MODE_REAL_TIME,
};
use windows_sys::Win32::System::Performance::{QueryPerformanceCounter, QueryPerformanceFrequency};
use windows_sys::Win32::System::SystemInformation::GetSystemTimePreciseAsFileTime;

use super::convert::{from_event_record, ConvertContext};
use super::{wide, win_error};
use crate::event::EventRecord;
use crate::guid::Guid;
use crate::live::{Callback, Result};
use crate::time::{Clock, ClockType};

const _: () = assert!(std::mem::size_of::<EVENT_TRACE_LOGFILEW>() == 448);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_LOGFILEW, LogfileHeader) == 120);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_LOGFILEW, Context) == 440);

/// OpenTraceW's failure value (INVALID_PROCESSTRACE_HANDLE).
pub const INVALID_HANDLE: u64 = u64::MAX;
/// ProcessTrace's result after CloseTrace ended it (ERROR_CTX_CLOSE_PENDING).
pub const ERROR_CTX_CLOSE_PENDING: u32 = 7007;

/// The realtime lost-event notifications ETW inserts into the stream (RT_LostEvent class):
/// type 32 events lost, 33 buffers lost, 34 the realtime backing file lost.
pub const RT_LOST_EVENT: Guid = Guid::from_str_const("6a399ae0-4bc6-4de9-870b-3657f8947e7e");

/// How long buffered events get to arrive after the stop flag (and a flush) before the trace is
/// closed.
pub const DRAIN: Duration = Duration::from_millis(300);

/// What one ProcessTrace run delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumeStats {
    pub events: u64,
    /// RT_LostEvent notifications seen: (events lost, buffers lost, file lost).
    pub rt_lost: [u64; 3],
    /// Layouts TDH described (MetaData records delivered, see [`super::tdh`]).
    pub tdh_described: u64,
}

struct State<'c, 'f> {
    cb: &'c mut Callback<'f>,
    ctx: ConvertContext,
    stats: ConsumeStats,
    broken: &'c AtomicBool,
    tdh: Option<super::tdh::Fallback>,
}

unsafe extern "system" fn on_event(rec: *mut EVENT_RECORD) {
    if rec.is_null() {
        return;
    }
    // SAFETY: ProcessTrace passes a valid record for the duration of the call; UserContext is the
    // `State` that `process_realtime` set as the logfile's Context and keeps alive (and otherwise
    // untouched) until ProcessTrace has returned.
    let (rec, state) = unsafe {
        let rec = &*rec;
        (rec, &mut *(rec.UserContext as *mut State<'_, '_>))
    };
    if state.broken.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: a record from ProcessTrace, as `from_event_record` requires.
    let ev: EventRecord<'_> = unsafe { from_event_record(rec, &state.ctx) };
    if ev.provider == RT_LOST_EVENT && (32..=34).contains(&ev.descriptor.opcode) {
        state.stats.rt_lost[(ev.descriptor.opcode - 32) as usize] += 1;
    }
    let meta = match state.tdh.as_mut() {
        Some(t) => t.lookup(rec, &ev),
        None => Vec::new(),
    };
    if !meta.is_empty() {
        state.stats.tdh_described += 1;
    }
    for m in &meta {
        if let ControlFlow::Break(()) = (state.cb)(m) {
            state.broken.store(true, Ordering::SeqCst);
            return;
        }
    }
    state.stats.events += 1;
    if let ControlFlow::Break(()) = (state.cb)(&ev) {
        state.broken.store(true, Ordering::SeqCst);
    }
}

/// A QPC ↔ UTC sync point taken now.
pub fn qpc_clock_now() -> Clock {
    let (mut qpc, mut freq) = (0i64, 0i64);
    let mut ft = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    // SAFETY: out pointers to locals.
    unsafe {
        QueryPerformanceFrequency(&mut freq);
        QueryPerformanceCounter(&mut qpc);
        GetSystemTimePreciseAsFileTime(&mut ft);
    }
    let now = ((ft.dwHighDateTime as i64) << 32) | ft.dwLowDateTime as i64;
    Clock::new(ClockType::Qpc, qpc, now, freq, 0)
}

/// Delivers the realtime events of session `name` to `cb` until `stop` is set (then what ETW has
/// buffered is delivered) or `cb` breaks.
pub fn process_realtime(
    name: &str,
    cb: &mut Callback<'_>,
    stop: &AtomicBool,
) -> Result<ConsumeStats> {
    let mut wname = wide(name);
    let broken = AtomicBool::new(false);
    let mut state = State {
        cb,
        ctx: ConvertContext {
            clock: qpc_clock_now(),
            logger_pointer_size: std::mem::size_of::<usize>() as u8,
        },
        stats: ConsumeStats::default(),
        broken: &broken,
        tdh: super::tdh::Fallback::new(),
    };
    let mut lf = EVENT_TRACE_LOGFILEW {
        LoggerName: wname.as_mut_ptr(),
        ..Default::default()
    };
    lf.Anonymous1.ProcessTraceMode = PROCESS_TRACE_MODE_REAL_TIME
        | PROCESS_TRACE_MODE_EVENT_RECORD
        | PROCESS_TRACE_MODE_RAW_TIMESTAMP;
    lf.Anonymous2.EventRecordCallback = Some(on_event);
    lf.Context = &mut state as *mut State<'_, '_> as *mut core::ffi::c_void;
    // SAFETY: `lf` is a valid EVENT_TRACE_LOGFILEW; its name buffer and Context outlive the trace.
    let handle = unsafe { OpenTraceW(&mut lf) };
    if handle.Value == INVALID_HANDLE {
        // SAFETY: no preconditions.
        let code = unsafe { GetLastError() };
        return Err(win_error("OpenTraceW", code, name));
    }
    // Sessions on a system-time clock hand out FILETIMEs already.
    // SAFETY: LogfileHeader was filled in by OpenTraceW; reading plain integers of it.
    let (clock_type, ptr_size) = unsafe {
        (
            lf.LogfileHeader.ReservedFlags,
            lf.LogfileHeader.Anonymous2.Anonymous.PointerSize,
        )
    };
    if clock_type == ClockType::SystemTime.to_u32() {
        state.ctx.clock = Clock::IDENTITY;
    }
    if ptr_size == 4 || ptr_size == 8 {
        state.ctx.logger_pointer_size = ptr_size as u8;
    }
    let closed = AtomicBool::new(false);
    let close = |h: PROCESSTRACE_HANDLE| {
        if !closed.swap(true, Ordering::SeqCst) {
            // SAFETY: a handle from OpenTraceW, closed exactly once (guarded by `closed`).
            unsafe { CloseTrace(h) };
        }
    };
    let done = AtomicBool::new(false);
    let rc = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if broken.load(Ordering::SeqCst) {
                    close(handle);
                    return;
                }
                if stop.load(Ordering::SeqCst) {
                    // Deliver what the session still buffers: flush, give ProcessTrace a moment,
                    // then close.
                    let _ = super::control(name, EVENT_TRACE_CONTROL_FLUSH);
                    std::thread::sleep(DRAIN);
                    close(handle);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // SAFETY: one valid handle; null start/end times (everything).
        let rc = unsafe { ProcessTrace(&handle, 1, std::ptr::null(), std::ptr::null()) };
        done.store(true, Ordering::SeqCst);
        rc
    });
    close(handle);
    let stats = std::mem::take(&mut state.stats);
    match rc {
        0 | ERROR_CTX_CLOSE_PENDING => Ok(stats),
        1223 => Ok(stats), // ERROR_CANCELLED: a buffer callback ended it.
        code => Err(win_error("ProcessTrace", code, name)),
    }
}
