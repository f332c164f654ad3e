//! Windows heap reports name frames `module+offset` from the trace's own image events.
//!
//! - A Windows-style heap trace written here with the ETL writer (Image rundown and load events,
//!   HeapTraceProvider events, StackWalk stacks): the leak report's frames are `ntdll.dll+0x1000`,
//!   `mod.dll+0x123`, `app.exe+0x5678`, and a bare address outside every module.
//! - A real PerfView trace (perfview_net.4.5.2.x64.etl: kernel Image DCStart/Load/DCEnd and
//!   KernelTraceControl ImageID rundown, StackWalk stacks): module ranges, paths and ImageID names
//!   checked against TraceEvent's dump of the same file (reference/…baseline.txt), and every
//!   kernel-mode frame of the file's stacks (StackWalk events and .NET events' stack items) falls
//!   in a module, but for the HAL's fixed region, which holds no image.

mod common;
#[path = "heap_common/windows_etl.rs"]
mod windows_etl;

use std::ops::ControlFlow;

use etwkit::analysis::heap::{
    analyze_file_modules, HeapReport, ModuleMap, ModuleNamer, StackNamer, IMAGE_CLASS,
    IMAGE_ID_CLASS, STACKWALK_GUID, STACKWALK_STACK,
};
use etwkit::etl::{EtlFile, Order};

/// The heap report (10 stacks, 8 frames each) of a trace `write` makes as `name`, its frames named
/// from the trace's image events; `modules`: how many modules those load.
fn report_of(name: &str, write: fn(&std::path::Path), modules: usize) -> HeapReport {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    write(&path);
    let f = EtlFile::open(&path).unwrap();
    let (an, images, map) = analyze_file_modules(&f);
    assert!(images.is_empty(), "no etwkit (Linux) Image events here");
    assert_eq!(map.len(), modules, "{map:?}");
    let mut namer = etwkit::live::heap::saved_trace_namer(&images, map, None).expect("a namer");
    an.report(Some(namer.as_mut()), 10, 8)
}

#[test]
fn writer_made_heap_trace_names_frames_module_plus_offset() {
    let report = report_of("win_heap_modules.etl", windows_etl::write, 4);
    print!("{}", report.to_table());
    let leak = &report.outstanding_by_stack[0];
    assert_eq!(
        (leak.count, leak.bytes, leak.pid),
        (2, windows_etl::LEAKED.iter().sum(), Some(windows_etl::PID))
    );
    let shown: Vec<String> = leak.frames.iter().map(|f| f.display()).collect();
    let (n, m, a) = (windows_etl::NTDLL.0, windows_etl::MOD.0, windows_etl::APP.0);
    let want: Vec<String> = vec![
        format!("ntdll.dll+{:#x}", windows_etl::LEAK_STACK[1] - n),
        format!("mod.dll+{:#x}", windows_etl::LEAK_STACK[2] - m),
        format!("app.exe+{:#x}", windows_etl::LEAK_STACK[3] - a),
        format!("{:#x}", windows_etl::LEAK_STACK[4]),
    ];
    assert_eq!(shown, want);
    assert!(report.to_table().contains("mod.dll+0x123"));
    // JSON carries the module and offset separately.
    let json = serde_json::to_value(&report).unwrap();
    let f0 = &json["outstanding_by_stack"][0]["frames"][1];
    assert_eq!(f0["module"], "mod.dll");
    assert_eq!(f0["offset"], 0x123);
}

#[test]
fn leaks_are_named_by_the_modules_of_their_time() {
    // Kernel, app.exe, ntdll.dll, mod.dll (unloaded) and other.dll.
    let report = report_of("win_heap_reloaded.etl", windows_etl::write_reloaded, 5);
    let shown: Vec<(u64, Vec<String>)> = report
        .outstanding_by_stack
        .iter()
        .map(|g| (g.bytes, g.frames.iter().map(|f| f.display()).collect()))
        .collect();
    let (n, m) = (windows_etl::NTDLL.0, windows_etl::MOD.0);
    let app = format!(
        "app.exe+{:#x}",
        windows_etl::RELOADED_STACKS[0][2] - windows_etl::APP.0
    );
    let ntdll = format!("ntdll.dll+{:#x}", windows_etl::RELOADED_STACKS[0][0] - n);
    assert_eq!(
        shown,
        [
            (
                80,
                vec![ntdll.clone(), "other.dll+0x456".into(), app.clone()]
            ),
            (48, vec![ntdll, "mod.dll+0x123".into(), app]),
        ],
        "the first leak was made while mod.dll was loaded at {m:#x}"
    );
}

/// `Windows Kernel/Image/DCStart PID=4; …; ImageBase=0x77710000; ImageSize=1,404,928; …;
/// FileName=C:\Windows\SysWOW64\...;` → (event, pid, base, size, field).
fn baseline_fields(line: &str, field: &str) -> Option<(String, u32, u64, u64, String)> {
    let rest = line.strip_prefix("EVENT ")?;
    let (_, rest) = rest.split_once(": ")?;
    let (event, rest) = rest.split_once(" PID=")?;
    let get = |k: &str| {
        rest.split("; ")
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
    };
    let pid: u32 = rest.split(';').next()?.parse().ok()?;
    let base = u64::from_str_radix(get("ImageBase")?.trim_start_matches("0x"), 16).ok()?;
    let size: u64 = get("ImageSize")?.replace(',', "").parse().ok()?;
    Some((event.to_string(), pid, base, size, get(field)?))
}

/// `\Device\HarddiskVolume2\Windows\x` and `\SystemRoot\x` as TraceEvent shows them (`C:\Windows\x`),
/// without the drive.
fn without_volume(path: &str) -> String {
    let p = path.to_ascii_lowercase();
    if let Some(r) = p.strip_prefix("\\systemroot\\") {
        return format!("\\windows\\{r}");
    }
    if let Some(r) = p.strip_prefix("\\device\\") {
        if let Some(i) = r.find('\\') {
            return r[i..].to_string();
        }
    }
    match p.as_bytes().get(1) {
        Some(b':') => p[2..].to_string(),
        _ => p,
    }
}

#[test]
fn perfview_trace_modules_match_traceevent() {
    let test = "perfview_trace_modules_match_traceevent";
    let Some(path) = common::sample("perfview_net.4.5.2.x64.etl", test) else {
        return;
    };
    let baseline = std::fs::read_to_string(
        path.parent()
            .unwrap()
            .join("reference/perfview_net.4.5.2.x64.baseline.txt"),
    )
    .unwrap();
    let f = EtlFile::open(&path).unwrap();
    let (mut images, mut ids, mut all) = (ModuleMap::new(), ModuleMap::new(), ModuleMap::new());
    let mut stacks: Vec<(u32, Vec<u64>)> = Vec::new();
    f.for_each(Order::Time, |r| {
        let ev = &r.event;
        if ev.provider == IMAGE_CLASS {
            images.push(ev);
        } else if ev.provider == IMAGE_ID_CLASS {
            ids.push(ev);
        }
        all.push(ev);
        if let Some(st) = ev.stack() {
            stacks.push((ev.pid, st.addresses.to_vec()));
        } else if ev.provider == STACKWALK_GUID && ev.descriptor.opcode == STACKWALK_STACK {
            let p = &ev.payload;
            let pid = u32::from_le_bytes(p[8..12].try_into().unwrap());
            let frames = p[16..]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            stacks.push((pid, frames));
        }
        ControlFlow::Continue(())
    });
    assert_eq!((images.malformed, ids.malformed), (0, 0));
    eprintln!(
        "{} image modules, {} ImageID modules, {} stacks",
        images.len(),
        ids.len(),
        stacks.len()
    );

    // Image events: TraceEvent's ranges and paths (its FileName column is cut at 20 characters).
    let mut checked = 0;
    for line in baseline.lines() {
        let Some((event, pid, base, size, file)) = baseline_fields(line, "FileName") else {
            continue;
        };
        if !matches!(
            event.as_str(),
            "Windows Kernel/Image/DCStart"
                | "Windows Kernel/Image/Load"
                | "Windows Kernel/Image/DCStop"
        ) {
            continue;
        }
        let (start, end, ours) = images
            .module_at(pid, base)
            .unwrap_or_else(|| panic!("{line}: no module at {base:#x} in pid {pid}"));
        assert_eq!((start, end), (base, base + size), "{line}");
        assert_eq!(
            images.module_at(pid, base + size - 1).map(|m| m.0),
            Some(base)
        );
        let prefix = file.trim_end_matches("...").to_ascii_lowercase();
        if prefix.starts_with("c:\\") {
            assert!(
                without_volume(ours).starts_with(&prefix[2..]),
                "{line}: our path {ours}"
            );
        }
        let (name, off) = images.lookup(pid, base + 0x10).unwrap();
        assert_eq!(off, 0x10);
        assert!(ours.ends_with(name), "{ours} / {name}");
        checked += 1;
    }
    assert!(checked >= 15, "{checked} Image events checked");

    // ImageID rundown: TraceEvent's OriginalFileName for each range.
    let mut named = 0;
    for line in baseline.lines() {
        let Some((event, pid, base, size, orig)) = baseline_fields(line, "OriginalFileName") else {
            continue;
        };
        assert_eq!(event, "KernelTraceControl/ImageID");
        assert_eq!(ids.lookup(pid, base), Some((orig.as_str(), 0)), "{line}");
        assert_eq!(
            ids.lookup(pid, base + size - 1).map(|(n, _)| n.to_string()),
            Some(orig.clone())
        );
        named += 1;
    }
    assert_eq!(named, 5, "ImageID lines in the baseline");

    // Every kernel-mode frame of the file's stacks lies in a loaded module (kernel images serve
    // every process); user-mode frames are named where their process's modules were seen.
    let mut namer = ModuleNamer::new(all);
    let (mut kernel, mut kernel_named, mut user, mut user_named, mut hal) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for (pid, frames) in &stacks {
        for fr in namer.name(*pid, frames) {
            let named = fr.module.is_some() && fr.offset.is_some();
            if fr.address >= 0xffff_ffff_ffc0_0000 {
                kernel += 1;
                hal += 1;
                assert!(!named, "{:#x}", fr.address);
            } else if fr.address >= 0xffff_8000_0000_0000 {
                kernel += 1;
                kernel_named += named as u64;
            } else {
                user += 1;
                user_named += named as u64;
            }
        }
    }
    eprintln!(
        "kernel frames {kernel_named}/{kernel} named ({hal} in the HAL's fixed region), user frames {user_named}/{user} named"
    );
    assert!(kernel > 300, "{kernel} kernel frames");
    // The HAL's fixed virtual region (the top 4 MiB) holds code but no loaded image.
    assert_eq!(
        kernel_named + hal,
        kernel,
        "kernel frames outside every module"
    );
    assert!(
        user_named > 0 && user > user_named,
        "{user_named}/{user}: user frames (JIT code has no module)"
    );
}

/// A heap trace longer than the release window: operations go out in time order with their stacks
/// while the trace is read, so what waits stays bounded by the window, not by the trace.
#[test]
fn heap_ops_are_released_in_time_order_within_the_window() {
    use etwkit::analysis::heap::{HeapOpKind, WindowsHeapEvents};
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("win_heap_storm.etl");
    // 200 allocations 100 ms apart (20 s), every other one freed: 300 operations.
    windows_etl::write_storm(&path, 200, 1_000_000);
    let file = etwkit::etl::EtlFile::open(&path).unwrap();
    let mut w = WindowsHeapEvents::new();
    let (mut ops, mut max_pending) = (Vec::new(), 0);
    file.for_each(etwkit::etl::Order::Time, |r| {
        w.push(&r.event);
        w.release(&mut |op| ops.push(op));
        max_pending = max_pending.max(w.pending());
        std::ops::ControlFlow::Continue(())
    });
    let streamed_before_end = ops.len();
    w.drain(&mut |op| ops.push(op));
    assert_eq!(ops.len(), 300);
    assert_eq!(w.unmatched_stacks, 0);
    // The default window is 3 s: about 30 allocations and 15 frees wait at a time.
    assert!(
        (40..=50).contains(&max_pending),
        "at most 3 s of operations wait, not all 300: {max_pending}"
    );
    assert!(streamed_before_end >= 250, "{streamed_before_end}");
    assert!(ops.windows(2).all(|p| p[0].timestamp <= p[1].timestamp));
    let user: Vec<u64> = windows_etl::LEAK_STACK[1..].to_vec();
    let mut allocs = 0;
    for op in &ops {
        match op.kind {
            HeapOpKind::Alloc { size, .. } => {
                allocs += 1;
                assert_eq!(size, 64);
                assert_eq!(op.stack.as_deref(), Some(&user[..]), "stack joined");
            }
            HeapOpKind::Free { .. } => assert!(op.stack.is_none()),
            _ => panic!("unexpected {:?}", op.kind),
        }
    }
    assert_eq!(allocs, 200);
    // The same operations as reading the whole file first.
    let mut all = WindowsHeapEvents::new();
    file.for_each(etwkit::etl::Order::Time, |r| {
        all.push(&r.event);
        std::ops::ControlFlow::Continue(())
    });
    let whole = all.finish();
    assert_eq!(whole.len(), ops.len());
    for (a, b) in whole.iter().zip(&ops) {
        assert_eq!(
            (a.timestamp, a.stack.as_deref()),
            (b.timestamp, b.stack.as_deref())
        );
    }
}
