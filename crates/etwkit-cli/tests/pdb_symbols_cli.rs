//! `--symbols`: Windows frames named by function and source line from the modules' PDB files.
//!
//! A real Windows program is built here with clang and lld for x86_64-w64-mingw32
//! (`-gcodeview`, `--pdb`): a PE image and its PDB, linked by the same toolchain Windows developers
//! use with clang. A trace written with the ETL writer loads the image (kernel Image DCStart), names
//! its PDB as KernelTraceControl's DbgID_RSDS event does (GUID, age and name read from the image's
//! own CodeView record), and takes a CPU sample at every eighth byte of its code. `etwkit cpu`
//! names each sample's frame from the PDB found along the symbol path, and every name, file and
//! line must equal what LLVM's own PDB reader (`llvm-symbolizer`) says of that address.
//!
//! The symbol path is tried as users give it: a symbol store (`srv*DIR`), a symbol server over
//! HTTP (`srv*CACHE*http://...`, Python's http.server serving the store), and a directory holding
//! another build's PDB (refused: its GUID differs, so the frames stay `module+offset`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use etwkit::etl::writer::{Writer, WriterOptions};
use object::read::pe::PeFile64;
use object::{Object, ObjectSection};
use serde_json::Value;

#[path = "../../etwkit/tests/heap_common/windows_etl.rs"]
mod windows_etl;
use windows_etl::{alloc_payload, stackwalk, sys_record};

const PID: u32 = 700;
const BASE: u64 = 0x7ff7_4000_0000;
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>

__declspec(noinline) void *leaky_alloc(size_t n) {
    void *p = malloc(n);
    return p;
}

__declspec(noinline) static int helper(int x) {
    return x * 3 + 1;
}

static inline __attribute__((always_inline)) int scale(int x) {
    return x * 7 + (x >> 3);
}

static inline __attribute__((always_inline)) int mix(int x) {
    return scale(x) ^ (x << 2);
}

int main(int argc, char **argv) {
    void *p = leaky_alloc(4096 + argc);
    printf("%p %d %d\n", p, helper(argc), mix(argc));
    return 0;
}
"#;

/// A clang that links x86_64-w64-mingw32 programs with lld and writes their PDB, else `None`
/// after a loud SKIPPED line (a failure under ETWKIT_REQUIRE_TOOLS=1, as `.ci/run` sets).
fn clang(dir: &Path) -> Option<String> {
    let src = dir.join("probe.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    for cc in ["clang-22", "clang-21", "clang-20", "clang-19", "clang"] {
        let ok = Command::new(cc)
            .args(["--target=x86_64-w64-mingw32", "-gcodeview", "-fuse-ld=lld"])
            .arg(format!("-Wl,--pdb={}", dir.join("probe.pdb").display()))
            .arg(&src)
            .arg("-o")
            .arg(dir.join("probe.exe"))
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(cc.to_string());
        }
    }
    if std::env::var("ETWKIT_REQUIRE_TOOLS").is_ok_and(|v| v == "1") {
        panic!("pdb_symbols_cli: clang and lld for x86_64-w64-mingw32 (Debian clang, lld, mingw-w64) are needed and ETWKIT_REQUIRE_TOOLS=1");
    }
    eprintln!("\n*** SKIPPED pdb_symbols_cli: no clang + lld that builds Windows programs with PDBs (Debian clang, lld, gcc-mingw-w64) ***\n");
    None
}

/// `llvm-symbolizer` (any version), which reads PDBs with LLVM's own reader.
fn llvm_symbolizer() -> Option<String> {
    [
        "llvm-symbolizer-22",
        "llvm-symbolizer",
        "llvm-symbolizer-14",
    ]
    .into_iter()
    .find(|s| {
        Command::new(s)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .map(str::to_string)
}

/// Builds the program (optimized, so its calls are not trivially laid out), with `extra` in its
/// source: the image, its PDB.
fn build(cc: &str, dir: &Path, extra: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join("prog.c");
    std::fs::write(&src, format!("{PROGRAM}{extra}")).unwrap();
    let (exe, pdb) = (dir.join("prog.exe"), dir.join("prog.pdb"));
    let o = Command::new(cc)
        .args(["--target=x86_64-w64-mingw32", "-g", "-gcodeview", "-O1"])
        .args(["-fuse-ld=lld", "-Wl,--build-id=none"])
        .arg(format!("-Wl,--pdb={}", pdb.display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The mingw runtime's objects carry DWARF; without it the image names only its PDB, as an
    // MSVC-built one does.
    let stripped = dir.join("prog.stripped.exe");
    let st = Command::new("x86_64-w64-mingw32-strip")
        .arg("--strip-debug")
        .arg(&exe)
        .arg("-o")
        .arg(&stripped)
        .status();
    if st.is_ok_and(|s| s.success()) {
        std::fs::rename(&stripped, &exe).unwrap();
    }
    (exe, pdb)
}

/// What the image says of itself: its CodeView record (GUID, age, PDB path), its size and the
/// range of its code (RVAs).
struct Image {
    guid: etwkit::Guid,
    age: u32,
    pdb_path: String,
    size: u64,
    text: (u64, u64),
    /// The base the image was linked for.
    base: u64,
    /// Its link time stamp (COFF TimeDateStamp).
    stamp: u32,
}

fn image_info(exe: &Path) -> Image {
    let data = std::fs::read(exe).unwrap();
    let pe = PeFile64::parse(&*data).unwrap();
    let info = pe.pdb_info().unwrap().expect("a CodeView record");
    let size = pe
        .nt_headers()
        .optional_header
        .size_of_image
        .get(object::LittleEndian);
    let text = pe.section_by_name(".text").unwrap();
    let base = pe.relative_address_base();
    Image {
        guid: etwkit::Guid::from_le_bytes(&info.guid()).unwrap(),
        age: info.age(),
        pdb_path: String::from_utf8_lossy(info.path()).into_owned(),
        size: u64::from(size),
        text: (text.address() - base, text.address() - base + text.size()),
        base,
        stamp: pe
            .nt_headers()
            .file_header
            .time_date_stamp
            .get(object::LittleEndian),
    }
}

/// KernelTraceControl ImageID/DbgID_RSDS (opcode 36, version 2) in a classic FULL_HEADER64
/// record, as PerfView's and xperf's merged traces carry it: ImageBase, ProcessId, GuidSig, Age,
/// PdbFileName.
fn dbgid(img: &Image, ts: i64) -> Vec<u8> {
    let mut p = BASE.to_le_bytes().to_vec();
    p.extend_from_slice(&PID.to_le_bytes());
    p.extend_from_slice(&img.guid.to_le_bytes());
    p.extend_from_slice(&img.age.to_le_bytes());
    p.extend_from_slice(img.pdb_path.as_bytes());
    p.push(0);
    let mut r = Vec::new();
    r.extend_from_slice(&((0x30 + p.len()) as u16).to_le_bytes());
    r.extend_from_slice(&[0x14, 0xC0, 36, 0]);
    r.extend_from_slice(&2u16.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&PID.to_le_bytes());
    r.extend_from_slice(&ts.to_le_bytes());
    let ktc = etwkit::Guid::from_str_const("b3e675d7-2554-4f18-830b-2762732560de");
    r.extend_from_slice(&ktc.to_le_bytes());
    r.extend_from_slice(&[0u8; 8]);
    r.extend_from_slice(&p);
    r
}

/// Where the trace says prog.exe was, as a Windows trace names it.
const DEVICE_PATH: &str = r"\Device\HarddiskVolume3\apps\prog.exe";

/// Image DCStart (class v2) of `prog.exe` in [`PID`], loaded from `path`, with the link time
/// stamp `stamp` (0: none given).
fn image_rundown_at(img: &Image, ts: i64, path: &str, stamp: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&BASE.to_le_bytes());
    p.extend_from_slice(&img.size.to_le_bytes());
    p.extend_from_slice(&PID.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&stamp.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&BASE.to_le_bytes());
    p.extend_from_slice(&[0u8; 16]);
    for c in path.encode_utf16().chain([0]) {
        p.extend_from_slice(&c.to_le_bytes());
    }
    sys_record(2, 0x1403, 0, PID, ts, &p)
}

/// A SampledProfile at `ip` (InstructionPointer, ThreadId, Count, Reserved) with its one-frame
/// StackWalk.
fn sample(ip: u64, ts: i64) -> Vec<Vec<u8>> {
    let mut p = ip.to_le_bytes().to_vec();
    p.extend_from_slice(&701u32.to_le_bytes());
    p.extend_from_slice(&1u16.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes());
    let mut s = ts.to_le_bytes().to_vec();
    s.extend_from_slice(&PID.to_le_bytes());
    s.extend_from_slice(&701u32.to_le_bytes());
    s.extend_from_slice(&ip.to_le_bytes());
    vec![
        sys_record(2, 0x0F2E, 701, PID, ts, &p),
        sys_record(2, 0x1820, 701, PID, ts, &s),
    ]
}

/// Image DCStart of `prog.exe` from its Windows path, with no time stamp.
fn image_rundown(img: &Image, ts: i64) -> Vec<u8> {
    image_rundown_at(img, ts, DEVICE_PATH, 0)
}

/// A heap trace of prog.exe: its rundown and PDB signature, two blocks (48 and 80 bytes) allocated
/// under `leak` and never freed, one (16 bytes) allocated under `freed` and freed.
fn write_heap_trace(path: &Path, img: &Image, leak: &[u64], freed: &[u64]) {
    let start = 133_000_000_000_000_000i64;
    let mut w = Writer::create(path, WriterOptions::new(start)).unwrap();
    let clock = *w.clock();
    let t = |n: i64| clock.to_raw(start + 10_000 + n);
    let mut recs = vec![image_rundown(img, t(1)), dbgid(img, t(2))];
    let heap = 0x0000_01d0_0000_0000u64;
    for (i, (addr, size, stack)) in [
        (0x1000u64, 48u64, leak),
        (0x2000, 16, freed),
        (0x3000, 80, leak),
    ]
    .into_iter()
    .enumerate()
    {
        let ts = t(100 + 10 * i as i64);
        let frames: Vec<u64> = stack.iter().map(|r| BASE + r).collect();
        recs.push(sys_record(
            2,
            0x1021,
            701,
            PID,
            ts,
            &alloc_payload(heap, size, addr),
        ));
        recs.push(stackwalk(ts, PID, 701, &frames));
    }
    let mut p = heap.to_le_bytes().to_vec();
    p.extend_from_slice(&0x2000u64.to_le_bytes());
    p.extend_from_slice(&3u32.to_le_bytes());
    recs.push(sys_record(2, 0x1024, 701, PID, t(200), &p));
    for r in &recs {
        w.write_raw(r, 0, &clock).unwrap();
    }
    w.finish().unwrap();
}

/// The trace: prog.exe's rundown and PDB signature, one sample at each of `rvas`.
fn write_trace(path: &Path, img: &Image, rvas: &[u64]) {
    write_trace_from(path, img, rvas, None)
}

/// [`write_trace`], or with `from` (the image's path and time stamp) the rundown of a trace that
/// was never merged: the image's own path and no DbgID_RSDS event.
fn write_trace_from(path: &Path, img: &Image, rvas: &[u64], from: Option<(&Path, u32)>) {
    let start = 133_000_000_000_000_000i64;
    let mut w = Writer::create(path, WriterOptions::new(start)).unwrap();
    let clock = *w.clock();
    let t = |n: i64| clock.to_raw(start + 10_000 + n);
    match from {
        None => {
            w.write_raw(&image_rundown(img, t(1)), 0, &clock).unwrap();
            w.write_raw(&dbgid(img, t(2)), 0, &clock).unwrap();
        }
        Some((exe, stamp)) => {
            let rundown = image_rundown_at(img, t(1), exe.to_str().unwrap(), stamp);
            w.write_raw(&rundown, 0, &clock).unwrap();
        }
    }
    for (i, rva) in rvas.iter().enumerate() {
        for r in sample(BASE + rva, t(10 + i as i64)) {
            w.write_raw(&r, 0, &clock).unwrap();
        }
    }
    w.finish().unwrap();
}

/// A function, and its source file's name and line when known.
type Named = (String, Option<(String, u32)>);

/// `llvm-symbolizer`'s names of each RVA of `exe`: the inlined calls innermost first, then the
/// function (each with its file's name and line); empty where it names nothing.
fn truth(symbolizer: &str, exe: &Path, img: &Image, rvas: &[u64]) -> Vec<Vec<Named>> {
    let input: String = rvas
        .iter()
        .map(|r| format!("{:#x}\n", img.base + r))
        .collect();
    let mut child = Command::new(symbolizer)
        .arg(format!("--obj={}", exe.display()))
        .arg("--functions=linkage")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let blocks: Vec<&str> = text.trim_end().split("\n\n").collect();
    assert_eq!(blocks.len(), rvas.len(), "{text}");
    blocks
        .iter()
        .map(|b| {
            // An address named by nothing is an empty name, then `??:0:0`.
            let lines: Vec<&str> = b.split('\n').collect();
            lines
                .chunks(2)
                .filter_map(|pair| {
                    let f = pair[0].trim();
                    if f.is_empty() || f == "??" {
                        return None;
                    }
                    let mut parts = pair.get(1).unwrap_or(&"??:0:0").rsplitn(3, ':');
                    let _col = parts.next();
                    let line: u32 = parts.next().unwrap_or("0").parse().unwrap_or(0);
                    let file = parts.next().unwrap_or("??");
                    let base = file.rsplit(['/', '\\']).next().unwrap().to_string();
                    let loc = (file != "??" && line != 0).then_some((base, line));
                    Some((f.to_string(), loc))
                })
                .collect()
        })
        .collect()
}

/// `etwkit cpu --format json` of `etl` with `args`: the report and stderr.
fn cpu(etl: &Path, args: &[&str]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .arg("cpu")
        .arg(etl)
        .args(["--format", "json", "--top", "100000", "--frames", "1"])
        .args(args)
        .env_remove("_NT_SYMBOL_PATH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (serde_json::from_slice(&out.stdout).unwrap(), err)
}

/// Each stack's one frame as displayed. One sample per address, so the stacks come in the order
/// of their frames, which is by address: the order of the RVAs.
fn shown(report: &Value) -> Vec<String> {
    report["top_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            assert_eq!(s["samples"], 1, "{s}");
            s["frames"][0].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn frames_named_from_pdbs_along_the_symbol_path() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pdb_symbols");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let Some(cc) = clang(&dir) else { return };
    let Some(symbolizer) = llvm_symbolizer() else {
        if std::env::var("ETWKIT_REQUIRE_TOOLS").is_ok_and(|v| v == "1") {
            panic!("pdb_symbols_cli: llvm-symbolizer (Debian llvm) is needed and ETWKIT_REQUIRE_TOOLS=1");
        }
        eprintln!("\n*** SKIPPED pdb_symbols_cli: no llvm-symbolizer (Debian llvm) to check names against ***\n");
        return;
    };
    let (exe, pdb) = build(&cc, &dir.join("build"), "");
    let img = image_info(&exe);
    assert!(img.pdb_path.ends_with("prog.pdb"), "{}", img.pdb_path);

    // One sample at every eighth byte of the code, each its own stack.
    let rvas: Vec<u64> = (img.text.0..img.text.1).step_by(8).collect();
    let etl = dir.join("prog.etl");
    write_trace(&etl, &img, &rvas);
    let chains = truth(&symbolizer, &exe, &img, &rvas);
    // Frames show the function (the outermost of inlined calls) and its own line.
    let want: Vec<Option<Named>> = chains.iter().map(|c| c.last().cloned()).collect();
    let named = want.iter().filter(|w| w.is_some()).count();
    assert!(
        named > rvas.len() / 2,
        "llvm-symbolizer named {named} of {}",
        rvas.len()
    );

    // The PDB in a symbol store only (the path the image names is gone).
    let key = format!(
        "{:08X}{:04X}{:04X}{}{:X}",
        img.guid.data1,
        img.guid.data2,
        img.guid.data3,
        img.guid
            .data4
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<String>(),
        img.age
    );
    let store = dir.join("store");
    let in_store = store.join("prog.pdb").join(&key).join("prog.pdb");
    std::fs::create_dir_all(in_store.parent().unwrap()).unwrap();
    std::fs::rename(&pdb, &in_store).unwrap();

    let expect = |report: &Value| {
        let got = shown(report);
        let wanted: Vec<String> = rvas
            .iter()
            .zip(&want)
            .map(|(rva, w)| match w {
                Some((f, Some((file, line)))) => format!("prog.exe!{f} ({file}:{line})"),
                Some((f, None)) => format!("prog.exe!{f}"),
                None => format!("prog.exe+{rva:#x}"),
            })
            .collect();
        assert_eq!(got.len(), wanted.len());
        let diffs: Vec<(&String, &String)> =
            wanted.iter().zip(&got).filter(|(a, b)| a != b).collect();
        // Each kind of difference once (frames of one function differ alike).
        let mut kinds: Vec<(&String, &String)> = diffs.clone();
        kinds.dedup_by(|a, b| {
            a.0.split(" (").next() == b.0.split(" (").next()
                && a.1.split(" (").next() == b.1.split(" (").next()
        });
        assert!(
            diffs.is_empty(),
            "{} frames differ from llvm-symbolizer: {:?}",
            diffs.len(),
            kinds
        );
        for f in [
            "prog.exe!leaky_alloc (prog.c:",
            "prog.exe!main (prog.c:",
            "prog.exe!helper (prog.c:",
        ] {
            assert!(got.iter().any(|g| g.starts_with(f)), "no frame {f}");
        }
    };

    // 1. A symbol store.
    let (r, err) = cpu(&etl, &["--symbols", &format!("srv*{}", store.display())]);
    expect(&r);
    let read = &r["symbols"]["read"];
    assert_eq!(read.as_array().unwrap().len(), 1, "{r}");
    assert_eq!(read[0]["pdb"], "prog.pdb");
    assert_eq!(read[0]["path"], in_store.display().to_string());
    assert_eq!(read[0]["age"], img.age);
    assert_eq!(read[0]["guid"], img.guid.to_string());
    assert_eq!(r["symbols"]["missing"], serde_json::json!([]));
    assert!(
        err.contains("etwkit cpu: symbols: read 1 PDB files"),
        "{err}"
    );

    // 2. A symbol server over HTTP, downloading into a cache store.
    let cache = dir.join("cache");
    let server = HttpServer::start(&store);
    let (r, _) = cpu(
        &etl,
        &[
            "--symbols",
            &format!("srv*{}*{}", cache.display(), server.url),
        ],
    );
    expect(&r);
    let cached = cache.join("prog.pdb").join(&key).join("prog.pdb");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(&in_store).unwrap()
    );
    assert_eq!(
        r["symbols"]["read"][0]["path"],
        cached.display().to_string()
    );
    drop(server);

    // 3. Another build's PDB, flat in a directory: refused, frames stay module+offset.
    let (_, other) = build(&cc, &dir.join("other"), "int other(void) { return 7; }\n");
    let flat = dir.join("flat");
    std::fs::create_dir_all(&flat).unwrap();
    std::fs::rename(&other, flat.join("prog.pdb")).unwrap();
    let (r, err) = cpu(&etl, &["--symbols", &flat.display().to_string()]);
    let plain: Vec<String> = rvas.iter().map(|r| format!("prog.exe+{r:#x}")).collect();
    assert_eq!(shown(&r), plain);
    let missing = &r["symbols"]["missing"][0];
    assert_eq!(missing["pdb"], "prog.pdb");
    let reason = missing["reason"].as_str().unwrap();
    assert!(reason.contains("is another build (GUID "), "{reason}");
    assert!(err.contains("1 not read"), "{err}");

    // No symbol path: no `symbols`, module+offset as before.
    let (r, err) = cpu(&etl, &[]);
    assert!(r.get("symbols").is_none());
    assert!(!err.contains("symbols"), "{err}");
    assert_eq!(shown(&r), plain);

    // 4. No DbgID_RSDS event (a trace never merged, a live session's): the image file at the path
    // the trace gives names its PDB, when its size and time stamp are the module's.
    let unmerged = dir.join("unmerged.etl");
    write_trace_from(&unmerged, &img, &rvas, Some((&exe, img.stamp)));
    let store_path = format!("srv*{}", store.display());
    let (r, _) = cpu(&unmerged, &["--symbols", &store_path]);
    expect(&r);
    assert_eq!(
        r["symbols"]["read"][0]["path"],
        in_store.display().to_string()
    );
    // Another link time stamp: another build of the file; nothing is looked up.
    write_trace_from(&unmerged, &img, &rvas, Some((&exe, img.stamp ^ 1)));
    let (r, _) = cpu(&unmerged, &["--symbols", &store_path]);
    assert_eq!(r["symbols"], serde_json::json!({"read": [], "missing": []}));
    assert!(shown(&r).iter().all(|f| f.contains(".exe+0x")), "{r}");

    // heap --report: the leak's stack by function and line, in the report and its pprof profile.
    let first = |name: &str| {
        rvas.iter()
            .zip(&want)
            .find_map(|(rva, w)| match w {
                Some((f, Some(loc))) if f == name => Some((*rva, loc.clone())),
                _ => None,
            })
            .unwrap()
    };
    let (leak_rva, leak_loc) = first("leaky_alloc");
    // The frame under it: an address of main in code inlined from mix, and into it from scale.
    let (main_rva, deep) = rvas
        .iter()
        .zip(&chains)
        .find(|(_, c)| c.len() == 3 && c[2].0 == "main")
        .map(|(r, c)| (*r, c.clone()))
        .expect("scale inlined into mix inlined into main");
    assert_eq!((deep[0].0.as_str(), deep[1].0.as_str()), ("scale", "mix"));
    let main_loc = deep[2].1.clone().unwrap();
    let heap_etl = dir.join("heap.etl");
    write_heap_trace(&heap_etl, &img, &[leak_rva, main_rva], &[main_rva]);
    let prof = dir.join("heap.pb.gz");
    let out = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(["heap", "--format", "json", "--report"])
        .arg(&heap_etl)
        .arg("--pprof")
        .arg(&prof)
        .env("_NT_SYMBOL_PATH", format!("srv*{}", store.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("etwkit heap: symbols: read 1 PDB files"),
        "{err}"
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let top = &r["outstanding_by_stack"][0];
    assert_eq!(
        (top["bytes"].as_u64(), top["count"].as_u64()),
        (Some(128), Some(2)),
        "{r}"
    );
    let frames: Vec<(&str, &str, u64)> = top["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let file = f["file"].as_str().unwrap();
            let base = file.rsplit(['/', '\\']).next().unwrap();
            (
                f["function"].as_str().unwrap(),
                base,
                f["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        frames,
        [
            ("leaky_alloc", leak_loc.0.as_str(), u64::from(leak_loc.1)),
            ("main", main_loc.0.as_str(), u64::from(main_loc.1)),
        ]
    );
    assert_eq!(r["symbols"]["read"][0]["pdb"], "prog.pdb");
    // The inlined calls of main's frame, innermost first, each with its line, as LLVM names them.
    let inlined: Vec<Named> = top["frames"][1]["inlined"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let file = i["file"].as_str().unwrap();
            let base = file.rsplit(['/', '\\']).next().unwrap().to_string();
            let line = i["line"].as_u64().unwrap() as u32;
            (
                i["function"].as_str().unwrap().to_string(),
                Some((base, line)),
            )
        })
        .collect();
    assert_eq!(inlined, deep[..2]);
    assert!(top["frames"][0].get("inlined").is_none(), "{top}");

    // The pprof profiles name the functions, as Go's pprof reads them.
    if let Some(go) = common::go("pdb_symbols_cli") {
        let prof = dir.join("prog.pb.gz");
        cpu(
            &etl,
            &[
                "--symbols",
                &format!("srv*{}", store.display()),
                "--pprof",
                prof.to_str().unwrap(),
            ],
        );
        let top = common::pprof(
            &go,
            &["-top", "-nodecount=100000", "-nodefraction=0"],
            &prof,
        );
        for f in ["leaky_alloc", "main", "helper"] {
            assert!(
                top.lines()
                    .any(|l| l.trim_end().ends_with(&format!(" {f}"))),
                "{f} not in {top}"
            );
        }
        let lines = common::pprof(&go, &["-traces", "-lines"], &prof);
        assert!(
            lines.contains("leaky_alloc") && lines.contains("prog.c:"),
            "{lines}"
        );
        // The heap profile: the leak's 128 bytes in use under leaky_alloc.
        let heap_prof = dir.join("heap.pb.gz");
        let top = common::pprof(&go, &["-top", "-sample_index=inuse_space"], &heap_prof);
        let row = top
            .lines()
            .find(|l| l.trim_end().ends_with(" leaky_alloc"))
            .unwrap_or_else(|| panic!("{top}"));
        assert!(row.trim_start().starts_with("128B "), "{row}");
        // main's location holds the calls inlined into it, innermost first.
        let traces = common::pprof(&go, &["-traces", "-sample_index=inuse_space"], &heap_prof);
        // The first sample (the leak's 128 bytes): `128B leaky_alloc`, `scale (inline)`, ...
        let leak = traces.split("-----------+").nth(1).unwrap_or_default();
        let names: Vec<&str> = leak
            .lines()
            .filter_map(|l| l.trim_end_matches(" (inline)").split_whitespace().last())
            .filter(|n| ["leaky_alloc", "scale", "mix", "main"].contains(n))
            .collect();
        assert_eq!(names, ["leaky_alloc", "scale", "mix", "main"], "{traces}");
        assert!(leak.contains("scale (inline)"), "{traces}");
    }
}

/// Python's http.server over a directory, on a free port; stopped when dropped.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl HttpServer {
    fn start(dir: &Path) -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
