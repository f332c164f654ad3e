//! The built-in network workload as a process of its own (used by the live tests and `etwkit`'s demo):
//! prints its facts as one JSON line.

fn main() {
    #[cfg(target_os = "linux")]
    match etwkit::live::linux::workload::run() {
        Ok(f) => println!("{}", serde_json::to_string(&f).expect("facts serialize")),
        Err(e) => {
            eprintln!("etwkit-netwl: {e}");
            std::process::exit(1);
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("etwkit-netwl: Linux only");
        std::process::exit(1);
    }
}
