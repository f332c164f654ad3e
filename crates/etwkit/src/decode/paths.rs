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
}

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
        self.map
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        self.system_drive = self
            .map
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(r"\SystemRoot\"))
            .and_then(|(_, d)| d.get(..2).filter(|x| x.ends_with(':')).map(str::to_string));
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The DOS form of an NT path (ASCII case-insensitive prefix match), if the trace maps its volume.
    pub fn to_dos(&self, nt: &str) -> Option<String> {
        let mut out = String::new();
        self.to_dos_into(nt, &mut out).then_some(out)
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
        let dos = |p: &str| m.to_dos(p);
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
    }
}
