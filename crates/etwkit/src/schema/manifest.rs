//! Instrumentation manifests (the `.man` XML a provider ships, `--manifest FILE.man`) and the
//! EventSource manifests .NET writes into traces (Id 0xFFFE chunks, same XML).
//!
//! Read: providers (name, guid), events (value, version, task, opcode, keywords, template, name or
//! symbol), tasks with their task-scoped opcodes, opcodes, keywords, valueMap/bitMap, templates
//! (data and nested struct, `length=`/`count=` given as a number or as the name of an earlier field at
//! the same level), and `$(string.X)` references resolved through the first stringTable.

use std::collections::HashMap;
use std::sync::Arc;

use roxmltree::{Document, Node};

use super::types::{in_type_from_manifest, out_type_from_manifest};
use super::{
    Count, EventSchema, Length, Property, PropertyKind, SchemaError, SchemaKey, SchemaSource,
    ValueMap,
};
use crate::guid::Guid;

const WHAT: &str = "instrumentation manifest";

/// Everything a manifest defines.
#[derive(Clone, Debug, Default)]
pub struct Manifest {
    pub providers: Vec<(Guid, String)>,
    pub events: Vec<(SchemaKey, EventSchema)>,
}

fn err(n: Node<'_, '_>, reason: impl Into<String>) -> SchemaError {
    SchemaError::new(WHAT, n.range().start, reason)
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn children<'a, 'i>(n: Node<'a, 'i>, tag: &'a str) -> impl Iterator<Item = Node<'a, 'i>> + 'a {
    n.children()
        .filter(move |c| c.is_element() && c.tag_name().name() == tag)
}

fn child<'a, 'i>(n: Node<'a, 'i>, tag: &'a str) -> Option<Node<'a, 'i>> {
    children(n, tag).next()
}

/// Standard `win:` opcodes (winmeta.xml).
fn standard_opcode(name: &str) -> Option<(u8, &'static str)> {
    Some(match name.rsplit(':').next()? {
        "Info" => (0, "Info"),
        "Start" => (1, "Start"),
        "Stop" => (2, "Stop"),
        "DC_Start" => (3, "DCStart"),
        "DC_Stop" => (4, "DCStop"),
        "Extension" => (5, "Extension"),
        "Reply" => (6, "Reply"),
        "Resume" => (7, "Resume"),
        "Suspend" => (8, "Suspend"),
        "Send" => (9, "Send"),
        "Receive" => (240, "Receive"),
        _ => return None,
    })
}

/// Where in `xml` a parse error is: the byte its line and column name, the end of the document
/// for a root element never closed (the parser gives no position for it), 0 when there is none.
fn xml_error_offset(xml: &str, e: &roxmltree::Error) -> usize {
    if matches!(e, roxmltree::Error::UnclosedRootNode) {
        return xml.len();
    }
    let pos = e.pos();
    let line_start: usize = xml
        .split_inclusive('\n')
        .take(pos.row.saturating_sub(1) as usize)
        .map(str::len)
        .sum();
    let line = &xml[line_start.min(xml.len())..];
    line_start
        + line
            .char_indices()
            .nth(pos.col.saturating_sub(1) as usize)
            .map_or(line.len(), |(i, _)| i)
}

/// Parses a manifest document.
pub fn parse_manifest(xml: &str, source: SchemaSource) -> Result<Manifest, SchemaError> {
    let doc = Document::parse(xml).map_err(|e| {
        SchemaError::new(
            WHAT,
            xml_error_offset(xml, &e),
            format!("not well-formed XML: {e}"),
        )
    })?;
    let mut strings: HashMap<String, String> = HashMap::new();
    if let Some(table) = doc
        .descendants()
        .find(|n| n.is_element() && n.tag_name().name() == "stringTable")
    {
        for s in children(table, "string") {
            if let (Some(id), Some(v)) = (s.attribute("id"), s.attribute("value")) {
                strings.insert(id.to_string(), v.to_string());
            }
        }
    }
    let resolve = |s: &str| -> String {
        match s
            .strip_prefix("$(string.")
            .and_then(|r| r.strip_suffix(')'))
        {
            Some(id) => strings.get(id).cloned().unwrap_or_else(|| s.to_string()),
            None => s.to_string(),
        }
    };
    let mut out = Manifest::default();
    let providers: Vec<Node<'_, '_>> = doc
        .descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == "provider")
        .collect();
    if providers.is_empty() {
        return Err(err(doc.root_element(), "no <provider> element"));
    }
    for p in providers {
        let name = p
            .attribute("name")
            .ok_or_else(|| err(p, "<provider> without name"))?
            .to_string();
        let guid: Guid = p
            .attribute("guid")
            .ok_or_else(|| err(p, format!("provider {name:?} without guid")))?
            .parse()
            .map_err(|e| err(p, format!("provider {name:?}: {e}")))?;
        out.providers.push((guid, name.clone()));

        // Tasks and their scoped opcodes.
        let mut tasks: HashMap<&str, (u16, String)> = HashMap::new();
        let mut task_opcodes: HashMap<(&str, &str), (u8, String)> = HashMap::new();
        if let Some(ts) = child(p, "tasks") {
            for t in children(ts, "task") {
                let tn = t
                    .attribute("name")
                    .ok_or_else(|| err(t, "<task> without name"))?;
                let tv = t
                    .attribute("value")
                    .and_then(parse_num)
                    .ok_or_else(|| err(t, format!("task {tn:?} without a numeric value")))?;
                tasks.insert(tn, (tv as u16, tn.to_string()));
                if let Some(os) = child(t, "opcodes") {
                    for o in children(os, "opcode") {
                        let on = o
                            .attribute("name")
                            .ok_or_else(|| err(o, "<opcode> without name"))?;
                        let ov = o.attribute("value").and_then(parse_num).ok_or_else(|| {
                            err(o, format!("opcode {on:?} without a numeric value"))
                        })?;
                        task_opcodes.insert((tn, on), (ov as u8, on.to_string()));
                    }
                }
            }
        }
        let mut opcodes: HashMap<&str, (u8, String)> = HashMap::new();
        if let Some(os) = child(p, "opcodes") {
            for o in children(os, "opcode") {
                let on = o
                    .attribute("name")
                    .ok_or_else(|| err(o, "<opcode> without name"))?;
                let ov = o
                    .attribute("value")
                    .and_then(parse_num)
                    .ok_or_else(|| err(o, format!("opcode {on:?} without a numeric value")))?;
                opcodes.insert(on, (ov as u8, on.to_string()));
            }
        }
        let mut keywords: HashMap<&str, u64> = HashMap::new();
        if let Some(ks) = child(p, "keywords") {
            for k in children(ks, "keyword") {
                if let (Some(kn), Some(m)) =
                    (k.attribute("name"), k.attribute("mask").and_then(parse_num))
                {
                    keywords.insert(kn, m);
                }
            }
        }
        let mut maps: HashMap<&str, Arc<ValueMap>> = HashMap::new();
        if let Some(ms) = child(p, "maps") {
            for m in ms.children().filter(|c| c.is_element()) {
                let is_bitmap = match m.tag_name().name() {
                    "valueMap" => false,
                    "bitMap" => true,
                    _ => continue,
                };
                let mn = m
                    .attribute("name")
                    .ok_or_else(|| err(m, "map without name"))?;
                let mut entries = Vec::new();
                for e in children(m, "map") {
                    let v = e.attribute("value").and_then(parse_num).ok_or_else(|| {
                        err(e, format!("map {mn:?}: entry without a numeric value"))
                    })?;
                    let text = e
                        .attribute("message")
                        .map(&resolve)
                        .unwrap_or_else(|| v.to_string());
                    entries.push((v, text));
                }
                maps.insert(
                    mn,
                    Arc::new(ValueMap {
                        name: mn.to_string(),
                        is_bitmap,
                        entries,
                    }),
                );
            }
        }
        let mut templates: HashMap<&str, Vec<Property>> = HashMap::new();
        if let Some(ts) = child(p, "templates") {
            for t in children(ts, "template") {
                let tid = t
                    .attribute("tid")
                    .ok_or_else(|| err(t, "<template> without tid"))?;
                templates.insert(tid, fields(t, &maps, 0)?);
            }
        }
        let Some(evs) = child(p, "events") else {
            continue;
        };
        for e in children(evs, "event") {
            let id = e
                .attribute("value")
                .and_then(parse_num)
                .ok_or_else(|| err(e, "<event> without a numeric value"))?;
            let version = match e.attribute("version") {
                Some(v) => {
                    parse_num(v).ok_or_else(|| err(e, format!("event {id}: bad version {v:?}")))?
                }
                None => 0,
            };
            let task = e.attribute("task");
            let task_name = task.map(|t| {
                tasks
                    .get(t)
                    .map(|x| x.1.clone())
                    .unwrap_or_else(|| t.to_string())
            });
            let opcode_name = e.attribute("opcode").map(|o| {
                task.and_then(|t| task_opcodes.get(&(t, o)))
                    .or_else(|| opcodes.get(o))
                    .map(|x| x.1.clone())
                    .or_else(|| standard_opcode(o).map(|x| x.1.to_string()))
                    .unwrap_or_else(|| o.to_string())
            });
            let keywords_name = e
                .attribute("keywords")
                .map(|k| k.split_whitespace().collect::<Vec<_>>().join(" "));
            let _ = &keywords;
            let properties = match e.attribute("template") {
                Some(t) => templates
                    .get(t)
                    .cloned()
                    .ok_or_else(|| err(e, format!("event {id}: template {t:?} is not defined")))?,
                None => Vec::new(),
            };
            let event_name = e
                .attribute("name")
                .or_else(|| e.attribute("symbol"))
                .map(str::to_string);
            out.events.push((
                SchemaKey::Manifest {
                    provider: guid,
                    id: id as u16,
                    version: version as u8,
                },
                EventSchema {
                    provider: guid,
                    provider_name: Some(name.clone()),
                    event_name,
                    task_name,
                    opcode_name,
                    keywords_name,
                    properties,
                    source,
                },
            ));
        }
    }
    Ok(out)
}

/// The `<data>`/`<struct>` children of a template or struct, as one level of properties.
fn fields(
    parent: Node<'_, '_>,
    maps: &HashMap<&str, Arc<ValueMap>>,
    depth: usize,
) -> Result<Vec<Property>, SchemaError> {
    if depth > 32 {
        return Err(err(parent, "structs nest deeper than 32 levels"));
    }
    let mut out: Vec<Property> = Vec::new();
    for n in parent.children().filter(|c| c.is_element()) {
        let tag = n.tag_name().name();
        if tag != "data" && tag != "struct" {
            continue;
        }
        let name = n
            .attribute("name")
            .ok_or_else(|| err(n, format!("<{tag}> without name")))?
            .to_string();
        let lookup = |attr: &str| -> Result<Option<Result<u16, usize>>, SchemaError> {
            let Some(v) = n.attribute(attr) else {
                return Ok(None);
            };
            if let Some(k) = parse_num(v) {
                return u16::try_from(k)
                    .map(|k| Some(Ok(k)))
                    .map_err(|_| err(n, format!("{name:?}: {attr}={v} is too large")));
            }
            match out.iter().position(|p| p.name == v) {
                Some(i) => Ok(Some(Err(i))),
                None => Err(err(
                    n,
                    format!("{name:?}: {attr}={v:?} names no earlier field at this level"),
                )),
            }
        };
        let count = match lookup("count")? {
            None => Count::One,
            Some(Ok(k)) => Count::Fixed(k),
            Some(Err(i)) => Count::FromProperty(i),
        };
        let length = match lookup("length")? {
            None => Length::Natural,
            Some(Ok(k)) => Length::Fixed(k),
            Some(Err(i)) => Length::FromProperty(i),
        };
        let (kind, map) = if tag == "struct" {
            (PropertyKind::Struct(fields(n, maps, depth + 1)?), None)
        } else {
            let it = n
                .attribute("inType")
                .ok_or_else(|| err(n, format!("{name:?} has no inType")))?;
            let in_type = in_type_from_manifest(it)
                .ok_or_else(|| err(n, format!("{name:?}: unknown inType {it:?}")))?;
            let out_type = match n.attribute("outType") {
                Some(o) => out_type_from_manifest(o)
                    .ok_or_else(|| err(n, format!("{name:?}: unknown outType {o:?}")))?,
                None => 0,
            };
            let map = match n.attribute("map") {
                Some(m) => Some(
                    maps.get(m)
                        .cloned()
                        .ok_or_else(|| err(n, format!("{name:?}: map {m:?} is not defined")))?,
                ),
                None => None,
            };
            (PropertyKind::Scalar { in_type, out_type }, map)
        };
        out.push(Property {
            name,
            kind,
            count,
            length,
            map,
        });
    }
    Ok(out)
}
