//! The simulated disk: the store's in-memory device (volatile cache, torn
//! and lost writes on a crash, corruption) with latency on the virtual
//! clock, which a "slow disk" fault stretches.

use std::cell::Cell;
use std::io;
use std::ops::Range;
use std::rc::Rc;
use std::time::Duration;

use pontoon_buf::AlignedBuf;
use pontoon_store::device::IoResult;
use pontoon_store::{BlockDevice, MemDevice};

use crate::ctx::Ctx;

/// A [`MemDevice`] whose operations take virtual time.
pub struct SimDisk {
    pub(crate) mem: MemDevice,
    ctx: Rc<Ctx>,
    /// Extra latency per operation while a slow-disk fault lasts.
    pub(crate) slow: Rc<Cell<Duration>>,
    /// The drive died: every write fails.
    pub(crate) dead: Rc<Cell<bool>>,
}

impl SimDisk {
    /// `mem` with the latency model of `ctx`, failing writes while `dead`.
    pub fn new(
        mem: MemDevice,
        ctx: Rc<Ctx>,
        slow: Rc<Cell<Duration>>,
        dead: Rc<Cell<bool>>,
    ) -> Self {
        Self {
            mem,
            ctx,
            slow,
            dead,
        }
    }

    async fn latency(&self) {
        let base = Duration::from_micros(self.ctx.range(5, 60));
        pontoon_rt::sleep(base + self.slow.get()).await;
    }
}

impl BlockDevice for SimDisk {
    fn size(&self) -> u64 {
        self.mem.size()
    }

    async fn read_at(&self, buf: AlignedBuf, range: Range<usize>, pos: u64) -> IoResult {
        self.latency().await;
        self.mem.read_at(buf, range, pos).await
    }

    async fn write_at(
        &self,
        buf: AlignedBuf,
        range: Range<usize>,
        pos: u64,
        durable: bool,
    ) -> IoResult {
        self.latency().await;
        if self.dead.get() {
            return (Err(io::Error::from_raw_os_error(5)), buf);
        }
        self.mem.write_at(buf, range, pos, durable).await
    }

    async fn flush(&self) -> io::Result<()> {
        self.latency().await;
        if self.dead.get() {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.mem.flush().await
    }
}
