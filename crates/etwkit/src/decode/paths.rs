//! NT device paths to DOS paths, by the volume mapping the trace itself carries (KernelTraceControl
//! SysConfig VolumeMapping events, written by xperf/PerfView merges: `\Device\HarddiskVolume2\` →
//! `C:\`, `\SystemRoot\` → `C:\Windows\`); a rooted path without a device (`\Windows\...`, as
//! Image events log them) is on the system drive. Other paths get no DOS path.

use crate::event::EventRecord;

/// KernelTraceControl SysConfig class; opcode 35 is VolumeMapping (NtPath, DosPath: UTF-16 strings).
const SYS_CONFIG: crate::Guid = crate::schema::builtin::kernel_mof::KTC_SYS_CONFIG;
const VOLUME_MAPPING: u8 = 35;

/// NT prefix → DOS prefix, longest NT prefix first.
#[derive(Debug, Default)]
pub struct VolumeMap {
    map: Vec<(String, String)>,
    /// The drive `\SystemRoot\` maps to (`C:`): a rooted path without a device
    /// (`\Windows\System32\x.dll`, as Image events log them) is on it.
    system_drive: Option<String>,
    /// Every NT prefix is ASCII of at most `HEAD` bytes (set by `finish`): UTF-16 paths are
    /// matched on their units, against `lower`, the prefixes in lowercase.
    ascii: bool,
    lower: Vec<Vec<u8>>,
}

/// How many leading units of a UTF-16 path the prefix match looks at.
const HEAD: usize = 256;

/// A NUL-terminated UTF-16 string at the start of `b`, and the bytes after it.
fn wstr(b: &[u8]) -> (String, &[u8]) {
    let mut i = 0;
    while i + 1 < b.len() && (b[i], b[i + 1]) != (0, 0) {
        i += 2;
    }
    let units = b[..i]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    let s = char::decode_utf16(units)
        .map(|r| r.unwrap_or('\u{FFFD}'))
        .collect();
    (s, b.get(i + 2..).unwrap_or(&[]))
}

impl VolumeMap {
    /// Learns from a VolumeMapping record; returns whether `rec` was one.
    pub fn observe(&mut self, rec: &EventRecord<'_>) -> bool {
        if !rec.header_type.is_classic()
            || rec.provider != SYS_CONFIG
            || rec.descriptor.opcode != VOLUME_MAPPING
        {
            return false;
        }
        let (nt, rest) = wstr(&rec.payload);
        let (dos, _) = wstr(rest);
        if !nt.is_empty() && !dos.is_empty() && !self.map.iter().any(|(n, _)| *n == nt) {
            self.map.push((nt, dos));
        }
        true
    }

    /// Orders the mappings for lookup; call once after the last [`VolumeMap::observe`].
    pub fn finish(&mut self) {
        self.ascii = self
            .map
            .iter()
            .all(|(n, _)| n.is_ascii() && n.len() <= HEAD);
        self.map
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        self.system_drive = self
            .map
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(r"\SystemRoot\"))
            .and_then(|(_, d)| d.get(..2).filter(|x| x.ends_with(':')).map(str::to_string));
        self.lower = self
            .map
            .iter()
            .map(|(n, _)| n.to_ascii_lowercase().into_bytes())
            .collect();
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The DOS form of an NT path (ASCII case-insensitive prefix match), if the trace maps its volume.
    pub fn to_dos(&self, nt: &str) -> Option<String> {
        let mut out = String::new();
        self.to_dos_into(nt, &mut out).then_some(out)
    }

    /// As [`VolumeMap::to_dos_into`], for an NT path given as UTF-16LE bytes (as a payload holds
    /// it): the prefixes are matched on the units, only the rest is decoded.
    pub fn to_dos_utf16(&self, units: &[u8], out: &mut String) -> bool {
        out.clear();
        if let Some((dos, skip)) = self.split_utf16(units) {
            out.push_str(dos);
            super::scalar::utf16_into(&units[skip..], out);
            return true;
        }
        if !self.ascii {
            // Not expressible on units: decode first.
            let nt = super::scalar::utf16(units);
            return self.to_dos_into(&nt, out);
        }
        false
    }

    /// The DOS form of an NT path given as UTF-16LE bytes, undecoded: the DOS text that replaces
    /// its first `skip` bytes (a volume's prefix, or nothing before a rooted path on the system
    /// drive), and `skip`. `None` when there is no DOS form, or when the prefixes cannot be
    /// matched on units (then [`VolumeMap::to_dos_utf16`] decodes first).
    pub fn split_utf16(&self, units: &[u8]) -> Option<(&str, usize)> {
        // Whether the path starts with ASCII `p`, ignoring ASCII case (a unit matches an ASCII
        // character only when it is that character: the decoded text's bytes match alike).
        let starts = |p: &str| {
            units.len() >= 2 * p.len()
                && p.bytes().zip(units.chunks_exact(2)).all(|(a, u)| {
                    u[1] == 0 && u[0].eq_ignore_ascii_case(&a) && (a < 0x80 || u[0] == a)
                })
        };
        if !self.ascii {
            return None;
        }
        // The leading ASCII units in lowercase, compared with each prefix as bytes.
        let mut head = [0u8; HEAD];
        let mut h = 0;
        let longest = self.lower.iter().map(Vec::len).max().unwrap_or(0);
        for (d, u) in head[..longest].iter_mut().zip(units.chunks_exact(2)) {
            if u[1] != 0 || u[0] >= 0x80 {
                break;
            }
            *d = u[0].to_ascii_lowercase();
            h += 1;
        }
        if let Some(i) = self.lower.iter().position(|n| head[..h].starts_with(n)) {
            let (n, d) = &self.map[i];
            return Some((d, 2 * n.len()));
        }
        let rooted = starts("\\") && !starts(r"\\") && !starts(r"\Device\") && !starts(r"\??\");
        match &self.system_drive {
            Some(drive) if rooted => Some((drive, 0)),
            _ => None,
        }
    }

    /// As [`VolumeMap::to_dos`], into `out` (replacing its text; its space is reused): whether
    /// there is a DOS form.
    pub fn to_dos_into(&self, nt: &str, out: &mut String) -> bool {
        out.clear();
        let device = |p: &str| nt.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
        if let Some((n, d)) = self.map.iter().find(|(n, _)| device(n)) {
            out.push_str(d);
            out.push_str(&nt[n.len()..]);
            return true;
        }
        let rooted = nt.starts_with('\\')
            && !nt.starts_with(r"\\")
            && !device(r"\Device\")
            && !device(r"\??\");
        match &self.system_drive {
            Some(drive) if rooted => {
                out.push_str(drive);
                out.push_str(nt);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::VolumeMap;

    #[test]
    fn longest_prefix_then_system_drive() {
        let mut m = VolumeMap::default();
        for (n, d) in [
            (r"\Device\HarddiskVolume2\", r"C:\"),
            (r"\Device\HarddiskVolume22\", r"E:\"),
            (r"\SystemRoot\", r"C:\Windows\"),
        ] {
            m.map.push((n.into(), d.into()));
        }
        m.finish();
        let dos = |p: &str| {
            // The UTF-16 route gives the same answer as the text route.
            let units: Vec<u8> = p.encode_utf16().flat_map(u16::to_le_bytes).collect();
            let mut out = String::new();
            let utf16 = m.to_dos_utf16(&units, &mut out).then_some(out);
            assert_eq!(utf16, m.to_dos(p), "{p}");
            m.to_dos(p)
        };
        assert_eq!(
            dos(r"\Device\HarddiskVolume2\x\y.txt").as_deref(),
            Some(r"C:\x\y.txt")
        );
        assert_eq!(dos(r"\Device\HarddiskVolume22\z").as_deref(), Some(r"E:\z"));
        assert_eq!(dos(r"\device\harddiskvolume2\a").as_deref(), Some(r"C:\a"));
        assert_eq!(
            dos(r"\SystemRoot\System32\n.sys").as_deref(),
            Some(r"C:\Windows\System32\n.sys")
        );
        assert_eq!(
            dos(r"\Windows\System32\a.dll").as_deref(),
            Some(r"C:\Windows\System32\a.dll")
        );
        assert_eq!(dos(r"\Device\Mup\srv\share"), None);
        assert_eq!(dos(r"\\DfsClient"), None);
        assert_eq!(dos(r"\??\C:\x"), None);
        assert_eq!(dos("relative.txt"), None);
        assert_eq!(
            dos("\\DEVICE\\HarddiskVolume2\\é😀\u{1}").as_deref(),
            Some("C:\\é😀\u{1}")
        );
        assert_eq!(dos("\\Devicé\\x").as_deref(), Some("C:\\Devicé\\x"));
        assert_eq!(dos("\\").as_deref(), Some("C:\\"));
    }
}
