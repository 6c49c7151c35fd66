//! The in-memory object table: for every object its version and, for every
//! allocated block, where the block lives and its checksum.
//!
//! A block lives either in the data area (`Loc::Data`) or still in a journal
//! record held in memory (`Loc::Journal`). Locations are packed into a `u64`
//! so that a block entry is 16 bytes.

use pontoon_types::{ObjectId, Version, VolumeId};
use rustc_hash::FxHashMap;

use crate::snaps::SnapState;
use crate::stats::VolumeUsage;

const JOURNAL_BIT: u64 = 1 << 63;
const RECNO_BITS: u32 = 41;
const BUF_BITS: u32 = 10;
const OFF_BITS: u32 = 12;
/// The packed location of a hole (a clone's "zeros here"): a data block
/// far beyond any data area, never a journal location.
const HOLE_LOC: u64 = !JOURNAL_BIT;

/// Where a block's current contents are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    /// Data-area block number (relative to the slice's data area).
    Data(u64),
    /// Block `off` of buffer `buf` of in-memory journal record `recno`.
    Journal { recno: u64, buf: u32, off: u32 },
}

impl Loc {
    pub(crate) fn pack(self) -> u64 {
        match self {
            Loc::Data(p) => {
                debug_assert!(p & JOURNAL_BIT == 0);
                p
            }
            Loc::Journal { recno, buf, off } => {
                debug_assert!(
                    recno < 1 << RECNO_BITS && buf < 1 << BUF_BITS && off < 1 << OFF_BITS
                );
                JOURNAL_BIT | recno << (BUF_BITS + OFF_BITS) | (buf as u64) << OFF_BITS | off as u64
            }
        }
    }

    pub(crate) fn unpack(v: u64) -> Self {
        if v & JOURNAL_BIT == 0 {
            Loc::Data(v)
        } else {
            Loc::Journal {
                recno: (v & !JOURNAL_BIT) >> (BUF_BITS + OFF_BITS),
                buf: ((v >> OFF_BITS) & ((1 << BUF_BITS) - 1)) as u32,
                off: (v & ((1 << OFF_BITS) - 1)) as u32,
            }
        }
    }
}

/// Most buffers one record may hold (the buffer field's width).
pub(crate) const MAX_RECORD_BUFS: usize = 1 << BUF_BITS;

/// One allocated block of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockEntry {
    pub blk: u32,
    pub crc: u32,
    loc: u64,
}

impl BlockEntry {
    pub(crate) fn new(blk: u32, crc: u32, loc: Loc) -> Self {
        Self {
            blk,
            crc,
            loc: loc.pack(),
        }
    }

    /// A clone's record that the block read as zeros at its snapshot.
    pub(crate) fn hole(blk: u32) -> Self {
        Self {
            blk,
            crc: 0,
            loc: HOLE_LOC,
        }
    }

    pub(crate) fn is_hole(&self) -> bool {
        self.loc == HOLE_LOC
    }

    pub(crate) fn loc(&self) -> Loc {
        debug_assert!(!self.is_hole(), "a hole has no location");
        Loc::unpack(self.loc)
    }
}

/// An object's metadata: version, the head's allocated blocks sorted by
/// index, and, once written under a snapshot sequence, its clones.
#[derive(Clone, Debug, Default)]
pub(crate) struct ObjectMeta {
    pub version: Version,
    pub blocks: Vec<BlockEntry>,
    pub snaps: Option<Box<SnapState>>,
}

impl ObjectMeta {
    /// Index of the first block entry with `blk >= start`.
    ///
    /// Entries are sorted and unique, so `blocks[i].blk >= i`: the answer
    /// is at most `start`, and exactly `start` when the object is dense up
    /// to it (the common case, found with one access instead of a binary
    /// search whose every step misses the cache).
    pub(crate) fn lower_bound(&self, start: u32) -> usize {
        let s = start as usize;
        if self.blocks.get(s).is_some_and(|b| b.blk == start) {
            return s;
        }
        let limit = self.blocks.len().min(s.saturating_add(1));
        self.blocks[..limit].partition_point(|b| b.blk < start)
    }

    /// The entry for block `blk`, if allocated.
    pub(crate) fn get(&self, blk: u32) -> Option<&BlockEntry> {
        let i = self.lower_bound(blk);
        self.blocks.get(i).filter(|b| b.blk == blk)
    }

    /// Entries with `start <= blk < end`.
    pub(crate) fn range(&self, start: u32, end: u32) -> &[BlockEntry] {
        let a = self.lower_bound(start);
        let n = end.saturating_sub(start) as usize;
        // At most `n` entries fit in the range; when the n-th one from `a`
        // is block `end - 1`, the range is dense and all n are in it.
        let limit = self.blocks.len().min(a + n);
        let b = if n > 0 && limit == a + n && self.blocks[limit - 1].blk == end - 1 {
            limit
        } else {
            a + self.blocks[a..limit].partition_point(|e| e.blk < end)
        };
        debug_assert!(
            self.blocks[a..b]
                .iter()
                .all(|e| e.blk >= start && e.blk < end)
        );
        &self.blocks[a..b]
    }

    /// Number of blocks in `start..end` that are not allocated.
    pub(crate) fn missing_in(&self, start: u32, end: u32) -> u32 {
        (end - start) - self.range(start, end).len() as u32
    }

    /// Sets blocks `start..start+n` to `new(i)`, reporting every replaced
    /// entry to `replaced`.
    pub(crate) fn set_range(
        &mut self,
        start: u32,
        n: u32,
        mut new: impl FnMut(u32) -> BlockEntry,
        mut replaced: impl FnMut(BlockEntry),
    ) {
        let end = start + n;
        let a = self.lower_bound(start);
        let b = a + self.range(start, end).len();
        if b - a == n as usize {
            for (i, slot) in self.blocks[a..b].iter_mut().enumerate() {
                replaced(*slot);
                *slot = new(i as u32);
                debug_assert_eq!(slot.blk, start + i as u32);
            }
            return;
        }
        for old in self.blocks.drain(a..b) {
            replaced(old);
        }
        self.blocks.splice(a..a, (0..n).map(&mut new));
        debug_assert!(self.blocks.windows(2).all(|w| w[0].blk < w[1].blk));
    }

    /// Removes blocks `start..start+n`, reporting each removed entry.
    pub(crate) fn remove_range(&mut self, start: u32, n: u32, removed: impl FnMut(BlockEntry)) {
        let end = start.saturating_add(n);
        let a = self.lower_bound(start);
        let b = a + self.blocks[a..].partition_point(|e| e.blk < end);
        self.blocks.drain(a..b).for_each(removed);
    }

    /// The entry (of the head or of a clone) that owns block `blk` at
    /// `at`, if any still does.
    fn owner_mut(&mut self, blk: u32, at: Loc) -> Option<&mut BlockEntry> {
        let packed = at.pack();
        let i = self.lower_bound(blk);
        if self
            .blocks
            .get(i)
            .is_some_and(|e| e.blk == blk && e.loc == packed)
        {
            return self.blocks.get_mut(i);
        }
        let s = self.snaps.as_mut()?;
        for c in s.clones.iter_mut().rev() {
            if let Ok(i) = c.entries.binary_search_by_key(&blk, |e| e.blk)
                && c.entries[i].loc == packed
            {
                return c.entries.get_mut(i);
            }
        }
        None
    }

    /// Whether some entry of the object still owns block `blk` at `at`.
    pub(crate) fn owns(&self, blk: u32, at: Loc) -> bool {
        let packed = at.pack();
        if self.get(blk).is_some_and(|e| e.loc == packed) {
            return true;
        }
        self.snaps.as_ref().is_some_and(|s| {
            s.clones
                .iter()
                .any(|c| c.get(blk).is_some_and(|e| e.loc == packed))
        })
    }

    /// Repoints block `blk` from `from` to `to` if an entry of the head or
    /// of a clone still lives at `from`.
    pub(crate) fn relocate(&mut self, blk: u32, from: Loc, to: Loc) -> bool {
        match self.owner_mut(blk, from) {
            Some(e) => {
                e.loc = to.pack();
                true
            }
            None => false,
        }
    }

    /// Every data-owning entry: the head's, then each clone's (no holes).
    pub(crate) fn all_entries(&self) -> impl Iterator<Item = &BlockEntry> {
        let clones = self.snaps.iter().flat_map(|s| s.clones.iter());
        self.blocks
            .iter()
            .chain(clones.flat_map(|c| c.entries.iter().filter(|e| !e.is_hole())))
    }
}

/// What one object costs: head blocks, clone blocks, and checkpoint bytes
/// of its snapshot section beyond its blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    pub blocks: u64,
    pub clone_blocks: u64,
    pub snap_meta: u64,
}

impl ObjectMeta {
    pub(crate) fn footprint(&self) -> Footprint {
        Footprint {
            blocks: self.blocks.len() as u64,
            clone_blocks: self.clone_blocks(),
            snap_meta: self.snap_meta_bytes(),
        }
    }
}

/// All objects of one store slice, and what each volume holds of them.
#[derive(Default)]
pub(crate) struct ObjectTable {
    pub map: FxHashMap<ObjectId, ObjectMeta>,
    /// Objects and allocated blocks per volume, kept in step with `map` by
    /// [`ObjectTable::charge`] (entries exist only while non-zero).
    usage: FxHashMap<VolumeId, VolumeUsage>,
    /// Checkpoint bytes of every snapshot section beyond its blocks.
    snap_meta: u64,
    /// Objects that had snapshot state and were removed, with the journal
    /// position of the removal: the next checkpoint writes a tombstone (or
    /// a replay mark) for them so replay never re-applies older records to
    /// a later incarnation. Pruned when a checkpoint starts past them.
    pub removed_snapped: FxHashMap<ObjectId, u64>,
}

/// Checkpoint bytes a `removed_snapped` entry may cost: a tombstone (an
/// object header and a mark), or an empty snapshot section.
pub(crate) const REMOVED_SNAPPED_BYTES: u64 = 44;

impl ObjectTable {
    /// Records that an object of `volume` went from `before` to `after`
    /// (`None`: the object did not / no longer exists).
    pub(crate) fn charge(
        &mut self,
        volume: VolumeId,
        before: Option<Footprint>,
        after: Option<Footprint>,
    ) {
        if before == after {
            return;
        }
        let (b, a) = (before.unwrap_or_default(), after.unwrap_or_default());
        self.snap_meta = (self.snap_meta + a.snap_meta)
            .checked_sub(b.snap_meta)
            .expect("snapshot metadata bytes would go negative");
        let u = self.usage.entry(volume).or_default();
        let objects = u.objects as i64 + after.is_some() as i64 - before.is_some() as i64;
        let blocks = u.blocks as i64 + a.blocks as i64 - b.blocks as i64;
        let snap = u.snap_blocks as i64 + a.clone_blocks as i64 - b.clone_blocks as i64;
        assert!(
            objects >= 0 && blocks >= 0 && snap >= 0,
            "volume {volume:?} usage would go negative ({objects} objects, {blocks} blocks, {snap} snapshot blocks)"
        );
        u.objects = objects as u64;
        u.blocks = blocks as u64;
        u.snap_blocks = snap as u64;
        if objects == 0 && blocks == 0 && snap == 0 {
            self.usage.remove(&volume);
        }
    }

    /// Recounts every volume's usage from the table (after open).
    pub(crate) fn recount(&mut self) {
        self.usage.clear();
        self.snap_meta = 0;
        for (oid, o) in &self.map {
            let f = o.footprint();
            let u = self.usage.entry(oid.volume).or_default();
            u.objects += 1;
            u.blocks += f.blocks;
            u.snap_blocks += f.clone_blocks;
            self.snap_meta += f.snap_meta;
        }
    }

    /// Checkpoint bytes snapshot metadata needs beyond what the slot
    /// budgets per data block and per object.
    pub(crate) fn snap_meta_bytes(&self) -> u64 {
        self.snap_meta + REMOVED_SNAPPED_BYTES * self.removed_snapped.len() as u64
    }

    /// Usage of every volume with objects here.
    pub(crate) fn usage(&self) -> impl Iterator<Item = (VolumeId, VolumeUsage)> + '_ {
        self.usage.iter().map(|(v, u)| (*v, *u))
    }

    pub(crate) fn get(&self, oid: &ObjectId) -> Option<&ObjectMeta> {
        self.map.get(oid)
    }

    pub(crate) fn get_mut(&mut self, oid: &ObjectId) -> Option<&mut ObjectMeta> {
        self.map.get_mut(oid)
    }

    pub(crate) fn entry(&mut self, oid: ObjectId) -> &mut ObjectMeta {
        self.map.entry(oid).or_default()
    }

    pub(crate) fn remove(&mut self, oid: &ObjectId) -> Option<ObjectMeta> {
        self.map.remove(oid)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Blocks in `start..start+n` of `oid`'s head that are not allocated.
    pub(crate) fn missing(&self, oid: &ObjectId, start: u32, n: u32) -> u32 {
        self.map
            .get(oid)
            .filter(|o| o.has_head())
            .map_or(n, |o| o.missing_in(start, start + n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The shortcuts of `lower_bound` and `range` agree with plain
        /// binary searches on any sorted set of blocks, dense or sparse.
        #[test]
        fn lookups_match_binary_search(
            set in proptest::collection::btree_set(0u32..300, 0..300),
            start in 0u32..320,
            len in 0u32..64,
        ) {
            let o = ObjectMeta {
                snaps: None,
                version: Version::ZERO,
                blocks: set.iter().map(|&b| BlockEntry::new(b, 0, Loc::Data(u64::from(b)))).collect(),
            };
            let end = start + len;
            let lb = o.blocks.partition_point(|b| b.blk < start);
            prop_assert_eq!(o.lower_bound(start), lb);
            let ub = o.blocks.partition_point(|b| b.blk < end);
            prop_assert_eq!(o.range(start, end).len(), ub - lb);
            prop_assert_eq!(o.get(start).is_some(), set.contains(&start));
        }
    }

    #[test]
    fn locations_pack_losslessly() {
        for l in [
            Loc::Data(0),
            Loc::Data((1 << 62) - 1),
            Loc::Journal {
                recno: 0,
                buf: 0,
                off: 0,
            },
            Loc::Journal {
                recno: (1 << 41) - 1,
                buf: 1023,
                off: 4095,
            },
        ] {
            assert_eq!(Loc::unpack(l.pack()), l);
        }
    }

    #[test]
    fn set_range_replaces_and_inserts_in_order() {
        let mut o = ObjectMeta::default();
        let mut freed = vec![];
        o.set_range(
            4,
            2,
            |i| BlockEntry::new(4 + i, 0, Loc::Data(100 + i as u64)),
            |e| freed.push(e.blk),
        );
        o.set_range(
            0,
            1,
            |_| BlockEntry::new(0, 0, Loc::Data(1)),
            |e| freed.push(e.blk),
        );
        o.set_range(
            3,
            3,
            |i| BlockEntry::new(3 + i, 0, Loc::Data(200 + i as u64)),
            |e| freed.push(e.blk),
        );
        assert_eq!(freed, vec![4, 5]);
        let blks: Vec<u32> = o.blocks.iter().map(|b| b.blk).collect();
        assert_eq!(blks, vec![0, 3, 4, 5]);
        assert_eq!(o.get(4).unwrap().loc(), Loc::Data(201));
        assert_eq!(o.missing_in(0, 6), 2);
        let mut removed = vec![];
        o.remove_range(4, 100, |e| removed.push(e.blk));
        assert_eq!(removed, vec![4, 5]);
        assert!(o.relocate(3, Loc::Data(200), Loc::Data(9)));
        assert!(!o.relocate(3, Loc::Data(200), Loc::Data(10)));
    }
}
