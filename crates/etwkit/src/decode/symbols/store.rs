//! Where PDB files are looked for: a symbol path in the syntax of Windows' `_NT_SYMBOL_PATH`, the
//! one PerfView, WPA and the debuggers read.
//!
//! Elements are separated by `;`:
//! - `DIR`: a directory, searched flat (`DIR/name.pdb`) and as a symbol store
//!   (`DIR/name.pdb/KEY/name.pdb`);
//! - `srv*STORE*STORE...` (also `symsrv*symsrv.dll*...`): symbol stores searched in order. A local
//!   store is a directory in the store layout; an `http://` or `https://` store is a symbol server,
//!   whose file is downloaded into the first local store of the element (the downstream cache);
//! - `cache*DIR`: `DIR` is the downstream cache of every `srv*` element after it.
//!
//! `KEY` is the PDB's GUID as 32 upper-case hex digits (Data1, Data2, Data3 as numbers, then the
//! eight bytes of Data4) followed by its age in upper-case hex: the key of Microsoft's `symstore`
//! and symbol servers.

use std::path::{Path, PathBuf};

use super::pdb::PdbId;

/// One store of a `srv*` element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    /// A directory in the symbol-store layout.
    Local(PathBuf),
    /// A symbol server (`http://...` or `https://...`).
    Http(String),
}

/// One element of a symbol path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Element {
    /// A directory, searched flat and as a symbol store.
    Dir(PathBuf),
    /// Symbol stores searched in order; a file a server gives is kept in the first local one.
    Server(Vec<Store>),
}

/// A symbol path: where [`super::pdb::Symbolizer`] looks for each module's PDB.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolPath {
    pub elements: Vec<Element>,
}

/// A symbol path that could not be read, and why.
#[derive(Debug, thiserror::Error)]
#[error("symbol path element {element:?}: {why}")]
pub struct SymbolPathError {
    pub element: String,
    pub why: String,
}

/// Where a PDB was looked for, and what was found there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A file that exists.
    File(PathBuf),
    /// A symbol server to ask, and the local store its file goes into (`None`: no local store
    /// on the element, so nowhere to keep it).
    Server { url: String, cache: Option<PathBuf> },
}

impl SymbolPath {
    /// Reads a symbol path (`_NT_SYMBOL_PATH` syntax; see the module documentation).
    pub fn parse(s: &str) -> Result<SymbolPath, SymbolPathError> {
        let mut elements = Vec::new();
        let mut cache: Option<PathBuf> = None;
        for raw in s.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let lower = raw.to_ascii_lowercase();
            let err = |why: &str| SymbolPathError {
                element: raw.to_string(),
                why: why.to_string(),
            };
            if let Some(rest) = strip_prefix_ci(raw, &lower, "cache*") {
                if rest.is_empty() {
                    return Err(err("cache* names no directory"));
                }
                cache = Some(PathBuf::from(rest));
            } else if let Some(rest) = strip_prefix_ci(raw, &lower, "srv*")
                .or_else(|| strip_prefix_ci(raw, &lower, "symsrv*symsrv.dll*"))
            {
                let mut stores: Vec<Store> = rest
                    .split('*')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let l = p.to_ascii_lowercase();
                        match l.starts_with("http://") || l.starts_with("https://") {
                            true => Store::Http(p.trim_end_matches('/').to_string()),
                            false => Store::Local(PathBuf::from(p)),
                        }
                    })
                    .collect();
                if stores.is_empty() {
                    return Err(err("srv* names no store"));
                }
                if let Some(c) = &cache {
                    stores.insert(0, Store::Local(c.clone()));
                }
                elements.push(Element::Server(stores));
            } else if lower.starts_with("symsrv*") {
                return Err(err("only symsrv.dll's symbol stores are understood"));
            } else if lower.contains('*') {
                return Err(err("not a directory, srv*STORE*... or cache*DIR element"));
            } else {
                elements.push(Element::Dir(PathBuf::from(raw)));
            }
        }
        Ok(SymbolPath { elements })
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Where `id` may be, in the path's order: the files that exist (flat, then in the store
    /// layout), and the servers to ask (each with the local store its file goes into).
    pub fn candidates(&self, id: &PdbId) -> Vec<Candidate> {
        let name = id.file_name();
        let key = id.store_key();
        let mut out = Vec::new();
        // At each place, the first of the names that is a file (on a file system that ignores
        // case, both names are the one file).
        let push_first = |place: &dyn Fn(&str) -> PathBuf, out: &mut Vec<Candidate>| {
            if let Some(p) = names(name).iter().map(|n| place(n)).find(|p| p.is_file()) {
                if !out.contains(&Candidate::File(p.clone())) {
                    out.push(Candidate::File(p));
                }
            }
        };
        for e in &self.elements {
            match e {
                Element::Dir(d) => {
                    push_first(&|n| d.join(n), &mut out);
                    push_first(&|n| store_file(d, n, &key), &mut out);
                }
                Element::Server(stores) => {
                    let cache = stores.iter().find_map(|s| match s {
                        Store::Local(p) => Some(p.clone()),
                        Store::Http(_) => None,
                    });
                    for s in stores {
                        match s {
                            Store::Local(d) => push_first(&|n| store_file(d, n, &key), &mut out),
                            Store::Http(url) => out.push(Candidate::Server {
                                url: url.clone(),
                                cache: cache.clone(),
                            }),
                        }
                    }
                }
            }
        }
        out
    }
}

/// `DIR/name/KEY/name`.
pub fn store_file(dir: &Path, name: &str, key: &str) -> PathBuf {
    dir.join(name).join(key).join(name)
}

/// The names a PDB's file may have in a directory: as given, and in lower case (stores made on
/// Windows, where case does not matter, often hold the lower-case name).
fn names(name: &str) -> Vec<String> {
    let mut v = vec![name.to_string()];
    let lower = name.to_ascii_lowercase();
    if lower != name {
        v.push(lower);
    }
    v
}

/// `raw` without `prefix`, when `lower` (its lower case) starts with it.
fn strip_prefix_ci<'a>(raw: &'a str, lower: &str, prefix: &str) -> Option<&'a str> {
    lower.starts_with(prefix).then(|| &raw[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guid::Guid;

    fn id() -> PdbId {
        PdbId::new(
            Guid::from_str_const("ec83d8df-5559-46e0-b630-133ebd979266"),
            2,
            r"d:\build\Obj\Prog.pdb",
        )
    }

    #[test]
    fn parses_dirs_servers_and_caches() {
        let p = SymbolPath::parse(
            r" C:\syms ; SRV*c:\cache*https://msdl.microsoft.com/download/symbols/;cache*/tmp/c;srv*http://127.0.0.1:8000",
        )
        .unwrap();
        assert_eq!(
            p.elements,
            vec![
                Element::Dir(PathBuf::from(r"C:\syms")),
                Element::Server(vec![
                    Store::Local(PathBuf::from(r"c:\cache")),
                    Store::Http("https://msdl.microsoft.com/download/symbols".into()),
                ]),
                Element::Server(vec![
                    Store::Local(PathBuf::from("/tmp/c")),
                    Store::Http("http://127.0.0.1:8000".into()),
                ]),
            ]
        );
        for bad in ["srv*", "cache*", "symsrv*other.dll*x", "a*b"] {
            let e = SymbolPath::parse(bad).unwrap_err();
            assert_eq!(e.element, bad);
        }
        assert!(SymbolPath::parse(" ; ").unwrap().is_empty());
    }

    #[test]
    fn finds_flat_and_store_files_in_order() {
        let dir = std::env::temp_dir().join(format!("etwkit-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = id().store_key();
        assert_eq!(key, "EC83D8DF555946E0B630133EBD9792662");
        let flat = dir.join("flat");
        let store = dir.join("store");
        std::fs::create_dir_all(&flat).unwrap();
        std::fs::create_dir_all(store.join("prog.pdb").join(&key)).unwrap();
        std::fs::write(flat.join("Prog.pdb"), b"x").unwrap();
        std::fs::write(store_file(&store, "prog.pdb", &key), b"x").unwrap();
        let p = SymbolPath::parse(&format!(
            "{};srv*{}*http://localhost:1/s;{}",
            dir.join("none").display(),
            store.display(),
            flat.display()
        ))
        .unwrap();
        // A file system that ignores case finds the store's file under the name as given.
        let found = match cfg!(windows) {
            true => "Prog.pdb",
            false => "prog.pdb",
        };
        assert_eq!(
            p.candidates(&id()),
            vec![
                Candidate::File(store_file(&store, found, &key)),
                Candidate::Server {
                    url: "http://localhost:1/s".into(),
                    cache: Some(store.clone())
                },
                Candidate::File(flat.join("Prog.pdb")),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
