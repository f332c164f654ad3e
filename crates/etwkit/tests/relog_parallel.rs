//! Relogging one input on several threads (buffers parsed and filtered in parallel, merged in time
//! order) writes the very file a single-threaded walk writes, with the same summary: every sample
//! whose header gives a clock, with no filter and with a time window that drops records.

mod common;

use std::path::{Path, PathBuf};

use etwkit::etl::relog::{relog_options, relog_to_file_with, RelogFilter};
use etwkit::etl::EtlFile;
use etwkit::filter::EventFilter;

fn relog(f: &EtlFile, filter: &RelogFilter, threads: usize, out: &Path) -> (Vec<u8>, String) {
    let s = relog_to_file_with(
        std::slice::from_ref(f),
        filter,
        out,
        relog_options(std::slice::from_ref(f)),
        threads,
    )
    .unwrap();
    let bytes = std::fs::read(out).unwrap();
    std::fs::remove_file(out).unwrap();
    // The summary names the input, not the output: comparable as text.
    (bytes, serde_json::to_string(&s).unwrap())
}

#[test]
fn parallel_relog_writes_the_single_threaded_file() {
    let Some(files) = common::all_samples("parallel_relog_writes_the_single_threaded_file") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("etwkit-relog-parallel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out: PathBuf = dir.join("out.etl");
    let (mut compared, mut dropped_some) = (0, 0);
    for path in &files {
        let f = EtlFile::open(path).unwrap();
        if f.header_error().is_some() {
            continue;
        }
        let (start, end) = (f.header().start_time, f.header().end_time);
        let window = EventFilter {
            begin: Some(start + (end - start) / 3),
            end: Some(start + 2 * (end - start) / 3),
            ..Default::default()
        };
        for filter in [RelogFilter::default(), RelogFilter::new(window, Vec::new())] {
            let (want, want_summary) = relog(&f, &filter, 1, &out);
            for threads in [2, 3] {
                let (got, summary) = relog(&f, &filter, threads, &out);
                assert!(
                    got == want,
                    "{} threads={threads} filter={filter:?}: {} bytes vs {} single-threaded",
                    path.display(),
                    got.len(),
                    want.len()
                );
                assert_eq!(summary, want_summary, "{}", path.display());
                compared += 1;
            }
            let kept: u64 = serde_json::from_str::<serde_json::Value>(&want_summary).unwrap()
                ["inputs"][0]["kept"]
                .as_u64()
                .unwrap();
            if !filter.is_empty()
                && kept + 1
                    < f.for_each(etwkit::etl::Order::File, |_| {
                        std::ops::ControlFlow::Continue(())
                    })
                    .records
            {
                dropped_some += 1;
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(compared >= 40, "{compared}");
    assert!(
        dropped_some >= 10,
        "the time window dropped records in {dropped_some} files"
    );
}
