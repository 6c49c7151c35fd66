//! Bounds-checked little-endian encoding for on-device structures.
//!
//! Decoding never panics on hostile bytes: running off the end is an error
//! the caller turns into "this record is not valid".

/// Writes fixed-width little-endian fields into a byte slice.
pub(crate) struct Encoder<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Encoder<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn at(buf: &'a mut [u8], pos: usize) -> Self {
        Self { buf, pos }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Running off the end of a buffer while decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncated;

/// Reads fixed-width little-endian fields from a byte slice.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let end = self.pos.checked_add(n).ok_or(Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(Truncated)?;
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.bytes(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Truncated> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.bytes(4)?);
        Ok(u32::from_le_bytes(a))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Truncated> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn u128(&mut self) -> Result<u128, Truncated> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.bytes(16)?);
        Ok(u128::from_le_bytes(a))
    }
}

/// crc32c of `buf` computed as if the 4 bytes at `field` were zero: how
/// self-describing headers checksum themselves.
pub(crate) fn crc_with_zeroed_field(buf: &[u8], field: usize) -> u32 {
    let c = crc32c::crc32c(&buf[..field]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &buf[field + 4..])
}
