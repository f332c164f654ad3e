//! The session API on the real kernel (requires root): sessions and their names, orphan cleanup that
//! never touches anyone else's instance, tracepoint systems as providers (by name and by GUID), and the
//! pid filter following children of a traced process.
#![cfg(target_os = "linux")]

mod common;

use std::ops::ControlFlow;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use etwkit::live::linux::props::{as_u64, properties};
use etwkit::live::linux::{tracefs, tracepoints, uprobe};
use etwkit::live::{Etw, Level, LiveError};

fn root() -> std::path::PathBuf {
    match tracefs::root() {
        Ok(r) => r,
        Err(e) => panic!("this test traces the real kernel and requires root with tracefs: {e}"),
    }
}

fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    pid
}

#[test]
fn orphans_are_removed_and_foreign_instances_kept() {
    if !common::live_available("orphans_are_removed_and_foreign_instances_kept") {
        return;
    }
    let root = root();
    let dead = dead_pid();
    let orphan = format!("etwkit-{dead}-orphan");
    let foreign = format!("notetwkit-{}", std::process::id());
    for n in [&orphan, &foreign] {
        std::fs::create_dir(root.join("instances").join(n)).unwrap();
    }
    // An orphan uprobe group left by a killed tracer.
    let group = format!("etwkit_{dead}_0");
    std::mem::forget(uprobe::Probes::define(&root, &group).unwrap());
    assert!(root.join("events").join(&group).is_dir());

    let etw = Etw::new();
    let mut t = etw.open_trace("t-orphans", None, None);
    t.enable("winsock", 0, Level::INFORMATIONAL).unwrap();
    t.start().unwrap();
    let names = tracefs::instances(&root).unwrap();
    assert!(
        !names.contains(&orphan),
        "the dead owner's instance was removed"
    );
    assert!(
        names.contains(&foreign),
        "another tool's instance is never touched"
    );
    assert!(
        !root.join("events").join(&group).exists(),
        "the dead owner's uprobes were removed"
    );
    // The live session is listed under its name, with its owner.
    let me = std::process::id();
    let sessions = etw.sessions().unwrap();
    let s = sessions
        .iter()
        .find(|s| s.name == "t-orphans")
        .expect("our session is listed");
    assert_eq!(s.owner_pid, Some(me));
    assert!(s.etwkit && s.enabled_events > 0);
    assert!(sessions.iter().any(|s| s.instance == foreign && !s.etwkit));
    assert!(t.exists().unwrap());
    assert!(
        etw.open_trace("t-orphans", None, None).exists().unwrap(),
        "exists by name from another handle"
    );
    t.stop(false).unwrap();
    assert!(!etw.open_trace("t-orphans", None, None).exists().unwrap());
    assert!(!tracefs::instances(&root)
        .unwrap()
        .iter()
        .any(|n| n.contains("t-orphans")));
    assert!(!std::fs::read_to_string(root.join("uprobe_events"))
        .unwrap()
        .contains(&format!("etwkit_{me}_")));
    std::fs::remove_dir(root.join("instances").join(&foreign)).unwrap();

    // stop(soft): a session that does not exist is not an error; without soft it is.
    let mut ghost = etw.open_trace("t-never-started", None, None);
    assert!(ghost.stop(true).is_ok());
    assert!(matches!(
        ghost.stop(false),
        Err(LiveError::NoSuchSession(_))
    ));
    let mut bad = etw.open_trace("t-bad", None, None);
    bad.enable("no_such_system_xyz", 0, 4).unwrap();
    assert!(matches!(bad.start(), Err(LiveError::UnknownProvider(_))));
    let mut badname = etw.open_trace("bad/name", None, None);
    badname.enable("sched", 0, 4).unwrap();
    assert!(matches!(badname.start(), Err(LiveError::BadName(_))));
}

#[test]
fn pid_filter_follows_children_and_providers_work_by_guid() {
    if !common::live_available("pid_filter_follows_children_and_providers_work_by_guid") {
        return;
    }
    root();
    // An untraced process that forks two children once told to (after tracing has started: no
    // timing assumption about how long arming takes).
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg("read go; /bin/sleep 0.01 & /bin/sleep 0.02; wait")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ppid = parent.id();
    let etw = Etw::new();
    let mut t = etw.open_trace("t-children", None, None);
    // By GUID: the TraceLogging name hash of "sched".
    t.enable(tracepoints::system_guid("sched"), 0, Level::VERBOSE)
        .unwrap();
    t.add_pid(ppid).unwrap();
    t.start().unwrap();
    {
        use std::io::Write;
        let mut go = parent.stdin.take().unwrap();
        go.write_all(b"go\n").unwrap();
    }
    let stop = t.stop_handle();
    let waiter = std::thread::spawn(move || {
        parent.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        stop.stop();
    });
    let mut execs = Vec::new();
    let mut pids = std::collections::BTreeSet::new();
    t.process(
        |r| {
            assert_eq!(r.traits_provider_name(), Some("sched"));
            let (name, p) = properties(r).expect("tracepoint events decode from their TL metadata");
            if name.starts_with("sched_process_") {
                // (sched_switch/wakeup also record the other task of a pair the filter matches.)
                pids.insert(r.pid);
            }
            if name == "sched_process_exec" {
                execs.push((
                    r.pid,
                    p["filename"].as_str().unwrap().to_string(),
                    as_u64(&p["pid"]).unwrap(),
                ));
            }
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    waiter.join().unwrap();
    assert_eq!(sum.events_lost, 0);
    let sleeps: Vec<_> = execs.iter().filter(|(_, f, _)| f == "/bin/sleep").collect();
    assert_eq!(sleeps.len(), 2, "both children's exec seen: {execs:?}");
    for (pid, _, field_pid) in &sleeps {
        assert_ne!(*pid, ppid, "children have their own pids");
        assert_eq!(*pid as u64, *field_pid);
    }
    assert!(
        !pids.contains(&std::process::id()),
        "the tracer itself is never traced"
    );
    assert!(pids.contains(&ppid));
}

#[test]
fn logfile_mode_writes_an_etl_that_process_reads_back() {
    if !common::live_available("logfile_mode_writes_an_etl_that_process_reads_back") {
        return;
    }
    root();
    let dir = std::env::temp_dir().join(format!("etwkit-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sched.etl");
    let etw = Etw::new();
    let mut t = etw.open_trace("t-logfile", Some(&path), None);
    t.enable("sched", 0, Level::VERBOSE).unwrap();
    let mut child = t.spawn(Command::new("/bin/sleep").arg("0.05")).unwrap();
    let child_pid = child.id();
    let stop = t.stop_handle();
    let w = std::thread::spawn(move || {
        child.wait().unwrap();
        stop.stop();
    });
    let mut live = Vec::new();
    t.process(
        |r| {
            live.push((r.timestamp, r.pid, r.descriptor.id, r.payload.to_vec()));
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    let sum = t.stop(false).unwrap();
    w.join().unwrap();
    assert!(!live.is_empty() && live.iter().any(|e| e.1 == child_pid));
    // Events still buffered at stop went to the file too: the file holds at least what was delivered.
    let sched = tracepoints::system_guid("sched");
    let mut back = Vec::new();
    etw.open_trace("t-logfile-read", Some(&path), None)
        .process(
            |r| {
                if r.provider == sched {
                    assert_eq!(r.traits_provider_name(), Some("sched"));
                    back.push((r.timestamp, r.pid, r.descriptor.id, r.payload.to_vec()));
                }
                ControlFlow::Continue(())
            },
            None,
            None,
        )
        .unwrap();
    assert!(
        back.len() >= live.len(),
        "{} in file, {} delivered ({sum:?})",
        back.len(),
        live.len()
    );
    assert_eq!(
        &back[..live.len()],
        &live[..],
        "the file holds the delivered events, in order, unchanged"
    );
    // begin/end bound what process() delivers.
    let mid = live[live.len() / 2].0;
    let mut after = 0;
    etw.open_trace("t-logfile-read2", Some(&path), None)
        .process(
            |r| {
                assert!(r.timestamp >= mid);
                after += 1;
                ControlFlow::Continue(())
            },
            Some(mid),
            None,
        )
        .unwrap();
    assert!(after > 0 && after < back.len() + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits (up to 5 s) until `/proc/PID/comm` says `comm`.
fn wait_for_comm(pid: u32, comm: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if now.trim_end() == comm {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} is still {now:?}, not {comm}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn process_names_of_this_machine() {
    use etwkit::live::process_name;
    // This test's own process: its executable's file name, cut to the kernel's 15 bytes of comm.
    let exe = std::env::current_exe().unwrap();
    let own: String = exe
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .chars()
        .take(15)
        .collect();
    assert_eq!(
        process_name(std::process::id()).as_deref(),
        Some(own.as_str())
    );
    // A child that execs `sleep` is named `sleep` once it has.
    let mut child = Command::new("sh")
        .args(["-c", "exec sleep 5"])
        .spawn()
        .unwrap();
    wait_for_comm(child.id(), "sleep");
    assert_eq!(process_name(child.id()).as_deref(), Some("sleep"));
    child.kill().unwrap();
    child.wait().unwrap();
    // pid 0 is the idle task of every CPU, `swapper` as ps and perf name it.
    assert_eq!(process_name(0).as_deref(), Some("swapper"));
    // No process can have a pid above pid_max.
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(process_name(pid_max + 1), None);
    assert_eq!(process_name(u32::MAX), None, "the pid of no process");

    // A process gone: the name tracefs saved while events were enabled (root only).
    if !common::live_available("process_names_of_this_machine (a process gone)") {
        return;
    }
    root();
    let mut child = Command::new("sh")
        .args(["-c", "read go; exec sleep 0.2"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let etw = Etw::new();
    let mut t = etw.open_trace("t-names", None, None);
    t.enable("sched", 0, Level::VERBOSE).unwrap();
    t.add_pid(pid).unwrap();
    t.start().unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let stop = t.stop_handle();
    let waiter = std::thread::spawn(move || {
        child.wait().unwrap();
        stop.stop();
    });
    let mut seen = 0;
    t.process(
        |r| {
            seen += (r.pid == pid) as u32;
            ControlFlow::Continue(())
        },
        None,
        None,
    )
    .unwrap();
    t.stop(false).unwrap();
    waiter.join().unwrap();
    assert!(seen > 0, "the child's events were traced");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "reaped");
    assert_eq!(
        process_name(pid).as_deref(),
        Some("sleep"),
        "saved_cmdlines keeps the name of a traced process that is gone"
    );
}
