//! Event name and properties of a live event as JSON, through the one shared decoder
//! ([`crate::decode::Decoder`]): live Linux events are TraceLogging records, so the decoder reads
//! their own metadata; there is no second decoder for live events. Embedded metadata records (the
//! MetaData/EventInfo records a Windows session hands over for layouts only TDH knows) are learned
//! as they pass.

use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::decode::Decoder;
use crate::event::EventRecord;
use crate::schema::Registry;

fn decoder() -> &'static Mutex<Decoder> {
    static D: OnceLock<Mutex<Decoder>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(Decoder::new(Registry::with_builtins())))
}

/// The event name and properties of a record, when its layout is known (`None` for metadata
/// records, which are learned instead).
pub fn properties(rec: &EventRecord<'_>) -> Option<(String, Map<String, Value>)> {
    let mut dec = decoder().lock().unwrap_or_else(|p| p.into_inner());
    if dec.learn(rec) {
        return None;
    }
    let d = dec.decode(rec);
    drop(dec);
    if !d.is_decoded() {
        return None;
    }
    let name = d.event_name?;
    match d.properties.to_json() {
        Value::Object(m) => Some((name.to_string(), m)),
        _ => None,
    }
}

/// A property as u64 (numbers, `"0x…"` hex strings, booleans).
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|x| x as u64)),
        Value::String(s) => s
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok()),
        Value::Bool(b) => Some(*b as u64),
        _ => None,
    }
}
