//! Helper workloads as processes of their own (used by the live tests, the storm benchmark and
//! `etwkit`'s demo):
//! - no argument: the built-in network workload; prints its facts as one JSON line;
//! - `storm N`: N `close(-1)` syscalls (each fails with EBADF), then prints N.

fn main() {
    #[cfg(target_os = "linux")]
    {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.first().map(String::as_str) == Some("storm") {
            let n: u64 = args
                .get(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(1_000_000);
            etwkit::live::linux::workload::storm(n);
            println!("{n}");
            return;
        }
        match etwkit::live::linux::workload::run() {
            Ok(f) => println!("{}", serde_json::to_string(&f).expect("facts serialize")),
            Err(e) => {
                eprintln!("etwkit-netwl: {e}");
                std::process::exit(1);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("etwkit-netwl: Linux only");
        std::process::exit(1);
    }
}
