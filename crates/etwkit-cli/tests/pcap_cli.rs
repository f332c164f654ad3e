//! `etwkit pcap`: PktMon captures as pcapng, checked against pktmon's own etl2pcap output and read
//! back by tshark.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::pcapng::{have_tshark, read as read_pcapng, tshark_fields};
use common::{etwkit, json_lines, samples};

/// `etwkit dump --format json` of a file (of one provider's events), parsed.
fn dump(file: &Path, provider: Option<&str>) -> Vec<serde_json::Value> {
    let mut args = vec!["dump", file.to_str().unwrap(), "--format", "json"];
    if let Some(p) = provider {
        args.extend(["--provider", p]);
    }
    let (ok, json, err) = etwkit(&args);
    assert!(ok, "{err}");
    json_lines(&json)
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[test]
fn demikernel_capture_equals_pktmons_own_pcapng() {
    let Some(s) = samples("demikernel_capture_equals_pktmons_own_pcapng") else {
        return;
    };
    let out = tmp("demikernel.pcapng");
    let (ok, stdout, err) = etwkit(&[
        "pcap",
        s.join("demikernel_PktMon.etl").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(stdout.is_empty());
    assert!(err.contains("wrote 114 packets"), "{err}");
    let ours = read_pcapng(&out);
    let theirs = read_pcapng(&s.join("reference/demikernel_PktMon.cap"));
    assert_eq!(
        theirs.link_types(),
        [1],
        "pktmon's file: one Ethernet interface"
    );
    assert_eq!(ours.packets.len(), theirs.packets.len());
    for (i, (a, b)) in ours.packets.iter().zip(&theirs.packets).enumerate() {
        assert_eq!(
            ours.interfaces[a.interface as usize].link_type, 1,
            "packet {i}: Ethernet"
        );
        assert_eq!(a.data, b.data, "packet {i}: bytes");
        // Ours: 100 ns units (if_tsresol 7); pktmon's: microseconds, truncated.
        assert_eq!(a.timestamp / 10, b.timestamp, "packet {i}: timestamp");
    }
}

#[test]
fn every_pktmon_sample_exports_all_its_packet_events() {
    let Some(s) = samples("every_pktmon_sample_exports_all_its_packet_events") else {
        return;
    };
    let (mut with_packets, mut unnamed) = (0, 0);
    for e in std::fs::read_dir(&s).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with("PktMon.etl") {
            continue;
        }
        let (events, components): (Vec<_>, Vec<_>) = dump(&p, Some("Microsoft-Windows-PktMon"))
            .into_iter()
            .partition(|e| e["id"] == 160 || e["id"] == 170);
        let out = tmp(&format!("{name}.pcapng"));
        let (ok, _, err) = etwkit(&["pcap", p.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(ok, "{name}: {err}");
        let cap = read_pcapng(&out);
        assert_eq!(cap.packets.len(), events.len(), "{name}: {err}");
        if events.is_empty() {
            assert!(
                err.contains("holds no packet events (PktMon or NDIS-PacketCapture)"),
                "{name}: {err}"
            );
            continue;
        }
        with_packets += 1;
        // What the component events (logged when the capture stopped) say of each component.
        let mut described: BTreeMap<u64, Described> = BTreeMap::new();
        for c in &components {
            let p = &c["properties"];
            match c["id"].as_u64().unwrap() {
                20 => {
                    let d = described.entry(p["Id"].as_u64().unwrap()).or_default();
                    d.name = p["Name"].as_str().unwrap().to_string();
                    d.description = p["Description"].as_str().unwrap().to_string();
                }
                65 | 66 => {
                    let d = described
                        .entry(p["ComponentId"].as_u64().unwrap())
                        .or_default();
                    d.addresses
                        .insert(p["IpAddress"].as_str().unwrap().to_string());
                }
                70 if p["Size"] == 6 => {
                    let d = described
                        .entry(p["ComponentId"].as_u64().unwrap())
                        .or_default();
                    d.mac = Some(p["Value"].as_str().unwrap().to_string());
                }
                _ => {}
            }
        }
        for (e, p) in events.iter().zip(&cap.packets) {
            let props = &e["properties"];
            let payload = props["Payload"].as_str().unwrap().trim_start_matches("0x");
            assert_eq!(hex(&p.data), payload, "{name}: packet bytes");
            assert_eq!(p.id, props["PktGroupId"].as_u64(), "{name}: packet id");
            let iface = &cap.interfaces[p.interface as usize];
            let component = props["ComponentId"].as_u64().unwrap();
            let want = described.get(&component).cloned().unwrap_or_default();
            assert_eq!(
                iface.name,
                if want.name.is_empty() {
                    format!("PktMon component {component}")
                } else {
                    format!("{} (PktMon component {component})", want.name)
                },
                "{name}"
            );
            assert_eq!(
                iface.description.clone().unwrap_or_default(),
                want.description,
                "{name}"
            );
            let addresses: BTreeSet<String> = iface
                .ipv4
                .iter()
                .map(|(a, _)| std::net::Ipv4Addr::from(*a).to_string())
                .chain(
                    iface
                        .ipv6
                        .iter()
                        .map(|(a, _)| std::net::Ipv6Addr::from(*a).to_string()),
                )
                .collect();
            assert_eq!(addresses, want.addresses, "{name}: component {component}");
            assert_eq!(
                iface.mac.map(|m| format!("0x{}", hex(&m))),
                want.mac,
                "{name}: component {component}"
            );
            if want.name.is_empty() {
                unnamed += 1;
            }
            let lt = iface.link_type;
            let want = match props["PacketType"].as_str().unwrap() {
                "Ethernet" => 1,
                "WiFi" => 105,
                "IP" => 101,
                t => panic!("{name}: packet type {t}"),
            };
            assert_eq!(lt, want, "{name}");
        }
    }
    assert!(
        with_packets >= 5,
        "PktMon samples with packets: {with_packets}"
    );
    assert_eq!(unnamed, 0, "packets on components no event names");
}

/// A PktMon component as its component events describe it.
#[derive(Clone, Debug, Default)]
struct Described {
    name: String,
    description: String,
    addresses: BTreeSet<String>,
    mac: Option<String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn tshark_reads_the_capture_without_complaint() {
    let Some(s) = samples("tshark_reads_the_capture_without_complaint") else {
        return;
    };
    if !have_tshark("tshark_reads_the_capture_without_complaint") {
        return;
    }
    for (sample, packets) in [
        ("demikernel_PktMon.etl", 114),
        ("stmcast_PktMon.etl", 30132),
    ] {
        let out = tmp(&format!("tshark_{sample}.pcapng"));
        let (ok, _, err) = etwkit(&[
            "pcap",
            s.join(sample).to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{err}");
        assert_eq!(
            tshark_fields(&out, &["frame.len"]).len(),
            packets,
            "{sample}"
        );
    }
}

/// Files in `dir` whose names mark an output still being written.
fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect()
}

#[test]
fn output_is_never_the_input_and_a_failed_run_keeps_the_old_output() {
    let Some(s) = samples("output_is_never_the_input_and_a_failed_run_keeps_the_old_output") else {
        return;
    };
    let dir = tmp("pcap-outputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.etl");
    std::fs::copy(s.join("demikernel_PktMon.etl"), &input).unwrap();
    let original = std::fs::read(&input).unwrap();
    let input_s = input.to_str().unwrap();

    // Writing the capture over the trace being read would truncate it under the reader.
    let (ok, _, err) = etwkit(&["pcap", input_s, "-o", input_s]);
    assert!(!ok);
    assert!(err.contains("also an input"), "{err}");
    assert_eq!(
        std::fs::read(&input).unwrap(),
        original,
        "the trace was changed"
    );

    // A run that fails keeps the file it was to replace.
    let out = dir.join("out.pcapng");
    std::fs::write(&out, b"an earlier capture").unwrap();
    let not_etl = dir.join("notes.etl");
    std::fs::write(&not_etl, b"not a trace").unwrap();
    let (ok, _, err) = etwkit(&[
        "pcap",
        not_etl.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"an earlier capture");

    // A run that succeeds replaces it whole, and leaves nothing half-written beside it.
    let (ok, _, err) = etwkit(&["pcap", input_s, "-o", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(read_pcapng(&out).packets.len(), 114);
    assert!(partials(&dir).is_empty(), "{:?}", partials(&dir));
}

/// `-o -` writes the capture to standard output (`| tshark -r -`), the same bytes as the file, and
/// creates no file named `-`; a full or closed standard output behaves as for any other command.
#[test]
fn dash_output_is_standard_output() {
    let Some(s) = samples("dash_output_is_standard_output") else {
        return;
    };
    let dir = tmp("pcap-dash");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let input = s.join("demikernel_PktMon.etl");
    let file = dir.join("file.pcapng");
    let (ok, _, err) = etwkit(&[
        "pcap",
        input.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let run = |stdout: Stdio| {
        Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .current_dir(&dir)
            .args(["pcap", input.to_str().unwrap(), "-o", "-"])
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    let o = run(Stdio::piped());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(
        o.stdout.len(),
        std::fs::metadata(&file).unwrap().len() as usize
    );
    assert!(
        o.stdout == std::fs::read(&file).unwrap(),
        "stdout differs from the file"
    );
    assert!(!dir.join("-").exists(), "a file named - was created");
    assert!(partials(&dir).is_empty(), "{:?}", partials(&dir));
    assert_eq!(
        err.trim_end(),
        "etwkit: wrote 114 packets (0 dropped) on 4 interfaces to standard output"
    );

    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = run(Stdio::from(full));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "etwkit: writing standard output: No space left on device (os error 28)"
    );

    // A reader that goes away (`| head -c0`) ends it quietly.
    let mut child = Command::new(env!("CARGO_BIN_EXE_etwkit"))
        .current_dir(&dir)
        .args(["pcap", input.to_str().unwrap(), "-o", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("os error"),
        "{err}"
    );

    // tshark reads it from a pipe.
    if Command::new("tshark").arg("--version").output().is_ok() {
        let mut etwkit = Command::new(env!("CARGO_BIN_EXE_etwkit"))
            .args(["pcap", input.to_str().unwrap(), "-o", "-"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let o = Command::new("tshark")
            .args(["-r", "-", "-T", "fields", "-e", "frame.len"])
            .stdin(etwkit.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(etwkit.wait().unwrap().success());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 114);
    }
}

/// attackhost_trace.etl holds one Microsoft-Windows-NDIS-PacketCapture fragment event (1001), a
/// whole 802.11 frame sent on interface 8: it becomes one packet on a `wifi:8` interface, with the
/// event's bytes and time, and tshark dissects it down to the SSDP search it carries.
#[test]
fn ndis_packet_capture_sample_is_one_wifi_frame() {
    let Some(s) = samples("ndis_packet_capture_sample_is_one_wifi_frame") else {
        return;
    };
    let input = s.join("attackhost_trace.etl");
    let events = dump(&input, Some("Microsoft-Windows-NDIS-PacketCapture"));
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["id"], 1001);
    let out = tmp("attackhost.pcapng");
    let (ok, stdout, err) = etwkit(&["pcap", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(stdout.is_empty());
    assert_eq!(
        err.trim_end(),
        format!(
            "etwkit: wrote 1 packets (0 dropped) on 1 interfaces to {}",
            out.display()
        )
    );
    let cap = read_pcapng(&out);
    assert_eq!(cap.interfaces.len(), 1);
    assert_eq!(cap.interfaces[0].link_type, 105, "IEEE 802.11");
    assert_eq!(cap.interfaces[0].name, "wifi:8");
    // Described by the trace's SysConfig NetworkInterface event for its interface index (miniport
    // = lower: no filter driver in between), with that adapter's hardware address: the frame's
    // transmitter.
    let lower = e["properties"]["LowerIfIndex"].as_u64().unwrap();
    let adapters: Vec<_> = dump(&input, Some("9b79ee91-b5fd-41c0-a243-4248e266e9d0"))
        .into_iter()
        .filter(|a| a["opcode_name"] == "NetworkInterface")
        .collect();
    assert!(adapters.len() > 50, "the sample lists its interfaces");
    let a = &adapters
        .iter()
        .find(|a| a["properties"]["InterfaceIndex"].as_u64() == Some(lower))
        .unwrap()["properties"];
    assert_eq!(
        cap.interfaces[0].description.as_deref(),
        Some(
            format!(
                "{} ({})",
                a["Description"].as_str().unwrap(),
                a["Alias"].as_str().unwrap()
            )
            .as_str()
        )
    );
    let mac = cap.interfaces[0].mac.unwrap();
    assert!(a["PhysicalAddress"]
        .as_str()
        .unwrap()
        .starts_with(&format!("0x{}", hex(&mac))));
    assert_eq!(cap.packets.len(), 1);
    let p = &cap.packets[0];
    let fragment = e["properties"]["Fragment"].as_str().unwrap();
    assert_eq!(format!("0x{}", hex(&p.data)), fragment);
    assert_eq!(
        p.data.len() as u64,
        e["properties"]["FragmentSize"].as_u64().unwrap()
    );
    assert_eq!(p.original_len as usize, p.data.len());
    let filetime = etwkit::time::parse_rfc3339(e["timestamp"].as_str().unwrap()).unwrap();
    assert_eq!(
        p.timestamp as i64,
        filetime - etwkit::time::FILETIME_UNIX_EPOCH,
        "100 ns units since 1970"
    );
    assert_eq!(p.flags, Some(2), "sent (keyword 0x100000000)");
    assert_eq!(p.data[10..16], mac, "sent by the interface's adapter");
    assert_eq!(
        p.comment.as_deref(),
        Some(format!("pid {} tid {}", e["pid"], e["tid"]).as_str())
    );

    if !have_tshark("the tshark half of ndis_packet_capture_sample_is_one_wifi_frame") {
        return;
    }
    assert_eq!(
        tshark_fields(
            &out,
            &["frame.protocols", "wlan.ta", "ip.dst", "udp.dstport"]
        ),
        ["wlan:llc:ip:udp:ssdp;28:d0:ea:3e:8e:5b;239.255.255.250;1900"]
    );
}

/// `--events`: attackhost_trace.etl's 101 other records as journal entries, in time order with its
/// packet, each with the decoded event `dump` shows; tshark reads them as systemd journal entries.
#[test]
fn other_events_go_in_as_journal_entries() {
    let Some(s) = samples("other_events_go_in_as_journal_entries") else {
        return;
    };
    let input = s.join("attackhost_trace.etl");
    let records = dump(&input, None);
    assert_eq!(records.len(), 102);
    let out = tmp("attackhost-events.pcapng");
    let (ok, _, err) = etwkit(&[
        "pcap",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--events",
    ]);
    assert!(ok, "{err}");
    assert!(
        err.contains("wrote 1 packets (0 dropped) on 1 interfaces and 101 other events"),
        "{err}"
    );
    // Without --events, the packet alone (the other tests' captures are unchanged).
    assert_eq!(read_pcapng(&out).packets.len(), 1);
    if !have_tshark("other_events_go_in_as_journal_entries") {
        return;
    }
    let lines = tshark_fields(
        &out,
        &[
            "frame.time_epoch",
            "frame.protocols",
            "systemd_journal.syslog_id",
            "systemd_journal.pid",
            "systemd_journal.message",
        ],
    );
    assert_eq!(lines.len(), 102);
    let mut undecoded = 0;
    for (line, r) in lines.iter().zip(&records) {
        let f: Vec<&str> = line.splitn(5, ';').collect();
        // In the dump's (time) order, each at its record's time: journal entries to the
        // microsecond (their timestamp's unit), the packet to the 100 ns.
        let (secs, frac) = f[0].split_once('.').unwrap();
        let t = secs.parse::<i64>().unwrap() * 10_000_000 + frac[..7].parse::<i64>().unwrap();
        let want = etwkit::time::parse_rfc3339(r["timestamp"].as_str().unwrap()).unwrap()
            - etwkit::time::FILETIME_UNIX_EPOCH;
        let unit = if f[1] == "systemd_journal" { 10 } else { 1 };
        assert_eq!(t, want / unit * unit, "{line}");
        if f[1] != "systemd_journal" {
            assert_eq!(r["id"], 1001, "the packet: {line}");
            continue;
        }
        assert_eq!(f[2], r["provider_name"].as_str().unwrap(), "{line}");
        assert_eq!(f[3], r["pid"].to_string(), "{line}");
        let name = match (
            r["event_name"].as_str(),
            r["task_name"].as_str(),
            r["opcode_name"].as_str(),
        ) {
            (Some(e), ..) => e.to_string(),
            (None, Some(t), Some(o)) => format!("{t}/{o}"),
            (None, Some(t), None) => t.to_string(),
            _ => format!("event {} (opcode {})", r["id"], r["opcode"]),
        };
        if r["properties"].is_null() {
            let payload = r["payload"].as_str().unwrap();
            assert!(
                f[4].starts_with(&format!("{name} (not decoded: "))
                    && f[4].ends_with(&format!("; payload {payload})")),
                "{line}"
            );
            undecoded += 1;
            continue;
        }
        // The message is the event's name and its properties (in the layout's order).
        let (head, props) = f[4].split_once(": ").unwrap();
        assert_eq!(head, name, "{line}");
        let props: serde_json::Value = serde_json::from_str(props).unwrap();
        assert_eq!(props, r["properties"], "{line}");
    }
    assert!(
        undecoded > 0,
        "the sample's undecoded records are written too"
    );
}
