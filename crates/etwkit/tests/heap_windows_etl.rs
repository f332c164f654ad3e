//! Windows heap traces through the real ETL reader: HeapTraceProvider Alloc/ReAlloc/Free records
//! (SYSTEM_TRACE_HEADER, group 0x10, 64- and 32-bit) with kernel StackWalk stacks, written as raw
//! records into an ETL file, read back and analyzed. (No sample in ../shared holds heap events, so
//! the records are built here from the heap.json / kernel-mof.json layouts.)

use std::ops::ControlFlow;

use etwkit::analysis::heap::{HeapAnalyzer, WindowsHeapEvents};
use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::etl::{EtlFile, Order};

/// A SYSTEM_TRACE_HEADER record: version, header type (0x02 System64 / 0x01 System32), marker flags,
/// size, hook id, tid, pid, raw timestamp, kernel/user time, then the payload.
fn sys_record(header_type: u8, hook: u16, tid: u32, pid: u32, ts: i64, payload: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&2u16.to_le_bytes());
    r.push(header_type);
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

fn ptrs(vals: &[u64], width: usize) -> Vec<u8> {
    vals.iter()
        .flat_map(|v| v.to_le_bytes()[..width].to_vec())
        .collect()
}

fn stackwalk(
    header_type: u8,
    ts: i64,
    pid: u32,
    tid: u32,
    frames: &[u64],
    width: usize,
) -> Vec<u8> {
    let mut p = ts.to_le_bytes().to_vec();
    p.extend_from_slice(&pid.to_le_bytes());
    p.extend_from_slice(&tid.to_le_bytes());
    p.extend_from_slice(&ptrs(frames, width));
    sys_record(header_type, 0x1820, tid, pid, ts, &p)
}

#[test]
fn windows_heap_trace_report() {
    let start = 133_000_000_000_000_000i64;
    let mut w = Writer::in_memory(WriterOptions::new(start)).unwrap();
    let clock = *w.clock();
    let (pid, tid) = (4242u32, 77u32);
    let heap = 0x0000_01d0_0000_0000u64;
    let leak_stack = [0x7ff6_1000_1234u64, 0x7ff6_1000_5678, 0x7ffb_2000_0010];
    let other_stack = [0x7ff6_1000_9999u64, 0x7ffb_2000_0010];
    let mut ts = clock.to_raw(start + 10_000);
    let mut recs: Vec<Vec<u8>> = Vec::new();
    // Alloc {HeapHandle, AllocSize, AllocAddress, SourceId} (x64), each followed by its stack.
    for (i, (addr, size)) in [(0x1000u64, 10u64), (0x2000, 20), (0x3000, 30)]
        .into_iter()
        .enumerate()
    {
        ts += 100;
        let mut p = ptrs(&[heap, size, addr], 8);
        p.extend_from_slice(&3u32.to_le_bytes());
        recs.push(sys_record(0x02, 0x1021, tid, pid, ts, &p));
        let st: &[u64] = if i == 2 { &leak_stack } else { &other_stack };
        recs.push(stackwalk(0x02, ts, pid, tid, st, 8));
    }
    // ReAlloc {HeapHandle, NewAllocAddress, OldAllocAddress, NewAllocSize, OldAllocSize, SourceId}.
    ts += 100;
    let mut p = ptrs(&[heap, 0x4000, 0x2000, 40, 20], 8);
    p.extend_from_slice(&3u32.to_le_bytes());
    recs.push(sys_record(0x02, 0x1022, tid, pid, ts, &p));
    recs.push(stackwalk(0x02, ts, pid, tid, &leak_stack, 8));
    // Free {HeapHandle, FreeAddress, SourceId}: no stack.
    ts += 100;
    let mut p = ptrs(&[heap, 0x1000], 8);
    p.extend_from_slice(&3u32.to_le_bytes());
    recs.push(sys_record(0x02, 0x1024, tid, pid, ts, &p));
    // A 32-bit (WOW64-style) producer: 4-byte pointers, x86 offsets.
    ts += 100;
    let mut p = ptrs(&[0x0050_0000, 12, 0x0060_0000], 4);
    p.extend_from_slice(&3u32.to_le_bytes());
    recs.push(sys_record(0x01, 0x1021, 78, 999, ts, &p));
    recs.push(stackwalk(0x01, ts, 999, 78, &[0x0040_1000, 0x0040_2000], 4));
    for r in &recs {
        w.write_raw(r, 0, &clock).unwrap();
    }
    let (_, bytes) = w.finish_into_inner().unwrap();

    let f = EtlFile::from_vec(bytes).unwrap();
    let mut win = WindowsHeapEvents::new();
    let summary = f.for_each(Order::Time, |r| {
        win.push(&r.event);
        ControlFlow::Continue(())
    });
    assert_eq!(summary.bad_records, 0);
    assert_eq!(
        (
            win.heap_events,
            win.stack_events,
            win.unmatched_stacks,
            win.malformed
        ),
        (6, 5, 0, 0)
    );
    let ops = win.finish();
    let mut an = HeapAnalyzer::new();
    for op in &ops {
        an.add(op);
    }
    let report = an.report(None, 10, 8);
    eprintln!("{}", report.to_table());
    assert!(report.exact);
    let p = report.processes.iter().find(|p| p.pid == pid).unwrap();
    assert_eq!(
        (p.allocs, p.alloc_bytes, p.frees, p.freed_bytes, p.reallocs),
        (4, 100, 2, 30, 1)
    );
    assert_eq!((p.outstanding, p.outstanding_bytes), (2, 70));
    let p32 = report.processes.iter().find(|p| p.pid == 999).unwrap();
    assert_eq!((p32.allocs, p32.alloc_bytes, p32.outstanding), (1, 12, 1));
    // 0x3000 (30 bytes) and 0x4000 (40 bytes) were allocated under leak_stack.
    let g = &report.outstanding_by_stack[0];
    assert_eq!((g.count, g.bytes, g.pid), (2, 70, Some(pid)));
    assert_eq!(
        g.frames.iter().map(|f| f.address).collect::<Vec<_>>(),
        leak_stack.to_vec()
    );
}
