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
