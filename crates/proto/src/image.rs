//! An object's snapshot state as recovery moves it between OSDs: the
//! sequence its head was last written under, whether it still has a head,
//! and every clone's extents and holes.
//!
//! It rides beside the head's extents in a replace [`crate::SubOp`] (a
//! push) and in a [`SnapCopy`] (a holder's answer to a pull); the frame
//! data holds the head's bytes, then each clone's, in order. Objects
//! without snapshot state travel without it, as before.
//!
//! Decoding checks the structure (ids ascending from 1 up to the
//! sequence, flags 0 or 1, ranges that do not overflow, a headless object
//! with clones and no head extents); alignment and object bounds are the
//! store's to check.

use pontoon_types::Version;

use crate::fields::{R, W};
use crate::frame::ProtoError;

/// Most clones one image may carry: more could never be installed (the
/// store takes an image in one journal record of at most 512 entries).
pub const MAX_IMAGE_CLONES: u32 = 512;
/// Encoded bytes of a clone without its ranges: id, flag, two counts.
const CLONE_FIXED_BYTES: usize = 8 + 1 + 4 + 4;

/// One clone of an object, as recovery moves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneLayout {
    /// The clone's snapshot id.
    pub id: u64,
    /// Blocks it does not list read as zeros in its snapshots, rather than
    /// as newer clones or the head.
    pub complete: bool,
    /// (offset, length) of the blocks it owns; their bytes follow the
    /// head's and the older clones' in the frame data.
    pub extents: Vec<(u64, u64)>,
    /// (offset, length) of the ranges it records as holes.
    pub holes: Vec<(u64, u64)>,
}

/// An object's snapshot state beside its head's extents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapLayout {
    /// Snapshot sequence the head was last written under.
    pub seq: u64,
    /// Whether the object has a head; without one (deleted, kept for its
    /// snapshots) it has no head extents and at least one clone.
    pub has_head: bool,
    /// Clones, ascending by id.
    pub clones: Vec<CloneLayout>,
}

/// A holder's whole copy of an object with snapshot state: its answer to
/// a pull (objects without snapshot state are answered with a reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapCopy {
    /// The object's version.
    pub version: Version,
    /// (offset, length) of the head's extents; their bytes come first in
    /// the frame data.
    pub extents: Vec<(u64, u64)>,
    /// Clones and sequence.
    pub snaps: SnapLayout,
}

impl SnapLayout {
    pub(crate) fn encode(&self, w: &mut W) {
        w.u64(self.seq);
        w.u8(self.has_head as u8);
        w.u32(self.clones.len() as u32);
        for c in &self.clones {
            w.u64(c.id);
            w.u8(c.complete as u8);
            w.ranges(&c.extents);
            w.ranges(&c.holes);
        }
    }

    /// Decodes a layout that accompanies `head_extents`.
    pub(crate) fn decode(r: &mut R, head_extents: &[(u64, u64)]) -> Result<Self, ProtoError> {
        let seq = r.snap_seq()?;
        let has_head = flag(r, "bad head flag")?;
        let n = r.u32()?;
        if n > MAX_IMAGE_CLONES || n as usize * CLONE_FIXED_BYTES > r.d.remaining() {
            return Err(r.err("too many clones"));
        }
        let mut clones = Vec::with_capacity(n as usize);
        let mut prev = 0u64;
        for _ in 0..n {
            let id = r.u64()?;
            if id <= prev || id > seq {
                return Err(r.err("clone ids must ascend from 1 up to the sequence"));
            }
            prev = id;
            let complete = flag(r, "bad complete flag")?;
            let extents = checked_ranges(r)?;
            let holes = checked_ranges(r)?;
            clones.push(CloneLayout {
                id,
                complete,
                extents,
                holes,
            });
        }
        if !has_head && (clones.is_empty() || !head_extents.is_empty()) {
            return Err(r.err("an object without a head has clones and no head extents"));
        }
        Ok(Self {
            seq,
            has_head,
            clones,
        })
    }
}

impl SnapCopy {
    pub(crate) fn encode(&self, w: &mut W) {
        w.version(&self.version);
        w.ranges(&self.extents);
        self.snaps.encode(w);
    }

    pub(crate) fn decode(r: &mut R) -> Result<Self, ProtoError> {
        let version = r.version()?;
        let extents = checked_ranges(r)?;
        let snaps = SnapLayout::decode(r, &extents)?;
        Ok(Self {
            version,
            extents,
            snaps,
        })
    }
}

fn flag(r: &mut R, why: &'static str) -> Result<bool, ProtoError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(r.err(why)),
    }
}

/// Ranges whose ends do not overflow.
fn checked_ranges(r: &mut R) -> Result<Vec<(u64, u64)>, ProtoError> {
    let v = r.ranges()?;
    if v.iter().any(|(off, len)| off.checked_add(*len).is_none()) {
        return Err(r.err("a range ends beyond 2^64"));
    }
    Ok(v)
}
