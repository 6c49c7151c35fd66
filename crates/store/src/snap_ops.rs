//! The store's snapshot operations: reading what a snapshot sees, listing
//! what changed between two snapshots from metadata alone, trimming removed
//! snapshots in the background, and what snapshots hold.

use std::ops::Range;

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE_U64, ObjectId, Version, VolumeId};

use crate::device::BlockDevice;
use crate::error::{Result, StoreError};
use crate::record::{Entry, EntryKind, MAX_ENTRIES};
use crate::signal::yield_now;
use crate::snaps::{CLONE_HEADER_BYTES, HOLE_BYTES, SNAP_SECTION_BYTES};
use crate::store::{Group, OpKind, ReadOutput, Store, View, WriteSpec};

/// Which layer of an object an image's extents go to.
#[derive(Clone, Copy)]
enum WriteLayer {
    Head,
    Clone(u64),
}

/// Snapshot id that views the head in [`Store::diff`] (newer than any).
pub const HEAD: u64 = u64::MAX;

/// Most clones one trim record removes (a bound on its entries).
const TRIMS_PER_RECORD: usize = MAX_ENTRIES / 2;

/// One clone of an object, as [`Store::snaps`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneInfo {
    /// Snapshot id: the clone is the object for snapshots in
    /// (previous clone's id, id].
    pub id: u64,
    /// Blocks it does not list read as zeros (the object did not exist or
    /// was deleted then), rather than as newer clones or the head.
    pub complete: bool,
    /// Data blocks it owns.
    pub blocks: u64,
    /// Blocks it records as holes.
    pub holes: u64,
}

/// An object's snapshot state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapInfo {
    /// Snapshot sequence the head was last written under.
    pub seq: u64,
    /// Whether the head exists (false: deleted, kept for its snapshots).
    pub has_head: bool,
    /// Clones, ascending by id.
    pub clones: Vec<CloneInfo>,
}

impl SnapInfo {
    /// What `s` says, with `has_head` as given (a trimmed view may differ
    /// from the stored flag).
    pub(crate) fn of(s: &crate::snaps::SnapState, has_head: bool) -> Self {
        SnapInfo {
            seq: s.seq,
            has_head,
            clones: s
                .clones
                .iter()
                .map(|c| {
                    let (blocks, holes) = c.counts();
                    CloneInfo {
                        id: c.id,
                        complete: c.complete,
                        blocks,
                        holes,
                    }
                })
                .collect(),
        }
    }
}

/// Space one snapshot id's clones hold in a volume on this slice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapUsage {
    /// The clone id (a snapshot id of the volume).
    pub id: u64,
    /// Data blocks owned by clones with this id.
    pub blocks: u64,
    /// Of those, blocks that trimming this clone alone would free (its
    /// exclusive space; the rest older snapshots still read).
    pub exclusive_blocks: u64,
}

/// What one [`Store::trim_snaps`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimProgress {
    /// Objects whose clones were trimmed.
    pub objects: u64,
    /// Clones removed.
    pub clones: u64,
    /// Data blocks freed.
    pub freed_blocks: u64,
    /// Objects with trimmable clones were left for another call (the
    /// budget ran out).
    pub more: bool,
}

/// A run of blocks that differ between two views of an object, as
/// [`Store::diff_extents`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffExtent {
    /// Byte range within the object (block aligned).
    pub range: Range<u64>,
    /// The newer view reads data here (false: zeros).
    pub data: bool,
}

/// One clone's full contents, as recovery copies it between replicas.
#[derive(Debug)]
pub struct CloneImage {
    /// Snapshot id of the clone.
    pub id: u64,
    /// Unlisted blocks are holes (see [`CloneInfo::complete`]).
    pub complete: bool,
    /// Blocks it owns: (byte offset, data), ascending and disjoint.
    pub extents: Vec<(u64, AlignedBuf)>,
    /// Byte ranges it records as holes, ascending and disjoint.
    pub holes: Vec<Range<u64>>,
}

/// An object with its snapshots, as recovery copies it: the head (if it
/// has one) and every clone.
#[derive(Debug)]
pub struct SnapImage {
    /// The object's version.
    pub version: Version,
    /// Snapshot sequence the head was last written under.
    pub seq: u64,
    /// The head's allocated extents; `None` if the head was deleted and
    /// the object lives on for its snapshots.
    pub head: Option<Vec<(u64, AlignedBuf)>>,
    /// Clones, ascending by id.
    pub clones: Vec<CloneImage>,
}

fn byte_runs(blocks: impl Iterator<Item = u32>) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for b in blocks {
        let s = u64::from(b) * BLOCK_SIZE_U64;
        match out.last_mut() {
            Some(r) if r.end == s => r.end += BLOCK_SIZE_U64,
            _ => out.push(s..s + BLOCK_SIZE_U64),
        }
    }
    out
}

impl<D: BlockDevice> Store<D> {
    /// Reads an object with all its clones (recovery's source side).
    /// `None` if the object does not exist at all. Like
    /// [`Store::read_object`] per layer; the caller keeps writes to the
    /// object out while it copies (as recovery does).
    pub async fn read_object_snaps(&self, oid: ObjectId) -> Result<Option<SnapImage>> {
        self.read_object_layers(oid, |_| true).await
    }

    /// [`Store::read_object_snaps`] with the data of the layers `pick`
    /// chooses only (0: the head, otherwise a clone's id): the others come
    /// back with their holes but no extents (a copy moved a layer at a
    /// time).
    pub async fn read_object_layers(
        &self,
        oid: ObjectId,
        pick: impl Fn(u64) -> bool,
    ) -> Result<Option<SnapImage>> {
        let (version, seq, has_head, clones, nblk) = {
            let st = self.inner.st.borrow();
            let Some(obj) = st.objects.get(&oid) else {
                return Ok(None);
            };
            let clones: Vec<(u64, bool, Vec<Range<u64>>)> = obj
                .snaps
                .iter()
                .flat_map(|s| s.clones.iter())
                .map(|c| {
                    let holes = byte_runs(c.entries.iter().filter(|e| e.is_hole()).map(|e| e.blk));
                    (c.id, c.complete, holes)
                })
                .collect();
            (
                obj.version,
                obj.seq(),
                obj.has_head(),
                clones,
                st.layout.object_blocks,
            )
        };
        let head = if !has_head {
            None
        } else if pick(0) {
            self.read_object(oid).await?.map(|i| i.extents)
        } else {
            Some(Vec::new())
        };
        let mut images = Vec::with_capacity(clones.len());
        for (id, complete, holes) in clones {
            if !pick(id) {
                images.push(CloneImage {
                    id,
                    complete,
                    extents: Vec::new(),
                    holes,
                });
                continue;
            }
            let (data, _, map) = self
                .read_blocks(oid, Some(View::Clone(id)), 0, nblk, true)
                .await?;
            let extents = map
                .into_iter()
                .map(|(s, k)| {
                    let at = s as usize * pontoon_types::BLOCK_SIZE;
                    let len = k as usize * pontoon_types::BLOCK_SIZE;
                    (
                        u64::from(s) * BLOCK_SIZE_U64,
                        AlignedBuf::copy_from(&data[at..at + len]),
                    )
                })
                .collect();
            images.push(CloneImage {
                id,
                complete,
                extents,
                holes,
            });
        }
        Ok(Some(SnapImage {
            version,
            seq,
            head,
            clones: images,
        }))
    }

    /// Atomically replaces object `oid`, head and clones, with `image`
    /// (recovery's target side): one journal record, or a chain of them
    /// that replay applies whole, so a crash leaves the old object or the
    /// new one. The chain must fit a quarter of the journal; a larger image
    /// is refused with `InvalidArgument`.
    /// The image may come from a peer: clone ids must ascend and be no
    /// newer than its sequence, a headless image's newest clone must be
    /// complete, ranges must be aligned, ordered and inside the object;
    /// anything else is refused with `InvalidArgument` and changes nothing.
    pub async fn replace_snaps(&self, oid: ObjectId, image: &SnapImage) -> Result<()> {
        let mut g = Group::default();
        g.entries
            .push(Entry::bare(EntryKind::Purge, oid, image.version));
        if image.seq == HEAD {
            return Err(StoreError::InvalidArgument(
                "an image's sequence cannot be the head's id".into(),
            ));
        }
        let mut prev = 0u64;
        for c in &image.clones {
            if c.id <= prev {
                return Err(StoreError::InvalidArgument(format!(
                    "clone ids must ascend (clone {} after {prev})",
                    c.id
                )));
            }
            if c.id > image.seq {
                return Err(StoreError::InvalidArgument(format!(
                    "clone {} is newer than the image's sequence {}",
                    c.id, image.seq
                )));
            }
            prev = c.id;
            g.entries.push(Entry {
                snap: c.id,
                start_blk: c.complete as u32,
                ..Entry::bare(EntryKind::CloneCreate, oid, image.version)
            });
        }
        if image.head.is_none() && !image.clones.last().is_some_and(|c| c.complete) {
            return Err(StoreError::InvalidArgument(
                "an image without a head needs a complete newest clone".into(),
            ));
        }
        let mut hole_blocks = 0u64;
        for c in &image.clones {
            for r in &c.holes {
                let len = r.end.checked_sub(r.start).ok_or_else(|| {
                    StoreError::InvalidArgument(format!("hole {r:?} ends before it starts"))
                })?;
                let (start, n) = self.check_range(r.start, len)?;
                hole_blocks += u64::from(n);
                g.entries.push(Entry {
                    start_blk: start,
                    nblk: n,
                    snap: c.id,
                    raw: true,
                    ..Entry::bare(EntryKind::Discard, oid, image.version)
                });
            }
        }
        if image.seq > 0 {
            g.meta_bytes = SNAP_SECTION_BYTES
                + CLONE_HEADER_BYTES * image.clones.len() as u64
                + HOLE_BYTES * hole_blocks;
        }
        // The head, or (raw Delete) its absence, at the image's sequence.
        g.entries.push(Entry {
            snap: image.seq,
            ..Entry::bare(EntryKind::Create, oid, image.version)
        });
        if image.head.is_none() {
            g.entries.push(Entry {
                raw: true,
                ..Entry::bare(EntryKind::Delete, oid, image.version)
            });
        }
        let mut layers: Vec<(WriteLayer, &[(u64, AlignedBuf)])> = image
            .clones
            .iter()
            .map(|c| (WriteLayer::Clone(c.id), &c.extents[..]))
            .collect();
        if let Some(head) = &image.head {
            layers.push((WriteLayer::Head, &head[..]));
        }
        // Every range is checked before any data is written.
        let mut checked = Vec::with_capacity(layers.len());
        for (layer, extents) in layers {
            let mut ranges: Vec<(u32, u32)> = Vec::with_capacity(extents.len());
            for (off, data) in extents {
                let r = self.check_range(*off, data.len() as u64)?;
                if ranges.last().is_some_and(|&(s, n)| s + n > r.0) {
                    return Err(StoreError::InvalidArgument(
                        "image extents overlap or are unordered".into(),
                    ));
                }
                ranges.push(r);
            }
            if !ranges.is_empty() {
                checked.push((layer, extents, ranges));
            }
        }
        for (layer, extents, ranges) in checked {
            let total = extents.iter().map(|(_, d)| d.len()).sum();
            let mut all = AlignedBuf::for_read(total);
            let mut at = 0;
            for (_, data) in extents {
                all[at..at + data.len()].copy_from_slice(data);
                at += data.len();
            }
            let crcs = crate::store::crcs_of(&all);
            let w = WriteSpec {
                oid,
                version: image.version,
                snap: match layer {
                    WriteLayer::Head => 0,
                    WriteLayer::Clone(id) => id,
                },
                raw: true,
            };
            let part = match self
                .prepare_row(w, &ranges, all, &crcs, g.entries.len())
                .await
            {
                Ok(Ok(part)) => part,
                Ok(Err(all)) => match self.inline_group(w, &ranges, all, &crcs) {
                    Ok(part) => part,
                    Err(e) => {
                        self.free_row_entries(&g);
                        return Err(e);
                    }
                },
                Err(e) => {
                    self.free_row_entries(&g);
                    return Err(e);
                }
            };
            g.append(part);
        }
        // Everything is rewritten from nothing.
        g.new_blocks = g
            .entries
            .iter()
            .filter(|e| matches!(e.kind, EntryKind::WriteInline | EntryKind::WriteRow))
            .map(|e| u64::from(e.nblk))
            .sum();
        g.new_object = self.inner.st.borrow().objects.get(&oid).is_none();
        self.submit(g).await
    }

    /// Reads `len` bytes at `offset` of `oid` as snapshot `snap` sees them
    /// (an id newer than every clone reads the head). Blocks are checked
    /// against their checksums like head reads.
    pub async fn read_snap(
        &self,
        oid: ObjectId,
        snap: u64,
        offset: u64,
        len: u64,
    ) -> Result<ReadOutput> {
        let (start, nblk) = self.check_range(offset, len)?;
        if snap == 0 {
            return Err(StoreError::InvalidArgument(
                "snapshot ids start at 1".into(),
            ));
        }
        let (data, version, _) = self
            .read_blocks(oid, Some(View::Snap(snap)), start, nblk, false)
            .await?;
        let mut st = self.inner.st.borrow_mut();
        st.counters.reads += 1;
        st.counters.user_bytes_read += len;
        Ok(ReadOutput { data, version })
    }

    /// Byte ranges of `oid` (ascending, merged) whose blocks differ
    /// between snapshot `from` (`None`: nothing, an empty object) and
    /// snapshot `to` ([`HEAD`] for the head), from metadata alone: a block
    /// differs when the two views resolve to different entries, or one to
    /// a block and the other to a hole or nothing.
    pub fn diff(&self, oid: ObjectId, from: Option<u64>, to: u64) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        for e in self.diff_extents(oid, from, to) {
            match out.last_mut() {
                Some(r) if r.end == e.range.start => r.end = e.range.end,
                _ => out.push(e.range),
            }
        }
        out
    }

    /// [`Store::diff`] with what `to` reads in each changed range: runs of
    /// blocks (ascending, disjoint, adjacent runs differ in `data`) where
    /// `to` reads a data block, or zeros (a hole or nothing). `from` may
    /// also be [`HEAD`] (what rolling the head back to `to` must change).
    pub fn diff_extents(&self, oid: ObjectId, from: Option<u64>, to: u64) -> Vec<DiffExtent> {
        let st = self.inner.st.borrow();
        let Some(obj) = st.objects.get(&oid) else {
            return Vec::new();
        };
        let n = st.layout.object_blocks;
        let view = |snap: u64| {
            let mut v = Vec::new();
            if snap == HEAD || obj.snaps.is_none() {
                if obj.has_head() {
                    v.extend_from_slice(&obj.blocks);
                }
            } else {
                obj.view_range(snap, 0, n, &mut v);
            }
            v
        };
        let b = view(to);
        let a = from.map(view).unwrap_or_default();
        let mut out: Vec<DiffExtent> = Vec::new();
        let mut push = |blk: u32, data: bool| {
            let s = u64::from(blk) * BLOCK_SIZE_U64;
            match out.last_mut() {
                Some(e) if e.range.end == s && e.data == data => e.range.end += BLOCK_SIZE_U64,
                _ => out.push(DiffExtent {
                    range: s..s + BLOCK_SIZE_U64,
                    data,
                }),
            }
        };
        // Views list data blocks only, ascending: a block `b` lacks reads
        // zeros in `to`.
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.blk == y.blk => {
                    if x != y {
                        push(y.blk, true);
                    }
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.blk < y.blk => {
                    push(x.blk, false);
                    i += 1;
                }
                (Some(_), Some(y)) | (None, Some(y)) => {
                    push(y.blk, true);
                    j += 1;
                }
                (Some(x), None) => {
                    push(x.blk, false);
                    i += 1;
                }
                (None, None) => break,
            }
        }
        out
    }

    /// The snapshot sequence `oid`'s head was last written under (0: none,
    /// or no such object).
    pub fn snap_seq_of(&self, oid: ObjectId) -> u64 {
        let st = self.inner.st.borrow();
        st.objects.get(&oid).map_or(0, |o| o.seq())
    }

    /// The object's snapshot state, if it has any.
    pub fn snaps(&self, oid: ObjectId) -> Option<SnapInfo> {
        let st = self.inner.st.borrow();
        let obj = st.objects.get(&oid)?;
        let s = obj.snaps.as_ref()?;
        Some(SnapInfo::of(s, !s.headless))
    }

    /// Space per snapshot id held by `volume`'s clones on this slice,
    /// ascending by id: one pass over the volume's objects (for `du`, not
    /// for the data path).
    pub fn snap_usage(&self, volume: VolumeId) -> Vec<SnapUsage> {
        let st = self.inner.st.borrow();
        let mut by_id: std::collections::BTreeMap<u64, SnapUsage> = Default::default();
        for (oid, obj) in &st.objects.map {
            if oid.volume != volume {
                continue;
            }
            let Some(s) = obj.snaps.as_ref() else {
                continue;
            };
            for (i, c) in s.clones.iter().enumerate() {
                let u = by_id.entry(c.id).or_insert(SnapUsage {
                    id: c.id,
                    ..Default::default()
                });
                let (blocks, freed) = s.clone_space(i);
                u.blocks += blocks;
                u.exclusive_blocks += freed;
            }
        }
        by_id.into_values().collect()
    }

    /// Removes from `volume`'s objects every clone that no live snapshot
    /// reads any more, freeing the blocks only it held, and returns what it
    /// did. `live` lists the volume's snapshot ids that still exist, read
    /// at snapshot sequence `seq`: clones newer than `seq` belong to
    /// snapshots the caller has not seen and are never trimmed.
    ///
    /// Bounded and polite: it handles at most `budget` objects (`more`
    /// says whether any are left for another call), one durable journal
    /// record per object, yielding between objects and waiting while
    /// client writes are queued. Every remaining snapshot reads exactly what
    /// it read before.
    pub async fn trim_snaps(
        &self,
        volume: VolumeId,
        live: &[u64],
        seq: u64,
        budget: usize,
    ) -> Result<TrimProgress> {
        let rule = crate::snap_space::TrimRule::new(live, seq);
        let dead_of = |obj: &crate::objects::ObjectMeta| rule.dead_clones(obj);
        let candidates: Vec<ObjectId> = {
            let st = self.inner.st.borrow();
            let mut v: Vec<ObjectId> = st
                .objects
                .map
                .iter()
                .filter(|(oid, o)| {
                    oid.volume == volume && o.snaps.is_some() && !dead_of(o).is_empty()
                })
                .map(|(oid, _)| *oid)
                .collect();
            v.sort_unstable();
            v
        };
        let mut p = TrimProgress {
            more: candidates.len() > budget,
            ..Default::default()
        };
        for oid in candidates.into_iter().take(budget) {
            // Behind client I/O: let queued writes commit first.
            loop {
                let busy = {
                    let st = self.inner.st.borrow();
                    if let Some(f) = &st.failed {
                        return Err(StoreError::Failed(f.clone()));
                    }
                    !st.batch.is_empty()
                };
                if !busy {
                    break;
                }
                self.inner.commit.wait().await;
            }
            let (dead, before) = {
                let st = self.inner.st.borrow();
                match st.objects.get(&oid) {
                    Some(o) => (dead_of(o), o.clone_blocks()),
                    None => continue,
                }
            };
            for chunk in dead.chunks(TRIMS_PER_RECORD) {
                let mut g = Group {
                    kind: OpKind::Trim,
                    ..Default::default()
                };
                let version = self
                    .inner
                    .st
                    .borrow()
                    .objects
                    .get(&oid)
                    .map(|o| o.version)
                    .unwrap_or_default();
                for &id in chunk {
                    g.entries.push(Entry {
                        snap: id,
                        ..Entry::bare(EntryKind::SnapTrim, oid, version)
                    });
                }
                self.submit(g).await?;
            }
            let after = self
                .inner
                .st
                .borrow()
                .objects
                .get(&oid)
                .map_or(0, |o| o.clone_blocks());
            p.objects += 1;
            p.clones += dead.len() as u64;
            p.freed_blocks += before.saturating_sub(after);
            yield_now().await;
        }
        Ok(p)
    }
}
