//! The little-endian field writer and reader every message codec shares.

use pontoon_types::codec::Decoder;
use pontoon_types::{Epoch, ObjectId, PgId, Version};

use crate::frame::ProtoError;
use crate::message::Target;

/// Most extents or ranges one list in a message may hold.
const MAX_RANGES: u32 = 65_536;
/// The store's snapshot id of the head (newer than any snapshot): never a
/// snapshot sequence or snapshot id on the wire.
const HEAD_SNAP: u64 = u64::MAX;

/// A growable little-endian writer for message fields.
pub(crate) struct W(pub(crate) Vec<u8>);

impl W {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn oid(&mut self, o: &ObjectId) {
        self.u64(o.volume.0);
        self.u64(o.index);
    }
    pub(crate) fn version(&mut self, v: &Version) {
        self.u64(v.epoch);
        self.u64(v.seq);
    }
    pub(crate) fn target(&mut self, t: &Target) {
        self.u32(t.pg.pool.0);
        self.u32(t.pg.index);
        self.u64(t.epoch.0);
        self.oid(&t.oid);
    }
    pub(crate) fn ranges(&mut self, r: &[(u64, u64)]) {
        self.u32(r.len() as u32);
        for (a, b) in r {
            self.u64(*a);
            self.u64(*b);
        }
    }
}

/// Reads message fields, naming the message in errors.
pub(crate) struct R<'a> {
    pub(crate) d: Decoder<'a>,
    pub(crate) what: &'static str,
}

impl R<'_> {
    pub(crate) fn err(&self, why: &'static str) -> ProtoError {
        ProtoError::Malformed(self.what, why)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, ProtoError> {
        self.d
            .u8()
            .map_err(|_| ProtoError::Malformed(self.what, "truncated"))
    }
    pub(crate) fn u16(&mut self) -> Result<u16, ProtoError> {
        let b = self
            .d
            .bytes(2)
            .map_err(|_| ProtoError::Malformed(self.what, "truncated"))?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, ProtoError> {
        self.d
            .u32()
            .map_err(|_| ProtoError::Malformed(self.what, "truncated"))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, ProtoError> {
        self.d
            .u64()
            .map_err(|_| ProtoError::Malformed(self.what, "truncated"))
    }
    pub(crate) fn oid(&mut self) -> Result<ObjectId, ProtoError> {
        Ok(ObjectId::new(self.u64()?, self.u64()?))
    }
    pub(crate) fn version(&mut self) -> Result<Version, ProtoError> {
        Ok(Version::new(self.u64()?, self.u64()?))
    }
    pub(crate) fn target(&mut self) -> Result<Target, ProtoError> {
        Ok(Target {
            pg: PgId::new(self.u32()?, self.u32()?),
            epoch: Epoch(self.u64()?),
            oid: self.oid()?,
        })
    }
    pub(crate) fn ranges(&mut self) -> Result<Vec<(u64, u64)>, ProtoError> {
        let n = self.u32()?;
        if n > MAX_RANGES || n as usize * 16 > self.d.remaining() {
            return Err(self.err("too many ranges"));
        }
        (0..n).map(|_| Ok((self.u64()?, self.u64()?))).collect()
    }
    /// A snapshot sequence: [`HEAD_SNAP`] is the stores' name for the
    /// head, never a sequence.
    pub(crate) fn snap_seq(&mut self) -> Result<u64, ProtoError> {
        let v = self.u64()?;
        if v == HEAD_SNAP {
            return Err(self.err("snapshot sequence out of range"));
        }
        Ok(v)
    }
    pub(crate) fn end(&self) -> Result<(), ProtoError> {
        if self.d.remaining() != 0 {
            return Err(self.err("trailing bytes"));
        }
        Ok(())
    }
}
