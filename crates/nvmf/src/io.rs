//! An I/O queue: NVM command set commands (Read, Write, Flush, Dataset
//! Management, Write Zeroes) mapped onto the namespace's volume, each run
//! as its own task so many are in flight and complete out of order.
//!
//! Namespaces are resolved per command through a per-connection cache,
//! refreshed only when the configuration's generation moves (one atomic
//! load per command; no lock on the I/O path).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::FutureExt;
use pontoon_buf::AlignedBuf;
use pontoon_net::budget::Permit;
use pontoon_volume::{BlockVolume, VolumeCatalog, VolumeError};
use tracing::debug;

use crate::command::{SGL_TRANSPORT, Sqe, Status, io_op};
use crate::config::NamespaceConfig;
use crate::controller::Controller;
use crate::identify::LBA_SHIFT;
use crate::queue::{Completion, Conn};
use crate::server::Worker;

/// Bytes per LBA.
const LBA: u64 = 1 << LBA_SHIFT;
/// The broadcast namespace id (Flush of every namespace).
const ALL_NAMESPACES: u32 = u32::MAX;

/// Maps a volume error to an NVMe status.
pub(crate) fn status_of(e: &VolumeError) -> Status {
    match e {
        VolumeError::InvalidArgument(_) => Status::INVALID_FIELD,
        VolumeError::NoSpace(_) => Status::CAPACITY_EXCEEDED,
        VolumeError::ReadOnly => Status::WRITE_PROTECTED,
        VolumeError::PermissionDenied(_) => Status::ACCESS_DENIED,
        VolumeError::Unavailable(_) => Status::NAMESPACE_NOT_READY,
        VolumeError::DataLoss(_) => Status::UNRECOVERED_READ,
        VolumeError::Io(_) => Status {
            dnr: false,
            ..Status::INTERNAL
        },
    }
}

/// One cached namespace.
struct Namespace<V> {
    config: NamespaceConfig,
    volume: Option<Rc<V>>,
}

/// The namespaces of the subsystem as this connection last saw them.
struct Cache<V> {
    generation: u64,
    namespaces: HashMap<u32, Namespace<V>>,
}

/// One I/O queue of a controller.
pub(crate) struct IoQueue<C: VolumeCatalog> {
    w: Rc<Worker<C>>,
    conn: Rc<Conn>,
    /// The controller.
    pub ctrl: Arc<Controller>,
    /// The queue id.
    pub qid: u16,
    cache: RefCell<Cache<C::Volume>>,
}

/// The byte range of a Read/Write/Write Zeroes: (offset, length).
fn lba_range(sqe: &Sqe) -> (u64, u64) {
    let nlb = u64::from(sqe.dword(12) & 0xFFFF) + 1;
    (sqe.slba().saturating_mul(LBA), nlb * LBA)
}

impl<C: VolumeCatalog> IoQueue<C> {
    /// I/O queue `qid` of `ctrl` on connection `conn`.
    pub fn new(w: Rc<Worker<C>>, conn: Rc<Conn>, ctrl: Arc<Controller>, qid: u16) -> Rc<Self> {
        Rc::new(Self {
            w,
            conn,
            ctrl,
            qid,
            cache: RefCell::new(Cache {
                generation: u64::MAX,
                namespaces: HashMap::new(),
            }),
        })
    }

    /// Checks a write's fields before its data is asked for, so a bad
    /// command fails without a transfer.
    pub fn precheck_write(&self, sqe: &Sqe) -> Result<(), Status> {
        match sqe.opcode() {
            io_op::WRITE => {
                let (_, len) = lba_range(sqe);
                if len > u64::from(self.w.config.max_data_transfer) {
                    return Err(Status::INVALID_FIELD);
                }
                if len != u64::from(sqe.sgl().len) {
                    return Err(Status::SGL_LENGTH_INVALID);
                }
                Ok(())
            }
            io_op::DSM => Ok(()),
            _ => Err(Status::INVALID_OPCODE),
        }
    }

    /// Starts a command; its completion is sent when it finishes.
    pub fn submit(self: Rc<Self>, sqe: Sqe, data: Option<AlignedBuf>, permit: Permit) {
        // A Flush of a volume that acknowledges only durable writes is
        // done at once: answered here, without a task or a loop turn.
        if sqe.opcode() == io_op::FLUSH
            && let Some(c) = self.run(&sqe, None).now_or_never()
        {
            self.conn.complete(sqe.cid(), c, Some(permit));
            return;
        }
        compio::runtime::spawn(async move {
            let c = self.run(&sqe, data).await;
            self.conn.complete(sqe.cid(), c, Some(permit));
        })
        .detach();
    }

    fn refresh(&self) {
        let generation = self.w.subsystems.generation();
        if self.cache.borrow().generation == generation {
            return;
        }
        let snap = self.w.subsystems.snapshot();
        let mut cache = self.cache.borrow_mut();
        let fresh: Vec<NamespaceConfig> = snap
            .subsystem(&self.ctrl.assoc.subnqn)
            .map(|s| s.namespaces.clone())
            .unwrap_or_default();
        let mut old = std::mem::take(&mut cache.namespaces);
        for config in fresh {
            let volume = old
                .remove(&config.nsid)
                .filter(|n| n.config == config)
                .and_then(|n| n.volume);
            cache
                .namespaces
                .insert(config.nsid, Namespace { config, volume });
        }
        cache.generation = snap.generation;
    }

    /// The volume of namespace `nsid`, opened on first use.
    async fn volume(&self, nsid: u32) -> Result<Rc<C::Volume>, Status> {
        self.refresh();
        let name = {
            let cache = self.cache.borrow();
            let ns = cache
                .namespaces
                .get(&nsid)
                .ok_or(Status::INVALID_NAMESPACE)?;
            if let Some(v) = &ns.volume {
                return Ok(v.clone());
            }
            ns.config.volume.clone()
        };
        let v = match self.w.catalog.open(&name).await {
            Ok(Some(v)) => Rc::new(v),
            Ok(None) => return Err(Status::INVALID_NAMESPACE),
            Err(e) => {
                debug!(volume = %name, "opening: {e}");
                return Err(status_of(&e));
            }
        };
        if let Some(ns) = self.cache.borrow_mut().namespaces.get_mut(&nsid) {
            ns.volume = Some(v.clone());
        }
        Ok(v)
    }

    async fn run(&self, sqe: &Sqe, data: Option<AlignedBuf>) -> Completion {
        match self.execute(sqe, data).await {
            Ok(c) => c,
            Err(s) => Completion::status(s),
        }
    }

    async fn execute(&self, sqe: &Sqe, data: Option<AlignedBuf>) -> Result<Completion, Status> {
        let op = sqe.opcode();
        if !matches!(
            op,
            io_op::READ | io_op::WRITE | io_op::FLUSH | io_op::WRITE_ZEROES | io_op::DSM
        ) {
            return Err(Status::INVALID_OPCODE);
        }
        if op == io_op::FLUSH && sqe.nsid() == ALL_NAMESPACES {
            return self.flush_all().await;
        }
        let v = self.volume(sqe.nsid()).await?;
        let size = v.size();
        let in_range = |off: u64, len: u64| off.checked_add(len).is_some_and(|e| e <= size);
        let counters = &self.ctrl.counters;
        match op {
            io_op::READ => {
                let (off, len) = lba_range(sqe);
                let sgl = sqe.sgl();
                if sgl.id != SGL_TRANSPORT {
                    return Err(Status::SGL_TYPE_INVALID);
                }
                if len > u64::from(self.w.config.max_data_transfer) {
                    return Err(Status::INVALID_FIELD);
                }
                if u64::from(sgl.len) != len {
                    return Err(Status::SGL_LENGTH_INVALID);
                }
                if !in_range(off, len) {
                    return Err(Status::LBA_OUT_OF_RANGE);
                }
                let buf = v.read(off, len).await.map_err(|e| status_of(&e))?;
                counters.reads.fetch_add(1, Ordering::Relaxed);
                counters.bytes_read.fetch_add(len, Ordering::Relaxed);
                Ok(Completion::with_data(buf))
            }
            io_op::WRITE => {
                let (off, len) = lba_range(sqe);
                let data = data.ok_or(Status::SGL_LENGTH_INVALID)?;
                if data.len() as u64 != len {
                    return Err(Status::SGL_LENGTH_INVALID);
                }
                if !in_range(off, len) {
                    return Err(Status::LBA_OUT_OF_RANGE);
                }
                let fua = sqe.dword(12) & (1 << 30) != 0;
                v.write(off, data, fua).await.map_err(|e| status_of(&e))?;
                counters.writes.fetch_add(1, Ordering::Relaxed);
                counters.bytes_written.fetch_add(len, Ordering::Relaxed);
                Ok(Completion::ok(0))
            }
            io_op::FLUSH => {
                v.flush().await.map_err(|e| status_of(&e))?;
                Ok(Completion::ok(0))
            }
            io_op::WRITE_ZEROES => {
                let (off, len) = lba_range(sqe);
                if !in_range(off, len) {
                    return Err(Status::LBA_OUT_OF_RANGE);
                }
                let deallocate = sqe.dword(12) & (1 << 25) != 0;
                v.write_zeroes(off, len, deallocate)
                    .await
                    .map_err(|e| status_of(&e))?;
                Ok(Completion::ok(0))
            }
            _ => self.dataset_management(sqe, data, &*v, size).await,
        }
    }

    /// Dataset Management: with the deallocate attribute, every range is
    /// discarded; the other attributes are hints and are accepted.
    async fn dataset_management(
        &self,
        sqe: &Sqe,
        data: Option<AlignedBuf>,
        v: &C::Volume,
        size: u64,
    ) -> Result<Completion, Status> {
        let nr = (sqe.dword(10) & 0xFF) as usize + 1;
        let data = data.ok_or(Status::SGL_LENGTH_INVALID)?;
        if data.len() < nr * 16 {
            return Err(Status::SGL_LENGTH_INVALID);
        }
        if sqe.dword(11) & (1 << 2) == 0 {
            return Ok(Completion::ok(0));
        }
        let mut ranges = Vec::with_capacity(nr);
        for r in data[..nr * 16].chunks_exact(16) {
            let blocks = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
            let slba = u64::from_le_bytes([r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]]);
            let off = slba.checked_mul(LBA).ok_or(Status::LBA_OUT_OF_RANGE)?;
            let len = blocks * LBA;
            if off.checked_add(len).is_none_or(|e| e > size) {
                return Err(Status::LBA_OUT_OF_RANGE);
            }
            if len > 0 {
                ranges.push((off, len));
            }
        }
        for (off, len) in ranges {
            v.discard(off, len).await.map_err(|e| status_of(&e))?;
        }
        Ok(Completion::ok(0))
    }

    async fn flush_all(&self) -> Result<Completion, Status> {
        self.refresh();
        let ids: Vec<u32> = self.cache.borrow().namespaces.keys().copied().collect();
        for id in ids {
            let v = self.volume(id).await?;
            v.flush().await.map_err(|e| status_of(&e))?;
        }
        Ok(Completion::ok(0))
    }
}
