//! The changed-extents query: which byte ranges of an object differ
//! between two views of it (a snapshot, the head, or nothing), and what the
//! newer view reads there. The primary answers from its store's metadata
//! alone, reading no data; export-diff and rollback then read (or zero)
//! only what changed.
//!
//! The request is [`DiffReq`] ([`crate::MsgType::Diff`]); the answer is an
//! ordinary [`crate::Reply`] whose `ranges` are the changed extents,
//! ascending and disjoint, encoded by [`encode_extents`]: an extent the
//! newer view reads as zeros has [`ZERO_FLAG`] set in its offset (offsets
//! within an object are far below it).

use crate::frame::ProtoError;
use crate::message::Target;

/// Set in a changed extent's wire offset when the newer view reads zeros
/// there.
pub const ZERO_FLAG: u64 = 1 << 63;

/// One side of a diff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffView {
    /// An empty object (a full diff's base).
    Nothing,
    /// The object as snapshot id `n` (at least 1) of its volume sees it.
    Snap(u64),
    /// The object's head (what the volume reads now).
    Head,
}

impl DiffView {
    /// Its wire value: 0 nothing, `u64::MAX` the head, else the id.
    pub fn to_wire(self) -> u64 {
        match self {
            DiffView::Nothing => 0,
            DiffView::Snap(id) => {
                debug_assert!(id != 0 && id != u64::MAX, "snapshot id {id}");
                id
            }
            DiffView::Head => u64::MAX,
        }
    }

    /// The view a wire value names.
    pub fn from_wire(v: u64) -> Self {
        match v {
            0 => DiffView::Nothing,
            u64::MAX => DiffView::Head,
            id => DiffView::Snap(id),
        }
    }
}

/// Which ranges of an object differ between `from` and `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiffReq {
    /// The object (and the sender's view of its PG).
    pub target: Target,
    /// The older view.
    pub from: DiffView,
    /// The newer view, whose contents the answer describes; never
    /// [`DiffView::Nothing`] (refused on the wire).
    pub to: DiffView,
}

/// A run of an object's bytes that differs between the two views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangedExtent {
    /// Byte offset within the object.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// The newer view reads data here (false: zeros).
    pub data: bool,
}

/// Changed extents as a reply's `ranges`.
pub fn encode_extents(extents: &[ChangedExtent]) -> Vec<(u64, u64)> {
    extents
        .iter()
        .map(|e| {
            assert!(e.offset < ZERO_FLAG, "offset {} within an object", e.offset);
            let flag = if e.data { 0 } else { ZERO_FLAG };
            (e.offset | flag, e.len)
        })
        .collect()
}

/// A reply's `ranges` as changed extents, checked: ascending, disjoint,
/// non-empty and inside `object_size`.
pub fn decode_extents(
    ranges: &[(u64, u64)],
    object_size: u64,
) -> Result<Vec<ChangedExtent>, ProtoError> {
    let mut out = Vec::with_capacity(ranges.len());
    let mut end = 0u64;
    for &(o, len) in ranges {
        let offset = o & !ZERO_FLAG;
        let stop = offset.checked_add(len);
        if len == 0 || offset < end || stop.is_none_or(|s| s > object_size) {
            return Err(ProtoError::Malformed(
                "diff reply",
                "extents must ascend, not overlap, and lie inside the object",
            ));
        }
        end = offset + len;
        out.push(ChangedExtent {
            offset,
            len,
            data: o & ZERO_FLAG == 0,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_round_trip_with_their_kind() {
        let e = vec![
            ChangedExtent {
                offset: 0,
                len: 8192,
                data: true,
            },
            ChangedExtent {
                offset: 8192,
                len: 4096,
                data: false,
            },
            ChangedExtent {
                offset: 1 << 20,
                len: 4096,
                data: true,
            },
        ];
        let wire = encode_extents(&e);
        assert_eq!(wire[1].0, 8192 | ZERO_FLAG);
        assert_eq!(decode_extents(&wire, 4 << 20).unwrap(), e);
    }

    #[test]
    fn overlapping_empty_or_outside_extents_are_refused() {
        for bad in [
            vec![(0, 8192), (4096, 4096)],
            vec![(4096, 4096), (0, 4096)],
            vec![(0, 0)],
            vec![(4 << 20, 4096)],
            vec![(ZERO_FLAG | ((4 << 20) - 4096), 8192)],
            vec![(u64::MAX - 4095, 4096)],
        ] {
            assert!(decode_extents(&bad, 4 << 20).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn views_round_trip() {
        for v in [DiffView::Nothing, DiffView::Snap(7), DiffView::Head] {
            assert_eq!(DiffView::from_wire(v.to_wire()), v);
        }
    }
}
