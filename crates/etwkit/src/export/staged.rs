//! A dataset directory ([`Staged`]) or an output file ([`StagedFile`]) written whole or not at
//! all: the files go to a hidden `.NAME.etwkit-<pid>.partial` beside the destination (same
//! parent, so the same file system) and are moved into place once every file is complete. An export that fails (a write error, a panic, a caller that gives
//! up) removes its staging directory and leaves the destination as it was; a destination that
//! holds an earlier dataset is replaced only when asked, and only after the new one is complete.

use std::io;
use std::path::{Path, PathBuf};

/// What to do with a destination directory that already holds files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Refuse it ([`StageError::NotEmpty`]).
    Refuse,
    /// Replace it once the new dataset is complete, if it holds a dataset (`marker`, a file of
    /// every dataset, is in it); any other directory is refused ([`StageError::NotADataset`]).
    Replace,
}

/// Why a destination cannot take a dataset.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{} is a file, not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("{} already holds files", path.display())]
    NotEmpty { path: PathBuf },
    #[error("{} holds files but no {marker}: not a dataset, so it is not replaced", path.display())]
    NotADataset { path: PathBuf, marker: String },
    #[error("{} holds {}, which no export writes: it is not replaced", path.display(), foreign.display())]
    Foreign { path: PathBuf, foreign: PathBuf },
    #[error("the output {} is also an input", path.display())]
    IsInput { path: PathBuf },
    #[error("the output {} is a directory", path.display())]
    IsDirectory { path: PathBuf },
    /// The directory the output goes in takes no file (read-only, not a directory, missing): said
    /// of the output as the user named it and of that directory, never of the hidden staging name.
    #[error("cannot write {}: cannot create a file in {}: {source}", path.display(), dir.display())]
    Create {
        path: PathBuf,
        dir: PathBuf,
        source: io::Error,
    },
}

/// [`StageError::Create`] for the output `path` in `dir`.
fn create_error<'a>(path: &'a Path, dir: &'a Path) -> impl FnOnce(io::Error) -> StageError + 'a {
    move |source| StageError::Create {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        source,
    }
}

/// The directory `dest` goes in (`.` for a bare name).
fn parent_of(dest: &Path) -> &Path {
    match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What the destination held when the staging directory was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    Nothing,
    EmptyDirectory,
    Dataset,
}

/// A staging directory for `dest`: write into [`Staged::path`], then [`Staged::commit`]. Dropped
/// uncommitted, it removes the staging directory (only call sites that no longer write into it
/// may drop it).
#[derive(Debug)]
pub struct Staged {
    dest: PathBuf,
    staging: PathBuf,
    before: Before,
    committed: bool,
}

impl Staged {
    /// Checks `dest` (see [`Existing`]) and makes the staging directory beside it; `marker` is the
    /// file every dataset holds.
    pub fn new(dest: &Path, existing: Existing, marker: &str) -> Result<Staged, StageError> {
        let given = dest;
        // The destination as a path whose parent and name are known: `-o .` or `-o out/..` name
        // a directory too, and a symbolic link to a dataset is replaced where it points.
        let dest = match std::fs::symlink_metadata(dest) {
            Ok(_) => std::fs::canonicalize(dest).map_err(io_error(dest))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = parent_of(dest);
                std::fs::create_dir_all(parent).map_err(create_error(given, parent))?;
                let parent = std::fs::canonicalize(parent).map_err(io_error(parent))?;
                match dest.file_name() {
                    Some(name) => parent.join(name),
                    None => parent,
                }
            }
            // A parent that is a file (ENOTDIR), or one that cannot be searched.
            Err(e) => return Err(create_error(given, parent_of(given))(e)),
        };
        let before = match std::fs::metadata(&dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Before::Nothing,
            Err(e) => return Err(io_error(&dest)(e)),
            Ok(m) if !m.is_dir() => return Err(StageError::NotADirectory { path: dest }),
            Ok(_) => {
                let empty = std::fs::read_dir(&dest)
                    .map_err(io_error(&dest))?
                    .next()
                    .is_none();
                match (empty, existing) {
                    (true, _) => Before::EmptyDirectory,
                    (false, Existing::Refuse) => return Err(StageError::NotEmpty { path: dest }),
                    (false, Existing::Replace) if dest.join(marker).is_file() => {
                        // Replacing removes everything in it: only a dataset's own files may be.
                        if let Some(foreign) = foreign_entry(&dest, marker)? {
                            return Err(StageError::Foreign {
                                path: dest,
                                foreign,
                            });
                        }
                        Before::Dataset
                    }
                    (false, Existing::Replace) => {
                        return Err(StageError::NotADataset {
                            path: dest,
                            marker: marker.to_string(),
                        })
                    }
                }
            }
        };
        let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Err(StageError::NotADirectory { path: dest });
        };
        let staging = staging_path(parent, name);
        let _ = std::fs::remove_dir_all(&staging);
        remove_leftovers(parent, name);
        std::fs::create_dir(&staging).map_err(create_error(given, parent_of(given)))?;
        Ok(Staged {
            dest,
            staging,
            before,
            committed: false,
        })
    }

    /// Where the files go until [`Staged::commit`].
    pub fn path(&self) -> &Path {
        &self.staging
    }

    /// `p` (a path in the staging directory) as it will be named once committed: what errors
    /// show, as the hidden staging directory is gone by the time anyone reads them.
    pub fn shown(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(&self.staging) {
            Ok(rest) => self.dest.join(rest),
            Err(_) => p.to_path_buf(),
        }
    }

    /// Moves the dataset into place: the destination now holds the new dataset only (an earlier
    /// one is removed once the new one took its place). A destination directory that existed is
    /// kept (its entries are moved, not the directory: a shell whose working directory it is
    /// still sees it, its owner and mode stay); one that did not exist is the staging directory,
    /// renamed.
    pub fn commit(mut self) -> Result<(), StageError> {
        match self.before {
            Before::Nothing => {
                std::fs::rename(&self.staging, &self.dest).map_err(io_error(&self.dest))?
            }
            Before::EmptyDirectory => {
                if let Err((e, moved)) = move_entries(&self.staging, &self.dest) {
                    let _ = move_back(&moved, &self.dest, &self.staging);
                    return Err(e);
                }
                let _ = std::fs::remove_dir(&self.staging);
            }
            Before::Dataset => {
                let old = self.staging.with_extension("replaced");
                let _ = std::fs::remove_dir_all(&old);
                std::fs::create_dir(&old).map_err(io_error(&old))?;
                if let Err((e, moved)) = move_entries(&self.dest, &old) {
                    let _ = move_back(&moved, &old, &self.dest);
                    let _ = std::fs::remove_dir(&old);
                    return Err(e);
                }
                if let Err((e, moved)) = move_entries(&self.staging, &self.dest) {
                    // Put the earlier dataset back.
                    let _ = move_back(&moved, &self.dest, &self.staging);
                    if let Ok(names) = entries(&old) {
                        let _ = move_back(&names, &old, &self.dest);
                    }
                    let _ = std::fs::remove_dir(&old);
                    return Err(e);
                }
                // The new dataset is in place; what cannot be removed of the old stays hidden
                // beside it (only space is lost).
                let _ = std::fs::remove_dir_all(&old);
                let _ = std::fs::remove_dir(&self.staging);
            }
        }
        self.committed = true;
        Ok(())
    }
}

/// The first entry of the dataset `dir` that an export does not write: anything but `marker`
/// and directories of files with `marker`'s extension (a user's trace kept beside the tables, a
/// notes file), which replacing the dataset would delete.
fn foreign_entry(dir: &Path, marker: &str) -> Result<Option<PathBuf>, StageError> {
    let ext = Path::new(marker).extension();
    for e in std::fs::read_dir(dir).map_err(io_error(dir))? {
        let e = e.map_err(io_error(dir))?;
        let p = e.path();
        let t = e.file_type().map_err(io_error(&p))?;
        if t.is_file() && e.file_name() == marker {
            continue;
        }
        if !t.is_dir() {
            return Ok(Some(p));
        }
        for f in std::fs::read_dir(&p).map_err(io_error(&p))? {
            let f = f.map_err(io_error(&p))?;
            let fp = f.path();
            let ft = f.file_type().map_err(io_error(&fp))?;
            if !ft.is_file() || fp.extension() != ext {
                return Ok(Some(fp));
            }
        }
    }
    Ok(None)
}

/// Where this process stages `parent/name`: `.NAME.etwkit-<pid>.partial` beside it.
fn staging_path(parent: &Path, name: &std::ffi::OsStr) -> PathBuf {
    parent.join(format!(
        ".{}.etwkit-{}.partial",
        name.to_string_lossy(),
        std::process::id()
    ))
}

/// Removes what runs staging `parent/name` left whose process is gone (staging directories and
/// files, replaced datasets): a killed run leaves its own behind. (This process's own name is
/// the caller's to clear.)
fn remove_leftovers(parent: &Path, name: &std::ffi::OsStr) {
    let prefix = format!(".{}.etwkit-", name.to_string_lossy());
    let Ok(dir) = std::fs::read_dir(parent) else {
        return;
    };
    for e in dir.flatten() {
        let n = e.file_name();
        let Some(rest) = n.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some((pid, "partial" | "replaced")) = rest.split_once('.') else {
            continue;
        };
        if pid.parse::<u32>().is_ok_and(|p| !process_alive(p)) {
            let _ = match e.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(e.path()),
                _ => std::fs::remove_file(e.path()),
            };
        }
    }
}

/// Whether process `pid` runs (Linux: it has a /proc entry); elsewhere assumed to (its
/// leftovers stay).
fn process_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

/// The names in `dir`.
fn entries(dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect()
}

/// Renames every entry of `from` into `to`; on failure, the error and the names already moved.
fn move_entries(from: &Path, to: &Path) -> Result<(), (StageError, Vec<std::ffi::OsString>)> {
    let names = entries(from).map_err(|e| (io_error(from)(e), Vec::new()))?;
    for (i, n) in names.iter().enumerate() {
        if let Err(e) = std::fs::rename(from.join(n), to.join(n)) {
            return Err((io_error(&to.join(n))(e), names[..i].to_vec()));
        }
    }
    Ok(())
}

/// Renames `names` from `from` back into `to` (best effort, undoing [`move_entries`]).
fn move_back(names: &[std::ffi::OsString], from: &Path, to: &Path) -> io::Result<()> {
    for n in names {
        std::fs::rename(from.join(n), to.join(n))?;
    }
    Ok(())
}

/// Whether `a` and `b` name the same file (the same path once resolved; for a file that does not
/// exist yet, the same absolute path).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

/// One output file written whole or not at all, as [`Staged`] writes a directory: write
/// [`StagedFile::path`] (or [`StagedFile::create`]), then [`StagedFile::commit`] renames it over
/// the output; dropped first, it is removed. An output that is one of the inputs is refused
/// before anything is written (writing it would truncate the file being read).
#[derive(Debug)]
pub struct StagedFile {
    dest: PathBuf,
    staging: PathBuf,
    committed: bool,
}

impl StagedFile {
    /// Starts `dest`, refusing it when it is one of `inputs` or a directory, or when its directory
    /// takes no file ([`StageError::Create`]: the staging file is created here, before the caller
    /// does any work, and left empty for [`StagedFile::path`] or [`StagedFile::create`]).
    pub fn new(dest: &Path, inputs: &[&Path]) -> Result<StagedFile, StageError> {
        if inputs.iter().any(|i| same_file(i, dest)) {
            return Err(StageError::IsInput {
                path: dest.to_path_buf(),
            });
        }
        let name = match dest.file_name() {
            Some(n) if !dest.is_dir() => n,
            _ => {
                return Err(StageError::IsDirectory {
                    path: dest.to_path_buf(),
                })
            }
        };
        let parent = parent_of(dest);
        remove_leftovers(parent, name);
        let staging = staging_path(parent, name);
        std::fs::File::create(&staging).map_err(create_error(dest, parent))?;
        Ok(StagedFile {
            dest: dest.to_path_buf(),
            staging,
            committed: false,
        })
    }

    /// Where to write until [`StagedFile::commit`].
    pub fn path(&self) -> &Path {
        &self.staging
    }

    /// The staging file, created (buffered).
    pub fn create(&self) -> Result<io::BufWriter<std::fs::File>, StageError> {
        std::fs::File::create(&self.staging)
            .map(io::BufWriter::new)
            .map_err(create_error(&self.dest, parent_of(&self.dest)))
    }

    /// Renames the complete file over the output.
    pub fn commit(mut self) -> Result<(), StageError> {
        std::fs::rename(&self.staging, &self.dest).map_err(io_error(&self.dest))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.staging);
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("etwkit-staged-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn new_directory_appears_only_when_committed() {
        let root = scratch("new");
        let dest = root.join("a/b/ds");
        let s = Staged::new(&dest, Existing::Refuse, "events.parquet").unwrap();
        std::fs::write(s.path().join("events.parquet"), b"new").unwrap();
        assert!(
            !dest.exists(),
            "nothing at the destination before the commit"
        );
        s.commit().unwrap();
        assert_eq!(names(&dest), ["events.parquet"]);
        assert_eq!(
            names(&root.join("a/b")),
            ["ds"],
            "no staging directory left"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn dropped_uncommitted_leaves_the_destination_as_it_was() {
        let root = scratch("drop");
        let dest = root.join("ds");
        std::fs::create_dir(&dest).unwrap();
        std::fs::write(dest.join("events.parquet"), b"old").unwrap();
        std::fs::create_dir(dest.join("Old")).unwrap();
        std::fs::write(dest.join("Old/stale.parquet"), b"old").unwrap();
        let s = Staged::new(&dest, Existing::Replace, "events.parquet").unwrap();
        std::fs::write(s.path().join("events.parquet"), b"new").unwrap();
        drop(s);
        assert_eq!(names(&root), ["ds"]);
        assert_eq!(std::fs::read(dest.join("events.parquet")).unwrap(), b"old");
        // Replaced when committed: the earlier dataset's other files go with it; the directory
        // itself stays (the same one, not a new one by its name).
        #[cfg(unix)]
        let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&dest).unwrap());
        #[cfg(unix)]
        let before = inode();
        let s = Staged::new(&dest, Existing::Replace, "events.parquet").unwrap();
        std::fs::create_dir(s.path().join("Provider")).unwrap();
        std::fs::write(s.path().join("Provider/Event.parquet"), b"new").unwrap();
        std::fs::write(s.path().join("events.parquet"), b"new").unwrap();
        s.commit().unwrap();
        #[cfg(unix)]
        assert_eq!(inode(), before);
        assert_eq!(names(&dest), ["Provider", "events.parquet"]);
        assert_eq!(names(&dest.join("Provider")), ["Event.parquet"]);
        assert_eq!(std::fs::read(dest.join("events.parquet")).unwrap(), b"new");
        assert_eq!(names(&root), ["ds"]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn leftovers_of_killed_exports_are_removed() {
        let root = scratch("leftovers");
        // No process has this id (above the kernel's pid limit); process 1 always runs.
        let gone = root.join(".ds.etwkit-4294967295.partial");
        let live = root.join(".ds.etwkit-1.replaced");
        let other = root.join(".other.etwkit-4294967295.partial");
        for d in [&gone, &live, &other] {
            std::fs::create_dir(d).unwrap();
        }
        let s = Staged::new(&root.join("ds"), Existing::Refuse, "events.parquet").unwrap();
        assert!(!gone.exists(), "a dead export's staging directory stays");
        assert!(other.exists(), "another destination's was removed");
        assert!(live.exists(), "a running export's was removed");
        drop(s);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_file_is_replaced_whole_never_over_an_input() {
        let root = scratch("file");
        let out = root.join("out.pcapng");
        std::fs::write(&out, b"old").unwrap();
        let e = StagedFile::new(&out, &[&root.join("in.etl"), &out]).unwrap_err();
        assert!(matches!(e, StageError::IsInput { .. }), "{e}");
        let e = StagedFile::new(&root, &[]).unwrap_err();
        assert!(matches!(e, StageError::IsDirectory { .. }), "{e}");
        let f = StagedFile::new(&out, &[]).unwrap();
        std::fs::write(f.path(), b"half").unwrap();
        drop(f);
        assert_eq!(names(&root), ["out.pcapng"]);
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        let f = StagedFile::new(&out, &[]).unwrap();
        std::io::Write::write_all(&mut f.create().unwrap(), b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(names(&root), ["out.pcapng"]);
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        // A killed run's staging file is removed by the next (Linux: its process is gone).
        #[cfg(target_os = "linux")]
        {
            let gone = root.join(".out.pcapng.etwkit-4294967295.partial");
            std::fs::write(&gone, b"half").unwrap();
            drop(StagedFile::new(&out, &[]).unwrap());
            assert!(!gone.exists());
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn refuses_what_it_must_not_replace() {
        let root = scratch("refuse");
        let dest = root.join("ds");
        std::fs::create_dir(&dest).unwrap();
        std::fs::write(dest.join("notes.txt"), b"mine").unwrap();
        let e = Staged::new(&dest, Existing::Refuse, "events.parquet").unwrap_err();
        assert!(matches!(e, StageError::NotEmpty { .. }), "{e}");
        let e = Staged::new(&dest, Existing::Replace, "events.parquet").unwrap_err();
        assert!(matches!(e, StageError::NotADataset { .. }), "{e}");
        assert!(e.to_string().contains("no events.parquet"), "{e}");
        // A dataset with something else in it: replacing it would delete that too.
        let kept = root.join("kept");
        std::fs::create_dir_all(kept.join("Provider")).unwrap();
        std::fs::write(kept.join("events.parquet"), b"old").unwrap();
        std::fs::write(kept.join("Provider/Event.parquet"), b"old").unwrap();
        std::fs::write(kept.join("Provider/trace.etl"), b"mine").unwrap();
        let e = Staged::new(&kept, Existing::Replace, "events.parquet").unwrap_err();
        assert!(matches!(e, StageError::Foreign { .. }), "{e}");
        assert!(e.to_string().contains("trace.etl"), "{e}");
        std::fs::remove_file(kept.join("Provider/trace.etl")).unwrap();
        std::fs::write(kept.join("notes.txt"), b"mine").unwrap();
        let e = Staged::new(&kept, Existing::Replace, "events.parquet").unwrap_err();
        assert!(e.to_string().contains("notes.txt"), "{e}");
        std::fs::remove_file(kept.join("notes.txt")).unwrap();
        drop(Staged::new(&kept, Existing::Replace, "events.parquet").unwrap());
        let file = root.join("file");
        std::fs::write(&file, b"x").unwrap();
        let e = Staged::new(&file, Existing::Replace, "events.parquet").unwrap_err();
        assert!(matches!(e, StageError::NotADirectory { .. }), "{e}");
        assert_eq!(
            names(&root),
            ["ds", "file", "kept"],
            "no staging directory left"
        );
        assert_eq!(names(&dest), ["notes.txt"]);
        // An empty directory takes a dataset without being asked.
        let empty = root.join("empty");
        std::fs::create_dir(&empty).unwrap();
        let s = Staged::new(&empty, Existing::Refuse, "events.parquet").unwrap();
        std::fs::write(s.path().join("events.parquet"), b"new").unwrap();
        s.commit().unwrap();
        assert_eq!(names(&empty), ["events.parquet"]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
