//! Standard output whose write errors say what was being written: `etwkit: writing standard
//! output: No space left on device (os error 28)` rather than a bare OS error a user could take
//! for one about the trace. The error keeps its kind (a closed pipe is still `BrokenPipe`, which
//! `main` treats as the reader's choice, not a failure).

use std::fmt;
use std::io::{self, IoSlice, Write};

/// A write error on standard output.
#[derive(Debug)]
struct StdoutError(io::Error);

impl fmt::Display for StdoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing standard output: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

fn named(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), StdoutError(e))
}

/// Standard output, locked, its errors named.
pub struct Stdout(io::StdoutLock<'static>);

/// Standard output for this thread's writes (locked until dropped).
pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(named)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs).map_err(named)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf).map_err(named)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(named)
    }
}
