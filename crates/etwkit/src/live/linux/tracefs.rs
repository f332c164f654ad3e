//! tracefs: where it is, mounting it, and instances (the Linux equivalent of an ETW session).
//!
//! Instances etwkit creates are named `etwkit-<owner pid>-<n>[-suffix]`. An instance whose owner pid is
//! no longer alive is an orphan left by a killed tracer and is removed by [`cleanup_orphans`]; instances
//! with any other name, or whose owner is alive, are never touched.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::super::LiveError;

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs root, mounting tracefs at `/sys/kernel/tracing` when it is not mounted.
pub fn root() -> Result<PathBuf, LiveError> {
    for c in CANDIDATES {
        let p = Path::new(c);
        if p.join("events").is_dir() && p.join("instances").is_dir() {
            return Ok(p.to_path_buf());
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(LiveError::NotRoot);
    }
    let target = Path::new(CANDIDATES[0]);
    if !target.is_dir() {
        return Err(LiveError::NoTracefs(format!(
            "{} does not exist (kernel without CONFIG_TRACING?)",
            target.display()
        )));
    }
    let src = c"nodev";
    let tgt = c"/sys/kernel/tracing";
    let fstype = c"tracefs";
    // SAFETY: all pointers are valid NUL-terminated strings; data is null (no options).
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(LiveError::NoTracefs(format!(
            "mount -t tracefs nodev /sys/kernel/tracing failed: {e}"
        )));
    }
    if target.join("events").is_dir() {
        Ok(target.to_path_buf())
    } else {
        Err(LiveError::NoTracefs(
            "tracefs mounted but has no events/ directory".into(),
        ))
    }
}

/// Writes `value` to a tracefs control file (one write call, as the kernel expects).
pub fn write(path: &Path, value: &str) -> Result<(), LiveError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(false)
        .open(path)
        .map_err(|e| LiveError::io(path, e))?;
    f.write_all(value.as_bytes())
        .map_err(|e| LiveError::io(path, e))
}

/// Appends to a shared control file (`set_event_pid`, `uprobe_events`): never truncates what others wrote.
/// Appends `value` to a tracefs control file (never truncating it), retrying while the kernel says
/// the target is busy (see [`retry_busy`]).
pub fn append(path: &Path, value: &str) -> Result<(), LiveError> {
    retry_busy(|| {
        fs::OpenOptions::new()
            .append(true)
            .open(path)?
            .write_all(value.as_bytes())
    })
    .map_err(|e| LiveError::io(path, e))
}

pub fn read(path: &Path) -> Result<String, LiveError> {
    fs::read_to_string(path).map_err(|e| LiveError::io(path, e))
}

/// Parses an etwkit instance name into (owner pid, rest).
pub fn parse_instance_name(name: &str) -> Option<(u32, &str)> {
    let rest = name.strip_prefix("etwkit-")?;
    let (pid, tail) = rest.split_once('-')?;
    Some((pid.parse().ok()?, tail))
}

pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The name tracefs saved for `pid` while events were enabled (`saved_cmdlines`: lines `PID COMM`,
/// the comm each task had when it last ran with events being recorded, in any instance), for a
/// process already gone. Reads the file of the mounted tracefs (never mounts it); `None` when no
/// tracefs is mounted, the pid is not there, or its name was not recorded (`<...>`).
pub fn saved_cmdline(pid: u32) -> Option<String> {
    let root = CANDIDATES
        .iter()
        .map(Path::new)
        .find(|p| p.join("saved_cmdlines").is_file())?;
    let text = fs::read_to_string(root.join("saved_cmdlines")).ok()?;
    parse_saved_cmdline(&text, pid)
}

/// The comm of `pid` in the text of `saved_cmdlines`.
fn parse_saved_cmdline(text: &str, pid: u32) -> Option<String> {
    text.lines().find_map(|l| {
        let (p, comm) = l.split_once(' ')?;
        (p.parse::<u32>().ok()? == pid && !comm.is_empty() && comm != "<...>")
            .then(|| comm.to_string())
    })
}

/// Every instance name under `root/instances`.
pub fn instances(root: &Path) -> Result<Vec<String>, LiveError> {
    let dir = root.join("instances");
    let mut v = Vec::new();
    for e in fs::read_dir(&dir).map_err(|e| LiveError::io(&dir, e))? {
        let e = e.map_err(|e| LiveError::io(&dir, e))?;
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            v.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    v.sort();
    Ok(v)
}

/// Removes `etwkit-<pid>-*` instances whose owner pid is dead. Returns the names removed.
pub fn cleanup_orphans(root: &Path) -> Result<Vec<String>, LiveError> {
    let mut removed = Vec::new();
    for name in instances(root)? {
        let Some((pid, _)) = parse_instance_name(&name) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        // Best effort: another tracer may be removing the same orphan right now (ENOENT/ENODEV),
        // or a reader may still hold it open (EBUSY). Neither stops a new session from starting.
        if remove_instance(root, &name).is_ok() {
            removed.push(name);
        }
    }
    Ok(removed)
}

/// Runs `op` again while it fails with EBUSY, for up to about a second. tracefs refuses to remove an
/// instance while any process holds one of its files open, and a uprobe while an instance has it
/// enabled; both are brief (a child we forked holds our descriptors until its exec, another tool may
/// be listing the instance), so waiting a little turns a spurious failure into success.
pub fn retry_busy<T>(mut op: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    let mut tries = 0;
    loop {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Stops and removes one instance.
pub fn remove_instance(root: &Path, name: &str) -> Result<(), LiveError> {
    let dir = root.join("instances").join(name);
    let _ = write(&dir.join("tracing_on"), "0");
    retry_busy(|| fs::remove_dir(&dir)).map_err(|e| LiveError::io(&dir, e))
}

/// Every thread id of a process (`/proc/PID/task/*`).
pub fn threads_of(pid: u32) -> Result<Vec<u32>, LiveError> {
    let dir = PathBuf::from(format!("/proc/{pid}/task"));
    let rd = fs::read_dir(&dir).map_err(|_| LiveError::NoSuchProcess(pid))?;
    let mut v: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort();
    Ok(v)
}

/// Per-CPU ring statistics (`per_cpu/cpuN/stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuStats {
    pub entries: u64,
    pub overrun: u64,
    /// Events dropped because the writer wrapped onto a page still being committed (a writer
    /// interrupted mid-event while nested writers filled the ring): lost, and counted nowhere else.
    pub commit_overrun: u64,
    pub dropped: u64,
    pub read_events: u64,
}

pub fn cpu_stats(instance: &Path, cpu: usize) -> Result<CpuStats, LiveError> {
    let p = instance.join(format!("per_cpu/cpu{cpu}/stats"));
    let text = read(&p)?;
    let mut s = CpuStats::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v: u64 = v.trim().parse().unwrap_or(0);
        match k.trim() {
            "entries" => s.entries = v,
            "overrun" => s.overrun = v,
            "commit overrun" => s.commit_overrun = v,
            "dropped events" => s.dropped = v,
            "read events" => s.read_events = v,
            _ => {}
        }
    }
    Ok(s)
}

/// The CPUs tracefs keeps rings for.
pub fn cpus(instance: &Path) -> Result<Vec<usize>, LiveError> {
    let dir = instance.join("per_cpu");
    let mut v: Vec<usize> = fs::read_dir(&dir)
        .map_err(|e| LiveError::io(&dir, e))?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("cpu")?
                .parse()
                .ok()
        })
        .collect();
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn saved_cmdlines_lines() {
        let text = "1 systemd\n42 kworker/0:1\n7 <...>\n420 a b\n";
        assert_eq!(
            parse_saved_cmdline(text, 42).as_deref(),
            Some("kworker/0:1")
        );
        assert_eq!(parse_saved_cmdline(text, 4), None);
        assert_eq!(parse_saved_cmdline(text, 7), None, "a name not recorded");
        assert_eq!(parse_saved_cmdline(text, 420).as_deref(), Some("a b"));
    }

    #[test]
    fn instance_names() {
        assert_eq!(parse_instance_name("etwkit-123-4"), Some((123, "4")));
        assert_eq!(
            parse_instance_name("etwkit-123-4-net"),
            Some((123, "4-net"))
        );
        assert_eq!(parse_instance_name("etwkit-x-4"), None);
        assert_eq!(parse_instance_name("lp_afd"), None);
    }
}
