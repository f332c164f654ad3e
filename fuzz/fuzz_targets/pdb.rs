//! Fuzzes PDB reading: any file in a symbol directory, under the name and signature it claims,
//! must be read or refused with a reason, and any address of it named or not, never a panic, hang
//! or unbounded allocation. The input is a PDB file (seeds: PDBs that clang and lld wrote) whose
//! own GUID and age, where readable, are asked for, so the whole reader runs (procedures, publics,
//! line programs, inline sites), then the RVAs in its last 64 bytes are looked up.
//! Run: `cargo +nightly fuzz run pdb -- -max_len=4194304`.
#![no_main]

use etwkit::decode::symbols::{PdbId, SymbolPath, Symbolizer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The Symbolizer catches panics of the PDB readers (a damaged file is refused with the
    // reason); libFuzzer's hook would abort on those caught too. An uncaught panic still
    // unwinds into libFuzzer and is reported as a crash.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let dir = std::env::temp_dir().join(format!("etwkit-fuzz-pdb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.pdb");
    std::fs::write(&file, data).unwrap();
    let id = etwkit::decode::symbols::pdb::signature(&file)
        .unwrap_or_else(|| PdbId::new(etwkit::Guid::ZERO, 1, "f.pdb"));
    let id = PdbId::new(id.guid, id.age, "f.pdb");
    let mut s = Symbolizer::new(SymbolPath::parse(dir.to_str().unwrap()).unwrap());
    let tail = &data[data.len().saturating_sub(64)..];
    for rva in tail.chunks(4).map(|c| c.iter().fold(0u32, |a, b| (a << 8) | *b as u32)) {
        let _ = s.resolve(&id, u64::from(rva));
        let _ = s.resolve(&id, u64::from(rva & 0xF_FFFF));
    }
    let _ = s.summary().line();
});
