//! Group commit: the committer turns each batch of queued writes into one
//! durable journal record, then applies it and wakes the writers.
//!
//! While one record is being written the next batch fills up, so a single
//! durable write (and, for redirected data, one flush) covers every write
//! that was ready: at queue depth 1 a write costs one device write, at queue
//! depth 32 one device write covers tens of them.

use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_types::BLOCK_SIZE_U64;

use crate::device::BlockDevice;
use crate::error::StoreError;
use crate::record::{self, EntryKind, FLAG_WRAP, RecordHead};
use crate::state::{Batch, InlineRef, JRec};
use crate::store::Inner;

/// Runs until the store closes (or fails).
pub(crate) async fn committer<D: BlockDevice>(inner: Rc<Inner<D>>) {
    loop {
        loop {
            let next = {
                let st = inner.st.borrow();
                if !st.batch.is_empty() {
                    Some(true)
                } else if st.closing || st.failed.is_some() {
                    Some(false)
                } else {
                    None
                }
            };
            match next {
                Some(true) => break,
                Some(false) => return,
                None => inner.work.wait().await,
            }
        }
        let (batch, id) = {
            let mut st = inner.st.borrow_mut();
            let id = st.open_batch;
            st.open_batch += 1;
            let (entries, crcs) = std::mem::take(&mut st.spare);
            let fresh = Batch {
                entries,
                crcs,
                ..Default::default()
            };
            (std::mem::replace(&mut st.batch, fresh), id)
        };
        inner.room.notify();
        if let Err(e) = commit(&inner, batch, id).await {
            inner.fail(e.to_string());
            return;
        }
    }
}

/// Writes one batch as a record and applies it.
async fn commit<D: BlockDevice>(inner: &Inner<D>, batch: Batch, id: u64) -> Result<(), StoreError> {
    let header_blocks = record::header_blocks_for(batch.entry_bytes) as u64;
    let total = header_blocks + batch.data_blocks as u64;
    let ring = inner.st.borrow().journal.blocks;
    debug_assert!(
        total <= ring / 4,
        "record of {total} blocks in a ring of {ring}"
    );

    // Wait for ring space, including any tail skipped to wrap.
    let mut waited_since: Option<std::time::Instant> = None;
    let (lpos, skip) = loop {
        let fits = {
            let mut st = inner.st.borrow_mut();
            if st.failed.is_some() {
                return Err(StoreError::Failed("earlier failure".into()));
            }
            let (head, used) = (st.journal.head, st.journal.used());
            let phys = head % ring;
            let skip = if phys + total > ring { ring - phys } else { 0 };
            let fits = used + skip + total <= ring;
            st.want_space = !fits;
            fits.then_some((head, skip))
        };
        match fits {
            Some(at) => break at,
            None => {
                waited_since.get_or_insert_with(std::time::Instant::now);
                inner.kick.notify();
                inner.space.wait().await;
            }
        }
    };

    if let Some(t) = waited_since {
        let mut st = inner.st.borrow_mut();
        st.counters.journal_full_waits += 1;
        st.counters.journal_full_wait += t.elapsed();
    }
    if batch.needs_flush {
        inner
            .dev
            .flush()
            .await
            .map_err(|e| StoreError::io("flushing redirected data before its record", e))?;
        inner.st.borrow_mut().counters.device_flushes += 1;
    }
    let (journal_start, nonce) = {
        let st = inner.st.borrow();
        (st.layout.journal_start, st.journal.nonce)
    };
    let jdev = inner.journal_dev();
    let mut lpos = lpos;
    if skip > 0 {
        let prev = inner.st.borrow().journal.last_crc;
        let head = RecordHead {
            flags: FLAG_WRAP,
            lpos,
            prev_crc: prev,
            nonce,
            header_blocks: 1,
            data_blocks: 0,
            n_entries: 0,
        };
        let (hdr, crc) = record::encode(&head, &[], &[], &[]);
        let pos = (journal_start + lpos % ring) * BLOCK_SIZE_U64;
        let (r, _) = jdev
            .write_at(hdr, 0..BLOCK_SIZE_U64 as usize, pos, true)
            .await;
        r.map_err(|e| StoreError::io("writing a journal wrap marker", e))?;
        let mut st = inner.st.borrow_mut();
        st.counters.journal_bytes += BLOCK_SIZE_U64;
        st.journal.push(JRec {
            lpos,
            prev_crc: prev,
            blocks: skip,
            bufs: Vec::new(),
            buf_first: Vec::new(),
            live: 0,
            inline: Vec::new(),
        });
        st.journal.last_crc = crc;
        lpos += skip;
    }

    let Batch {
        entries,
        crcs,
        bufs,
        data_blocks,
        reserved_blocks,
        reserved_objects,
        reserved_meta,
        ..
    } = batch;
    let mut buf_first = Vec::with_capacity(bufs.len());
    let mut at = 0u32;
    for b in &bufs {
        buf_first.push(at);
        at += (b.len() as u64 / BLOCK_SIZE_U64) as u32;
    }
    debug_assert_eq!(at, data_blocks);
    let prev = inner.st.borrow().journal.last_crc;
    let head = RecordHead {
        flags: 0,
        lpos,
        prev_crc: prev,
        nonce,
        header_blocks: header_blocks as u32,
        data_blocks,
        n_entries: entries.len() as u32,
    };
    let (hdr, crc) = record::encode(&head, &entries, &crcs, &buf_first);
    let mut iov: Vec<AlignedBuf> = Vec::with_capacity(bufs.len() + 1);
    iov.push(hdr);
    iov.extend(bufs);
    let pos = (journal_start + lpos % ring) * BLOCK_SIZE_U64;
    let (r, mut iov) = jdev.write_vectored_at(iov, pos, true).await;
    r.map_err(|e| StoreError::io("writing a journal record", e))?;
    iov.remove(0);
    let bufs = iov;

    let inline = entries
        .iter()
        .filter(|e| e.kind == EntryKind::WriteInline)
        .map(|e| InlineRef {
            oid: e.oid,
            start_blk: e.start_blk,
            nblk: e.nblk,
            buf: e.buf,
            first: e.loc as u32,
        })
        .collect();
    let mut st = inner.st.borrow_mut();
    let recno = st.journal.push(JRec {
        lpos,
        prev_crc: prev,
        blocks: total,
        bufs,
        buf_first,
        live: 0,
        inline,
    });
    st.journal.last_crc = crc;
    st.apply(recno, &entries, &crcs, true);
    let (mut entries, mut crcs) = (entries, crcs);
    entries.clear();
    crcs.clear();
    st.spare = (entries, crcs);
    st.reserved_blocks -= reserved_blocks;
    st.reserved_objects -= reserved_objects;
    st.reserved_meta -= reserved_meta;
    st.committed = id;
    st.counters.records += 1;
    st.counters.journal_bytes += total * BLOCK_SIZE_U64;
    let kick = st.journal.used() * 4 > ring;
    drop(st);
    inner.commit.notify();
    if kick {
        inner.kick.notify();
    }
    Ok(())
}
