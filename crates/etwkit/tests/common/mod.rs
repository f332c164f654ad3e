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
    std::io::Write::write_all(&mut std::io::stderr(), format!("\n*** SKIPPED {test}: {what} not found (set ETWKIT_SHARED or clone next to ../shared) ***\n\n").as_bytes()).ok();
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

/// Live tracing needs root and tracefs. Without them a live test prints a loud `SKIPPED` line and
/// returns `false`; with `ETWKIT_REQUIRE_ROOT=1` (set by `.ci/run`, which runs as root) it fails.
#[cfg(target_os = "linux")]
pub fn live_available(test: &str) -> bool {
    match etwkit::live::linux::check_available() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("ETWKIT_REQUIRE_ROOT").is_ok_and(|v| v == "1") {
                panic!("{test}: traces the real kernel and needs root with tracefs ({e}), and ETWKIT_REQUIRE_ROOT=1");
            }
            std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("\n*** SKIPPED {test}: live tracing needs root with tracefs ({e}) ***\n\n")
                    .as_bytes(),
            )
            .ok();
            false
        }
    }
}

/// xorshift64*: deterministic randomness without a dependency (the corruption tests' bit flips).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
