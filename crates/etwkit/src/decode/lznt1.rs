//! LZNT1 ([MS-XCA] section 2.5), the compression `RtlCompressBuffer` calls
//! `COMPRESSION_FORMAT_LZNT1`: what KernelTraceControl's merge uses for the XML documents it adds
//! to a trace (the WinSAT assessment, PerfTrack scenarios). Payload-level: ETL buffers use a
//! different LZ77 (`etl::compression`).
//!
//! The stream is a run of chunks, each of at most 4,096 bytes once inflated. A chunk starts with a
//! 16-bit little-endian header: bits 0-11 hold the chunk's size after the header minus one, bits
//! 12-14 the signature 3, bit 15 whether the chunk is compressed (else its bytes are the data). A
//! zero header, or the input's end, ends the stream. A compressed chunk is groups of a flag byte
//! and eight items, lowest bit first: a clear bit is one literal byte, a set bit a 16-bit token
//! copying from earlier in the same chunk. How the token splits into offset and length depends on
//! how much of the chunk is inflated already: the offset takes as few bits as can reach its start
//! (at least 4, at most 12), the length the rest (3 added, the offset 1).

/// Why a stream does not inflate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("LZNT1 data at byte {at}: {what}")]
pub struct Error {
    /// Offset in the compressed input.
    pub at: usize,
    pub what: &'static str,
}

/// The largest a chunk inflates to.
const CHUNK: usize = 4096;

/// Inflates `input`; more than `limit` bytes of output is an error (a stream's size is known
/// from the record that carries it; this bounds what a corrupt one can ask for).
pub fn decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(limit.min(input.len().saturating_mul(8)));
    let mut i = 0;
    while i + 2 <= input.len() {
        let header = u16::from_le_bytes([input[i], input[i + 1]]);
        if header == 0 {
            break;
        }
        let err = |what| Error { at: i, what };
        if (header >> 12) & 7 != 3 {
            return Err(err("chunk header without the LZNT1 signature"));
        }
        let size = (header & 0x0fff) as usize + 1;
        let data = input
            .get(i + 2..i + 2 + size)
            .ok_or_else(|| err("chunk runs past the end of the data"))?;
        if header & 0x8000 == 0 {
            if out.len() + data.len() > limit {
                return Err(err("inflates to more than the stated size"));
            }
            out.extend_from_slice(data);
        } else {
            inflate_chunk(data, i + 2, &mut out, limit)?;
        }
        i += 2 + size;
    }
    Ok(out)
}

/// Inflates one compressed chunk's `data` (which starts at byte `base` of the input) onto `out`.
fn inflate_chunk(data: &[u8], base: usize, out: &mut Vec<u8>, limit: usize) -> Result<(), Error> {
    let start = out.len();
    let mut j = 0;
    while j < data.len() {
        let flags = data[j];
        j += 1;
        for bit in 0..8 {
            if j >= data.len() {
                break;
            }
            let err = |what| Error { at: base + j, what };
            if flags >> bit & 1 == 0 {
                if out.len() - start >= CHUNK || out.len() >= limit {
                    return Err(err("inflates to more than the stated size"));
                }
                out.push(data[j]);
                j += 1;
                continue;
            }
            let token = data
                .get(j..j + 2)
                .map(|t| u16::from_le_bytes([t[0], t[1]]))
                .ok_or_else(|| err("copy token cut off at the chunk's end"))?;
            let pos = out.len() - start;
            if pos == 0 {
                return Err(err("copy token before any byte of its chunk"));
            }
            // Offset bits: 4 while up to 16 bytes are inflated, one more each time that doubles.
            let mut offset_bits = 4;
            let mut p = pos - 1;
            while p >= 0x10 {
                p >>= 1;
                offset_bits += 1;
            }
            let length_bits = 16 - offset_bits;
            let offset = (token >> length_bits) as usize + 1;
            let length = (token & ((1 << length_bits) - 1)) as usize + 3;
            if offset > pos {
                return Err(err("copy reaches before the start of its chunk"));
            }
            if pos + length > CHUNK || out.len() + length > limit {
                return Err(err("inflates to more than the stated size"));
            }
            // Byte by byte: a copy may overlap the bytes it makes (a run).
            let from = out.len() - offset;
            for k in 0..length {
                out.push(out[from + k]);
            }
            j += 2;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_an_overlapping_copy() {
        // Flags 0b100: 'a', 'b', then offset 2, length 6 (pos 2: 4 offset bits, 12 length bits).
        let token: u16 = (2 - 1) << 12 | (6 - 3);
        let mut chunk = vec![0x04, b'a', b'b'];
        chunk.extend_from_slice(&token.to_le_bytes());
        let mut input = (0xb000u16 | (chunk.len() as u16 - 1))
            .to_le_bytes()
            .to_vec();
        input.extend_from_slice(&chunk);
        assert_eq!(decompress(&input, 100).unwrap(), b"abababab");
        // A zero header ends the stream; what follows is not read.
        input.extend_from_slice(&[0, 0, 0xff]);
        assert_eq!(decompress(&input, 100).unwrap(), b"abababab");
        // The stated size bounds the output.
        assert_eq!(
            decompress(&input, 7).unwrap_err().what,
            "inflates to more than the stated size"
        );
    }

    #[test]
    fn offset_bits_grow_with_the_position() {
        // 17 literals (pos 17: 5 offset bits, 11 length bits), then offset 17, length 4.
        let text = b"0123456789abcdefg";
        let mut chunk = Vec::new();
        for (k, group) in text.chunks(8).enumerate() {
            let flags = if k == 2 { 0b10 } else { 0 };
            chunk.push(flags);
            chunk.extend_from_slice(group);
        }
        let token: u16 = (17 - 1) << 11 | (4 - 3);
        chunk.extend_from_slice(&token.to_le_bytes());
        let mut input = (0xb000u16 | (chunk.len() as u16 - 1))
            .to_le_bytes()
            .to_vec();
        input.extend_from_slice(&chunk);
        assert_eq!(decompress(&input, 100).unwrap(), b"0123456789abcdefg0123");
    }

    #[test]
    fn uncompressed_chunks_are_copied_and_chunks_follow_each_other() {
        let raw: Vec<u8> = (0..CHUNK).map(|k| (k % 251) as u8).collect();
        let mut input = (0x3000u16 | (CHUNK as u16 - 1)).to_le_bytes().to_vec();
        input.extend_from_slice(&raw);
        // A second, compressed chunk: its copies reach only into itself.
        input.extend_from_slice(&[0x01, 0xb0, 0x00, b'z']);
        let out = decompress(&input, 2 * CHUNK).unwrap();
        assert_eq!(&out[..CHUNK], &raw[..]);
        assert_eq!(&out[CHUNK..], b"z");
    }

    #[test]
    fn corrupt_streams_say_where() {
        // A copy as the chunk's first item.
        let e = decompress(&[0x02, 0xb0, 0x01, 0x00, 0x00], 100).unwrap_err();
        assert_eq!(
            (e.at, e.what),
            (3, "copy token before any byte of its chunk")
        );
        // A copy reaching before the chunk: pos 1, offset 2.
        let e = decompress(&[0x03, 0xb0, 0x02, b'a', 0x00, 0x10], 100).unwrap_err();
        assert_eq!(
            (e.at, e.what),
            (4, "copy reaches before the start of its chunk")
        );
        // A chunk longer than the input, and a header without the signature.
        let e = decompress(&[0x10, 0xb0, 0x00, b'a'], 100).unwrap_err();
        assert_eq!((e.at, e.what), (0, "chunk runs past the end of the data"));
        let e = decompress(&[0x01, 0x80, 0x00, b'a'], 100).unwrap_err();
        assert_eq!(e.what, "chunk header without the LZNT1 signature");
        // A token cut off by the chunk's end.
        let e = decompress(&[0x02, 0xb0, 0x02, b'a', 0x00], 100).unwrap_err();
        assert_eq!(e.what, "copy token cut off at the chunk's end");
    }
}
