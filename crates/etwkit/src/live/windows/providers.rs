//! Providers: the ones etwkit has layouts for (always), the system's registered ones through TDH
//! (TdhEnumerateProviders; never under wine, whose tdh.dll aborts the process), and their keywords
//! (TdhEnumerateProviderFieldInformation). Names resolve to GUIDs in that order.

use windows_sys::Win32::System::Diagnostics::Etw::{
    EventKeywordInformation, TdhEnumerateProviderFieldInformation, TdhEnumerateProviders,
    PROVIDER_ENUMERATION_INFO, PROVIDER_FIELD_INFO, PROVIDER_FIELD_INFOARRAY, TRACE_PROVIDER_INFO,
};

use super::properties::SYSTEM_TRACE_CONTROL_GUID;
use super::{to_win_guid, win_error};
use crate::guid::Guid;
use crate::live::{LiveError, ProviderInfo, ProviderRef, Result};

const _: () = assert!(std::mem::size_of::<TRACE_PROVIDER_INFO>() == 24);
const _: () = assert!(std::mem::offset_of!(PROVIDER_ENUMERATION_INFO, TraceProviderInfoArray) == 8);
const _: () = assert!(std::mem::size_of::<PROVIDER_FIELD_INFO>() == 16);
const _: () = assert!(std::mem::offset_of!(PROVIDER_FIELD_INFOARRAY, FieldInfoArray) == 8);

const ERROR_INSUFFICIENT_BUFFER: u32 = 122;
const ERROR_NOT_FOUND: u32 = 1168;

/// The kernel (system) provider's name: enabling it makes a session a system logger whose
/// `any_keyword` are EVENT_TRACE_FLAG_* bits.
pub const KERNEL_PROVIDER_NAME: &str = "Windows Kernel Trace";

/// Providers etwkit knows without asking Windows: the ones it has layouts for, and the kernel.
pub fn builtin() -> Vec<ProviderInfo> {
    let mut v = vec![
        ProviderInfo {
            name: "Microsoft-Windows-Winsock-AFD".into(),
            guid: crate::schema::builtin::winsock_afd::PROVIDER,
            kind: "manifest (built in)".into(),
            events: 0,
        },
        ProviderInfo {
            name: "HeapTraceProvider".into(),
            guid: crate::schema::builtin::heap_events::HEAP_PROVIDER,
            kind: "heap (session of its own)".into(),
            events: 0,
        },
        ProviderInfo {
            name: KERNEL_PROVIDER_NAME.into(),
            guid: SYSTEM_TRACE_CONTROL_GUID,
            kind: "kernel (system logger flags)".into(),
            events: 0,
        },
    ];
    let reg = crate::schema::Registry::with_builtins();
    for (key, _) in reg.iter() {
        let g = match key {
            crate::schema::SchemaKey::Manifest { provider, .. } => *provider,
            crate::schema::SchemaKey::Mof { class, .. } => *class,
        };
        if let Some(p) = v.iter_mut().find(|p| p.guid == g) {
            p.events += 1;
        }
    }
    v
}

/// UTF-16 string at a byte offset of a TDH buffer.
fn wstr_at(buf: &[u8], off: u32) -> String {
    let off = off as usize;
    if off == 0 || off >= buf.len() {
        return String::new();
    }
    let units: Vec<u16> = buf[off..]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0)
        .collect();
    String::from_utf16_lossy(&units)
}

/// Parses a PROVIDER_ENUMERATION_INFO buffer: (name, GUID, schema source 0 manifest / 1 MOF).
pub fn parse_enumeration(buf: &[u8]) -> Vec<(String, Guid, u32)> {
    let Some(n) = buf.get(0..4) else {
        return Vec::new();
    };
    let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
    (0..n)
        .map_while(|i| {
            let at = 8 + 24 * i;
            let e = buf.get(at..at + 24)?;
            let guid = Guid::from_le_bytes(&e[..16])?;
            let source = u32::from_le_bytes(e[16..20].try_into().ok()?);
            let name_off = u32::from_le_bytes(e[20..24].try_into().ok()?);
            Some((wstr_at(buf, name_off), guid, source))
        })
        .collect()
}

/// Parses a PROVIDER_FIELD_INFOARRAY buffer: (name, value).
pub fn parse_fields(buf: &[u8]) -> Vec<(String, u64)> {
    let Some(n) = buf.get(0..4) else {
        return Vec::new();
    };
    let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
    (0..n)
        .map_while(|i| {
            let at = 8 + 16 * i;
            let e = buf.get(at..at + 16)?;
            let name_off = u32::from_le_bytes(e[0..4].try_into().ok()?);
            let value = u64::from_le_bytes(e[8..16].try_into().ok()?);
            Some((wstr_at(buf, name_off), value))
        })
        .collect()
}

/// A TDH "size query, then fill" call into an 8-aligned buffer.
fn tdh_buffer(
    api: &'static str,
    mut call: impl FnMut(*mut u8, &mut u32) -> u32,
) -> Result<Vec<u8>> {
    let mut size = 0u32;
    let mut words: Vec<u64> = Vec::new();
    for _ in 0..4 {
        let rc = call(words.as_mut_ptr() as *mut u8, &mut size);
        match rc {
            0 => {
                let len = (size as usize).min(words.len() * 8);
                // SAFETY: viewing the initialized u64 buffer as bytes.
                let b = unsafe {
                    std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8)
                };
                return Ok(b[..len].to_vec());
            }
            ERROR_INSUFFICIENT_BUFFER => words = vec![0u64; (size as usize).div_ceil(8) + 1],
            code => return Err(win_error(api, code, "")),
        }
    }
    Err(LiveError::Other(format!(
        "{api}: the provider list kept growing"
    )))
}

/// Every provider the system has registered (TDH). Not under wine.
pub fn system_providers() -> Result<Vec<(String, Guid, u32)>> {
    if super::wine_version().is_some() {
        return Err(LiveError::Unsupported(
            "listing the system's providers needs tdh.dll, which wine does not implement".into(),
        ));
    }
    let buf = tdh_buffer("TdhEnumerateProviders", |p, size| {
        // SAFETY: `p` has room for `*size` bytes (or is dangling with size 0, as the size query wants).
        unsafe { TdhEnumerateProviders(p as *mut PROVIDER_ENUMERATION_INFO, size) }
    })?;
    Ok(parse_enumeration(&buf))
}

/// The keywords a provider declares (name, mask). Not under wine.
pub fn keywords(provider: &Guid) -> Result<Vec<(String, u64)>> {
    if super::wine_version().is_some() {
        return Err(LiveError::Unsupported(
            "reading provider keywords needs tdh.dll, which wine does not implement".into(),
        ));
    }
    let g = to_win_guid(provider);
    match tdh_buffer("TdhEnumerateProviderFieldInformation", |p, size| {
        // SAFETY: as in `system_providers`; `g` lives across the call.
        unsafe {
            TdhEnumerateProviderFieldInformation(
                &g,
                EventKeywordInformation,
                p as *mut PROVIDER_FIELD_INFOARRAY,
                size,
            )
        }
    }) {
        Ok(b) => Ok(parse_fields(&b)),
        Err(LiveError::Other(m)) if m.contains(&format!("error {ERROR_NOT_FOUND}")) => {
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// Every provider: etwkit's own, then the system's (when TDH is there).
pub fn all() -> Result<Vec<ProviderInfo>> {
    let mut v = builtin();
    match system_providers() {
        Ok(sys) => {
            for (name, guid, source) in sys {
                if v.iter().any(|p| p.guid == guid) {
                    continue;
                }
                v.push(ProviderInfo {
                    name,
                    guid,
                    kind: if source == 1 { "mof" } else { "manifest" }.into(),
                    events: 0,
                });
            }
        }
        Err(LiveError::Unsupported(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(v)
}

/// Short names the CLI accepts on every OS (as on Linux).
pub const ALIASES: [(&str, &str); 3] = [
    ("winsock", "Microsoft-Windows-Winsock-AFD"),
    ("heap", "HeapTraceProvider"),
    ("kernel", KERNEL_PROVIDER_NAME),
];

/// The GUID of a provider name (or alias) etwkit knows itself (case-insensitive).
pub fn resolve_builtin(name: &str) -> Option<Guid> {
    let name = ALIASES
        .iter()
        .find(|(a, _)| a.eq_ignore_ascii_case(name))
        .map_or(name, |(_, n)| n);
    if let Some(b) = builtin()
        .into_iter()
        .find(|b| b.name.eq_ignore_ascii_case(name))
    {
        return Some(b.guid);
    }
    crate::schema::Registry::with_builtins()
        .provider_guids_named(name)
        .first()
        .copied()
}

/// The GUID a provider reference names: a GUID as is; a name through etwkit's built-in providers,
/// then the system's.
pub fn resolve(p: &ProviderRef) -> Result<Guid> {
    let name = match p {
        ProviderRef::Guid(g) => return Ok(*g),
        ProviderRef::Name(n) => n,
    };
    if let Some(g) = resolve_builtin(name) {
        return Ok(g);
    }
    match system_providers() {
        Ok(sys) => sys
            .into_iter()
            .find(|(n, _, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, g, _)| g)
            .ok_or_else(|| LiveError::UnknownProvider(name.clone())),
        Err(LiveError::Unsupported(_)) => Err(LiveError::UnknownProvider(name.clone())),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumeration_and_fields_parse() {
        // PROVIDER_ENUMERATION_INFO with 1 entry, name after the array.
        let g = crate::schema::builtin::winsock_afd::PROVIDER;
        let mut b = vec![0u8; 8 + 24];
        b[0] = 1;
        b[8..24].copy_from_slice(&g.to_le_bytes());
        b[28..32].copy_from_slice(&32u32.to_le_bytes());
        for u in "AFD".encode_utf16().chain([0]) {
            b.extend_from_slice(&u.to_le_bytes());
        }
        assert_eq!(parse_enumeration(&b), vec![("AFD".to_string(), g, 0)]);
        let mut f = vec![0u8; 8 + 16];
        f[0] = 1;
        f[8..12].copy_from_slice(&24u32.to_le_bytes());
        f[16..24].copy_from_slice(&0x8000_0000_0000_0000u64.to_le_bytes());
        for u in "Rundown".encode_utf16().chain([0]) {
            f.extend_from_slice(&u.to_le_bytes());
        }
        assert_eq!(parse_fields(&f), vec![("Rundown".to_string(), 1 << 63)]);
        // Truncated buffers give what is there, no panic.
        assert!(parse_enumeration(&b[..20]).is_empty());
    }

    #[test]
    fn builtin_names_resolve() {
        assert_eq!(
            resolve_builtin("microsoft-windows-winsock-afd"),
            Some(crate::schema::builtin::winsock_afd::PROVIDER)
        );
        assert_eq!(
            resolve_builtin(KERNEL_PROVIDER_NAME),
            Some(SYSTEM_TRACE_CONTROL_GUID)
        );
        assert_eq!(resolve_builtin("no-such-provider"), None);
        assert_eq!(
            resolve_builtin("winsock"),
            Some(crate::schema::builtin::winsock_afd::PROVIDER)
        );
        assert_eq!(
            resolve_builtin("Heap"),
            Some(crate::schema::builtin::heap_events::HEAP_PROVIDER)
        );
        let afd = builtin().into_iter().next().unwrap();
        assert!(afd.events > 30, "AFD layouts counted: {}", afd.events);
    }
}
