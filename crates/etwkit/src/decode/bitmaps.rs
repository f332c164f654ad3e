//! Value maps and bitmaps: names for integers, joined the way TraceEvent shows them.

use std::fmt::Write as _;

use crate::guid::Guid;
use crate::schema::ValueMap;

/// Providers TraceEvent decodes with compiled parsers, whose bitmaps it prints as .NET `[Flags]`
/// enums (`"DomainNeutral, Manifest"`) — whatever gives us their layout (built-in manifest or the
/// file's own metadata). Kernel MOF classes print so too; other providers' bitmaps are joined with
/// `|`, as TraceEvent's manifest-driven parser joins them.
pub(crate) const DOTNET_FLAG_PROVIDERS: [Guid; 4] = [
    // Microsoft-Windows-DotNETRuntime, -DotNETRuntimeRundown, -DotNETRuntimePrivate
    Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"),
    Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18"),
    Guid::from_str_const("763fd754-7086-4dfe-95eb-c01a46faf4ca"),
    crate::schema::builtin::KERNEL_FILE,
];

/// A value map and how its bitmap names are joined (see `PlanField::dotnet_flags`).
#[derive(Clone, Copy)]
pub(crate) struct MapRef<'a> {
    pub(crate) map: &'a ValueMap,
    pub(crate) dotnet: bool,
}

pub(crate) fn map_name(m: MapRef<'_>, v: u64) -> Option<String> {
    map_name_ref(m, v).map(|n| n.into_owned())
}

/// [`map_name`], borrowing the name from the map when it is one entry's name (a value map, a
/// bitmap value with one flag set): no allocation in the common case.
pub(crate) fn map_name_ref(m: MapRef<'_>, v: u64) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    let map = m.map;
    if !map.is_bitmap || v == 0 {
        return map
            .entries
            .iter()
            .find(|(k, _)| *k == v)
            .map(|(_, n)| Cow::Borrowed(n.as_str()));
    }
    let mut names: Vec<(u64, &str)> = Vec::new();
    let mut left = v;
    if m.dotnet {
        // As .NET prints a [Flags] enum: the largest entries whose bits are all still unclaimed
        // first (a composite such as FileShare's ReadWrite = 3 wins over Read and Write).
        let mut by_value: Vec<&(u64, String)> = map.entries.iter().filter(|e| e.0 != 0).collect();
        by_value.sort_by_key(|e| std::cmp::Reverse(e.0));
        for (k, n) in by_value {
            if left & k == *k {
                names.push((*k, n.as_str()));
                left &= !k;
            }
        }
    } else {
        for (k, n) in &map.entries {
            if *k != 0 && v & k == *k {
                names.push((*k, n.as_str()));
                left &= !k;
            }
        }
    }
    if names.is_empty() {
        return None;
    }
    if let ([(_, one)], 0) = (names.as_slice(), left) {
        return Some(Cow::Borrowed(one));
    }
    // Ascending value order, whatever order the map lists its entries in.
    names.sort_by_key(|e| e.0);
    let sep = if m.dotnet { ", " } else { "|" };
    let mut s = String::new();
    for (i, (_, n)) in names.iter().enumerate() {
        if i > 0 {
            s.push_str(sep);
        }
        s.push_str(n);
    }
    if left != 0 {
        let _ = write!(s, "{sep}0x{left:x}");
    }
    Some(Cow::Owned(s))
}
