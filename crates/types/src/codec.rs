//! Bounds-checked little-endian encoding for on-device and on-wire structures.
//!
//! Decoding never panics on hostile bytes: running off the end is an error
//! the caller turns into "this record (or frame) is not valid".

/// Writes fixed-width little-endian fields into a byte slice (panics if the
/// slice is too short: encoders size their buffers first).
pub struct Encoder<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Encoder<'a> {
    /// Starts at offset 0.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Starts at offset `pos`.
    pub fn at(buf: &'a mut [u8], pos: usize) -> Self {
        Self { buf, pos }
    }

    /// Bytes written so far (the next write's offset).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    /// Appends a little-endian u32.
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    /// Appends a little-endian u64.
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    /// Appends a little-endian u128.
    pub fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Running off the end of a buffer while decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated;

/// Reads fixed-width little-endian fields from a byte slice.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Reads `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let end = self.pos.checked_add(n).ok_or(Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(Truncated)?;
        self.pos = end;
        Ok(s)
    }

    /// Reads a byte.
    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.bytes(1)?[0])
    }

    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.bytes(4)?);
        Ok(u32::from_le_bytes(a))
    }

    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(a))
    }

    /// Reads a little-endian u128.
    pub fn u128(&mut self) -> Result<u128, Truncated> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.bytes(16)?);
        Ok(u128::from_le_bytes(a))
    }
}

/// crc32c of `buf` computed as if the 4 bytes at `field` were zero: how
/// self-describing headers checksum themselves.
pub fn crc_with_zeroed_field(buf: &[u8], field: usize) -> u32 {
    let c = crc32c::crc32c(&buf[..field]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &buf[field + 4..])
}

impl Decoder<'_> {
    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}
