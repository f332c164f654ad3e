//! A parallel walk (`EtlFile::par_render` with `Decoder::view_etl`, what `etwkit dump` runs) gives
//! the single-threaded output of the value path byte for byte: every sample, JSON and CSV, file and time order, 1 to 3 threads, with and
//! without a filter dropping records (dropped records still take part in the time merge).

mod common;

use std::ops::ControlFlow;

use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order, Record};
use etwkit::schema::Registry;
use etwkit::sink::{renderer, EventView, Format, Lines, Sink};

/// The filter: every record, or only those with an even event id / opcode mix.
fn keep(filtered: bool, r: &Record<'_>) -> bool {
    !filtered || (r.descriptor.id as u32 + r.descriptor.opcode as u32) % 2 == 0
}

fn sequential(f: &EtlFile, d: &Decoder, format: Format, order: Order, filtered: bool) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut sink = Lines::new(format, Box::new(&mut out));
        let mut props = Vec::new();
        f.for_each(order, |r| {
            if keep(filtered, r) {
                let dec = d.decode_etl(r);
                sink.event(&EventView::decoded(&r.event, Some(&dec), &mut props))
                    .unwrap();
            }
            ControlFlow::Continue(())
        });
        sink.finish().unwrap();
    }
    out
}

fn parallel(
    f: &EtlFile,
    d: &Decoder,
    format: Format,
    order: Order,
    filtered: bool,
    threads: usize,
) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let emitted;
    {
        let mut lines = Lines::new(format, Box::new(&mut out));
        // The workers take dump's path (`Render::view_etl`: per-thread layouts, the properties'
        // text written straight from the payload); the reference is the value path, one record at a time.
        let s = f.par_render(
            order,
            threads,
            || (renderer(format), etwkit::decode::Local::default()),
            |(r, local), rec, buf| {
                if !keep(filtered, rec) {
                    return false;
                }
                // The renderer's own view (CSV: the properties written with quotes doubled).
                let v = r.view_etl(d, local, rec);
                r.render(&v, buf);
                true
            },
            &mut |_| {},
            &mut |b| {
                lines.write_rendered(b).unwrap();
                ControlFlow::Continue(())
            },
        );
        lines.finish().unwrap();
        emitted = s.emitted;
    }
    (out, emitted)
}

#[test]
fn parallel_output_is_byte_identical_on_every_sample() {
    let Some(files) = common::all_samples("parallel_output_is_byte_identical_on_every_sample")
    else {
        return;
    };
    assert!(files.len() > 20);
    let mut compared = 0;
    for path in &files {
        let f = EtlFile::open(path).unwrap();
        let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
        // Every thread count on the smaller samples; two threads (the machine's cores) on the two
        // big traces, which keeps the suite's time in check.
        let threads_list: &[usize] = if f.len() < 4_000_000 {
            &[1, 2, 3]
        } else {
            &[2]
        };
        for format in [Format::Json, Format::Csv] {
            for order in [Order::File, Order::Time] {
                for filtered in [false, true] {
                    let big = f.len() >= 4_000_000;
                    // CSV: unfiltered. The two big traces: file order unfiltered JSON only, time
                    // order everything but filtered CSV (keeps the debug-build suite's time down).
                    if (filtered && format == Format::Csv)
                        || (big && order == Order::File && (filtered || format == Format::Csv))
                    {
                        continue;
                    }
                    let want = sequential(&f, &d, format, order, filtered);
                    let rows = want.iter().filter(|&&b| b == b'\n').count() as u64
                        - (format == Format::Csv) as u64;
                    for &threads in threads_list {
                        let (got, emitted) = parallel(&f, &d, format, order, filtered, threads);
                        assert!(
                            got == want,
                            "{} {format:?} {order:?} filtered={filtered} threads={threads}: \
                             {} bytes vs {} single-threaded",
                            path.display(),
                            got.len(),
                            want.len()
                        );
                        assert_eq!(emitted, rows, "{}", path.display());
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(compared >= files.len() * 4, "{compared}");
}

#[test]
fn time_order_output_is_time_sorted_where_buffers_are() {
    // A real multi-CPU trace: the time merge across per-CPU buffers gives non-decreasing timestamps.
    let Some(p) = common::sample(
        "perfview_net.4.5.x86.etl",
        "time_order_output_is_time_sorted",
    ) else {
        return;
    };
    let f = EtlFile::open(&p).unwrap();
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let (out, emitted) = parallel(&f, &d, Format::Json, Order::Time, false, 2);
    assert_eq!(emitted, 185_961);
    let mut prev = String::new();
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        let t = v["timestamp"].as_str().unwrap().to_string();
        assert!(t >= prev, "{t} after {prev}");
        prev = t;
    }
}

#[test]
fn json_written_straight_from_the_payload_equals_the_value_path() {
    let Some(files) = common::all_samples("json_written_straight_from_the_payload") else {
        return;
    };
    let (mut json, mut scratch, mut want) = (Vec::new(), String::new(), Vec::new());
    let mut direct = 0u64;
    for path in &files {
        let f = EtlFile::open(path).unwrap();
        let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
        f.for_each(Order::File, |r| {
            let slow = d.decode_etl(r);
            let fast = d.decode_etl_json(r, &mut json, &mut scratch);
            want.clear();
            if !slow.properties.is_empty() {
                slow.properties.write_json(&mut want);
            }
            assert!(
                json == want,
                "{} record at buffer {} offset {}:\n{}\n{}",
                path.display(),
                r.buffer_index,
                r.offset,
                String::from_utf8_lossy(&json),
                String::from_utf8_lossy(&want)
            );
            let names = |e: &etwkit::decode::DecodedEvent| {
                (
                    e.provider_name.clone(),
                    e.event_name.clone(),
                    e.task_name.clone(),
                    e.opcode_name.clone(),
                    e.source,
                    e.undecoded.clone(),
                    e.decode_issue.clone(),
                    e.layout_pointer_size,
                    e.ids,
                    e.dos_path.clone(),
                    e.stack.clone(),
                )
            };
            assert_eq!(names(&fast), names(&slow), "{}", path.display());
            assert!(fast.properties.is_empty());
            direct += (slow.is_decoded() && slow.decode_issue.is_none()) as u64;
            ControlFlow::Continue(())
        });
    }
    assert!(direct > 300_000, "{direct}");
}
