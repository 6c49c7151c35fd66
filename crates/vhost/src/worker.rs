//! A queue's worker: a thread with its own io_uring runtime and volume
//! that runs the requests of one virtqueue and completes them in the order
//! they were made available.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures::StreamExt;
use futures::channel::mpsc;
use pontoon_buf::AlignedBuf;
use pontoon_net::budget::Budget;
use pontoon_volume::VOLUME_BLOCK;
use tracing::warn;
use vhost_user_backend::{VringRwLock, VringT};
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};
use virtio_queue::DescriptorChain;
use vm_memory::{GuestMemoryLoadGuard, GuestMemoryMmap};

use crate::config::{ID_BYTES, MAX_DISCARD_SEG, SECTOR};
use crate::request::{self, HEADER, Op, Request};
use crate::{ExportVolume, VhostError, VolumeFactory};

/// A descriptor chain with the guest memory it was read from.
pub(crate) type Chain = DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// Most data bytes one request may move; longer ones fail with IOERR.
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;
/// Most data bytes a queue holds in flight.
const QUEUE_BYTES: usize = 64 << 20;
/// Most requests a queue holds in flight (the largest ring).
const QUEUE_REQUESTS: usize = 1024;

/// One available chain for a queue's worker.
pub(crate) struct Job {
    /// The connection it came from.
    pub generation: u64,
    pub chain: Chain,
    pub vring: VringRwLock,
}

/// The handle other threads hold on a worker.
pub(crate) struct QueueWorker {
    tx: mpsc::UnboundedSender<Job>,
    /// Jobs sent and not yet completed (or dropped).
    pub in_flight: Arc<AtomicUsize>,
}

impl QueueWorker {
    /// Starts the worker of queue `index` and opens the volume on it;
    /// returns once the volume is open, with its size.
    pub fn start<V: ExportVolume>(
        name: &str,
        index: usize,
        factory: VolumeFactory<V>,
        current: Arc<AtomicU64>,
        read_only: bool,
        serial: [u8; ID_BYTES],
    ) -> Result<(Self, u64), VhostError> {
        let (tx, rx) = mpsc::unbounded();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let counter = in_flight.clone();
        std::thread::Builder::new()
            .name(format!("vhost-{name}-q{index}"))
            .spawn(move || {
                let rt = match compio::runtime::Runtime::new() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(VhostError::Start(e.to_string())));
                        return;
                    }
                };
                rt.block_on(async move {
                    let vol = match factory() {
                        Ok(v) => v,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(vol.size()));
                    let ctx = Rc::new(Ctx {
                        vol,
                        read_only,
                        serial,
                        current,
                        in_flight: counter,
                        errors: RefCell::new(0),
                    });
                    run(ctx, rx).await;
                });
            })
            .map_err(|e| VhostError::Start(e.to_string()))?;
        let size = ready_rx
            .recv()
            .map_err(|_| VhostError::Start("queue worker died".into()))??;
        Ok((Self { tx, in_flight }, size))
    }

    /// Hands a chain to the worker.
    pub fn submit(&self, job: Job) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.tx.unbounded_send(job) {
            // The worker is gone; the chain is never completed.
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            warn!("vhost: queue worker stopped: {e}");
        }
    }

    /// Waits until every job handed over has completed, for at most `limit`.
    pub fn drain(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while self.in_flight.load(Ordering::Acquire) > 0 {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        true
    }
}

struct Ctx<V> {
    vol: V,
    read_only: bool,
    serial: [u8; ID_BYTES],
    /// The connection being served; completions of older ones are dropped.
    current: Arc<AtomicU64>,
    in_flight: Arc<AtomicUsize>,
    errors: RefCell<u64>,
}

/// Completes one connection's requests in the order they arrived.
struct InOrder {
    generation: u64,
    vring: VringRwLock,
    /// Sequence number of `pending[0]`.
    base: u64,
    /// Per request since `base`: its (head, used length) once done.
    pending: VecDeque<Option<(u16, u32)>>,
}

impl InOrder {
    fn admit(&mut self) -> u64 {
        self.pending.push_back(None);
        self.base + self.pending.len() as u64 - 1
    }

    /// Records a completion and publishes every completion now at the front.
    fn complete<V>(&mut self, ctx: &Ctx<V>, seq: u64, head: u16, len: u32) {
        let Some(slot) = seq
            .checked_sub(self.base)
            .and_then(|i| self.pending.get_mut(i as usize))
        else {
            return;
        };
        *slot = Some((head, len));
        let live = ctx.current.load(Ordering::Acquire) == self.generation;
        let mut published = false;
        while let Some(Some((head, len))) = self.pending.front().copied() {
            self.pending.pop_front();
            self.base += 1;
            if live {
                if let Err(e) = self.vring.add_used(head, len) {
                    warn!("vhost: add_used failed: {e}");
                }
                published = true;
            }
            ctx.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        if published {
            let notify = self.vring.needs_notification().unwrap_or(true);
            if notify && let Err(e) = self.vring.signal_used_queue() {
                warn!("vhost: signalling the guest failed: {e}");
            }
        }
    }
}

async fn run<V: ExportVolume>(ctx: Rc<Ctx<V>>, mut rx: mpsc::UnboundedReceiver<Job>) {
    let budget = Budget::new(QUEUE_REQUESTS, QUEUE_BYTES);
    let mut order: Option<Rc<RefCell<InOrder>>> = None;
    while let Some(job) = rx.next().await {
        let ord = match &order {
            Some(o) if o.borrow().generation == job.generation => o.clone(),
            _ => {
                let o = Rc::new(RefCell::new(InOrder {
                    generation: job.generation,
                    vring: job.vring.clone(),
                    base: 0,
                    pending: VecDeque::new(),
                }));
                order = Some(o.clone());
                o
            }
        };
        let seq = ord.borrow_mut().admit();
        let parsed = request::parse(job.chain.clone());
        let bytes = parsed
            .as_ref()
            .map_or(0, |r| r.data_len().min(MAX_REQUEST_BYTES));
        let permit = budget.acquire(bytes as usize).await;
        let ctx = ctx.clone();
        compio::runtime::spawn(async move {
            let head = job.chain.head_index();
            let used = serve(&ctx, &job.chain, parsed).await;
            ord.borrow_mut().complete(&ctx, seq, head, used);
            drop(permit);
        })
        .detach();
    }
}

/// Runs one request and writes its status; returns the used length.
async fn serve<V: ExportVolume>(
    ctx: &Ctx<V>,
    chain: &Chain,
    parsed: Result<Request, request::Malformed>,
) -> u32 {
    let mem = chain.memory();
    let req = match parsed {
        Ok(r) => r,
        Err(bad) => {
            ctx.note_error(&format!("malformed request: {}", bad.why));
            return match bad.status {
                Some(at) if request::set_status(mem, at, VIRTIO_BLK_S_IOERR) => 1,
                _ => 0,
            };
        }
    };
    let (status, written) = match execute(ctx, chain, &req).await {
        Ok(n) => (VIRTIO_BLK_S_OK, n),
        Err(Fail::Unsupported) => (VIRTIO_BLK_S_UNSUPP, 0),
        Err(Fail::Io(why)) => {
            ctx.note_error(&why);
            (VIRTIO_BLK_S_IOERR, 0)
        }
    };
    if request::set_status(mem, req.status, status) {
        written + 1
    } else {
        0
    }
}

enum Fail {
    Unsupported,
    Io(String),
}

impl<V> Ctx<V> {
    /// Logs the first errors and then every power of two, so a guest
    /// cannot flood the log.
    fn note_error(&self, why: &str) {
        let mut n = self.errors.borrow_mut();
        *n += 1;
        if n.is_power_of_two() {
            warn!("vhost: request failed ({} so far): {why}", *n);
        }
    }
}

/// The byte range of a request at `sector` of `len` bytes, if aligned.
fn range(sector: u64, len: u64) -> Result<u64, Fail> {
    let offset = sector
        .checked_mul(SECTOR)
        .ok_or_else(|| Fail::Io("sector out of range".into()))?;
    if !offset.is_multiple_of(VOLUME_BLOCK) || !len.is_multiple_of(VOLUME_BLOCK) {
        return Err(Fail::Io(format!(
            "offset {offset} or length {len} is not a multiple of {VOLUME_BLOCK}"
        )));
    }
    Ok(offset)
}

/// Does the work; returns the bytes written into the guest's buffers.
async fn execute<V: ExportVolume>(ctx: &Ctx<V>, chain: &Chain, req: &Request) -> Result<u32, Fail> {
    let mem = chain.memory();
    let io = |e: pontoon_volume::VolumeError| Fail::Io(e.to_string());
    let writes = matches!(req.op, Op::Write | Op::Discard | Op::WriteZeroes);
    if writes && ctx.read_only {
        return Err(Fail::Io("write to a read-only device".into()));
    }
    let len = req.data_len();
    if len > MAX_REQUEST_BYTES {
        return Err(Fail::Io(format!("request of {len} bytes is too large")));
    }
    match req.op {
        Op::Read => {
            let offset = range(req.sector, len)?;
            if len == 0 {
                return Ok(0);
            }
            let buf = ctx.vol.read(offset, len).await.map_err(io)?;
            if !req.writable.write_from(mem, 0, &buf[..len as usize]) {
                return Err(Fail::Io("read buffer outside guest memory".into()));
            }
            Ok(len as u32)
        }
        Op::Write => {
            let offset = range(req.sector, len)?;
            if len == 0 {
                return Ok(0);
            }
            let mut buf = AlignedBuf::for_read(len as usize);
            if !req.readable.read_into(mem, HEADER, &mut buf) {
                return Err(Fail::Io("write buffer outside guest memory".into()));
            }
            ctx.vol.write(offset, buf, false).await.map_err(io)?;
            Ok(0)
        }
        Op::Flush => {
            ctx.vol.flush().await.map_err(io)?;
            Ok(0)
        }
        Op::GetId => {
            let n = (len as usize).min(ID_BYTES);
            if !req.writable.write_from(mem, 0, &ctx.serial[..n]) {
                return Err(Fail::Io("id buffer outside guest memory".into()));
            }
            Ok(n as u32)
        }
        Op::Discard | Op::WriteZeroes => {
            if len == 0 || !len.is_multiple_of(16) || len / 16 > u64::from(MAX_DISCARD_SEG) {
                return Err(Fail::Io(format!("{len} bytes of discard ranges")));
            }
            for i in 0..len / 16 {
                let mut seg = [0u8; 16];
                if !req.readable.read_into(mem, HEADER + i * 16, &mut seg) {
                    return Err(Fail::Io("discard range unreadable".into()));
                }
                let sector = u64::from_le_bytes(seg[0..8].try_into().unwrap_or([0; 8]));
                let sectors = u32::from_le_bytes(seg[8..12].try_into().unwrap_or([0; 4]));
                let flags = u32::from_le_bytes(seg[12..16].try_into().unwrap_or([0; 4]));
                let bytes = u64::from(sectors) * SECTOR;
                let offset = range(sector, bytes)?;
                if req.op == Op::Discard {
                    ctx.vol.discard(offset, bytes).await.map_err(io)?;
                } else {
                    let unmap = flags & 1 != 0;
                    ctx.vol
                        .write_zeroes(offset, bytes, unmap)
                        .await
                        .map_err(io)?;
                }
            }
            Ok(0)
        }
        Op::Unsupported(_) => Err(Fail::Unsupported),
    }
}
