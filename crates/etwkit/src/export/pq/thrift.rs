//! Thrift's compact protocol, the writing half: what a Parquet file's page headers and footer are
//! made of. A struct is a run of fields, each a header (the field id as a delta from the previous
//! one, and the type) and a value, closed by a zero byte; integers are zigzag varints.

/// Compact protocol type codes.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I32: u8 = 5;
const I64: u8 = 6;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const STRUCT: u8 = 12;

/// Writes compact-protocol structs into a byte vector.
#[derive(Default)]
pub struct Writer {
    pub out: Vec<u8>,
    /// The last field id of each open struct (the innermost last).
    last: Vec<i16>,
    current: i16,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn field(&mut self, id: i16, ty: u8) {
        let delta = id - self.current;
        if (1..=15).contains(&delta) {
            self.out.push((delta as u8) << 4 | ty);
        } else {
            self.out.push(ty);
            self.zigzag(id as i64);
        }
        self.current = id;
    }

    pub fn i32(&mut self, id: i16, v: i32) {
        self.field(id, I32);
        self.zigzag(v as i64);
    }

    pub fn i64(&mut self, id: i16, v: i64) {
        self.field(id, I64);
        self.zigzag(v);
    }

    pub fn i8(&mut self, id: i16, v: i8) {
        self.field(id, BYTE);
        self.out.push(v as u8);
    }

    pub fn bool(&mut self, id: i16, v: bool) {
        self.field(id, if v { BOOL_TRUE } else { BOOL_FALSE });
    }

    pub fn binary(&mut self, id: i16, v: &[u8]) {
        self.field(id, BINARY);
        self.varint(v.len() as u64);
        self.out.extend_from_slice(v);
    }

    /// Opens a struct field (or, with `id` None, a struct that is a list's element); close it with
    /// [`Writer::end`].
    pub fn begin(&mut self, id: Option<i16>) {
        if let Some(id) = id {
            self.field(id, STRUCT);
        }
        self.last.push(self.current);
        self.current = 0;
    }

    /// Closes the innermost struct (the top-level struct too, which needs no `begin`).
    pub fn end(&mut self) {
        self.out.push(0);
        self.current = self.last.pop().unwrap_or(0);
    }

    fn list_header(&mut self, id: i16, len: usize, elem: u8) {
        self.field(id, LIST);
        if len < 15 {
            self.out.push((len as u8) << 4 | elem);
        } else {
            self.out.push(0xf0 | elem);
            self.varint(len as u64);
        }
    }

    /// A list of `len` structs: write each with `begin(None)` ... `end()`.
    pub fn struct_list(&mut self, id: i16, len: usize) {
        self.list_header(id, len, STRUCT);
    }

    pub fn i32_list(&mut self, id: i16, v: &[i32]) {
        self.list_header(id, v.len(), I32);
        for &x in v {
            self.zigzag(x as i64);
        }
    }

    pub fn binary_list<'a>(&mut self, id: i16, v: impl ExactSizeIterator<Item = &'a [u8]>) {
        self.list_header(id, v.len(), BINARY);
        for x in v {
            self.varint(x.len() as u64);
            self.out.extend_from_slice(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_nesting_encode_as_the_compact_protocol_says() {
        let mut w = Writer::new();
        w.i32(1, 2); // short form: delta 1, type 5; zigzag(2) = 4
        w.i64(3, -1); // delta 2, type 6; zigzag(-1) = 1
        w.begin(Some(20)); // delta 17 > 15: long form, type byte then zigzag(20) = 40
        w.bool(1, true);
        w.end();
        w.binary(21, b"ab"); // delta 1 from the outer struct's 20
        w.i32_list(22, &[1, -2]);
        w.end();
        assert_eq!(
            w.out,
            [0x15, 4, 0x26, 1, 12, 40, 0x11, 0, 0x18, 2, b'a', b'b', 0x19, 0x25, 2, 3, 0]
        );
        let mut w = Writer::new();
        w.i32_list(1, &[0; 20]);
        assert_eq!(&w.out[..3], [0x19, 0xf5, 20]);
    }
}
