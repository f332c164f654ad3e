//! Reader throughput on one file (default: the largest sample, perfview_net.4.5.x86.etl):
//! record walk (one core), time-ordered walk, parallel stats, and JSON-lines rendering.
//! `cargo bench -p etwkit --bench read [-- FILE]`; prints MB/s per pass (best of 5).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use etwkit::decode::Decoder;
use etwkit::etl::{stats::file_stats, EtlFile, Order};
use etwkit::schema::Registry;
use etwkit::sink::{json::JsonLines, EventView, Sink};

fn best_of<F: FnMut() -> u64>(n: usize, mut f: F) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut out = 0;
    for _ in 0..n {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

fn best_of_pair<T, F: FnMut() -> T>(n: usize, mut f: F) -> (f64, T) {
    let mut best = f64::MAX;
    let mut out = None;
    for _ in 0..n {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(v);
    }
    (best, out.expect("n > 0"))
}

fn main() {
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/etl-samples/perfview_net.4.5.x86.etl")
        });
    let f = match EtlFile::open(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bench read: {e} (pass a file, or run next to ../shared)");
            return;
        }
    };
    let mb = f.len() as f64 / 1e6;
    println!("file: {} ({mb:.1} MB)", path.display());
    let (t, n) = best_of(5, || {
        let mut bytes = 0u64;
        let records = f
            .for_each(Order::File, |r| {
                bytes += r.payload.len() as u64;
                ControlFlow::Continue(())
            })
            .records;
        std::hint::black_box(bytes);
        records
    });
    println!(
        "walk, file order, 1 core:   {:8.0} MB/s  ({n} records, {:.1} ms)",
        mb / t,
        t * 1e3
    );
    let (t, _) = best_of(5, || {
        f.for_each(Order::Time, |_| ControlFlow::Continue(()))
            .records
    });
    println!(
        "walk, time order, 1 core:   {:8.0} MB/s  ({:.1} ms)",
        mb / t,
        t * 1e3
    );
    let (t, _) = best_of(5, || file_stats(&f).records);
    println!(
        "stats, parallel:            {:8.0} MB/s  ({:.1} ms)",
        mb / t,
        t * 1e3
    );
    let (t, bytes) = best_of(3, || {
        let mut counter = Counter(0);
        let mut sink = JsonLines::new(&mut counter);
        f.for_each(Order::Time, |r| {
            sink.event(&EventView::bare(&r.event)).unwrap();
            ControlFlow::Continue(())
        });
        sink.finish().unwrap();
        drop(sink);
        counter.0
    });
    println!(
        "JSON lines, time order:     {:8.0} MB/s  ({:.1} ms, {:.0} MB of JSON)",
        mb / t,
        t * 1e3,
        bytes as f64 / 1e6
    );
    // What `etwkit dump --format json` does: pre-scan for embedded metadata and stacks, then decode
    // every record and render it with its properties.
    let (t, (bytes, decoded)) = best_of_pair(3, || {
        let (decoder, _) = Decoder::for_file(Registry::with_builtins(), &f);
        let mut counter = Counter(0);
        let mut sink = JsonLines::new(&mut counter);
        let mut props = Vec::with_capacity(1024);
        let mut decoded = 0u64;
        f.for_each(Order::Time, |r| {
            let d = decoder.decode_etl(r);
            let mut v = EventView::bare(&r.event);
            v.provider_name = d.provider_name.as_deref();
            v.event_name = d.event_name.as_deref();
            v.stack = d.stack.as_ref();
            props.clear();
            if !d.properties.is_empty() {
                d.properties.write_json(&mut props);
                v.properties_json = Some(&props);
            }
            decoded += d.is_decoded() as u64;
            sink.event(&v).unwrap();
            ControlFlow::Continue(())
        });
        sink.finish().unwrap();
        drop(sink);
        (counter.0, decoded)
    });
    println!(
        "JSON lines + properties:    {:8.0} MB/s  ({:.1} ms, {:.0} MB of JSON, {decoded} decoded)",
        mb / t,
        t * 1e3,
        bytes as f64 / 1e6
    );
}

struct Counter(u64);
impl std::io::Write for Counter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
