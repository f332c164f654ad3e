//! `--symbols PATH` (default `$_NT_SYMBOL_PATH`), shared by `cpu` and `heap` (`--report`, and live
//! on Windows): the symbol path whose PDB files name the frames of Windows modules by function and
//! line.

use etwkit::decode::symbols::{SymbolPath, SymbolSummary, Symbolizer};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct SymbolArgs {
    /// Name Windows frames by function and source line from the modules' PDB files, found along
    /// this symbol path (`_NT_SYMBOL_PATH` syntax: directories, srv*CACHE*URL symbol stores and
    /// servers, cache*DIR; separated by `;`). The trace must carry each image's PDB signature
    /// (KernelTraceControl DbgID_RSDS events, as PerfView, xperf and WPR traces do).
    #[arg(long, value_name = "PATH", env = "_NT_SYMBOL_PATH")]
    symbols: Option<String>,
}

impl SymbolArgs {
    /// The symbol path given, if any; a path that cannot be read is refused.
    pub fn path(&self) -> anyhow::Result<Option<SymbolPath>> {
        match &self.symbols {
            None => Ok(None),
            Some(s) => Ok(Some(
                SymbolPath::parse(s).map_err(|e| anyhow::anyhow!("--symbols: {e}"))?,
            )),
        }
    }

    /// The symbolizer for the path given, if any.
    pub fn symbolizer(&self) -> anyhow::Result<Option<Symbolizer>> {
        Ok(self.path()?.map(Symbolizer::new))
    }
}

/// What was read and missed, one line on stderr (nothing when no symbol path was given).
pub fn warn(command: &str, summary: Option<&SymbolSummary>) {
    if let Some(s) = summary {
        eprintln!("etwkit {command}: {}", s.line());
    }
}
