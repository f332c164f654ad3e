//! `etwkit heap --pid P` loading the allocator shim into running processes, as root against real
//! programs: exact counts in the traced window (the program counts the calls that reached the shim
//! itself), the interposition undone at the end (its GOT entry for malloc points into libc again,
//! its rate recovers, the control thread is gone), a second attach, a SIGKILLed etwkit, C++ and
//! Python targets.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The tests here run one at a time: each storms the CPUs, and one compares rates over time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn progs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../etwkit/tests/heap_progs")
}

fn compile(cc: &str, src: &str, out: &str, extra: &[&str]) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out);
    let st = Command::new(cc)
        .args(["-g", "-O1", "-pthread", "-o"])
        .arg(&bin)
        .arg(progs().join(src))
        .args(extra)
        .status()
        .expect("compiler");
    assert!(st.success(), "{cc} {src}");
    bin
}

/// Starts `cmd` with stdout piped; its lines arrive on the receiver.
fn start(cmd: &mut Command) -> (Child, Receiver<String>) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start program");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// A program that is killed when the test ends early (a failed assertion would otherwise leave it
/// running, holding the test's output pipe open).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn next_line(rx: &Receiver<String>) -> String {
    rx.recv_timeout(Duration::from_secs(20))
        .expect("a line from the program")
}

/// `RATE <calls/s> <module>` → (rate, module).
fn rate(line: &str) -> (f64, String) {
    let mut it = line.split_whitespace();
    assert_eq!(it.next(), Some("RATE"), "{line}");
    let r = it.next().unwrap().parse().unwrap();
    (r, it.next().unwrap_or("").to_string())
}

/// Runs `etwkit heap ARGS --format json` (built-in shim): the report and the final stderr line.
fn heap(args: &[&str]) -> (serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .arg("heap")
        .args(args)
        .args(["--format", "json"])
        .env_remove("ETWKIT_HEAPSHIM")
        .output()
        .expect("etwkit heap");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "etwkit heap {args:?}: {stderr}");
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (report, stderr.lines().last().unwrap_or("").to_string())
}

fn tasks(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[test]
fn attach_counts_exactly_and_detaches_cleanly() {
    if !common::require_root("attach_counts_exactly_and_detaches_cleanly") {
        return;
    }
    let _serial = serial();
    let bin = compile(
        "cc",
        "attach_storm.c",
        "attach_storm",
        &["-fno-plt", "-ldl"],
    );
    let (mut child, rx) = start(Command::new(&bin).arg("9"));
    let pid = child.id();
    // Untraced rate: lines 2..5 (the first interval includes thread start).
    let _ = next_line(&rx);
    let before: Vec<f64> = (0..4)
        .map(|_| rate(&next_line(&rx)))
        .map(|(r, m)| {
            assert_eq!(m, "libc.so.6");
            r
        })
        .collect();
    let untraced = median(before);
    let threads_before = tasks(pid);

    let (r1, last) = heap(&["--pid", &pid.to_string(), "--duration", "1"]);
    assert!(
        last.contains(&format!(
            "allocator shim loaded into process {pid}, now taken out again"
        )),
        "{last}"
    );
    assert_eq!(r1["exact"], true, "{}", r1["notes"]);
    assert!(r1["tracing_started"].is_string());
    // While attached the GOT entry pointed into the shim; now into libc again, the shim unused.
    let mut during = Vec::new();
    let mut after = Vec::new();
    while after.len() < 4 {
        let (r, m) = rate(&next_line(&rx));
        if m.contains("etwkit_heapshim") {
            assert!(after.is_empty(), "the GOT entry went back to the shim");
            during.push(r);
        } else if !during.is_empty() {
            assert_eq!(m, "libc.so.6");
            after.push(r);
        }
    }
    assert!(!during.is_empty(), "no interval saw the shim in the GOT");
    let recovered = median(after[1..].to_vec());
    eprintln!(
        "untraced {untraced:.0}/s, attached {:?}, after detach {recovered:.0}/s",
        during
    );
    assert!(
        recovered > 0.3 * untraced,
        "rate after detach {recovered:.0}/s vs {untraced:.0}/s before"
    );
    assert_eq!(
        tasks(pid),
        threads_before,
        "the shim's control thread is still there"
    );
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains("libetwkit_heapshim"),
        "the shim stays mapped (unused)"
    );

    // A second attach works.
    let (r2, last) = heap(&["--pid", &pid.to_string(), "--duration", "0.5"]);
    assert!(last.contains("now taken out again"), "{last}");
    assert_eq!(r2["exact"], true, "{}", r2["notes"]);

    let mut totals = None;
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(30)) {
        if let Some(rest) = l.strip_prefix("TRACED ") {
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            totals = Some(v);
        }
    }
    assert!(child.wait().unwrap().success());
    let t = totals.expect("TRACED line");
    assert_eq!(t[2], 0, "allocations failed");
    let sum = |k: &str| -> u64 {
        [&r1, &r2]
            .iter()
            .map(|r| r["processes"][0][k].as_u64().unwrap())
            .sum()
    };
    // Every call that reached the shim, counted by the program itself, is in the reports: mallocs
    // as allocations; frees as frees, or frees of blocks allocated before tracing started.
    assert_eq!(sum("allocs"), t[0], "mallocs");
    assert_eq!(sum("frees") + sum("frees_of_unknown_blocks"), t[1], "frees");
}

#[test]
fn killed_etwkit_leaves_the_target_running() {
    if !common::require_root("killed_etwkit_leaves_the_target_running") {
        return;
    }
    let _serial = serial();
    let bin = compile(
        "cc",
        "attach_storm.c",
        "attach_storm_kill",
        &["-fno-plt", "-ldl"],
    );
    let (mut child, rx) = start(Command::new(&bin).arg("5"));
    let pid = child.id();
    let _ = next_line(&rx);
    let mut etwkit = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(["heap", "--pid", &pid.to_string()])
        .env_remove("ETWKIT_HEAPSHIM")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let (_, m) = rate(&next_line(&rx));
        if m.contains("etwkit_heapshim") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "never attached");
    }
    etwkit.kill().unwrap(); // SIGKILL
    etwkit.wait().unwrap();
    // The shim notices, stops recording and restores the GOT; the program goes on allocating.
    let mut back = false;
    let mut totals = None;
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(30)) {
        if l.starts_with("RATE") {
            let (r, m) = rate(&l);
            if m == "libc.so.6" {
                back = true;
            } else {
                assert!(!back, "the shim came back");
            }
            if back {
                assert!(r > 0.0);
            }
        } else if let Some(rest) = l.strip_prefix("TRACED ") {
            totals = Some(rest.to_string());
        }
    }
    assert!(back, "the GOT entry never went back to libc");
    assert!(child.wait().unwrap().success());
    let totals = totals.expect("TRACED line");
    assert!(totals.ends_with(" 0"), "failed allocations: {totals}");
}

#[test]
fn attach_to_cxx_and_python() {
    if !common::require_root("attach_to_cxx_and_python") {
        return;
    }
    let _serial = serial();
    let bin = compile("g++", "attach_cxx.cpp", "attach_cxx", &[]);
    let (mut child, rx) = start(Command::new(&bin).arg("4"));
    assert_eq!(next_line(&rx), "READY");
    std::thread::sleep(Duration::from_millis(300));
    let (r, last) = heap(&["--pid", &child.id().to_string(), "--duration", "1"]);
    assert!(
        last.contains("allocator shim loaded into process"),
        "{last}"
    );
    assert_eq!(r["exact"], true, "{}", r["notes"]);
    // operator new calls malloc through libstdc++'s GOT: the caller shows under the allocator.
    let site = r["top_allocating_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| {
            g["frames"].as_array().unwrap().iter().any(|f| {
                f["function"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("cxx_attach_site"))
            })
        });
    assert!(site, "{}", r["top_allocating_stacks"]);
    assert!(r["processes"][0]["allocs"].as_u64().unwrap() > 100);
    assert!(child.wait().unwrap().success());
    drop(rx);

    let script = "import time\nkept = []\nfor i in range(400):\n    kept.append(bytearray(1000 + i))\n    time.sleep(0.01)\n";
    let (mut py, _rx) = start(Command::new("python3").args(["-c", script]));
    std::thread::sleep(Duration::from_millis(800));
    let etl = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("attach_python.etl");
    let (r, last) = heap(&[
        "--pid",
        &py.id().to_string(),
        "--duration",
        "1",
        "-o",
        etl.to_str().unwrap(),
    ]);
    assert!(
        last.contains("allocator shim loaded into process"),
        "{last}"
    );
    assert_eq!(r["exact"], true, "{}", r["notes"]);
    // ~100 bytearrays of 1000+ bytes a second, all kept.
    let big: u64 = r["outstanding_by_stack"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["bytes"].as_u64().unwrap() >= 1000 * g["count"].as_u64().unwrap())
        .map(|g| g["count"].as_u64().unwrap())
        .sum();
    assert!(big >= 50, "{}", r["outstanding_by_stack"]);
    let (saved, _) = heap(&["--report", etl.to_str().unwrap()]);
    assert_eq!(saved["processes"], r["processes"]);
    assert_eq!(saved["outstanding_by_stack"], r["outstanding_by_stack"]);
    // The file says when tracing started, as the live report did.
    assert!(r["tracing_started"].is_string(), "{r}");
    assert_eq!(saved["tracing_started"], r["tracing_started"]);
    assert!(py.wait().unwrap().success());
}

/// A static binary cannot load the shim: `--pid` falls back to uprobes and the final line says why
/// in one sentence.
#[test]
fn attach_to_static_binary_falls_back_to_uprobes() {
    if !common::require_root("attach_to_static_binary_falls_back_to_uprobes") {
        return;
    }
    let _serial = serial();
    let bin = compile("cc", "attach_storm.c", "attach_storm_static", &["-static"]);
    let (mut child, rx) = start(Command::new(&bin).args(["3", "1"]));
    let _ = next_line(&rx);
    let pid = child.id();
    let (r, last) = heap(&["--pid", &pid.to_string(), "--duration", "0.5"]);
    assert!(
        last.contains("traced with uprobes, because the allocator shim cannot be loaded")
            && last.contains(&format!("process {pid} has no glibc libc.so mapped")),
        "{last}"
    );
    assert!(r["operations"].as_u64().is_some());
    // Keep reading its lines until it ends (a closed pipe would kill it).
    assert!(child.wait().unwrap().success());
    drop(rx);
}

/// A program whose one thread spends its time inside malloc and free, attached to again and again:
/// the shim is loaded only where that thread is outside the allocator (loading it from inside
/// malloc re-enters the allocator halfway through an update; before this was checked, such a
/// program aborted in glibc's sysmalloc or hung within three attaches). The program checks marks
/// at both ends of every block it frees.
#[test]
fn attach_to_a_thread_living_in_malloc_keeps_its_heap_sound() {
    if !common::require_root("attach_to_a_thread_living_in_malloc_keeps_its_heap_sound") {
        return;
    }
    let _serial = serial();
    let bin = compile("cc", "attach_walk.c", "attach_walk", &[]);
    let (child, rx) = start(Command::new(&bin).arg("60"));
    let mut child = Reaped(child);
    assert_eq!(next_line(&rx), "READY");
    let pid = child.0.id();
    for round in 0..8 {
        let (r, last) = heap(&["--pid", &pid.to_string(), "--duration", "0.2"]);
        assert!(
            last.contains(&format!(
                "allocator shim loaded into process {pid}, now taken out again"
            )),
            "attach {round}: {last}"
        );
        assert_eq!(r["exact"], true, "attach {round}: {}", r["notes"]);
        assert!(
            r["processes"][0]["allocs"].as_u64().unwrap() > 1000,
            "attach {round}: {}",
            r["processes"][0]
        );
    }
    // SIGTERM ends its walk: it frees (and checks) every block it holds, then reports.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let done = next_line(&rx);
    let status = child.0.wait().unwrap();
    assert!(
        done.starts_with("DONE ") && done.ends_with(" BAD 0"),
        "{done}"
    );
    assert!(status.success(), "{status:?}");
}

/// A program whose threads all wait on a lock: any of them may be waiting on the allocator's, so
/// none is borrowed; after trying for a while etwkit says why and traces with uprobes, and leaves
/// both threads waiting where they were.
#[test]
fn attach_to_threads_waiting_on_locks_falls_back_to_uprobes() {
    if !common::require_root("attach_to_threads_waiting_on_locks_falls_back_to_uprobes") {
        return;
    }
    let _serial = serial();
    let bin = compile("cc", "attach_locked.c", "attach_locked", &[]);
    let (child, rx) = start(&mut Command::new(&bin));
    let child = Reaped(child);
    assert_eq!(next_line(&rx), "READY");
    let pid = child.0.id();
    let (r, last) = heap(&["--pid", &pid.to_string(), "--duration", "0.3"]);
    assert!(
        last.contains("traced with uprobes, because the allocator shim cannot be loaded")
            && last.contains(&format!(
                "no thread of process {pid} could be stopped outside the C library"
            )),
        "{last}"
    );
    assert!(r["operations"].as_u64().is_some(), "{r}");
    // Both threads still wait on the lock, untraced, in the futex call they were in.
    for tid in thread_ids(pid) {
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap();
        assert!(syscall.starts_with("202 "), "thread {tid}: {syscall}");
        let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
        assert!(status.contains("TracerPid:\t0\n"), "thread {tid}: {status}");
    }
    drop(child);
    drop(rx);
}

/// The thread ids of `pid`.
fn thread_ids(pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    v.sort();
    assert_eq!(v.len(), 2, "{v:?}");
    v
}

/// `--follow-forks`: a child forked after the attach is traced under its own pid (its 100 kept
/// blocks found at its allocation site); without the flag it is not. Ctrl-C (SIGINT) ends tracing
/// like --duration.
#[test]
fn attach_follows_forks_when_asked() {
    if !common::require_root("attach_follows_forks_when_asked") {
        return;
    }
    let _serial = serial();
    let bin = compile("cc", "fork_child.c", "fork_child", &[]);
    for follow in [true, false] {
        let (mut child, rx) = start(Command::new(&bin).args(["3", "1.2"]));
        assert_eq!(next_line(&rx), "READY");
        let pid = child.id();
        let mut args = vec!["heap".to_string(), "--pid".into(), pid.to_string()];
        args.extend(["--format".into(), "json".into()]);
        if follow {
            args.push("--follow-forks".into());
        }
        let etwkit = Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .args(&args)
            .env_remove("ETWKIT_HEAPSHIM")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The child is forked at 1.2 s and lives 0.2 s; stop at 2 s with Ctrl-C.
        std::thread::sleep(Duration::from_millis(2000));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(etwkit.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let out = etwkit.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("now taken out again"), "{stderr}");
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let kids: Vec<&serde_json::Value> = r["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["pid"] != pid)
            .collect();
        if follow {
            assert_eq!(kids.len(), 1, "{}", r["processes"]);
            let site = r["outstanding_by_stack"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["frames"][0]["function"] == "child_allocation_site")
                .unwrap_or_else(|| panic!("{}", r["outstanding_by_stack"]));
            assert_eq!(
                (site["count"].as_u64(), site["bytes"].as_u64()),
                (Some(100), Some(77_700))
            );
        } else {
            assert!(kids.is_empty(), "{}", r["processes"]);
        }
        assert!(child.wait().unwrap().success());
        drop(rx);
    }
}

/// Python threads started and ended all the time, blocks freed on other threads than the one that
/// allocated them, addresses reused at once: attached, every free still meets its own allocation
/// (the report is exact). Three attaches in a row.
#[test]
fn attach_to_python_threads_stays_exact() {
    if !common::require_root("attach_to_python_threads_stays_exact") {
        return;
    }
    let _serial = serial();
    let script = "import threading, time\n\
def work():\n    x = [bytearray(100) for _ in range(2000)]\n    time.sleep(0.01)\n\
t0 = time.time()\n\
while time.time() - t0 < 6:\n    ts = [threading.Thread(target=work) for _ in range(4)]\n    \
for t in ts: t.start()\n    for t in ts: t.join()\n";
    let (mut py, _rx) = start(Command::new("python3").args(["-c", script]));
    std::thread::sleep(Duration::from_millis(700));
    for _ in 0..3 {
        let (r, last) = heap(&["--pid", &py.id().to_string(), "--duration", "1"]);
        assert!(
            last.contains("allocator shim loaded into process"),
            "{last}"
        );
        assert_eq!(r["exact"], true, "{}", r["notes"]);
        assert!(r["processes"][0]["allocs"].as_u64().unwrap() > 1000);
    }
    assert!(py.wait().unwrap().success());
}

/// Runs `etwkit heap --pid PID --duration 1` with `ETWKIT_INJECT_DIE_AT=step` (etwkit SIGKILLs itself
/// at that step of the injection); true when it died that way.
fn heap_dying_at(pid: u32, step: u32) -> bool {
    let st = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .args(["heap", "--pid", &pid.to_string(), "--duration", "1"])
        .args(["--format", "json"])
        .env_remove("ETWKIT_HEAPSHIM")
        .env("ETWKIT_INJECT_DIE_AT", step.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    std::os::unix::process::ExitStatusExt::signal(&st) == Some(9) // SIGKILL
}

/// Injection steps of `ETWKIT_INJECT_DIE_AT` (see etwkit::live::linux::heap::inject::die_at).
const INJECT_STEPS: u32 = 9;

#[test]
fn killed_at_every_step_of_the_injection_leaves_the_target_correct() {
    if !common::require_root("killed_at_every_step_of_the_injection_leaves_the_target_correct") {
        return;
    }
    let _serial = serial();
    let bin = compile(
        "cc",
        "attach_storm.c",
        "attach_storm_steps",
        &["-fno-plt", "-ldl"],
    );
    let (mut child, rx) = start(Command::new(&bin).args(["25", "2"]));
    let pid = child.id();
    let _ = next_line(&rx);
    for step in 1..=INJECT_STEPS {
        assert!(heap_dying_at(pid, step), "etwkit did not reach step {step}");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists()
                && child.try_wait().unwrap().is_none(),
            "the target died after etwkit was killed at step {step}"
        );
    }
    // Killed from outside after varied delays (any point of the injection or the trace).
    for delay_ms in [0u64, 1, 2, 4, 7, 12, 20, 35, 60, 100] {
        let mut e = Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .args(["heap", "--pid", &pid.to_string(), "--format", "json"])
            .env_remove("ETWKIT_HEAPSHIM")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        e.kill().unwrap();
        e.wait().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the target died (kill after {delay_ms} ms)"
        );
    }
    // Still attachable, and exact.
    std::thread::sleep(Duration::from_millis(500));
    let (r, last) = heap(&["--pid", &pid.to_string(), "--duration", "1"]);
    assert!(last.contains("now taken out again"), "{last}");
    assert_eq!(r["exact"], true, "{}", r["notes"]);
    // The program went on allocating through all of it, untraced at the end, and exits normally.
    let mut lines = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(40)) {
        lines.push(l);
    }
    let rates: Vec<(f64, String)> = lines
        .iter()
        .filter(|l| l.starts_with("RATE"))
        .map(|l| rate(l))
        .collect();
    let tail = &rates[rates.len().saturating_sub(3)..];
    assert!(
        tail.iter().all(|(r, m)| *r > 0.0 && m == "libc.so.6"),
        "{tail:?}"
    );
    let totals = lines
        .iter()
        .find_map(|l| l.strip_prefix("TRACED "))
        .expect("TRACED line");
    assert!(totals.ends_with(" 0"), "failed allocations: {totals}");
    assert!(child.wait().unwrap().success());
}

/// A single-threaded program that never sleeps (the borrowed thread is interrupted mid-computation,
/// not in a system call) and checks its floating-point results every round: the loader stub must
/// give back every register, vector state included.
const BUSY_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double secs = atof(argv[1]), t0 = now();
    long rounds = 0, bad = 0;
    volatile double seed = 1.5;
    while (now() - t0 < secs) {
        for (int k = 0; k < 1000; k++) {
            double a[16], s = 0, step = seed;
            for (int i = 0; i < 16; i++) a[i] = i * step + k;
            for (int i = 0; i < 16; i++) s += a[i] * a[i];
            /* sum of (1.5 i + k)^2 for i < 16, in closed form (exact in doubles) */
            if (s != 2.25 * 1240 + 3.0 * k * 120 + 16.0 * k * k) bad++;
            char *p = malloc(32 + (k & 63));
            if (!p) { bad++; continue; }
            memset(p, k, 32);
            if (p[31] != (char)k) bad++;
            free(p);
        }
        rounds++;
    }
    printf("ROUNDS %ld BAD %ld\n", rounds, bad);
    return bad ? 3 : 0;
}
"#;

#[test]
fn killed_injection_into_a_busy_thread_keeps_its_registers() {
    if !common::require_root("killed_injection_into_a_busy_thread_keeps_its_registers") {
        return;
    }
    let _serial = serial();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join("attach_busy.c");
    std::fs::write(&src, BUSY_C).unwrap();
    let bin = dir.join("attach_busy");
    let st = Command::new("cc")
        .args(["-O2", "-mavx2", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let (mut child, rx) = start(Command::new(&bin).arg("12"));
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(300));
    for step in 1..=INJECT_STEPS {
        assert!(heap_dying_at(pid, step), "etwkit did not reach step {step}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (r, last) = heap(&["--pid", &pid.to_string(), "--duration", "1"]);
    assert!(last.contains("now taken out again"), "{last}");
    assert_eq!(r["exact"], true, "{}", r["notes"]);
    let out = next_line(&rx);
    let status = child.wait().unwrap();
    assert!(
        out.starts_with("ROUNDS ") && out.ends_with(" BAD 0"),
        "{out}"
    );
    assert!(status.success(), "{status:?}");
}

/// A root directory for `chroot` holding `bin` (as /prog) and the libraries `ldd` lists for it, plus
/// `extra` libraries from the host's library directory, and an empty /tmp.
fn chroot_dir(name: &str, bin: &std::path::Path, extra: &[&str]) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    std::fs::copy(bin, root.join("prog")).unwrap();
    let ldd = Command::new("ldd").arg(bin).output().expect("ldd");
    let mut libs: Vec<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(str::to_string)
        .collect();
    let libdir = libs
        .iter()
        .find(|l| l.contains("/libc.so"))
        .and_then(|l| l.rsplit_once('/'))
        .map(|(d, _)| d.to_string())
        .expect("libc in ldd output");
    libs.extend(extra.iter().map(|e| format!("{libdir}/{e}")));
    for l in libs {
        let dst = root.join(l.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&l, &dst).unwrap_or_else(|e| panic!("{l}: {e}"));
    }
    root
}

/// Attaches to the storm started by `cmd` (its pid in our namespace is its only `prog_name`
/// process); checks the counts against the program's own and returns the report's final line.
fn attach_in_namespaces(
    cmd: &mut Command,
    prog_name: &str,
) -> (serde_json::Value, String, Vec<u64>) {
    let (mut child, rx) = start(cmd);
    let _ = next_line(&rx);
    // The storm itself (unshare forks it): the process running `prog_name` whose parent is unshare
    // or chroot's child.
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == prog_name)
        })
        .expect("the storm's pid");
    let (r, last) = heap(&["--pid", &pid.to_string(), "--duration", "1"]);
    let mut totals = Vec::new();
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(20)) {
        if let Some(rest) = l.strip_prefix("TRACED ") {
            totals = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
        }
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(totals.len(), 3, "TRACED line");
    if !r["processes"].as_array().unwrap().is_empty() {
        assert_eq!(r["processes"][0]["pid"], pid, "pids as we see them");
    }
    (r, last, totals)
}

#[test]
fn attach_across_namespaces() {
    if !common::require_root("attach_across_namespaces") {
        return;
    }
    let _serial = serial();
    let bin = compile(
        "cc",
        "attach_storm.c",
        "attach_storm_ns",
        &["-fno-plt", "-ldl"],
    );
    let exact = |r: &serde_json::Value, last: &str, t: &[u64]| {
        assert!(last.contains("now taken out again"), "{last}");
        assert_eq!(r["exact"], true, "{}", r["notes"]);
        let p = &r["processes"][0];
        assert_eq!(p["allocs"].as_u64().unwrap(), t[0], "mallocs");
        assert_eq!(
            p["frees"].as_u64().unwrap() + p["frees_of_unknown_blocks"].as_u64().unwrap(),
            t[1],
            "frees"
        );
        assert_eq!(t[2], 0, "failed allocations");
    };
    // Own mount and pid namespaces (the shim's path is the same file there; its pid differs).
    let (r, last, t) = attach_in_namespaces(
        Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--mount-proc"])
            .arg(&bin)
            .args(["3", "1"]),
        "attach_storm_ns",
    );
    exact(&r, &last, &t);
    // Own root (chroot), network, mount and pid namespaces: the shim is copied into its /tmp and
    // connects back through a socket made in its network namespace.
    // (With /proc mounted inside: the shim watches its threads there to detach exactly.)
    let root = chroot_dir("attach_chroot", &bin, &["libgcc_s.so.1"]);
    std::fs::create_dir_all(root.join("proc")).unwrap();
    let (r, last, t) = attach_in_namespaces(
        Command::new("unshare")
            .args(["--mount", "--pid", "--net", "--fork"])
            .arg(format!("--mount-proc={}", root.join("proc").display()))
            .arg("chroot")
            .arg(&root)
            .args(["/prog", "3", "1"]),
        "prog",
    );
    exact(&r, &last, &t);
    assert!(std::fs::read_dir(root.join("tmp")).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("libetwkit_heapshim-")));
    // A root without a library the shim needs: one sentence naming it, then uprobes.
    let root = chroot_dir("attach_chroot_bare", &bin, &[]);
    let (r, last, _) = attach_in_namespaces(
        Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "chroot"])
            .arg(&root)
            .args(["/prog", "3", "1"]),
        "prog",
    );
    assert!(
        last.contains("traced with uprobes")
            && last.contains("lacks libgcc_s.so.1, which the shim needs"),
        "{last}"
    );
    assert!(r["operations"].as_u64().unwrap() > 0);
}
