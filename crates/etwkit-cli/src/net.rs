//! `etwkit net`: one row per socket (who, to whom, how much, how long, what failed), from ETL files
//! with Microsoft-Windows-Winsock-AFD events or from a live trace of the Winsock provider.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::bail;
use etwkit::analysis::net::{
    fmt_addr, NetAnalyzer, NetReport, ProcessTotals, SocketRow, AFD_PROVIDER,
};
use etwkit::decode::Decoder;
use etwkit::live::{Etw, Level};
use etwkit::schema::Registry;
use etwkit::EventRecord;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetFormat {
    Table,
    Json,
    Csv,
}

#[derive(clap::Args)]
pub struct Args {
    /// ETL files to analyse (none: trace live).
    files: Vec<PathBuf>,
    /// Live: trace only this process (every thread and child). Repeatable.
    #[arg(long)]
    pid: Vec<u32>,
    /// Live: stop after this many seconds (otherwise at Ctrl-C, or when the command exits).
    #[arg(long, value_parser = crate::child::parse_seconds)]
    duration: Option<f64>,
    /// Output: a table, JSON lines (one object per socket or process), or CSV.
    #[arg(long, value_enum, default_value = "table")]
    format: NetFormat,
    /// Only the sockets where something went wrong, each failure with its reason.
    #[arg(long)]
    failures: bool,
    /// Totals per process and per remote endpoint instead of one row per socket.
    #[arg(long)]
    by_process: bool,
    /// Live: where the traced command's stdout goes (default: etwkit's stderr).
    #[arg(long, value_name = "FILE")]
    command_stdout: Option<PathBuf>,
    /// Live: a command to start, trace and stop with (its stdout goes to etwkit's stderr); etwkit
    /// exits with its status.
    #[arg(last = true)]
    command: Vec<String>,
}

/// Decodes AFD and kernel process records and feeds the analysis; names live processes as
/// [`etwkit::live::process_name`] does.
pub struct Collector {
    decoder: Decoder,
    pub analyzer: NetAnalyzer,
    live: bool,
    /// Live: names known before tracing (the command, the system's at start), used when the process is
    /// gone by the time its first event arrives (a name read then reflects an `exec` since).
    fallback: std::collections::HashMap<u32, String>,
}

impl Collector {
    pub fn new(live: bool) -> Collector {
        Collector {
            decoder: Decoder::new(Registry::with_builtins()),
            analyzer: NetAnalyzer::new(),
            live,
            fallback: Default::default(),
        }
    }

    /// A name for `pid` should the system not know it when its first event arrives.
    pub fn name_fallback(&mut self, pid: u32, name: String) {
        self.fallback.insert(pid, name);
    }

    pub fn event(&mut self, ev: &EventRecord<'_>) {
        if !NetAnalyzer::wants(ev) {
            return;
        }
        let d = self.decoder.decode(ev);
        if self.analyzer.record(ev, &d) && self.live && !self.analyzer.has_process_name(ev.pid) {
            if let Some(n) =
                etwkit::live::process_name(ev.pid).or_else(|| self.fallback.get(&ev.pid).cloned())
            {
                self.analyzer.set_process_name(ev.pid, n);
            }
        }
    }

    /// The table printed at the end of the demo.
    pub fn print_table(&self) -> anyhow::Result<()> {
        let r = self.analyzer.report();
        let mut out = crate::out::stdout();
        writeln!(out, "\nSockets (etwkit net):")?;
        out.write_all(r.to_table(false).as_bytes())?;
        Ok(())
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    crate::inputs::refuse_repeated(&a.files)?;
    let mut unreadable = 0;
    let mut read = Vec::new();
    let (report, child_code) = if !a.files.is_empty() {
        if !a.pid.is_empty()
            || !a.command.is_empty()
            || a.duration.is_some()
            || a.command_stdout.is_some()
        {
            bail!("files are analysed as they are; --pid, --duration and a command are for live tracing");
        }
        let (r, bad, summaries) = from_files(&a.files)?;
        unreadable = bad;
        read = summaries;
        (r, None)
    } else {
        live(&a)?
    };
    // Each file's damaged spots and missing buffers, as the other commands name them.
    let name_files = a.files.len() > 1;
    let read_issues = || {
        for (path, summary) in &read {
            let prefix = if name_files {
                format!("{}: ", path.display())
            } else {
                String::new()
            };
            crate::issues::warn(summary, &prefix, "read");
        }
    };
    if report.afd_events == 0 {
        read_issues();
        let what = if a.files.is_empty() {
            "the trace".to_string()
        } else {
            a.files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!(
            "etwkit net: {what} holds no Microsoft-Windows-Winsock-AFD events, so there are no sockets to report."
        );
    } else {
        let mut out = std::io::BufWriter::new(crate::out::stdout());
        print(&report, &a, &mut out)?;
        out.flush()?;
        drop(out);
        read_issues();
        for n in &report.notes {
            eprintln!("etwkit net: note: {n}");
        }
        eprintln!(
            "etwkit net: {} sockets ({} with failures) from {} AFD events",
            report.sockets.len(),
            report.failures().count(),
            report.afd_events
        );
    }
    if let Some(code) = child_code.filter(|&c| c != 0) {
        std::process::exit(code);
    }
    if unreadable > 0 {
        // The readable files were reported; the exit status says some were not.
        std::process::exit(1);
    }
    Ok(())
}

/// What was read of each readable file.
type FilesRead = Vec<(PathBuf, etwkit::etl::ReadSummary)>;

/// The report over every readable file, how many could not be opened (each said on stderr), and
/// what was read of each readable one.
fn from_files(files: &[PathBuf]) -> anyhow::Result<(NetReport, usize, FilesRead)> {
    let mut c = Collector::new(false);
    let mut unreadable = 0;
    let mut read = Vec::new();
    let mut last_err = None;
    for file in files {
        let f = match etwkit::etl::EtlFile::open(file) {
            Ok(f) => f,
            Err(e) => {
                unreadable += 1;
                if files.len() > 1 {
                    eprintln!("etwkit net: {e}");
                }
                last_err = Some(e);
                continue;
            }
        };
        let summary = c.analyzer.add_file(&f, &c.decoder);
        read.push((file.clone(), summary));
    }
    if let (true, Some(e)) = (unreadable == files.len(), last_err) {
        return Err(e.into());
    }
    Ok((c.analyzer.report(), unreadable, read))
}

fn live(a: &Args) -> anyhow::Result<(NetReport, Option<i32>)> {
    crate::child::check_program(&a.command)?;
    etwkit::live::check_available()?;
    let etw = Etw::new();
    // Session names are machine-wide (as in ETW): one per etwkit process, so several can run.
    let mut trace = etw.open_trace(&format!("net-{}", std::process::id()), None, None);
    trace.enable(AFD_PROVIDER, 0, Level::VERBOSE)?;
    for &p in &a.pid {
        trace.add_pid(p)?;
    }
    let mut c = Collector::new(true);
    for &p in &a.pid {
        if let Some(n) = etwkit::live::process_name(p) {
            c.name_fallback(p, n);
        }
    }
    let stop = trace.stop_handle();
    crate::trace::stop_on_ctrl_c(&stop);
    let waiter = if a.command.is_empty() {
        trace.start()?;
        None
    } else {
        // The command's own output never mixes with the report on stdout.
        let mut cmd = crate::child::command(&a.command, a.command_stdout.as_deref())?;
        let child = trace.spawn(&mut cmd)?;
        crate::child::set_traced_child(child.id());
        let name = std::path::Path::new(&a.command[0])
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(15).collect::<String>());
        if let Some(n) = name {
            c.name_fallback(child.id(), n);
        }
        Some(crate::child::stop_when_exits(child, stop.clone()))
    };
    crate::child::stop_after(a.duration, &stop);
    let r = trace.process(
        |ev| {
            c.event(ev);
            ControlFlow::Continue(())
        },
        None,
        None,
    );
    let sum = trace.stop(true);
    r?;
    let sum = sum?;
    if sum.events_lost > 0 {
        c.analyzer.add_note(format!(
            "{} events were lost; figures may be short",
            sum.events_lost
        ));
    }
    for i in &sum.issues {
        c.analyzer.add_note(i.clone());
    }
    let code = match waiter {
        Some(w) => {
            let st = w.join().ok().flatten();
            if let Some(st) = st {
                eprintln!("etwkit net: command exited with {st}");
            }
            st.map(crate::child::exit_code)
        }
        None => None,
    };
    Ok((c.analyzer.report(), code))
}

fn print(r: &NetReport, a: &Args, out: &mut dyn Write) -> anyhow::Result<()> {
    let rows: Vec<&SocketRow> = if a.failures {
        r.failures().collect()
    } else {
        r.sockets.iter().collect()
    };
    if a.by_process {
        let procs = by_process(r, a.failures);
        match a.format {
            NetFormat::Json => {
                for p in &procs {
                    serde_json::to_writer(&mut *out, p)?;
                    writeln!(out)?;
                }
            }
            NetFormat::Csv => {
                writeln!(
                    out,
                    "pid,process,protocol,remote,sockets,tx_bytes,rx_bytes,failures"
                )?;
                for p in &procs {
                    for rt in &p.remotes {
                        let cells = [
                            p.pid.to_string(),
                            p.process.clone().unwrap_or_default(),
                            rt.protocol.clone().unwrap_or_default(),
                            fmt_addr(rt.remote.as_ref()),
                            rt.sockets.to_string(),
                            rt.tx_bytes.to_string(),
                            rt.rx_bytes.to_string(),
                            rt.failures.to_string(),
                        ];
                        csv_line(out, &cells)?;
                    }
                }
            }
            NetFormat::Table => out.write_all(by_process_table(&procs).as_bytes())?,
        }
        return Ok(());
    }
    match a.format {
        NetFormat::Json => {
            for s in rows {
                serde_json::to_writer(&mut *out, s)?;
                writeln!(out)?;
            }
        }
        NetFormat::Csv => {
            writeln!(out, "pid,process,protocol,family,local,remote,tx_bytes,rx_bytes,tx_ops,rx_ops,duration_ms,state,outcome,failures,opened,closed,endpoint")?;
            for s in rows {
                let t = |v: Option<i64>| v.map(etwkit::time::format_rfc3339).unwrap_or_default();
                let cells = [
                    s.pid.to_string(),
                    s.process.clone().unwrap_or_default(),
                    s.protocol.clone().unwrap_or_default(),
                    s.family.unwrap_or_default().to_string(),
                    fmt_addr(s.local.as_ref()),
                    fmt_addr(s.remote.as_ref()),
                    s.tx_bytes.to_string(),
                    s.rx_bytes.to_string(),
                    s.tx_ops.to_string(),
                    s.rx_ops.to_string(),
                    format!("{:.3}", s.duration_ms),
                    s.state.to_string(),
                    s.outcome.clone(),
                    s.failures
                        .iter()
                        .map(|f| format!("{} x{}", f.reason, f.count))
                        .collect::<Vec<_>>()
                        .join("; "),
                    t(s.opened),
                    t(s.closed),
                    format!("{:#x}", s.endpoint),
                ];
                csv_line(out, &cells)?;
            }
        }
        NetFormat::Table => out.write_all(r.to_table(a.failures).as_bytes())?,
    }
    Ok(())
}

/// Per-process totals; with `failures_only`, only processes and remotes with failures.
fn by_process(r: &NetReport, failures_only: bool) -> Vec<ProcessTotals> {
    let mut v = r.by_process();
    if failures_only {
        v.retain(|p| p.failures > 0);
        for p in &mut v {
            p.remotes.retain(|r| r.failures > 0);
        }
    }
    v
}

fn by_process_table(procs: &[ProcessTotals]) -> String {
    let mut rows: Vec<[String; 7]> = vec![[
        "PID".into(),
        "PROCESS".into(),
        "REMOTE".into(),
        "SOCKETS".into(),
        "TX".into(),
        "RX".into(),
        "FAILURES".into(),
    ]];
    for p in procs {
        rows.push([
            p.pid.to_string(),
            p.process.clone().unwrap_or_else(|| "?".into()),
            "(all)".into(),
            p.sockets.to_string(),
            p.tx_bytes.to_string(),
            p.rx_bytes.to_string(),
            p.failures.to_string(),
        ]);
        for r in &p.remotes {
            rows.push([
                String::new(),
                String::new(),
                format!(
                    "{} {}",
                    r.protocol.as_deref().unwrap_or("?"),
                    fmt_addr(r.remote.as_ref())
                ),
                r.sockets.to_string(),
                r.tx_bytes.to_string(),
                r.rx_bytes.to_string(),
                r.failures.to_string(),
            ]);
        }
    }
    let mut w = [0usize; 7];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut s = String::new();
    for r in &rows {
        let line = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i >= 3 || i == 0 {
                    format!("{c:>width$}", width = w[i])
                } else {
                    format!("{c:<width$}", width = w[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ");
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

fn csv_line(out: &mut dyn Write, cells: &[String]) -> std::io::Result<()> {
    let line = cells
        .iter()
        .map(|c| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    writeln!(out, "{line}")
}
