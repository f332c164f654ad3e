//! The Windows backend's session logic on Linux, against a small in-memory fake of the ETW calls it
//! makes (#[no_mangle] functions that take the place of advapi32/tdh/kernel32 imports): what
//! StartTraceW is handed (names, offsets, realtime mode, buffer sizing, flush timer, kernel flags,
//! the heap session's GUID and PID block), EnableTraceEx2's level/keywords and filters, kernel and
//! heap stack requests, events delivered through ProcessTrace's callback and converted, stop and
//! its loss counters, soft stop, the session list, and Win32 errors named in one sentence.
//! The fake keeps ETW's contract (copies the name, fails with the codes ETW uses) and nothing more;
//! under wine and on Windows the real calls are tested instead (tests/win_live.rs).
#![cfg(not(windows))]
#![allow(non_snake_case, clippy::missing_safety_doc)]

mod common;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etwkit::etl::{EtlFile, Order};
use etwkit::event::EventRecord;
use etwkit::guid::Guid;
use etwkit::live::windows::convert::RawEvent;
use etwkit::live::windows::properties::{BufferSizing, SYSTEM_TRACE_CONTROL_GUID};
use etwkit::live::windows::WindowsBackend;
use etwkit::live::{Etw, Level, LiveError};
use windows_sys::core::{GUID, PCSTR, PCWSTR};
use windows_sys::Win32::Foundation::{FARPROC, FILETIME, HANDLE, HMODULE};
use windows_sys::Win32::System::Diagnostics::Etw::{
    CONTROLTRACE_HANDLE, ENABLE_TRACE_PARAMETERS, EVENT_RECORD, EVENT_TRACE_LOGFILEW,
    EVENT_TRACE_PROPERTIES, PROCESSTRACE_HANDLE, PROVIDER_ENUMERATION_INFO,
};
use windows_sys::Win32::System::Diagnostics::ToolHelp::THREADENTRY32;

// ---------------------------------------------------------------- the fake ETW

#[derive(Clone, Debug, Default)]
struct Enable {
    guid: Guid,
    level: u8,
    any: u64,
    all: u64,
    property: u32,
    /// (type, data) of each filter descriptor.
    filters: Vec<(u32, Vec<u8>)>,
}

#[derive(Clone, Debug, Default)]
struct FakeSession {
    handle: u64,
    /// The properties buffer as StartTraceW received it (after copying the name in).
    props: Vec<u8>,
    enables: Vec<Enable>,
    /// TraceSetInformation calls: (class, bytes).
    infos: Vec<(i32, Vec<u8>)>,
    flushes: u32,
}

#[derive(Default)]
struct World {
    sessions: HashMap<String, FakeSession>,
    next: u64,
    /// Events ProcessTrace delivers, per session name.
    queued: HashMap<String, Vec<EventRecord<'static>>>,
    /// OpenTraceW state per consumer handle: (session, callback, context, closed).
    consumers: HashMap<u64, (String, usize, usize, bool)>,
    /// Stopped sessions: name → properties buffer as ControlTraceW(STOP) returned it.
    stopped: HashMap<String, Vec<u8>>,
}

fn world() -> &'static Mutex<World> {
    static W: OnceLock<Mutex<World>> = OnceLock::new();
    W.get_or_init(|| {
        Mutex::new(World {
            next: 0x100,
            ..Default::default()
        })
    })
}

thread_local!(static LAST_ERROR: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });

/// The fake's QPC clock: 10 MHz, "now" = QPC_NOW ↔ FILETIME_NOW.
const QPC_FREQ: i64 = 10_000_000;
const QPC_NOW: i64 = 5_000_000_000;
const FILETIME_NOW: i64 = 133_500_000_000_000_000;
/// What the fake reports as lost when a session stops.
const FAKE_EVENTS_LOST: u32 = 7;
const FAKE_RT_BUFFERS_LOST: u32 = 2;
const FAKE_PROVIDER: Guid = Guid::from_str_const("0badf00d-1111-2222-3333-444455556666");

unsafe fn wstr(p: PCWSTR) -> String {
    let mut v = Vec::new();
    let mut i = 0;
    while unsafe { *p.add(i) } != 0 {
        v.push(unsafe { *p.add(i) });
        i += 1;
    }
    String::from_utf16_lossy(&v)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn put_wide(b: &mut [u8], off: usize, s: &str) {
    for (i, u) in s.encode_utf16().chain([0]).enumerate() {
        b[off + 2 * i..off + 2 * i + 2].copy_from_slice(&u.to_le_bytes());
    }
}

/// The caller's properties buffer, as bytes (Wnode.BufferSize long).
unsafe fn props_bytes<'a>(p: *mut EVENT_TRACE_PROPERTIES) -> &'a mut [u8] {
    let len = unsafe { (*p).Wnode.BufferSize } as usize;
    assert!(len >= 120, "properties buffer of {len} bytes");
    unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) }
}

/// What ETW writes back on QUERY/STOP: the stored properties, names at the caller's offsets.
fn fill_reply(out: &mut [u8], name: &str, stored: &[u8], lost: bool) {
    let (name_off, file_off) = (u32_at(out, 116) as usize, u32_at(out, 112) as usize);
    out[4..116].copy_from_slice(&stored[4..116]);
    out[112..116].copy_from_slice(&(file_off as u32).to_le_bytes());
    if lost {
        out[88..92].copy_from_slice(&FAKE_EVENTS_LOST.to_le_bytes());
        out[100..104].copy_from_slice(&FAKE_RT_BUFFERS_LOST.to_le_bytes());
    }
    assert!(name_off >= 120 && name_off + 2 * (name.len() + 1) <= out.len());
    put_wide(out, name_off, name);
}

#[no_mangle]
pub unsafe extern "system" fn StartTraceW(
    handle: *mut CONTROLTRACE_HANDLE,
    name: PCWSTR,
    props: *mut EVENT_TRACE_PROPERTIES,
) -> u32 {
    let name = unsafe { wstr(name) };
    let b = unsafe { props_bytes(props) };
    if name.starts_with("denied-") {
        return 5;
    }
    let mut w = world().lock().unwrap();
    if w.sessions.contains_key(&name) {
        return 183;
    }
    // ETW copies the session name to LoggerNameOffset; a log file name must already be there.
    let name_off = u32_at(b, 116) as usize;
    if name_off < 120 || name_off + 2 * (name.len() + 1) > b.len() {
        return 87;
    }
    put_wide(b, name_off, &name);
    w.next += 1;
    let h = w.next;
    unsafe { (*handle).Value = h };
    w.sessions.insert(
        name,
        FakeSession {
            handle: h,
            props: b.to_vec(),
            ..Default::default()
        },
    );
    0
}

fn by_handle(w: &mut World, h: u64) -> Option<&mut FakeSession> {
    w.sessions.values_mut().find(|s| s.handle == h)
}

#[no_mangle]
pub unsafe extern "system" fn ControlTraceW(
    handle: CONTROLTRACE_HANDLE,
    name: PCWSTR,
    props: *mut EVENT_TRACE_PROPERTIES,
    code: u32,
) -> u32 {
    let mut w = world().lock().unwrap();
    let name = if name.is_null() {
        match w.sessions.iter().find(|(_, s)| s.handle == handle.Value) {
            Some((n, _)) => n.clone(),
            None => return 4201,
        }
    } else {
        unsafe { wstr(name) }
    };
    let Some(s) = w.sessions.get_mut(&name) else {
        return 4201;
    };
    let out = unsafe { props_bytes(props) };
    match code {
        0 => fill_reply(out, &name, &s.props.clone(), false),
        1 => {
            let stored = s.props.clone();
            fill_reply(out, &name, &stored, true);
            w.sessions.remove(&name);
            w.stopped.insert(name, out.to_vec());
        }
        3 => {
            s.flushes += 1;
            let stored = s.props.clone();
            fill_reply(out, &name, &stored, false);
        }
        _ => return 87,
    }
    0
}

#[no_mangle]
pub unsafe extern "system" fn EnableTraceEx2(
    handle: CONTROLTRACE_HANDLE,
    guid: *const GUID,
    code: u32,
    level: u8,
    any: u64,
    all: u64,
    _timeout: u32,
    params: *const ENABLE_TRACE_PARAMETERS,
) -> u32 {
    assert_eq!(code, 1, "EVENT_CONTROL_CODE_ENABLE_PROVIDER");
    let g = unsafe { &*guid };
    let mut e = Enable {
        guid: Guid::new(g.data1, g.data2, g.data3, g.data4),
        level,
        any,
        all,
        ..Default::default()
    };
    if !params.is_null() {
        let p = unsafe { &*params };
        assert_eq!(p.Version, 2, "ENABLE_TRACE_PARAMETERS_VERSION_2");
        e.property = p.EnableProperty;
        for i in 0..p.FilterDescCount as usize {
            let d = unsafe { &*p.EnableFilterDesc.add(i) };
            let data = unsafe { std::slice::from_raw_parts(d.Ptr as *const u8, d.Size as usize) };
            e.filters.push((d.Type, data.to_vec()));
        }
    }
    let mut w = world().lock().unwrap();
    match by_handle(&mut w, handle.Value) {
        Some(s) => {
            // A new enable of the same provider replaces the old one, as in ETW.
            s.enables.retain(|x| x.guid != e.guid);
            s.enables.push(e);
            0
        }
        None => 6,
    }
}

#[no_mangle]
pub unsafe extern "system" fn TraceSetInformation(
    handle: CONTROLTRACE_HANDLE,
    class: i32,
    info: *const core::ffi::c_void,
    len: u32,
) -> u32 {
    let data = unsafe { std::slice::from_raw_parts(info as *const u8, len as usize) }.to_vec();
    let mut w = world().lock().unwrap();
    // Sessions named "nostack-…" live on a system without stack walks (as under wine).
    if w.sessions
        .iter()
        .any(|(n, s)| s.handle == handle.Value && n.starts_with("nostack-"))
    {
        return 120;
    }
    match by_handle(&mut w, handle.Value) {
        Some(s) => {
            s.infos.push((class, data));
            0
        }
        None => 6,
    }
}

#[no_mangle]
pub unsafe extern "system" fn QueryAllTracesW(
    array: *mut *mut EVENT_TRACE_PROPERTIES,
    count: u32,
    out: *mut u32,
) -> u32 {
    let w = world().lock().unwrap();
    let mut names: Vec<_> = w.sessions.keys().cloned().collect();
    names.sort();
    let mut n = 0;
    for name in names.iter().take(count as usize) {
        let b = unsafe { props_bytes(*array.add(n)) };
        fill_reply(b, name, &w.sessions[name].props, false);
        n += 1;
    }
    unsafe { *out = n as u32 };
    if names.len() > count as usize {
        234
    } else {
        0
    }
}

#[no_mangle]
pub unsafe extern "system" fn OpenTraceW(lf: *mut EVENT_TRACE_LOGFILEW) -> PROCESSTRACE_HANDLE {
    let lf = unsafe { &mut *lf };
    let name = unsafe { wstr(lf.LoggerName) };
    let mode = unsafe { lf.Anonymous1.ProcessTraceMode };
    let mut w = world().lock().unwrap();
    if !w.sessions.contains_key(&name) {
        LAST_ERROR.with(|e| e.set(4201));
        return PROCESSTRACE_HANDLE { Value: u64::MAX };
    }
    // Realtime, EVENT_RECORD callbacks, raw timestamps.
    assert_eq!(mode, 0x100 | 0x1000_0000 | 0x1000, "ProcessTraceMode");
    let cb = unsafe { lf.Anonymous2.EventRecordCallback }.expect("callback") as usize;
    lf.LogfileHeader.ReservedFlags = 1; // QPC
    lf.LogfileHeader.Anonymous2.Anonymous.PointerSize = 8;
    w.next += 1;
    let h = w.next;
    w.consumers
        .insert(h, (name, cb, lf.Context as usize, false));
    PROCESSTRACE_HANDLE { Value: h }
}

#[no_mangle]
pub unsafe extern "system" fn ProcessTrace(
    handles: *const PROCESSTRACE_HANDLE,
    count: u32,
    _start: *const FILETIME,
    _end: *const FILETIME,
) -> u32 {
    assert_eq!(count, 1);
    let h = unsafe { (*handles).Value };
    let (name, cb, ctx, events) = {
        let w = world().lock().unwrap();
        let Some((name, cb, ctx, _)) = w.consumers.get(&h).cloned() else {
            return 6;
        };
        let events = w.queued.get(&name).cloned().unwrap_or_default();
        (name, cb, ctx, events)
    };
    let cb: unsafe extern "system" fn(*mut EVENT_RECORD) = unsafe { std::mem::transmute(cb) };
    for ev in &events {
        let raw = RawEvent::new(ev).unwrap();
        let mut rec = *raw.record();
        rec.UserContext = ctx as *mut core::ffi::c_void;
        unsafe { cb(&mut rec) };
    }
    // Realtime: wait until the consumer closes the trace.
    let t0 = Instant::now();
    loop {
        if world().lock().unwrap().consumers[&h].3 {
            return 7007;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            panic!("{name}: nobody called CloseTrace");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[no_mangle]
pub unsafe extern "system" fn CloseTrace(h: PROCESSTRACE_HANDLE) -> u32 {
    match world().lock().unwrap().consumers.get_mut(&h.Value) {
        Some(c) if !c.3 => {
            c.3 = true;
            0
        }
        _ => 6,
    }
}

#[no_mangle]
pub unsafe extern "system" fn GetLastError() -> u32 {
    LAST_ERROR.with(|e| e.get())
}

#[no_mangle]
pub unsafe extern "system" fn QueryPerformanceCounter(v: *mut i64) -> i32 {
    unsafe { *v = QPC_NOW };
    1
}

#[no_mangle]
pub unsafe extern "system" fn QueryPerformanceFrequency(v: *mut i64) -> i32 {
    unsafe { *v = QPC_FREQ };
    1
}

#[no_mangle]
pub unsafe extern "system" fn GetSystemTimePreciseAsFileTime(ft: *mut FILETIME) {
    unsafe {
        (*ft).dwLowDateTime = FILETIME_NOW as u32;
        (*ft).dwHighDateTime = (FILETIME_NOW >> 32) as u32;
    }
}

/// No ntdll!wine_get_version here: the fake is a Windows, not a wine.
#[no_mangle]
pub unsafe extern "system" fn GetModuleHandleW(name: PCWSTR) -> HMODULE {
    assert_eq!(unsafe { wstr(name) }, "ntdll.dll");
    0x7ff0_0000usize as HMODULE
}

#[no_mangle]
pub unsafe extern "system" fn GetProcAddress(_m: HMODULE, _name: PCSTR) -> FARPROC {
    None
}

/// One registered provider, "Contoso-Fake".
#[no_mangle]
pub unsafe extern "system" fn TdhEnumerateProviders(
    buf: *mut PROVIDER_ENUMERATION_INFO,
    size: *mut u32,
) -> u32 {
    let mut b = vec![0u8; 8 + 24];
    b[0] = 1;
    b[8..24].copy_from_slice(&FAKE_PROVIDER.to_le_bytes());
    b[28..32].copy_from_slice(&32u32.to_le_bytes());
    for u in "Contoso-Fake".encode_utf16().chain([0]) {
        b.extend_from_slice(&u.to_le_bytes());
    }
    let have = unsafe { *size } as usize;
    unsafe { *size = b.len() as u32 };
    if have < b.len() || buf.is_null() {
        return 122;
    }
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, b.len()) };
    0
}

/// A process list nobody may read (spawning needs Windows; resume_process is checked to fail cleanly).
#[no_mangle]
pub unsafe extern "system" fn CreateToolhelp32Snapshot(_flags: u32, _pid: u32) -> HANDLE {
    LAST_ERROR.with(|e| e.set(5));
    -1isize as HANDLE
}
#[no_mangle]
pub unsafe extern "system" fn Thread32First(_s: HANDLE, _t: *mut THREADENTRY32) -> i32 {
    0
}
#[no_mangle]
pub unsafe extern "system" fn Thread32Next(_s: HANDLE, _t: *mut THREADENTRY32) -> i32 {
    0
}
#[no_mangle]
pub unsafe extern "system" fn OpenThread(_a: u32, _i: i32, _t: u32) -> HANDLE {
    std::ptr::null_mut()
}
#[no_mangle]
pub unsafe extern "system" fn ResumeThread(_t: HANDLE) -> u32 {
    u32::MAX
}
#[no_mangle]
pub unsafe extern "system" fn CloseHandle(_h: HANDLE) -> i32 {
    1
}

type Infos = (
    HashMap<(Guid, u16, u8), Vec<u8>>,
    HashMap<(Guid, String), Vec<u8>>,
);

/// TRACE_EVENT_INFO blobs by (provider, id, version) and EVENT_MAP_INFO blobs by (provider, map
/// name), from the EventMetadata records of a real pktmon capture: what TDH answers on the machine
/// that wrote it.
fn pktmon_infos() -> &'static HashMap<(Guid, u16, u8), Vec<u8>> {
    &pktmon_metadata().0
}

fn pktmon_metadata() -> &'static Infos {
    static M: OnceLock<Infos> = OnceLock::new();
    M.get_or_init(|| {
        let (mut m, mut maps) = (HashMap::new(), HashMap::new());
        let Some(dir) = common::shared_dir() else {
            return (m, maps);
        };
        let file = EtlFile::open(dir.join("etl-samples/pktmonvpn_PktMon.etl")).unwrap();
        file.for_each(Order::File, |r| {
            if r.provider == etwkit::schema::tdh::METADATA_CLASS && r.descriptor.opcode == 33 {
                if let Ok((provider, map)) = etwkit::schema::tdh::parse_map_info(&r.payload) {
                    maps.insert((provider, map.name.clone()), r.payload[16..].to_vec());
                }
            }
            if r.provider == etwkit::schema::tdh::METADATA_CLASS && r.descriptor.opcode == 32 {
                if let Ok(Some(info)) = etwkit::schema::tdh::parse_event_info(&r.payload) {
                    if let etwkit::schema::SchemaKey::Manifest {
                        provider,
                        id,
                        version,
                    } = info.key
                    {
                        m.insert((provider, id, version), r.payload.to_vec());
                    }
                }
            }
            ControlFlow::Continue(())
        });
        (m, maps)
    })
}

#[no_mangle]
pub unsafe extern "system" fn TdhGetEventMapInformation(
    event: *const EVENT_RECORD,
    name: PCWSTR,
    buf: *mut core::ffi::c_void,
    size: *mut u32,
) -> u32 {
    let g = unsafe { &(*event).EventHeader.ProviderId };
    let key = (Guid::new(g.data1, g.data2, g.data3, g.data4), unsafe {
        wstr(name)
    });
    let Some(blob) = pktmon_metadata().1.get(&key) else {
        return 1168;
    };
    let have = unsafe { *size } as usize;
    unsafe { *size = blob.len() as u32 };
    if have < blob.len() || buf.is_null() {
        return 122;
    }
    unsafe { std::ptr::copy_nonoverlapping(blob.as_ptr(), buf as *mut u8, blob.len()) };
    0
}

#[no_mangle]
pub unsafe extern "system" fn TdhGetEventInformation(
    event: *const EVENT_RECORD,
    _n: u32,
    _ctx: *const core::ffi::c_void,
    buf: *mut core::ffi::c_void,
    size: *mut u32,
) -> u32 {
    let h = unsafe { &(*event).EventHeader };
    let g = &h.ProviderId;
    let key = (
        Guid::new(g.data1, g.data2, g.data3, g.data4),
        h.EventDescriptor.Id,
        h.EventDescriptor.Version,
    );
    let Some(blob) = pktmon_infos().get(&key) else {
        return 1168; // ERROR_NOT_FOUND
    };
    let have = unsafe { *size } as usize;
    unsafe { *size = blob.len() as u32 };
    if have < blob.len() || buf.is_null() {
        return 122;
    }
    unsafe { std::ptr::copy_nonoverlapping(blob.as_ptr(), buf as *mut u8, blob.len()) };
    0
}

// ---------------------------------------------------------------- tests

fn etw() -> Etw {
    Etw::with_backend(Arc::new(WindowsBackend::new()))
}

fn session(name: &str) -> FakeSession {
    world().lock().unwrap().sessions[name].clone()
}

const AFD: Guid = Guid::from_str_const("e53c6823-7bb8-44bb-90dc-3f86090d48a6");

#[test]
fn start_lays_out_properties_and_enables_with_filters() {
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-start", None, None);
    t.enable_ex("Microsoft-Windows-Winsock-AFD", 0, Level::VERBOSE, 0x10, 0)
        .unwrap();
    t.set_event_ids("Microsoft-Windows-Winsock-AFD", &[1, 5])
        .unwrap();
    t.enable("Contoso-Fake", 0x4, Level::INFORMATIONAL).unwrap();
    t.add_pid(42).unwrap();
    t.add_pid(77).unwrap();
    t.start().unwrap();
    let s = session("etwkit-fake-start");
    let p = &s.props;
    assert_eq!(
        u32_at(p, 0),
        120 + 4 * 1024,
        "Wnode.BufferSize: struct + two 1024-char names"
    );
    assert_eq!(u32_at(p, 116), 120, "LoggerNameOffset");
    assert_eq!(u32_at(p, 112), 0, "realtime: no LogFileNameOffset");
    let name: Vec<u16> = p[120..120 + 2 * 17]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(String::from_utf16(&name).unwrap(), "etwkit-fake-start");
    assert_eq!(u32_at(p, 64), 0x100, "EVENT_TRACE_REAL_TIME_MODE");
    assert_eq!(u32_at(p, 40), 1, "Wnode.ClientContext: QPC");
    assert_eq!(u32_at(p, 44), 0x0002_0000, "WNODE_FLAG_TRACED_GUID");
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    assert_eq!(u32_at(p, 48), 256, "BufferSize KiB");
    assert_eq!(
        u32_at(p, 52),
        (4 * cpus).clamp(4, 512),
        "MinimumBuffers: 1 MiB per CPU"
    );
    assert_eq!(
        u32_at(p, 56),
        (16 * cpus).clamp(16, 2048),
        "MaximumBuffers: 4 MiB per CPU"
    );
    assert_eq!(u32_at(p, 68), 1, "FlushTimer");
    assert_eq!(u32_at(p, 72), 0, "no kernel flags");
    assert!(Guid::from_le_bytes(&p[24..40]).is_some_and(|g| !g.is_zero()));

    assert_eq!(s.enables.len(), 2);
    let afd = s
        .enables
        .iter()
        .find(|e| e.guid == AFD)
        .expect("AFD enabled");
    assert_eq!((afd.level, afd.any, afd.all, afd.property), (5, 0x10, 0, 0));
    let pids: Vec<u8> = [42u32, 77].iter().flat_map(|p| p.to_le_bytes()).collect();
    assert_eq!(
        afd.filters,
        vec![
            (0x8000_0004, pids.clone()),
            (0x8000_0200, vec![1, 0, 2, 0, 1, 0, 5, 0]),
        ]
    );
    let fake = s
        .enables
        .iter()
        .find(|e| e.guid == FAKE_PROVIDER)
        .expect("TDH-named provider");
    assert_eq!((fake.level, fake.property), (4, 4), "STACK_TRACE property");
    assert_eq!(fake.filters, vec![(0x8000_0004, pids)]);

    // A process added while running: every provider is enabled again with the new PID list.
    t.add_pid(99).unwrap();
    let s = session("etwkit-fake-start");
    let afd = s.enables.iter().find(|e| e.guid == AFD).unwrap();
    assert_eq!(afd.filters[0].1.len(), 12);
    // Nine processes are more than ETW's filter takes: said, not truncated.
    for p in 100..105 {
        t.add_pid(p).unwrap();
    }
    let err = t.add_pid(200).unwrap_err().to_string();
    assert!(err.contains("at most 8 processes"), "{err}");
    t.stop(false).unwrap();
}

#[test]
fn kernel_session_flags_and_stack_walks() {
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-kernel", None, None);
    t.enable("Windows Kernel Trace", 0x4, 0).unwrap();
    t.start().unwrap();
    let s = session("etwkit-fake-kernel");
    assert_eq!(
        u32_at(&s.props, 72),
        0x0001_0007,
        "process|thread|image|tcpip"
    );
    assert_eq!(
        u32_at(&s.props, 64),
        0x100 | 0x0200_0000,
        "realtime system logger"
    );
    assert!(
        s.enables.is_empty(),
        "kernel providers are flags, not EnableTraceEx2"
    );
    assert_eq!(s.infos.len(), 1);
    let (class, data) = &s.infos[0];
    assert_eq!(*class, 3, "TraceStackTracingInfo");
    let ids: Vec<(Guid, u8)> = data
        .chunks(24)
        .map(|c| (Guid::from_le_bytes(&c[..16]).unwrap(), c[16]))
        .collect();
    assert_eq!(
        ids,
        vec![
            (
                Guid::from_str_const("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c"),
                1
            ),
            (
                Guid::from_str_const("3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c"),
                1
            ),
            (
                Guid::from_str_const("2cb15d1d-5fc1-11d2-abe1-00a0c911f518"),
                10
            ),
        ]
    );
    t.stop(false).unwrap();
    // Explicit flags are passed as given.
    let mut t = e.open_trace("etwkit-fake-kernel2", None, None);
    t.enable_ex(SYSTEM_TRACE_CONTROL_GUID, 0, 0, 0x1, 0)
        .unwrap();
    t.start().unwrap();
    assert_eq!(u32_at(&session("etwkit-fake-kernel2").props, 72), 1);
    t.stop(false).unwrap();
}

#[test]
fn heap_session_guid_pids_and_stack_ids() {
    let e = etw();
    let mut t = e
        .open_heap_trace("etwkit-fake-heap", None, &[33, 34])
        .unwrap();
    t.add_pid(4321).unwrap();
    t.start().unwrap();
    let s = session("etwkit-fake-heap");
    assert_eq!(
        Guid::from_le_bytes(&s.props[24..40]),
        Some(Guid::from_str_const("222962ab-6180-4b88-a825-346b75f2a24a")),
        "the heap provider's GUID is the session's"
    );
    let flags = u32_at(&s.props, 72);
    assert_eq!(flags & 0xFFFF_0000, 0x80FF_0000);
    let ext = (flags & 0xFFFF) as usize;
    assert_eq!(
        u32_at(&s.props, ext + 8),
        4321,
        "PID in the extension block"
    );
    assert_eq!(s.infos.len(), 1);
    let types: Vec<u8> = s.infos[0].1.chunks(24).map(|c| c[16]).collect();
    assert_eq!(types, vec![33, 34]);
    let err = t.add_pid(1).unwrap_err().to_string();
    assert!(err.contains("fixed when it starts"), "{err}");
    t.stop(false).unwrap();
}

#[test]
fn process_converts_and_stop_reports_losses() {
    let Some(path) = common::sample(
        "etlparser_AMSITrace.etl",
        "process_converts_and_stop_reports_losses",
    ) else {
        return;
    };
    // The sample's TraceLogging events, re-timed on the fake's QPC clock (1 ms apart).
    let file = EtlFile::open(&path).unwrap();
    let mut queued: Vec<EventRecord<'static>> = Vec::new();
    file.for_each(Order::Time, |r| {
        if r.header_type.is_event_header() {
            let mut ev = r.event.to_owned_record();
            ev.raw_timestamp = QPC_NOW + 10_000 * (queued.len() as i64 + 1);
            queued.push(ev);
        }
        ControlFlow::Continue(())
    });
    assert_eq!(queued.len(), 19);
    // Plus one realtime lost-event notification.
    let mut lost = queued[0].clone();
    lost.provider = etwkit::live::windows::consume::RT_LOST_EVENT;
    lost.descriptor.opcode = 32;
    lost.flags |= etwkit::event::flags::CLASSIC_HEADER;
    lost.payload = Vec::new().into();
    lost.ext = Vec::new().into();
    queued.push(lost);
    world()
        .lock()
        .unwrap()
        .queued
        .insert("etwkit-fake-process".into(), queued.clone());

    let e = etw();
    let mut t = e.open_trace("etwkit-fake-process", None, None);
    // AmsiTrace's GUID (the fake delivers whatever is queued).
    t.enable(
        Guid::from_str_const("2a576b87-09a7-520e-c21a-4942f0271d67"),
        0,
        Level::VERBOSE,
    )
    .unwrap();
    t.start().unwrap();
    let stop = t.stop_handle();
    let mut got: Vec<(i64, Guid, u16, Option<String>)> = Vec::new();
    let n = queued.len();
    t.process(
        |ev| {
            let name = etwkit::live::props::properties(ev).map(|(n, _)| n);
            got.push((ev.timestamp, ev.provider, ev.descriptor.id, name));
            if got.len() == n {
                stop.stop();
            }
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    assert_eq!(got.len(), n);
    for (i, (ts, prov, id, name)) in got.iter().enumerate().take(19) {
        // UTC = sync FILETIME + (raw - sync QPC) at 10 MHz: 1 ms per event.
        assert_eq!(*ts, FILETIME_NOW + 10_000 * (i as i64 + 1));
        assert_eq!((*prov, *id), (queued[i].provider, queued[i].descriptor.id));
        assert!(
            name.is_some(),
            "event {i} decodes from its own TraceLogging schema"
        );
    }
    let sum = t.stop(false).unwrap();
    assert_eq!(sum.events_delivered, n as u64);
    assert_eq!(sum.events_lost, FAKE_EVENTS_LOST as u64);
    let detail: HashMap<_, _> = sum.lost_detail.iter().cloned().collect();
    assert_eq!(detail["RealTimeBuffersLost"], FAKE_RT_BUFFERS_LOST as u64);
    assert_eq!(detail["RT_LostEvent notifications"], 1);
    assert!(world()
        .lock()
        .unwrap()
        .stopped
        .contains_key("etwkit-fake-process"));
}

#[test]
fn tdh_fallback_layouts_decode_like_the_file() {
    let test = "tdh_fallback_layouts_decode_like_the_file";
    let Some(path) = common::sample("pktmonvpn_PktMon.etl", test) else {
        return;
    };
    // The capture's PktMon events without their metadata: layouts only "TDH" (the fake, answering
    // from the capture's own EventMetadata) knows.
    let file = EtlFile::open(&path).unwrap();
    let (reference, _) =
        etwkit::decode::Decoder::for_file(etwkit::schema::Registry::with_builtins(), &file);
    let mut queued: Vec<EventRecord<'static>> = Vec::new();
    let mut want = Vec::new();
    let mut per_key: HashMap<(Guid, u16), usize> = HashMap::new();
    file.for_each(Order::File, |r| {
        let n = per_key.entry((r.provider, r.descriptor.id)).or_default();
        *n += 1;
        // Every layout, at most 30 events of each.
        if r.header_type.is_event_header() && *n <= 30 {
            let d = reference.decode(&r.event);
            want.push((d.event_name.map(|n| n.to_string()), d.properties.to_json()));
            queued.push(r.event.to_owned_record());
        }
        ControlFlow::Continue(())
    });
    let keys: std::collections::HashSet<_> = queued
        .iter()
        .map(|e| (e.provider, e.descriptor.id, e.descriptor.version))
        .filter(|k| pktmon_infos().contains_key(k))
        .collect();
    assert!(keys.len() >= 5, "{} layouts", keys.len());
    world()
        .lock()
        .unwrap()
        .queued
        .insert("etwkit-fake-tdh".into(), queued.clone());
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-tdh", None, None);
    t.enable(queued[0].provider, 0, 5).unwrap();
    t.start().unwrap();
    let stop = t.stop_handle();
    let (mut meta, mut got) = (0usize, Vec::new());
    // A decoder that knows only etwkit's built-in layouts and learns as events pass (as a live
    // consumer's does).
    let mut live = etwkit::decode::Decoder::new(etwkit::schema::Registry::with_builtins());
    t.process(
        |ev| {
            if live.learn(ev) {
                meta += 1;
                return ControlFlow::Continue(());
            }
            let d = live.decode(ev);
            got.push((d.event_name.map(|n| n.to_string()), d.properties.to_json()));
            if got.len() == queued.len() {
                stop.stop();
            }
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let maps = pktmon_metadata().1.len();
    assert!(maps > 0);
    assert!(
        meta > keys.len() && meta <= keys.len() + maps,
        "one EventInfo per layout ({}) and each map once: {meta}",
        keys.len()
    );
    assert_eq!(got.len(), want.len());
    let mut decoded = 0;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "event {i}");
        decoded += (g.1.as_object().is_some_and(|o| !o.is_empty())) as usize;
    }
    assert!(
        decoded * 10 > got.len() * 9,
        "{decoded} of {} decoded",
        got.len()
    );
    let sum = t.stop(false).unwrap();
    assert!(
        sum.issues
            .iter()
            .any(|i| i.contains("layouts came from TDH")),
        "{:?}",
        sum.issues
    );
}

#[test]
fn only_the_traced_processes_events_are_delivered() {
    let Some(path) = common::sample(
        "krabsetw_powershell.etl",
        "only_the_traced_processes_events_are_delivered",
    ) else {
        return;
    };
    let file = EtlFile::open(&path).unwrap();
    let mut queued: Vec<EventRecord<'static>> = Vec::new();
    file.for_each(Order::File, |r| {
        if r.header_type.is_event_header() {
            let mut ev = r.event.to_owned_record();
            ev.pid = if queued.len() % 2 == 0 { 1000 } else { 2000 };
            queued.push(ev);
        }
        ControlFlow::Continue(())
    });
    world()
        .lock()
        .unwrap()
        .queued
        .insert("etwkit-fake-pids".into(), queued.clone());
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-pids", None, None);
    t.enable(queued[0].provider, 0, 5).unwrap();
    t.add_pid(1000).unwrap();
    t.start().unwrap();
    let stop = t.stop_handle();
    stop.stop(); // ProcessTrace delivers what is queued, then the trace is closed.
    let mut pids = Vec::new();
    t.process(
        |ev| {
            pids.push(ev.pid);
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    assert_eq!(pids.len(), queued.len().div_ceil(2));
    assert!(pids.iter().all(|&p| p == 1000));
    // The stop flag flushed the session before closing the trace.
    assert_eq!(session("etwkit-fake-pids").flushes, 1);
    t.stop(false).unwrap();
}

#[test]
fn failed_stack_requests_leave_no_session_behind() {
    let e = etw();
    let mut k = e.open_trace("nostack-kernel", None, None);
    k.enable("Windows Kernel Trace", 0x4, 0).unwrap();
    let err = k.start().unwrap_err().to_string();
    assert!(
        err.contains("TraceSetInformation") && err.contains("Win32 error 120"),
        "{err}"
    );
    let mut h = e.open_heap_trace("nostack-heap", None, &[33]).unwrap();
    h.add_pid(1).unwrap();
    let err = h.start().unwrap_err().to_string();
    assert!(err.contains("TraceSetInformation"), "{err}");
    let w = world().lock().unwrap();
    for name in ["nostack-kernel", "nostack-heap"] {
        assert!(!w.sessions.contains_key(name), "{name} left running");
        assert!(w.stopped.contains_key(name), "{name} never stopped");
    }
}

#[test]
fn unknown_provider_names_fail_at_start() {
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-unknown", None, None);
    t.enable("No-Such-Provider", 0, 5).unwrap();
    let err = t.start().unwrap_err();
    assert!(
        matches!(err, LiveError::UnknownProvider(ref n) if n == "No-Such-Provider"),
        "{err}"
    );
    assert!(!world()
        .lock()
        .unwrap()
        .sessions
        .contains_key("etwkit-fake-unknown"));
}

#[test]
fn soft_stop_flush_list_and_errors() {
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-list", None, None);
    t.enable("Microsoft-Windows-Winsock-AFD", 0, 5).unwrap();
    t.start().unwrap();
    t.flush().unwrap();
    t.flush().unwrap();
    assert_eq!(session("etwkit-fake-list").flushes, 2);
    assert!(t.exists().unwrap());
    let list = e.sessions().unwrap();
    let me = list
        .iter()
        .find(|s| s.name == "etwkit-fake-list")
        .expect("listed");
    assert!(me.etwkit, "our session GUID is recognized");
    assert_eq!(me.buffer_size_kb, 256);

    // Starting the same name again: ETW's ERROR_ALREADY_EXISTS, named.
    let mut again = e.open_trace("etwkit-fake-list", None, None);
    again.enable("Microsoft-Windows-Winsock-AFD", 0, 5).unwrap();
    let err = again.start().unwrap_err();
    assert!(matches!(err, LiveError::AlreadyStarted(_)), "{err}");

    t.stop(false).unwrap();
    let other = e.open_trace("etwkit-fake-list", None, None);
    assert!(!other.exists().unwrap());
    // Soft stop of a session that is gone: fine; hard: an error naming it.
    let mut gone = e.open_trace("etwkit-fake-list", None, None);
    gone.stop(true).unwrap();
    let err = gone.stop(false).unwrap_err();
    assert!(
        matches!(err, LiveError::NoSuchSession(ref n) if n == "etwkit-fake-list"),
        "{err}"
    );

    // Not elevated: one sentence naming Administrator and Performance Log Users.
    let mut denied = e.open_trace("denied-etwkit", None, None);
    denied
        .enable("Microsoft-Windows-Winsock-AFD", 0, 5)
        .unwrap();
    let msg = denied.start().unwrap_err().to_string();
    assert!(
        msg.contains("Administrator")
            && msg.contains("Performance Log Users")
            && !msg.contains('\n'),
        "{msg}"
    );
    assert_eq!(msg.matches(". ").count(), 0, "one sentence: {msg}");
    // Resuming threads without access: named too.
    let err = etwkit::live::windows::resume_process(1).unwrap_err();
    assert!(matches!(err, LiveError::NotElevated), "{err}");
}

#[test]
fn buffer_request_maps_to_buffers() {
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-buffers", None, None);
    t.enable("Microsoft-Windows-Winsock-AFD", 0, 5).unwrap();
    t.set_buffer_kb(8192);
    t.start().unwrap();
    let p = session("etwkit-fake-buffers").props;
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    let want = BufferSizing::for_cpus(8192, cpus);
    assert_eq!((u32_at(&p, 48), u32_at(&p, 52)), (256, 32 * cpus));
    assert_eq!(
        want.min_buffers,
        32 * cpus,
        "8 MiB per CPU in 256 KiB buffers"
    );
    t.stop(false).unwrap();
}

#[test]
fn logfile_sessions_are_written_by_etw() {
    let dir = std::env::temp_dir().join(format!("etwkit-win-session-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fake.etl");
    let e = etw();
    let mut t = e.open_trace("etwkit-fake-file", Some(&path), None);
    t.enable("Microsoft-Windows-Winsock-AFD", 0, 5).unwrap();
    t.start().unwrap();
    let p = session("etwkit-fake-file").props;
    assert_eq!(u32_at(&p, 64), 0x100 | 0x1, "realtime and sequential file");
    let off = u32_at(&p, 112) as usize;
    assert!(
        off >= 120 + 2 * 17,
        "the file name follows the session name"
    );
    let units: Vec<u16> = p[off..]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0)
        .collect();
    assert_eq!(
        String::from_utf16(&units).unwrap(),
        path.display().to_string()
    );
    t.stop(false).unwrap();
    // ETW writes the file, not etwkit's writer (the fake writes none).
    assert!(!path.exists());
    std::fs::remove_dir_all(&dir).ok();
}

#[path = "heap_common/windows_etl.rs"]
mod windows_etl;

#[test]
fn heap_session_api_over_etw() {
    use etwkit::analysis::heap::{HeapAnalyzer, HEAP_PROVIDER, IMAGE_CLASS, STACKWALK_GUID};
    use etwkit::live::heap::{HeapOptions, HeapSession, HeapStacks};
    // What the heap session and the kernel image session deliver: the records of a Windows-style
    // heap trace (heap events with StackWalk stacks; Image rundown and load events).
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("win_session_heap.etl");
    windows_etl::write(&path);
    let (mut heap, mut images): (Vec<EventRecord<'static>>, Vec<EventRecord<'static>>) =
        Default::default();
    EtlFile::open(&path).unwrap().for_each(Order::Time, |r| {
        let p = r.event.provider;
        if p == IMAGE_CLASS {
            images.push(r.event.to_owned_record());
        } else if p == HEAP_PROVIDER || p == STACKWALK_GUID {
            heap.push(r.event.to_owned_record());
        }
        ControlFlow::Continue(())
    });
    assert_eq!((heap.len(), images.len()), (10, 4));
    let name = format!("etwkit-heap-{}", std::process::id());
    {
        let mut w = world().lock().unwrap();
        w.queued.insert(name.clone(), heap);
        w.queued.insert(format!("{name}-images"), images);
    }
    // Process 4242 does not run here: the trace ends on its own once its events are in.
    let mut s = HeapSession::start(HeapOptions {
        pids: vec![windows_etl::PID],
        stacks: HeapStacks::parse("alloc,free").unwrap(),
        etw: Some(etw()),
        // Windows' only mode (on Linux, auto would pick the shim or uprobes).
        mode: etwkit::live::heap::HeapMode::Session,
        ..Default::default()
    })
    .unwrap();
    let heap_props = session(&name).props;
    let ext = (u32_at(&heap_props, 72) & 0xFFFF) as usize;
    assert_eq!(
        u32_at(&heap_props, ext + 8),
        windows_etl::PID,
        "the PID block"
    );
    let stacks: Vec<u8> = session(&name).infos[0]
        .1
        .chunks(24)
        .map(|c| c[16])
        .collect();
    assert_eq!(stacks, vec![33, 36], "stack walks on Alloc and Free");
    let k = session(&format!("{name}-images"));
    assert_eq!(
        u32_at(&k.props, 72),
        0x1 | 0x4,
        "kernel flags: process | image load"
    );

    let mut an = HeapAnalyzer::new();
    let mut ops = 0;
    s.process(&mut |_| {}, &mut |op| {
        ops += 1;
        an.add(op);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(ops, 6, "4 allocations, 2 frees");
    let mut totals = etwkit::live::heap::HeapTotals::default();
    let fin = s.finish(&mut totals).unwrap();
    assert_eq!(fin.images.len(), 4, "{:?}", fin.images);
    assert_eq!(fin.events_lost, FAKE_EVENTS_LOST as u64);
    let mut end = s.wait(&mut totals).unwrap();
    an.add_totals(totals);
    assert_eq!(end.mode, "traced with an ETW heap session");
    assert!(end.status.is_none());
    let report = an.report(Some(end.namer.as_mut()), 10, 8);
    let leak = &report.outstanding_by_stack[0];
    assert_eq!(leak.bytes, windows_etl::LEAKED.iter().sum::<u64>());
    let shown: Vec<String> = leak.frames.iter().map(|f| f.display()).collect();
    assert_eq!(
        shown[..3],
        [
            format!(
                "ntdll.dll+{:#x}",
                windows_etl::LEAK_STACK[1] - windows_etl::NTDLL.0
            ),
            format!(
                "mod.dll+{:#x}",
                windows_etl::LEAK_STACK[2] - windows_etl::MOD.0
            ),
            format!(
                "app.exe+{:#x}",
                windows_etl::LEAK_STACK[3] - windows_etl::APP.0
            ),
        ]
    );
    let w = world().lock().unwrap();
    assert!(w.stopped.contains_key(&name) && w.stopped.contains_key(&format!("{name}-images")));
}
