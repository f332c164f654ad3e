//! The one place that maps files into memory.

use std::fs::File;
use std::io;

/// Maps a whole file read-only.
pub(crate) fn map(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only and private to this process. Another process truncating or writing
    // the file while it is mapped could change or remove the bytes under us (SIGBUS on truncation); this
    // is the documented caveat of reading traces through mmap, the same one every mmap-based reader has.
    // The reader never assumes the bytes stay valid as Rust invariants (it bounds-checks every access).
    unsafe { memmap2::Mmap::map(file) }
}

/// Reads `buf.len()` bytes at `offset` without going through the map. The buffer-chain walk reads one
/// header per buffer this way: touching the map instead would let the kernel's fault-around make
/// most of the file resident before any record is read.
pub(crate) fn read_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n = std::os::windows::fs::FileExt::seek_read(
                file,
                &mut buf[done..],
                offset + done as u64,
            )?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
    #[cfg(not(any(unix, windows)))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(buf)
    }
}

/// Tells the kernel this process is done with `[offset, offset + len)` of a read-only map, so walking
/// a large file does not keep every page resident (the pages stay in the page cache). Errors are
/// ignored: this only affects memory use. (Unix only; elsewhere the OS trims the working set.)
#[cfg(not(unix))]
pub(crate) fn release(_map: &memmap2::Mmap, _offset: usize, _len: usize) {}

/// Tells the kernel this process is done with `[offset, offset + len)` of a read-only map (see above).
#[cfg(unix)]
pub(crate) fn release(map: &memmap2::Mmap, offset: usize, len: usize) {
    let page = 4096;
    let start = offset.div_ceil(page) * page;
    let end = (offset + len) / page * page;
    if end <= start || end > map.len() {
        return;
    }
    // SAFETY: MADV_DONTNEED on a read-only private file mapping only drops our references to the
    // pages; any later access faults them back in from the file with identical contents, so no Rust
    // reference into the map ever observes different bytes.
    let _ = unsafe {
        map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
    };
}
