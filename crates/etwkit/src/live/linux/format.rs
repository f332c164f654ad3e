//! Parser for tracefs `events/<system>/<event>/format` files: event id and field layouts.

use std::path::Path;

use super::super::LiveError;

/// How a field's bytes are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// Integer of `size` bytes (1, 2, 4, 8), signed or not.
    Int,
    /// Fixed-size array (`type name[N]`); `elem` bytes per element.
    Array { elem: u8 },
    /// `__data_loc` / `__rel_loc` dynamic array or string: a u32 with offset (low 16) and length (high 16).
    DataLoc { relative: bool, string: bool },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub type_name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    pub kind: FieldKind,
    /// Pointer-typed (`void *`, `struct x *`, `unsigned long` is not).
    pub is_pointer: bool,
}

/// One tracepoint's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    pub system: String,
    pub name: String,
    pub id: u16,
    /// Fields after the `common_*` ones.
    pub fields: Vec<Field>,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    pub fn load(events_dir: &Path, system: &str, name: &str) -> Result<EventFormat, LiveError> {
        let p = events_dir.join(system).join(name).join("format");
        let text = std::fs::read_to_string(&p).map_err(|e| LiveError::io(&p, e))?;
        EventFormat::parse(system, &text).map_err(|reason| LiveError::BadFormat { path: p, reason })
    }

    pub fn parse(system: &str, text: &str) -> Result<EventFormat, String> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let l = line.trim();
            if let Some(v) = l.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = l.strip_prefix("ID:") {
                id = Some(
                    v.trim()
                        .parse::<u16>()
                        .map_err(|_| format!("bad ID line {l:?}"))?,
                );
            } else if l.starts_with("field:") {
                let f = parse_field(l)?;
                if !f.name.starts_with("common_") {
                    fields.push(f);
                }
            }
        }
        Ok(EventFormat {
            system: system.to_string(),
            name: name.ok_or("no name: line")?,
            id: id.ok_or("no ID: line")?,
            fields,
        })
    }
}

fn parse_field(l: &str) -> Result<Field, String> {
    // field:TYPE NAME;	offset:N;	size:N;	signed:N;
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in l.split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse::<usize>().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse::<usize>().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    let decl = decl.ok_or_else(|| format!("no declaration in {l:?}"))?;
    let offset = offset.ok_or_else(|| format!("no offset in {l:?}"))?;
    let size = size.ok_or_else(|| format!("no size in {l:?}"))?;
    let (ty, mut name) = match decl.rfind([' ', '*']) {
        Some(i) => (decl[..=i].trim(), decl[i + 1..].trim()),
        None => return Err(format!("cannot split type and name in {decl:?}")),
    };
    let mut kind = FieldKind::Int;
    let is_loc = ty.contains("__data_loc") || ty.contains("__rel_loc");
    if let Some(b) = name.find('[') {
        let n: Option<usize> = name[b + 1..].trim_end_matches(']').parse().ok();
        name = &name[..b];
        if !is_loc {
            let n = n.filter(|&n| n > 0).unwrap_or(size.max(1));
            kind = FieldKind::Array {
                elem: (size / n).max(1) as u8,
            };
        }
    }
    if is_loc {
        kind = FieldKind::DataLoc {
            relative: ty.contains("__rel_loc"),
            string: ty.contains("char"),
        };
    }
    let is_pointer = ty.ends_with('*');
    Ok(Field {
        name: name.to_string(),
        type_name: ty.to_string(),
        offset,
        size,
        signed,
        kind,
        is_pointer,
    })
}

/// Reads an integer field from a raw record (the record starts with the common fields).
#[inline]
pub fn read_uint(data: &[u8], offset: usize, size: usize) -> Option<u64> {
    let b = data.get(offset..offset + size)?;
    Some(match size {
        1 => b[0] as u64,
        2 => u16::from_le_bytes([b[0], b[1]]) as u64,
        4 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64,
        8 => u64::from_le_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

/// A signed or unsigned integer field as i64 (`None` when the record is too short or the size odd).
#[inline]
pub fn read_field(data: &[u8], offset: usize, size: usize, signed: bool) -> Option<i64> {
    if signed {
        read_int(data, offset, size)
    } else {
        read_uint(data, offset, size).map(|v| v as i64)
    }
}

#[inline]
pub fn read_int(data: &[u8], offset: usize, size: usize) -> Option<i64> {
    let v = read_uint(data, offset, size)?;
    Some(match size {
        1 => v as u8 as i8 as i64,
        2 => v as u16 as i16 as i64,
        4 => v as u32 as i32 as i64,
        _ => v as i64,
    })
}

/// The bytes of a `__data_loc`/`__rel_loc` field.
pub fn data_loc<'a>(data: &'a [u8], f: &Field) -> Option<&'a [u8]> {
    let v = read_uint(data, f.offset, 4)? as u32;
    let (off, len) = ((v & 0xffff) as usize, (v >> 16) as usize);
    let start = match f.kind {
        FieldKind::DataLoc { relative: true, .. } => f.offset + 4 + off,
        _ => off,
    };
    data.get(start..start + len)
}

#[cfg(test)]
mod tests {
    use super::*;
    const CONNECT: &str = "name: sys_enter_connect\nID: 2230\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:int fd;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:struct sockaddr * uservaddr;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:__u8 saddr[28];\toffset:32;\tsize:28;\tsigned:0;\n\tfield:__data_loc char[] comm;\toffset:60;\tsize:4;\tsigned:0;\n\nprint fmt: \"x\"\n";

    #[test]
    fn parses_fields() {
        let f = EventFormat::parse("syscalls", CONNECT).unwrap();
        assert_eq!(f.id, 2230);
        assert_eq!(f.name, "sys_enter_connect");
        let names: Vec<_> = f.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["__syscall_nr", "fd", "uservaddr", "saddr", "comm"]);
        assert_eq!(f.field("fd").unwrap().offset, 16);
        assert_eq!(f.field("fd").unwrap().size, 8);
        assert!(f.field("uservaddr").unwrap().is_pointer);
        assert_eq!(f.field("saddr").unwrap().kind, FieldKind::Array { elem: 1 });
        assert_eq!(
            f.field("comm").unwrap().kind,
            FieldKind::DataLoc {
                relative: false,
                string: true
            }
        );
        assert!(EventFormat::parse("x", "name: a\n").is_err());
    }
}
