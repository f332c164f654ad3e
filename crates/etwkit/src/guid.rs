//! Windows GUIDs: mixed-endian on disk (`Data1` u32 LE, `Data2`/`Data3` u16 LE, `Data4` raw bytes),
//! printed as lowercase `8-4-4-4-12` without braces.

use std::fmt;
use std::str::FromStr;

/// A GUID in its logical form. `to_le_bytes`/`from_le_bytes` give the Windows on-disk layout.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Guid {
    pub data1: u32,
    pub data2: u16,
    pub data3: u16,
    pub data4: [u8; 8],
}

impl Guid {
    pub const ZERO: Guid = Guid {
        data1: 0,
        data2: 0,
        data3: 0,
        data4: [0; 8],
    };

    pub const fn new(data1: u32, data2: u16, data3: u16, data4: [u8; 8]) -> Self {
        Guid {
            data1,
            data2,
            data3,
            data4,
        }
    }

    /// Reads the 16-byte Windows layout. Returns `None` when fewer than 16 bytes are given.
    pub fn from_le_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; 16] = b.get(..16)?.try_into().ok()?;
        Some(Guid {
            data1: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            data2: u16::from_le_bytes([b[4], b[5]]),
            data3: u16::from_le_bytes([b[6], b[7]]),
            data4: [b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]],
        })
    }

    pub fn to_le_bytes(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[0..4].copy_from_slice(&self.data1.to_le_bytes());
        out[4..6].copy_from_slice(&self.data2.to_le_bytes());
        out[6..8].copy_from_slice(&self.data3.to_le_bytes());
        out[8..16].copy_from_slice(&self.data4);
        out
    }

    /// Reads 16 bytes in RFC 4122 (big-endian) order.
    pub fn from_be_bytes(b: &[u8; 16]) -> Self {
        Guid {
            data1: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            data2: u16::from_be_bytes([b[4], b[5]]),
            data3: u16::from_be_bytes([b[6], b[7]]),
            data4: [b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]],
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Guid::ZERO
    }

    /// Parses a `const` string at compile time; panics on malformed input (for built-in tables).
    pub const fn from_str_const(s: &str) -> Guid {
        let b = s.as_bytes();
        let (start, len) = if b.len() == 38 { (1, 36) } else { (0, b.len()) };
        assert!(len == 36, "GUID must be 36 characters");
        const fn hex(c: u8) -> u64 {
            match c {
                b'0'..=b'9' => (c - b'0') as u64,
                b'a'..=b'f' => (c - b'a' + 10) as u64,
                b'A'..=b'F' => (c - b'A' + 10) as u64,
                _ => panic!("bad hex digit in GUID"),
            }
        }
        const fn field(b: &[u8], from: usize, n: usize) -> u64 {
            let mut v = 0u64;
            let mut i = 0;
            while i < n {
                v = (v << 4) | hex(b[from + i]);
                i += 1;
            }
            v
        }
        let d1 = field(b, start, 8) as u32;
        let d2 = field(b, start + 9, 4) as u16;
        let d3 = field(b, start + 14, 4) as u16;
        let mut d4 = [0u8; 8];
        d4[0] = field(b, start + 19, 2) as u8;
        d4[1] = field(b, start + 21, 2) as u8;
        let mut i = 0;
        while i < 6 {
            d4[2 + i] = field(b, start + 24 + 2 * i, 2) as u8;
            i += 1;
        }
        Guid::new(d1, d2, d3, d4)
    }
}

/// Error for a string that is not a GUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a GUID: {0:?} (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, braces optional)")]
pub struct ParseGuidError(pub String);

impl FromStr for Guid {
    type Err = ParseGuidError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let t = t
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(t);
        let b = t.as_bytes();
        let ok = b.len() == 36
            && b.iter().enumerate().all(|(i, c)| match i {
                8 | 13 | 18 | 23 => *c == b'-',
                _ => c.is_ascii_hexdigit(),
            });
        if !ok {
            return Err(ParseGuidError(s.to_string()));
        }
        Ok(Guid::from_str_const(t))
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.data4;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            self.data1, self.data2, self.data3, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{self}}}")
    }
}

impl serde::Serialize for Guid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_windows_layout() {
        let g: Guid = "{4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac}".parse().unwrap();
        let b = g.to_le_bytes();
        assert_eq!(&b[..4], &[0xd9, 0x80, 0x4f, 0x4d]);
        assert_eq!(Guid::from_le_bytes(&b), Some(g));
        assert_eq!(g.to_string(), "4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac");
        assert!("4d4f80d9-c8bd-4d73-bb5b-19c90402c5a"
            .parse::<Guid>()
            .is_err());
        assert!("4d4f80d9xc8bd-4d73-bb5b-19c90402c5ac"
            .parse::<Guid>()
            .is_err());
    }
}
