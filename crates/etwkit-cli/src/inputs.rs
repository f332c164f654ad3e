//! Checks on the input files a command is given, before any is read.

use std::path::PathBuf;

/// Refuses a file given twice, by the same name or another path to it (`a.etl ./a.etl`, a link):
/// its records would be read, counted and written twice. Paths that do not resolve are compared
/// as given (made absolute); their own errors come when they are opened.
pub fn refuse_repeated(files: &[PathBuf]) -> anyhow::Result<()> {
    for (i, a) in files.iter().enumerate() {
        if let Some(b) = files[..i]
            .iter()
            .find(|b| etwkit::export::staged::same_file(a, b))
        {
            let also = if a.as_os_str() == b.as_os_str() {
                String::new()
            } else {
                format!(" (as {})", a.display())
            };
            anyhow::bail!(
                "{} is given twice{also}; each input is read once, so name it once",
                b.display()
            );
        }
    }
    Ok(())
}
