//! Relog throughput on one file (default: the largest sample, perfview_net.4.5.x86.etl, 26.5 MB):
//! unfiltered relog into memory and into a file (with the final sync), MB/s of input.
//! `cargo bench -p etwkit --bench relog [-- FILE]`; best of 5.

use std::path::PathBuf;
use std::time::Instant;

use etwkit::etl::relog::{relog, relog_options, relog_to_file, RelogFilter};
use etwkit::etl::writer::Writer;
use etwkit::etl::EtlFile;

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
            eprintln!("bench relog: {e} (pass a file, or run next to ../shared)");
            return;
        }
    };
    let inputs = std::slice::from_ref(&f);
    let mb = f.len() as f64 / 1e6;
    println!("file: {} ({mb:.1} MB)", path.display());
    let (t, n) = best_of(5, || {
        let w = Writer::in_memory(relog_options(inputs)).unwrap();
        let s = relog(inputs, &RelogFilter::default(), w).unwrap();
        s.written.records
    });
    println!(
        "relog into memory:  {:8.0} MB/s  ({n} records, {:.1} ms)",
        mb / t,
        t * 1e3
    );
    let out = std::env::temp_dir().join(format!("etwkit-bench-relog-{}.etl", std::process::id()));
    let (t, bytes) = best_of(5, || {
        let s =
            relog_to_file(inputs, &RelogFilter::default(), &out, relog_options(inputs)).unwrap();
        s.written.bytes
    });
    let _ = std::fs::remove_file(&out);
    println!(
        "relog into a file:  {:8.0} MB/s  ({:.1} ms, {:.1} MB written)",
        mb / t,
        t * 1e3,
        bytes as f64 / 1e6
    );
}
