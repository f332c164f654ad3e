//! Fuzzes the buffer chain, LZ77 and every record header parser: any byte string must give an error
//! or a walk, never a panic, hang or unbounded allocation.
//! Run: `cargo +nightly fuzz run etl_parse -- -max_len=262144` (seed the corpus with ../shared samples).
#![no_main]

use std::ops::ControlFlow;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = etwkit::etl::EtlFile::from_vec(data.to_vec()) {
        let mut n = 0u64;
        f.for_each(etwkit::etl::Order::File, |r| {
            n += r.payload.len() as u64 + r.ext_items().count() as u64;
            ControlFlow::Continue(())
        });
        f.for_each(etwkit::etl::Order::Time, |_| ControlFlow::Continue(()));
        let _ = etwkit::etl::stats::file_stats(&f);
        std::hint::black_box(n);
    }
    let mut out = Vec::new();
    let _ = etwkit::etl::compression::decompress_into(
        data,
        data.len().saturating_mul(4).min(1 << 20),
        &mut out,
    );
});
