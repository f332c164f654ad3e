//! A Windows-style heap trace written with etwkit's ETL writer, the way a kernel-mode heap session
//! merged with a kernel image session records it: kernel Image DCStart/Load events (SYSTEM64
//! header, Image class v2 layout: ImageBase, ImageSize, ProcessId, checksum, time stamp, reserved,
//! DefaultBase, 4 reserved, FileName), HeapTraceProvider Alloc/Free (group 0x10) and kernel
//! StackWalk stacks following their events. Shared by the library and CLI tests (`#[path]`).
#![allow(dead_code)]

use std::path::Path;

use etwkit::etl::writer::{Writer, WriterOptions};

/// The traced process: above Linux's largest `pid_max` (2^22), so that no process or thread of the
/// machine running a test has it (the live-session tests over the fake ETW wait for it to end; with
/// 4242, a thread of the test itself sometimes had that id).
pub const PID: u32 = 4_194_308;
pub const TID: u32 = 77;
/// (start, size, path) of the modules loaded in [`PID`]; the kernel's in pid 0.
pub const APP: (u64, u64, &str) = (
    0x7ff6_1000_0000,
    0x10000,
    "\\Device\\HarddiskVolume3\\apps\\app.exe",
);
pub const NTDLL: (u64, u64, &str) = (
    0x7ffb_2000_0000,
    0x20_0000,
    "\\Device\\HarddiskVolume3\\Windows\\System32\\ntdll.dll",
);
/// Loaded after tracing began (an Image Load event, not the rundown).
pub const MOD: (u64, u64, &str) = (
    0x7ffb_3000_0000,
    0x8000,
    "\\Device\\HarddiskVolume3\\apps\\mod.dll",
);
pub const KERNEL: (u64, u64, &str) = (
    0xffff_f800_0000_0000,
    0x80_0000,
    "\\SystemRoot\\system32\\ntoskrnl.exe",
);
/// The stack of the leaked blocks, innermost first: a kernel frame (dropped: user frames are
/// kept), ntdll, mod.dll, app.exe, then an address outside every module.
pub const LEAK_STACK: [u64; 5] = [
    KERNEL.0 + 0x1234,
    NTDLL.0 + 0x1000,
    MOD.0 + 0x123,
    APP.0 + 0x5678,
    0x1234_5678,
];
/// Sizes of the leaked blocks (allocated under LEAK_STACK, never freed).
pub const LEAKED: [u64; 2] = [48, 80];

/// A SYSTEM_TRACE_HEADER (SYSTEM64) record.
pub fn sys_record(version: u16, hook: u16, tid: u32, pid: u32, ts: i64, payload: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&version.to_le_bytes());
    r.push(0x02);
    r.push(0xC0);
    r.extend_from_slice(&((0x20 + payload.len()) as u16).to_le_bytes());
    r.extend_from_slice(&hook.to_le_bytes());
    r.extend_from_slice(&tid.to_le_bytes());
    r.extend_from_slice(&pid.to_le_bytes());
    r.extend_from_slice(&ts.to_le_bytes());
    r.extend_from_slice(&[0u8; 8]);
    r.extend_from_slice(payload);
    r
}

fn image_payload(pid: u32, m: (u64, u64, &str)) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&m.0.to_le_bytes());
    p.extend_from_slice(&m.1.to_le_bytes());
    p.extend_from_slice(&pid.to_le_bytes());
    p.extend_from_slice(&[0u8; 12]); // checksum, time stamp, reserved
    p.extend_from_slice(&m.0.to_le_bytes()); // DefaultBase
    p.extend_from_slice(&[0u8; 16]); // Reserved1..4
    for c in m.2.encode_utf16().chain([0]) {
        p.extend_from_slice(&c.to_le_bytes());
    }
    p
}

/// HeapTraceProvider Alloc's payload: HeapHandle, AllocSize, AllocAddress, SourceId.
pub fn alloc_payload(heap: u64, size: u64, addr: u64) -> Vec<u8> {
    let mut p = Vec::new();
    for v in [heap, size, addr] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(&3u32.to_le_bytes());
    p
}

pub fn stackwalk(ts: i64, pid: u32, tid: u32, frames: &[u64]) -> Vec<u8> {
    let mut p = ts.to_le_bytes().to_vec();
    p.extend_from_slice(&pid.to_le_bytes());
    p.extend_from_slice(&tid.to_le_bytes());
    for f in frames {
        p.extend_from_slice(&f.to_le_bytes());
    }
    sys_record(2, 0x1820, tid, pid, ts, &p)
}

/// A writer for `path`, its clock, the raw time after the image rundown, and the rundown's records
/// (Image DCStart, hook 0x1403: the kernel in pid 0, app.exe and ntdll.dll in [`PID`]).
fn begin_with_rundown(path: &Path) -> (Writer, etwkit::time::Clock, i64, Vec<Vec<u8>>) {
    let start = 133_000_000_000_000_000i64;
    let w = Writer::create(path, WriterOptions::new(start)).unwrap();
    let clock = *w.clock();
    let mut ts = clock.to_raw(start + 10_000);
    let mut recs = Vec::new();
    for (pid, m) in [(0, KERNEL), (PID, APP), (PID, NTDLL)] {
        ts += 10;
        recs.push(sys_record(2, 0x1403, 0, pid, ts, &image_payload(pid, m)));
    }
    (w, clock, ts, recs)
}

/// Writes the trace to `path`: image rundown, 4 allocations (2 freed) with stacks, one Image Load
/// in between.
pub fn write(path: &Path) {
    let (mut w, clock, mut ts, mut recs) = begin_with_rundown(path);
    // Image Load (hook 0x140A).
    ts += 10;
    recs.push(sys_record(
        2,
        0x140A,
        TID,
        PID,
        ts,
        &image_payload(PID, MOD),
    ));
    let heap = 0x0000_01d0_0000_0000u64;
    let other_stack = [NTDLL.0 + 0x1000, APP.0 + 0x9999];
    // Alloc {HeapHandle, AllocSize, AllocAddress, SourceId} + stack; two are freed again.
    let allocs = [
        (0x1000u64, LEAKED[0], &LEAK_STACK[..]),
        (0x2000, 16, &other_stack[..]),
        (0x3000, LEAKED[1], &LEAK_STACK[..]),
        (0x4000, 32, &other_stack[..]),
    ];
    for (addr, size, stack) in allocs {
        ts += 100;
        let p = alloc_payload(heap, size, addr);
        recs.push(sys_record(2, 0x1021, TID, PID, ts, &p));
        recs.push(stackwalk(ts, PID, TID, stack));
    }
    // Free {HeapHandle, FreeAddress, SourceId}.
    for addr in [0x2000u64, 0x4000] {
        ts += 100;
        let mut p = Vec::new();
        for v in [heap, addr] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p.extend_from_slice(&3u32.to_le_bytes());
        recs.push(sys_record(2, 0x1024, TID, PID, ts, &p));
    }
    for r in &recs {
        w.write_raw(r, 0, &clock).unwrap();
    }
    w.finish().unwrap();
}

/// Writes `n` allocations of [`PID`] spaced `spacing` (100 ns units) apart, each with its
/// StackWalk stack ([`LEAK_STACK`]) and, for every other one, its Free right after: a trace
/// longer than any release window.
pub fn write_storm(path: &Path, n: u64, spacing: i64) {
    let start = 133_000_000_000_000_000i64;
    let mut w = Writer::create(path, WriterOptions::new(start)).unwrap();
    let clock = *w.clock();
    let heap = 0x0000_01d0_0000_0000u64;
    for i in 0..n {
        let ts = clock.to_raw(start + 10_000 + i as i64 * spacing);
        let addr = 0x10_0000 + i * 0x100;
        let p = alloc_payload(heap, 64, addr);
        w.write_raw(&sys_record(2, 0x1021, TID, PID, ts, &p), 0, &clock)
            .unwrap();
        w.write_raw(&stackwalk(ts, PID, TID, &LEAK_STACK), 0, &clock)
            .unwrap();
        if i % 2 == 0 {
            let mut p = Vec::new();
            for v in [heap, addr] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            p.extend_from_slice(&3u32.to_le_bytes());
            w.write_raw(&sys_record(2, 0x1024, TID, PID, ts + 1, &p), 0, &clock)
                .unwrap();
        }
    }
    w.finish().unwrap();
}

/// Loaded at [`MOD`]'s address once mod.dll is unloaded (the trace of [`write_reloaded`]).
pub const OTHER: (u64, u64, &str) = (
    0x7ffb_3000_0000,
    0x8000,
    "\\Device\\HarddiskVolume3\\apps\\other.dll",
);
/// The stacks of [`write_reloaded`]'s two leaks, innermost first: one in mod.dll while it is
/// loaded, one at another offset of the same range once other.dll is there.
pub const RELOADED_STACKS: [[u64; 3]; 2] = [
    [NTDLL.0 + 0x1000, MOD.0 + 0x123, APP.0 + 0x5678],
    [NTDLL.0 + 0x1000, MOD.0 + 0x456, APP.0 + 0x5678],
];

/// Writes a trace whose module range is reused: image rundown, mod.dll loaded, a leak (48 bytes)
/// under [`RELOADED_STACKS`]`[0]`, mod.dll unloaded (hook 0x1402) and other.dll loaded at its
/// address, a leak (80 bytes) under [`RELOADED_STACKS`]`[1]`.
pub fn write_reloaded(path: &Path) {
    let (mut w, clock, mut ts, mut recs) = begin_with_rundown(path);
    let heap = 0x0000_01d0_0000_0000u64;
    let leak = |recs: &mut Vec<Vec<u8>>, ts: i64, addr: u64, size: u64, stack: &[u64]| {
        recs.push(sys_record(
            2,
            0x1021,
            TID,
            PID,
            ts,
            &alloc_payload(heap, size, addr),
        ));
        recs.push(stackwalk(ts, PID, TID, stack));
    };
    // Image Load (0x140A) and UnLoad (0x1402) in PID.
    let image = |hook: u16, ts: i64, m| sys_record(2, hook, TID, PID, ts, &image_payload(PID, m));
    ts += 10;
    recs.push(image(0x140A, ts, MOD));
    ts += 100;
    leak(&mut recs, ts, 0x1000, 48, &RELOADED_STACKS[0]);
    ts += 100;
    recs.push(image(0x1402, ts, MOD));
    ts += 10;
    recs.push(image(0x140A, ts, OTHER));
    ts += 100;
    leak(&mut recs, ts, 0x2000, 80, &RELOADED_STACKS[1]);
    for r in &recs {
        w.write_raw(r, 0, &clock).unwrap();
    }
    w.finish().unwrap();
}
