//! Whole copies of objects as recovery, backfill and repair move them
//! between OSDs: read from a holder's store, carried in a pull's answer or
//! a replace sub-operation, installed on the target atomically (one
//! journal record, or a chain of them for an object fragmented under many
//! snapshots).
//!
//! An object without snapshot state travels as it always has: its head's
//! extents, installed with the store's `replace`. One with snapshot state
//! (clones, a snapshot sequence, or no head any more) travels with its
//! [`SnapLayout`] beside the head's extents, the clones' bytes after the
//! head's, and is installed with `replace_snaps`, which also drops clones
//! the target held of its own. A target holding snapshot state of an
//! object whose good copy has none gets it dropped the same way.
//!
//! A copy larger than one message (data within [`MAX_DATA`], fields
//! within [`MAX_META`]: with 4 MiB objects, a head and three fully
//! rewritten clones) moves a layer at a time: the puller asks for the head
//! and then each clone with a `PullLayer`, each answered with the whole
//! layout and that layer's data, and installs the copy only once every
//! layer came with the same layout (a primary pushing such a copy sends a
//! `Fetch` sub-operation instead: the target pulls it the same way). A copy
//! is held in memory while it is assembled, so one larger than
//! [`MAX_COPY_BYTES`], or one whose layer's fields do not fit a message or
//! whose install does not fit a quarter of the target's journal, is
//! refused: the refusal is counted (`pontoon_osd_recovery_refused_total`)
//! and logged by the recovery that asked, and the object stays missing on
//! its stale members (its PG stays degraded, recovery tries again every
//! pass, and client I/O to the object gets a retryable `PgInactive` saying
//! why) until the stale members leave the acting set. Nothing is lost or
//! silently skipped.

use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_proto::{CloneLayout, MAX_DATA, MAX_META, Message, Reply, SnapCopy, SnapLayout};
use pontoon_store::{BlockDevice, CloneImage, SnapImage, StoreError};
use pontoon_types::{BLOCK_SIZE_U64, ObjectId};

use crate::peers::Peers;
use crate::shard::Shard;

/// Most bytes of data one copy, assembled a layer at a time, may hold in
/// memory: a 4 MiB object with 63 fully rewritten clones.
pub(crate) const MAX_COPY_BYTES: u64 = 256 << 20;

/// Encoded bytes of a replace sub-operation or a copy besides its ranges
/// and clones (target, version, counts, flags), rounded up.
const FIXED_FIELDS: u64 = 128;
/// Encoded bytes of one clone besides its ranges (id, flag, two counts).
const CLONE_FIELDS: u64 = 17;
/// Encoded bytes of one range.
const RANGE_BYTES: u64 = 16;

/// Why a copy could not be read or sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CopyError {
    /// Larger than one message carries.
    #[error(
        "{oid} with its snapshots is {data} bytes of data and about {fields} bytes of fields, \
         more than one message carries ({MAX_DATA} and {MAX_META})"
    )]
    TooLarge {
        /// The object.
        oid: ObjectId,
        /// Bytes of data.
        data: u64,
        /// Bytes of message fields (an upper bound).
        fields: u64,
    },
    /// The store failed to read it.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A copy as it goes on the wire: the head's extents, the snapshot layout
/// (objects with snapshot state) and every byte, head first.
pub(crate) struct WireCopy {
    /// (offset, length) of the head's extents.
    pub extents: Vec<(u64, u64)>,
    /// Clones and sequence, if the object has snapshot state.
    pub snaps: Option<SnapLayout>,
    /// The head's bytes, then each clone's.
    pub data: AlignedBuf,
}

/// Whether `img` needs its snapshot layout to travel (it is more than a
/// head).
pub(crate) fn has_snaps(img: &SnapImage) -> bool {
    img.seq > 0 || !img.clones.is_empty() || img.head.is_none()
}

/// Lays `img` out for the wire, checking it fits one message.
pub(crate) fn to_wire(oid: ObjectId, img: &SnapImage) -> Result<WireCopy, CopyError> {
    let head = img.head.as_deref().unwrap_or(&[]);
    let ranges = |e: &[(u64, AlignedBuf)]| -> Vec<(u64, u64)> {
        e.iter().map(|(off, d)| (*off, d.len() as u64)).collect()
    };
    let snaps = has_snaps(img).then(|| SnapLayout {
        seq: img.seq,
        has_head: img.head.is_some(),
        clones: img
            .clones
            .iter()
            .map(|c| CloneLayout {
                id: c.id,
                complete: c.complete,
                extents: ranges(&c.extents),
                holes: c
                    .holes
                    .iter()
                    .map(|r| (r.start, r.end.saturating_sub(r.start)))
                    .collect(),
            })
            .collect(),
    });
    let pieces = head
        .iter()
        .chain(img.clones.iter().flat_map(|c| &c.extents));
    let total: u64 = pieces.clone().map(|(_, d)| d.len() as u64).sum();
    let fields = FIXED_FIELDS
        + RANGE_BYTES * head.len() as u64
        + snaps.as_ref().map_or(0, |l| {
            l.clones
                .iter()
                .map(|c| CLONE_FIELDS + RANGE_BYTES * (c.extents.len() + c.holes.len()) as u64)
                .sum()
        });
    if total > u64::from(MAX_DATA) || fields > u64::from(MAX_META) {
        return Err(CopyError::TooLarge {
            oid,
            data: total,
            fields,
        });
    }
    let mut data = AlignedBuf::with_capacity((total as usize).max(1));
    for (_, d) in pieces {
        data.extend_from_slice(d);
    }
    Ok(WireCopy {
        extents: ranges(head),
        snaps,
        data,
    })
}

/// Rebuilds a copy from the wire: `extents` of the head, then the clones
/// `snaps` describes, cut from `data`. `None` if they disagree.
pub(crate) fn from_wire(
    version: pontoon_types::Version,
    extents: &[(u64, u64)],
    snaps: Option<&SnapLayout>,
    data: &[u8],
) -> Option<SnapImage> {
    let clone_ranges = snaps
        .into_iter()
        .flat_map(|l| &l.clones)
        .flat_map(|c| &c.extents);
    let all: Vec<(u64, u64)> = extents.iter().chain(clone_ranges).copied().collect();
    let mut pieces = split_extents(&all, data)?.into_iter();
    let head: Vec<(u64, AlignedBuf)> = pieces.by_ref().take(extents.len()).collect();
    let Some(l) = snaps else {
        return Some(SnapImage {
            version,
            seq: 0,
            head: Some(head),
            clones: Vec::new(),
        });
    };
    if !l.has_head && !head.is_empty() {
        return None;
    }
    let mut clones = Vec::with_capacity(l.clones.len());
    for c in &l.clones {
        let holes = c
            .holes
            .iter()
            .map(|&(off, len)| Some(off..off.checked_add(len)?))
            .collect::<Option<Vec<_>>>()?;
        clones.push(CloneImage {
            id: c.id,
            complete: c.complete,
            extents: pieces.by_ref().take(c.extents.len()).collect(),
            holes,
        });
    }
    Some(SnapImage {
        version,
        seq: l.seq,
        head: l.has_head.then_some(head),
        clones,
    })
}

/// Whether two layer answers describe the same copy: version, sequence,
/// head or not, and every clone's id, completeness and holes.
pub(crate) fn same_layout(a: &SnapImage, b: &SnapImage) -> bool {
    a.version == b.version
        && a.seq == b.seq
        && a.head.is_some() == b.head.is_some()
        && a.clones.len() == b.clones.len()
        && a.clones
            .iter()
            .zip(&b.clones)
            .all(|(x, y)| x.id == y.id && x.complete == y.complete && x.holes == y.holes)
}

/// Bytes of data in `extents`.
pub(crate) fn extent_bytes(extents: &[(u64, AlignedBuf)]) -> u64 {
    extents.iter().map(|(_, d)| d.len() as u64).sum()
}

/// Cuts `data` into the extents `ranges` describe; `None` if they disagree.
pub(crate) fn split_extents(ranges: &[(u64, u64)], data: &[u8]) -> Option<Vec<(u64, AlignedBuf)>> {
    let mut at = 0usize;
    let mut out = Vec::with_capacity(ranges.len());
    for &(off, len) in ranges {
        let len = usize::try_from(len).ok()?;
        let end = at.checked_add(len)?;
        out.push((off, AlignedBuf::copy_from(data.get(at..end)?)));
        at = end;
    }
    (at == data.len()).then_some(out)
}

/// A pull's answer carrying `copy`: a reply with the head's extents for an
/// object without snapshot state, a [`SnapCopy`] for one with.
pub(crate) fn pull_answer(
    version: pontoon_types::Version,
    copy: WireCopy,
) -> (Message, Option<AlignedBuf>) {
    let msg = match copy.snaps {
        None => {
            let mut r = Reply::ok(version);
            r.ranges = copy.extents;
            Message::Reply(r)
        }
        Some(snaps) => Message::SnapCopy(SnapCopy {
            version,
            extents: copy.extents,
            snaps,
        }),
    };
    (msg, Some(copy.data))
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// This OSD's whole copy of `oid`, `None` if it holds nothing of it. A
    /// copy with more data than one message carries is refused before its
    /// clones are read (it moves a layer at a time).
    pub(crate) async fn read_copy(
        self: &Rc<Self>,
        oid: ObjectId,
    ) -> Result<Option<SnapImage>, CopyError> {
        let Some(info) = self.store.snaps(oid) else {
            return Ok(self.store.read_object(oid).await?.map(|img| SnapImage {
                version: img.version,
                seq: 0,
                head: Some(img.extents),
                clones: Vec::new(),
            }));
        };
        let head: u64 = if info.has_head {
            self.store
                .allocated(oid)
                .iter()
                .map(|r| r.end - r.start)
                .sum()
        } else {
            0
        };
        let data = head + info.clones.iter().map(|c| c.blocks).sum::<u64>() * BLOCK_SIZE_U64;
        if data > u64::from(MAX_DATA) {
            return Err(CopyError::TooLarge {
                oid,
                data,
                fields: FIXED_FIELDS,
            });
        }
        Ok(self.store.read_object_snaps(oid).await?)
    }

    /// Installs `img` as this OSD's whole copy of `oid`, atomically. A copy
    /// the store refuses as too large or malformed is
    /// counted. A copy with clones the map's snapshots no longer need schedules
    /// snap trim of its volume: it came from a member that had not
    /// trimmed yet.
    pub(crate) async fn install_copy(
        self: &Rc<Self>,
        oid: ObjectId,
        img: &SnapImage,
    ) -> Result<(), StoreError> {
        let r = match (&img.head, has_snaps(img) || self.store.snaps(oid).is_some()) {
            (Some(head), false) => self.store.replace(oid, img.version, head).await,
            _ => self.store.replace_snaps(oid, img).await,
        };
        match &r {
            Err(StoreError::InvalidArgument(_)) => self.metrics.recovery_refused(),
            Ok(()) if !img.clones.is_empty() && self.has_dead_clones(oid) => {
                self.schedule_snap_trim(oid.volume.0)
            }
            _ => {}
        }
        r
    }

    /// Whether installing `img` takes more space here than the copy it
    /// replaces (what a backfill-full OSD refuses).
    pub(crate) fn copy_grows(&self, oid: ObjectId, img: &SnapImage) -> bool {
        let head = img.head.as_deref().unwrap_or(&[]);
        if !has_snaps(img) {
            return head
                .iter()
                .any(|(off, d)| self.store.unallocated_blocks(oid, *off, d.len() as u64) > 0);
        }
        let new = extent_bytes(head)
            + img
                .clones
                .iter()
                .map(|c| extent_bytes(&c.extents))
                .sum::<u64>();
        let held_head: u64 = self
            .store
            .allocated(oid)
            .iter()
            .map(|r| r.end - r.start)
            .sum();
        let held_clones = self.store.snaps(oid).map_or(0, |s| {
            s.clones.iter().map(|c| c.blocks).sum::<u64>() * BLOCK_SIZE_U64
        });
        new > held_head + held_clones
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_types::Version;

    fn buf(seed: u8, blocks: usize) -> AlignedBuf {
        AlignedBuf::copy_from(&vec![seed; blocks * 4096])
    }

    fn image() -> SnapImage {
        SnapImage {
            version: Version::new(3, 9),
            seq: 5,
            head: Some(vec![(0, buf(1, 2)), (16384, buf(2, 1))]),
            clones: vec![
                CloneImage {
                    id: 2,
                    complete: false,
                    extents: vec![(4096, buf(3, 1))],
                    holes: vec![8192..16384, 24576..28672],
                },
                CloneImage {
                    id: 5,
                    complete: true,
                    extents: vec![(0, buf(4, 3)), (20480, buf(5, 1))],
                    holes: Vec::new(),
                },
            ],
        }
    }

    /// Head, clones and holes compared as data.
    fn same(a: &SnapImage, b: &SnapImage) -> bool {
        let ext = |e: &[(u64, AlignedBuf)]| -> Vec<(u64, Vec<u8>)> {
            e.iter().map(|(o, d)| (*o, d.to_vec())).collect()
        };
        a.version == b.version
            && a.seq == b.seq
            && a.head.as_deref().map(ext) == b.head.as_deref().map(ext)
            && a.clones.len() == b.clones.len()
            && a.clones.iter().zip(&b.clones).all(|(x, y)| {
                (x.id, x.complete, &x.holes, ext(&x.extents))
                    == (y.id, y.complete, &y.holes, ext(&y.extents))
            })
    }

    #[test]
    fn a_copy_with_clones_or_without_a_head_comes_back_whole_from_the_wire() {
        let oid = ObjectId::new(1, 1);
        let headless = SnapImage {
            head: None,
            ..image()
        };
        let plain = SnapImage {
            seq: 0,
            clones: Vec::new(),
            ..image()
        };
        for (what, img) in [
            ("clones", image()),
            ("headless", headless),
            ("plain", plain),
        ] {
            let w = to_wire(oid, &img).expect("fits");
            assert_eq!(w.snaps.is_some(), what != "plain", "{what}");
            let back = from_wire(img.version, &w.extents, w.snaps.as_ref(), &w.data).expect(what);
            assert!(same(&back, &img), "{what}");
            // Data that does not match the ranges is refused.
            let short = &w.data[..w.data.len() - 4096];
            assert!(from_wire(img.version, &w.extents, w.snaps.as_ref(), short).is_none());
        }
    }

    #[test]
    fn a_copy_larger_than_one_message_is_refused() {
        let oid = ObjectId::new(1, 1);
        let blocks = MAX_DATA as usize / 4096 / 4 + 1;
        let big = SnapImage {
            seq: 4,
            head: Some(vec![(0, buf(1, blocks))]),
            clones: (1..=4)
                .map(|id| CloneImage {
                    id,
                    complete: false,
                    extents: vec![(0, buf(id as u8, blocks))],
                    holes: Vec::new(),
                })
                .collect(),
            ..image()
        };
        assert!(matches!(
            to_wire(oid, &big),
            Err(CopyError::TooLarge { data, .. }) if data > u64::from(MAX_DATA)
        ));
        // Many holes: the fields, not the data, overflow.
        let holes = (0..(MAX_META as u64 / RANGE_BYTES + 1))
            .map(|i| i * 8192..i * 8192 + 4096)
            .collect();
        let holey = SnapImage {
            clones: vec![CloneImage {
                id: 5,
                complete: false,
                extents: Vec::new(),
                holes,
            }],
            ..image()
        };
        assert!(matches!(
            to_wire(oid, &holey),
            Err(CopyError::TooLarge { fields, .. }) if fields > u64::from(MAX_META)
        ));
    }
}
