//! An in-memory [`BlockDevice`] that models a volatile write cache, for
//! power-failure tests and simulation.
//!
//! Plain writes land in a cache until a flush; [`MemDevice::crash`] keeps a
//! random subset of the cached 4 KiB sectors (so multi-block writes tear) and
//! returns the image a restarted machine would see. Durable writes bypass the
//! cache, as FUA writes do.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use pontoon_buf::AlignedBuf;
use pontoon_types::BLOCK_SIZE;

use crate::device::{BlockDevice, IoResult};

struct Disk {
    latest: Vec<u8>,
    persistent: Vec<u8>,
    /// Sectors written since the last flush, oldest first: (offset, data).
    cached: Vec<(u64, Vec<u8>)>,
    /// Sectors of writes caught in flight by the freeze (may land torn).
    in_flight: Vec<(u64, Vec<u8>)>,
    fail_writes: bool,
    yield_every_op: bool,
    /// Operations left before the device freezes (never completes again).
    ops_before_freeze: Option<u64>,
    writes: u64,
    flushes: u64,
}

/// Handle to an in-memory disk; clones share the same disk.
#[derive(Clone)]
pub struct MemDevice {
    disk: Rc<RefCell<Disk>>,
}

impl MemDevice {
    /// A zero-filled disk of `size` bytes (rounded down to 4 KiB).
    pub fn new(size: u64) -> Self {
        let len = (size as usize) & !(BLOCK_SIZE - 1);
        // Two zeroed allocations rather than a copy: untouched pages stay
        // unmapped, which keeps large simulated disks cheap.
        Self::from_images(vec![0u8; len], vec![0u8; len])
    }

    /// A disk whose durable contents are `image`.
    pub fn from_image(image: Vec<u8>) -> Self {
        Self::from_images(image.clone(), image)
    }

    fn from_images(latest: Vec<u8>, persistent: Vec<u8>) -> Self {
        Self {
            disk: Rc::new(RefCell::new(Disk {
                latest,
                persistent,
                cached: Vec::new(),
                in_flight: Vec::new(),
                fail_writes: false,
                yield_every_op: false,
                ops_before_freeze: None,
                writes: 0,
                flushes: 0,
            })),
        }
    }

    /// Makes every operation yield once before completing, so concurrent
    /// tasks interleave at device I/O as they would on a real device.
    pub fn set_yielding(&self, on: bool) {
        self.disk.borrow_mut().yield_every_op = on;
    }

    /// After `ops` more operations, the device stops completing anything: the
    /// instant of a power failure, with everything later still in flight.
    pub fn freeze_after(&self, ops: u64) {
        self.disk.borrow_mut().ops_before_freeze = Some(ops);
    }

    /// Makes every later write and flush fail with EIO (a dying device).
    pub fn set_fail_writes(&self, on: bool) {
        self.disk.borrow_mut().fail_writes = on;
    }

    /// The image after a power failure: the durable contents plus the cached
    /// sectors, then the sectors of writes caught in flight, for which
    /// `keep(sector_index)` answers true, applied in order.
    pub fn crash_image(&self, mut keep: impl FnMut(usize) -> bool) -> Vec<u8> {
        let d = self.disk.borrow();
        let mut img = d.persistent.clone();
        for (i, (pos, data)) in d.cached.iter().chain(d.in_flight.iter()).enumerate() {
            if keep(i) {
                let p = *pos as usize;
                img[p..p + data.len()].copy_from_slice(data);
            }
        }
        img
    }

    /// A power failure and restart in place: like [`MemDevice::crash_image`]
    /// with `keep`, but the surviving image becomes this device's contents
    /// (nothing cached, nothing in flight, no longer frozen) without
    /// allocating a new disk. Every clone of the handle sees the restarted disk.
    pub fn power_cycle(&self, mut keep: impl FnMut(usize) -> bool) {
        let mut guard = self.disk.borrow_mut();
        let d = &mut *guard;
        let cached = std::mem::take(&mut d.cached);
        let in_flight = std::mem::take(&mut d.in_flight);
        let written = cached.iter().chain(in_flight.iter());
        for (i, (pos, data)) in written.clone().enumerate() {
            if keep(i) {
                let p = *pos as usize;
                d.persistent[p..p + data.len()].copy_from_slice(data);
            }
        }
        // Only the sectors written since the last flush can differ.
        for (pos, data) in written {
            let r = *pos as usize..*pos as usize + data.len();
            d.latest[r.clone()].copy_from_slice(&d.persistent[r]);
        }
        d.ops_before_freeze = None;
    }

    /// The current contents as reads see them (nothing lost).
    pub fn image(&self) -> Vec<u8> {
        self.disk.borrow().latest.clone()
    }

    /// Number of cached (not yet durable) sectors.
    pub fn cached_sectors(&self) -> usize {
        self.disk.borrow().cached.len()
    }

    /// Overwrites bytes directly (durably), as a disk corrupting itself would.
    pub fn corrupt(&self, pos: u64, bytes: &[u8]) {
        let mut d = self.disk.borrow_mut();
        let p = pos as usize;
        d.latest[p..p + bytes.len()].copy_from_slice(bytes);
        d.persistent[p..p + bytes.len()].copy_from_slice(bytes);
        d.cached.retain(|(cp, data)| {
            let (cs, ce) = (*cp as usize, *cp as usize + data.len());
            ce <= p || cs >= p + bytes.len()
        });
    }

    /// Counts of (writes, flushes) issued so far.
    pub fn counters(&self) -> (u64, u64) {
        let d = self.disk.borrow();
        (d.writes, d.flushes)
    }

    /// Yields (if configured), then waits forever once the device froze;
    /// a write caught by the freeze leaves its sectors as "in flight".
    async fn gate_write(&self, pos: u64, data: &[u8]) {
        if self.frozen_now() {
            {
                let mut d = self.disk.borrow_mut();
                for (i, sector) in data.chunks(BLOCK_SIZE).enumerate() {
                    d.in_flight
                        .push((pos + (i * BLOCK_SIZE) as u64, sector.to_vec()));
                }
            }
            std::future::pending::<()>().await;
        }
        self.gate().await;
    }

    fn frozen_now(&self) -> bool {
        self.disk.borrow().ops_before_freeze == Some(0)
    }

    /// Yields (if configured), then waits forever once the device froze.
    async fn gate(&self) {
        let (yielding, frozen) = {
            let mut d = self.disk.borrow_mut();
            let frozen = match &mut d.ops_before_freeze {
                Some(0) => true,
                Some(n) => {
                    *n -= 1;
                    false
                }
                None => false,
            };
            (d.yield_every_op, frozen)
        };
        if frozen {
            std::future::pending::<()>().await;
        }
        YieldOnce(!yielding).await;
    }
}

fn bounds(len: usize, pos: u64, n: usize) -> io::Result<usize> {
    let p = usize::try_from(pos).map_err(|_| io::Error::other("offset too large"))?;
    if p.checked_add(n).is_none_or(|end| end > len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "I/O past end of device",
        ));
    }
    Ok(p)
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.disk.borrow().latest.len() as u64
    }

    async fn read_at(&self, mut buf: AlignedBuf, range: Range<usize>, pos: u64) -> IoResult {
        self.gate().await;
        let d = self.disk.borrow();
        let n = range.len();
        match bounds(d.latest.len(), pos, n) {
            Ok(p) if range.end <= buf.len() => {
                buf[range].copy_from_slice(&d.latest[p..p + n]);
                drop(d);
                (Ok(()), buf)
            }
            Ok(_) => (
                Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "range outside buffer",
                )),
                buf,
            ),
            Err(e) => (Err(e), buf),
        }
    }

    async fn write_at(
        &self,
        buf: AlignedBuf,
        range: Range<usize>,
        pos: u64,
        durable: bool,
    ) -> IoResult {
        if range.end <= buf.len() {
            self.gate_write(pos, &buf[range.clone()]).await;
        } else {
            self.gate().await;
        }
        let mut d = self.disk.borrow_mut();
        if d.fail_writes {
            return (Err(io::Error::from_raw_os_error(libc::EIO)), buf);
        }
        let n = range.len();
        let p = match bounds(d.latest.len(), pos, n) {
            Ok(p) if range.end <= buf.len() => p,
            Ok(_) => {
                return (
                    Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "range outside buffer",
                    )),
                    buf,
                );
            }
            Err(e) => return (Err(e), buf),
        };
        d.writes += 1;
        let data = &buf[range];
        d.latest[p..p + n].copy_from_slice(data);
        if durable {
            d.persistent[p..p + n].copy_from_slice(data);
            d.cached.retain(|(cp, cd)| {
                let (cs, ce) = (*cp as usize, *cp as usize + cd.len());
                ce <= p || cs >= p + n
            });
        } else {
            for (i, sector) in data.chunks(BLOCK_SIZE).enumerate() {
                d.cached
                    .push(((p + i * BLOCK_SIZE) as u64, sector.to_vec()));
            }
        }
        drop(d);
        (Ok(()), buf)
    }

    async fn flush(&self) -> io::Result<()> {
        self.gate().await;
        let mut d = self.disk.borrow_mut();
        if d.fail_writes {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        d.flushes += 1;
        let Disk {
            persistent, cached, ..
        } = &mut *d;
        for (pos, data) in cached.drain(..) {
            let p = pos as usize;
            persistent[p..p + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
}

/// Completes on the second poll (or the first, when `.0` is true).
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn unflushed_writes_can_be_lost_and_torn() {
        let dev = MemDevice::new(64 * 1024);
        let buf = AlignedBuf::copy_from(&[1u8; 8192]);
        block_on(async {
            let (r, buf) = dev.write_at(buf, 0..8192, 0, false).await;
            r.unwrap();
            let (r, _) = dev.write_at(buf, 0..4096, 16384, true).await;
            r.unwrap();
        });
        assert_eq!(dev.cached_sectors(), 2);
        let img = dev.crash_image(|i| i == 1);
        assert_eq!(img[0], 0, "first sector lost");
        assert_eq!(img[4096], 1, "second sector kept");
        assert_eq!(img[16384], 1, "durable write survives");
        block_on(dev.flush()).unwrap();
        assert_eq!(dev.crash_image(|_| false)[0], 1);
    }
}
