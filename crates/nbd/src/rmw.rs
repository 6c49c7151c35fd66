//! Byte-granular I/O over a volume that only accepts 4 KiB-aligned I/O:
//! read-modify-write of partial blocks, under a per-range lock so that
//! concurrent writes touching one block never lose each other's updates.
//!
//! Every modifying request (aligned or not) takes the lock on the aligned
//! range it covers before touching the volume: an aligned write racing a
//! read-modify-write of the same block would otherwise be overwritten by
//! the stale half of that block. Reads take no lock: each volume read is
//! atomic per request, so a read sees either the old or the new data.
//!
//! The lock table is shared by every connection of one worker thread to
//! the same volume (see `server.rs`); it is not shared between worker
//! threads, which is why a multi-worker server advertises a 4 KiB minimum
//! block size.

use std::cell::RefCell;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use pontoon_buf::AlignedBuf;
use pontoon_volume::{BlockVolume, VOLUME_BLOCK, VolumeError};

/// The volume's block size as a `usize`.
const BLOCK: usize = VOLUME_BLOCK as usize;

/// The aligned range covering `offset..offset+len`. The caller has checked
/// that the range lies inside a volume whose size is a multiple of the block.
pub(crate) fn covering(offset: u64, len: u64) -> Range<u64> {
    let start = offset / VOLUME_BLOCK * VOLUME_BLOCK;
    let end = (offset + len).div_ceil(VOLUME_BLOCK) * VOLUME_BLOCK;
    start..end
}

/// The aligned range inside `offset..offset+len` (possibly empty).
fn inner(offset: u64, len: u64) -> Range<u64> {
    let start = offset.div_ceil(VOLUME_BLOCK) * VOLUME_BLOCK;
    let end = (offset + len) / VOLUME_BLOCK * VOLUME_BLOCK;
    start..end.max(start)
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// A FIFO lock over byte ranges of one volume.
///
/// A request may proceed once no earlier request (holding or still waiting)
/// overlaps its range, so waiters are served in arrival order among
/// overlapping ranges and none starves. Each request locks exactly one
/// range and never nests, so there is no deadlock.
#[derive(Default)]
pub(crate) struct RangeLocks {
    state: RefCell<LockState>,
}

#[derive(Default)]
struct LockState {
    next_id: u64,
    /// In arrival order.
    entries: Vec<Entry>,
}

struct Entry {
    id: u64,
    range: Range<u64>,
    granted: bool,
    waker: Option<Waker>,
}

impl LockState {
    /// Whether entry `idx` may be granted: no earlier entry overlaps it.
    fn grantable(&self, idx: usize) -> bool {
        let r = &self.entries[idx].range;
        !self.entries[..idx].iter().any(|e| overlaps(&e.range, r))
    }

    /// Removes entry `id` and wakes the waiters its range was blocking.
    fn remove(&mut self, id: u64) -> Vec<Waker> {
        let Some(idx) = self.entries.iter().position(|e| e.id == id) else {
            return Vec::new();
        };
        let gone = self.entries.remove(idx);
        self.entries[idx..]
            .iter_mut()
            .filter(|e| !e.granted && overlaps(&e.range, &gone.range))
            .filter_map(|e| e.waker.take())
            .collect()
    }
}

impl RangeLocks {
    /// Waits for exclusive use of `range`.
    pub(crate) fn lock(self: &Rc<Self>, range: Range<u64>) -> LockFuture {
        LockFuture {
            locks: self.clone(),
            range,
            id: None,
        }
    }

    /// Number of ranges held or waited for (tests and assertions).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.borrow().entries.len()
    }
}

/// Resolves to a [`RangeGuard`] once the range is free; dropping it while
/// waiting gives up the place in the queue.
pub(crate) struct LockFuture {
    locks: Rc<RangeLocks>,
    range: Range<u64>,
    id: Option<u64>,
}

impl Future for LockFuture {
    type Output = RangeGuard;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RangeGuard> {
        let this = &mut *self;
        let mut st = this.locks.state.borrow_mut();
        let id = match this.id {
            Some(id) => id,
            None => {
                let id = st.next_id;
                st.next_id += 1;
                st.entries.push(Entry {
                    id,
                    range: this.range.clone(),
                    granted: false,
                    waker: None,
                });
                this.id = Some(id);
                id
            }
        };
        let Some(idx) = st.entries.iter().position(|e| e.id == id) else {
            unreachable!("a waiting lock entry is only removed by its own future");
        };
        if st.grantable(idx) {
            st.entries[idx].granted = true;
            drop(st);
            this.id = None;
            Poll::Ready(RangeGuard {
                locks: this.locks.clone(),
                id,
            })
        } else {
            st.entries[idx].waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for LockFuture {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let wakers = self.locks.state.borrow_mut().remove(id);
            wakers.into_iter().for_each(Waker::wake);
        }
    }
}

/// Exclusive use of a range until dropped.
pub(crate) struct RangeGuard {
    locks: Rc<RangeLocks>,
    id: u64,
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        let wakers = self.locks.state.borrow_mut().remove(self.id);
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// Reads `offset..offset+len`: returns the covering aligned buffer and
/// where the requested bytes start in it.
pub(crate) async fn read<V: BlockVolume>(
    vol: &V,
    offset: u64,
    len: u64,
) -> Result<(AlignedBuf, usize), VolumeError> {
    let cover = covering(offset, len);
    let buf = vol.read(cover.start, cover.end - cover.start).await?;
    if buf.len() as u64 != cover.end - cover.start {
        return Err(VolumeError::Io(format!(
            "volume returned {} bytes for a {}-byte read",
            buf.len(),
            cover.end - cover.start
        )));
    }
    Ok((buf, (offset - cover.start) as usize))
}

/// Writes `len` bytes at `offset`. `buf` covers the aligned range around
/// the request ([`covering`]) and holds the new data at `offset % 4096`;
/// partial head and tail blocks are filled in from the volume under the
/// range lock before one aligned write.
pub(crate) async fn write<V: BlockVolume>(
    vol: &V,
    locks: &Rc<RangeLocks>,
    offset: u64,
    len: u64,
    mut buf: AlignedBuf,
    fua: bool,
) -> Result<(), VolumeError> {
    if len == 0 {
        return Ok(());
    }
    let cover = covering(offset, len);
    assert_eq!(buf.len() as u64, cover.end - cover.start);
    let head = (offset - cover.start) as usize;
    let data_end = head + len as usize;
    let _guard = locks.lock(cover.clone()).await;
    let mut first: Option<AlignedBuf> = None;
    if head != 0 {
        let blk = read_block(vol, cover.start).await?;
        buf[..head].copy_from_slice(&blk[..head]);
        first = Some(blk);
    }
    if !data_end.is_multiple_of(BLOCK) {
        let last_at = cover.end - VOLUME_BLOCK;
        let at = (last_at - cover.start) as usize;
        let blk = match first {
            Some(b) if last_at == cover.start => b,
            _ => read_block(vol, last_at).await?,
        };
        buf[data_end..].copy_from_slice(&blk[data_end - at..]);
    }
    vol.write(cover.start, buf, fua).await
}

/// Makes `offset..offset+len` read as zeros: the aligned middle through the
/// volume's `write_zeroes` (deallocating if `may_unmap`), partial edge
/// blocks by read-modify-write.
///
/// With `may_unmap`, an edge block left holding nothing but zeros is
/// deallocated with the middle instead of written: storing a block of
/// zeros would allocate space (even where the block was a hole) and show
/// up as data in block status. Clients such as qemu split long zeroing
/// requests at 32 MiB, so every split from an odd offset has such edges.
pub(crate) async fn write_zeroes<V: BlockVolume>(
    vol: &V,
    locks: &Rc<RangeLocks>,
    offset: u64,
    len: u64,
    may_unmap: bool,
    fua: bool,
) -> Result<(), VolumeError> {
    if len == 0 {
        return Ok(());
    }
    let cover = covering(offset, len);
    let mid = inner(offset, len);
    let end = offset + len;
    let _guard = locks.lock(cover.clone()).await;
    // The range handed to the volume's write_zeroes: the middle, grown by
    // the edge blocks that end up all zeros. The edges are adjacent to the
    // middle (or to each other when it is empty), so it stays one range.
    let mut zero: Option<Range<u64>> = (!mid.is_empty()).then(|| mid.clone());
    let mut edge_writes = Vec::new();
    // The edge blocks the request covers only partly (one block if the
    // request sits inside it).
    let first = cover.start;
    let last = cover.end - VOLUME_BLOCK;
    let partial = |at: u64| !(offset <= at && at + VOLUME_BLOCK <= end);
    let edges = [Some(first), (last != first).then_some(last)];
    for blk_at in edges.into_iter().flatten().filter(|&at| partial(at)) {
        let mut blk = read_block(vol, blk_at).await?;
        let from = offset.max(blk_at) - blk_at;
        let to = end.min(blk_at + VOLUME_BLOCK) - blk_at;
        blk[from as usize..to as usize].fill(0);
        if may_unmap && blk.iter().all(|&b| b == 0) {
            let r = zero.get_or_insert(blk_at..blk_at + VOLUME_BLOCK);
            *r = r.start.min(blk_at)..r.end.max(blk_at + VOLUME_BLOCK);
        } else {
            edge_writes.push((blk_at, blk));
        }
    }
    if let Some(z) = &zero {
        vol.write_zeroes(z.start, z.end - z.start, may_unmap)
            .await?;
    }
    for (at, blk) in edge_writes {
        vol.write(at, blk, fua).await?;
    }
    if fua && zero.is_some() {
        vol.flush().await?;
    }
    Ok(())
}

/// Discards the whole blocks inside `offset..offset+len` (a trim is a
/// hint: partial blocks at the edges are left alone).
pub(crate) async fn trim<V: BlockVolume>(
    vol: &V,
    locks: &Rc<RangeLocks>,
    offset: u64,
    len: u64,
    fua: bool,
) -> Result<(), VolumeError> {
    let mid = inner(offset, len);
    if mid.is_empty() {
        return Ok(());
    }
    let _guard = locks.lock(mid.clone()).await;
    vol.discard(mid.start, mid.end - mid.start).await?;
    if fua {
        vol.flush().await?;
    }
    Ok(())
}

async fn read_block<V: BlockVolume>(vol: &V, at: u64) -> Result<AlignedBuf, VolumeError> {
    let blk = vol.read(at, VOLUME_BLOCK).await?;
    if blk.len() != BLOCK {
        return Err(VolumeError::Io(format!(
            "volume returned {} bytes for a block read",
            blk.len()
        )));
    }
    Ok(blk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;
    use pontoon_volume::MemVolume;

    #[test]
    fn covering_and_inner_ranges() {
        assert_eq!(covering(1000, 5000), 0..8192);
        assert_eq!(covering(4096, 4096), 4096..8192);
        assert_eq!(covering(4095, 2), 0..8192);
        assert_eq!(inner(1000, 5000), 4096..4096);
        assert_eq!(inner(1000, 10000), 4096..8192);
        assert_eq!(inner(0, 100), 0..0);
    }

    #[test]
    fn overlapping_waiters_are_served_in_order_and_cancellation_unblocks() {
        let locks = Rc::new(RangeLocks::default());
        let a = locks.lock(0..8192).now_or_never().unwrap();
        let mut b = Box::pin(locks.lock(4096..12288));
        assert!((&mut b).now_or_never().is_none());
        // c overlaps only b (waiting): it must queue behind b.
        let mut c = Box::pin(locks.lock(8192..16384));
        assert!((&mut c).now_or_never().is_none());
        // d overlaps nothing: granted at once.
        let d = locks
            .lock(1 << 20..(1 << 20) + 4096)
            .now_or_never()
            .unwrap();
        drop(a);
        let gb = (&mut b).now_or_never().unwrap();
        assert!((&mut c).now_or_never().is_none());
        drop(gb);
        let gc = (&mut c).now_or_never().unwrap();
        drop((gc, d));
        assert_eq!(locks.len(), 0);
        // A cancelled waiter leaves the queue.
        let g = locks.lock(0..4096).now_or_never().unwrap();
        let mut w = Box::pin(locks.lock(0..4096));
        assert!((&mut w).now_or_never().is_none());
        drop(w);
        drop(g);
        assert_eq!(locks.len(), 0);
    }

    /// A volume whose reads yield to the executor once, so that concurrent
    /// read-modify-writes interleave if nothing serialises them.
    #[derive(Clone)]
    struct Yielding(MemVolume);

    impl BlockVolume for Yielding {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read_only(&self) -> bool {
            self.0.read_only()
        }
        async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
            let r = self.0.read(offset, len).await;
            yield_now().await;
            r
        }
        async fn write(&self, offset: u64, data: AlignedBuf, fua: bool) -> Result<(), VolumeError> {
            yield_now().await;
            self.0.write(offset, data, fua).await
        }
        async fn flush(&self) -> Result<(), VolumeError> {
            self.0.flush().await
        }
        async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
            self.0.discard(offset, len).await
        }
        async fn write_zeroes(&self, offset: u64, len: u64, u: bool) -> Result<(), VolumeError> {
            self.0.write_zeroes(offset, len, u).await
        }
        async fn allocation(
            &self,
            offset: u64,
            len: u64,
        ) -> Result<Vec<pontoon_volume::Extent>, VolumeError> {
            self.0.allocation(offset, len).await
        }
    }

    async fn yield_now() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await
    }

    fn payload(offset: u64, data: &[u8]) -> AlignedBuf {
        let cover = covering(offset, data.len() as u64);
        let mut buf = AlignedBuf::zeroed((cover.end - cover.start) as usize);
        let at = (offset - cover.start) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        buf
    }

    #[test]
    fn concurrent_unaligned_writes_to_one_block_keep_every_byte() {
        let vol = Yielding(MemVolume::new(1 << 20));
        let locks = Rc::new(RangeLocks::default());
        let mut pool = LocalPool::new();
        // 64 writers, each owning a disjoint 64-byte slice of block 1, plus
        // one aligned writer of block 2 and unaligned writers spanning 1..3.
        for i in 0..64u64 {
            let (vol, locks) = (vol.clone(), locks.clone());
            pool.spawner()
                .spawn_local(async move {
                    let off = 4096 + i * 64;
                    let data = vec![i as u8 + 1; 64];
                    write(&vol, &locks, off, 64, payload(off, &data), false)
                        .await
                        .unwrap();
                })
                .unwrap();
        }
        pool.run();
        let (blk, at) = read(&vol.0, 4096, 4096).now_or_never().unwrap().unwrap();
        for i in 0..64usize {
            assert!(
                blk[at + i * 64..at + (i + 1) * 64]
                    .iter()
                    .all(|&b| b == i as u8 + 1),
                "slice {i} lost its update"
            );
        }
        assert_eq!(locks.len(), 0);
    }

    /// Runs a future that completes at once (MemVolume never waits).
    fn now<T>(f: impl Future<Output = Result<T, VolumeError>>) -> T {
        f.now_or_never()
            .expect("completes at once")
            .expect("succeeds")
    }

    #[test]
    fn write_zeroes_with_unmap_deallocates_edge_blocks_left_all_zero() {
        let vol = MemVolume::new(1 << 20);
        let locks = Rc::new(RangeLocks::default());
        // Inside a hole: nothing gets allocated (it used to store a block
        // of zeros).
        now(write_zeroes(&vol, &locks, 5, 100, true, false));
        now(write_zeroes(&vol, &locks, 4000, 200, true, true));
        assert_eq!(vol.allocated_blocks(), 0);
        // Data straddling blocks 2 and 3, zeroed again: both are freed.
        let at = 3 * 4096 - 10;
        now(write(&vol, &locks, at, 20, payload(at, &[7; 20]), false));
        assert_eq!(vol.allocated_blocks(), 2);
        now(write_zeroes(&vol, &locks, at, 20, true, false));
        assert_eq!(vol.allocated_blocks(), 0);
        // An edge that keeps other data is written; the other edge and the
        // middle are deallocated: 5..12 of block 5 stay, blocks 6-8 go.
        let at = 5 * 4096 + 5;
        now(write(
            &vol,
            &locks,
            at,
            3 * 4096,
            payload(at, &[9; 3 * 4096]),
            false,
        ));
        assert_eq!(vol.allocated_blocks(), 4);
        now(write_zeroes(&vol, &locks, at + 7, 3 * 4096 - 7, true, true));
        assert_eq!(vol.allocated_blocks(), 1);
        let (b, off) = now(read(&vol, 5 * 4096, 4 * 4096));
        let b = &b[off..];
        assert!(b[..5].iter().all(|&x| x == 0));
        assert!(b[5..12].iter().all(|&x| x == 9));
        assert!(b[12..].iter().all(|&x| x == 0));
        // Without unmap (NO_HOLE), zeros are stored, as asked.
        now(write_zeroes(&vol, &locks, 100 * 4096 + 1, 10, false, false));
        assert_eq!(vol.allocated_blocks(), 2);
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn unaligned_write_zeroes_and_trim_touch_only_their_bytes() {
        let vol = MemVolume::new(1 << 20);
        let locks = Rc::new(RangeLocks::default());
        let ones = vec![1u8; 3 * 4096];
        write(&vol, &locks, 0, ones.len() as u64, payload(0, &ones), false)
            .now_or_never()
            .unwrap()
            .unwrap();
        // Zero 100..9000: partial block 0, whole block 1, partial block 2.
        write_zeroes(&vol, &locks, 100, 8900, true, true)
            .now_or_never()
            .unwrap()
            .unwrap();
        let (b, at) = read(&vol, 0, 3 * 4096).now_or_never().unwrap().unwrap();
        let b = &b[at..];
        assert!(b[..100].iter().all(|&x| x == 1));
        assert!(b[100..9000].iter().all(|&x| x == 0));
        assert!(b[9000..].iter().all(|&x| x == 1));
        // Zero inside one block.
        write_zeroes(&vol, &locks, 9100, 10, false, false)
            .now_or_never()
            .unwrap()
            .unwrap();
        let (b, at) = read(&vol, 9000, 200).now_or_never().unwrap().unwrap();
        assert!(b[at..at + 100].iter().all(|&x| x == 1));
        assert!(b[at + 100..at + 110].iter().all(|&x| x == 0));
        assert!(b[at + 110..at + 200].iter().all(|&x| x == 1));
        // Trim keeps partial blocks and frees whole ones.
        let before = vol.allocated_blocks();
        trim(&vol, &locks, 10, 4096, false)
            .now_or_never()
            .unwrap()
            .unwrap();
        assert_eq!(vol.allocated_blocks(), before);
        trim(&vol, &locks, 8192, 4096, false)
            .now_or_never()
            .unwrap()
            .unwrap();
        assert_eq!(vol.allocated_blocks(), before - 1);
    }
}
