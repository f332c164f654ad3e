//! Windows heap tracing sessions, the way xperf (`-heap -Pids`) and PerfView start them.
//!
//! The heap provider (HeapTraceProvider, 222962ab-6180-4b88-a825-346b75f2a24a) only runs in a session
//! of its own whose `Wnode.Guid` **is** the provider GUID. The PIDs to trace travel in an extension
//! block placed after the name strings inside the EVENT_TRACE_PROPERTIES buffer, announced by
//! `EnableFlags = 0x80FF0000 | byte offset of the block` (heap.json `tracingControl`); stacks are asked
//! for with the documented `TraceSetInformation(TraceStackTracingInfo)` and a CLASSIC_EVENT_ID list
//! (heap GUID + event type), delivered as kernel StackWalk events. Images started later are traced
//! from their first allocation through the IFEO `TracingFlags` value (bit 0 = heap) with PID 0 in the
//! session, or by starting the target CREATE_SUSPENDED, adding its PID, then resuming it.
//!
//! Everything here is ordinary code over windows-sys, type-checked on every OS; the byte layout is
//! built by pure functions tested on Linux. Nothing in the tests calls a real Windows API.

use std::path::PathBuf;

use windows_sys::Win32::Foundation::{CloseHandle, ERROR_SUCCESS, HANDLE};
use windows_sys::Win32::System::Diagnostics::Etw::{
    ControlTraceW, StartTraceW, TraceSetInformation, TraceStackTracingInfo, CLASSIC_EVENT_ID,
    CONTROLTRACE_HANDLE, EVENT_TRACE_CONTROL_STOP, EVENT_TRACE_FILE_MODE_SEQUENTIAL,
    EVENT_TRACE_PROPERTIES, EVENT_TRACE_REAL_TIME_MODE, WNODE_FLAG_TRACED_GUID,
};
use windows_sys::Win32::System::Registry::{
    RegCloseKey, RegCreateKeyExW, RegDeleteValueW, RegSetValueExW, HKEY, HKEY_LOCAL_MACHINE,
    KEY_SET_VALUE, REG_DWORD, REG_OPTION_NON_VOLATILE,
};
use windows_sys::Win32::System::Threading::{
    CreateProcessW, ResumeThread, CREATE_SUSPENDED, PROCESS_INFORMATION, STARTUPINFOW,
};

use crate::guid::Guid;
use crate::schema::builtin::heap_events::{EVENT_ALLOC, EVENT_FREE, EVENT_REALLOC, HEAP_PROVIDER};

/// Heap Create event type (heap.json opcode 32).
pub const EVENT_CREATE: u8 = 32;
/// Extension-block item types (PerfView ETWKernelControl).
pub const ETW_EXT_ENABLE_FLAGS: u16 = 1;
pub const ETW_EXT_PIDS: u16 = 2;
pub const ETW_EXT_STACKWALK_FILTER: u16 = 3;
/// `EnableFlags` marker meaning "the low 16 bits are the offset of an extension block".
pub const EXTENSION_MARKER: u32 = 0x80FF_0000;

const _: () = assert!(std::mem::size_of::<EVENT_TRACE_PROPERTIES>() == 120);
const _: () = assert!(std::mem::size_of::<CLASSIC_EVENT_ID>() == 24);

/// Which heap events get a stack (the STACK_TRACING_EVENT_ID list of StartHeapTrace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStackEvents {
    pub create: bool,
    pub alloc: bool,
    pub realloc: bool,
    pub free: bool,
}

impl HeapStackEvents {
    /// Event types, in the order xperf lists them.
    pub fn event_types(&self) -> Vec<u8> {
        let mut v = Vec::new();
        if self.create {
            v.push(EVENT_CREATE);
        }
        if self.alloc {
            v.push(EVENT_ALLOC);
        }
        if self.realloc {
            v.push(EVENT_REALLOC);
        }
        if self.free {
            v.push(EVENT_FREE);
        }
        v
    }
}

/// A heap session to start.
#[derive(Clone, Debug)]
pub struct HeapSessionConfig {
    pub session_name: String,
    /// Processes to trace; empty (or `[0]`) with IFEO TracingFlags traces images by name instead.
    pub pids: Vec<u32>,
    pub stacks: HeapStackEvents,
    /// `None`: real-time session.
    pub log_file: Option<PathBuf>,
    pub buffer_size_kb: u32,
    pub min_buffers: u32,
    pub max_buffers: u32,
}

impl HeapSessionConfig {
    pub fn new(session_name: &str, pids: &[u32]) -> HeapSessionConfig {
        HeapSessionConfig {
            session_name: session_name.to_string(),
            pids: pids.to_vec(),
            stacks: HeapStackEvents {
                alloc: true,
                realloc: true,
                ..Default::default()
            },
            log_file: None,
            // xperf's heap example: -BufferSize 1024 -MinBuffers 128 -MaxBuffers 128.
            buffer_size_kb: 1024,
            min_buffers: 128,
            max_buffers: 128,
        }
    }
}

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

fn to_win_guid(g: &Guid) -> windows_sys::core::GUID {
    let b = g.to_le_bytes();
    windows_sys::core::GUID {
        data1: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        data2: u16::from_le_bytes([b[4], b[5]]),
        data3: u16::from_le_bytes([b[6], b[7]]),
        data4: [b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]],
    }
}

/// The extension block: `DWORD (total DWORDs | items << 16)`, then per item `DWORD (item DWORDs
/// including this header | type << 16)` and its DWORD data. Here one item: the PID list.
pub fn extension_block(pids: &[u32]) -> Vec<u32> {
    let pids: Vec<u32> = if pids.is_empty() {
        vec![0]
    } else {
        pids.to_vec()
    };
    let item_len = 1 + pids.len() as u32;
    let total = 1 + item_len;
    let mut v = Vec::with_capacity(total as usize);
    v.push(total | 1 << 16);
    v.push(item_len | (ETW_EXT_PIDS as u32) << 16);
    v.extend_from_slice(&pids);
    v
}

/// The EVENT_TRACE_PROPERTIES buffer for a heap session: the struct, the logger name, the log file
/// name, then the extension block (DWORD-aligned), with offsets filled in.
pub fn build_properties(cfg: &HeapSessionConfig) -> Vec<u8> {
    let name = wide(&cfg.session_name);
    let file = cfg
        .log_file
        .as_ref()
        .map(|p| wide(&p.display().to_string()));
    let head = std::mem::size_of::<EVENT_TRACE_PROPERTIES>();
    let name_off = head;
    let file_off = name_off + name.len() * 2;
    // Room for a file name even when real-time: ControlTrace may write one back.
    let file_room = file.as_ref().map(|f| f.len() * 2).unwrap_or(1024 * 2);
    let ext_off = (file_off + file_room + 7) & !7;
    let ext = extension_block(&cfg.pids);
    let total = ext_off + ext.len() * 4;

    let mut p = EVENT_TRACE_PROPERTIES::default();
    p.Wnode.BufferSize = total as u32;
    p.Wnode.Guid = to_win_guid(&HEAP_PROVIDER);
    p.Wnode.ClientContext = 1; // QPC timestamps
    p.Wnode.Flags = WNODE_FLAG_TRACED_GUID;
    p.BufferSize = cfg.buffer_size_kb;
    p.MinimumBuffers = cfg.min_buffers;
    p.MaximumBuffers = cfg.max_buffers;
    // Realtime always (the session is processed live); the file besides when asked for.
    p.LogFileMode = if cfg.log_file.is_some() {
        EVENT_TRACE_FILE_MODE_SEQUENTIAL | EVENT_TRACE_REAL_TIME_MODE
    } else {
        EVENT_TRACE_REAL_TIME_MODE
    };
    p.EnableFlags = EXTENSION_MARKER | ext_off as u32;
    p.LoggerNameOffset = name_off as u32;
    p.LogFileNameOffset = if cfg.log_file.is_some() {
        file_off as u32
    } else {
        0
    };

    let mut buf = vec![0u8; total];
    // SAFETY: EVENT_TRACE_PROPERTIES is a plain-old-data struct; viewing its 120 bytes is sound.
    let raw = unsafe {
        std::slice::from_raw_parts(&p as *const EVENT_TRACE_PROPERTIES as *const u8, head)
    };
    buf[..head].copy_from_slice(raw);
    for (i, c) in name.iter().enumerate() {
        buf[name_off + 2 * i..name_off + 2 * i + 2].copy_from_slice(&c.to_le_bytes());
    }
    if let Some(f) = &file {
        for (i, c) in f.iter().enumerate() {
            buf[file_off + 2 * i..file_off + 2 * i + 2].copy_from_slice(&c.to_le_bytes());
        }
    }
    for (i, d) in ext.iter().enumerate() {
        buf[ext_off + 4 * i..ext_off + 4 * i + 4].copy_from_slice(&d.to_le_bytes());
    }
    buf
}

/// The CLASSIC_EVENT_ID list for `TraceSetInformation(TraceStackTracingInfo)`.
pub fn stack_tracing_ids(stacks: &HeapStackEvents) -> Vec<CLASSIC_EVENT_ID> {
    stacks
        .event_types()
        .into_iter()
        .map(|t| CLASSIC_EVENT_ID {
            EventGuid: to_win_guid(&HEAP_PROVIDER),
            Type: t,
            Reserved: [0; 7],
        })
        .collect()
}

/// Error of a Windows heap session call: the API and its Win32 error code.
#[derive(Debug, thiserror::Error)]
#[error("{api} failed with Win32 error {code}")]
pub struct WinError {
    pub api: &'static str,
    pub code: u32,
}

fn check(api: &'static str, code: u32) -> Result<(), WinError> {
    if code == ERROR_SUCCESS {
        Ok(())
    } else {
        Err(WinError { api, code })
    }
}

/// A started heap session.
pub struct WindowsHeapSession {
    handle: CONTROLTRACE_HANDLE,
    name: Vec<u16>,
    props: Vec<u8>,
}

impl WindowsHeapSession {
    /// StartTraceW with the heap properties, then the stack list (StartHeapTrace's job).
    pub fn start(cfg: &HeapSessionConfig) -> Result<WindowsHeapSession, WinError> {
        let mut props = build_properties(cfg);
        let name = wide(&cfg.session_name);
        let mut handle = CONTROLTRACE_HANDLE { Value: 0 };
        // SAFETY: `props` is a properly sized EVENT_TRACE_PROPERTIES buffer (Wnode.BufferSize = its
        // length, offsets inside it); `name` is NUL-terminated UTF-16; `handle` is a valid out pointer.
        let rc = unsafe {
            StartTraceW(
                &mut handle,
                name.as_ptr(),
                props.as_mut_ptr() as *mut EVENT_TRACE_PROPERTIES,
            )
        };
        check("StartTraceW", rc)?;
        let session = WindowsHeapSession {
            handle,
            name,
            props,
        };
        let ids = stack_tracing_ids(&cfg.stacks);
        if !ids.is_empty() {
            // SAFETY: `ids` is an array of CLASSIC_EVENT_ID whose byte length we pass.
            let rc = unsafe {
                TraceSetInformation(
                    session.handle,
                    TraceStackTracingInfo,
                    ids.as_ptr() as *const core::ffi::c_void,
                    (ids.len() * std::mem::size_of::<CLASSIC_EVENT_ID>()) as u32,
                )
            };
            if let Err(e) = check("TraceSetInformation(TraceStackTracingInfo)", rc) {
                // Do not leave a started session behind.
                let _ = session.stop();
                return Err(e);
            }
        }
        Ok(session)
    }

    /// Stops the session (ControlTraceW STOP); returns the events the session lost.
    pub fn stop(mut self) -> Result<u32, WinError> {
        // SAFETY: `props` is the buffer the session was started with (large enough for the reply);
        // `name` is NUL-terminated UTF-16.
        let rc = unsafe {
            ControlTraceW(
                self.handle,
                self.name.as_ptr(),
                self.props.as_mut_ptr() as *mut EVENT_TRACE_PROPERTIES,
                EVENT_TRACE_CONTROL_STOP,
            )
        };
        check("ControlTraceW(STOP)", rc)?;
        // EventsLost is at byte 88 of EVENT_TRACE_PROPERTIES.
        Ok(u32::from_le_bytes(
            self.props[88..92].try_into().expect("properties buffer"),
        ))
    }
}

/// The IFEO key of an image name (`notepad.exe`).
pub fn ifeo_key(image_name: &str) -> String {
    format!("Software\\Microsoft\\Windows NT\\CurrentVersion\\Image File Execution Options\\{image_name}")
}

/// Sets (or removes) IFEO `TracingFlags` = 1 for an image, so its processes start with heap
/// tracing on (used with a session whose PID list is `[0]`).
pub fn set_ifeo_tracing_flags(image_name: &str, on: bool) -> Result<(), WinError> {
    let key = wide(&ifeo_key(image_name));
    let value = wide("TracingFlags");
    let mut hkey: HKEY = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings and out pointers; the key handle is closed below.
    let rc = unsafe {
        RegCreateKeyExW(
            HKEY_LOCAL_MACHINE,
            key.as_ptr(),
            0,
            std::ptr::null(),
            REG_OPTION_NON_VOLATILE,
            KEY_SET_VALUE,
            std::ptr::null(),
            &mut hkey,
            std::ptr::null_mut(),
        )
    };
    check("RegCreateKeyExW", rc)?;
    let one: u32 = 1;
    // SAFETY: `hkey` is open with KEY_SET_VALUE; data points to 4 bytes for REG_DWORD.
    let rc = unsafe {
        if on {
            RegSetValueExW(
                hkey,
                value.as_ptr(),
                0,
                REG_DWORD,
                &one as *const u32 as *const u8,
                4,
            )
        } else {
            RegDeleteValueW(hkey, value.as_ptr())
        }
    };
    // SAFETY: closing the key opened above.
    unsafe { RegCloseKey(hkey) };
    check(
        if on {
            "RegSetValueExW(TracingFlags)"
        } else {
            "RegDeleteValueW(TracingFlags)"
        },
        rc,
    )
}

/// A process created suspended (CREATE_SUSPENDED): add its PID to a heap session, then resume.
pub struct SuspendedProcess {
    pub pid: u32,
    process: HANDLE,
    thread: HANDLE,
}

/// Starts `command_line` suspended before its first instruction.
pub fn spawn_suspended(command_line: &str) -> Result<SuspendedProcess, WinError> {
    let mut cmd = wide(command_line);
    let si = STARTUPINFOW {
        cb: std::mem::size_of::<STARTUPINFOW>() as u32,
        ..Default::default()
    };
    let mut pi = PROCESS_INFORMATION::default();
    // SAFETY: `cmd` is a mutable NUL-terminated UTF-16 buffer as CreateProcessW requires; `si` and `pi`
    // are valid; no handles are inherited.
    let ok = unsafe {
        CreateProcessW(
            std::ptr::null(),
            cmd.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            0,
            CREATE_SUSPENDED,
            std::ptr::null(),
            std::ptr::null(),
            &si,
            &mut pi,
        )
    };
    if ok == 0 {
        // SAFETY: GetLastError has no preconditions.
        let code = unsafe { windows_sys::Win32::Foundation::GetLastError() };
        return Err(WinError {
            api: "CreateProcessW",
            code,
        });
    }
    Ok(SuspendedProcess {
        pid: pi.dwProcessId,
        process: pi.hProcess,
        thread: pi.hThread,
    })
}

impl SuspendedProcess {
    /// Lets the process run; returns its process handle (owned by the caller).
    pub fn resume(self) -> Result<HANDLE, WinError> {
        // SAFETY: `thread` is the primary thread handle from CreateProcessW, closed after use.
        let r = unsafe { ResumeThread(self.thread) };
        // SAFETY: as above.
        unsafe { CloseHandle(self.thread) };
        if r == u32::MAX {
            // SAFETY: GetLastError has no preconditions.
            let code = unsafe { windows_sys::Win32::Foundation::GetLastError() };
            return Err(WinError {
                api: "ResumeThread",
                code,
            });
        }
        Ok(self.process)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_carry_heap_guid_pids_and_extension_offset() {
        let mut cfg = HeapSessionConfig::new("etwkit-heap", &[1234, 5678]);
        cfg.log_file = Some(PathBuf::from("C:\\t\\heap.etl"));
        let b = build_properties(&cfg);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u32_at(0) as usize, b.len(), "Wnode.BufferSize");
        assert_eq!(
            Guid::from_le_bytes(&b[24..40]),
            Some(HEAP_PROVIDER),
            "Wnode.Guid"
        );
        assert_eq!(u32_at(44), WNODE_FLAG_TRACED_GUID);
        assert_eq!(u32_at(48), 1024);
        assert_eq!(
            u32_at(64),
            EVENT_TRACE_FILE_MODE_SEQUENTIAL | EVENT_TRACE_REAL_TIME_MODE
        );
        let flags = u32_at(72);
        assert_eq!(flags & 0xFFFF_0000, EXTENSION_MARKER);
        let ext = (flags & 0xFFFF) as usize;
        assert_eq!(ext % 4, 0);
        // Names where the offsets say.
        assert_eq!(u32_at(116), 120, "LoggerNameOffset");
        let name: Vec<u16> = b[120..120 + 22]
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(String::from_utf16(&name).unwrap(), "etwkit-heap");
        let file_off = u32_at(112) as usize;
        assert_eq!(file_off, 120 + 24);
        // Extension: 4 DWORDs, 1 item; PIDs item of 3 DWORDs.
        assert_eq!(u32_at(ext), 4 | 1 << 16);
        assert_eq!(u32_at(ext + 4), 3 | 2 << 16);
        assert_eq!((u32_at(ext + 8), u32_at(ext + 12)), (1234, 5678));
        assert_eq!(ext + 16, b.len());
    }

    #[test]
    fn real_time_session_and_image_tracing() {
        let b = build_properties(&HeapSessionConfig::new("h", &[]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u32_at(64), EVENT_TRACE_REAL_TIME_MODE);
        assert_eq!(u32_at(112), 0, "no log file");
        let ext = (u32_at(72) & 0xFFFF) as usize;
        // PID 0: heap tracing for IFEO-flagged images.
        assert_eq!((u32_at(ext + 4), u32_at(ext + 8)), (2 | 2 << 16, 0));
        assert!(ifeo_key("app.exe").ends_with("Image File Execution Options\\app.exe"));
    }

    #[test]
    fn stack_ids_name_heap_event_types() {
        let ids = stack_tracing_ids(&HeapStackEvents {
            alloc: true,
            realloc: true,
            ..Default::default()
        });
        assert_eq!(ids.iter().map(|i| i.Type).collect::<Vec<_>>(), vec![33, 34]);
        assert_eq!(ids[0].EventGuid.data1, 0x2229_62ab);
    }
}
