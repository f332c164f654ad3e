//! A writer killed with SIGKILL mid-session leaves a file that `stats` reads with every whole buffer,
//! and whose header says it was not closed cleanly.
//!
//! The test re-runs its own binary as the child (selected by an environment variable): the child
//! writes TraceLogging events on 4 CPUs forever, flushing now and then and reporting each flush on
//! stdout; the parent kills it with SIGKILL after a few flushes, while it is writing.

use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::process::{Command, Stdio};

use etwkit::etl::stats::file_stats;
use etwkit::etl::writer::{closed_cleanly, Writer, WriterOptions};
use etwkit::etl::{EtlFile, Order};
use etwkit::tlg::{self, InType, OutType, TlInstance, TlPayload, TlSchemaBuilder};

const CHILD_ENV: &str = "ETWKIT_WRITER_KILL_CHILD";
const CPUS: u64 = 4;
const BUFFER: u32 = 16 * 1024;

fn child(path: &str) -> ! {
    let schema = TlSchemaBuilder::new("Etwkit-KillTest", "Seq")
        .field("cpu", InType::U16, OutType::Default)
        .field("seq", InType::U64, OutType::Default)
        .field("note", InType::CStr8, OutType::Utf8)
        .build()
        .unwrap();
    let mut o = WriterOptions::new(133_000_000_000_000_000);
    o.buffer_size = BUFFER;
    let mut w = Writer::create(path, o).unwrap();
    let mut seq = [0u64; CPUS as usize];
    let mut p = TlPayload::new();
    // Bounded so an orphaned child cannot fill the disk.
    for i in 0..20_000_000u64 {
        let cpu = (i % CPUS) as u16;
        p.clear();
        p.push_u16(cpu)
            .push_u64(seq[cpu as usize])
            .push_cstr("written before the kill");
        let inst = TlInstance {
            pid: 1,
            tid: 2,
            cpu,
            timestamp: 133_000_000_000_000_000 + i as i64,
            ..Default::default()
        };
        w.write_event(&tlg::event_record(&schema, &inst, p.as_bytes()))
            .unwrap();
        seq[cpu as usize] += 1;
        if i % 20_000 == 19_999 {
            w.flush().unwrap();
            println!("flushed {}", i + 1);
        }
    }
    std::process::exit(3);
}

#[test]
fn killed_writer_leaves_a_readable_file() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("writer_killed");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("killed.etl");
    let _ = std::fs::remove_file(&path);
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "killed_writer_leaves_a_readable_file",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let mut flushed = 0u64;
    while flushed < 60_000 {
        let l = lines.next().expect("child ended before flushing").unwrap();
        if let Some(n) = l.strip_prefix("flushed ") {
            flushed = n.parse().unwrap();
        }
    }
    // Let it write a few more whole buffers without a flush (they fill), then kill it mid-write
    // (Child::kill sends SIGKILL on Unix).
    let at_flush = std::fs::metadata(&path).unwrap().len();
    let t = std::time::Instant::now();
    while std::fs::metadata(&path).unwrap().len() < at_flush + 8 * BUFFER as u64
        && t.elapsed() < std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    c.kill().unwrap();
    let status = c.wait().unwrap();
    assert!(!status.success());
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL");
    }

    let len = std::fs::metadata(&path).unwrap().len();
    let f = EtlFile::open(&path).unwrap();
    let s = file_stats(&f);
    assert!(!closed_cleanly(f.header()));
    assert!(!s.closed_cleanly, "stats says not closed cleanly");
    assert_eq!(s.end_time, None);
    // Every whole buffer is read; at most a torn last one is reported.
    let whole = len / BUFFER as u64;
    let torn = len % BUFFER as u64 != 0;
    assert_eq!(s.buffers, whole + torn as u64);
    assert_eq!(s.bad_buffers, torn as u64, "{:?}", s.issues);
    assert_eq!(s.bad_records, 0, "{:?}", s.issues);
    // All flushed events are there (header record + events), and each CPU holds a gap-free prefix of
    // its sequence: whole buffers were written in order, only unwritten buffers were lost.
    assert!(
        s.records > flushed + 1,
        "{} records, {flushed} flushed: buffers filled after the flush are there too",
        s.records
    );
    let mut next = [0u64; CPUS as usize];
    let mut first = true;
    let sum = f.for_each(Order::Time, |r| {
        if first {
            first = false;
            return ControlFlow::Continue(());
        }
        let p = &r.payload;
        let cpu = u16::from_le_bytes([p[0], p[1]]);
        let seq = u64::from_le_bytes(p[2..10].try_into().unwrap());
        assert_eq!(cpu, r.cpu);
        assert_eq!(seq, next[cpu as usize], "cpu {cpu}: gap");
        next[cpu as usize] += 1;
        assert_eq!(&p[10..], b"written before the kill\0");
        ControlFlow::Continue(())
    });
    assert_eq!(sum.records, s.records);
    assert!(next.iter().sum::<u64>() >= flushed);
    eprintln!(
        "killed writer: {len} bytes, {} buffers, {} records ({flushed} flushed before the kill)",
        s.buffers, s.records
    );
}
