//! The default job: with no command given, a built-in network workload (loopback TCP echo over IPv4
//! and IPv6, a refused connect, a bind to a busy port, a peer reset, a UDP burst into a small receive
//! buffer) runs under the Winsock provider and its events print.

use etwkit::live::{Etw, Level};
use etwkit::sink::Format;

use crate::trace::{report, stop_on_ctrl_c, Printer};

/// The provider the demo enables.
const WINSOCK: &str = "Microsoft-Windows-Winsock-AFD";

/// The hidden `__demo-workload` subcommand: the workload itself, in the traced child (the
/// platform's own, from `etwkit::live`).
pub fn workload() -> anyhow::Result<()> {
    let facts = etwkit::live::demo_workload()?;
    eprintln!("etwkit demo workload: {facts}");
    Ok(())
}

pub fn run() -> anyhow::Result<()> {
    etwkit::live::check_available()?;
    eprintln!("etwkit: no command given; tracing the built-in network demo under {WINSOCK} (see `etwkit --help`)");
    let etw = Etw::new();
    let mut trace = etw.open_trace("demo", None, None);
    trace.enable(WINSOCK, 0, Level::VERBOSE)?;
    let stop = trace.stop_handle();
    stop_on_ctrl_c(&stop);
    let exe = std::env::current_exe()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("__demo-workload")
        .stdout(crate::child::stdout_target(None)?);
    let child = trace.spawn(&mut cmd)?;
    crate::child::set_traced_child(child.id());
    let waiter = crate::child::stop_when_exits(child, stop.clone());
    let mut printer = Printer::new(
        Format::Table,
        Box::new(std::io::BufWriter::new(crate::out::stdout())),
    );
    let mut net = crate::net::Collector::new(true);
    let r = trace.process(
        |ev| {
            net.event(ev);
            printer.event(ev)
        },
        None,
        None,
    );
    let sum = trace.stop(true);
    printer.finish()?;
    drop(printer);
    r?;
    let sum = sum?;
    let st = waiter
        .join()
        .map_err(|_| anyhow::anyhow!("demo waiter panicked"))?
        .ok_or_else(|| anyhow::anyhow!("waiting for the demo workload failed"))?;
    report(&sum, Format::Table, &mut crate::out::stdout())?;
    net.print_table()?;
    if !st.success() {
        anyhow::bail!("the demo workload failed ({st})");
    }
    Ok(())
}
