//! Shared test support: where the sample ETL files are, and how a missing `../shared` is reported.
//!
//! Sample-based tests call [`samples_dir`]. Without `../shared` (a user's fresh clone) they print a loud
//! `SKIPPED` line and return; with `ETWKIT_REQUIRE_SHARED=1` (set by `.ci/run`) a missing `../shared`
//! fails the test instead.
#![allow(dead_code)]

use std::path::PathBuf;

/// `../shared` next to the repository root, or `$ETWKIT_SHARED`.
pub fn shared_dir() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ETWKIT_SHARED") {
        let p = PathBuf::from(p);
        return p.is_dir().then_some(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join("../shared");
    p.is_dir().then(|| p.canonicalize().unwrap_or(p))
}

fn missing(what: &str, test: &str) -> Option<PathBuf> {
    if std::env::var("ETWKIT_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
        panic!("{test}: {what} is missing but ETWKIT_REQUIRE_SHARED=1");
    }
    eprintln!("\n*** SKIPPED {test}: {what} not found (set ETWKIT_SHARED or clone next to ../shared) ***\n");
    None
}

/// The ETL samples folder, or `None` after printing that `test` did not run.
pub fn samples_dir(test: &str) -> Option<PathBuf> {
    match shared_dir() {
        Some(s) if s.join("etl-samples").is_dir() => Some(s.join("etl-samples")),
        _ => missing("../shared/etl-samples", test),
    }
}

/// One sample file by name, or `None` after printing that `test` did not run.
pub fn sample(name: &str, test: &str) -> Option<PathBuf> {
    let dir = samples_dir(test)?;
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{test}: sample {name} is not in {}",
        dir.display()
    );
    Some(p)
}

/// Every `*.etl` in the samples folder, sorted by name.
pub fn all_samples(test: &str) -> Option<Vec<PathBuf>> {
    let dir = samples_dir(test)?;
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read samples dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "etl"))
        .collect();
    v.sort();
    Some(v)
}
