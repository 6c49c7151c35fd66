//! The flusher: when the journal passes half full it moves journaled blocks
//! home to the data area, writes a checkpoint, and trims the journal.
//!
//! One cycle: (1) every block still living in a record older than the head
//! is copied to freshly allocated, contiguous data blocks and repointed if
//! nobody overwrote it meanwhile; (2) one device flush makes those copies
//! durable; (3) a fuzzy checkpoint is streamed to the older slot and made
//! durable; (4) the journal is trimmed up to the oldest record the new
//! checkpoint still needs. Each step yields between device writes, so
//! foreground I/O keeps flowing.

use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, BLOCK_SIZE_U64, ObjectId};

use crate::checkpoint::{BodyEncoder, CheckpointHeader, disk_journal_ref};
use crate::device::BlockDevice;
use crate::error::StoreError;
use crate::objects::Loc;
use crate::signal::yield_now;
use crate::store::Inner;

/// Blocks moved home per device write.
const MOVE_BATCH_BLOCKS: usize = 256;
/// Objects serialised between yields.
const KEYS_PER_SLICE: usize = 4096;

/// Runs until the store closes (or fails).
pub(crate) async fn flusher<D: BlockDevice>(inner: Rc<Inner<D>>) {
    loop {
        loop {
            let next = {
                let st = inner.st.borrow();
                if st.closing || st.failed.is_some() {
                    Some(false)
                } else if st.force_checkpoint
                    || st.want_space
                    || st.journal.used() * 4 > st.journal.blocks
                {
                    Some(true)
                } else {
                    None
                }
            };
            match next {
                Some(true) => break,
                Some(false) => return,
                None => inner.kick.wait().await,
            }
        }
        inner.st.borrow_mut().force_checkpoint = false;
        if let Err(e) = cycle(&inner).await {
            inner.fail(e.to_string());
            return;
        }
        inner.space.notify();
    }
}

/// A journaled block to move: where it is and where it goes.
struct Move {
    oid: ObjectId,
    blk: u32,
    from: Loc,
    to: u64,
}

async fn cycle<D: BlockDevice>(inner: &Inner<D>) -> Result<(), StoreError> {
    let t0 = std::time::Instant::now();
    move_home(inner).await?;
    let t1 = std::time::Instant::now();
    inner
        .dev
        .flush()
        .await
        .map_err(|e| StoreError::io("flushing moved blocks", e))?;
    inner.st.borrow_mut().counters.device_flushes += 1;
    let t2 = std::time::Instant::now();
    write_checkpoint(inner).await?;
    tracing::debug!(
        move_ms = (t1 - t0).as_secs_f64() * 1e3,
        flush_ms = (t2 - t1).as_secs_f64() * 1e3,
        checkpoint_ms = t2.elapsed().as_secs_f64() * 1e3,
        "flusher cycle"
    );
    Ok(())
}

/// Moves every block still in a record older than the current head.
async fn move_home<D: BlockDevice>(inner: &Inner<D>) -> Result<(), StoreError> {
    let end = inner.st.borrow().journal.next_recno();
    let mut recno = inner.st.borrow().journal.base_recno;
    let mut ref_i = 0usize;
    let mut blk_i = 0u32;
    loop {
        // Collect up to a batch of still-current journal blocks.
        let mut moves: Vec<Move> = Vec::new();
        let mut data = AlignedBuf::with_capacity(MOVE_BATCH_BLOCKS * BLOCK_SIZE);
        {
            let st = &mut *inner.st.borrow_mut();
            'collect: while recno < end {
                let Some(rec) = st.journal.rec(recno) else {
                    recno += 1;
                    continue;
                };
                if rec.live == 0 {
                    recno += 1;
                    ref_i = 0;
                    blk_i = 0;
                    continue;
                }
                while ref_i < rec.inline.len() {
                    let r = rec.inline[ref_i];
                    while blk_i < r.nblk {
                        if moves.len() == MOVE_BATCH_BLOCKS {
                            break 'collect;
                        }
                        let from = Loc::Journal {
                            recno,
                            buf: r.buf,
                            off: r.first + blk_i,
                        };
                        let blk = r.start_blk + blk_i;
                        blk_i += 1;
                        // The head or, after a snapshot, a clone may own it.
                        let current = st.objects.get(&r.oid).is_some_and(|o| o.owns(blk, from));
                        if current {
                            data.extend_from_slice(rec.block(r.buf, r.first + blk_i - 1));
                            moves.push(Move {
                                oid: r.oid,
                                blk,
                                from,
                                to: 0,
                            });
                        }
                    }
                    ref_i += 1;
                    blk_i = 0;
                }
                recno += 1;
                ref_i = 0;
            }
            if moves.is_empty() {
                return Ok(());
            }
            let mut runs = Vec::new();
            if !st.alloc.alloc(moves.len() as u32, &mut runs) {
                return Err(StoreError::Corrupt(format!(
                    "no data blocks to move {} journaled blocks home (used {}, journal {})",
                    moves.len(),
                    st.alloc.used(),
                    st.journal.live_blocks
                )));
            }
            let mut i = 0;
            for (p, n) in runs {
                for k in 0..n as u64 {
                    moves[i].to = p + k;
                    i += 1;
                }
            }
        }
        // Write each contiguous destination run, all runs of the batch at
        // once: a fragmented data area turns a batch into many small writes,
        // and issued one by one they would hold the journal full.
        let data_start = inner.st.borrow().layout.data_start;
        let mut writes = Vec::new();
        let mut i = 0;
        while i < moves.len() {
            let mut j = i + 1;
            while j < moves.len() && moves[j].to == moves[j - 1].to + 1 {
                j += 1;
            }
            let pos = (data_start + moves[i].to) * BLOCK_SIZE_U64;
            let run = AlignedBuf::copy_from(&data[i * BLOCK_SIZE..j * BLOCK_SIZE]);
            let len = run.len();
            writes.push(async move { inner.dev.write_at(run, 0..len, pos, false).await.0 });
            i = j;
        }
        let failed = futures_util::future::join_all(writes)
            .await
            .into_iter()
            .find_map(|r| r.err());
        if let Some(e) = failed {
            let mut st = inner.st.borrow_mut();
            moves.iter().for_each(|m| st.alloc.free(m.to));
            return Err(StoreError::io("moving journaled blocks home", e));
        }
        let st = &mut *inner.st.borrow_mut();
        st.counters.moved_bytes += (moves.len() * BLOCK_SIZE) as u64;
        for m in &moves {
            let moved = st
                .objects
                .get_mut(&m.oid)
                .is_some_and(|o| o.relocate(m.blk, m.from, Loc::Data(m.to)));
            if moved {
                let Loc::Journal { recno, .. } = m.from else {
                    unreachable!()
                };
                if let Some(r) = st.journal.rec_mut(recno) {
                    r.live -= 1;
                }
                st.journal.live_blocks -= 1;
            } else {
                // Overwritten while we copied it; the copy was never visible.
                st.alloc.free(m.to);
            }
        }
    }
}

/// Streams a checkpoint into the older slot, makes it durable, trims.
async fn write_checkpoint<D: BlockDevice>(inner: &Inner<D>) -> Result<(), StoreError> {
    let (replay_lpos, replay_prev_crc, keys, generation, slot_start, slot_blocks) = {
        let st = &mut *inner.st.borrow_mut();
        // Removals before this replay point are no longer replayed.
        let head = st.journal.head;
        st.objects.removed_snapped.retain(|_, at| *at >= head);
        let keys: Vec<ObjectId> = st.objects.map.keys().copied().collect();
        let generation = st.ckpt_gen + 1;
        let slot = generation % 2;
        (
            st.journal.head,
            st.journal.last_crc,
            keys,
            generation,
            st.layout.ckpt_start + slot * st.layout.ckpt_slot_blocks,
            st.layout.ckpt_slot_blocks,
        )
    };
    let mut enc = BodyEncoder::new();
    let mut min_ref = replay_lpos;
    let mut written = 0u64;
    let mut device_bytes = 0u64;
    let mut k = 0;
    while k < keys.len() {
        let mut drain = None;
        {
            let st = inner.st.borrow();
            let end = (k + KEYS_PER_SLICE).min(keys.len());
            // Every record before the head is applied: objects written now
            // reflect exactly those, and replay applies to objects with a
            // mark only the records from it on. Snapshot changes are not
            // idempotent (they move entries), so they must not be applied
            // twice; plain objects need no mark (their records are blind
            // assignments), unless they were removed with snapshot state
            // since the replay point.
            let mark = st.journal.head;
            while k < end {
                let key = keys[k];
                let recent = st.objects.removed_snapped.contains_key(&key);
                let Some(obj) = st.objects.get(&key) else {
                    if recent {
                        if enc.needs_drain(44) {
                            drain = Some(enc.drain_blocks());
                            break;
                        }
                        enc.push_tombstone(&key, mark);
                    }
                    k += 1;
                    continue;
                };
                if enc.needs_drain(BodyEncoder::bound(obj)) {
                    drain = Some(enc.drain_blocks());
                    break;
                }
                let mark = (recent || obj.snaps.is_some()).then_some(mark);
                enc.push(&key, obj, mark, |loc| match loc {
                    Loc::Data(p) => p,
                    Loc::Journal { recno, buf, off } => {
                        let rec = st
                            .journal
                            .rec(recno)
                            .expect("live block in a trimmed record");
                        min_ref = min_ref.min(rec.lpos);
                        disk_journal_ref(rec.lpos, rec.buf_first[buf as usize] + off)
                    }
                });
                k += 1;
            }
        }
        match drain {
            Some(chunk) => {
                let n = (chunk.len() / BLOCK_SIZE) as u64;
                check_slot(written + n, slot_blocks)?;
                let pos = (slot_start + 1 + written) * BLOCK_SIZE_U64;
                let len = chunk.len();
                let (r, _) = inner.dev.write_at(chunk, 0..len, pos, false).await;
                r.map_err(|e| StoreError::io("writing a checkpoint", e))?;
                written += n;
                device_bytes += len as u64;
            }
            None => yield_now().await,
        }
    }
    let (last, n_objects, body_bytes, body_crc) = enc.finish();
    if !last.is_empty() {
        let n = (last.len() / BLOCK_SIZE) as u64;
        check_slot(written + n, slot_blocks)?;
        let pos = (slot_start + 1 + written) * BLOCK_SIZE_U64;
        let len = last.len();
        let (r, _) = inner.dev.write_at(last, 0..len, pos, false).await;
        r.map_err(|e| StoreError::io("writing a checkpoint", e))?;
        device_bytes += len as u64;
    }
    let trim_lpos = min_ref;
    let trim_prev_crc = {
        let st = inner.st.borrow();
        match st
            .journal
            .recno_at(trim_lpos)
            .and_then(|r| st.journal.rec(r))
        {
            Some(rec) => rec.prev_crc,
            None if trim_lpos == replay_lpos => replay_prev_crc,
            None => {
                return Err(StoreError::Corrupt(format!(
                    "checkpoint references journal position {trim_lpos} with no record"
                )));
            }
        }
    };
    let header = CheckpointHeader {
        generation,
        replay_lpos,
        replay_prev_crc,
        trim_lpos,
        trim_prev_crc,
        n_objects,
        body_bytes,
        body_crc,
    };
    let (r, _) = inner
        .dev
        .write_at(
            header.encode(),
            0..BLOCK_SIZE,
            slot_start * BLOCK_SIZE_U64,
            false,
        )
        .await;
    r.map_err(|e| StoreError::io("writing a checkpoint header", e))?;
    inner
        .dev
        .flush()
        .await
        .map_err(|e| StoreError::io("flushing a checkpoint", e))?;
    let mut st = inner.st.borrow_mut();
    st.counters.device_flushes += 1;
    st.counters.checkpoint_bytes += device_bytes + BLOCK_SIZE_U64;
    st.counters.checkpoints += 1;
    st.ckpt_gen = generation;
    st.journal.trim(trim_lpos);
    Ok(())
}

fn check_slot(blocks: u64, slot_blocks: u64) -> Result<(), StoreError> {
    if 1 + blocks > slot_blocks {
        return Err(StoreError::Corrupt(format!(
            "checkpoint of {blocks} blocks exceeds its slot of {slot_blocks}"
        )));
    }
    Ok(())
}
