//! WMI_BUFFER_HEADER: the 0x48-byte header that starts every buffer of an ETL file.

/// Size of the buffer header, 32- and 64-bit loggers alike.
pub const BUFFER_HEADER_SIZE: usize = 0x48;

/// BufferFlag bits.
pub mod flag {
    pub const FLUSH_MARKER: u16 = 0x0001;
    pub const EVENTS_LOST: u16 = 0x0002;
    pub const BUFFER_LOST: u16 = 0x0004;
    pub const RTBACKUP_CORRUPT: u16 = 0x0008;
    pub const RTBACKUP: u16 = 0x0010;
    pub const PROC_INDEX: u16 = 0x0020;
    pub const COMPRESSED: u16 = 0x0040;

    pub const ALL: [(u16, &str); 7] = [
        (FLUSH_MARKER, "FLUSH_MARKER"),
        (EVENTS_LOST, "EVENTS_LOST"),
        (BUFFER_LOST, "BUFFER_LOST"),
        (RTBACKUP_CORRUPT, "RTBACKUP_CORRUPT"),
        (RTBACKUP, "RTBACKUP"),
        (PROC_INDEX, "PROC_INDEX"),
        (COMPRESSED, "COMPRESSED"),
    ];
}

/// BufferType values.
pub mod buffer_type {
    pub const GENERIC: u16 = 0;
    pub const RUNDOWN: u16 = 1;
    pub const CTX_SWAP: u16 = 2;
    pub const REFTIME: u16 = 3;
    pub const HEADER: u16 = 4;
    pub const BATCHED: u16 = 5;
    pub const EMPTY_MARKER: u16 = 6;
    pub const DBG_INFO: u16 = 7;

    pub fn name(t: u16) -> &'static str {
        match t {
            GENERIC => "GENERIC",
            RUNDOWN => "RUNDOWN",
            CTX_SWAP => "CTX_SWAP",
            REFTIME => "REFTIME",
            HEADER => "HEADER",
            BATCHED => "BATCHED",
            EMPTY_MARKER => "EMPTY_MARKER",
            DBG_INFO => "DBG_INFO",
            _ => "UNKNOWN",
        }
    }
}

/// The fields of a WMI_BUFFER_HEADER that mean something on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferHeader {
    /// Stride to the next buffer; for compressed buffers the on-disk size including this header.
    pub buffer_size: u32,
    /// Valid bytes including the header (0 in Vista/Win7 header buffers); for compressed buffers the
    /// uncompressed size + 0x48.
    pub saved_offset: u32,
    pub current_offset: u32,
    /// Flush time (logger clock, or FILETIME in relogged files).
    pub timestamp: i64,
    pub sequence_number: u64,
    /// The raw u16 at 0x28 (ProcessorIndex, or ProcessorNumber + Alignment before Win8).
    pub processor_raw: u16,
    pub logger_id: u16,
    pub state: u32,
    /// Offset / FilledBytes: valid bytes including the header in every uncompressed buffer.
    pub offset: u32,
    pub flags: u16,
    pub buffer_type: u16,
}

impl BufferHeader {
    pub fn parse(b: &[u8]) -> Option<BufferHeader> {
        let b = b.get(..BUFFER_HEADER_SIZE)?;
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Some(BufferHeader {
            buffer_size: u32_at(0),
            saved_offset: u32_at(4),
            current_offset: u32_at(8),
            timestamp: u64_at(0x10) as i64,
            sequence_number: u64_at(0x18),
            processor_raw: u16_at(0x28),
            logger_id: u16_at(0x2A),
            state: u32_at(0x2C),
            offset: u32_at(0x30),
            flags: u16_at(0x34),
            buffer_type: u16_at(0x36),
        })
    }

    pub fn is_compressed(&self) -> bool {
        self.flags & flag::COMPRESSED != 0
    }

    /// The CPU the buffer belongs to: `ProcessorIndex & 0x7FF` with PROC_INDEX, else the low byte
    /// (Win7 files store 0x0800 / 0x0802 there).
    pub fn cpu(&self) -> u16 {
        if self.flags & flag::PROC_INDEX != 0 {
            self.processor_raw & 0x07FF
        } else {
            self.processor_raw & 0x00FF
        }
    }

    /// Valid bytes including the header for an uncompressed buffer: `Offset` if nonzero, else
    /// `SavedOffset`. For a compressed buffer: the uncompressed length + 0x48.
    pub fn valid_length(&self) -> u32 {
        if self.is_compressed() {
            self.saved_offset
        } else if self.offset != 0 {
            self.offset
        } else {
            self.saved_offset
        }
    }

    /// Does this look like a buffer header at all? Used to detect non-ETL input and to resynchronise
    /// after corruption.
    pub fn plausible(&self, max_uncompressed: u32) -> bool {
        let size_ok = self.buffer_size as usize > BUFFER_HEADER_SIZE;
        let flags_ok = self.flags & !0x7F == 0 && self.buffer_type <= 7 && self.state <= 6;
        let len = self.valid_length();
        let len_ok = if self.is_compressed() {
            (len as usize) >= BUFFER_HEADER_SIZE && len <= max_uncompressed
        } else {
            (len as usize) >= BUFFER_HEADER_SIZE && len <= self.buffer_size
        };
        size_ok && flags_ok && len_ok
    }

    pub fn flag_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        flag::ALL
            .iter()
            .filter(|(f, _)| self.flags & f != 0)
            .map(|(_, n)| *n)
    }
}
