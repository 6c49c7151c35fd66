//! The mutable state of one store slice and the rules that change it.
//!
//! Everything here is synchronous and runs on the slice's thread between
//! awaits; nothing is ever borrowed across an I/O. The one way metadata
//! changes is [`State::apply`], called for durable journal records only,
//! both live and during replay, so the two can never disagree.

use std::collections::VecDeque;

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, ObjectId};

use crate::alloc::{Allocator, Reclaim};
use crate::layout::{CKPT_BLOCK_BYTES, CKPT_OBJECT_BYTES, SliceLayout};
use crate::objects::{BlockEntry, Loc, ObjectMeta, ObjectTable};
use crate::record::{Entry, EntryKind};
use crate::snaps::{After, HeadChange};
use crate::stats::Counters;

/// An inline write inside a record, remembered so the flusher can find the
/// record's blocks that are still current.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InlineRef {
    pub oid: ObjectId,
    pub start_blk: u32,
    pub nblk: u32,
    pub buf: u32,
    pub first: u32,
}

impl InlineRef {
    /// Where the inline writes among `entries` (one record's) keep their
    /// blocks.
    pub(crate) fn of(entries: &[Entry]) -> Vec<InlineRef> {
        entries
            .iter()
            .filter(|e| e.kind == EntryKind::WriteInline)
            .map(|e| InlineRef {
                oid: e.oid,
                start_blk: e.start_blk,
                nblk: e.nblk,
                buf: e.buf,
                first: e.loc as u32,
            })
            .collect()
    }
}

/// A durable journal record kept in memory until its space is trimmed.
pub(crate) struct JRec {
    pub lpos: u64,
    pub prev_crc: u32,
    /// Ring blocks the record occupies (header + data, or the skipped tail for a wrap).
    pub blocks: u64,
    pub bufs: Vec<AlignedBuf>,
    /// Record data block at which each buffer starts.
    pub buf_first: Vec<u32>,
    /// Blocks of this record that objects still point at.
    pub live: u32,
    pub inline: Vec<InlineRef>,
}

impl JRec {
    pub(crate) fn block(&self, buf: u32, off: u32) -> &[u8] {
        let at = off as usize * BLOCK_SIZE;
        &self.bufs[buf as usize][at..at + BLOCK_SIZE]
    }
}

/// The journal ring as the running store sees it.
pub(crate) struct Journal {
    /// Ring size in blocks.
    pub blocks: u64,
    pub records: VecDeque<JRec>,
    /// Record number of `records[0]`.
    pub base_recno: u64,
    /// Logical block position where the next record goes.
    pub head: u64,
    /// Oldest logical position still needed.
    pub tail: u64,
    /// Header checksum of the newest record (the chain).
    pub last_crc: u32,
    /// Random per open, so records of different lives never look alike.
    pub nonce: u32,
    /// Blocks currently located in journal records.
    pub live_blocks: u64,
}

impl Journal {
    pub(crate) fn used(&self) -> u64 {
        self.head - self.tail
    }

    pub(crate) fn next_recno(&self) -> u64 {
        self.base_recno + self.records.len() as u64
    }

    pub(crate) fn rec(&self, recno: u64) -> Option<&JRec> {
        recno
            .checked_sub(self.base_recno)
            .and_then(|i| self.records.get(i as usize))
    }

    pub(crate) fn rec_mut(&mut self, recno: u64) -> Option<&mut JRec> {
        recno
            .checked_sub(self.base_recno)
            .and_then(|i| self.records.get_mut(i as usize))
    }

    /// Record number of the record that starts at `lpos`.
    pub(crate) fn recno_at(&self, lpos: u64) -> Option<u64> {
        let i = self.records.partition_point(|r| r.lpos < lpos);
        (self.records.get(i)?.lpos == lpos).then_some(self.base_recno + i as u64)
    }

    pub(crate) fn push(&mut self, rec: JRec) -> u64 {
        debug_assert_eq!(rec.lpos, self.head);
        self.head = rec.lpos + rec.blocks;
        self.records.push_back(rec);
        self.next_recno() - 1
    }

    /// Forgets records before `lpos`; they must hold no live block.
    pub(crate) fn trim(&mut self, lpos: u64) {
        while let Some(r) = self.records.front() {
            if r.lpos >= lpos {
                break;
            }
            assert_eq!(
                r.live, 0,
                "trimming journal record at {} that still holds live blocks",
                r.lpos
            );
            self.records.pop_front();
            self.base_recno += 1;
        }
        debug_assert!(lpos >= self.tail && lpos <= self.head);
        self.tail = lpos;
    }
}

/// Writes collected for the next journal record.
#[derive(Default)]
pub(crate) struct Batch {
    pub entries: Vec<Entry>,
    pub crcs: Vec<u32>,
    pub bufs: Vec<AlignedBuf>,
    pub data_blocks: u32,
    pub entry_bytes: usize,
    /// Contains redirect-on-write entries whose data must be flushed first.
    pub needs_flush: bool,
    pub reserved_blocks: u64,
    pub reserved_objects: u64,
    /// Checkpoint bytes of snapshot metadata promised to this batch.
    pub reserved_meta: u64,
    pub user_bytes: u64,
    pub ops: u64,
    /// Holds one group too large for a record, to be written as a chain
    /// of records: nothing else joins it.
    pub chained: bool,
}

impl Batch {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Everything one slice knows, behind one `RefCell`.
pub(crate) struct State {
    pub layout: SliceLayout,
    pub objects: ObjectTable,
    pub alloc: Allocator,
    pub reclaim: Reclaim,
    pub journal: Journal,
    pub batch: Batch,
    /// The last committed batch's entry and checksum vectors, emptied, for
    /// the next batch to reuse (no allocation per record for them).
    pub spare: (Vec<Entry>, Vec<u32>),
    /// New blocks promised to writes in flight (not yet applied).
    pub reserved_blocks: u64,
    pub reserved_objects: u64,
    /// Checkpoint bytes of snapshot metadata promised to writes in flight.
    pub reserved_meta: u64,
    /// Id of the batch being filled; batches below it are taken.
    pub open_batch: u64,
    /// Every batch up to this id is durable and applied.
    pub committed: u64,
    pub failed: Option<String>,
    pub closing: bool,
    pub closed: bool,
    /// The committer is waiting for journal space.
    pub want_space: bool,
    pub force_checkpoint: bool,
    pub ckpt_gen: u64,
    pub counters: Counters,
}

impl State {
    /// Most objects one slice may hold (bounds the checkpoint slots).
    pub(crate) fn max_objects(&self) -> u64 {
        self.layout.data_blocks
    }

    /// Blocks that may still be promised to new data.
    pub(crate) fn free_blocks(&self) -> u64 {
        self.layout
            .data_blocks
            .saturating_sub(self.alloc.used() + self.journal.live_blocks + self.reserved_blocks)
    }

    /// Checkpoint bytes the object table may need now, promises included:
    /// an object header per object, an entry per data block, and the
    /// snapshot metadata, which no data block stands for.
    pub(crate) fn checkpoint_bound(&self) -> u64 {
        let objects = self.objects.len() as u64 + self.reserved_objects;
        let blocks = self.alloc.used() + self.journal.live_blocks + self.reserved_blocks;
        CKPT_OBJECT_BYTES * objects
            + CKPT_BLOCK_BYTES * blocks
            + self.objects.snap_meta_bytes()
            + self.reserved_meta
    }

    /// Body bytes one checkpoint slot holds. Sized for an object header
    /// and an entry per data block, so without snapshot metadata the bound
    /// above always fits; with it, changes that would not fit are refused.
    pub(crate) fn checkpoint_capacity(&self) -> u64 {
        self.layout.ckpt_slot_blocks.saturating_sub(1) * BLOCK_SIZE as u64
    }

    /// Applies one durable record's entries. `recno` is the in-memory record
    /// holding inline data. With `accounting` off (replay), allocator and
    /// live counts are rebuilt afterwards instead.
    pub(crate) fn apply(&mut self, recno: u64, entries: &[Entry], crcs: &[u32], accounting: bool) {
        let State {
            objects,
            alloc,
            reclaim,
            journal,
            ..
        } = self;
        if accounting {
            // Count this record's inline blocks live up front, so entries of
            // the same record superseding each other never underflow.
            let inline: u32 = entries
                .iter()
                .filter(|e| e.kind == EntryKind::WriteInline)
                .map(|e| e.nblk)
                .sum();
            if inline > 0 {
                journal
                    .rec_mut(recno)
                    .expect("applying an unknown record")
                    .live += inline;
                journal.live_blocks += inline as u64;
            }
        }
        let lpos = journal.rec(recno).map_or(0, |r| r.lpos);
        let mut release = |old: BlockEntry| {
            if !accounting || old.is_hole() {
                return;
            }
            match old.loc() {
                Loc::Data(p) => reclaim.defer_free(p, alloc),
                Loc::Journal { recno, .. } => {
                    let r = journal
                        .rec_mut(recno)
                        .expect("live block points at a trimmed record");
                    r.live -= 1;
                    journal.live_blocks -= 1;
                }
            }
        };
        for en in entries {
            let (before, had_snaps) = match objects.get(&en.oid) {
                Some(o) => (Some(o.footprint()), o.snaps.is_some()),
                None => (None, false),
            };
            let mut gone = false;
            match en.kind {
                EntryKind::WriteInline | EntryKind::WriteRow => {
                    let c = &crcs[en.crc_off as usize..(en.crc_off + en.nblk) as usize];
                    let inline = en.kind == EntryKind::WriteInline;
                    let new = |i: u32| {
                        let loc = if inline {
                            Loc::Journal {
                                recno,
                                buf: en.buf,
                                off: en.loc as u32 + i,
                            }
                        } else {
                            Loc::Data(en.loc + i as u64)
                        };
                        BlockEntry::new(en.start_blk + i, c[i as usize], loc)
                    };
                    let (start, n) = (en.start_blk, en.nblk);
                    match objects.get_mut(&en.oid) {
                        Some(obj) if en.raw && en.snap != 0 => {
                            obj.clone_set_range(en.snap, start, n, new, &mut release)
                        }
                        Some(obj) if en.raw => {
                            obj.version = en.version;
                            obj.set_range(start, n, new, &mut release);
                        }
                        Some(obj) => {
                            obj.version = en.version;
                            let change = HeadChange::Write { start, n };
                            obj.change_head(en.snap, change, new, &mut release);
                        }
                        None if en.raw && en.snap != 0 => {
                            let obj = objects.entry(en.oid);
                            obj.version = en.version;
                            obj.clone_set_range(en.snap, start, n, new, &mut release);
                        }
                        None => {
                            let obj = objects.entry(en.oid);
                            obj.version = en.version;
                            if !en.raw {
                                obj.snaps = ObjectMeta::born_under(en.snap);
                            }
                            obj.set_range(start, n, new, &mut release);
                        }
                    }
                }
                EntryKind::Discard => {
                    if let Some(obj) = objects.get_mut(&en.oid) {
                        let (start, n) = (en.start_blk, en.nblk);
                        if en.raw && en.snap != 0 {
                            obj.clone_holes(en.snap, start, n, &mut release);
                        } else if en.raw {
                            obj.version = en.version;
                            obj.remove_range(start, n, &mut release);
                        } else if obj.has_head() {
                            obj.version = en.version;
                            let change = HeadChange::Discard { start, n };
                            obj.change_head(en.snap, change, |_| unreachable!(), &mut release);
                        }
                    }
                }
                EntryKind::Delete => {
                    if let Some(obj) = objects.get_mut(&en.oid) {
                        let after = if en.raw {
                            obj.drop_head(&mut release)
                        } else {
                            obj.version = en.version;
                            let change = HeadChange::Delete;
                            obj.change_head(en.snap, change, |_| unreachable!(), &mut release)
                        };
                        gone = after == After::Gone;
                    }
                }
                EntryKind::Create => {
                    let obj = objects.entry(en.oid);
                    obj.version = en.version;
                    if let Some(s) = obj.snaps.as_mut() {
                        s.headless = false;
                    }
                    if en.snap != 0 {
                        obj.snaps.get_or_insert_with(Box::default).seq = en.snap;
                    }
                }
                EntryKind::SnapTrim => {
                    if let Some(obj) = objects.get_mut(&en.oid) {
                        gone = obj.trim_clone(en.snap, &mut release) == After::Gone;
                    }
                }
                EntryKind::Purge => {
                    if let Some(obj) = objects.remove(&en.oid) {
                        obj.blocks.iter().copied().for_each(&mut release);
                        for c in obj.snaps.iter().flat_map(|s| s.clones.iter()) {
                            c.entries.iter().copied().for_each(&mut release);
                        }
                    }
                }
                EntryKind::CloneCreate => {
                    let fresh = objects.get(&en.oid).is_none();
                    let obj = objects.entry(en.oid);
                    if fresh {
                        obj.version = en.version;
                    }
                    obj.clone_create(en.snap, en.start_blk == 1, fresh);
                }
            }
            if gone {
                objects.remove(&en.oid);
            }
            if accounting {
                let after = objects.get(&en.oid).map(|o| o.footprint());
                objects.charge(en.oid.volume, before, after);
                if had_snaps && after.is_none() {
                    objects.removed_snapped.insert(en.oid, lpos);
                }
            }
        }
    }

    /// Recomputes allocator and journal live counts from the object table
    /// (after replay). Fails if two blocks claim one data block.
    pub(crate) fn rebuild_accounting(&mut self) -> Result<(), String> {
        let State {
            objects,
            alloc,
            journal,
            ..
        } = self;
        objects.recount();
        for (oid, obj) in &objects.map {
            for b in obj.all_entries() {
                match b.loc() {
                    Loc::Data(p) => {
                        if !alloc.mark_used(p) {
                            return Err(format!(
                                "data block {p} claimed twice or out of range (object {oid} block {})",
                                b.blk
                            ));
                        }
                    }
                    Loc::Journal { recno, .. } => {
                        let r = journal.rec_mut(recno).ok_or_else(|| {
                            format!(
                                "object {oid} block {} points at a missing journal record",
                                b.blk
                            )
                        })?;
                        r.live += 1;
                        journal.live_blocks += 1;
                    }
                }
            }
        }
        Ok(())
    }
}
