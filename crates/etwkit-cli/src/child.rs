//! The command a live subcommand traces (`trace`, the demo; `heap` and `net` likewise): its stdout
//! never mixes into etwkit's own stdout, and its exit status becomes etwkit's.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use anyhow::Context;

/// A command from `-- CMD ARGS...`, with its stdout sent to etwkit's stderr, or to `stdout_file`
/// when the user names one: etwkit's stdout carries only etwkit's output (JSON, CSV, tables).
pub fn command(argv: &[String], stdout_file: Option<&Path>) -> anyhow::Result<Command> {
    let (prog, args) = argv.split_first().context("no command given after `--`")?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    cmd.stdout(stdout_target(stdout_file)?);
    Ok(cmd)
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
