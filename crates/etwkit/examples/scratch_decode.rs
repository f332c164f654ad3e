use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let f = EtlFile::open(&args[1]).unwrap();
    let limit: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let filter = args.get(3).cloned();
    let mut reg = Registry::new();
    let s = reg.learn_from_file(&f);
    eprintln!("learn: {:?} schemas={}", s, reg.len());
    let dec = Decoder::new(reg);
    let mut n = 0;
    let mut undec: BTreeMap<String, usize> = BTreeMap::new();
    let mut decoded = 0;
    let mut total = 0;
    f.for_each(Order::Time, |r| {
        let ev = dec.decode(&r.event);
        total += 1;
        if ev.is_decoded() {
            decoded += 1
        } else {
            *undec
                .entry(format!(
                    "{} {:?} {} {:?}",
                    r.event.provider, ev.provider_name, r.event.header_type, ev.undecoded
                ))
                .or_default() += 1;
        }
        let show = match &filter {
            Some(f) => format!(
                "{} {:?} {:?}",
                r.event.provider, ev.provider_name, ev.event_name
            )
            .contains(f.as_str()),
            None => true,
        };
        if show && n < limit {
            n += 1;
            println!(
                "{} {} id={} v={} op={} {} {}",
                r.event.header_type,
                r.event.provider,
                r.event.descriptor.id,
                r.event.descriptor.version,
                r.event.descriptor.opcode,
                serde_json::to_string(&ev).unwrap(),
                r.event.payload.len()
            );
        }
        ControlFlow::Continue(())
    });
    eprintln!("total {total} decoded {decoded}");
    for (k, v) in undec {
        eprintln!("  {v:6} {k}");
    }
}
