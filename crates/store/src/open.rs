//! Formatting a device and opening a slice: load the newest valid
//! checkpoint, read the journal from the checkpoint's trim point while every
//! record is valid and chained, re-apply the records after its replay
//! point, and rebuild the allocator. The first invalid record ends the log;
//! nothing after it is followed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, BLOCK_SIZE_U64, ObjectId};
use rustc_hash::FxHashMap;

use crate::alloc::{Allocator, Reclaim};
use crate::checkpoint::{self, CheckpointHeader, DiskLoc};
use crate::device::BlockDevice;
use crate::error::{Result, StoreError};
use crate::layout::{self, DeviceHeader, DeviceRole, FormatOptions, OsdIdentity, SliceLayout};
use crate::objects::{BlockEntry, Loc, ObjectMeta, ObjectTable};
use crate::record::{self, Entry, FLAG_CONTINUED, FLAG_WRAP};
use crate::signal::Signal;
use crate::snaps::{CloneMeta, SnapState};
use crate::state::{Batch, InlineRef, JRec, Journal, State};
use crate::stats::Counters;
use crate::store::{BackgroundTask, Inner, Store};

/// Journal bytes read per device request during replay.
const SCAN_WINDOW_BLOCKS: u64 = 1024;

fn chain_seed(uuid: u128, slice: u32) -> u32 {
    let mut b = [0u8; 20];
    b[..16].copy_from_slice(&uuid.to_le_bytes());
    b[16..].copy_from_slice(&slice.to_le_bytes());
    crc32c::crc32c(&b)
}

async fn read_block<D: BlockDevice>(dev: &D, block: u64, what: &'static str) -> Result<AlignedBuf> {
    let (r, b) = dev
        .read_at(
            AlignedBuf::for_read(BLOCK_SIZE),
            0..BLOCK_SIZE,
            block * BLOCK_SIZE_U64,
        )
        .await;
    r.map_err(|e| StoreError::io(what, e))?;
    Ok(b)
}

async fn write_block<D: BlockDevice>(
    dev: &D,
    block: u64,
    data: AlignedBuf,
    what: &'static str,
) -> Result<()> {
    let (r, _) = dev
        .write_at(data, 0..BLOCK_SIZE, block * BLOCK_SIZE_U64, false)
        .await;
    r.map_err(|e| StoreError::io(what, e))
}

/// Reads and checks the header of a data device (and its journal device).
pub async fn read_header<D: BlockDevice>(dev: &D, journal: Option<&D>) -> Result<DeviceHeader> {
    let h = DeviceHeader::decode(&read_block(dev, 0, "reading the device header").await?)?;
    if h.role != DeviceRole::Data {
        return Err(StoreError::NotFormatted(
            "this is a journal device; open its data device".into(),
        ));
    }
    match (h.journal_external, journal) {
        (false, Some(_)) => Err(StoreError::InvalidArgument(
            "a journal device was given but this store keeps its journal on the data device".into(),
        )),
        (true, None) => Err(StoreError::InvalidArgument(
            "this store's journal is on a separate device: pass it (--journal)".into(),
        )),
        (true, Some(j)) => {
            let jh = DeviceHeader::decode(
                &read_block(j, 0, "reading the journal device header").await?,
            )?;
            if jh.role != DeviceRole::Journal || jh.peer_uuid != h.uuid || h.peer_uuid != jh.uuid {
                return Err(StoreError::InvalidArgument(
                    "the journal device belongs to another store".into(),
                ));
            }
            Ok(h)
        }
        (false, None) => Ok(h),
    }
}

impl<D: BlockDevice> Store<D> {
    /// Lays out a new, empty store on `dev` (and `journal`, if given),
    /// destroying whatever was there. Returns the data device header.
    pub async fn format(
        dev: &D,
        journal: Option<&D>,
        opts: &FormatOptions,
    ) -> Result<DeviceHeader> {
        Self::format_as(dev, journal, opts, None).await
    }

    /// [`format`](Self::format), recording in the header which OSD of
    /// which cluster the device belongs to.
    pub async fn format_as(
        dev: &D,
        journal: Option<&D>,
        opts: &FormatOptions,
        identity: Option<OsdIdentity>,
    ) -> Result<DeviceHeader> {
        let (mut h, jh) = layout::plan(dev.size(), journal.map(|j| j.size()), opts)?;
        h.identity = identity;
        for slice in 0..h.slices {
            let l = SliceLayout::compute(&h, slice)?;
            let empty = CheckpointHeader {
                generation: 1,
                replay_prev_crc: chain_seed(h.uuid, slice),
                trim_prev_crc: chain_seed(h.uuid, slice),
                ..Default::default()
            };
            let slot_a = empty.encode();
            write_block(dev, l.ckpt_start, slot_a, "writing an empty checkpoint").await?;
            let zero = AlignedBuf::zeroed(BLOCK_SIZE);
            write_block(
                dev,
                l.ckpt_start + l.ckpt_slot_blocks,
                zero,
                "clearing a checkpoint slot",
            )
            .await?;
            let jdev = journal.unwrap_or(dev);
            write_block(
                jdev,
                l.journal_start,
                AlignedBuf::zeroed(BLOCK_SIZE),
                "clearing the journal",
            )
            .await?;
        }
        if let (Some(j), Some(jh)) = (journal, &jh) {
            write_block(
                j,
                0,
                AlignedBuf::copy_from(&jh.encode()),
                "writing the journal header",
            )
            .await?;
            j.flush()
                .await
                .map_err(|e| StoreError::io("flushing the journal device", e))?;
        }
        dev.flush()
            .await
            .map_err(|e| StoreError::io("flushing the device", e))?;
        write_block(
            dev,
            0,
            AlignedBuf::copy_from(&h.encode()),
            "writing the device header",
        )
        .await?;
        dev.flush()
            .await
            .map_err(|e| StoreError::io("flushing the device", e))?;
        Ok(h)
    }

    /// Records `identity` in the header of an existing data device (one
    /// formatted before identities existed, or outside a cluster), keeping
    /// everything else. The header is one block, written whole.
    pub async fn write_identity(dev: &D, identity: OsdIdentity) -> Result<DeviceHeader> {
        let mut h = DeviceHeader::decode(&read_block(dev, 0, "reading the device header").await?)?;
        if h.role != DeviceRole::Data {
            return Err(StoreError::NotFormatted(
                "this is a journal device; its data device holds the identity".into(),
            ));
        }
        h.identity = Some(identity);
        write_block(
            dev,
            0,
            AlignedBuf::copy_from(&h.encode()),
            "writing the device header",
        )
        .await?;
        dev.flush()
            .await
            .map_err(|e| StoreError::io("flushing the device", e))?;
        Ok(h)
    }

    /// Opens slice `slice`: loads its checkpoint, replays its journal and
    /// returns the store with its background task, which the caller spawns
    /// on the same thread.
    pub async fn open(dev: D, journal: Option<D>, slice: u32) -> Result<(Self, BackgroundTask)> {
        let t0 = Instant::now();
        let h = read_header(&dev, journal.as_ref()).await?;
        let layout = SliceLayout::compute(&h, slice)?;
        let (ckpt, body) = load_checkpoint(&dev, &layout).await?;
        let jdev = journal.as_ref().unwrap_or(&dev);
        let scan = scan_journal(jdev, &layout, ckpt.trim_lpos, ckpt.trim_prev_crc).await?;
        let replay_ok = if ckpt.replay_lpos == scan.end {
            scan.last_crc == ckpt.replay_prev_crc
        } else {
            scan.records
                .iter()
                .any(|r| r.lpos == ckpt.replay_lpos && r.prev_crc == ckpt.replay_prev_crc)
        };
        if !replay_ok {
            return Err(StoreError::Corrupt(format!(
                "journal does not reach the checkpoint's replay point {} (valid log ends at {})",
                ckpt.replay_lpos, scan.end
            )));
        }

        let mut jr = Journal {
            blocks: layout.journal_blocks,
            records: VecDeque::with_capacity(scan.records.len()),
            base_recno: 0,
            head: ckpt.trim_lpos,
            tail: ckpt.trim_lpos,
            last_crc: ckpt.trim_prev_crc,
            nonce: rand::random(),
            live_blocks: 0,
        };
        let mut to_apply = Vec::new();
        for r in scan.records {
            // Decoded inline entries all point into the record's one buffer.
            let inline = InlineRef::of(&r.entries);
            let recno = jr.push(JRec {
                lpos: r.lpos,
                prev_crc: r.prev_crc,
                blocks: r.blocks,
                bufs: r.data.into_iter().collect(),
                buf_first: vec![0],
                live: 0,
                inline,
            });
            jr.last_crc = r.crc;
            if r.lpos >= ckpt.replay_lpos {
                to_apply.push((recno, r.lpos, r.entries, r.crcs));
            }
        }
        debug_assert_eq!(jr.head, scan.end);

        let mut objects = ObjectTable::default();
        objects.map.reserve(ckpt.n_objects as usize);
        // Journal position from which replay applies records to an object
        // whose checkpointed state was written later than the replay point.
        let mut marks: FxHashMap<ObjectId, u64> = FxHashMap::default();
        checkpoint::decode_body(&body, ckpt.n_objects, layout.object_blocks, |o| {
            let resolve = |blk: u32, crc: u32, loc: DiskLoc| -> Result<BlockEntry, String> {
                let loc = match loc {
                    DiskLoc::Data(p) => Loc::Data(p),
                    DiskLoc::Journal { lpos, idx } => {
                        let recno = jr.recno_at(lpos).ok_or_else(|| {
                            format!("object {} refers to missing journal record {lpos}", o.oid)
                        })?;
                        let rec = jr.rec(recno).expect("recno_at returned a held record");
                        let data_blocks = rec.bufs.first().map_or(0, |b| b.len() / BLOCK_SIZE);
                        if idx as usize >= data_blocks {
                            return Err(format!(
                                "object {} refers past journal record {lpos}",
                                o.oid
                            ));
                        }
                        Loc::Journal {
                            recno,
                            buf: 0,
                            off: idx,
                        }
                    }
                };
                Ok(checkpoint::entry(blk, crc, loc))
            };
            if let Some(mark) = o.tombstone_mark {
                if marks.insert(o.oid, mark).is_some() {
                    return Err(format!("object {} appears twice", o.oid));
                }
                return Ok(());
            }
            let mut meta = ObjectMeta {
                version: o.version,
                blocks: Vec::with_capacity(o.blocks.len()),
                snaps: None,
            };
            for &(blk, crc, loc) in &o.blocks {
                meta.blocks.push(resolve(blk, crc, loc)?);
            }
            if let Some(s) = o.snaps {
                if marks.insert(o.oid, s.mark).is_some() {
                    return Err(format!("object {} appears twice", o.oid));
                }
                let mut st = SnapState {
                    seq: s.seq,
                    headless: s.headless,
                    ..Default::default()
                };
                for c in s.clones {
                    let mut cm = CloneMeta::new(c.id, c.complete);
                    for (blk, crc, loc) in c.blocks {
                        cm.entries.push(resolve(blk, crc, loc)?);
                    }
                    for (start, n) in c.holes {
                        cm.entries.extend((start..start + n).map(BlockEntry::hole));
                    }
                    cm.entries.sort_unstable_by_key(|e| e.blk);
                    if cm.entries.windows(2).any(|w| w[0].blk == w[1].blk) {
                        return Err(format!(
                            "object {} clone {} has a block and a hole at once",
                            o.oid, c.id
                        ));
                    }
                    let (b, h) = cm.counts();
                    st.clone_blocks += b;
                    st.holes += h;
                    st.clones.push(cm);
                }
                if st.headless && !st.clones.last().is_some_and(|c| c.complete) {
                    return Err(format!(
                        "object {} has no head and no complete clone",
                        o.oid
                    ));
                }
                if st != SnapState::default() {
                    meta.snaps = Some(Box::new(st));
                }
            }
            if objects.map.insert(o.oid, meta).is_some() {
                return Err(format!("object {} appears twice", o.oid));
            }
            Ok(())
        })
        .map_err(StoreError::Corrupt)?;
        drop(body);

        let mut st = State {
            alloc: Allocator::new(layout.data_blocks),
            layout,
            objects,
            reclaim: Reclaim::default(),
            journal: jr,
            batch: Batch::default(),
            spare: Default::default(),
            reserved_blocks: 0,
            reserved_objects: 0,
            reserved_meta: 0,
            open_batch: 1,
            committed: 0,
            failed: None,
            closing: false,
            closed: false,
            want_space: false,
            force_checkpoint: false,
            ckpt_gen: ckpt.generation,
            counters: Counters::default(),
        };
        let replayed = to_apply.len() as u64;
        for (recno, lpos, entries, crcs) in &mut to_apply {
            if !marks.is_empty() {
                // Records an object's checkpointed state already holds.
                entries.retain(|e| marks.get(&e.oid).is_none_or(|m| *lpos >= *m));
            }
            st.apply(*recno, entries, crcs, false);
        }
        st.rebuild_accounting().map_err(StoreError::Corrupt)?;
        st.counters.replayed_records = replayed;
        st.counters.open_duration = t0.elapsed();
        tracing::debug!(
            slice,
            objects = st.objects.len(),
            replayed,
            ms = t0.elapsed().as_millis() as u64,
            "store slice opened"
        );

        let inner = Rc::new(Inner {
            dev,
            jdev: journal,
            st: RefCell::new(st),
            work: Signal::default(),
            room: Signal::default(),
            commit: Signal::default(),
            space: Signal::default(),
            kick: Signal::default(),
            done: Signal::default(),
        });
        let bg_inner = inner.clone();
        let bg: BackgroundTask = Box::pin(async move {
            let c = crate::commit::committer(bg_inner.clone());
            let f = crate::flusher::flusher(bg_inner.clone());
            futures_util::future::join(c, f).await;
            let mut st = bg_inner.st.borrow_mut();
            st.closed = true;
            drop(st);
            bg_inner.done.notify();
            bg_inner.space.notify();
            bg_inner.commit.notify();
        });
        Ok((Store { inner }, bg))
    }
}

/// Loads the newest checkpoint whose header and body are intact.
async fn load_checkpoint<D: BlockDevice>(
    dev: &D,
    l: &SliceLayout,
) -> Result<(CheckpointHeader, AlignedBuf)> {
    let mut best: Option<(CheckpointHeader, AlignedBuf)> = None;
    for slot in 0..2 {
        let start = l.ckpt_start + slot * l.ckpt_slot_blocks;
        let Some(h) =
            CheckpointHeader::decode(&read_block(dev, start, "reading a checkpoint header").await?)
        else {
            continue;
        };
        let blocks = h.body_bytes.div_ceil(BLOCK_SIZE_U64);
        if 1 + blocks > l.ckpt_slot_blocks
            || best
                .as_ref()
                .is_some_and(|(b, _)| b.generation >= h.generation)
        {
            continue;
        }
        let len = (blocks * BLOCK_SIZE_U64) as usize;
        let (r, body) = dev
            .read_at(
                AlignedBuf::for_read(len),
                0..len,
                (start + 1) * BLOCK_SIZE_U64,
            )
            .await;
        r.map_err(|e| StoreError::io("reading a checkpoint", e))?;
        if crc32c::crc32c(&body[..h.body_bytes as usize]) != h.body_crc {
            tracing::warn!(
                slice = l.slice,
                slot,
                generation = h.generation,
                "torn checkpoint ignored"
            );
            continue;
        }
        let mut body = body;
        body.set_len(h.body_bytes as usize);
        best = Some((h, body));
    }
    best.ok_or_else(|| StoreError::Corrupt(format!("slice {} has no valid checkpoint", l.slice)))
}

struct ScannedRecord {
    lpos: u64,
    prev_crc: u32,
    crc: u32,
    blocks: u64,
    entries: Vec<Entry>,
    crcs: Vec<u32>,
    data: Option<AlignedBuf>,
    /// The next record belongs to the same chain.
    continued: bool,
}

struct Scan {
    records: Vec<ScannedRecord>,
    end: u64,
    last_crc: u32,
}

/// Sequential reader of the journal ring through a window buffer.
struct RingReader<'a, D> {
    dev: &'a D,
    start: u64,
    ring: u64,
    win: AlignedBuf,
    win_phys: u64,
    win_blocks: u64,
}

impl<D: BlockDevice> RingReader<'_, D> {
    /// Blocks `phys..phys+n` of the ring (never crossing its end).
    async fn get(&mut self, phys: u64, n: u64) -> Result<&[u8]> {
        debug_assert!(phys + n <= self.ring);
        if phys < self.win_phys || phys + n > self.win_phys + self.win_blocks {
            let want = n.max(SCAN_WINDOW_BLOCKS).min(self.ring - phys);
            let len = (want * BLOCK_SIZE_U64) as usize;
            let buf = std::mem::replace(&mut self.win, AlignedBuf::with_capacity(0));
            let mut buf = if buf.capacity() >= len {
                buf
            } else {
                AlignedBuf::with_capacity(len)
            };
            buf.set_len(len);
            let (r, b) = self
                .dev
                .read_at(buf, 0..len, (self.start + phys) * BLOCK_SIZE_U64)
                .await;
            self.win = b;
            r.map_err(|e| StoreError::io("reading the journal", e))?;
            self.win_phys = phys;
            self.win_blocks = want;
        }
        let at = ((phys - self.win_phys) * BLOCK_SIZE_U64) as usize;
        Ok(&self.win[at..at + (n * BLOCK_SIZE_U64) as usize])
    }
}

/// Reads valid, chained records from `lpos` on.
async fn scan_journal<D: BlockDevice>(
    dev: &D,
    l: &SliceLayout,
    trim: u64,
    trim_prev: u32,
) -> Result<Scan> {
    let ring = l.journal_blocks;
    let mut rd = RingReader {
        dev,
        start: l.journal_start,
        ring,
        win: AlignedBuf::with_capacity(0),
        win_phys: 0,
        win_blocks: 0,
    };
    let mut records = Vec::new();
    let mut lpos = trim;
    let mut prev = trim_prev;
    while lpos - trim < ring {
        let phys = lpos % ring;
        let first = rd.get(phys, 1).await?;
        let head = match record::decode_head(first, lpos, prev) {
            Ok(h) => h,
            Err(why) => {
                tracing::debug!(lpos, ?why, "journal ends");
                break;
            }
        };
        let in_chain = records.last().is_some_and(|r: &ScannedRecord| r.continued);
        if head.flags & FLAG_WRAP != 0 {
            if in_chain {
                // A chain is written contiguously: this is not its rest.
                break;
            }
            let Ok((crc, _, _)) = record::decode_entries(first, &head, l.object_blocks) else {
                break;
            };
            let skip = ring - phys;
            if lpos - trim + skip > ring {
                break;
            }
            records.push(ScannedRecord {
                lpos,
                prev_crc: prev,
                crc,
                blocks: skip,
                entries: Vec::new(),
                crcs: Vec::new(),
                data: None,
                continued: false,
            });
            prev = crc;
            lpos += skip;
            continue;
        }
        let total = head.total_blocks();
        if phys + total > ring || lpos - trim + total > ring {
            break;
        }
        let hb = head.header_blocks as u64;
        let whole = rd.get(phys, total).await?;
        let (hdr, data) = whole.split_at((hb * BLOCK_SIZE_U64) as usize);
        let Ok((crc, entries, crcs)) = record::decode_entries(hdr, &head, l.object_blocks) else {
            break;
        };
        if record::verify_data(&entries, &crcs, data).is_err() {
            // Only one record is ever in flight, so a torn one is the last.
            // A complete record chained after this one means this one was
            // written whole and its data went bad on the device since:
            // replaying up to here would silently drop acknowledged writes.
            let next = lpos + total;
            if next - trim < ring {
                let first = rd.get(next % ring, 1).await?;
                if record::decode_head(first, next, crc).is_ok() {
                    return Err(StoreError::Corrupt(format!(
                        "journal record at {lpos} has data failing its checksum and later records follow it: \
                         the device lost acknowledged writes; rebuild this OSD from its peers"
                    )));
                }
            }
            tracing::debug!(lpos, "journal ends at a record with torn data");
            break;
        }
        let data = (!data.is_empty()).then(|| AlignedBuf::copy_from(data));
        records.push(ScannedRecord {
            lpos,
            prev_crc: prev,
            crc,
            blocks: total,
            entries,
            crcs,
            data,
            continued: head.flags & FLAG_CONTINUED != 0,
        });
        prev = crc;
        lpos += total;
    }
    // A chain whose last record is missing was cut short by a crash before
    // any of it was applied or acknowledged: dropped whole.
    while let Some(r) = records.pop_if(|r| r.continued) {
        tracing::debug!(
            lpos = r.lpos,
            "journal ends in an incomplete chain of records"
        );
        lpos = r.lpos;
        prev = r.prev_crc;
    }
    Ok(Scan {
        records,
        end: lpos,
        last_crc: prev,
    })
}
