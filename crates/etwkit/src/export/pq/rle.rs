//! Parquet's RLE / bit-packing hybrid: how definition and repetition levels and dictionary indices
//! are stored. A run is either a repeated value (`count << 1`, then the value in whole bytes) or
//! groups of eight values packed `bit_width` bits each, least significant bit first
//! (`groups << 1 | 1`, then the bits). Only the last group may be padded: a reader knows how many
//! values the page holds.

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bits needed for values up to `max` (0 for 0).
pub fn bit_width(max: u32) -> u8 {
    (32 - max.leading_zeros()) as u8
}

/// Appends `values` (each below `2^bit_width`) to `out`, without a length prefix.
pub fn encode<T: Copy + PartialEq + Into<u32>>(values: &[T], bit_width: u8, out: &mut Vec<u8>) {
    let mut literals: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let v = values[i];
        let run = values[i..].iter().take_while(|&&x| x == v).count();
        let v: u32 = v.into();
        // A repeated run must start on a group boundary of the literals before it: fill their
        // last group from the run first.
        let fill = (8 - literals.len() % 8) % 8;
        if run >= fill + 8 {
            literals.extend(std::iter::repeat_n(v, fill));
            flush_literals(&mut literals, bit_width, out);
            let n = run - fill;
            varint(out, (n as u64) << 1);
            out.extend_from_slice(&v.to_le_bytes()[..bit_width.div_ceil(8) as usize]);
        } else {
            literals.extend(std::iter::repeat_n(v, run));
        }
        i += run;
    }
    flush_literals(&mut literals, bit_width, out);
}

/// Writes `literals` as bit-packed groups (the last padded with zeros) and empties it.
fn flush_literals(literals: &mut Vec<u32>, bit_width: u8, out: &mut Vec<u8>) {
    if literals.is_empty() {
        return;
    }
    let groups = literals.len().div_ceil(8);
    literals.resize(groups * 8, 0);
    varint(out, (groups as u64) << 1 | 1);
    let (mut acc, mut bits) = (0u64, 0u32);
    for &v in literals.iter() {
        acc |= (v as u64) << bits;
        bits += bit_width as u32;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    // Eight values of any width fill whole bytes: nothing is left over.
    debug_assert_eq!(bits, 0);
    literals.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the hybrid back (as a Parquet reader does) for the round trip.
    fn decode(mut b: &[u8], bit_width: u8, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        while out.len() < n {
            let (mut h, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                b = &b[1..];
                h |= ((byte & 0x7f) as u64) << shift;
                shift += 7;
                if byte < 0x80 {
                    break;
                }
            }
            if h & 1 == 0 {
                let w = bit_width.div_ceil(8) as usize;
                let mut v = [0u8; 4];
                v[..w].copy_from_slice(&b[..w]);
                b = &b[w..];
                out.extend(std::iter::repeat_n(
                    u32::from_le_bytes(v),
                    (h >> 1) as usize,
                ));
            } else {
                let count = (h >> 1) as usize * 8;
                let (mut acc, mut bits) = (0u64, 0u32);
                for _ in 0..count {
                    while bits < bit_width as u32 {
                        acc |= (b[0] as u64) << bits;
                        b = &b[1..];
                        bits += 8;
                    }
                    out.push((acc & ((1u64 << bit_width) - 1)) as u32);
                    acc >>= bit_width;
                    bits -= bit_width as u32;
                }
            }
        }
        assert!(b.is_empty(), "{} bytes left over", b.len());
        out.truncate(n);
        out
    }

    #[test]
    fn runs_and_packed_groups_read_back() {
        let mut seed = 7u64;
        for case in 0..400 {
            let bw = (case % 12) as u8 + 1;
            let n = case * 3 % 200;
            let mut values = Vec::new();
            while values.len() < n {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = (seed >> 33) as u32 & ((1 << bw) - 1);
                // Runs of every length, literals between them.
                let len = if seed & 3 == 0 {
                    (seed >> 8) as usize % 30
                } else {
                    1
                };
                values.extend(std::iter::repeat_n(v, len.max(1)));
            }
            values.truncate(n);
            let mut out = Vec::new();
            encode(&values, bw, &mut out);
            assert_eq!(decode(&out, bw, values.len()), values, "width {bw}");
        }
        // One long run is a varint header and one value byte: 10,000 levels of 1 in 4 bytes.
        let mut out = Vec::new();
        encode(&[1u8; 10_000], 1, &mut out);
        assert_eq!(out, [0xa0, 0x9c, 0x01, 1]);
        assert_eq!(bit_width(0), 0);
        assert_eq!(bit_width(1), 1);
        assert_eq!(bit_width(255), 8);
        assert_eq!(bit_width(256), 9);
    }
}
