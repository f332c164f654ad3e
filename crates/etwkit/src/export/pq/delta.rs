//! DELTA_BINARY_PACKED: integers as a first value and the differences between neighbours, each
//! block's differences less their minimum, bit-packed in miniblocks. Rising columns (record
//! indexes, timestamps) take a few bits per value before zstd sees them.
//!
//! Layout: a header of varints `block size` (values per block, a multiple of 128), `miniblocks per
//! block`, `value count` and the zigzag-coded first value; then per block the zigzag-coded minimum
//! delta, one bit-width byte per miniblock and the miniblocks, each `block size / miniblocks`
//! values packed least significant bit first. The last block's unused miniblocks have width bytes
//! (zero here) and no bodies; its last used miniblock is padded with zeros to its full size.

const BLOCK: usize = 128;
const MINIBLOCKS: usize = 4;
const MINI: usize = BLOCK / MINIBLOCKS;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Appends `values` delta-encoded to `out`. Differences wrap as 64-bit integers, so any sequence
/// round-trips; a 32-bit column's values are given sign-extended.
pub fn encode(values: &[i64], out: &mut Vec<u8>) {
    varint(BLOCK as u64, out);
    varint(MINIBLOCKS as u64, out);
    varint(values.len() as u64, out);
    varint(zigzag(values.first().copied().unwrap_or(0)), out);
    let mut deltas = [0u64; BLOCK];
    let mut i = 1;
    while i < values.len() {
        let n = (values.len() - i).min(BLOCK);
        let mut min = i64::MAX;
        for (k, d) in deltas[..n].iter_mut().enumerate() {
            let delta = values[i + k].wrapping_sub(values[i + k - 1]);
            min = min.min(delta);
            *d = delta as u64;
        }
        varint(zigzag(min), out);
        for d in &mut deltas[..n] {
            *d = d.wrapping_sub(min as u64);
        }
        deltas[n..].fill(0);
        let used = n.div_ceil(MINI);
        let widths_at = out.len();
        out.resize(widths_at + MINIBLOCKS, 0);
        for m in 0..used {
            let mini = &deltas[m * MINI..(m + 1) * MINI];
            let width = 64 - mini.iter().fold(0, |a, &d| a | d).leading_zeros();
            out[widths_at + m] = width as u8;
            pack(mini, width, out);
        }
        i += n;
    }
}

/// Packs `values` at `width` bits each, least significant bit first (whole bytes: a miniblock's
/// 32 values fill `4 * width` of them).
fn pack(values: &[u64], width: u32, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    let mut acc: u128 = 0;
    let mut bits = 0;
    for &v in values {
        acc |= (v as u128) << bits;
        bits += width;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(acc as u8);
    }
}

#[cfg(test)]
pub fn decode(mut b: &[u8]) -> Vec<i64> {
    fn varint(b: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[0];
            *b = &b[1..];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }
    fn unzigzag(v: u64) -> i64 {
        (v >> 1) as i64 ^ -((v & 1) as i64)
    }
    let block = varint(&mut b) as usize;
    let minis = varint(&mut b) as usize;
    let count = varint(&mut b) as usize;
    let mut out = vec![unzigzag(varint(&mut b))];
    out.truncate(count);
    let per = block / minis;
    while out.len() < count {
        let min = unzigzag(varint(&mut b));
        let widths = b[..minis].to_vec();
        b = &b[minis..];
        for &w in &widths {
            if out.len() >= count {
                break;
            }
            let mut bitpos = 0usize;
            for _ in 0..per {
                let mut v = 0u64;
                for k in 0..w as usize {
                    let bit = (b[(bitpos + k) / 8] >> ((bitpos + k) % 8)) & 1;
                    v |= u64::from(bit) << k;
                }
                bitpos += w as usize;
                if out.len() < count {
                    let prev = *out.last().unwrap();
                    out.push(prev.wrapping_add(min).wrapping_add(v as i64));
                }
            }
            b = &b[per * w as usize / 8..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed
        };
        for n in [0usize, 1, 2, 31, 32, 33, 127, 128, 129, 130, 257, 1000] {
            let rising: Vec<i64> = (0..n as i64).map(|v| 1_000_000 + v).collect();
            let times: Vec<i64> = {
                let mut t = 133_000_000_000_000_000i64;
                (0..n)
                    .map(|_| {
                        t += (next() % 5000) as i64;
                        t
                    })
                    .collect()
            };
            let wild: Vec<i64> = (0..n).map(|_| next() as i64).collect();
            let edges: Vec<i64> = (0..n).map(|k| [i64::MIN, i64::MAX, 0, -1][k % 4]).collect();
            for values in [rising, times, wild, edges] {
                let mut out = Vec::new();
                encode(&values, &mut out);
                assert_eq!(decode(&out), values, "{n} values");
            }
        }
        // Indexes rising by one: after the header, one block per 128 differences: a minimum
        // delta of 1 (zigzag 2) and four widths of zero.
        let mut out = Vec::new();
        encode(&(0..257).collect::<Vec<i64>>(), &mut out);
        assert_eq!(
            out,
            [0x80, 0x01, 4, 0x81, 0x02, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0]
        );
    }
}
