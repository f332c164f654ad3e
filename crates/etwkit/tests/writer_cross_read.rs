//! Cross-reading: files etwkit wrote — relogged samples, a TraceLogging file of Linux-style events and
//! a Linux live capture (logfile mode, when root with tracefs) — are read by two independent readers
//! from PyPI (dissect.etl and etl-parser, via `tests/peers/cross_read.py`), which must report the same
//! record counts as etwkit; etl-parser's TraceLogging decoder must recover the same event names, field
//! names and values as etwkit's decoder (itself checked against the values written).
//!
//! The Python side needs a venv with both peers: `tests/peers/setup_venv.sh` makes
//! `target/peer-venv`; `ETWKIT_PEER_PYTHON` points elsewhere. Without it the test prints a loud
//! SKIPPED line, and fails when `ETWKIT_REQUIRE_PEERS=1`.

mod common;

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use etwkit::decode::{Decoder, Value as DValue};
use etwkit::etl::relog::{relog_options, relog_to_file, RelogFilter};
use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::etl::{EtlFile, Order};
use etwkit::event::Stack;
use etwkit::schema::registry::Registry;
use etwkit::tlg::{self, InType, OutType, TlInstance, TlPayload, TlSchemaBuilder};
use etwkit::Guid;
use serde_json::{json, Value};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn peer_python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ETWKIT_PEER_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let p = workspace().join("target/peer-venv/bin/python");
    p.is_file().then_some(p)
}

/// etwkit's decoded value in the plain form the Python side normalizes etl-parser's values to:
/// integers, floats, strings, booleans, GUID strings, byte lists (Binary, IPv6), SYSTEMTIME lists.
fn plain(v: &DValue) -> Value {
    match v {
        DValue::Bool(b) => json!(b),
        DValue::I64(x) => json!(x),
        DValue::U64(x) | DValue::Hex(x) | DValue::Pointer(x) => json!(x),
        DValue::F32(x) => json!(*x as f64),
        DValue::F64(x) => json!(x),
        DValue::String(x) => json!(x),
        DValue::Guid(g) => json!(g.to_string()),
        DValue::Binary(b) => json!(b),
        DValue::Ipv6(a) => json!(a.octets().to_vec()),
        // etl-parser shows IPv4 and ports as the raw little-endian integers of their bytes
        // (network order on the wire).
        DValue::Ipv4(a) => json!(u32::from_le_bytes(a.octets())),
        DValue::Port(p) => json!(p.swap_bytes()),
        DValue::Array(a) => Value::Array(a.iter().map(plain).collect()),
        DValue::SystemTime(t) => json!(t),
        other => panic!("value {other:?} not expected in this file"),
    }
}

/// The TL events of a file as etwkit's decoder sees them, in the manifest's form: keyed by their
/// "Seq" field (`by_seq`), or by their position among the file's TL events in file order.
fn etwkit_tl_events(path: &Path, by_seq: bool) -> Vec<Value> {
    let f = EtlFile::open(path).unwrap();
    let (d, _) = Decoder::for_file(Registry::new(), &f);
    let mut out = Vec::new();
    f.for_each(Order::File, |r| {
        if r.traits_provider_name().is_none() {
            return ControlFlow::Continue(());
        }
        let ev = d.decode(r);
        assert!(ev.undecoded.is_none(), "{:?}", ev.undecoded);
        assert_eq!(ev.unread_bytes, 0);
        let fields: Vec<Value> = ev
            .properties
            .iter()
            .map(|(k, v)| json!([k, plain(v)]))
            .collect();
        let seq = if by_seq {
            ev.properties.get("Seq").and_then(|v| v.as_u64()).unwrap()
        } else {
            out.len() as u64
        };
        out.push(json!({"seq": seq, "event": ev.event_name, "fields": fields}));
        ControlFlow::Continue(())
    });
    out.sort_by_key(|e| e["seq"].as_u64());
    out
}

/// A live capture on this machine (Linux, root, tracefs) of `provider` while `cmd` runs, written by the
/// session's logfile mode. `None` (after a loud SKIPPED) elsewhere.
#[cfg(target_os = "linux")]
fn live_capture(path: &Path, provider: &str, mut cmd: std::process::Command) -> Option<()> {
    use etwkit::live::{Etw, Level};
    if let Err(e) = etwkit::live::linux::tracefs::root() {
        std::io::Write::write_all(&mut std::io::stderr(), format!("\n*** SKIPPED live capture ({provider}) part of peers_read_what_etwkit_writes: {e} ***\n\n").as_bytes()).ok();
        return None;
    }
    let etw = Etw::new();
    let mut t = etw.open_trace(&format!("etwkit-writer-xread-{provider}"), Some(path), None);
    t.enable(provider, 0, Level::VERBOSE).unwrap();
    cmd.stdout(std::process::Stdio::null());
    let mut child = t.spawn(&mut cmd).unwrap();
    let stop = t.stop_handle();
    let waiter = std::thread::spawn(move || {
        child.wait().unwrap();
        // Socket events of the last moments (softirq) still arrive after the child exits.
        std::thread::sleep(std::time::Duration::from_millis(150));
        stop.stop();
    });
    t.process(|_| ControlFlow::Continue(()), None, None)
        .unwrap();
    t.stop(false).unwrap();
    waiter.join().unwrap();
    Some(())
}

#[cfg(not(target_os = "linux"))]
fn live_capture(_: &Path, _: &str, _: std::process::Command) -> Option<()> {
    None
}

fn etwkit_records(path: &Path) -> u64 {
    let f = EtlFile::open(path).unwrap();
    let s = f.for_each(Order::File, |_| ControlFlow::Continue(()));
    assert_eq!(
        s.bad_records + s.bad_buffers,
        0,
        "{}: {:?}",
        path.display(),
        s.issues
    );
    s.records
}

/// Writes Linux-style TraceLogging events (a Winsock-like and a heap-like provider) on 4 CPUs and
/// returns what each event holds, as the manifest lists it. Field types are those etl-parser's TL
/// decoder handles (it has no Hex64, FILETIME, Str16/Str8 or struct support).
fn write_tl_file(path: &Path) -> Vec<Value> {
    let create = TlSchemaBuilder::new("Etwkit-Linux-Winsock", "SocketCreate")
        .level(4)
        .keywords(0x1)
        .field("Seq", InType::U64, OutType::Default)
        .field("Socket", InType::U64, OutType::Hex)
        .field("AddressFamily", InType::U16, OutType::Default)
        .field("SocketType", InType::U16, OutType::Default)
        .field("Protocol", InType::U16, OutType::Default)
        .field("ProcessName", InType::CStr8, OutType::Utf8)
        .field("ProcessId", InType::U32, OutType::Pid)
        .build()
        .unwrap();
    let connect = TlSchemaBuilder::new("Etwkit-Linux-Winsock", "SocketConnect")
        .level(4)
        .keywords(0x2)
        .field("Seq", InType::U64, OutType::Default)
        .field("Socket", InType::U64, OutType::Hex)
        .field("Address", InType::Binary, OutType::Ipv6)
        .field("Status", InType::I32, OutType::Default)
        .field("Elapsed", InType::F64, OutType::Default)
        .field("Blocking", InType::Bool32, OutType::Default)
        .field("Peer", InType::CStr16, OutType::Default)
        .build()
        .unwrap();
    let alloc = TlSchemaBuilder::new("Etwkit-Linux-Heap", "HeapAlloc")
        .level(5)
        .field("Seq", InType::U64, OutType::Default)
        .field("Address", InType::U64, OutType::Hex)
        .field("Size", InType::U64, OutType::Default)
        .array("Frames", InType::U64, OutType::Hex)
        .field("Tag", InType::I8, OutType::Default)
        .field("Ratio", InType::F32, OutType::Default)
        .field("Id", InType::Guid, OutType::Default)
        .field("When", InType::SystemTime, OutType::Default)
        .field("Heap", InType::Hex32, OutType::Default)
        .build()
        .unwrap();
    let t0 = 133_500_000_000_000_000i64;
    let mut o = WriterOptions::new(t0);
    o.logger_name = "etwkit-linux".into();
    let mut w = Writer::create(path, o).unwrap();
    let mut expected = Vec::new();
    let mut p = TlPayload::new();
    for seq in 0..900u64 {
        let inst = TlInstance {
            pid: 4000 + (seq % 5) as u32,
            tid: 5000 + seq as u32,
            cpu: (seq % 4) as u16,
            timestamp: t0 + 1_000 * seq as i64,
            ..Default::default()
        };
        p.clear();
        let socket = 0xffff_9e00_1000_0000 + seq * 64;
        let ev = match seq % 3 {
            0 => {
                let name = format!("curl-{}", seq % 11);
                p.push_u64(seq)
                    .push_u64(socket)
                    .push_u16(if seq % 2 == 0 { 2 } else { 10 })
                    .push_u16(1)
                    .push_u16(6)
                    .push_cstr(&name)
                    .push_u32(inst.pid);
                expected.push(json!({"seq": seq, "event": "SocketCreate", "fields": [
                    ["Seq", seq], ["Socket", socket], ["AddressFamily", if seq % 2 == 0 { 2 } else { 10 }],
                    ["SocketType", 1], ["Protocol", 6], ["ProcessName", name], ["ProcessId", inst.pid]]}));
                tlg::event_record(&create, &inst, p.as_bytes().to_vec())
            }
            1 => {
                let addr: Vec<u8> = (0..16u8)
                    .map(|i| i.wrapping_mul(17).wrapping_add(seq as u8))
                    .collect();
                let status = -(seq as i32 % 7);
                let elapsed = seq as f64 / 8.0 + 0.125;
                let peer = format!("[2001:db8::{seq:x}]:443 ü");
                p.push_u64(seq)
                    .push_u64(socket)
                    .push_bytes(&addr)
                    .push_i32(status)
                    .push_f64(elapsed)
                    .push_bool32(seq % 2 == 1)
                    .push_cstr16(&peer);
                expected.push(json!({"seq": seq, "event": "SocketConnect", "fields": [
                    ["Seq", seq], ["Socket", socket], ["Address", addr], ["Status", status],
                    ["Elapsed", elapsed], ["Blocking", seq % 2 == 1], ["Peer", peer]]}));
                tlg::event_record(&connect, &inst, p.as_bytes().to_vec())
            }
            _ => {
                let frames: Vec<u64> = (0..(seq % 5))
                    .map(|i| 0x7f00_0000_0000 + seq * 0x100 + i)
                    .collect();
                let id = Guid::new(seq as u32, 0x1234, 0x5678, [1, 2, 3, 4, 5, 6, 7, seq as u8]);
                let when = [
                    2026u16,
                    11,
                    0,
                    29,
                    9,
                    (seq % 60) as u16,
                    5,
                    (seq % 1000) as u16,
                ];
                let size = 16 * (seq + 1);
                let ratio = (seq % 4) as f32 * 0.25;
                p.push_u64(seq)
                    .push_u64(0x5555_0000_0000 + seq * 32)
                    .push_u64(size)
                    .push_u64_array(&frames)
                    .push_i8(-(seq as i8 % 100))
                    .push_f32(ratio)
                    .push_guid(&id)
                    .push_systemtime(when)
                    .push_u32(0xA0 + seq as u32);
                expected.push(json!({"seq": seq, "event": "HeapAlloc", "fields": [
                    ["Seq", seq], ["Address", 0x5555_0000_0000u64 + seq * 32], ["Size", size], ["Frames", frames],
                    ["Tag", -(seq as i8 % 100)], ["Ratio", ratio], ["Id", id.to_string()], ["When", when],
                    ["Heap", 0xA0 + seq as u32]]}));
                // Heap events carry their user stack as a STACK_TRACE64 item too.
                let st = Stack {
                    match_id: 0,
                    addresses: frames.clone(),
                };
                tlg::event_record_with_ext(
                    &alloc,
                    &inst,
                    p.as_bytes().to_vec(),
                    Cow::Owned(alloc.ext_with_stack(&st)),
                )
            }
        };
        w.write_event(&ev).unwrap();
    }
    w.finish().unwrap();
    expected
}

#[test]
fn peers_read_what_etwkit_writes() {
    let test = "peers_read_what_etwkit_writes";
    let Some(dir) = common::samples_dir(test) else {
        return;
    };
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_cross_read");
    std::fs::create_dir_all(&tmp).unwrap();

    let tl = tmp.join("linux_tl.etl");
    let tl_events = write_tl_file(&tl);
    // etwkit itself reads back every TL event with its stack where one was written.
    let f = EtlFile::open(&tl).unwrap();
    let mut stacks = 0;
    f.for_each(Order::Time, |r| {
        stacks += r.stack().is_some_and(|s| !s.addresses.is_empty()) as u32;
        ControlFlow::Continue(())
    });
    // 300 HeapAlloc events; the 60 with seq ≡ 5 (mod 15) have no frames.
    assert_eq!(stacks, 240, "HeapAlloc events with a non-empty stack");

    // etwkit's decoder recovers exactly what was written; those decoded events are what etl-parser must
    // match.
    let decoded = etwkit_tl_events(&tl, true);
    assert_eq!(decoded.len(), tl_events.len());
    for (d, w) in decoded.iter().zip(&tl_events) {
        assert_eq!(d, w, "etwkit decodes what was written");
    }
    let mut files = vec![json!({"path": tl, "records": etwkit_records(&tl), "tl_events": decoded})];
    // Relogged samples: TL (AMSI), Win7 manifest events, WPP messages, a compressed PktMon capture,
    // a 32-bit logger with classic events. etl-parser reads none of the last four as originals.
    for name in [
        "etlparser_AMSITrace.etl",
        "tx_KernelNetwork.etl",
        "s4_OneDrive_CldFlt0.etl",
        "pktmonvpn_PktMon.etl",
        "syzygy_log_lib_image_data_32_v2.etl",
    ] {
        let src = EtlFile::open(dir.join(name)).unwrap();
        let out = tmp.join(format!("relog_{name}"));
        let inputs = std::slice::from_ref(&src);
        relog_to_file(inputs, &RelogFilter::default(), &out, relog_options(inputs)).unwrap();
        let n = etwkit_records(&out);
        assert_eq!(
            n,
            etwkit_records(&dir.join(name)),
            "{name}: relog keeps every record"
        );
        files.push(json!({"path": out, "records": n}));
    }
    // A Linux live capture: its TraceLogging events, matched in file order.
    let live = tmp.join("live_sched.etl");
    let _ = std::fs::remove_file(&live);
    let mut sleep = std::process::Command::new("/bin/sleep");
    sleep.arg("0.05");
    if live_capture(&live, "sched", sleep).is_some() {
        let n = etwkit_records(&live);
        assert!(n > 10, "live capture holds {n} records");
        let tl = etwkit_tl_events(&live, false);
        assert!(!tl.is_empty());
        files.push(json!({"path": live, "records": n, "tl_events": tl, "tl_match": "order"}));
    }
    let net = tmp.join("live_winsock.etl");
    let _ = std::fs::remove_file(&net);
    // The Winsock-style provider over the built-in network workload (TCP v4/v6, a refused connect,
    // resets, a UDP burst with drops).
    let workload = std::process::Command::new(env!("CARGO_BIN_EXE_etwkit-netwl"));
    if live_capture(&net, "winsock", workload).is_some() {
        let n = etwkit_records(&net);
        let tl = etwkit_tl_events(&net, false);
        assert!(
            tl.len() > 50,
            "Winsock capture holds {} TL events",
            tl.len()
        );
        files.push(json!({"path": net, "records": n, "tl_events": tl, "tl_match": "order"}));
    }
    let manifest = tmp.join("manifest.json");
    std::fs::write(
        &manifest,
        serde_json::to_vec_pretty(&json!({ "files": files })).unwrap(),
    )
    .unwrap();

    // The Python peers (a Linux venv) run in the Linux suite; the Windows build under wine checks
    // etwkit's own half above.
    if cfg!(windows) {
        std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "\n*** SKIPPED {test} (peer half): the Python peers run in the Linux suite ***\n\n"
            )
            .as_bytes(),
        )
        .ok();
        return;
    }
    let Some(py) = peer_python() else {
        if std::env::var("ETWKIT_REQUIRE_PEERS").is_ok_and(|v| v == "1") {
            panic!(
                "{test}: no peer venv but ETWKIT_REQUIRE_PEERS=1 (run tests/peers/setup_venv.sh)"
            );
        }
        std::io::Write::write_all(&mut std::io::stderr(), format!("\n*** SKIPPED {test} (peer half): no target/peer-venv (run tests/peers/setup_venv.sh) ***\n\n").as_bytes()).ok();
        return;
    };
    let script = workspace().join("tests/peers/cross_read.py");
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg(&manifest)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "cross_read.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), files.len());
    assert_eq!(lines[0]["tl_matched"], json!(900));
    for l in &lines {
        assert_eq!(l["dissect"], l["etwkit"]);
        assert_eq!(l["etl_parser_per_buffer"], l["etwkit"]);
    }
}
