//! The NBD wire format: constants and pure encoders/decoders for the
//! fixed-newstyle handshake, option replies, transmission requests and
//! simple/structured replies.
//!
//! Facts come from the NBD protocol document (`doc/proto.md` of the
//! NetworkBlockDevice project). Everything here is I/O-free and total:
//! every decoder returns an error instead of panicking, whatever bytes it
//! is given. All integers are big-endian on the wire.

use std::fmt;

// ---------------------------------------------------------------------------
// Magic numbers

/// `NBDMAGIC`, first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: second magic of the newstyle greeting, and prefix of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic prefix of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request (`NBD_REQUEST_MAGIC`).
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply (`NBD_SIMPLE_REPLY_MAGIC`).
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk (`NBD_STRUCTURED_REPLY_MAGIC`).
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// ---------------------------------------------------------------------------
// Sizes

/// Bytes of the server greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub const GREETING_LEN: usize = 18;
/// Bytes of an option header: IHAVEOPT, option, length.
pub const OPTION_HEADER_LEN: usize = 16;
/// Bytes of an option reply header: magic, option, type, length.
pub const OPTION_REPLY_HEADER_LEN: usize = 20;
/// Bytes of a transmission request header.
pub const REQUEST_LEN: usize = 28;
/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes of a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;
/// Reserved zero bytes after an `NBD_OPT_EXPORT_NAME` reply unless NO_ZEROES.
pub const EXPORT_NAME_ZEROES: usize = 124;
/// Longest string (export name, error message) the protocol allows.
pub const MAX_STRING_LEN: usize = 4096;

// ---------------------------------------------------------------------------
// Handshake flags

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client wants no zero padding after EXPORT_NAME.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ---------------------------------------------------------------------------
// Transmission flags

/// Transmission flag: always set.
pub const TX_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: export is read-only.
pub const TX_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: NBD_CMD_FLUSH supported.
pub const TX_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: NBD_CMD_FLAG_FUA supported.
pub const TX_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: rotational medium.
pub const TX_ROTATIONAL: u16 = 1 << 4;
/// Transmission flag: NBD_CMD_TRIM supported.
pub const TX_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: NBD_CMD_WRITE_ZEROES (and NO_HOLE) supported.
pub const TX_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: NBD_CMD_FLAG_DF supported on reads.
pub const TX_SEND_DF: u16 = 1 << 7;
/// Transmission flag: flush/FUA effects are visible across connections.
pub const TX_CAN_MULTI_CONN: u16 = 1 << 8;
/// Transmission flag: NBD_CMD_CACHE supported.
pub const TX_SEND_CACHE: u16 = 1 << 10;
/// Transmission flag: NBD_CMD_FLAG_FAST_ZERO supported.
pub const TX_SEND_FAST_ZERO: u16 = 1 << 11;

// ---------------------------------------------------------------------------
// Options

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: abort negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list exports.
pub const OPT_LIST: u32 = 3;
/// Option: start TLS.
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: enable structured replies.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts.
pub const OPT_SET_META_CONTEXT: u32 = 10;

// ---------------------------------------------------------------------------
// Option reply types

/// Option reply: success / end of list.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of a list.
pub const REP_SERVER: u32 = 2;
/// Option reply: one piece of export information.
pub const REP_INFO: u32 = 3;
/// Option reply: one metadata context.
pub const REP_META_CONTEXT: u32 = 4;
/// Bit set in every option error reply.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
/// Option error: option unknown to this server.
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR + 1;
/// Option error: forbidden by policy.
pub const REP_ERR_POLICY: u32 = REP_FLAG_ERROR + 2;
/// Option error: syntactically or semantically invalid.
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR + 3;
/// Option error: unsupported on this platform.
pub const REP_ERR_PLATFORM: u32 = REP_FLAG_ERROR + 4;
/// Option error: TLS required.
pub const REP_ERR_TLS_REQD: u32 = REP_FLAG_ERROR + 5;
/// Option error: the export is not available.
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR + 6;
/// Option error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR + 7;
/// Option error: the client must request block sizes first.
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_FLAG_ERROR + 8;
/// Option error: request or reply too large.
pub const REP_ERR_TOO_BIG: u32 = REP_FLAG_ERROR + 9;

// ---------------------------------------------------------------------------
// NBD_REP_INFO types

/// Info: size and transmission flags (mandatory before ACK).
pub const INFO_EXPORT: u16 = 0;
/// Info: canonical export name.
pub const INFO_NAME: u16 = 1;
/// Info: human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Info: block size constraints (minimum, preferred, maximum).
pub const INFO_BLOCK_SIZE: u16 = 3;

// ---------------------------------------------------------------------------
// Commands and command flags

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (WRITE_ZEROES): do not deallocate.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag (READ): at most one content chunk.
pub const CMD_FLAG_DF: u16 = 1 << 2;
/// Command flag (BLOCK_STATUS): one extent only.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Command flag (WRITE_ZEROES): fail unless fast.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// ---------------------------------------------------------------------------
// Structured replies

/// Structured reply flag: last chunk of this reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Chunk type: no payload; ends a reply.
pub const REPLY_TYPE_NONE: u16 = 0;
/// Chunk type: offset + data.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Chunk type: offset + length of zeros.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// Chunk type: metadata context id + block descriptors.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Chunk type: error (errno, message).
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
/// Chunk type: error at an offset.
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// `base:allocation` status flag: the extent is a hole.
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` status flag: the extent reads as zeros.
pub const STATE_ZERO: u32 = 1 << 1;
/// The one metadata context this server knows.
pub const BASE_ALLOCATION: &str = "base:allocation";

/// An error number in a transmission reply (the protocol's fixed subset of errno).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub u32);

impl Errno {
    /// Operation not permitted (writes to a read-only export).
    pub const EPERM: Errno = Errno(1);
    /// Input/output error.
    pub const EIO: Errno = Errno(5);
    /// Cannot allocate memory.
    pub const ENOMEM: Errno = Errno(12);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(22);
    /// No space left on device.
    pub const ENOSPC: Errno = Errno(28);
    /// Value too large.
    pub const EOVERFLOW: Errno = Errno(75);
    /// Operation not supported.
    pub const ENOTSUP: Errno = Errno(95);
    /// Server is shutting down.
    pub const ESHUTDOWN: Errno = Errno(108);

    /// The symbolic name, for logs.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "OK",
            1 => "EPERM",
            5 => "EIO",
            12 => "ENOMEM",
            22 => "EINVAL",
            28 => "ENOSPC",
            75 => "EOVERFLOW",
            95 => "ENOTSUP",
            108 => "ESHUTDOWN",
            _ => "E?",
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// Why some bytes are not a valid NBD message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Fewer bytes than the message needs.
    #[error("truncated message: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A magic number did not match.
    #[error("bad magic {got:#x}, expected {expected:#x}")]
    BadMagic {
        /// The magic the protocol requires here.
        expected: u64,
        /// The magic received.
        got: u64,
    },
    /// A string is not valid UTF-8, contains NUL, or is too long.
    #[error("invalid string: {0}")]
    BadString(&'static str),
    /// The message's lengths are inconsistent.
    #[error("malformed message: {0}")]
    Malformed(&'static str),
}

/// A bounds-checked big-endian cursor over a byte slice.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let have = self.remaining();
        if n > have {
            return Err(ProtoError::Truncated { need: n, have });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn string(&mut self, n: usize) -> Result<String, ProtoError> {
        decode_string(self.bytes(n)?)
    }

    fn finish(&self) -> Result<(), ProtoError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(ProtoError::Malformed("trailing bytes"))
        }
    }
}

/// Decodes a protocol string: UTF-8, no NUL, at most [`MAX_STRING_LEN`] bytes.
pub fn decode_string(b: &[u8]) -> Result<String, ProtoError> {
    if b.len() > MAX_STRING_LEN {
        return Err(ProtoError::BadString("longer than 4096 bytes"));
    }
    if b.contains(&0) {
        return Err(ProtoError::BadString("contains NUL"));
    }
    String::from_utf8(b.to_vec()).map_err(|_| ProtoError::BadString("not UTF-8"))
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Length of a string as a u32 prefix, clamped: callers only encode
/// strings they have checked against [`MAX_STRING_LEN`].
fn len_u32(b: &[u8]) -> u32 {
    u32::try_from(b.len()).unwrap_or(u32::MAX)
}

// ---------------------------------------------------------------------------
// Handshake

/// The server's opening message: NBDMAGIC, IHAVEOPT, handshake flags.
pub fn encode_greeting(handshake_flags: u16) -> [u8; GREETING_LEN] {
    let mut out = [0u8; GREETING_LEN];
    out[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    out[16..].copy_from_slice(&handshake_flags.to_be_bytes());
    out
}

/// Decodes a server greeting; returns the handshake flags.
pub fn decode_greeting(b: &[u8]) -> Result<u16, ProtoError> {
    let mut c = Cursor::new(b);
    expect_magic(NBDMAGIC, c.u64()?)?;
    expect_magic(IHAVEOPT, c.u64()?)?;
    c.u16()
}

fn expect_magic(expected: u64, got: u64) -> Result<(), ProtoError> {
    if got == expected {
        Ok(())
    } else {
        Err(ProtoError::BadMagic { expected, got })
    }
}

/// What the client answered to the greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    /// The client speaks fixed newstyle.
    pub fixed_newstyle: bool,
    /// The client asked for no zero padding after EXPORT_NAME.
    pub no_zeroes: bool,
}

/// Decodes the 32-bit client flags. Unknown bits, or bits the server did not
/// offer in `offered` (handshake flags), are an error: the server must then
/// drop the connection.
pub fn decode_client_flags(b: &[u8], offered: u16) -> Result<ClientFlags, ProtoError> {
    let flags = Cursor::new(b).u32()?;
    let mut allowed = 0;
    if offered & FLAG_FIXED_NEWSTYLE != 0 {
        allowed |= FLAG_C_FIXED_NEWSTYLE;
    }
    if offered & FLAG_NO_ZEROES != 0 {
        allowed |= FLAG_C_NO_ZEROES;
    }
    if flags & !allowed != 0 {
        return Err(ProtoError::Malformed("unknown client flags"));
    }
    Ok(ClientFlags {
        fixed_newstyle: flags & FLAG_C_FIXED_NEWSTYLE != 0,
        no_zeroes: flags & FLAG_C_NO_ZEROES != 0,
    })
}

/// The header of one client option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option number (`OPT_*`).
    pub option: u32,
    /// Length of the option data that follows.
    pub length: u32,
}

impl OptionHeader {
    /// Decodes the 16-byte header, checking the IHAVEOPT magic.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        expect_magic(IHAVEOPT, c.u64()?)?;
        Ok(Self {
            option: c.u32()?,
            length: c.u32()?,
        })
    }

    /// Encodes the header (client side; tests).
    pub fn encode(&self) -> [u8; OPTION_HEADER_LEN] {
        let mut out = [0u8; OPTION_HEADER_LEN];
        out[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name ("" is the default export).
    pub name: String,
    /// `INFO_*` items the client asks for.
    pub requests: Vec<u16>,
}

impl InfoRequest {
    /// Decodes option data; the lengths must account for every byte.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        let name_len = c.u32()? as usize;
        if name_len > c.remaining().saturating_sub(2) {
            return Err(ProtoError::Malformed("export name longer than option"));
        }
        let name = c.string(name_len)?;
        let n = c.u16()? as usize;
        if n.checked_mul(2) != Some(c.remaining()) {
            return Err(ProtoError::Malformed("information request count"));
        }
        let requests = (0..n).map(|_| c.u16()).collect::<Result<Vec<_>, _>>()?;
        c.finish()?;
        Ok(Self { name, requests })
    }

    /// Encodes option data (client side; tests).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.name.len() + 2 * self.requests.len());
        put_u32(&mut out, len_u32(self.name.as_bytes()));
        out.extend_from_slice(self.name.as_bytes());
        put_u16(
            &mut out,
            u16::try_from(self.requests.len()).unwrap_or(u16::MAX),
        );
        for r in &self.requests {
            put_u16(&mut out, *r);
        }
        out
    }
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    /// Export the contexts are for.
    pub export: String,
    /// Query strings (`namespace:leaf`).
    pub queries: Vec<String>,
}

impl MetaContextRequest {
    /// Decodes option data; the lengths must account for every byte.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        let name_len = c.u32()? as usize;
        let export = c.string(name_len)?;
        let n = c.u32()? as usize;
        // Each query takes at least 4 bytes: bound the count before allocating.
        if n > c.remaining() / 4 {
            return Err(ProtoError::Malformed("query count exceeds option length"));
        }
        let mut queries = Vec::with_capacity(n);
        for _ in 0..n {
            let len = c.u32()? as usize;
            queries.push(c.string(len)?);
        }
        c.finish()?;
        Ok(Self { export, queries })
    }

    /// Encodes option data (client side; tests).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_u32(&mut out, len_u32(self.export.as_bytes()));
        out.extend_from_slice(self.export.as_bytes());
        put_u32(
            &mut out,
            u32::try_from(self.queries.len()).unwrap_or(u32::MAX),
        );
        for q in &self.queries {
            put_u32(&mut out, len_u32(q.as_bytes()));
            out.extend_from_slice(q.as_bytes());
        }
        out
    }
}

/// Appends one option reply (header and data) to `out`.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    put_u64(out, OPTION_REPLY_MAGIC);
    put_u32(out, option);
    put_u32(out, reply_type);
    put_u32(out, len_u32(data));
    out.extend_from_slice(data);
}

/// A decoded option reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option this answers.
    pub option: u32,
    /// `REP_*` type.
    pub reply_type: u32,
    /// Length of the data that follows.
    pub length: u32,
}

impl OptionReplyHeader {
    /// Decodes the 20-byte header, checking the magic.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        expect_magic(OPTION_REPLY_MAGIC, c.u64()?)?;
        Ok(Self {
            option: c.u32()?,
            reply_type: c.u32()?,
            length: c.u32()?,
        })
    }
}

/// Data of an `NBD_REP_SERVER` reply: name length, name, description.
pub fn rep_server_data(name: &str, description: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len() + description.len());
    put_u32(&mut out, len_u32(name.as_bytes()));
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(description.as_bytes());
    out
}

/// Data of an `NBD_REP_INFO` / `NBD_INFO_EXPORT` reply.
pub fn info_export_data(size: u64, tx_flags: u16) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    out[2..10].copy_from_slice(&size.to_be_bytes());
    out[10..].copy_from_slice(&tx_flags.to_be_bytes());
    out
}

/// Data of an `NBD_REP_INFO` / `NBD_INFO_BLOCK_SIZE` reply.
pub fn info_block_size_data(minimum: u32, preferred: u32, maximum: u32) -> [u8; 14] {
    let mut out = [0u8; 14];
    out[..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    out[2..6].copy_from_slice(&minimum.to_be_bytes());
    out[6..10].copy_from_slice(&preferred.to_be_bytes());
    out[10..].copy_from_slice(&maximum.to_be_bytes());
    out
}

/// Data of an `NBD_REP_INFO` reply carrying a string (`INFO_NAME`, `INFO_DESCRIPTION`).
pub fn info_string_data(info_type: u16, s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + s.len());
    put_u16(&mut out, info_type);
    out.extend_from_slice(s.as_bytes());
    out
}

/// Data of an `NBD_REP_META_CONTEXT` reply.
pub fn meta_context_data(id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    put_u32(&mut out, id);
    out.extend_from_slice(name.as_bytes());
    out
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, transmission flags, and 124
/// zero bytes unless the client negotiated NO_ZEROES.
pub fn encode_export_name_reply(size: u64, tx_flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + EXPORT_NAME_ZEROES);
    put_u64(&mut out, size);
    put_u16(&mut out, tx_flags);
    if !no_zeroes {
        out.resize(out.len() + EXPORT_NAME_ZEROES, 0);
    }
    out
}

// ---------------------------------------------------------------------------
// Transmission

/// A transmission request type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `NBD_CMD_READ` (0).
    Read,
    /// `NBD_CMD_WRITE` (1): a payload of `length` bytes follows.
    Write,
    /// `NBD_CMD_DISC` (2).
    Disc,
    /// `NBD_CMD_FLUSH` (3).
    Flush,
    /// `NBD_CMD_TRIM` (4).
    Trim,
    /// `NBD_CMD_CACHE` (5).
    Cache,
    /// `NBD_CMD_WRITE_ZEROES` (6).
    WriteZeroes,
    /// `NBD_CMD_BLOCK_STATUS` (7).
    BlockStatus,
    /// Any other type.
    Unknown(u16),
}

impl Command {
    /// The command for a wire type.
    pub fn from_wire(t: u16) -> Self {
        match t {
            0 => Self::Read,
            1 => Self::Write,
            2 => Self::Disc,
            3 => Self::Flush,
            4 => Self::Trim,
            5 => Self::Cache,
            6 => Self::WriteZeroes,
            7 => Self::BlockStatus,
            other => Self::Unknown(other),
        }
    }

    /// The wire type of a command.
    pub fn to_wire(self) -> u16 {
        match self {
            Self::Read => 0,
            Self::Write => 1,
            Self::Disc => 2,
            Self::Flush => 3,
            Self::Trim => 4,
            Self::Cache => 5,
            Self::WriteZeroes => 6,
            Self::BlockStatus => 7,
            Self::Unknown(t) => t,
        }
    }
}

/// A transmission request header (the payload of a WRITE follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// `CMD_FLAG_*` bits.
    pub flags: u16,
    /// Request type.
    pub command: Command,
    /// Opaque client handle, echoed in the reply.
    pub handle: u64,
    /// Byte offset into the export.
    pub offset: u64,
    /// Byte length.
    pub length: u32,
}

impl Request {
    /// Decodes the 28-byte header, checking the magic.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        expect_magic(u64::from(REQUEST_MAGIC), u64::from(c.u32()?))?;
        Ok(Self {
            flags: c.u16()?,
            command: Command::from_wire(c.u16()?),
            handle: c.u64()?,
            offset: c.u64()?,
            length: c.u32()?,
        })
    }

    /// Encodes the header (client side; tests).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_wire().to_be_bytes());
        out[8..16].copy_from_slice(&self.handle.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

/// A simple reply header (read data, if any, follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    /// 0 or an [`Errno`] value.
    pub error: u32,
    /// The request's handle.
    pub handle: u64,
}

impl SimpleReply {
    /// Encodes the 16-byte header.
    pub fn encode(&self) -> [u8; SIMPLE_REPLY_LEN] {
        let mut out = [0u8; SIMPLE_REPLY_LEN];
        out[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.error.to_be_bytes());
        out[8..].copy_from_slice(&self.handle.to_be_bytes());
        out
    }

    /// Decodes the 16-byte header, checking the magic.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        expect_magic(u64::from(SIMPLE_REPLY_MAGIC), u64::from(c.u32()?))?;
        Ok(Self {
            error: c.u32()?,
            handle: c.u64()?,
        })
    }
}

/// A structured reply chunk header (its payload follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// `REPLY_FLAG_*` bits.
    pub flags: u16,
    /// `REPLY_TYPE_*`.
    pub chunk_type: u16,
    /// The request's handle.
    pub handle: u64,
    /// Payload length.
    pub length: u32,
}

impl ChunkHeader {
    /// Encodes the 20-byte header.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut out = [0u8; CHUNK_HEADER_LEN];
        out[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.chunk_type.to_be_bytes());
        out[8..16].copy_from_slice(&self.handle.to_be_bytes());
        out[16..].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    /// Decodes the 20-byte header, checking the magic.
    pub fn decode(b: &[u8]) -> Result<Self, ProtoError> {
        let mut c = Cursor::new(b);
        expect_magic(u64::from(STRUCTURED_REPLY_MAGIC), u64::from(c.u32()?))?;
        Ok(Self {
            flags: c.u16()?,
            chunk_type: c.u16()?,
            handle: c.u64()?,
            length: c.u32()?,
        })
    }

    /// True if this is the last chunk of its reply.
    pub fn is_done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
}

fn done_flag(done: bool) -> u16 {
    if done { REPLY_FLAG_DONE } else { 0 }
}

/// Appends a simple reply header.
pub fn encode_simple_reply(out: &mut Vec<u8>, handle: u64, error: Errno) {
    out.extend_from_slice(
        &SimpleReply {
            error: error.0,
            handle,
        }
        .encode(),
    );
}

/// Appends a `NONE` chunk (always final).
pub fn encode_none_chunk(out: &mut Vec<u8>, handle: u64) {
    out.extend_from_slice(
        &ChunkHeader {
            flags: REPLY_FLAG_DONE,
            chunk_type: REPLY_TYPE_NONE,
            handle,
            length: 0,
        }
        .encode(),
    );
}

/// Appends the header and offset of an `OFFSET_DATA` chunk whose
/// `data_len` bytes of data the caller sends next. `data_len` must be at
/// most `u32::MAX - 8`.
pub fn encode_data_chunk_header(
    out: &mut Vec<u8>,
    handle: u64,
    offset: u64,
    data_len: u32,
    done: bool,
) {
    out.extend_from_slice(
        &ChunkHeader {
            flags: done_flag(done),
            chunk_type: REPLY_TYPE_OFFSET_DATA,
            handle,
            length: data_len.saturating_add(8),
        }
        .encode(),
    );
    put_u64(out, offset);
}

/// Appends an `OFFSET_HOLE` chunk: `len` zero bytes at `offset`.
pub fn encode_hole_chunk(out: &mut Vec<u8>, handle: u64, offset: u64, len: u32, done: bool) {
    out.extend_from_slice(
        &ChunkHeader {
            flags: done_flag(done),
            chunk_type: REPLY_TYPE_OFFSET_HOLE,
            handle,
            length: 12,
        }
        .encode(),
    );
    put_u64(out, offset);
    put_u32(out, len);
}

/// Appends an `ERROR` chunk carrying `message` (cut to the protocol's limit).
pub fn encode_error_chunk(out: &mut Vec<u8>, handle: u64, error: Errno, message: &str, done: bool) {
    let msg = truncate_utf8(message, MAX_STRING_LEN);
    out.extend_from_slice(
        &ChunkHeader {
            flags: done_flag(done),
            chunk_type: REPLY_TYPE_ERROR,
            handle,
            length: 6 + len_u32(msg.as_bytes()),
        }
        .encode(),
    );
    put_u32(out, error.0);
    put_u16(out, u16::try_from(msg.len()).unwrap_or(0));
    out.extend_from_slice(msg.as_bytes());
}

/// One extent of a `BLOCK_STATUS` chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDescriptor {
    /// Extent length in bytes (non-zero).
    pub length: u32,
    /// Status flags (`STATE_*` for `base:allocation`).
    pub flags: u32,
}

/// Appends a `BLOCK_STATUS` chunk for one metadata context.
pub fn encode_block_status_chunk(
    out: &mut Vec<u8>,
    handle: u64,
    context_id: u32,
    descriptors: &[BlockDescriptor],
    done: bool,
) {
    let len = 4usize.saturating_add(descriptors.len().saturating_mul(8));
    out.extend_from_slice(
        &ChunkHeader {
            flags: done_flag(done),
            chunk_type: REPLY_TYPE_BLOCK_STATUS,
            handle,
            length: u32::try_from(len).unwrap_or(u32::MAX),
        }
        .encode(),
    );
    put_u32(out, context_id);
    for d in descriptors {
        put_u32(out, d.length);
        put_u32(out, d.flags);
    }
}

/// The payload of a decoded structured chunk (client side; tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkPayload {
    /// `NONE`.
    None,
    /// `OFFSET_DATA`: offset and data.
    Data {
        /// Export offset of the data.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// `OFFSET_HOLE`: offset and length of zeros.
    Hole {
        /// Export offset of the hole.
        offset: u64,
        /// Hole length.
        len: u32,
    },
    /// `BLOCK_STATUS`: context id and descriptors.
    BlockStatus {
        /// Metadata context id.
        context_id: u32,
        /// Extents.
        descriptors: Vec<BlockDescriptor>,
    },
    /// `ERROR` / `ERROR_OFFSET`: errno and message.
    Error {
        /// Error number.
        error: Errno,
        /// Human-readable message.
        message: String,
    },
}

/// Decodes a chunk payload of the given type (client side; tests).
pub fn decode_chunk_payload(chunk_type: u16, b: &[u8]) -> Result<ChunkPayload, ProtoError> {
    let mut c = Cursor::new(b);
    let out = match chunk_type {
        REPLY_TYPE_NONE => ChunkPayload::None,
        REPLY_TYPE_OFFSET_DATA => {
            let offset = c.u64()?;
            if c.remaining() == 0 {
                return Err(ProtoError::Malformed("empty data chunk"));
            }
            let data = c.bytes(c.remaining())?.to_vec();
            ChunkPayload::Data { offset, data }
        }
        REPLY_TYPE_OFFSET_HOLE => ChunkPayload::Hole {
            offset: c.u64()?,
            len: c.u32()?,
        },
        REPLY_TYPE_BLOCK_STATUS => {
            let context_id = c.u32()?;
            if c.remaining() == 0 || !c.remaining().is_multiple_of(8) {
                return Err(ProtoError::Malformed("block status length"));
            }
            let mut descriptors = Vec::with_capacity(c.remaining() / 8);
            while c.remaining() > 0 {
                descriptors.push(BlockDescriptor {
                    length: c.u32()?,
                    flags: c.u32()?,
                });
            }
            ChunkPayload::BlockStatus {
                context_id,
                descriptors,
            }
        }
        REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
            let error = Errno(c.u32()?);
            let len = c.u16()? as usize;
            let message = String::from_utf8_lossy(c.bytes(len)?).into_owned();
            if chunk_type == REPLY_TYPE_ERROR_OFFSET {
                c.u64()?;
            }
            ChunkPayload::Error { error, message }
        }
        _ => return Err(ProtoError::Malformed("unknown chunk type")),
    };
    c.finish()?;
    Ok(out)
}

/// The longest prefix of `s` of at most `max` bytes ending on a char boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn magic_numbers_match_the_protocol_document() {
        assert_eq!(&NBDMAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
        assert_eq!(OPTION_REPLY_MAGIC, 0x3e889045565a9);
        assert_eq!(REPLY_TYPE_ERROR, 32769);
        assert_eq!(REP_ERR_UNKNOWN, 0x8000_0006);
    }

    #[test]
    fn greeting_round_trips() {
        let g = encode_greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        assert_eq!(decode_greeting(&g), Ok(3));
        let mut bad = g;
        bad[0] ^= 1;
        assert!(matches!(
            decode_greeting(&bad),
            Err(ProtoError::BadMagic { .. })
        ));
    }

    #[test]
    fn client_flags_must_match_the_offer() {
        let offered = FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES;
        assert_eq!(
            decode_client_flags(&3u32.to_be_bytes(), offered),
            Ok(ClientFlags {
                fixed_newstyle: true,
                no_zeroes: true
            })
        );
        assert!(decode_client_flags(&4u32.to_be_bytes(), offered).is_err());
        assert!(decode_client_flags(&2u32.to_be_bytes(), FLAG_FIXED_NEWSTYLE).is_err());
        assert!(decode_client_flags(&[0, 0, 1], offered).is_err());
    }

    #[test]
    fn info_request_rejects_inconsistent_lengths() {
        let ok = InfoRequest {
            name: "vol".into(),
            requests: vec![INFO_BLOCK_SIZE],
        }
        .encode();
        assert!(InfoRequest::decode(&ok).is_ok());
        // Name length pointing past the end.
        let mut bad = ok.clone();
        bad[3] = 200;
        assert!(InfoRequest::decode(&bad).is_err());
        // One trailing byte.
        let mut bad = ok.clone();
        bad.push(0);
        assert!(InfoRequest::decode(&bad).is_err());
        // Request count larger than the data.
        let mut bad = ok;
        let n = bad.len();
        bad[n - 3] = 9;
        assert!(InfoRequest::decode(&bad).is_err());
    }

    #[test]
    fn error_chunk_message_is_bounded() {
        let mut out = Vec::new();
        let long = "é".repeat(5000);
        encode_error_chunk(&mut out, 7, Errno::EIO, &long, true);
        let h = ChunkHeader::decode(&out).unwrap();
        assert!(h.is_done());
        assert_eq!(h.length as usize, out.len() - CHUNK_HEADER_LEN);
        match decode_chunk_payload(h.chunk_type, &out[CHUNK_HEADER_LEN..]).unwrap() {
            ChunkPayload::Error { error, message } => {
                assert_eq!(error, Errno::EIO);
                assert!(message.len() <= MAX_STRING_LEN);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn arb_command() -> impl Strategy<Value = Command> {
        any::<u16>().prop_map(Command::from_wire)
    }

    fn arb_name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9:._/-]{0,64}"
    }

    proptest! {
        #[test]
        fn request_round_trips(flags: u16, cmd in arb_command(), handle: u64, offset: u64, length: u32) {
            let r = Request { flags, command: cmd, handle, offset, length };
            prop_assert_eq!(Request::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn simple_reply_round_trips(error: u32, handle: u64) {
            let r = SimpleReply { error, handle };
            prop_assert_eq!(SimpleReply::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn chunk_header_round_trips(flags: u16, chunk_type: u16, handle: u64, length: u32) {
            let h = ChunkHeader { flags, chunk_type, handle, length };
            prop_assert_eq!(ChunkHeader::decode(&h.encode()), Ok(h));
        }

        #[test]
        fn option_header_round_trips(option: u32, length: u32) {
            let h = OptionHeader { option, length };
            prop_assert_eq!(OptionHeader::decode(&h.encode()), Ok(h));
        }

        #[test]
        fn info_request_round_trips(name in arb_name(), requests in proptest::collection::vec(any::<u16>(), 0..8)) {
            let r = InfoRequest { name, requests };
            prop_assert_eq!(InfoRequest::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn meta_request_round_trips(export in arb_name(), queries in proptest::collection::vec(arb_name(), 0..6)) {
            let r = MetaContextRequest { export, queries };
            prop_assert_eq!(MetaContextRequest::decode(&r.encode()), Ok(r));
        }

        #[test]
        fn data_and_hole_chunks_round_trip(handle: u64, offset: u64, data in proptest::collection::vec(any::<u8>(), 1..64), hole: u32, done: bool) {
            let mut out = Vec::new();
            encode_data_chunk_header(&mut out, handle, offset, data.len() as u32, done);
            out.extend_from_slice(&data);
            let h = ChunkHeader::decode(&out).unwrap();
            prop_assert_eq!(h.is_done(), done);
            prop_assert_eq!(h.length as usize, out.len() - CHUNK_HEADER_LEN);
            prop_assert_eq!(decode_chunk_payload(h.chunk_type, &out[CHUNK_HEADER_LEN..]), Ok(ChunkPayload::Data { offset, data }));

            let mut out = Vec::new();
            encode_hole_chunk(&mut out, handle, offset, hole, done);
            let h = ChunkHeader::decode(&out).unwrap();
            prop_assert_eq!(h.length as usize, out.len() - CHUNK_HEADER_LEN);
            prop_assert_eq!(decode_chunk_payload(h.chunk_type, &out[CHUNK_HEADER_LEN..]), Ok(ChunkPayload::Hole { offset, len: hole }));
        }

        #[test]
        fn block_status_chunk_round_trips(handle: u64, id: u32, ds in proptest::collection::vec((1u32.., any::<u32>()), 1..32)) {
            let descriptors: Vec<_> = ds.into_iter().map(|(length, flags)| BlockDescriptor { length, flags }).collect();
            let mut out = Vec::new();
            encode_block_status_chunk(&mut out, handle, id, &descriptors, true);
            let h = ChunkHeader::decode(&out).unwrap();
            prop_assert_eq!(h.length as usize, out.len() - CHUNK_HEADER_LEN);
            prop_assert_eq!(decode_chunk_payload(h.chunk_type, &out[CHUNK_HEADER_LEN..]), Ok(ChunkPayload::BlockStatus { context_id: id, descriptors }));
        }

        #[test]
        fn option_reply_round_trips(option: u32, reply_type: u32, data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut out = Vec::new();
            encode_option_reply(&mut out, option, reply_type, &data);
            let h = OptionReplyHeader::decode(&out).unwrap();
            prop_assert_eq!(h, OptionReplyHeader { option, reply_type, length: data.len() as u32 });
            prop_assert_eq!(&out[OPTION_REPLY_HEADER_LEN..], &data[..]);
        }

        #[test]
        fn decoders_never_panic_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..200), t: u16, offered: u16) {
            let _ = decode_greeting(&b);
            let _ = decode_client_flags(&b, offered);
            let _ = OptionHeader::decode(&b);
            let _ = OptionReplyHeader::decode(&b);
            let _ = InfoRequest::decode(&b);
            let _ = MetaContextRequest::decode(&b);
            let _ = Request::decode(&b);
            let _ = SimpleReply::decode(&b);
            let _ = ChunkHeader::decode(&b);
            let _ = decode_chunk_payload(t, &b);
            let _ = decode_string(&b);
        }

        #[test]
        fn decoders_never_panic_on_near_valid_bytes(name in arb_name(), flip in 0usize..64, val: u8, cut in 0usize..64) {
            // Valid encodings with one byte changed and/or truncated: the
            // lengths inside then disagree with the data.
            let r = MetaContextRequest { export: name.clone(), queries: vec![name.clone(), "base:".into()] };
            for mut b in [r.encode(), InfoRequest { name, requests: vec![1, 2, 3] }.encode()] {
                if !b.is_empty() {
                    let i = flip % b.len();
                    b[i] = val;
                }
                b.truncate(b.len().saturating_sub(cut % 4));
                let _ = MetaContextRequest::decode(&b);
                let _ = InfoRequest::decode(&b);
            }
        }

        #[test]
        fn truncate_utf8_is_a_char_boundary_prefix(s in ".{0,40}", max in 0usize..50) {
            let t = truncate_utf8(&s, max);
            prop_assert!(t.len() <= max);
            prop_assert!(s.starts_with(t));
        }
    }
}
