//! The public face of one store slice: object reads, writes, discards,
//! deletes and whole-object replacement, each acknowledged only once durable.

use std::cell::RefCell;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Instant;

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, BLOCK_SIZE_U64, ObjectId, Version, VolumeId};
use smallvec::SmallVec;

use crate::device::BlockDevice;
use crate::error::{Result, StoreError};
use crate::layout::{CKPT_BLOCK_BYTES, CKPT_OBJECT_BYTES, SliceLayout};
use crate::objects::{Loc, MAX_RECORD_BUFS};
use crate::record::{self, Entry, EntryKind, MAX_ENTRIES, MAX_ENTRY_BYTES};
use crate::signal::Signal;
use crate::snaps::{CLONE_HEADER_BYTES, HOLE_BYTES, SNAP_SECTION_BYTES};
use crate::state::State;
use crate::stats::{LatencySummary, StoreStats, VolumeUsage};

/// Writes of more blocks than this are redirect-on-write; smaller ones go
/// through the journal.
pub(crate) const ROW_THRESHOLD_BLOCKS: u32 = 16;
/// A batch stops growing at this many inline data blocks (1 MiB).
pub(crate) const BATCH_DATA_BLOCKS: u32 = 256;

/// The store's background work (group commit and flushing); spawn it on the
/// slice's runtime. It ends after [`Store::close`].
pub type BackgroundTask = Pin<Box<dyn Future<Output = ()>>>;

/// What a read returns: the bytes (zeros for unallocated blocks) and the
/// object's version at the time of the read.
#[derive(Debug)]
pub struct ReadOutput {
    /// The requested bytes.
    pub data: AlignedBuf,
    /// Version of the object (`Version::ZERO` if it does not exist).
    pub version: Version,
}

/// An object's full contents, as recovery copies it between replicas.
#[derive(Debug)]
pub struct ObjectImage {
    /// The object's version.
    pub version: Version,
    /// Allocated extents: (byte offset, data), ascending and disjoint.
    pub extents: Vec<(u64, AlignedBuf)>,
}

pub(crate) struct Inner<D> {
    pub dev: D,
    pub jdev: Option<D>,
    pub st: RefCell<State>,
    /// The open batch gained entries, or the store is closing.
    pub work: Signal,
    /// The committer took a batch: there is room for more.
    pub room: Signal,
    /// A batch was committed, or the store failed.
    pub commit: Signal,
    /// Journal space was freed.
    pub space: Signal,
    /// The flusher should look at the journal.
    pub kick: Signal,
    /// Background work ended.
    pub done: Signal,
}

impl<D: BlockDevice> Inner<D> {
    pub(crate) fn journal_dev(&self) -> &D {
        self.jdev.as_ref().unwrap_or(&self.dev)
    }

    pub(crate) fn fail(&self, why: String) {
        let mut st = self.st.borrow_mut();
        if st.failed.is_none() {
            tracing::error!(slice = st.layout.slice, "store slice failed: {why}");
            st.failed = Some(why);
        }
        drop(st);
        self.commit.notify();
        self.room.notify();
        self.space.notify();
    }
}

/// One store slice: the engine for one shard's part of a device.
///
/// Cheap to clone (a reference-counted handle); not `Send`: a slice lives on
/// its shard's thread.
pub struct Store<D: BlockDevice> {
    pub(crate) inner: Rc<Inner<D>>,
}

impl<D: BlockDevice> Clone for Store<D> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

/// What a read sees of an object besides its head.
#[derive(Clone, Copy, Debug)]
pub(crate) enum View {
    /// What snapshot id `.0` sees.
    Snap(u64),
    /// Exactly the blocks clone `.0` owns (recovery images).
    Clone(u64),
}

/// Whose data a group of writes carries, and under which rules.
#[derive(Clone, Copy)]
pub(crate) struct WriteSpec {
    pub oid: ObjectId,
    pub version: Version,
    /// Snapshot sequence (normal writes) or clone id (raw writes).
    pub snap: u64,
    /// Outside the snapshot rules (recovery installs).
    pub raw: bool,
}

/// Writes that must land in one journal record.
#[derive(Default)]
pub(crate) struct Group {
    pub entries: SmallVec<[Entry; 2]>,
    pub crcs: SmallVec<[u32; 16]>,
    pub bufs: SmallVec<[AlignedBuf; 1]>,
    pub data_blocks: u32,
    pub new_blocks: u64,
    pub new_object: bool,
    /// Checkpoint bytes of snapshot metadata the group may add.
    pub meta_bytes: u64,
    pub row: bool,
    pub user_bytes: u64,
    pub kind: OpKind,
}

#[derive(Default, Clone, Copy, PartialEq)]
pub(crate) enum OpKind {
    #[default]
    Write,
    Discard,
    Delete,
    /// Snapshot trimming (background work, not counted as client ops).
    Trim,
}

/// Outcome of offering a group to the open batch.
enum Enqueue {
    Queued(u64),
    Full,
    Refused(StoreError),
}

impl Group {
    /// Adds `g`'s entries and data after this group's (one record).
    pub(crate) fn append(&mut self, mut g: Group) {
        let (crc_base, buf_base) = (self.crcs.len() as u32, self.bufs.len() as u32);
        for mut e in g.entries.drain(..) {
            e.crc_off += crc_base;
            if e.kind == EntryKind::WriteInline {
                e.buf += buf_base;
            }
            self.entries.push(e);
        }
        self.crcs.extend_from_slice(&g.crcs);
        self.bufs.extend(g.bufs.drain(..));
        self.data_blocks += g.data_blocks;
        self.new_blocks += g.new_blocks;
        self.new_object |= g.new_object;
        self.row |= g.row;
    }

    fn entry_bytes(&self) -> usize {
        self.entries.iter().map(Entry::encoded_len).sum()
    }
}

/// The row entries of write `w` mapping `ranges` (in order, laid end to
/// end) onto `runs` (allocated in order), split where either ends.
fn row_entries(w: WriteSpec, ranges: &[(u32, u32)], runs: &[(u64, u32)], g: &mut Group) {
    let mut run_i = 0;
    let mut run_used = 0u32;
    let mut crc_off = 0u32;
    for &(start, n) in ranges {
        let mut done = 0u32;
        while done < n {
            let (pblk, rlen) = runs[run_i];
            let take = (n - done).min(rlen - run_used);
            g.entries.push(Entry {
                start_blk: start + done,
                nblk: take,
                loc: pblk + run_used as u64,
                crc_off,
                snap: w.snap,
                raw: w.raw,
                ..Entry::bare(EntryKind::WriteRow, w.oid, w.version)
            });
            done += take;
            run_used += take;
            crc_off += take;
            if run_used == rlen {
                run_i += 1;
                run_used = 0;
            }
        }
    }
}

pub(crate) fn crcs_of(data: &[u8]) -> SmallVec<[u32; 16]> {
    data.chunks_exact(BLOCK_SIZE).map(crc32c::crc32c).collect()
}

impl<D: BlockDevice> Store<D> {
    /// The slice's layout on the device.
    pub fn layout(&self) -> SliceLayout {
        self.inner.st.borrow().layout.clone()
    }

    /// Largest object in bytes.
    pub fn object_size(&self) -> u64 {
        self.inner.st.borrow().layout.object_blocks as u64 * BLOCK_SIZE_U64
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<(u32, u32)> {
        let osize = self.object_size();
        if !offset.is_multiple_of(BLOCK_SIZE_U64) || !len.is_multiple_of(BLOCK_SIZE_U64) {
            return Err(StoreError::InvalidArgument(format!(
                "offset {offset} and length {len} must be multiples of 4096"
            )));
        }
        if len == 0 {
            return Err(StoreError::InvalidArgument("zero-length request".into()));
        }
        if offset.checked_add(len).is_none_or(|end| end > osize) {
            return Err(StoreError::InvalidArgument(format!(
                "range {offset}+{len} exceeds the object size {osize}"
            )));
        }
        Ok((
            (offset / BLOCK_SIZE_U64) as u32,
            (len / BLOCK_SIZE_U64) as u32,
        ))
    }

    /// Writes `data` at `offset` in object `oid` and sets its version.
    /// Returns once the write is durable. `offset` and `data.len()` must be
    /// multiples of 4 KiB and stay inside the object. The same as
    /// [`Store::write_snap`] with snapshot sequence 0.
    pub async fn write(
        &self,
        oid: ObjectId,
        offset: u64,
        data: AlignedBuf,
        version: Version,
    ) -> Result<()> {
        self.write_snap(oid, offset, data, version, 0).await
    }

    /// [`Store::write`] issued under the volume's snapshot sequence
    /// `snap_seq` (the newest snapshot id when the client issued it; 0 for
    /// none): blocks it replaces that a snapshot still reads are kept for
    /// the snapshot, not freed (see the `snaps` module).
    pub async fn write_snap(
        &self,
        oid: ObjectId,
        offset: u64,
        data: AlignedBuf,
        version: Version,
        snap_seq: u64,
    ) -> Result<()> {
        let t0 = Instant::now();
        let (start, nblk) = self.check_range(offset, data.len() as u64)?;
        let crcs = crcs_of(&data);
        let user_bytes = data.len() as u64;
        let w = WriteSpec {
            oid,
            version,
            snap: snap_seq,
            raw: false,
        };
        let mut g = if nblk > ROW_THRESHOLD_BLOCKS {
            match self
                .prepare_row(w, &[(start, nblk)], data, &crcs, 0)
                .await?
            {
                Ok(g) => g,
                Err(data) => self.inline_group(w, &[(start, nblk)], data, &crcs)?,
            }
        } else {
            self.inline_group(w, &[(start, nblk)], data, &crcs)?
        };
        g.user_bytes = user_bytes;
        self.reserve_for_snapshots(&mut g, oid, snap_seq, &[(start, nblk)], true);
        self.submit(g).await?;
        let mut st = self.inner.st.borrow_mut();
        st.counters.writes += 1;
        st.counters.user_bytes_written += user_bytes;
        let _ = st.counters.write_lat.record(t0.elapsed().as_nanos() as u64);
        Ok(())
    }

    /// Convenience for [`Store::write`] with a borrowed slice (copied once).
    pub async fn write_slice(
        &self,
        oid: ObjectId,
        offset: u64,
        data: &[u8],
        version: Version,
    ) -> Result<()> {
        self.write(oid, offset, AlignedBuf::copy_from(data), version)
            .await
    }

    /// Deallocates `len` bytes at `offset` of `oid` (they read as zeros) and
    /// sets its version. A missing object stays missing.
    pub async fn discard(
        &self,
        oid: ObjectId,
        offset: u64,
        len: u64,
        version: Version,
    ) -> Result<()> {
        self.discard_snap(oid, offset, len, version, 0).await
    }

    /// [`Store::discard`] under snapshot sequence `snap_seq`: discarded
    /// blocks a snapshot still reads are kept for it.
    pub async fn discard_snap(
        &self,
        oid: ObjectId,
        offset: u64,
        len: u64,
        version: Version,
        snap_seq: u64,
    ) -> Result<()> {
        let (start, nblk) = self.check_range(offset, len)?;
        let mut g = Group {
            kind: OpKind::Discard,
            ..Default::default()
        };
        g.entries.push(Entry {
            start_blk: start,
            nblk,
            snap: snap_seq,
            ..Entry::bare(EntryKind::Discard, oid, version)
        });
        self.reserve_for_snapshots(&mut g, oid, snap_seq, &[(start, nblk)], false);
        self.submit(g).await
    }

    /// Removes object `oid` and frees its blocks.
    pub async fn delete(&self, oid: ObjectId, version: Version) -> Result<()> {
        self.delete_snap(oid, version, 0).await
    }

    /// Removes the head of object `oid` under snapshot sequence `snap_seq`.
    /// Blocks that snapshots still read stay with them: the object then
    /// lives on without a head (reads of the head, `version`, `list` and
    /// `read_object` see no object; snapshot reads, `diff` and `snaps` see
    /// the clones) until trimming removes its last clone. A later write
    /// creates a new head; snapshots taken before it read zeros there.
    pub async fn delete_snap(&self, oid: ObjectId, version: Version, snap_seq: u64) -> Result<()> {
        let mut g = Group {
            kind: OpKind::Delete,
            ..Default::default()
        };
        g.entries.push(Entry {
            snap: snap_seq,
            ..Entry::bare(EntryKind::Delete, oid, version)
        });
        self.reserve_for_snapshots(&mut g, oid, snap_seq, &[], false);
        self.submit(g).await
    }

    /// Removes object `oid` entirely, head and every clone, and frees all
    /// its blocks: for copies nobody reads any more (a removed volume's, a
    /// stray's). Unlike [`Store::delete_snap`] it keeps nothing for
    /// snapshots. Durable when it returns; an absent object is no error.
    pub async fn purge(&self, oid: ObjectId, version: Version) -> Result<()> {
        let mut g = Group {
            kind: OpKind::Delete,
            ..Default::default()
        };
        g.entries.push(Entry::bare(EntryKind::Purge, oid, version));
        self.submit(g).await
    }

    /// Adds to `g`'s reservation what the snapshot rules may keep: for a
    /// write (`holes`), head blocks in `ranges` that move into a clone
    /// instead of being freed (they stay allocated while the new data takes
    /// new blocks); for any change, the checkpoint room of a new clone and
    /// its holes.
    fn reserve_for_snapshots(
        &self,
        g: &mut Group,
        oid: ObjectId,
        snap: u64,
        ranges: &[(u32, u32)],
        holes: bool,
    ) {
        let st = self.inner.st.borrow();
        let Some(obj) = st.objects.get(&oid) else {
            if snap > 0 {
                g.meta_bytes += SNAP_SECTION_BYTES + CLONE_HEADER_BYTES;
            }
            return;
        };
        if obj.snaps.is_none() && snap == 0 {
            return;
        }
        // A writer behind the object's sequence may still land after a
        // newer clone opens: count every head block then.
        let opens = snap != obj.seq();
        let target_open = opens
            || obj
                .snaps
                .as_ref()
                .and_then(|s| s.clones.last())
                .is_some_and(|c| !c.complete);
        if !target_open {
            return;
        }
        let newest = obj.snaps.as_ref().and_then(|s| s.clones.last());
        let lacks = |b: u32| opens || newest.is_none_or(|c| c.get(b).is_none());
        // Discards and deletes move blocks into a clone but allocate
        // nothing; only writes keep old blocks beside new ones.
        let mut keep = 0u64;
        let mut hole_count = 0u64;
        if holes {
            for &(start, n) in ranges {
                for e in obj.range(start, start + n) {
                    keep += lacks(e.blk) as u64;
                }
                hole_count += u64::from(obj.missing_in(start, start + n));
            }
        }
        let meta = CLONE_HEADER_BYTES * opens as u64
            + SNAP_SECTION_BYTES * obj.snaps.is_none() as u64
            + HOLE_BYTES * hole_count;
        g.new_blocks += keep;
        g.meta_bytes += meta;
    }

    /// Atomically replaces object `oid` with exactly `extents` (byte offset,
    /// data) at `version`: what recovery uses to install an authoritative copy.
    /// Extents must be 4 KiB aligned, ascending and disjoint.
    pub async fn replace(
        &self,
        oid: ObjectId,
        version: Version,
        extents: &[(u64, AlignedBuf)],
    ) -> Result<()> {
        let mut ranges: SmallVec<[(u32, u32); 8]> = SmallVec::new();
        let mut total = 0usize;
        for (off, data) in extents {
            let r = self.check_range(*off, data.len() as u64)?;
            if ranges.last().is_some_and(|&(s, n)| s + n > r.0) {
                return Err(StoreError::InvalidArgument(
                    "replace extents overlap or are unordered".into(),
                ));
            }
            ranges.push(r);
            total += data.len();
        }
        let mut all = AlignedBuf::for_read(total);
        let mut at = 0;
        for (_, data) in extents {
            all[at..at + data.len()].copy_from_slice(data);
            at += data.len();
        }
        let crcs = crcs_of(&all);
        let w = WriteSpec {
            oid,
            version,
            snap: 0,
            raw: true,
        };
        let mut g = if ranges.is_empty() {
            Group::default()
        } else if total / BLOCK_SIZE > ROW_THRESHOLD_BLOCKS as usize {
            // Delete and Create entries join the group below.
            match self.prepare_row(w, &ranges, all, &crcs, 2).await? {
                Ok(g) => g,
                Err(all) => self.inline_group(w, &ranges, all, &crcs)?,
            }
        } else {
            self.inline_group(w, &ranges, all, &crcs)?
        };
        // The head is replaced outside the snapshot rules: it is the same
        // logical object, installed from another replica; clones stay.
        for (i, kind) in [EntryKind::Delete, EntryKind::Create]
            .into_iter()
            .enumerate()
        {
            let e = Entry {
                raw: true,
                ..Entry::bare(kind, oid, version)
            };
            g.entries.insert(i, e);
        }
        // The object is rewritten from nothing: every block counts as new.
        g.new_blocks = (total / BLOCK_SIZE) as u64;
        g.new_object = self.inner.st.borrow().objects.get(&oid).is_none();
        self.submit(g).await
    }

    /// Builds a group whose data goes inline in the journal record.
    pub(crate) fn inline_group(
        &self,
        w: WriteSpec,
        ranges: &[(u32, u32)],
        data: AlignedBuf,
        crcs: &[u32],
    ) -> Result<Group> {
        let nblk: u32 = ranges.iter().map(|r| r.1).sum();
        let max_inline = {
            let st = self.inner.st.borrow();
            (st.journal.blocks / 4).min(4096) as u32
        };
        if nblk > max_inline {
            return Err(StoreError::NoSpace(format!(
                "no contiguous room for a {nblk}-block write and it is too large for the journal"
            )));
        }
        let mut g = Group::default();
        let mut first = 0u32;
        for &(start, n) in ranges {
            g.entries.push(Entry {
                start_blk: start,
                nblk: n,
                loc: first as u64,
                crc_off: first,
                snap: w.snap,
                raw: w.raw,
                ..Entry::bare(EntryKind::WriteInline, w.oid, w.version)
            });
            first += n;
        }
        g.crcs.extend_from_slice(crcs);
        g.bufs.push(data);
        g.data_blocks = nblk;
        let st = self.inner.st.borrow();
        g.new_blocks = ranges
            .iter()
            .map(|&(s, n)| st.objects.missing(&w.oid, s, n) as u64)
            .sum();
        g.new_object = st.objects.get(&w.oid).is_none();
        Ok(g)
    }

    /// Allocates fresh blocks, writes `data` there and builds the metadata
    /// group pointing at them. Gives the data back if there is no room for
    /// a redirect, or if the free space is so fragmented that the group
    /// (with `extra` more entries the caller adds, of no data) would fit
    /// neither one journal record nor a chain of them: the caller then
    /// journals the data instead.
    pub(crate) async fn prepare_row(
        &self,
        w: WriteSpec,
        ranges: &[(u32, u32)],
        data: AlignedBuf,
        crcs: &[u32],
        extra: usize,
    ) -> Result<Result<Group, AlignedBuf>> {
        let nblk: u32 = ranges.iter().map(|r| r.1).sum();
        let mut runs: SmallVec<[(u64, u32); 4]> = SmallVec::new();
        let mut g = Group {
            row: true,
            ..Default::default()
        };
        let data_start = {
            let mut st = self.inner.st.borrow_mut();
            if let Some(f) = &st.failed {
                return Err(StoreError::Failed(f.clone()));
            }
            g.new_object = st.objects.get(&w.oid).is_none();
            if st.free_blocks() < nblk as u64 {
                return Ok(Err(data));
            }
            let mut v = Vec::new();
            if !st.alloc.alloc(nblk, &mut v) {
                return Ok(Err(data));
            }
            runs.extend(v);
            row_entries(w, ranges, &runs, &mut g);
            // One entry per piece of a range within a run: fragmented free
            // space (after a restart the allocator starts over at the
            // holes) can make them too many for a record, and then for a
            // chain of records of a quarter of the journal.
            let bytes =
                g.entry_bytes() + extra * Entry::encoded_len_of(EntryKind::Discard, 0, true);
            let fits = record::fits_one_record(g.entries.len() + extra, bytes)
                || record::chain_cuts(&g.entries).1 + record::MAX_HEADER_BLOCKS as u64
                    <= st.journal.blocks / 4;
            if !fits {
                for &(p, n) in &runs {
                    (p..p + n as u64).for_each(|b| st.alloc.free(b));
                }
                return Ok(Err(data));
            }
            st.layout.data_start
        };
        let mut data = data;
        let mut at = 0usize;
        for &(pblk, n) in &runs {
            let len = n as usize * BLOCK_SIZE;
            let (r, d) = self
                .inner
                .dev
                .write_at(
                    data,
                    at..at + len,
                    (data_start + pblk) * BLOCK_SIZE_U64,
                    false,
                )
                .await;
            data = d;
            if let Err(e) = r {
                self.free_runs(&runs);
                let err = StoreError::io("writing redirected data", e);
                self.inner.fail(err.to_string());
                return Err(err);
            }
            at += len;
        }
        {
            let mut st = self.inner.st.borrow_mut();
            st.counters.row_bytes += data.len() as u64;
        }
        g.crcs.extend_from_slice(crcs);
        Ok(Ok(g))
    }

    fn free_runs(&self, runs: &[(u64, u32)]) {
        let mut st = self.inner.st.borrow_mut();
        for &(p, n) in runs {
            (p..p + n as u64).for_each(|b| st.alloc.free(b));
        }
    }

    /// Adds a group to the open batch and waits until it is durable.
    pub(crate) async fn submit(&self, mut g: Group) -> Result<()> {
        let ticket = loop {
            let step = self.try_enqueue(&mut g);
            match step {
                Enqueue::Queued(ticket) => break ticket,
                Enqueue::Full => self.inner.room.wait().await,
                Enqueue::Refused(e) => {
                    if g.row {
                        self.free_row_entries(&g);
                    }
                    return Err(e);
                }
            }
        };
        self.inner.work.notify();
        self.wait_commit(ticket).await
    }

    /// Adds the group to the open batch if it is admissible and fits.
    fn try_enqueue(&self, g: &mut Group) -> Enqueue {
        {
            let mut st = self.inner.st.borrow_mut();
            let refuse = if let Some(f) = &st.failed {
                Some(StoreError::Failed(f.clone()))
            } else if st.closing {
                Some(StoreError::Closed)
            } else if g.new_blocks > st.free_blocks() {
                Some(StoreError::NoSpace(format!(
                    "{} new blocks requested, {} free",
                    g.new_blocks,
                    st.free_blocks()
                )))
            } else if g.new_object
                && st.objects.len() as u64 + st.reserved_objects >= st.max_objects()
            {
                Some(StoreError::NoSpace(format!(
                    "object table full ({} objects)",
                    st.max_objects()
                )))
            } else if st.checkpoint_bound()
                + CKPT_BLOCK_BYTES * g.new_blocks
                + CKPT_OBJECT_BYTES * g.new_object as u64
                + g.meta_bytes
                > st.checkpoint_capacity()
            {
                // Only snapshot metadata can get here: without it the slot
                // holds a header per object and an entry per block.
                Some(StoreError::NoSpace(format!(
                    "the checkpoint slot is full ({} bytes, of which snapshot metadata {}): \
                     trim snapshots",
                    st.checkpoint_capacity(),
                    st.objects.snap_meta_bytes()
                )))
            } else {
                None
            };
            if let Some(e) = refuse {
                return Enqueue::Refused(e);
            }
            let b = &st.batch;
            let fits = !b.chained
                && b.entries.len() + g.entries.len() <= MAX_ENTRIES
                && b.entry_bytes + g.entry_bytes() <= MAX_ENTRY_BYTES
                && b.bufs.len() + g.bufs.len() <= MAX_RECORD_BUFS
                && (b.is_empty() || b.data_blocks + g.data_blocks <= BATCH_DATA_BLOCKS);
            let chained = !fits && b.is_empty();
            if chained {
                // Too large for one record: it goes alone, as a chain of
                // records, if the chain fits a quarter of the journal.
                let (_, header_blocks) = record::chain_cuts(&g.entries);
                let blocks = header_blocks + u64::from(g.data_blocks);
                if blocks > st.journal.blocks / 4 {
                    return Enqueue::Refused(StoreError::InvalidArgument(format!(
                        "{} extents ({} bytes of entries, {} blocks of data) need {blocks} \
                         journal blocks, more than a quarter of the journal ({} blocks)",
                        g.entries.len(),
                        g.entry_bytes(),
                        g.data_blocks,
                        st.journal.blocks
                    )));
                }
            } else if !fits {
                return Enqueue::Full;
            }
            let st = &mut *st;
            let b = &mut st.batch;
            b.chained = chained;
            let crc_base = b.crcs.len() as u32;
            let buf_base = b.bufs.len() as u32;
            for mut e in g.entries.drain(..) {
                e.crc_off += crc_base;
                if e.kind == EntryKind::WriteInline {
                    e.buf += buf_base;
                }
                b.entry_bytes += e.encoded_len();
                b.entries.push(e);
            }
            b.crcs.extend_from_slice(&g.crcs);
            b.bufs.extend(g.bufs.drain(..));
            b.data_blocks += g.data_blocks;
            b.needs_flush |= g.row;
            b.reserved_blocks += g.new_blocks;
            b.reserved_objects += g.new_object as u64;
            b.reserved_meta += g.meta_bytes;
            b.user_bytes += g.user_bytes;
            b.ops += 1;
            st.reserved_blocks += g.new_blocks;
            st.reserved_objects += g.new_object as u64;
            st.reserved_meta += g.meta_bytes;
            match g.kind {
                OpKind::Discard => st.counters.discards += 1,
                OpKind::Delete => st.counters.deletes += 1,
                OpKind::Write | OpKind::Trim => {}
            }
            Enqueue::Queued(st.open_batch)
        }
    }

    pub(crate) fn free_row_entries(&self, g: &Group) {
        let runs: SmallVec<[(u64, u32); 4]> = g
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::WriteRow)
            .map(|e| (e.loc, e.nblk))
            .collect();
        self.free_runs(&runs);
    }

    async fn wait_commit(&self, ticket: u64) -> Result<()> {
        loop {
            {
                let st = self.inner.st.borrow();
                if st.committed >= ticket {
                    return Ok(());
                }
                if let Some(f) = &st.failed {
                    return Err(StoreError::Failed(f.clone()));
                }
            }
            self.inner.commit.wait().await;
        }
    }

    /// Reads `len` bytes at `offset` of `oid`. Unallocated blocks read as
    /// zeros. Every block is checked against its checksum.
    pub async fn read(&self, oid: ObjectId, offset: u64, len: u64) -> Result<ReadOutput> {
        let t0 = Instant::now();
        let (start, nblk) = self.check_range(offset, len)?;
        let (data, version, _) = self.read_blocks(oid, None, start, nblk, false).await?;
        let mut st = self.inner.st.borrow_mut();
        st.counters.reads += 1;
        st.counters.user_bytes_read += len;
        let _ = st.counters.read_lat.record(t0.elapsed().as_nanos() as u64);
        Ok(ReadOutput { data, version })
    }

    /// Reads blocks `start..start+nblk`; with `want_map`, also returns the
    /// allocated runs as seen by the same snapshot.
    pub(crate) async fn read_blocks(
        &self,
        oid: ObjectId,
        view: Option<View>,
        start: u32,
        nblk: u32,
        want_map: bool,
    ) -> Result<(AlignedBuf, Version, Vec<(u32, u32)>)> {
        let mut out = AlignedBuf::for_read(nblk as usize * BLOCK_SIZE);
        let mut plan: SmallVec<[(u32, u64, u32); 8]> = SmallVec::new();
        let mut map = Vec::new();
        let (version, ticket, data_start) = {
            let st = &mut *self.inner.st.borrow_mut();
            let Some(obj) = st
                .objects
                .get(&oid)
                .filter(|o| view.is_some() || o.has_head())
            else {
                out.fill(0);
                return Ok((out, Version::ZERO, map));
            };
            let mut resolved = Vec::new();
            let entries = match view {
                Some(View::Snap(snap)) if obj.snaps.is_some() => {
                    obj.view_range(snap, start, start + nblk, &mut resolved);
                    &resolved[..]
                }
                Some(View::Clone(id)) => {
                    let clone = obj.snaps.as_ref().and_then(|s| {
                        s.clones
                            .binary_search_by_key(&id, |c| c.id)
                            .ok()
                            .map(|i| &s.clones[i])
                    });
                    resolved.extend(clone.into_iter().flat_map(|c| {
                        c.entries
                            .iter()
                            .filter(|e| !e.is_hole() && e.blk >= start && e.blk < start + nblk)
                            .copied()
                    }));
                    &resolved[..]
                }
                _ => obj.range(start, start + nblk),
            };
            let mut cursor = start;
            for e in entries {
                let at = (e.blk - start) as usize * BLOCK_SIZE;
                out[(cursor - start) as usize * BLOCK_SIZE..at].fill(0);
                if want_map {
                    match map.last_mut() {
                        Some((s, n)) if *s + *n == e.blk => *n += 1,
                        _ => map.push((e.blk, 1)),
                    }
                }
                match e.loc() {
                    Loc::Journal { recno, buf, off } => {
                        let rec = st
                            .journal
                            .rec(recno)
                            .expect("block points at a trimmed journal record");
                        let src = rec.block(buf, off);
                        let found = crc32c::crc32c(src);
                        if found != e.crc {
                            st.counters.checksum_errors += 1;
                            return Err(StoreError::Checksum {
                                oid,
                                block: e.blk,
                                device_block: u64::MAX,
                                expected: e.crc,
                                found,
                            });
                        }
                        out[at..at + BLOCK_SIZE].copy_from_slice(src);
                    }
                    Loc::Data(p) => plan.push((e.blk, p, e.crc)),
                }
                cursor = e.blk + 1;
            }
            out[(cursor - start) as usize * BLOCK_SIZE..].fill(0);
            let ticket = (!plan.is_empty()).then(|| st.reclaim.enter());
            (obj.version, ticket, st.layout.data_start)
        };
        let Some(ticket) = ticket else {
            return Ok((out, version, map));
        };
        // Coalesce blocks adjacent both in the object and on the device.
        let mut reads: SmallVec<[(Range<usize>, u64); 4]> = SmallVec::new();
        for &(blk, p, _) in &plan {
            let at = (blk - start) as usize * BLOCK_SIZE;
            match reads.last_mut() {
                Some((r, pos))
                    if r.end == at
                        && *pos + r.len() as u64 == (data_start + p) * BLOCK_SIZE_U64 =>
                {
                    r.end += BLOCK_SIZE;
                }
                _ => reads.push((at..at + BLOCK_SIZE, (data_start + p) * BLOCK_SIZE_U64)),
            }
        }
        let (res, out) = self.inner.dev.read_scattered(out, &reads).await;
        {
            let st = &mut *self.inner.st.borrow_mut();
            st.reclaim.exit(ticket, &mut st.alloc);
        }
        res.map_err(|e| StoreError::io("reading data blocks", e))?;
        for &(blk, p, crc) in &plan {
            let at = (blk - start) as usize * BLOCK_SIZE;
            let found = crc32c::crc32c(&out[at..at + BLOCK_SIZE]);
            if found != crc {
                self.inner.st.borrow_mut().counters.checksum_errors += 1;
                return Err(StoreError::Checksum {
                    oid,
                    block: blk,
                    device_block: p,
                    expected: crc,
                    found,
                });
            }
        }
        Ok((out, version, map))
    }

    /// Reads a whole object as its allocated extents, from one consistent
    /// snapshot. `None` if the object does not exist.
    pub async fn read_object(&self, oid: ObjectId) -> Result<Option<ObjectImage>> {
        let span = {
            let st = self.inner.st.borrow();
            match st.objects.get(&oid).filter(|o| o.has_head()) {
                None => return Ok(None),
                Some(o) => match (o.blocks.first(), o.blocks.last()) {
                    (Some(a), Some(b)) => Some((a.blk, b.blk + 1 - a.blk)),
                    _ => None,
                },
            }
        };
        let Some((start, n)) = span else {
            let version = self.version(oid).unwrap_or(Version::ZERO);
            return Ok(Some(ObjectImage {
                version,
                extents: Vec::new(),
            }));
        };
        let (data, version, map) = self.read_blocks(oid, None, start, n, true).await?;
        let extents = map
            .into_iter()
            .map(|(s, k)| {
                let at = (s - start) as usize * BLOCK_SIZE;
                let buf = AlignedBuf::copy_from(&data[at..at + k as usize * BLOCK_SIZE]);
                (s as u64 * BLOCK_SIZE_U64, buf)
            })
            .collect();
        Ok(Some(ObjectImage { version, extents }))
    }

    /// The object's version, if it exists (has a head).
    pub fn version(&self, oid: ObjectId) -> Option<Version> {
        self.inner
            .st
            .borrow()
            .objects
            .get(&oid)
            .filter(|o| o.has_head())
            .map(|o| o.version)
    }

    /// The object's version if the store holds anything of it: its head,
    /// or (head deleted) clones that snapshots still read.
    pub fn held_version(&self, oid: ObjectId) -> Option<Version> {
        self.inner.st.borrow().objects.get(&oid).map(|o| o.version)
    }

    /// Allocated byte ranges of the object (ascending, merged).
    pub fn allocated(&self, oid: ObjectId) -> Vec<Range<u64>> {
        let st = self.inner.st.borrow();
        let mut out: Vec<Range<u64>> = Vec::new();
        if let Some(o) = st.objects.get(&oid) {
            for b in &o.blocks {
                let s = b.blk as u64 * BLOCK_SIZE_U64;
                match out.last_mut() {
                    Some(r) if r.end == s => r.end += BLOCK_SIZE_U64,
                    _ => out.push(s..s + BLOCK_SIZE_U64),
                }
            }
        }
        out
    }

    /// Every object with its version, sorted by id.
    pub fn list(&self) -> Vec<(ObjectId, Version)> {
        self.list_where(|_| true)
    }

    /// The objects `keep` accepts, with their versions, sorted by id. One
    /// pass over the table; only what is kept is copied and sorted (a PG's
    /// share, when peering lists a PG on a store holding many).
    pub fn list_where(&self, keep: impl Fn(ObjectId) -> bool) -> Vec<(ObjectId, Version)> {
        self.list_filtered(true, keep)
    }

    /// Like [`Store::list_where`], with the objects that live on only for
    /// their snapshots (head deleted) too: everything this store holds of
    /// the objects, as peering and reclaim must see it.
    pub fn list_held_where(&self, keep: impl Fn(ObjectId) -> bool) -> Vec<(ObjectId, Version)> {
        self.list_filtered(false, keep)
    }

    fn list_filtered(
        &self,
        heads_only: bool,
        keep: impl Fn(ObjectId) -> bool,
    ) -> Vec<(ObjectId, Version)> {
        let st = self.inner.st.borrow();
        let mut v: Vec<_> = st
            .objects
            .map
            .iter()
            .filter(|(k, o)| (o.has_head() || !heads_only) && keep(**k))
            .map(|(k, o)| (*k, o.version))
            .collect();
        v.sort_unstable();
        v
    }

    /// Waits until every write submitted before this call is durable.
    /// (Every acknowledged write already is; this covers writes in flight.)
    pub async fn flush(&self) -> Result<()> {
        let ticket = {
            let st = self.inner.st.borrow();
            if st.batch.is_empty() {
                st.open_batch.saturating_sub(1)
            } else {
                st.open_batch
            }
        };
        self.wait_commit(ticket).await
    }

    /// Moves all journaled data home, writes a checkpoint and trims the
    /// journal; returns when done. Normally the flusher does this by itself.
    pub async fn checkpoint(&self) -> Result<()> {
        let target = {
            let mut st = self.inner.st.borrow_mut();
            st.force_checkpoint = true;
            st.ckpt_gen + 1
        };
        self.inner.kick.notify();
        loop {
            {
                let st = self.inner.st.borrow();
                if st.ckpt_gen >= target {
                    return Ok(());
                }
                if let Some(f) = &st.failed {
                    return Err(StoreError::Failed(f.clone()));
                }
                if st.closed {
                    return Err(StoreError::Closed);
                }
            }
            self.inner.space.wait().await;
        }
    }

    /// Why the store stopped accepting writes (a device write failed), if
    /// it did. It stays so until reopened.
    pub fn failure(&self) -> Option<String> {
        self.inner.st.borrow().failed.clone()
    }

    /// Bytes holding data and bytes of the data area: how full the slice
    /// is, cheaply (no counters copied).
    pub fn fill(&self) -> (u64, u64) {
        let st = self.inner.st.borrow();
        (
            (st.alloc.used() + st.journal.live_blocks) * BLOCK_SIZE_U64,
            st.layout.data_blocks * BLOCK_SIZE_U64,
        )
    }

    /// How many 4 KiB blocks of `offset..offset+len` of `oid` are not
    /// allocated (what writing the range would newly allocate).
    pub fn unallocated_blocks(&self, oid: ObjectId, offset: u64, len: u64) -> u64 {
        let start = (offset / BLOCK_SIZE_U64) as u32;
        let n = len.div_ceil(BLOCK_SIZE_U64) as u32;
        u64::from(self.inner.st.borrow().objects.missing(&oid, start, n))
    }

    /// Objects and allocated blocks per volume, ascending by volume.
    pub fn volume_usage(&self) -> Vec<(VolumeId, VolumeUsage)> {
        let mut v: Vec<_> = self.inner.st.borrow().objects.usage().collect();
        v.sort_unstable_by_key(|(id, _)| *id);
        v
    }

    /// A snapshot of counters and space.
    pub fn stats(&self) -> StoreStats {
        let st = self.inner.st.borrow();
        let c = &st.counters;
        let bs = BLOCK_SIZE_U64;
        let dev = c.journal_bytes + c.row_bytes + c.moved_bytes + c.checkpoint_bytes;
        StoreStats {
            objects: st.objects.len() as u64,
            capacity_bytes: st.layout.data_blocks * bs,
            used_bytes: (st.alloc.used() + st.journal.live_blocks) * bs,
            free_bytes: st.free_blocks() * bs,
            snapshot_bytes: st.objects.usage().map(|(_, u)| u.snap_blocks).sum::<u64>() * bs,
            snapshot_meta_bytes: st.objects.snap_meta_bytes(),
            journal_bytes: st.journal.blocks * bs,
            journal_used_bytes: st.journal.used() * bs,
            user_bytes_written: c.user_bytes_written,
            user_bytes_read: c.user_bytes_read,
            device_bytes_written: dev,
            journal_bytes_written: c.journal_bytes,
            row_bytes_written: c.row_bytes,
            moved_bytes_written: c.moved_bytes,
            checkpoint_bytes_written: c.checkpoint_bytes,
            writes: c.writes,
            reads: c.reads,
            discards: c.discards,
            deletes: c.deletes,
            records: c.records,
            device_flushes: c.device_flushes,
            checkpoints: c.checkpoints,
            checksum_errors: c.checksum_errors,
            read_latency: LatencySummary::from_histogram(&c.read_lat),
            write_latency: LatencySummary::from_histogram(&c.write_lat),
            open_duration: c.open_duration,
            replayed_records: c.replayed_records,
            journal_full_waits: c.journal_full_waits,
            journal_full_wait: c.journal_full_wait,
        }
    }

    /// Absolute device block of the journal's next record and its logical
    /// position (for fault-injection tests).
    #[doc(hidden)]
    pub fn debug_journal_head(&self) -> (u64, u64) {
        let st = self.inner.st.borrow();
        let j = &st.journal;
        (st.layout.journal_start + j.head % j.blocks, j.head)
    }

    /// Clears the latency histograms (e.g. after a warm-up).
    pub fn reset_latency(&self) {
        let mut st = self.inner.st.borrow_mut();
        st.counters.read_lat.reset();
        st.counters.write_lat.reset();
    }

    /// Stops accepting operations, commits what is queued and ends the
    /// background task. Acknowledged data is already durable; nothing else
    /// needs saving.
    pub async fn close(&self) -> Result<()> {
        self.inner.st.borrow_mut().closing = true;
        self.inner.work.notify();
        self.inner.kick.notify();
        self.inner.space.notify();
        loop {
            if self.inner.st.borrow().closed {
                return Ok(());
            }
            self.inner.done.wait().await;
        }
    }
}
