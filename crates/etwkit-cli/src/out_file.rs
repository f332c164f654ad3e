//! Output files written whole or not at all (`pcap -o`, `relog -o`, `heap --pprof/--flamegraph`):
//! the bytes go to a hidden `.NAME.etwkit-<pid>.partial` beside the output and are renamed over it
//! once complete, so a failed run neither leaves a truncated file that looks like a result nor
//! destroys the file it was to replace; and an output that is one of the command's inputs is
//! refused before anything is written (writing it would truncate the file being read).

use std::path::{Path, PathBuf};

/// An output being written: [`Partial::path`] until [`Partial::commit`]; removed if dropped first.
pub struct Partial {
    output: PathBuf,
    partial: PathBuf,
    committed: bool,
}

/// Whether `a` and `b` name the same file (the same path once resolved; for a file that does
/// not exist yet, the same absolute path).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

impl Partial {
    /// Starts `output`, refusing it when it is one of `inputs`.
    pub fn new(output: &Path, inputs: &[&Path]) -> anyhow::Result<Partial> {
        if inputs.iter().any(|i| same_file(i, output)) {
            anyhow::bail!("the output {} is also an input", output.display());
        }
        if output.is_dir() {
            anyhow::bail!("the output {} is a directory", output.display());
        }
        let name = output
            .file_name()
            .ok_or_else(|| anyhow::anyhow!("the output {} names no file", output.display()))?;
        let partial = output.with_file_name(format!(
            ".{}.etwkit-{}.partial",
            name.to_string_lossy(),
            std::process::id()
        ));
        Ok(Partial {
            output: output.to_path_buf(),
            partial,
            committed: false,
        })
    }

    /// Where to write until [`Partial::commit`].
    pub fn path(&self) -> &Path {
        &self.partial
    }

    /// The partial file, created (buffered).
    pub fn create(&self) -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
        std::fs::File::create(&self.partial)
            .map(std::io::BufWriter::new)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", self.output.display()))
    }

    /// Renames the complete file over the output.
    pub fn commit(mut self) -> anyhow::Result<()> {
        std::fs::rename(&self.partial, &self.output)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.output.display()))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}
