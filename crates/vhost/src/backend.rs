//! The vhost-user backend of one connection: answers the front-end's
//! questions (features, configuration) and moves each queue's available
//! chains to that queue's worker.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::warn;
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_queue::QueueOwnedT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    EventConsumer, EventFlag, EventNotifier, new_event_consumer_and_notifier,
};

use crate::config::{self, DeviceShape};
use crate::worker::{Job, QueueWorker};

/// Longest a stopping queue waits for its requests in flight.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// Descriptors per queue at most.
const MAX_QUEUE_SIZE: usize = 1024;

/// One connection's backend; cloned into each queue's event thread.
#[derive(Clone)]
pub(crate) struct Backend {
    pub shape: DeviceShape,
    pub generation: u64,
    pub workers: Arc<Vec<QueueWorker>>,
    pub mem: GuestMemoryAtomic<GuestMemoryMmap>,
    event_idx: Arc<AtomicBool>,
    exits: Arc<Vec<(EventConsumer, EventNotifier)>>,
}

impl Backend {
    pub fn new(
        shape: DeviceShape,
        generation: u64,
        workers: Arc<Vec<QueueWorker>>,
        mem: GuestMemoryAtomic<GuestMemoryMmap>,
    ) -> io::Result<Self> {
        let exits = (0..workers.len())
            .map(|_| new_event_consumer_and_notifier(EventFlag::NONBLOCK))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Self {
            shape,
            generation,
            workers,
            mem,
            event_idx: Arc::new(AtomicBool::new(false)),
            exits: Arc::new(exits),
        })
    }

    /// Tells every queue's event thread to stop.
    pub fn stop_threads(&self) {
        for (_, notifier) in self.exits.iter() {
            let _ = notifier.notify();
        }
    }

    /// Moves every available chain of `vring` to `worker`.
    fn drain_ring(&self, vring: &VringRwLock, worker: &QueueWorker) -> io::Result<()> {
        let mem = self.mem.memory();
        let mut state = vring.get_mut();
        let iter = state
            .get_queue_mut()
            .iter(mem)
            .map_err(|e| io::Error::other(format!("reading the available ring: {e}")))?;
        for chain in iter {
            worker.submit(Job {
                generation: self.generation,
                chain,
                vring: vring.clone(),
            });
        }
        Ok(())
    }
}

impl VhostUserBackend for Backend {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        self.workers.len()
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        config::features(&self.shape)
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        config::protocol_features()
    }

    fn set_event_idx(&self, enabled: bool) {
        self.event_idx.store(enabled, Ordering::Release);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        config::config_slice(&self.shape, offset, size)
    }

    fn update_memory(&self, _mem: GuestMemoryAtomic<GuestMemoryMmap>) -> io::Result<()> {
        // The handler updates the GuestMemoryAtomic we share with it.
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.workers.len()).map(|q| 1u64 << q).collect()
    }

    fn exit_event(&self, thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        let (c, n) = self.exits.get(thread_index)?;
        Some((c.try_clone().ok()?, n.try_clone().ok()?))
    }

    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        // GET_VRING_BASE: the ring's base is only right once every request
        // taken from it is completed.
        if let Some(w) = self.workers.get(queue_index as usize)
            && !w.drain(DRAIN_LIMIT)
        {
            warn!("vhost: queue {queue_index} still has requests in flight after {DRAIN_LIMIT:?}");
        }
        Ok(())
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[VringRwLock],
        thread_id: usize,
    ) -> io::Result<()> {
        if evset != EventSet::IN {
            return Err(io::Error::other(format!("unexpected event set {evset:?}")));
        }
        let (Some(vring), Some(worker)) = (
            vrings.get(device_event as usize),
            self.workers.get(thread_id),
        ) else {
            return Err(io::Error::other(format!(
                "event {device_event} on thread {thread_id} names no queue"
            )));
        };
        if self.event_idx.load(Ordering::Acquire) {
            loop {
                vring
                    .disable_notification()
                    .map_err(|e| io::Error::other(e.to_string()))?;
                self.drain_ring(vring, worker)?;
                if !vring
                    .enable_notification()
                    .map_err(|e| io::Error::other(e.to_string()))?
                {
                    break;
                }
            }
            Ok(())
        } else {
            self.drain_ring(vring, worker)
        }
    }
}
