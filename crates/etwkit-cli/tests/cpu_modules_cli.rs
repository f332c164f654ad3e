//! `etwkit cpu` names each sample's frames by the modules loaded when it was taken, and keeps the
//! processes a reused pid stood for apart. The trace is written here with the ETL writer (kernel
//! SYSTEM64 records: Image DCStart/Load/UnLoad/DCEnd, Process DCStart/End/Start, PerfInfo
//! SampledProfile and their StackWalk stacks), so the test runs on every OS:
//!
//! - pid 600 is `a.exe`; it loads one.dll, samples run in it, it unloads it and loads two.dll at
//!   the same address; more samples;
//! - `a.exe` ends, pid 600 becomes `b.exe`, whose image lies where `a.exe`'s did;
//! - .NET code: `App.Hot` is JIT-compiled (MethodLoadVerbose), unloaded (MethodUnloadVerbose) and
//!   `App.Other` compiled at its address; `b.exe` runs at that address too, with no method there.

#[path = "../../etwkit/tests/heap_common/windows_etl.rs"]
mod windows_etl;

use std::borrow::Cow;

use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::event::{EventDescriptor, EventRecord, HeaderType};
use serde_json::Value;
use windows_etl::sys_record;

const PID: u32 = 600;
const KERNEL: (u64, u64, &str) = (
    0xffff_f800_0000_0000,
    0x80_0000,
    r"\SystemRoot\system32\ntoskrnl.exe",
);
const A_EXE: (u64, u64, &str) = (0x40_0000, 0x1_0000, r"\Device\HarddiskVolume3\apps\a.exe");
const B_EXE: (u64, u64, &str) = (0x40_0000, 0x8000, r"\Device\HarddiskVolume3\apps\b.exe");
const ONE: (u64, u64, &str) = (
    0x7000_0000,
    0x1_0000,
    r"\Device\HarddiskVolume3\apps\one.dll",
);
const TWO: (u64, u64, &str) = (
    0x7000_0000,
    0x2_0000,
    r"\Device\HarddiskVolume3\apps\two.dll",
);

/// Image event types (hook 0x14nn) and Process event types (0x03nn).
const IMAGE_UNLOAD: u16 = 0x1402;
const IMAGE_DC_START: u16 = 0x1403;
const IMAGE_DC_END: u16 = 0x1404;
const IMAGE_LOAD: u16 = 0x140A;
const PROCESS_START: u16 = 0x0301;
const PROCESS_END: u16 = 0x0302;
const PROCESS_DC_START: u16 = 0x0303;

/// Image class v2: ImageBase, ImageSize, ProcessId, checksum, time stamp, reserved, DefaultBase,
/// 4 reserved, FileName.
fn image(hook: u16, pid: u32, m: (u64, u64, &str), ts: i64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&m.0.to_le_bytes());
    p.extend_from_slice(&m.1.to_le_bytes());
    p.extend_from_slice(&pid.to_le_bytes());
    p.extend_from_slice(&[0u8; 12]);
    p.extend_from_slice(&m.0.to_le_bytes());
    p.extend_from_slice(&[0u8; 16]);
    for c in m.2.encode_utf16().chain([0]) {
        p.extend_from_slice(&c.to_le_bytes());
    }
    sys_record(2, hook, 0, pid, ts, &p)
}

/// Process class v3: UniqueProcessKey, ProcessId, ParentId, SessionId, ExitStatus,
/// DirectoryTableBase, UserSID (none), ImageFileName, CommandLine.
fn process(hook: u16, pid: u32, name: &str, ts: i64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&0xffff_e000_0000_1000u64.to_le_bytes());
    for v in [pid, 4, 1, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(&0x1a_d000u64.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(name.as_bytes());
    p.push(0);
    for c in name.encode_utf16().chain([0]) {
        p.extend_from_slice(&c.to_le_bytes());
    }
    sys_record(3, hook, 0, pid, ts, &p)
}

/// A SampledProfile (InstructionPointer, ThreadId, Count, Reserved) and, when `stack` is not
/// empty, its StackWalk event (EventTimeStamp, StackProcess, StackThread, frames).
fn sample(tid: u32, ip: u64, stack: &[u64], ts: i64) -> Vec<Vec<u8>> {
    let mut p = ip.to_le_bytes().to_vec();
    p.extend_from_slice(&tid.to_le_bytes());
    p.extend_from_slice(&1u16.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes());
    let mut out = vec![sys_record(2, 0x0F2E, tid, PID, ts, &p)];
    if !stack.is_empty() {
        let mut s = ts.to_le_bytes().to_vec();
        s.extend_from_slice(&PID.to_le_bytes());
        s.extend_from_slice(&tid.to_le_bytes());
        for f in stack {
            s.extend_from_slice(&f.to_le_bytes());
        }
        out.push(sys_record(2, 0x1820, tid, PID, ts, &s));
    }
    out
}

/// The .NET runtime's MethodLoadVerbose (143) or MethodUnloadVerbose (144), version 1: MethodID,
/// ModuleID, MethodStartAddress, MethodSize, MethodToken, MethodFlags (2: jitted), MethodNamespace,
/// MethodName, MethodSignature, ClrInstanceID.
fn method(id: u16, start: u64, size: u32, name: &str, time: i64) -> EventRecord<'static> {
    let mut p = Vec::new();
    for v in [0x7ff0_1234u64, 0x7ff0_5678, start] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    for v in [size, 0x0600_0001, 2] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    let (ns, name) = name.rsplit_once('.').unwrap();
    for text in [ns, name, "void  ()"] {
        for c in text.encode_utf16().chain([0]) {
            p.extend_from_slice(&c.to_le_bytes());
        }
    }
    p.extend_from_slice(&9u16.to_le_bytes());
    EventRecord {
        header_type: HeaderType::EventHeader64,
        flags: 0,
        provider: etwkit::Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"),
        descriptor: EventDescriptor {
            id,
            version: 1,
            channel: 0,
            level: 5,
            opcode: if id == 143 { 37 } else { 38 },
            task: 9,
            keywords: 0x18,
        },
        hook_id: None,
        pid: PID,
        tid: 601,
        cpu: 0,
        timestamp: time,
        raw_timestamp: 0,
        kernel_time: 0,
        user_time: 0,
        activity_id: etwkit::Guid::default(),
        pointer_size: 8,
        payload: Cow::Owned(p),
        ext: Cow::Borrowed(&[]),
    }
}

/// Where `App.Hot`, then `App.Other` are JIT-compiled.
const JIT: u64 = 0x9000_0000;

fn write(path: &std::path::Path) {
    let start = 133_000_000_000_000_000i64;
    let mut w = Writer::create(path, WriterOptions::new(start)).unwrap();
    let clock = *w.clock();
    let t = |n: i64| clock.to_raw(start + 10_000 + n);
    let utc = |n: i64| start + 10_000 + n;
    let (one, two, a, b) = (ONE.0 + 0x10, TWO.0 + 0x10, A_EXE.0 + 0x20, B_EXE.0 + 0x20);
    let mut recs = vec![
        image(IMAGE_DC_START, 0, KERNEL, t(10)),
        process(PROCESS_DC_START, PID, "a.exe", t(20)),
        image(IMAGE_DC_START, PID, A_EXE, t(30)),
        image(IMAGE_LOAD, PID, ONE, t(40)),
    ];
    recs.extend(sample(601, one, &[one, a], t(100)));
    recs.extend(sample(601, one, &[one, a], t(110)));
    // In a.exe beyond where b.exe will lie.
    recs.extend(sample(601, A_EXE.0 + 0x9000, &[], t(120)));
    for r in recs.drain(..) {
        w.write_raw(&r, 0, &clock).unwrap();
    }
    w.write_event(&method(143, JIT, 0x100, "App.Hot", utc(125)))
        .unwrap();
    recs.extend(sample(601, JIT + 0x10, &[JIT + 0x10, a], t(130)));
    for r in recs.drain(..) {
        w.write_raw(&r, 0, &clock).unwrap();
    }
    w.write_event(&method(144, JIT, 0x100, "App.Hot", utc(140)))
        .unwrap();
    w.write_event(&method(143, JIT, 0x80, "App.Other", utc(145)))
        .unwrap();
    recs.extend(sample(601, JIT + 0x10, &[JIT + 0x10, a], t(150)));
    recs.push(image(IMAGE_UNLOAD, PID, ONE, t(200)));
    recs.push(image(IMAGE_LOAD, PID, TWO, t(210)));
    recs.extend(sample(601, two, &[two, a], t(250)));
    recs.push(process(PROCESS_END, PID, "a.exe", t(300)));
    recs.push(process(PROCESS_START, PID, "b.exe", t(350)));
    recs.push(image(IMAGE_LOAD, PID, B_EXE, t(400)));
    recs.extend(sample(602, b, &[b, KERNEL.0 + 5], t(500)));
    recs.extend(sample(602, A_EXE.0 + 0x9000, &[], t(510)));
    recs.extend(sample(602, JIT + 0x10, &[], t(520)));
    // The end rundown names b.exe again.
    recs.push(image(IMAGE_DC_END, PID, B_EXE, t(600)));
    for r in &recs {
        w.write_raw(r, 0, &clock).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn frames_and_processes_of_their_time() {
    let etl = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cpu_modules.etl");
    write(&etl);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(["cpu", etl.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("warning"), "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["total_samples"], 9);
    let procs: Vec<(u64, &str, u64)> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let n = p["samples"].as_u64().unwrap();
            (p["pid"].as_u64().unwrap(), p["name"].as_str().unwrap(), n)
        })
        .collect();
    assert_eq!(procs, [(600, "a.exe", 6), (600, "b.exe", 3)]);
    let stacks: Vec<(&str, u64, Vec<&str>)> = r["top_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let frames = s["frames"].as_array().unwrap();
            (
                s["process"].as_str().unwrap(),
                s["samples"].as_u64().unwrap(),
                frames.iter().map(|f| f.as_str().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(
        stacks,
        [
            ("a.exe", 2, vec!["one.dll+0x10", "a.exe+0x20"]),
            ("a.exe", 1, vec!["a.exe+0x9000"]),
            ("a.exe", 1, vec!["two.dll+0x10", "a.exe+0x20"]),
            ("a.exe", 1, vec!["App.Hot", "a.exe+0x20"]),
            ("a.exe", 1, vec!["App.Other", "a.exe+0x20"]),
            ("b.exe", 1, vec!["b.exe+0x20", "ntoskrnl.exe+0x5"]),
            ("b.exe", 1, vec!["0x409000"]),
            ("b.exe", 1, vec!["0x90000010"]),
        ]
    );
}
