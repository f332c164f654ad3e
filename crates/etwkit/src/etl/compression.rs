//! MS-XCA "Plain LZ77" (LZXPRESS), the codec of compressed ETL buffers (flag COMPRESSED, Windows 8+).
//!
//! Written from the [MS-XCA] §2.4.4 description. One stream per buffer, no framing; the output length is
//! known from the buffer header, and the output never grows past it (no unbounded allocation).

/// Why a stream could not be fully inflated. `produced` bytes were still written to the output.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lz77Error {
    #[error("LZ77 match distance {distance} reaches before the start of the output ({produced} bytes produced)")]
    BadDistance { distance: usize, produced: usize },
    #[error("LZ77 match length field is invalid at input offset {at}")]
    BadLength { at: usize },
    #[error("LZ77 input ended early: {produced} of {expected} bytes produced")]
    Truncated { produced: usize, expected: usize },
}

/// Inflates `input` into `out` (cleared first), producing at most `expected` bytes. Returns an error when
/// the stream is malformed or produces a different length; `out` then holds what was decoded.
pub fn decompress_into(input: &[u8], expected: usize, out: &mut Vec<u8>) -> Result<(), Lz77Error> {
    out.clear();
    out.reserve(expected);
    let res = inflate(input, expected, out);
    match res {
        Ok(()) if out.len() == expected => Ok(()),
        Ok(()) => Err(Lz77Error::Truncated {
            produced: out.len(),
            expected,
        }),
        Err(e) => Err(e),
    }
}

/// Inflates at most `limit` bytes (useful to peek at the first record of a buffer).
pub fn decompress_prefix(input: &[u8], limit: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(limit);
    let _ = inflate(input, limit, &mut out);
    out
}

#[inline]
fn rd16(b: &[u8], p: usize) -> Option<usize> {
    Some(u16::from_le_bytes([*b.get(p)?, *b.get(p + 1)?]) as usize)
}

fn inflate(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), Lz77Error> {
    // The output is written into `limit` bytes made ahead and cut to what was produced at the
    // end, so that literal runs and matches are block copies rather than pushes byte by byte.
    let base = out.len();
    out.resize(base + limit, 0);
    let mut o = 0usize;
    let res = inflate_into(input, &mut out[base..], &mut o);
    out.truncate(base + o);
    res
}

/// [`inflate`] into `buf`; `o` is how many bytes were produced (also when it fails).
fn inflate_into(input: &[u8], buf: &mut [u8], o: &mut usize) -> Result<(), Lz77Error> {
    let limit = buf.len();
    let mut pos = 0usize;
    let mut flags: u32 = 0;
    let mut nbits: u32 = 0;
    let mut nibble_pos: Option<usize> = None;
    while *o < limit {
        if nbits == 0 {
            let Some(f) = input.get(pos..pos + 4) else {
                return Ok(());
            };
            flags = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
            pos += 4;
            nbits = 32;
        }
        // The flag bits are read from the top: a run of zeros is a run of literals.
        let rest = if nbits == 32 {
            flags
        } else {
            flags & ((1u32 << nbits) - 1)
        };
        let literals = (rest.leading_zeros() - (32 - nbits)).min(nbits) as usize;
        if literals > 0 {
            let n = literals.min(limit - *o).min(input.len() - pos);
            if n >= 1 && pos + 32 <= input.len() && *o + 32 <= limit {
                // At most 32 flag bits: one fixed-size copy, the bytes past `n` overwritten later.
                let chunk: [u8; 32] = input[pos..pos + 32].try_into().expect("32 bytes");
                buf[*o..*o + 32].copy_from_slice(&chunk);
            } else {
                buf[*o..*o + n].copy_from_slice(&input[pos..pos + n]);
            }
            pos += n;
            *o += n;
            if n < literals {
                // The input or the output ended inside the run.
                return Ok(());
            }
            nbits -= literals as u32;
            continue;
        }
        nbits -= 1;
        let Some(m) = rd16(input, pos) else {
            return Ok(());
        };
        pos += 2;
        let distance = (m >> 3) + 1;
        let len = match_length(input, m, &mut pos, &mut nibble_pos)?;
        let produced = *o;
        if distance > produced {
            return Err(Lz77Error::BadDistance { distance, produced });
        }
        let len = len.min(limit - produced);
        let start = produced - distance;
        if distance >= 16 && len <= 16 && produced + 16 <= limit {
            // The common short match: one fixed-size copy (bytes past `len` are overwritten later).
            let chunk: [u8; 16] = buf[start..start + 16].try_into().expect("16 bytes");
            buf[produced..produced + 16].copy_from_slice(&chunk);
        } else if distance >= len {
            buf.copy_within(start..start + len, produced);
        } else if distance == 1 {
            let c = buf[start];
            buf[produced..produced + len].fill(c);
        } else {
            // The match overlaps its own output: the `distance` bytes before repeat. Copy what is
            // already there, doubling each time (`done` stays a multiple of `distance`).
            let mut done = 0;
            while done < len {
                let n = (len - done).min(distance + done);
                buf.copy_within(start..start + n, produced + done);
                done += n;
            }
        }
        *o += len;
    }
    Ok(())
}

/// The length of the match whose 16-bit token is `m` (§2.4.4: 3 bits, then a nibble shared by
/// two matches, a byte, 16 bits, 32 bits), reading its extra length fields at `pos`.
/// `nibble_pos` is the byte whose high nibble the next match needing one takes.
fn match_length(
    input: &[u8],
    m: usize,
    pos: &mut usize,
    nibble_pos: &mut Option<usize>,
) -> Result<usize, Lz77Error> {
    let mut len = m & 7;
    if len == 7 {
        match *nibble_pos {
            None => {
                let Some(&nb) = input.get(*pos) else {
                    return Err(Lz77Error::BadLength { at: *pos });
                };
                len = (nb & 0x0F) as usize;
                *nibble_pos = Some(*pos);
                *pos += 1;
            }
            Some(np) => {
                len = (input[np] >> 4) as usize;
                *nibble_pos = None;
            }
        }
        if len == 15 {
            let Some(&b) = input.get(*pos) else {
                return Err(Lz77Error::BadLength { at: *pos });
            };
            *pos += 1;
            len = b as usize;
            if len == 255 {
                let Some(l) = rd16(input, *pos) else {
                    return Err(Lz77Error::BadLength { at: *pos });
                };
                *pos += 2;
                len = l;
                if len == 0 {
                    let Some(l4) = input.get(*pos..*pos + 4) else {
                        return Err(Lz77Error::BadLength { at: *pos });
                    };
                    len = u32::from_le_bytes([l4[0], l4[1], l4[2], l4[3]]) as usize;
                    *pos += 4;
                }
                if len < 22 {
                    return Err(Lz77Error::BadLength { at: *pos });
                }
                len -= 22;
            }
            len += 15;
        }
        len += 7;
    }
    Ok(len + 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time decoder `inflate` replaced, kept to check it against (match lengths
    /// are read the same way; the random streams below check those against their encoder).
    fn inflate_reference(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), Lz77Error> {
        let mut pos = 0usize;
        let mut flags: u32 = 0;
        let mut nbits: u32 = 0;
        let mut nibble_pos: Option<usize> = None;
        while out.len() < limit {
            if nbits == 0 {
                let Some(f) = input.get(pos..pos + 4) else {
                    return Ok(());
                };
                flags = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
                pos += 4;
                nbits = 32;
            }
            nbits -= 1;
            if (flags >> nbits) & 1 == 0 {
                let Some(&c) = input.get(pos) else {
                    return Ok(());
                };
                pos += 1;
                out.push(c);
                continue;
            }
            let Some(m) = rd16(input, pos) else {
                return Ok(());
            };
            pos += 2;
            let distance = (m >> 3) + 1;
            let len = match_length(input, m, &mut pos, &mut nibble_pos)?;
            let produced = out.len();
            if distance > produced {
                return Err(Lz77Error::BadDistance { distance, produced });
            }
            let len = len.min(limit - produced);
            let start = produced - distance;
            for i in 0..len {
                let c = out[start + i];
                out.push(c);
            }
        }
        Ok(())
    }

    /// A small xorshift generator (the tests need no crate for it).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A valid stream of random literal runs and matches (every length encoding, overlapping
    /// and distant matches), and the bytes it stands for.
    fn random_stream(rng: &mut Rng, target: usize) -> (Vec<u8>, Vec<u8>) {
        let mut items: Vec<(bool, Vec<u8>)> = Vec::new(); // (is match, encoded bytes)
        let mut plain: Vec<u8> = Vec::new();
        let mut pending_nibble: Option<usize> = None; // index into items of the shared nibble byte
        while plain.len() < target {
            if plain.is_empty() || rng.below(3) == 0 {
                let c = if rng.below(2) == 0 {
                    b'a' + rng.below(4) as u8
                } else {
                    rng.next() as u8
                };
                plain.push(c);
                items.push((false, vec![c]));
                continue;
            }
            let max_d = plain.len().min(8192);
            let distance = 1 + if rng.below(2) == 0 {
                rng.below(max_d.min(20))
            } else {
                rng.below(max_d)
            };
            let len = match rng.below(5) {
                0 => 3 + rng.below(7),
                1 => 10 + rng.below(15),
                2 => 25 + rng.below(255),
                3 => 280 + rng.below(2000),
                _ => 3 + rng.below(40),
            };
            let mut enc = Vec::new();
            let l = len - 3;
            let field = l.min(7);
            enc.extend_from_slice(&((((distance - 1) << 3) | field) as u16).to_le_bytes());
            let mut shared = None;
            if l >= 7 {
                let l = l - 7;
                let nib = l.min(15) as u8;
                match pending_nibble.take() {
                    None => {
                        enc.push(nib);
                        shared = Some(());
                    }
                    Some(k) => {
                        // The nibble byte is the third byte of that match's encoding.
                        items[k].1[2] |= nib << 4;
                    }
                }
                if l >= 15 {
                    let l = l - 15;
                    if l < 255 {
                        enc.push(l as u8);
                    } else {
                        enc.push(255);
                        let l = l + 22;
                        if l <= 0xffff {
                            enc.extend_from_slice(&(l as u16).to_le_bytes());
                        } else {
                            enc.extend_from_slice(&0u16.to_le_bytes());
                            enc.extend_from_slice(&(l as u32).to_le_bytes());
                        }
                    }
                }
            }
            for _ in 0..len {
                plain.push(plain[plain.len() - distance]);
            }
            items.push((true, enc));
            if shared.is_some() {
                pending_nibble = Some(items.len() - 1);
            }
        }
        // Flag words of 32 items each, written before the items they describe.
        let mut stream = Vec::new();
        for group in items.chunks(32) {
            let mut flags = 0u32;
            for (i, (m, _)) in group.iter().enumerate() {
                if *m {
                    flags |= 1 << (31 - i);
                }
            }
            stream.extend_from_slice(&flags.to_le_bytes());
            for (_, bytes) in group {
                stream.extend_from_slice(bytes);
            }
        }
        (stream, plain)
    }

    #[test]
    fn inflate_equals_the_reference_on_random_streams() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..300 {
            let target = 1 + rng.below(if round % 10 == 0 { 200_000 } else { 5000 });
            let (stream, plain) = random_stream(&mut rng, target);
            let mut out = Vec::new();
            decompress_into(&stream, plain.len(), &mut out).unwrap();
            assert_eq!(out, plain, "round {round}");
            // Cut anywhere, or asked for fewer bytes: the same bytes and answer as the reference.
            for _ in 0..4 {
                let cut = rng.below(stream.len() + 1);
                let limit = rng.below(plain.len() + 1);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let ra = inflate(&stream[..cut], limit, &mut a);
                let rb = inflate_reference(&stream[..cut], limit, &mut b);
                assert_eq!(
                    (ra, &a),
                    (rb, &b),
                    "round {round}, cut {cut}, limit {limit}"
                );
            }
        }
    }

    #[test]
    fn inflate_equals_the_reference_on_random_bytes() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for round in 0..3000 {
            let n = rng.below(600);
            let input: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            let limit = rng.below(4000);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let ra = inflate(&input, limit, &mut a);
            let rb = inflate_reference(&input, limit, &mut b);
            assert_eq!((ra, &a), (rb, &b), "round {round}");
        }
    }

    #[test]
    fn literals_and_overlapping_match() {
        // flags: bit31 literal 'a', bit30 literal 'b', bit29 match dist 2 len 3+4=7 → "abababababa"? no:
        // len field 4 → length 7: copies "ab" repeatedly → "ab" + "abababa".
        let mut input = Vec::new();
        input.extend_from_slice(&0x2000_0000u32.to_le_bytes());
        input.extend_from_slice(b"ab");
        let m: u16 = ((2 - 1) << 3) | 4;
        input.extend_from_slice(&m.to_le_bytes());
        let mut out = Vec::new();
        decompress_into(&input, 9, &mut out).unwrap();
        assert_eq!(out, b"ababababa");
    }

    #[test]
    fn bad_distance_is_an_error_not_a_panic() {
        let mut input = Vec::new();
        input.extend_from_slice(&0x8000_0000u32.to_le_bytes());
        input.extend_from_slice(&((100u16 << 3) | 1).to_le_bytes());
        let mut out = Vec::new();
        assert!(matches!(
            decompress_into(&input, 50, &mut out),
            Err(Lz77Error::BadDistance { .. })
        ));
    }
}
