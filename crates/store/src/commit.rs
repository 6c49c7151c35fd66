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
use smallvec::SmallVec;

use crate::record::{self, Entry, EntryKind, FLAG_CONTINUED, FLAG_WRAP, RecordHead};
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

/// One journal record of a batch, as it is written.
struct Part {
    entries: Vec<Entry>,
    crcs: Vec<u32>,
    bufs: Vec<AlignedBuf>,
    data_blocks: u32,
    header_blocks: u64,
}

impl Part {
    fn blocks(&self) -> u64 {
        self.header_blocks + u64::from(self.data_blocks)
    }
}

/// Cuts entries too many for one record into a chain of records, each
/// with its own copy of its entries' inline data (a rare path: recovery
/// installing an object with many clones, whose data is mostly redirected).
fn chain_parts(entries: &[Entry], crcs: &[u32], bufs: &[AlignedBuf]) -> Vec<Part> {
    let block = BLOCK_SIZE_U64 as usize;
    let (cuts, _) = record::chain_cuts(entries);
    let mut parts = Vec::with_capacity(cuts.len());
    let mut from = 0;
    for end in cuts {
        let slice = &entries[from..end];
        from = end;
        let data_blocks: u32 = slice
            .iter()
            .filter(|e| e.kind == EntryKind::WriteInline)
            .map(|e| e.nblk)
            .sum();
        let mut data = AlignedBuf::zeroed(data_blocks as usize * block);
        let mut part = Part {
            entries: Vec::with_capacity(slice.len()),
            crcs: Vec::new(),
            bufs: Vec::new(),
            data_blocks,
            header_blocks: 0,
        };
        let mut at = 0u32;
        let mut bytes = 0;
        for e in slice {
            let mut e = *e;
            bytes += e.encoded_len();
            if matches!(e.kind, EntryKind::WriteInline | EntryKind::WriteRow) {
                let c = e.crc_off as usize;
                e.crc_off = part.crcs.len() as u32;
                part.crcs.extend_from_slice(&crcs[c..c + e.nblk as usize]);
            }
            if e.kind == EntryKind::WriteInline {
                let len = e.nblk as usize * block;
                let src = &bufs[e.buf as usize][e.loc as usize * block..][..len];
                data[at as usize * block..][..len].copy_from_slice(src);
                e.buf = 0;
                e.loc = u64::from(at);
                at += e.nblk;
            }
            part.entries.push(e);
        }
        part.header_blocks = record::header_blocks_for(bytes) as u64;
        if data_blocks > 0 {
            part.bufs.push(data);
        }
        parts.push(part);
    }
    parts
}

/// Writes one batch as a record (or, too large for one, as a chain of
/// records written one after another) and applies it.
async fn commit<D: BlockDevice>(inner: &Inner<D>, batch: Batch, id: u64) -> Result<(), StoreError> {
    let Batch {
        entries,
        crcs,
        bufs,
        data_blocks,
        entry_bytes,
        needs_flush,
        reserved_blocks,
        reserved_objects,
        reserved_meta,
        chained,
        ..
    } = batch;
    let (mut parts, spare): (SmallVec<[Part; 1]>, _) = if chained {
        (chain_parts(&entries, &crcs, &bufs).into(), (entries, crcs))
    } else {
        let part = Part {
            entries,
            crcs,
            bufs,
            data_blocks,
            header_blocks: record::header_blocks_for(entry_bytes) as u64,
        };
        (smallvec::smallvec![part], Default::default())
    };
    let total: u64 = parts.iter().map(Part::blocks).sum();
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
    if needs_flush {
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

    // Each record is durable before the next is written, so only the last
    // one written can be torn, as replay assumes; a chain cut short by a
    // crash is dropped whole at replay, and nothing was applied of it.
    let mut prev = inner.st.borrow().journal.last_crc;
    let n_parts = parts.len();
    let mut written: SmallVec<[(u64, u32, Vec<u32>); 1]> = SmallVec::with_capacity(n_parts);
    for (i, part) in parts.iter_mut().enumerate() {
        let mut buf_first = Vec::with_capacity(part.bufs.len());
        let mut at = 0u32;
        for b in &part.bufs {
            buf_first.push(at);
            at += (b.len() as u64 / BLOCK_SIZE_U64) as u32;
        }
        debug_assert_eq!(at, part.data_blocks);
        let head = RecordHead {
            flags: if i + 1 < n_parts { FLAG_CONTINUED } else { 0 },
            lpos,
            prev_crc: prev,
            nonce,
            header_blocks: part.header_blocks as u32,
            data_blocks: part.data_blocks,
            n_entries: part.entries.len() as u32,
        };
        let (hdr, crc) = record::encode(&head, &part.entries, &part.crcs, &buf_first);
        let mut iov: Vec<AlignedBuf> = Vec::with_capacity(part.bufs.len() + 1);
        iov.push(hdr);
        iov.append(&mut part.bufs);
        let pos = (journal_start + lpos % ring) * BLOCK_SIZE_U64;
        let (r, mut iov) = jdev.write_vectored_at(iov, pos, true).await;
        r.map_err(|e| StoreError::io("writing a journal record", e))?;
        iov.remove(0);
        part.bufs = iov;
        written.push((lpos, prev, buf_first));
        prev = crc;
        lpos += part.blocks();
    }

    let mut st = inner.st.borrow_mut();
    for (part, (lpos, prev_crc, buf_first)) in parts.iter_mut().zip(written) {
        let inline = InlineRef::of(&part.entries);
        let recno = st.journal.push(JRec {
            lpos,
            prev_crc,
            blocks: part.blocks(),
            bufs: std::mem::take(&mut part.bufs),
            buf_first,
            live: 0,
            inline,
        });
        st.apply(recno, &part.entries, &part.crcs, true);
    }
    st.journal.last_crc = prev;
    let (mut entries, mut crcs) = if chained {
        spare
    } else {
        let part = parts.pop().expect("one part");
        (part.entries, part.crcs)
    };
    entries.clear();
    crcs.clear();
    st.spare = (entries, crcs);
    st.reserved_blocks -= reserved_blocks;
    st.reserved_objects -= reserved_objects;
    st.reserved_meta -= reserved_meta;
    st.committed = id;
    st.counters.records += n_parts as u64;
    st.counters.journal_bytes += total * BLOCK_SIZE_U64;
    let kick = st.journal.used() * 4 > ring;
    drop(st);
    inner.commit.notify();
    if kick {
        inner.kick.notify();
    }
    Ok(())
}
