//! An output whose directory takes no file (`export -o`, `relog -o`, `pcap -o`, `heap --pprof`,
//! `heap --flamegraph`) is refused in one sentence naming the output and that directory, never
//! the hidden `.NAME.etwkit-<pid>.partial` it would have been written as, with exit code 1 and
//! nothing left behind. Run as root, so "cannot write" comes from the file system, not from
//! permissions: a parent that is a regular file, /proc, and a read-only tmpfs this test mounts.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{etwkit_code, require_root, samples};

/// Every command that writes a staged output, writing `out`.
fn commands(s: &Path, out: &str) -> Vec<Vec<String>> {
    let etl = s.join("perfview_smallEtlFile.etl");
    let etl = etl.to_str().unwrap().to_string();
    let pkt = s.join("demikernel_PktMon.etl");
    let pkt = pkt.to_str().unwrap().to_string();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["export", &etl, "-o", out]),
        v(&["export", &etl, "--format", "json", "--overwrite", "-o", out]),
        v(&["relog", &etl, "-o", out]),
        v(&["pcap", &pkt, "-o", out]),
        v(&["heap", "--report", &etl, "--pprof", out]),
        v(&["heap", "--report", &etl, "--flamegraph", out]),
    ]
}

/// Runs every command writing `dir/NAME` and checks the one sentence (ending in `reason`).
fn refused_in(s: &Path, dir: &Path, reason: &str) {
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    for args in commands(s, out_s) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, err) = etwkit_code(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(
            err,
            format!(
                "etwkit: cannot write {out_s}: cannot create a file in {}: {reason}\n",
                dir.display()
            ),
            "{args:?}"
        );
        assert!(!out.exists(), "{args:?}");
    }
}

#[test]
fn a_parent_that_is_a_file_is_named() {
    let Some(s) = samples("a_parent_that_is_a_file_is_named") else {
        return;
    };
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("output-dir-file");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let file = base.join("notes.txt");
    std::fs::write(&file, b"a file, not a directory").unwrap();
    refused_in(&s, &file, "Not a directory (os error 20)");
    // A directory under it as well (export would make the missing directories).
    refused_in(&s, &file.join("sub"), "Not a directory (os error 20)");
    assert_eq!(std::fs::read(&file).unwrap(), b"a file, not a directory");
    let left: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_directory_that_takes_no_file_is_named() {
    let Some(s) = samples("a_directory_that_takes_no_file_is_named") else {
        return;
    };
    // /proc takes no new file, even from root.
    refused_in(
        &s,
        Path::new("/proc"),
        "No such file or directory (os error 2)",
    );
    if !require_root("a_directory_that_takes_no_file_is_named (read-only mount)") {
        return;
    }
    let ro = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("output-dir-ro-{}", std::process::id()));
    std::fs::create_dir_all(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=64k", "etwkit-test"])
        .arg(&ro)
        .status()
        .unwrap();
    assert!(
        mounted.success(),
        "mount -t tmpfs -o ro on {}",
        ro.display()
    );
    /// Unmounts (and removes) the read-only mount point however the test ends.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _guard = Unmount(ro.clone());
    refused_in(&s, &ro, "Read-only file system (os error 30)");
}

/// A live trace's logfile (written as it comes, not staged) is named once with the reason, and
/// the session it started is gone.
#[cfg(target_os = "linux")]
#[test]
fn a_live_logfile_that_cannot_be_made_is_named_once() {
    if !require_root("a_live_logfile_that_cannot_be_made_is_named_once") {
        return;
    }
    let (code, out, err) = etwkit_code(&[
        "trace",
        "--provider",
        "sched",
        "--name",
        "outdirtest",
        "-o",
        "/proc/out.etl",
        "--duration",
        "0.1",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        err,
        "etwkit: cannot create the logfile /proc/out.etl: No such file or directory (os error 2)\n"
    );
    let (code, out, err) = etwkit_code(&["sessions", "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("outdirtest"), "{out}");
}
