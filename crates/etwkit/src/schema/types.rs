//! TDH in-types and out-types (the numbers every schema in etwkit uses), their names, the manifest
//! spellings (`win:UInt32`, `xs:string`...), and the mapping from TraceLogging's own in/out type
//! numbers onto TDH's. TraceLogging OutType numbers are *not* TDH OutType numbers (TL 4 = Hex, TDH 4 =
//! UnsignedByte), so every TL schema is translated here once, at parse time.

use super::{InType, OutType};

/// `TDH_INTYPE_*`.
pub mod in_type {
    use super::InType;
    pub const NULL: InType = 0;
    pub const UNICODESTRING: InType = 1;
    pub const ANSISTRING: InType = 2;
    pub const INT8: InType = 3;
    pub const UINT8: InType = 4;
    pub const INT16: InType = 5;
    pub const UINT16: InType = 6;
    pub const INT32: InType = 7;
    pub const UINT32: InType = 8;
    pub const INT64: InType = 9;
    pub const UINT64: InType = 10;
    pub const FLOAT: InType = 11;
    pub const DOUBLE: InType = 12;
    pub const BOOLEAN: InType = 13;
    pub const BINARY: InType = 14;
    pub const GUID: InType = 15;
    pub const POINTER: InType = 16;
    pub const FILETIME: InType = 17;
    pub const SYSTEMTIME: InType = 18;
    pub const SID: InType = 19;
    pub const HEXINT32: InType = 20;
    pub const HEXINT64: InType = 21;
    pub const MANIFEST_COUNTEDSTRING: InType = 22;
    pub const MANIFEST_COUNTEDANSISTRING: InType = 23;
    pub const RESERVED24: InType = 24;
    pub const MANIFEST_COUNTEDBINARY: InType = 25;
    pub const COUNTEDSTRING: InType = 300;
    pub const COUNTEDANSISTRING: InType = 301;
    pub const REVERSEDCOUNTEDSTRING: InType = 302;
    pub const REVERSEDCOUNTEDANSISTRING: InType = 303;
    pub const NONNULLTERMINATEDSTRING: InType = 304;
    pub const NONNULLTERMINATEDANSISTRING: InType = 305;
    pub const UNICODECHAR: InType = 306;
    pub const ANSICHAR: InType = 307;
    pub const SIZET: InType = 308;
    pub const HEXDUMP: InType = 309;
    pub const WBEMSID: InType = 310;
    /// etwkit's own (no TDH metadata carries it): the rest of the payload is LZNT1-compressed
    /// UTF-16LE text ([`crate::decode::lznt1`]); a length, when the layout gives one, is the
    /// inflated size in bytes. KernelTraceControl's WinSAT XML.
    pub const LZNT1_UNICODESTRING: InType = 0x7f01;
    /// As [`LZNT1_UNICODESTRING`], inflating to 8-bit text (UTF-8, else Latin-1): PerfTrack XML.
    pub const LZNT1_ANSISTRING: InType = 0x7f02;
}

/// `TDH_OUTTYPE_*`.
pub mod out_type {
    use super::OutType;
    pub const NULL: OutType = 0;
    pub const STRING: OutType = 1;
    pub const DATETIME: OutType = 2;
    pub const BYTE: OutType = 3;
    pub const UNSIGNEDBYTE: OutType = 4;
    pub const SHORT: OutType = 5;
    pub const UNSIGNEDSHORT: OutType = 6;
    pub const INT: OutType = 7;
    pub const UNSIGNEDINT: OutType = 8;
    pub const LONG: OutType = 9;
    pub const UNSIGNEDLONG: OutType = 10;
    pub const FLOAT: OutType = 11;
    pub const DOUBLE: OutType = 12;
    pub const BOOLEAN: OutType = 13;
    pub const GUID: OutType = 14;
    pub const HEXBINARY: OutType = 15;
    pub const HEXINT8: OutType = 16;
    pub const HEXINT16: OutType = 17;
    pub const HEXINT32: OutType = 18;
    pub const HEXINT64: OutType = 19;
    pub const PID: OutType = 20;
    pub const TID: OutType = 21;
    pub const PORT: OutType = 22;
    pub const IPV4: OutType = 23;
    pub const IPV6: OutType = 24;
    pub const SOCKETADDRESS: OutType = 25;
    pub const CIMDATETIME: OutType = 26;
    pub const ETWTIME: OutType = 27;
    pub const XML: OutType = 28;
    pub const ERRORCODE: OutType = 29;
    pub const WIN32ERROR: OutType = 30;
    pub const NTSTATUS: OutType = 31;
    pub const HRESULT: OutType = 32;
    pub const CULTURE_INSENSITIVE_DATETIME: OutType = 33;
    pub const JSON: OutType = 34;
    pub const UTF8: OutType = 35;
    pub const PKCS7_WITH_TYPE_INFO: OutType = 36;
    pub const CODE_POINTER: OutType = 37;
    pub const DATETIME_UTC: OutType = 38;
    pub const REDUCEDSTRING: OutType = 300;
    pub const NOPRINT: OutType = 301;
}

/// TraceLogging in-types (`TlgIn*`, 5 bits).
pub mod tl_in {
    pub const NULL: u8 = 0;
    pub const UNICODESTRING: u8 = 1;
    pub const ANSISTRING: u8 = 2;
    pub const INT8: u8 = 3;
    pub const UINT8: u8 = 4;
    pub const INT16: u8 = 5;
    pub const UINT16: u8 = 6;
    pub const INT32: u8 = 7;
    pub const UINT32: u8 = 8;
    pub const INT64: u8 = 9;
    pub const UINT64: u8 = 10;
    pub const FLOAT: u8 = 11;
    pub const DOUBLE: u8 = 12;
    pub const BOOL32: u8 = 13;
    pub const BINARY: u8 = 14;
    pub const GUID: u8 = 15;
    pub const POINTER_UNSUPPORTED: u8 = 16;
    pub const FILETIME: u8 = 17;
    pub const SYSTEMTIME: u8 = 18;
    pub const SID: u8 = 19;
    pub const HEXINT32: u8 = 20;
    pub const HEXINT64: u8 = 21;
    pub const COUNTEDSTRING: u8 = 22;
    pub const COUNTEDANSISTRING: u8 = 23;
    pub const STRUCT: u8 = 24;
    pub const COUNTEDBINARY: u8 = 25;
}

/// TraceLogging out-types (`TlgOut*`, 7 bits).
pub mod tl_out {
    pub const DEFAULT: u8 = 0;
    pub const NOPRINT: u8 = 1;
    pub const STRING: u8 = 2;
    pub const BOOLEAN: u8 = 3;
    pub const HEX: u8 = 4;
    pub const PID: u8 = 5;
    pub const TID: u8 = 6;
    pub const PORT: u8 = 7;
    pub const IPV4: u8 = 8;
    pub const IPV6: u8 = 9;
    pub const SOCKETADDRESS: u8 = 10;
    pub const XML: u8 = 11;
    pub const JSON: u8 = 12;
    pub const WIN32ERROR: u8 = 13;
    pub const NTSTATUS: u8 = 14;
    pub const HRESULT: u8 = 15;
    pub const FILETIME: u8 = 16;
    pub const SIGNED: u8 = 17;
    pub const UNSIGNED: u8 = 18;
    pub const DATETIME_CULTURE_INSENSITIVE: u8 = 33;
    pub const UTF8: u8 = 35;
    pub const PKCS7_WITH_TYPE_INFO: u8 = 36;
    pub const CODE_POINTER: u8 = 37;
    pub const DATETIME_UTC: u8 = 38;
}

/// The `TDH_INTYPE_*` suffix for an in-type (etwkit's own `LZNT1_*` by their constant names), or
/// `None` for an unknown number.
pub fn in_type_name(t: InType) -> Option<&'static str> {
    use in_type::*;
    Some(match t {
        NULL => "NULL",
        UNICODESTRING => "UNICODESTRING",
        ANSISTRING => "ANSISTRING",
        INT8 => "INT8",
        UINT8 => "UINT8",
        INT16 => "INT16",
        UINT16 => "UINT16",
        INT32 => "INT32",
        UINT32 => "UINT32",
        INT64 => "INT64",
        UINT64 => "UINT64",
        FLOAT => "FLOAT",
        DOUBLE => "DOUBLE",
        BOOLEAN => "BOOLEAN",
        BINARY => "BINARY",
        GUID => "GUID",
        POINTER => "POINTER",
        FILETIME => "FILETIME",
        SYSTEMTIME => "SYSTEMTIME",
        SID => "SID",
        HEXINT32 => "HEXINT32",
        HEXINT64 => "HEXINT64",
        MANIFEST_COUNTEDSTRING => "MANIFEST_COUNTEDSTRING",
        MANIFEST_COUNTEDANSISTRING => "MANIFEST_COUNTEDANSISTRING",
        RESERVED24 => "RESERVED24",
        MANIFEST_COUNTEDBINARY => "MANIFEST_COUNTEDBINARY",
        COUNTEDSTRING => "COUNTEDSTRING",
        COUNTEDANSISTRING => "COUNTEDANSISTRING",
        REVERSEDCOUNTEDSTRING => "REVERSEDCOUNTEDSTRING",
        REVERSEDCOUNTEDANSISTRING => "REVERSEDCOUNTEDANSISTRING",
        NONNULLTERMINATEDSTRING => "NONNULLTERMINATEDSTRING",
        NONNULLTERMINATEDANSISTRING => "NONNULLTERMINATEDANSISTRING",
        UNICODECHAR => "UNICODECHAR",
        ANSICHAR => "ANSICHAR",
        SIZET => "SIZET",
        HEXDUMP => "HEXDUMP",
        WBEMSID => "WBEMSID",
        LZNT1_UNICODESTRING => "LZNT1_UNICODESTRING",
        LZNT1_ANSISTRING => "LZNT1_ANSISTRING",
        _ => return None,
    })
}

/// The `TDH_OUTTYPE_*` suffix for an out-type, or `None` for an unknown number.
pub fn out_type_name(t: OutType) -> Option<&'static str> {
    use out_type::*;
    Some(match t {
        NULL => "NULL",
        STRING => "STRING",
        DATETIME => "DATETIME",
        BYTE => "BYTE",
        UNSIGNEDBYTE => "UNSIGNEDBYTE",
        SHORT => "SHORT",
        UNSIGNEDSHORT => "UNSIGNEDSHORT",
        INT => "INT",
        UNSIGNEDINT => "UNSIGNEDINT",
        LONG => "LONG",
        UNSIGNEDLONG => "UNSIGNEDLONG",
        FLOAT => "FLOAT",
        DOUBLE => "DOUBLE",
        BOOLEAN => "BOOLEAN",
        GUID => "GUID",
        HEXBINARY => "HEXBINARY",
        HEXINT8 => "HEXINT8",
        HEXINT16 => "HEXINT16",
        HEXINT32 => "HEXINT32",
        HEXINT64 => "HEXINT64",
        PID => "PID",
        TID => "TID",
        PORT => "PORT",
        IPV4 => "IPV4",
        IPV6 => "IPV6",
        SOCKETADDRESS => "SOCKETADDRESS",
        CIMDATETIME => "CIMDATETIME",
        ETWTIME => "ETWTIME",
        XML => "XML",
        ERRORCODE => "ERRORCODE",
        WIN32ERROR => "WIN32ERROR",
        NTSTATUS => "NTSTATUS",
        HRESULT => "HRESULT",
        CULTURE_INSENSITIVE_DATETIME => "CULTURE_INSENSITIVE_DATETIME",
        JSON => "JSON",
        UTF8 => "UTF8",
        PKCS7_WITH_TYPE_INFO => "PKCS7_WITH_TYPE_INFO",
        CODE_POINTER => "CODE_POINTER",
        DATETIME_UTC => "DATETIME_UTC",
        REDUCEDSTRING => "REDUCEDSTRING",
        NOPRINT => "NOPRINT",
        _ => return None,
    })
}

/// Fixed size in bytes of one value of `t`, when the type alone says (`pointer_size` for Pointer and
/// SizeT). `None` for variable-size types (strings, binaries, SIDs, structs).
pub fn fixed_size(t: InType, pointer_size: u8) -> Option<usize> {
    use in_type::*;
    Some(match t {
        INT8 | UINT8 | ANSICHAR => 1,
        INT16 | UINT16 | UNICODECHAR => 2,
        INT32 | UINT32 | FLOAT | BOOLEAN | HEXINT32 => 4,
        INT64 | UINT64 | DOUBLE | FILETIME | HEXINT64 => 8,
        GUID | SYSTEMTIME => 16,
        POINTER | SIZET => pointer_size as usize,
        _ => return None,
    })
}

/// Maps a manifest `inType` attribute (`win:UInt32`, `trace:SizeT`...) to a TDH in-type.
pub fn in_type_from_manifest(name: &str) -> Option<InType> {
    use in_type::*;
    let n = name.rsplit(':').next().unwrap_or(name);
    Some(match n {
        "UnicodeString" => UNICODESTRING,
        "AnsiString" => ANSISTRING,
        "Int8" => INT8,
        "UInt8" => UINT8,
        "Int16" => INT16,
        "UInt16" => UINT16,
        "Int32" => INT32,
        "UInt32" => UINT32,
        "Int64" => INT64,
        "UInt64" => UINT64,
        "Float" => FLOAT,
        "Double" => DOUBLE,
        "Boolean" => BOOLEAN,
        "Binary" => BINARY,
        "GUID" => GUID,
        "Pointer" => POINTER,
        "FILETIME" => FILETIME,
        "SYSTEMTIME" => SYSTEMTIME,
        "SID" => SID,
        "HexInt32" => HEXINT32,
        "HexInt64" => HEXINT64,
        "CountedUnicodeString" | "ManifestCountedString" => MANIFEST_COUNTEDSTRING,
        "CountedAnsiString" | "ManifestCountedAnsiString" => MANIFEST_COUNTEDANSISTRING,
        "CountedBinary" | "ManifestCountedBinary" => MANIFEST_COUNTEDBINARY,
        "CountedString" => COUNTEDSTRING,
        "ReversedCountedString" => REVERSEDCOUNTEDSTRING,
        "ReversedCountedAnsiString" => REVERSEDCOUNTEDANSISTRING,
        "NonNullTerminatedString" => NONNULLTERMINATEDSTRING,
        "NonNullTerminatedAnsiString" => NONNULLTERMINATEDANSISTRING,
        "UnicodeChar" => UNICODECHAR,
        "AnsiChar" => ANSICHAR,
        "SizeT" => SIZET,
        "HexDump" => HEXDUMP,
        "WbemSID" => WBEMSID,
        _ => return None,
    })
}

/// Maps a manifest `outType` attribute (`xs:string`, `win:HexInt32`, `win:Port`...) to a TDH out-type.
pub fn out_type_from_manifest(name: &str) -> Option<OutType> {
    use out_type::*;
    let n = name.rsplit(':').next().unwrap_or(name);
    Some(match n {
        "string" => STRING,
        "dateTime" => DATETIME,
        "byte" => BYTE,
        "unsignedByte" => UNSIGNEDBYTE,
        "short" => SHORT,
        "unsignedShort" => UNSIGNEDSHORT,
        "int" => INT,
        "unsignedInt" => UNSIGNEDINT,
        "long" => LONG,
        "unsignedLong" => UNSIGNEDLONG,
        "float" => FLOAT,
        "double" => DOUBLE,
        "boolean" => BOOLEAN,
        "GUID" => GUID,
        "hexBinary" => HEXBINARY,
        "HexInt8" => HEXINT8,
        "HexInt16" => HEXINT16,
        "HexInt32" => HEXINT32,
        "HexInt64" => HEXINT64,
        "PID" => PID,
        "TID" => TID,
        "Port" => PORT,
        "IPv4" => IPV4,
        "IPv6" => IPV6,
        "SocketAddress" => SOCKETADDRESS,
        "CIMDateTime" => CIMDATETIME,
        "ETWTIME" => ETWTIME,
        "Xml" => XML,
        "ErrorCode" => ERRORCODE,
        "Win32Error" => WIN32ERROR,
        "NTSTATUS" => NTSTATUS,
        "HResult" => HRESULT,
        "DateTimeCultureInsensitive" => CULTURE_INSENSITIVE_DATETIME,
        "Json" => JSON,
        "Utf8" => UTF8,
        "Pkcs7WithTypeInfo" => PKCS7_WITH_TYPE_INFO,
        "CodePointer" => CODE_POINTER,
        "DateTimeUtc" => DATETIME_UTC,
        "ReducedString" => REDUCEDSTRING,
        "NoPrint" => NOPRINT,
        _ => return None,
    })
}

/// Translates a TraceLogging (in-type, out-type) pair into TDH numbers.
///
/// * In-types 1–21 are TDH's own numbers. TL's counted strings (22/23) become TDH's manifest counted
///   strings (u16 byte count, then the bytes), TL Binary (14) and BinaryC (25) both become
///   MANIFEST_COUNTEDBINARY (TL writes a u16 byte count before both; TDH shows Binary with a synthetic
///   `X.Length` property instead, same bytes). Struct (24) is handled by the metadata parser.
/// * Out-types are renumbered; Hex, Signed and Unsigned pick the TDH type of the in-type's width.
///
/// Returns `None` for an in-type that TraceLogging does not define.
pub fn tl_to_tdh(tl_in_type: u8, tl_out_type: u8) -> Option<(InType, OutType)> {
    use out_type as o;
    let it: InType = match tl_in_type {
        1..=13 | 15 | 17..=21 => tl_in_type as InType,
        16 => in_type::POINTER,
        14 | 25 => in_type::MANIFEST_COUNTEDBINARY,
        22 => in_type::MANIFEST_COUNTEDSTRING,
        23 => in_type::MANIFEST_COUNTEDANSISTRING,
        _ => return None,
    };
    let width = fixed_size(it, 8);
    let ot: OutType = match tl_out_type {
        tl_out::DEFAULT => o::NULL,
        tl_out::NOPRINT => o::NOPRINT,
        tl_out::STRING => o::STRING,
        tl_out::BOOLEAN => o::BOOLEAN,
        tl_out::HEX => match (it, width) {
            (in_type::MANIFEST_COUNTEDBINARY, _) => o::HEXBINARY,
            (_, Some(1)) => o::HEXINT8,
            (_, Some(2)) => o::HEXINT16,
            (_, Some(4)) => o::HEXINT32,
            (_, Some(8)) => o::HEXINT64,
            _ => o::NULL,
        },
        tl_out::PID => o::PID,
        tl_out::TID => o::TID,
        tl_out::PORT => o::PORT,
        tl_out::IPV4 => o::IPV4,
        tl_out::IPV6 => o::IPV6,
        tl_out::SOCKETADDRESS => o::SOCKETADDRESS,
        tl_out::XML => o::XML,
        tl_out::JSON => o::JSON,
        tl_out::WIN32ERROR => o::WIN32ERROR,
        tl_out::NTSTATUS => o::NTSTATUS,
        tl_out::HRESULT => o::HRESULT,
        tl_out::FILETIME => o::DATETIME,
        tl_out::SIGNED => match width {
            Some(1) => o::BYTE,
            Some(2) => o::SHORT,
            Some(4) => o::INT,
            _ => o::LONG,
        },
        tl_out::UNSIGNED => match width {
            Some(1) => o::UNSIGNEDBYTE,
            Some(2) => o::UNSIGNEDSHORT,
            Some(4) => o::UNSIGNEDINT,
            _ => o::UNSIGNEDLONG,
        },
        tl_out::DATETIME_CULTURE_INSENSITIVE => o::CULTURE_INSENSITIVE_DATETIME,
        tl_out::UTF8 => o::UTF8,
        tl_out::PKCS7_WITH_TYPE_INFO => o::PKCS7_WITH_TYPE_INFO,
        tl_out::CODE_POINTER => o::CODE_POINTER,
        tl_out::DATETIME_UTC => o::DATETIME_UTC,
        // Unknown out-types keep the in-type's default rendering.
        _ => o::NULL,
    };
    Some((it, ot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tl_out_types_are_renumbered() {
        // TL Hex (4) on a U32 is TDH HEXINT32 (18), not TDH 4 (UNSIGNEDBYTE).
        assert_eq!(
            tl_to_tdh(tl_in::UINT32, tl_out::HEX),
            Some((in_type::UINT32, out_type::HEXINT32))
        );
        assert_eq!(
            tl_to_tdh(tl_in::UINT8, tl_out::BOOLEAN),
            Some((in_type::UINT8, out_type::BOOLEAN))
        );
        assert_eq!(
            tl_to_tdh(tl_in::UINT16, tl_out::PORT),
            Some((in_type::UINT16, out_type::PORT))
        );
        assert_eq!(
            tl_to_tdh(tl_in::COUNTEDANSISTRING, tl_out::UTF8),
            Some((23, out_type::UTF8))
        );
        assert_eq!(
            tl_to_tdh(tl_in::BINARY, tl_out::IPV6),
            Some((25, out_type::IPV6))
        );
        assert_eq!(tl_to_tdh(tl_in::STRUCT, 0), None);
        assert_eq!(tl_to_tdh(26, 0), None);
    }

    #[test]
    fn manifest_names() {
        assert_eq!(in_type_from_manifest("win:UInt32"), Some(in_type::UINT32));
        assert_eq!(in_type_from_manifest("trace:SizeT"), Some(in_type::SIZET));
        assert_eq!(out_type_from_manifest("win:Port"), Some(out_type::PORT));
        assert_eq!(out_type_from_manifest("xs:string"), Some(out_type::STRING));
        assert_eq!(in_type_name(310), Some("WBEMSID"));
        assert_eq!(out_type_name(38), Some("DATETIME_UTC"));
    }
}
