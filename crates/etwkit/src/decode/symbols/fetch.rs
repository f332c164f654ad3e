//! Downloading a PDB from a symbol server (`srv*CACHE*https://...` in a symbol path) into a local
//! store, as symsrv.dll does: `GET URL/name.pdb/KEY/name.pdb`, kept as `CACHE/name.pdb/KEY/name.pdb`
//! (written beside and renamed into place, so a cut download never passes for a PDB).
//! Feature `symsrv` (the `etwkit` binary and the Python package have it).

use std::path::{Path, PathBuf};

use super::pdb::PdbId;
use super::store::store_file;

/// The local store a server's files go into when its element names none: `$XDG_CACHE_HOME` or
/// `~/.cache` (`%LOCALAPPDATA%` on Windows), `etwkit/symbols`.
pub fn default_cache() -> Option<PathBuf> {
    let base = match cfg!(windows) {
        true => std::env::var_os("LOCALAPPDATA").map(PathBuf::from),
        false => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))),
    }?;
    Some(base.join("etwkit").join("symbols"))
}

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub struct FetchError {
    pub why: String,
    /// The server could not be reached (or this build cannot ask it): asking it for other files
    /// is pointless.
    pub unreachable: bool,
}

impl FetchError {
    fn new(why: impl Into<String>, unreachable: bool) -> FetchError {
        FetchError {
            why: why.into(),
            unreachable,
        }
    }
}

/// Asks the symbol server at `url` for `id`'s PDB and keeps it in the store `cache` (else
/// [`default_cache`]): its path, `None` when the server does not have it, or why it failed.
pub fn fetch(url: &str, id: &PdbId, cache: Option<&Path>) -> Result<Option<PathBuf>, FetchError> {
    let cache = match cache.map(Path::to_path_buf).or_else(default_cache) {
        Some(c) => c,
        None => {
            return Err(FetchError::new(
                "no local store to download into (give srv*DIR*URL)",
                true,
            ))
        }
    };
    let (name, key) = (id.file_name(), id.store_key());
    let dest = store_file(&cache, name, &key);
    if dest.is_file() {
        return Ok(Some(dest));
    }
    download(&format!("{url}/{name}/{key}/{name}"), &dest)
}

#[cfg(feature = "symsrv")]
fn download(url: &str, dest: &Path) -> Result<Option<PathBuf>, FetchError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(300)))
        .user_agent(concat!("etwkit/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut resp = agent
        .get(url)
        .call()
        .map_err(|e| FetchError::new(e.to_string(), true))?;
    match resp.status().as_u16() {
        200 => {}
        404 => return Ok(None),
        s => {
            return Err(FetchError::new(
                format!("the server answered HTTP {s}"),
                false,
            ))
        }
    }
    let dir = dest
        .parent()
        .ok_or_else(|| FetchError::new("no directory to download into", true))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| FetchError::new(format!("{}: {e}", dir.display()), true))?;
    let part = dest.with_extension("pdb.part");
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&part)?;
        std::io::copy(&mut resp.body_mut().as_reader(), &mut f)?;
        f.sync_all()?;
        std::fs::rename(&part, dest)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&part);
        return Err(FetchError::new(
            format!("downloading into {}: {e}", dest.display()),
            false,
        ));
    }
    Ok(Some(dest.to_path_buf()))
}

#[cfg(not(feature = "symsrv"))]
fn download(_url: &str, _dest: &Path) -> Result<Option<PathBuf>, FetchError> {
    Err(FetchError::new(
        "not asked: this build has no symbol-server downloads (feature symsrv)",
        true,
    ))
}
