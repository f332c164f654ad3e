//! The command a live subcommand traces (`trace`, the demo; `heap` and `net` likewise): its stdout
//! never mixes into etwkit's own stdout, and its exit status becomes etwkit's.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use anyhow::Context;

/// A command from `-- CMD ARGS...`, with its stdout sent to etwkit's stderr, or to `stdout_file`
/// when the user names one: etwkit's stdout carries only etwkit's output (JSON, CSV, tables).
pub fn command(argv: &[String], stdout_file: Option<&Path>) -> anyhow::Result<Command> {
    check_program(argv)?;
    let (prog, args) = argv.split_first().context("no command given after `--`")?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    cmd.stdout(stdout_target(stdout_file)?);
    Ok(cmd)
}

/// Refuses a `-- CMD` whose program cannot be run, naming it (`cannot run nosuchprog: not found
/// on PATH`): live subcommands call it before any session is created or any line is written, so a
/// script waiting for the armed line is not told to start its workload for a trace that cannot
/// happen. An empty `argv` (no command) passes. Looked up as `execvp` does: a name with a `/` as
/// it is, any other in each directory of `PATH` (`/bin:/usr/bin` when unset). Unix only; Windows
/// names a missing program when it fails to start it.
pub fn check_program(argv: &[String]) -> anyhow::Result<()> {
    let Some(prog) = argv.first() else {
        return Ok(());
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let runnable = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if prog.contains('/') {
            let p = Path::new(prog);
            return match std::fs::metadata(p) {
                Err(e) => anyhow::bail!("cannot run {prog}: {e}"),
                Ok(m) if m.is_dir() => anyhow::bail!("cannot run {prog}: it is a directory"),
                Ok(_) if !runnable(p) => anyhow::bail!("cannot run {prog}: it is not executable"),
                Ok(_) => Ok(()),
            };
        }
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
        let found = std::env::split_paths(&path).any(|dir| {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".").to_path_buf()
            } else {
                dir
            };
            runnable(&dir.join(prog))
        });
        if !found {
            anyhow::bail!("cannot run {prog}: not found on PATH");
        }
    }
    #[cfg(not(unix))]
    let _ = prog;
    Ok(())
}

/// Where a traced command's stdout goes: the named file, or etwkit's stderr.
pub fn stdout_target(file: Option<&Path>) -> anyhow::Result<Stdio> {
    Ok(match file {
        Some(p) => Stdio::from(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ),
        None => {
            #[cfg(unix)]
            let dup = {
                use std::os::fd::AsFd;
                std::io::stderr().as_fd().try_clone_to_owned()
            };
            #[cfg(windows)]
            let dup = {
                use std::os::windows::io::AsHandle;
                std::io::stderr().as_handle().try_clone_to_owned()
            };
            Stdio::from(dup.context("cannot duplicate stderr for the command's output")?)
        }
    })
}

/// The exit code etwkit ends with for a traced command's status: its code, or 128 + the signal
/// that killed it (as a shell reports it).
pub fn exit_code(status: ExitStatus) -> i32 {
    if let Some(c) = status.code() {
        return c;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    1
}

/// Waits for a traced command on its own thread; once it has exited (and the kernel's tail of its
/// work, FINs, resets, drops, had time to reach the rings), stops the trace. Joins to its status.
pub fn stop_when_exits(
    mut child: std::process::Child,
    stop: etwkit::live::StopHandle,
) -> std::thread::JoinHandle<Option<ExitStatus>> {
    std::thread::spawn(move || {
        let st = child.wait();
        std::thread::sleep(std::time::Duration::from_millis(150));
        stop.stop();
        st.ok()
    })
}

/// Parses `--duration S`: a finite, non-negative number of seconds (`inf`, `NaN` and negative
/// values used to panic the timer thread or end the trace at once).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let d: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if d.is_nan() || d < 0.0 || std::time::Duration::try_from_secs_f64(d).is_err() {
        return Err(format!(
            "{s:?} is not a number of seconds from 0 to {}",
            u64::MAX
        ));
    }
    Ok(d)
}

/// `--duration S`: stops the trace after that many seconds.
pub fn stop_after(seconds: Option<f64>, stop: &etwkit::live::StopHandle) {
    if let Some(d) = seconds {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs_f64(d.max(0.0)));
            s.stop();
        });
    }
}

/// SIGTERM and SIGHUP (`timeout`, `kill`, a service manager, a closed terminal) end a live trace
/// the way Ctrl-C does: the session is stopped and removed, an `-o` file closed cleanly, the
/// summary printed. Without this they killed etwkit on the spot, leaving its tracefs instance
/// tracing (an orphan until the next etwkit run) and its `-o` file unclosed. A traced command
/// gets the same signal, so that etwkit ends with its status (128 + N) instead of waiting for it.
#[cfg(unix)]
pub fn stop_on_termination(stop: &etwkit::live::StopHandle) {
    use std::sync::atomic::Ordering;
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let stop = stop.clone();
    INSTALLED.call_once(move || {
        use signal_hook::consts::{SIGHUP, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGHUP]) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "etwkit: warning: SIGTERM and SIGHUP will not stop the trace cleanly: {e}"
                );
                return;
            }
        };
        std::thread::spawn(move || {
            for sig in signals.forever() {
                stop.stop();
                let child = TRACED_CHILD.load(Ordering::SeqCst);
                if let (Ok(pid), Ok(signal)) = (
                    i32::try_from(child),
                    nix::sys::signal::Signal::try_from(sig),
                ) {
                    if pid != 0 {
                        // The command may be gone already: nothing to hand the signal to then.
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
                    }
                }
            }
        });
    });
}

#[cfg(not(unix))]
pub fn stop_on_termination(_stop: &etwkit::live::StopHandle) {}

/// The command a live subcommand started (0: none), to hand a termination signal on to.
static TRACED_CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Records the command a live subcommand started (see [`stop_on_termination`]).
pub fn set_traced_child(pid: u32) {
    TRACED_CHILD.store(pid, std::sync::atomic::Ordering::SeqCst);
}
