//! Snapshot metadata of one object: clones made by redirect-on-write
//! ownership transfer, the rules that fill and trim them, and the views
//! snapshot reads and diffs resolve through.
//!
//! A volume's writes carry its snapshot sequence `S` (the newest snapshot
//! id when the write was issued; 0 before any snapshot). Each object keeps
//! the sequence its head was last written under (`seq`). A write with `S`
//! above it opens an empty clone with id `S`, costing no I/O: the clone is
//! the object's state for every snapshot id in (previous clone's id, S].
//! From then on, a head block replaced or removed for the first time moves,
//! entry and all, into the newest clone instead of being freed; a block the
//! head did not have leaves a *hole* there, so the snapshot keeps reading
//! zeros. Every data block is owned by exactly one entry (of the head or of
//! one clone), so nothing is reference counted and nothing is copied.
//!
//! Snapshot `s` reads block `b` from the first clone with id >= `s`
//! (ascending) that has an entry (block or hole) for `b`, or that is
//! *complete* (its view is whole: unlisted blocks are holes); when none
//! answers, `b` has not changed since and the head answers.
//!
//! Removing snapshots (trim) drops every clone whose id range holds no live
//! snapshot: older snapshots that read through it must keep reading the
//! same, so its entries move down into the next older clone where that
//! clone has none for the block (or is complete); the rest, and everything
//! of a removed oldest clone, is unreachable and freed.
//!
//! Writes older than the object's sequence (a client that has not yet seen
//! the newest snapshot) count as written under the object's sequence, as
//! Ceph does.

use smallvec::SmallVec;

use crate::objects::{BlockEntry, ObjectMeta};

/// Checkpoint bytes one object's snapshot section needs besides its
/// entries: mark, sequence, flags, clone count.
pub(crate) const SNAP_SECTION_BYTES: u64 = 24;
/// Checkpoint bytes per clone besides its entries: id, flags, run and
/// hole-run counts.
pub(crate) const CLONE_HEADER_BYTES: u64 = 20;
/// Checkpoint bytes per hole in the worst case (a run of its own).
pub(crate) const HOLE_BYTES: u64 = 8;

/// An object's state for the snapshot ids in (previous clone's id, `id`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CloneMeta {
    pub id: u64,
    /// Blocks not listed are holes (the object did not exist, or was
    /// deleted, at the snapshot), instead of unchanged since.
    pub complete: bool,
    /// Blocks and holes, sorted by block, unique.
    pub entries: Vec<BlockEntry>,
}

impl CloneMeta {
    pub(crate) fn new(id: u64, complete: bool) -> Self {
        Self {
            id,
            complete,
            entries: Vec::new(),
        }
    }

    fn find(&self, blk: u32) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&blk, |e| e.blk)
    }

    /// The entry for `blk` (block or hole), if the clone has one.
    pub(crate) fn get(&self, blk: u32) -> Option<&BlockEntry> {
        self.find(blk).ok().map(|i| &self.entries[i])
    }

    /// What this clone answers for `blk`: `Some(Some(e))` a block,
    /// `Some(None)` a hole, `None` fall through to newer.
    fn answer(&self, blk: u32) -> Option<Option<BlockEntry>> {
        match self.get(blk) {
            Some(e) if e.is_hole() => Some(None),
            Some(e) => Some(Some(*e)),
            None if self.complete => Some(None),
            None => None,
        }
    }

    /// Data blocks and holes held.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let holes = self.entries.iter().filter(|e| e.is_hole()).count() as u64;
        (self.entries.len() as u64 - holes, holes)
    }
}

/// Snapshot state of an object that has ever been written under a snapshot
/// sequence above 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SnapState {
    /// Sequence the head was last written under.
    pub seq: u64,
    /// The head was deleted; the object lives on for its clones. While
    /// headless, the newest clone is complete.
    pub headless: bool,
    /// Ascending by id; every id <= `seq`.
    pub clones: Vec<CloneMeta>,
    /// Data blocks owned by clones (kept in step by every change).
    pub clone_blocks: u64,
    /// Holes recorded in clones.
    pub holes: u64,
}

impl SnapState {
    /// Checkpoint bytes of the snapshot section beyond its data-block
    /// entries (which the slot already budgets per data block).
    pub(crate) fn meta_bytes(&self) -> u64 {
        SNAP_SECTION_BYTES + CLONE_HEADER_BYTES * self.clones.len() as u64 + HOLE_BYTES * self.holes
    }

    /// Clone `i`'s data blocks, and of them those that trimming this clone
    /// alone would free: the ones no older snapshot reads through it (an
    /// older clone that is complete, or has its own entry for the block,
    /// does not read through).
    pub(crate) fn clone_space(&self, i: usize) -> (u64, u64) {
        let older = i.checked_sub(1).map(|k| &self.clones[k]);
        self.clones[i]
            .entries
            .iter()
            .filter(|e| !e.is_hole())
            .fold((0, 0), |(blocks, freed), e| {
                let alone = older.is_none_or(|o| o.complete || o.get(e.blk).is_some());
                (blocks + 1, freed + u64::from(alone))
            })
    }

    /// Recounts the cached totals (checked against them in tests).
    pub(crate) fn recount(&self) -> (u64, u64) {
        self.clones.iter().fold((0, 0), |(b, h), c| {
            let (cb, ch) = c.counts();
            (b + cb, h + ch)
        })
    }

    fn check(&self) {
        debug_assert_eq!(self.recount(), (self.clone_blocks, self.holes));
        debug_assert!(self.clones.windows(2).all(|w| w[0].id < w[1].id));
        assert!(
            self.clones.last().is_none_or(|c| c.id <= self.seq),
            "a clone is newer than its object's sequence"
        );
        assert!(
            !self.headless || self.clones.last().is_some_and(|c| c.complete),
            "a headless object's newest clone must be complete"
        );
    }
}

/// What an operation asks of the snapshot rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadChange {
    /// Blocks `start..start+n` replaced by new data.
    Write { start: u32, n: u32 },
    /// Blocks `start..start+n` deallocated.
    Discard { start: u32, n: u32 },
    /// The head removed.
    Delete,
}

/// Where an object stands after a snapshot-aware change.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// The object still exists (with or without its head).
    Kept,
    /// Nothing is left of it: remove it from the table.
    Gone,
}

impl ObjectMeta {
    /// Whether the object has a head (it was not deleted while snapshots
    /// still hold it).
    pub(crate) fn has_head(&self) -> bool {
        self.snaps.as_ref().is_none_or(|s| !s.headless)
    }

    /// Data blocks owned by clones.
    pub(crate) fn clone_blocks(&self) -> u64 {
        self.snaps.as_ref().map_or(0, |s| s.clone_blocks)
    }

    /// Checkpoint bytes of the snapshot section beyond its blocks.
    pub(crate) fn snap_meta_bytes(&self) -> u64 {
        self.snaps.as_ref().map_or(0, |s| s.meta_bytes())
    }

    /// The snapshot sequence the head was last written under.
    pub(crate) fn seq(&self) -> u64 {
        self.snaps.as_ref().map_or(0, |s| s.seq)
    }

    /// Starts a new object written under `seq`: snapshots up to `seq` saw
    /// nothing, which one complete empty clone says.
    pub(crate) fn born_under(seq: u64) -> Option<Box<SnapState>> {
        (seq > 0).then(|| {
            Box::new(SnapState {
                seq,
                headless: false,
                clones: vec![CloneMeta::new(seq, true)],
                clone_blocks: 0,
                holes: 0,
            })
        })
    }

    /// Applies `change` under snapshot sequence `seq` to an existing object:
    /// opens a clone if `seq` is new, changes the head, and moves what the
    /// head loses into the newest clone (or reports it to `release`).
    /// `new(i)` makes the entry for block `start + i` of a write.
    pub(crate) fn change_head(
        &mut self,
        seq: u64,
        change: HeadChange,
        new: impl FnMut(u32) -> BlockEntry,
        mut release: impl FnMut(BlockEntry),
    ) -> After {
        let headless = !self.has_head();
        if headless && !matches!(change, HeadChange::Write { .. }) {
            // Nothing to discard or delete: the head is already gone.
            return After::Kept;
        }
        let opens = seq > self.seq();
        if opens {
            let s = self.snaps.get_or_insert_with(Box::default);
            // A headless object did not exist at the new snapshot either.
            s.clones.push(CloneMeta::new(seq, s.headless));
            s.seq = seq;
        }
        if headless {
            let s = self
                .snaps
                .as_mut()
                .expect("headless objects have snapshot state");
            s.headless = false;
        }
        // The newest clone takes what the head loses, unless its view is
        // already whole.
        let has_target = self
            .snaps
            .as_ref()
            .is_some_and(|s| s.clones.last().is_some_and(|c| !c.complete));
        if !has_target {
            // No snapshot needs the head's old blocks.
            return match change {
                HeadChange::Write { start, n } => {
                    self.set_range(start, n, new, release);
                    After::Kept
                }
                HeadChange::Discard { start, n } => {
                    self.remove_range(start, n, release);
                    After::Kept
                }
                HeadChange::Delete => {
                    std::mem::take(&mut self.blocks)
                        .into_iter()
                        .for_each(&mut release);
                    match self.snaps.as_mut() {
                        Some(s) if !s.clones.is_empty() => {
                            s.headless = true;
                            s.check();
                            After::Kept
                        }
                        _ => After::Gone,
                    }
                }
            };
        }
        let ObjectMeta { blocks, snaps, .. } = self;
        let s = snaps.as_mut().expect("a target clone exists");
        let mut lost: SmallVec<[BlockEntry; 8]> = SmallVec::new();
        let clone = s.clones.last_mut().expect("target clone exists");
        let (mut moved, mut holes) = (0u64, 0u64);
        match change {
            HeadChange::Write { start, n } => {
                // Borrow dance: the head's vector is ours, the clone is in
                // the snapshot box.
                set_range_into(blocks, start, n, new, |e| lost.push(e));
                absorb(
                    clone,
                    start,
                    start + n,
                    &lost,
                    true,
                    &mut release,
                    &mut moved,
                    &mut holes,
                );
            }
            HeadChange::Discard { start, n } => {
                remove_range_into(blocks, start, n, |e| lost.push(e));
                absorb(
                    clone,
                    start,
                    start.saturating_add(n),
                    &lost,
                    false,
                    &mut release,
                    &mut moved,
                    &mut holes,
                );
            }
            HeadChange::Delete => {
                lost = std::mem::take(blocks).into_iter().collect();
                if let (Some(a), Some(b)) = (lost.first(), lost.last()) {
                    let (a, b) = (a.blk, b.blk + 1);
                    absorb(
                        clone,
                        a,
                        b,
                        &lost,
                        false,
                        &mut release,
                        &mut moved,
                        &mut holes,
                    );
                }
                // Blocks neither in the clone nor in the head were holes.
                clone.complete = true;
                s.headless = true;
            }
        }
        s.clone_blocks += moved;
        s.holes += holes;
        s.check();
        After::Kept
    }

    /// Removes clone `id` (no live snapshot in its range): its entries move
    /// into the next older clone where that has none, the rest go to
    /// `release`.
    pub(crate) fn trim_clone(&mut self, id: u64, mut release: impl FnMut(BlockEntry)) -> After {
        let Some(s) = self.snaps.as_mut() else {
            return After::Kept;
        };
        let Ok(i) = s.clones.binary_search_by_key(&id, |c| c.id) else {
            return After::Kept;
        };
        let gone = s.clones.remove(i);
        let (gb, gh) = gone.counts();
        s.clone_blocks -= gb;
        s.holes -= gh;
        if i == 0 {
            // Nothing older reads through it.
            gone.entries
                .into_iter()
                .filter(|e| !e.is_hole())
                .for_each(&mut release);
        } else {
            let older = &mut s.clones[i - 1];
            let (ob, oh) = older.counts();
            if older.complete {
                gone.entries
                    .into_iter()
                    .filter(|e| !e.is_hole())
                    .for_each(&mut release);
            } else {
                let (x, y) = (&older.entries, &gone.entries);
                let mut merged = Vec::with_capacity(x.len() + y.len());
                let (mut i, mut j) = (0, 0);
                while i < x.len() || j < y.len() {
                    match (x.get(i), y.get(j)) {
                        (Some(a), Some(b)) if a.blk == b.blk => {
                            // The older clone answers for this block.
                            merged.push(*a);
                            if !b.is_hole() {
                                release(*b);
                            }
                            i += 1;
                            j += 1;
                        }
                        (Some(a), Some(b)) if a.blk < b.blk => {
                            merged.push(*a);
                            i += 1;
                        }
                        (Some(_), Some(b)) | (None, Some(b)) => {
                            merged.push(*b);
                            j += 1;
                        }
                        (Some(a), None) => {
                            merged.push(*a);
                            i += 1;
                        }
                        (None, None) => break,
                    }
                }
                older.entries = merged;
                older.complete |= gone.complete;
            }
            let (nb, nh) = s.clones[i - 1].counts();
            s.clone_blocks = s.clone_blocks - ob + nb;
            s.holes = s.holes - oh + nh;
        }
        if s.headless && s.clones.is_empty() {
            return After::Gone;
        }
        if s.headless && i == s.clones.len() && i > 0 {
            // The removed newest clone was complete; the older one took it over.
            debug_assert!(s.clones[i - 1].complete);
        }
        s.check();
        After::Kept
    }

    /// Removes the head outside the snapshot rules (recovery replacing
    /// it): its blocks are released, clones stay.
    pub(crate) fn drop_head(&mut self, release: impl FnMut(BlockEntry)) -> After {
        std::mem::take(&mut self.blocks)
            .into_iter()
            .for_each(release);
        match self.snaps.as_mut() {
            Some(s) if !s.clones.is_empty() => {
                s.headless = true;
                After::Kept
            }
            _ => After::Gone,
        }
    }

    /// Makes sure clone `id` exists (recovery installing clones); `fresh`
    /// objects start without a head.
    pub(crate) fn clone_create(&mut self, id: u64, complete: bool, fresh: bool) {
        let s = self.snaps.get_or_insert_with(Box::default);
        if fresh {
            s.headless = true;
        }
        s.seq = s.seq.max(id);
        match s.clones.binary_search_by_key(&id, |c| c.id) {
            Ok(i) => s.clones[i].complete = complete,
            Err(i) => s.clones.insert(i, CloneMeta::new(id, complete)),
        }
    }

    /// Sets blocks `start..start+n` of clone `id` to `new(i)` (recovery).
    pub(crate) fn clone_set_range(
        &mut self,
        id: u64,
        start: u32,
        n: u32,
        new: impl FnMut(u32) -> BlockEntry,
        release: impl FnMut(BlockEntry),
    ) {
        self.clone_assign(id, start, n, new, release);
    }

    /// Records holes for blocks `start..start+n` of clone `id` (recovery).
    pub(crate) fn clone_holes(
        &mut self,
        id: u64,
        start: u32,
        n: u32,
        release: impl FnMut(BlockEntry),
    ) {
        self.clone_assign(id, start, n, |i| BlockEntry::hole(start + i), release);
    }

    fn clone_assign(
        &mut self,
        id: u64,
        start: u32,
        n: u32,
        new: impl FnMut(u32) -> BlockEntry,
        mut release: impl FnMut(BlockEntry),
    ) {
        let fresh = self.snaps.is_none();
        let s = self.snaps.get_or_insert_with(Box::default);
        let _ = fresh;
        s.seq = s.seq.max(id);
        let i = match s.clones.binary_search_by_key(&id, |c| c.id) {
            Ok(i) => i,
            Err(i) => {
                s.clones.insert(i, CloneMeta::new(id, false));
                i
            }
        };
        let c = &mut s.clones[i];
        let (ob, oh) = c.counts();
        let end = start.saturating_add(n);
        let a = c.entries.partition_point(|e| e.blk < start);
        let b = a + c.entries[a..].partition_point(|e| e.blk < end);
        for old in c.entries.drain(a..b) {
            if !old.is_hole() {
                release(old);
            }
        }
        c.entries.splice(a..a, (0..n).map(new));
        let (nb, nh) = c.counts();
        s.clone_blocks = s.clone_blocks - ob + nb;
        s.holes = s.holes - oh + nh;
    }

    /// Clone ids whose range (previous clone's id, id] holds none of
    /// `live` (sorted ascending).
    pub(crate) fn dead_clones(&self, live: &[u64]) -> Vec<u64> {
        let Some(s) = self.snaps.as_ref() else {
            return Vec::new();
        };
        let mut prev = 0u64;
        let mut out = Vec::new();
        for c in &s.clones {
            let i = live.partition_point(|&x| x <= prev);
            if live.get(i).is_none_or(|&x| x > c.id) {
                out.push(c.id);
            }
            prev = c.id;
        }
        out
    }

    /// Resolves what snapshot `snap` sees in blocks `start..end` into
    /// `out` (data blocks only, ascending). `u64::MAX` views the head.
    pub(crate) fn view_range(&self, snap: u64, start: u32, end: u32, out: &mut Vec<BlockEntry>) {
        let head = self.has_head();
        let s = match self.snaps.as_ref() {
            Some(s) if snap <= s.seq => s,
            _ => {
                if head {
                    out.extend_from_slice(self.range(start, end));
                }
                return;
            }
        };
        let first = s.clones.partition_point(|c| c.id < snap);
        let clones = &s.clones[first..];
        for blk in start..end {
            let mut answer = None;
            for c in clones {
                if let Some(a) = c.answer(blk) {
                    answer = Some(a);
                    break;
                }
            }
            let e = match answer {
                Some(a) => a,
                None if head => self.get(blk).copied(),
                None => None,
            };
            out.extend(e);
        }
    }
}

/// Like `ObjectMeta::set_range`, on a bare vector.
fn set_range_into(
    blocks: &mut Vec<BlockEntry>,
    start: u32,
    n: u32,
    new: impl FnMut(u32) -> BlockEntry,
    replaced: impl FnMut(BlockEntry),
) {
    let mut tmp = ObjectMeta {
        blocks: std::mem::take(blocks),
        ..Default::default()
    };
    tmp.set_range(start, n, new, replaced);
    *blocks = tmp.blocks;
}

fn remove_range_into(
    blocks: &mut Vec<BlockEntry>,
    start: u32,
    n: u32,
    removed: impl FnMut(BlockEntry),
) {
    let mut tmp = ObjectMeta {
        blocks: std::mem::take(blocks),
        ..Default::default()
    };
    tmp.remove_range(start, n, removed);
    *blocks = tmp.blocks;
}

/// Index range of the entries with `start <= blk < end`. Entries are
/// sorted and unique, so a clone dense up to `start` has it at index
/// `start` (the steady state after a full overwrite): one access each
/// instead of two binary searches.
fn bounds(entries: &[BlockEntry], start: u32, end: u32) -> (usize, usize) {
    let s = start as usize;
    let a = if entries.get(s).is_some_and(|e| e.blk == start) {
        s
    } else {
        entries[..entries.len().min(s + 1)].partition_point(|e| e.blk < start)
    };
    let n = (end - start) as usize;
    let b = if entries.get(a + n - 1).is_some_and(|e| e.blk == end - 1) {
        a + n
    } else {
        a + entries[a..].partition_point(|e| e.blk < end)
    };
    debug_assert_eq!(a, entries.partition_point(|e| e.blk < start));
    debug_assert_eq!(b, entries.partition_point(|e| e.blk < end));
    (a, b)
}

/// Moves what the head lost in `start..end` (`lost`, ascending) into
/// `clone` where it has no entry yet; with `holes`, blocks the head did not
/// have become holes there. What the clone already covers is released.
#[allow(clippy::too_many_arguments)]
fn absorb(
    clone: &mut CloneMeta,
    start: u32,
    end: u32,
    lost: &[BlockEntry],
    holes: bool,
    release: &mut impl FnMut(BlockEntry),
    moved: &mut u64,
    new_holes: &mut u64,
) {
    if start >= end {
        return;
    }
    let (a, b) = bounds(&clone.entries, start, end);
    let existing = &clone.entries[a..b];
    // Fast path: the clone already covers every block: release all.
    if existing.len() == (end - start) as usize {
        lost.iter().copied().for_each(release);
        return;
    }
    let mut mid: SmallVec<[BlockEntry; 16]> = SmallVec::with_capacity(if holes {
        (end - start) as usize
    } else {
        existing.len() + lost.len()
    });
    let (mut ei, mut li) = (0usize, 0usize);
    if holes {
        for blk in start..end {
            let have = existing.get(ei).filter(|e| e.blk == blk).copied();
            let old = lost.get(li).filter(|e| e.blk == blk).copied();
            if have.is_some() {
                ei += 1;
            }
            if old.is_some() {
                li += 1;
            }
            match (have, old) {
                (Some(h), Some(o)) => {
                    mid.push(h);
                    release(o);
                }
                (Some(h), None) => mid.push(h),
                (None, Some(o)) => {
                    mid.push(o);
                    *moved += 1;
                }
                (None, None) => {
                    mid.push(BlockEntry::hole(blk));
                    *new_holes += 1;
                }
            }
        }
    } else {
        while ei < existing.len() || li < lost.len() {
            let (e, l) = (existing.get(ei), lost.get(li));
            match (e, l) {
                (Some(x), Some(y)) if x.blk == y.blk => {
                    mid.push(*x);
                    release(*y);
                    ei += 1;
                    li += 1;
                }
                (Some(x), Some(y)) if x.blk < y.blk => {
                    mid.push(*x);
                    ei += 1;
                }
                (Some(_), Some(y)) | (None, Some(y)) => {
                    mid.push(*y);
                    *moved += 1;
                    li += 1;
                }
                (Some(x), None) => {
                    mid.push(*x);
                    ei += 1;
                }
                (None, None) => break,
            }
        }
    }
    clone.entries.splice(a..b, mid);
    debug_assert!(clone.entries.windows(2).all(|w| w[0].blk < w[1].blk));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Loc;
    use pontoon_types::mix64;

    fn full_object(blocks: u32) -> ObjectMeta {
        ObjectMeta {
            blocks: (0..blocks)
                .map(|b| BlockEntry::new(b, b, Loc::Data(u64::from(b))))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn dead_clones_are_those_whose_range_holds_no_live_snapshot() {
        let mut o = full_object(4);
        o.snaps = Some(Box::new(SnapState {
            seq: 9,
            clones: [2, 5, 9].map(|id| CloneMeta::new(id, false)).to_vec(),
            ..Default::default()
        }));
        assert_eq!(o.dead_clones(&[1, 4, 9]), Vec::<u64>::new());
        assert_eq!(o.dead_clones(&[3]), vec![2, 9]);
        assert_eq!(o.dead_clones(&[]), vec![2, 5, 9]);
        assert_eq!(o.dead_clones(&[6, 7]), vec![2, 5]);
    }

    #[test]
    fn trimming_merges_into_the_older_clone_where_it_has_nothing() {
        let mut o = full_object(0);
        let mut older = CloneMeta::new(2, false);
        older.entries = vec![BlockEntry::new(0, 0, Loc::Data(100))];
        let mut newer = CloneMeta::new(4, true);
        newer.entries = vec![
            BlockEntry::new(0, 0, Loc::Data(200)),
            BlockEntry::hole(1),
            BlockEntry::new(2, 0, Loc::Data(202)),
        ];
        o.snaps = Some(Box::new(SnapState {
            seq: 4,
            headless: true,
            clones: vec![older, newer],
            clone_blocks: 3,
            holes: 1,
        }));
        let mut freed = vec![];
        assert_eq!(o.trim_clone(4, |e| freed.push(e.loc())), After::Kept);
        assert_eq!(
            freed,
            vec![Loc::Data(200)],
            "block 0 was the older clone's already"
        );
        let s = o.snaps.as_ref().unwrap();
        assert_eq!(s.clones.len(), 1);
        assert!(s.clones[0].complete, "it read through a complete clone");
        assert_eq!((s.clone_blocks, s.holes), (2, 1));
        freed.clear();
        assert_eq!(o.trim_clone(2, |e| freed.push(e.loc())), After::Gone);
        assert_eq!(freed, vec![Loc::Data(100), Loc::Data(202)]);
    }

    /// The metadata cost of one 4 KiB overwrite, without I/O: run with
    /// `cargo test --profile ci -p pontoon-store snaps::tests::cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cost_of_an_overwrite_with_and_without_snapshots() {
        const N: u32 = 1024;
        const OPS: u64 = 2_000_000;
        for (what, clones, seq) in [
            ("no snapshot", 0u64, 0u64),
            ("1 snapshot, steady", 1, 1),
            ("10 snapshots, steady", 10, 10),
            ("first writes after a snapshot", 1, 2),
        ] {
            let mut o = full_object(N);
            if clones > 0 {
                let mut s = SnapState {
                    seq: clones,
                    ..Default::default()
                };
                for id in 1..=clones {
                    let mut c = CloneMeta::new(id, false);
                    c.entries = (0..N)
                        .map(|b| BlockEntry::new(b, 0, Loc::Data(1 << 20 | u64::from(b))))
                        .collect();
                    s.clone_blocks += u64::from(N);
                    s.clones.push(c);
                }
                o.snaps = Some(Box::new(s));
            }
            let mut x = 1u64;
            let mut next_seq = seq;
            let t0 = std::time::Instant::now();
            for i in 0..OPS {
                x = mix64(x);
                let b = (x % u64::from(N)) as u32;
                if seq > clones && i % u64::from(N) == 0 {
                    // A new snapshot every N writes: most writes transfer.
                    next_seq += 1;
                }
                o.change_head(
                    next_seq,
                    HeadChange::Write { start: b, n: 1 },
                    |_| BlockEntry::new(b, 1, Loc::Data(i)),
                    |_| {},
                );
            }
            let ns = t0.elapsed().as_nanos() as f64 / OPS as f64;
            println!("{what:>32}: {ns:.0} ns per 4 KiB overwrite");
        }
    }
}
