//! The frame header and the limits every receiver enforces.

use pontoon_types::codec::{Decoder, Encoder};

/// First four bytes of every frame ("PTN1").
pub const MAGIC: u32 = 0x314e_5450;
/// Size of the encoded [`FrameHeader`].
pub const HEADER_LEN: usize = 24;
/// Largest message-field section a receiver accepts.
pub const MAX_META: u32 = 1 << 20;
/// Largest bulk-data section a receiver accepts (one 16 MiB object plus slack).
pub const MAX_DATA: u32 = (16 << 20) + (64 << 10);

/// Why bytes are not a valid frame or message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The frame does not start with [`MAGIC`].
    #[error("bad frame magic {0:#010x}")]
    BadMagic(u32),
    /// A length exceeds its limit.
    #[error("{what} of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Which section.
        what: &'static str,
        /// Declared length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// Unknown message type.
    #[error("unknown message type {0}")]
    UnknownType(u16),
    /// The fields end early or a value is out of range.
    #[error("malformed {0} message: {1}")]
    Malformed(&'static str, &'static str),
}

/// The fixed part of every frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Message type (see `MsgType`).
    pub msg_type: u16,
    /// Reserved flags (zero).
    pub flags: u16,
    /// Matches a reply to its request.
    pub req_id: u64,
    /// Bytes of message fields that follow.
    pub meta_len: u32,
    /// Bytes of bulk data after the fields.
    pub data_len: u32,
}

impl FrameHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let mut e = Encoder::new(&mut b);
        e.u32(MAGIC);
        e.u32((self.msg_type as u32) | (self.flags as u32) << 16);
        e.u64(self.req_id);
        e.u32(self.meta_len);
        e.u32(self.data_len);
        b
    }

    /// Decodes and checks a header: magic and both length limits.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, ProtoError> {
        let mut d = Decoder::new(b);
        let t = |_| ProtoError::Malformed("frame", "short header");
        let magic = d.u32().map_err(t)?;
        if magic != MAGIC {
            return Err(ProtoError::BadMagic(magic));
        }
        let tf = d.u32().map_err(t)?;
        let h = FrameHeader {
            msg_type: tf as u16,
            flags: (tf >> 16) as u16,
            req_id: d.u64().map_err(t)?,
            meta_len: d.u32().map_err(t)?,
            data_len: d.u32().map_err(t)?,
        };
        if h.meta_len > MAX_META {
            return Err(ProtoError::TooLarge {
                what: "message fields",
                len: h.meta_len,
                max: MAX_META,
            });
        }
        if h.data_len > MAX_DATA {
            return Err(ProtoError::TooLarge {
                what: "frame data",
                len: h.data_len,
                max: MAX_DATA,
            });
        }
        Ok(h)
    }
}
