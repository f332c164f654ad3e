//! Bad input never panics, hangs or allocates without bound: empty files, non-ETL files, files cut at
//! any byte, random bit flips in any buffer. Whatever is still readable is read.

mod common;

use std::ops::ControlFlow;

use etwkit::etl::{stats::file_stats, EtlError, EtlFile, Order};

/// Walks a file image both ways and returns (records in file order, bad buffers + bad records).
fn walk(bytes: Vec<u8>) -> Result<(u64, u64), EtlError> {
    let f = EtlFile::from_vec(bytes)?;
    let mut n = 0u64;
    let s = f.for_each(Order::File, |_| {
        n += 1;
        ControlFlow::Continue(())
    });
    let t = f.for_each(Order::Time, |_| ControlFlow::Continue(()));
    assert_eq!(s.records, n);
    assert_eq!(
        t.records, s.records,
        "time order must see the same records as file order"
    );
    let st = file_stats(&f);
    assert_eq!(st.records, s.records);
    Ok((n, s.bad_buffers + s.bad_records))
}

#[test]
fn empty_and_foreign_files_get_clear_errors() {
    let dir = std::env::temp_dir().join(format!("etwkit-robust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.etl");
    std::fs::write(&empty, b"").unwrap();
    let e = EtlFile::open(&empty).unwrap_err();
    assert!(matches!(e, EtlError::Empty { .. }), "{e}");
    assert!(e.to_string().contains("empty file"), "{e}");

    let text = dir.join("notes.txt");
    std::fs::write(&text, "this is a text file, not a trace\n".repeat(10)).unwrap();
    let e = EtlFile::open(&text).unwrap_err();
    assert!(matches!(e, EtlError::NotEtl { .. }), "{e}");
    assert!(e.to_string().contains("no WMI_BUFFER_HEADER"), "{e}");

    let tiny = dir.join("tiny.etl");
    std::fs::write(&tiny, [0u8; 10]).unwrap();
    let e = EtlFile::open(&tiny).unwrap_err();
    assert!(
        e.to_string()
            .contains("shorter than one 72-byte buffer header"),
        "{e}"
    );

    let missing = dir.join("missing.etl");
    let e = EtlFile::open(&missing).unwrap_err();
    assert!(
        matches!(e, EtlError::Io { .. }) && e.to_string().contains("missing.etl"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn files_cut_at_every_byte_read_what_is_there() {
    for name in [
        "perfview_smallEtlFile.etl",
        "perfview_SelfDescribingSingleEvent.etl",
        "s4_OneDrive_CldFlt1.etl",
    ] {
        let Some(p) = common::sample(name, "files_cut_at_every_byte_read_what_is_there") else {
            return;
        };
        let full = std::fs::read(&p).unwrap();
        let (all, bad) = walk(full.clone()).unwrap();
        assert_eq!(bad, 0);
        let mut prev = 0;
        for cut in 0..full.len() {
            match walk(full[..cut].to_vec()) {
                Ok((n, _)) => {
                    assert!(n <= all, "{name} cut at {cut}: {n} > {all}");
                    // Cutting later never loses records that an earlier cut still had... except the
                    // last, partially present record of an uncompressed buffer may not be counted.
                    assert!(
                        n + 1 >= prev || cut == 0,
                        "{name} cut at {cut}: {n} records after {prev}"
                    );
                    prev = n;
                }
                Err(e) => assert!(
                    cut < 0x48 + 0x20 + 0x118 || matches!(e, EtlError::NotEtl { .. }),
                    "{name} cut at {cut}: {e}"
                ),
            }
        }
    }
}

#[test]
fn cut_inside_the_last_buffer_keeps_every_whole_buffer() {
    let Some(p) = common::sample(
        "tx_KernelNetwork.etl",
        "cut_inside_the_last_buffer_keeps_every_whole_buffer",
    ) else {
        return;
    };
    let full = std::fs::read(&p).unwrap();
    let f = EtlFile::open(&p).unwrap();
    // Cut in the middle of the fullest buffer's valid data.
    let k = f
        .buffers()
        .iter()
        .max_by_key(|b| b.header.valid_length())
        .unwrap()
        .clone();
    let cut_at = k.file_offset as usize + k.header.valid_length() as usize / 2;
    let mut before = 0u64;
    f.for_each(Order::File, |r| {
        if r.buffer_index < k.index {
            before += 1;
        }
        ControlFlow::Continue(())
    });
    let cut = EtlFile::from_vec(full[..cut_at].to_vec()).unwrap();
    let s = file_stats(&cut);
    // Every record of the earlier buffers, and the whole records before the cut in the cut buffer.
    assert!(s.records > before, "{} <= {before}", s.records);
    assert!(s.records < file_stats(&f).records);
    assert_eq!(s.bad_buffers, 1);
    assert!(
        s.issues
            .iter()
            .any(|i| i.reason.contains("file ends inside this buffer")),
        "{:?}",
        s.issues
    );
}

#[test]
fn random_bit_flips_never_panic() {
    let Some(files) = common::all_samples("random_bit_flips_never_panic") else {
        return;
    };
    let mut rng = common::Rng(0x9E37_79B9_7F4A_7C15);
    for p in files {
        let full = std::fs::read(&p).unwrap();
        if full.len() > 2 << 20 {
            continue; // the large files are covered by the smaller ones' structures; keeps the test quick
        }
        let f = EtlFile::open(&p).unwrap();
        let buffers: Vec<(usize, usize)> = f
            .buffers()
            .iter()
            .map(|b| {
                (
                    b.file_offset as usize,
                    (b.header.buffer_size as usize).min(full.len() - b.file_offset as usize),
                )
            })
            .collect();
        for round in 0..24 {
            let mut img = full.clone();
            // Flip bits inside one buffer: its header for the first rounds, then anywhere in it.
            let (off, len) = buffers[(rng.next() as usize) % buffers.len()];
            for _ in 0..(1 + rng.next() % 8) {
                let at = if round < 8 {
                    off + (rng.next() as usize) % 0x48.min(len)
                } else {
                    off + (rng.next() as usize) % len
                };
                img[at] ^= 1 << (rng.next() % 8);
            }
            let _ = walk(img);
        }
    }
}

#[test]
fn a_cut_buffer_claiming_gigabytes_renders_what_is_there() {
    let Some(p) = common::sample(
        "tx_KernelNetwork.etl",
        "a_cut_buffer_claiming_gigabytes_renders_what_is_there",
    ) else {
        return;
    };
    let full = std::fs::read(&p).unwrap();
    let f = EtlFile::open(&p).unwrap();
    let last = f.buffers().last().unwrap().clone();
    // The last buffer cut in the middle of its data, its header saying it is ~4 GB long (still a
    // plausible header: its data fits that size).
    let cut_at = last.file_offset as usize + last.header.valid_length() as usize / 2;
    let mut bytes = full[..cut_at].to_vec();
    let at = last.file_offset as usize;
    bytes[at..at + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let cut = EtlFile::from_vec(bytes).unwrap();
    assert_eq!(cut.buffers().len(), f.buffers().len());
    // Every record rendered on two threads, as a parallel dump does (one byte per record).
    let mut rendered = 0usize;
    let s = cut.par_render(
        Order::Time,
        2,
        || (),
        |_, _, out| {
            out.push(b'.');
            true
        },
        &mut |_| {},
        &mut |b| {
            rendered += b.len();
            ControlFlow::Continue(())
        },
    );
    assert_eq!(rendered as u64, s.emitted);
    assert_eq!(s.read.records, file_stats(&cut).records);
    assert!(s.read.records > 0);
    assert!(
        s.read
            .issues
            .iter()
            .any(|i| i.reason.contains("file ends inside this buffer")),
        "{:?}",
        s.read.issues
    );
}
