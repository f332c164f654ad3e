//! Live ETW on Windows: the [`Backend`] over windows-sys.
//!
//! Everything is ordinary code, type-checked (`cargo check`, clippy) on every OS; off Windows the
//! Win32 functions are plain `extern "system"` declarations that nothing reachable from Linux tests
//! calls (the `win_session` integration test supplies fakes of them instead). Only the
//! CREATE_SUSPENDED spawn is `cfg(windows)`.
//!
//! - sessions: StartTraceW ([`properties`]: names, realtime or logfile, buffer sizing, flush timer,
//!   kernel flags), ControlTraceW (stop, flush, query), QueryAllTracesW;
//! - providers: EnableTraceEx2 ([`enable`]: level, keywords, PID / event-id / stack filters, stack
//!   capture), TraceSetInformation for kernel stack walks, enumeration in [`providers`];
//! - events: OpenTraceW/ProcessTrace ([`consume`]), each EVENT_RECORD becoming an [`EventRecord`]
//!   ([`convert`]) that goes through etwkit's own decoder;
//! - heap sessions: [`heap`], the way xperf and PerfView start them.
//!
//! [`EventRecord`]: crate::event::EventRecord

pub mod consume;
pub mod convert;
pub mod enable;
pub mod heap;
pub mod properties;
pub mod providers;
pub mod tdh;
pub mod workload;

use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;

use windows_sys::Win32::System::Diagnostics::Etw::{
    ControlTraceW, EnableTraceEx2, QueryAllTracesW, StartTraceW, TraceSetInformation,
    TraceStackTracingInfo, CLASSIC_EVENT_ID, CONTROLTRACE_HANDLE,
    EVENT_CONTROL_CODE_ENABLE_PROVIDER, EVENT_ENABLE_PROPERTY_STACK_TRACE, EVENT_TRACE_CONTROL,
    EVENT_TRACE_CONTROL_FLUSH, EVENT_TRACE_CONTROL_QUERY, EVENT_TRACE_CONTROL_STOP,
    EVENT_TRACE_PROPERTIES,
};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows_sys::Win32::System::Threading::{OpenThread, ResumeThread, THREAD_SUSPEND_RESUME};

use crate::guid::Guid;
use crate::live::{
    Backend, Callback, EnableSpec, LiveError, LiveSession, ProviderInfo, Result, SessionConfig,
    SessionInfo, TraceSummary,
};
use crate::schema::builtin::heap_events::{EVENT_ALLOC, EVENT_FREE, EVENT_REALLOC, HEAP_PROVIDER};
use properties::{kernel_flags, session_guid, BufferSizing, PropsBuf, SessionProperties};

const _: () = assert!(std::mem::size_of::<CLASSIC_EVENT_ID>() == 24);
const _: () = assert!(std::mem::size_of::<THREADENTRY32>() == 28);

/// Win32 error codes the backend names.
pub mod error {
    pub const ACCESS_DENIED: u32 = 5;
    pub const INVALID_PARAMETER: u32 = 87;
    pub const CALL_NOT_IMPLEMENTED: u32 = 120;
    pub const ALREADY_EXISTS: u32 = 183;
    pub const MORE_DATA: u32 = 234;
    pub const NO_SYSTEM_RESOURCES: u32 = 1450;
    pub const WMI_INSTANCE_NOT_FOUND: u32 = 4201;
}

/// NUL-terminated UTF-16.
pub fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

pub(crate) fn to_win_guid(g: &Guid) -> windows_sys::core::GUID {
    windows_sys::core::GUID {
        data1: g.data1,
        data2: g.data2,
        data3: g.data3,
        data4: g.data4,
    }
}

pub(crate) fn from_win_guid(g: &windows_sys::core::GUID) -> Guid {
    Guid::new(g.data1, g.data2, g.data3, g.data4)
}

/// A Win32 error of `api` (on `session`, when it concerns one) as one sentence.
pub fn win_error(api: &str, code: u32, session: &str) -> LiveError {
    match code {
        // Wine's ETW stubs answer access denied (OpenTraceW): no elevation would help there.
        error::ACCESS_DENIED if wine_version().is_some() => LiveError::Unsupported(format!(
            "{api} is refused by wine's ETW, a stub that delivers no events: live tracing needs real Windows"
        )),
        error::ACCESS_DENIED => LiveError::NotElevated,
        error::ALREADY_EXISTS if !session.is_empty() => LiveError::AlreadyStarted(session.into()),
        error::WMI_INSTANCE_NOT_FOUND if !session.is_empty() => {
            LiveError::NoSuchSession(session.into())
        }
        error::CALL_NOT_IMPLEMENTED => LiveError::Unsupported(format!(
            "{api} is not implemented on this system (Win32 error 120){}",
            if wine_version().is_some() {
                ": wine's ETW is a stub"
            } else {
                ""
            }
        )),
        error::NO_SYSTEM_RESOURCES => LiveError::Other(format!(
            "{api}: Windows has no room for another trace session (Win32 error 1450; stop unused sessions, see `etwkit sessions`)"
        )),
        error::INVALID_PARAMETER => LiveError::Other(format!(
            "{api} rejected its parameters (Win32 error 87, ERROR_INVALID_PARAMETER)"
        )),
        _ => LiveError::Other(format!("{api} failed with Win32 error {code}")),
    }
}

/// Wine's version when running under wine (ntdll exports `wine_get_version` there only).
pub fn wine_version() -> Option<String> {
    let ntdll = wide("ntdll.dll");
    // SAFETY: NUL-terminated name; ntdll is always loaded, the handle needs no release.
    let h = unsafe { GetModuleHandleW(ntdll.as_ptr()) };
    if h.is_null() {
        return None;
    }
    // SAFETY: `h` is a module handle; the name is NUL-terminated ASCII.
    let f = unsafe { GetProcAddress(h, c"wine_get_version".as_ptr() as *const u8) }?;
    // SAFETY: wine declares `const char *wine_get_version(void)` (cdecl = the x64 calling
    // convention); the string is static.
    let v = unsafe {
        let f: unsafe extern "C" fn() -> *const core::ffi::c_char = std::mem::transmute(f);
        let p = f();
        if p.is_null() {
            return Some(String::new());
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    Some(v)
}

/// ControlTraceW on a session by name with a fresh properties buffer; the buffer ETW filled in.
pub fn control(name: &str, code: EVENT_TRACE_CONTROL) -> Result<PropsBuf> {
    let wname = wide(name);
    let mut props = PropsBuf::empty();
    // SAFETY: `props` is a properly sized properties buffer; the name is NUL-terminated.
    let rc = unsafe {
        ControlTraceW(
            CONTROLTRACE_HANDLE { Value: 0 },
            wname.as_ptr(),
            props.as_mut_ptr(),
            code,
        )
    };
    match rc {
        0 | error::MORE_DATA => Ok(props),
        c => Err(win_error(api_of(code), c, name)),
    }
}

fn api_of(code: EVENT_TRACE_CONTROL) -> &'static str {
    match code {
        EVENT_TRACE_CONTROL_STOP => "ControlTraceW(STOP)",
        EVENT_TRACE_CONTROL_FLUSH => "ControlTraceW(FLUSH)",
        _ => "ControlTraceW(QUERY)",
    }
}

/// Most sessions QueryAllTracesW is asked for (Windows' own limit is 64).
pub const MAX_SESSIONS: usize = 64;

/// The ETW backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct WindowsBackend;

impl WindowsBackend {
    pub fn new() -> WindowsBackend {
        WindowsBackend
    }
}

fn session_info(p: &properties::ParsedProperties) -> SessionInfo {
    SessionInfo {
        name: p.name.clone(),
        instance: if p.logfile.is_empty() {
            p.name.clone()
        } else {
            p.logfile.clone()
        },
        owner_pid: None,
        etwkit: p.guid == session_guid(&p.name),
        // ETW does not say whether anyone still consumes a session.
        orphan: false,
        tracing_on: true,
        enabled_events: p.enable_flags.count_ones() as usize,
        buffer_size_kb: p.buffer_kb as u64,
    }
}

impl Backend for WindowsBackend {
    fn sessions(&self) -> Result<Vec<SessionInfo>> {
        let mut bufs: Vec<PropsBuf> = (0..MAX_SESSIONS).map(|_| PropsBuf::empty()).collect();
        let mut ptrs: Vec<*mut EVENT_TRACE_PROPERTIES> =
            bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let mut count = 0u32;
        // SAFETY: an array of MAX_SESSIONS pointers to properly sized properties buffers.
        let rc = unsafe { QueryAllTracesW(ptrs.as_mut_ptr(), ptrs.len() as u32, &mut count) };
        if rc != 0 && rc != error::MORE_DATA {
            return Err(win_error("QueryAllTracesW", rc, ""));
        }
        Ok(bufs
            .iter()
            .take(count as usize)
            .map(|b| session_info(&b.parse()))
            .collect())
    }

    fn providers(&self) -> Result<Vec<ProviderInfo>> {
        providers::all()
    }

    fn start(&self, cfg: &SessionConfig) -> Result<Box<dyn LiveSession>> {
        Ok(Box::new(WindowsSession::start(cfg)?))
    }

    fn stop_by_name(&self, name: &str) -> Result<bool> {
        match control(name, EVENT_TRACE_CONTROL_STOP) {
            Ok(_) => Ok(true),
            Err(LiveError::NoSuchSession(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn writes_logfile(&self) -> bool {
        true
    }

    fn exists(&self, name: &str) -> Result<bool> {
        match control(name, EVENT_TRACE_CONTROL_QUERY) {
            Ok(_) => Ok(true),
            Err(LiveError::NoSuchSession(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Heap event types that get stacks, from the heap event ids asked for; none asked: the heap
/// provider's STACK_TRACE enable flag gives xperf's default (allocations), else no stacks.
fn heap_stacks(ids: &[u16], stack_flag: bool) -> heap::HeapStackEvents {
    let has = |t: u8| ids.contains(&(t as u16));
    if ids.is_empty() {
        return match stack_flag {
            true => heap::HeapSessionConfig::new("", &[]).stacks,
            false => heap::HeapStackEvents::default(),
        };
    }
    heap::HeapStackEvents {
        create: has(heap::EVENT_CREATE),
        alloc: has(EVENT_ALLOC),
        realloc: has(EVENT_REALLOC),
        free: has(EVENT_FREE),
    }
}

/// Kernel events that get a stack walk when the kernel provider is enabled with STACK_TRACE:
/// process and thread start, image load (classic event GUID, type).
pub fn kernel_stack_events(flags: u32) -> Vec<(Guid, u8)> {
    use crate::schema::builtin::kernel_group_guid;
    let mut v = Vec::new();
    let mut add = |group: u8, t: u8| {
        if let Some(g) = kernel_group_guid(group) {
            v.push((g, t));
        }
    };
    if flags & kernel_flags::PROCESS != 0 {
        add(0x03, 1);
    }
    if flags & kernel_flags::THREAD != 0 {
        add(0x05, 1);
    }
    if flags & kernel_flags::IMAGE_LOAD != 0 {
        add(0x14, 10);
    }
    v
}

enum Kind {
    /// An ordinary session.
    Plain,
    /// A heap session not started yet (waiting for the spawned process).
    HeapPending(heap::HeapSessionConfig),
    Heap(heap::WindowsHeapSession),
}

/// A session this process started.
pub struct WindowsSession {
    name: String,
    handle: CONTROLTRACE_HANDLE,
    props: PropsBuf,
    kind: Kind,
    /// Resolved providers and how they are enabled.
    enables: Vec<(Guid, EnableSpec)>,
    pids: Vec<u32>,
    stack_event_ids: Vec<u16>,
    /// Armed for spawn: providers are enabled once a process is added.
    armed: bool,
    stopped: bool,
    stats: consume::ConsumeStats,
}

impl WindowsSession {
    /// Starts a session for `cfg` (StartTraceW, then EnableTraceEx2 per provider).
    pub fn start(cfg: &SessionConfig) -> Result<WindowsSession> {
        if cfg.name.is_empty() || cfg.name.contains('\\') {
            return Err(LiveError::BadName(cfg.name.clone()));
        }
        let mut enables = Vec::new();
        for spec in &cfg.providers {
            enables.push((providers::resolve(&spec.provider)?, spec.clone()));
        }
        let mut s = WindowsSession {
            name: cfg.name.clone(),
            handle: CONTROLTRACE_HANDLE { Value: 0 },
            props: PropsBuf::empty(),
            kind: Kind::Plain,
            enables,
            pids: cfg.pids.clone(),
            stack_event_ids: cfg.stack_event_ids.clone(),
            armed: cfg.armed_for_spawn && cfg.pids.is_empty(),
            // Nothing to stop until StartTraceW succeeded (never stop a namesake by accident).
            stopped: true,
            stats: consume::ConsumeStats::default(),
        };
        if s.enables.iter().any(|(g, _)| *g == HEAP_PROVIDER) {
            if s.enables.len() > 1 {
                return Err(LiveError::Unsupported(
                    "the heap provider runs in a session of its own: enable other providers in another trace".into(),
                ));
            }
            let mut hc = heap::HeapSessionConfig::new(&s.name, &s.pids);
            let flag = s.enables[0].1.flags & EVENT_ENABLE_PROPERTY_STACK_TRACE != 0;
            hc.stacks = heap_stacks(&s.stack_event_ids, flag);
            hc.log_file = match &cfg.logfile {
                Some(p) => Some(std::path::absolute(p).map_err(|e| LiveError::io(p, e))?),
                None => None,
            };
            if s.armed {
                s.kind = Kind::HeapPending(hc);
            } else {
                s.kind = Kind::Heap(start_heap(&hc)?);
            }
            s.stopped = false;
            return Ok(s);
        }
        let kernel = s
            .enables
            .iter()
            .position(|(g, _)| *g == properties::SYSTEM_TRACE_CONTROL_GUID);
        let kernel_spec = kernel.map(|i| s.enables.remove(i).1);
        let kflags = kernel_spec
            .as_ref()
            .map_or(0, |k| match k.any_keyword as u32 {
                0 => kernel_flags::DEFAULT,
                f => f,
            });
        let logfile = match &cfg.logfile {
            Some(p) => Some(std::path::absolute(p).map_err(|e| LiveError::io(p, e))?),
            None => None,
        };
        let props = SessionProperties {
            name: s.name.clone(),
            logfile,
            guid: session_guid(&s.name),
            sizing: BufferSizing::for_cpus(cfg.buffer_kb, cpu_count()),
            kernel_flags: kflags,
            clock: 1,
        };
        s.props = properties::build(&props).map_err(|_| LiveError::BadName(s.name.clone()))?;
        let wname = wide(&s.name);
        // SAFETY: `props` is a properly sized, 8-aligned properties buffer with its offsets set;
        // `wname` is NUL-terminated; `handle` is a valid out pointer.
        let rc = unsafe { StartTraceW(&mut s.handle, wname.as_ptr(), s.props.as_mut_ptr()) };
        if rc != 0 {
            return Err(win_error("StartTraceW", rc, &s.name));
        }
        s.stopped = false;
        if let Some(k) = kernel_spec {
            if k.flags & EVENT_ENABLE_PROPERTY_STACK_TRACE != 0 {
                if let Err(e) = s.set_kernel_stacks(&kernel_stack_events(kflags)) {
                    let _ = s.stop_session();
                    return Err(e);
                }
            }
        }
        if !s.armed {
            if let Err(e) = s.enable_all() {
                let _ = s.stop_session();
                return Err(e);
            }
        }
        Ok(s)
    }

    /// The properties StartTraceW was given.
    pub fn properties(&self) -> &PropsBuf {
        &self.props
    }

    /// The session handle StartTraceW returned (0 for heap sessions and before start).
    pub fn handle(&self) -> u64 {
        self.handle.Value
    }

    fn set_kernel_stacks(&self, events: &[(Guid, u8)]) -> Result<()> {
        let ids: Vec<CLASSIC_EVENT_ID> = events
            .iter()
            .map(|(g, t)| CLASSIC_EVENT_ID {
                EventGuid: to_win_guid(g),
                Type: *t,
                Reserved: [0; 7],
            })
            .collect();
        // SAFETY: an array of CLASSIC_EVENT_ID whose byte length is passed.
        let rc = unsafe {
            TraceSetInformation(
                self.handle,
                TraceStackTracingInfo,
                ids.as_ptr() as *const core::ffi::c_void,
                std::mem::size_of_val(ids.as_slice()) as u32,
            )
        };
        match rc {
            0 => Ok(()),
            c => Err(win_error(
                "TraceSetInformation(TraceStackTracingInfo)",
                c,
                &self.name,
            )),
        }
    }

    fn enable_all(&mut self) -> Result<()> {
        for i in 0..self.enables.len() {
            let (guid, spec) = self.enables[i].clone();
            self.enable_one(&guid, &spec)?;
        }
        Ok(())
    }

    fn enable_one(&self, guid: &Guid, spec: &EnableSpec) -> Result<()> {
        let opts = enable::EnableOptions {
            enable_property: spec.flags,
            pids: self.pids.clone(),
            event_ids: spec.event_ids.clone(),
            stack_event_ids: self.stack_event_ids.clone(),
        };
        let mut params =
            enable::EnableParams::new(&opts).map_err(|e| LiveError::Unsupported(e.to_string()))?;
        let p = params.params();
        let g = to_win_guid(guid);
        // SAFETY: `g` and `p` (whose filter pointers point into `params`, alive across the call)
        // are valid for the call; the handle is the running session's.
        let rc = unsafe {
            EnableTraceEx2(
                self.handle,
                &g,
                EVENT_CONTROL_CODE_ENABLE_PROVIDER,
                spec.level,
                spec.any_keyword,
                spec.all_keyword,
                0,
                &p,
            )
        };
        match rc {
            0 => Ok(()),
            c => Err(win_error(&format!("EnableTraceEx2({guid})"), c, "")),
        }
    }

    fn stop_session(&mut self) -> Result<properties::ParsedProperties> {
        self.stopped = true;
        let wname = wide(&self.name);
        // SAFETY: the buffer the session was started with (room for both names); NUL-terminated name.
        let rc = unsafe {
            ControlTraceW(
                self.handle,
                wname.as_ptr(),
                self.props.as_mut_ptr(),
                EVENT_TRACE_CONTROL_STOP,
            )
        };
        match rc {
            0 | error::MORE_DATA => Ok(self.props.parse()),
            c => Err(win_error("ControlTraceW(STOP)", c, &self.name)),
        }
    }
}

fn start_heap(hc: &heap::HeapSessionConfig) -> Result<heap::WindowsHeapSession> {
    heap::WindowsHeapSession::start(hc).map_err(|e| win_error(e.api, e.code, &hc.session_name))
}

fn cpu_count() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Resumes every thread of a process started suspended.
pub fn resume_process(pid: u32) -> Result<usize> {
    // SAFETY: plain snapshot call; the handle is closed below.
    let snap = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) };
    if snap.is_null() || snap as isize == -1 {
        // SAFETY: no preconditions.
        let code = unsafe { windows_sys::Win32::Foundation::GetLastError() };
        return Err(win_error("CreateToolhelp32Snapshot", code, ""));
    }
    let mut te = THREADENTRY32 {
        dwSize: std::mem::size_of::<THREADENTRY32>() as u32,
        ..Default::default()
    };
    let mut resumed = 0;
    // SAFETY: `snap` is a valid snapshot handle, `te` has dwSize set.
    let mut ok = unsafe { Thread32First(snap, &mut te) };
    while ok != 0 {
        if te.th32OwnerProcessID == pid {
            // SAFETY: opening a thread by id; the handle is closed right after.
            unsafe {
                let t = OpenThread(THREAD_SUSPEND_RESUME, 0, te.th32ThreadID);
                if !t.is_null() {
                    if ResumeThread(t) != u32::MAX {
                        resumed += 1;
                    }
                    windows_sys::Win32::Foundation::CloseHandle(t);
                }
            }
        }
        // SAFETY: as for Thread32First.
        ok = unsafe { Thread32Next(snap, &mut te) };
    }
    // SAFETY: closing the snapshot handle.
    unsafe { windows_sys::Win32::Foundation::CloseHandle(snap) };
    Ok(resumed)
}

/// Whether a process still runs (OpenProcess + GetExitCodeProcess: STILL_ACTIVE).
pub fn process_alive(pid: u32) -> bool {
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };
    const STILL_ACTIVE: u32 = 259;
    // SAFETY: opening a process by id; the handle is closed below.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if h.is_null() {
        return false;
    }
    let mut code = 0u32;
    // SAFETY: `h` is a process handle with query rights; `code` is a valid out pointer.
    let ok = unsafe { GetExitCodeProcess(h, &mut code) };
    // SAFETY: closing the handle opened above.
    unsafe { windows_sys::Win32::Foundation::CloseHandle(h) };
    ok != 0 && code == STILL_ACTIVE
}

/// The file name of a process's image (`curl.exe`; see [`crate::live::process_name`]):
/// OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION) + QueryFullProcessImageNameW. Pid 0 is `Idle` and
/// pid 4 `System`, as the kernel's own Process events name them (neither has an image file).
pub fn process_name(pid: u32) -> Option<String> {
    use windows_sys::Win32::System::Threading::{
        OpenProcess, QueryFullProcessImageNameW, PROCESS_NAME_WIN32,
        PROCESS_QUERY_LIMITED_INFORMATION,
    };
    match pid {
        0 => return Some("Idle".into()),
        4 => return Some("System".into()),
        u32::MAX => return None,
        _ => {}
    }
    // SAFETY: opening a process by id; the handle is closed below.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if h.is_null() {
        return None;
    }
    // Paths are at most 32,767 UTF-16 units; most fit the first buffer.
    let mut path = None;
    for cap in [512u32, 32_768] {
        let mut buf = vec![0u16; cap as usize];
        let mut len = cap;
        // SAFETY: `h` is a process handle with PROCESS_QUERY_LIMITED_INFORMATION; `buf` holds `len`
        // units, and `len` is a valid in/out pointer (out: the units written, without the NUL).
        let ok = unsafe {
            QueryFullProcessImageNameW(h, PROCESS_NAME_WIN32, buf.as_mut_ptr(), &mut len)
        };
        if ok != 0 {
            buf.truncate((len as usize).min(buf.len()));
            path = Some(String::from_utf16_lossy(&buf));
            break;
        }
    }
    // SAFETY: closing the handle opened above.
    unsafe { windows_sys::Win32::Foundation::CloseHandle(h) };
    image_file_name(&path?)
}

/// The file name part of an image path (`C:\Windows\System32\curl.exe` → `curl.exe`).
fn image_file_name(path: &str) -> Option<String> {
    let name = path.rsplit(['\\', '/']).next().unwrap_or(path);
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(windows)]
fn spawn_suspended(cmd: &mut Command) -> Result<Child> {
    use std::os::windows::process::CommandExt;
    const CREATE_SUSPENDED: u32 = 0x0000_0004;
    cmd.creation_flags(CREATE_SUSPENDED)
        .spawn()
        .map_err(|e| LiveError::Other(format!("cannot start {:?}: {e}", cmd.get_program())))
}

#[cfg(not(windows))]
fn spawn_suspended(cmd: &mut Command) -> Result<Child> {
    Err(LiveError::Unsupported(format!(
        "starting {:?} suspended for an ETW session needs Windows",
        cmd.get_program()
    )))
}

impl LiveSession for WindowsSession {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&mut self, pid: u32) -> Result<()> {
        match &mut self.kind {
            Kind::HeapPending(hc) => {
                hc.pids.push(pid);
                Ok(())
            }
            Kind::Heap(_) => Err(LiveError::Unsupported(
                "a running heap session's process list is fixed when it starts (as with xperf): list the processes, or spawn, before start".into(),
            )),
            Kind::Plain => {
                self.pids.push(pid);
                self.armed = false;
                self.enable_all()
            }
        }
    }

    fn spawn(&mut self, cmd: &mut Command) -> Result<Child> {
        let mut child = spawn_suspended(cmd)?;
        let pid = child.id();
        let armed = match std::mem::replace(&mut self.kind, Kind::Plain) {
            Kind::HeapPending(mut hc) => {
                hc.pids.push(pid);
                start_heap(&hc).map(|h| self.kind = Kind::Heap(h))
            }
            other => {
                self.kind = other;
                self.add_pid(pid)
            }
        };
        if let Err(e) = armed {
            let _ = child.kill();
            return Err(e);
        }
        resume_process(pid)?;
        Ok(child)
    }

    fn process(&mut self, cb: &mut Callback<'_>, stop: &AtomicBool) -> Result<()> {
        if let Kind::HeapPending(_) = self.kind {
            return Err(LiveError::NotStarted(self.name.clone()));
        }
        // ETW's PID filter is a scope filter providers apply themselves; the same filter here keeps
        // other processes' events out whatever a provider does with it.
        let pids = self.pids.clone();
        let mut only_ours = |ev: &crate::event::EventRecord<'_>| {
            if !pids.is_empty() && ev.header_type.is_event_header() && !pids.contains(&ev.pid) {
                return std::ops::ControlFlow::Continue(());
            }
            cb(ev)
        };
        let st = consume::process_realtime(&self.name, &mut only_ours, stop)?;
        self.stats.events += st.events;
        self.stats.tdh_described += st.tdh_described;
        for (a, b) in self.stats.rt_lost.iter_mut().zip(st.rt_lost) {
            *a += b;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        match &self.kind {
            Kind::HeapPending(_) => Err(LiveError::NotStarted(self.name.clone())),
            _ => control(&self.name, EVENT_TRACE_CONTROL_FLUSH).map(|_| ()),
        }
    }

    fn stop(&mut self) -> Result<TraceSummary> {
        if self.stopped {
            return Ok(TraceSummary::default());
        }
        // `Trace` counts what it delivers; the session counts what ProcessTrace handed over.
        let mut sum = TraceSummary {
            raw_records: self.stats.events,
            ..Default::default()
        };
        let rt = self.stats.rt_lost;
        match std::mem::replace(&mut self.kind, Kind::Plain) {
            Kind::HeapPending(_) => {
                self.stopped = true;
                return Ok(sum);
            }
            Kind::Heap(h) => {
                self.stopped = true;
                let lost = h.stop().map_err(|e| win_error(e.api, e.code, &self.name))?;
                sum.events_lost = lost as u64;
                sum.lost_detail
                    .push(("EventsLost (session)".into(), lost as u64));
            }
            Kind::Plain => {
                let p = self.stop_session()?;
                sum.events_lost = p.events_lost as u64;
                sum.lost_detail = vec![
                    ("EventsLost (session)".into(), p.events_lost as u64),
                    ("RealTimeBuffersLost".into(), p.realtime_buffers_lost as u64),
                    ("LogBuffersLost".into(), p.log_buffers_lost as u64),
                ];
                if p.realtime_buffers_lost > 0 {
                    sum.issues.push(format!(
                        "{} realtime buffers were lost (their events are not counted in events_lost)",
                        p.realtime_buffers_lost
                    ));
                }
            }
        }
        sum.lost_detail
            .push(("RT_LostEvent notifications".into(), rt.iter().sum()));
        if self.stats.tdh_described > 0 {
            sum.issues.push(format!(
                "{} event layouts came from TDH (no built-in layout); MetaData records precede their events",
                self.stats.tdh_described
            ));
        }
        Ok(sum)
    }
}

impl Drop for WindowsSession {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = LiveSession::stop(self);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn image_file_names() {
        let n = |p: &str| super::image_file_name(p);
        assert_eq!(
            n(r"C:\Windows\System32\curl.exe").as_deref(),
            Some("curl.exe")
        );
        assert_eq!(n(r"\\?\C:\a b\x.exe").as_deref(), Some("x.exe"));
        assert_eq!(n("Z:/opt/t.exe").as_deref(), Some("t.exe"));
        assert_eq!(n("plain.exe").as_deref(), Some("plain.exe"));
        assert_eq!(n(r"C:\dir\"), None);
    }
}
