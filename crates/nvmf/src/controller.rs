//! Controllers: one per host association (an admin queue and the I/O queues
//! that name it in their Connect), shared by every worker thread through a
//! [`Registry`]. A controller holds what its queues must agree on: the
//! subsystem, the host, the controller registers (CC/CSTS) with the
//! enable, ready and shutdown handshake, which I/O queues exist, the
//! SMART counters, and a teardown signal that closes every queue's
//! connection (keep-alive expiry, admin queue gone, controller reset).
//!
//! The locks here are taken on Connect, on property access and on admin
//! commands; the I/O path only touches atomics.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::channel::oneshot;

use crate::command::Status;

/// Controller property offsets.
pub(crate) mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
}

/// The NVMe version this target implements: 1.3.
pub(crate) const VERSION: u32 = 0x0001_0300;

/// CAP.TO: worst-case time to become ready, in 500 ms units.
const CAP_TIMEOUT: u64 = 10;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a Connect on the admin queue establishes.
#[derive(Debug, Clone)]
pub(crate) struct Association {
    /// The subsystem's NQN (the discovery NQN for a discovery controller).
    pub subnqn: String,
    /// The host's NQN.
    pub hostnqn: String,
    /// The host identifier (an I/O queue's Connect must repeat it).
    pub hostid: [u8; 16],
    /// The host had to authenticate (DH-HMAC-CHAP) when it connected.
    pub authenticated: bool,
}

/// The controller registers.
#[derive(Debug, Default)]
struct Regs {
    cc: u32,
    csts: u32,
}

/// I/O counters for the SMART / health log.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Bytes read by hosts.
    pub bytes_read: AtomicU64,
    /// Bytes written by hosts.
    pub bytes_written: AtomicU64,
    /// Read commands completed.
    pub reads: AtomicU64,
    /// Write commands completed.
    pub writes: AtomicU64,
}

/// One controller.
#[derive(Debug)]
pub(crate) struct Controller {
    /// Controller id, unique across the target.
    pub cntlid: u16,
    /// Who connected to what.
    pub assoc: Association,
    /// Whether this is a discovery controller.
    pub discovery: bool,
    /// Entries per queue the target supports (CAP.MQES + 1).
    pub max_queue_entries: u16,
    /// I/O queues granted by Set Features (Number of Queues).
    pub io_queues: AtomicU16,
    /// SMART counters.
    pub counters: Counters,
    regs: Mutex<Regs>,
    connected: Mutex<BTreeSet<u16>>,
    /// Teardown signals: (is an I/O queue's, sender).
    closers: Mutex<Vec<(bool, oneshot::Sender<()>)>>,
    dead: AtomicBool,
}

impl Controller {
    /// CAP: queue size, contiguous queues required, timeout, NVM command
    /// set, 4 KiB pages.
    pub fn cap(&self) -> u64 {
        u64::from(self.max_queue_entries - 1) | (1 << 16) | (CAP_TIMEOUT << 24) | (1 << 37)
    }

    /// Reads a property: `size8` for an 8-byte access.
    pub fn property_get(&self, offset: u32, size8: bool) -> Result<u64, Status> {
        let regs = lock(&self.regs);
        match (offset, size8) {
            (prop::CAP, true) => Ok(self.cap()),
            (prop::CAP, false) => Ok(self.cap() & 0xFFFF_FFFF),
            (prop::VS, false) => Ok(u64::from(VERSION)),
            (prop::CC, false) => Ok(u64::from(regs.cc)),
            (prop::CSTS, false) => Ok(u64::from(regs.csts)),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Writes a property. Only CC is writable: EN drives CSTS.RDY (a
    /// transition to 0 resets the controller, closing its I/O queues but
    /// keeping the admin queue, on which the host then polls CSTS), SHN
    /// completes a shutdown at once (nothing is cached: every write was
    /// durable before it completed). Returns whether this was a reset.
    pub fn property_set(&self, offset: u32, value: u64, size8: bool) -> Result<bool, Status> {
        if offset != prop::CC || size8 {
            return Err(Status::INVALID_FIELD);
        }
        let cc = value as u32;
        let reset = {
            let mut regs = lock(&self.regs);
            let was_enabled = regs.cc & 1 != 0;
            let enable = cc & 1 != 0;
            regs.cc = cc;
            let mut csts = regs.csts & !0b1101;
            if enable {
                if !self.discovery && (cc >> 16 & 0xF != 6 || cc >> 20 & 0xF != 4) && !was_enabled {
                    // Queue entry sizes other than 64/16 bytes: fatal.
                    csts |= 1 << 1;
                } else {
                    csts |= 1;
                }
            }
            if (cc >> 14) & 3 != 0 {
                csts |= 0b10 << 2;
            }
            regs.csts = csts;
            was_enabled && !enable
        };
        if reset {
            self.close_io_queues();
        }
        Ok(reset)
    }

    /// Whether the controller is enabled and ready (I/O queues may connect).
    pub fn ready(&self) -> bool {
        lock(&self.regs).csts & 1 != 0
    }

    /// Registers an I/O queue; refuses an id already connected or beyond
    /// the granted count.
    pub fn attach_io_queue(&self, qid: u16) -> Result<(), Status> {
        if qid == 0 || qid > self.io_queues.load(Ordering::Acquire) {
            return Err(Status::CONNECT_INVALID_PARAMETERS);
        }
        if !lock(&self.connected).insert(qid) {
            return Err(Status::CONNECT_INVALID_PARAMETERS);
        }
        Ok(())
    }

    /// Forgets an I/O queue whose connection ended.
    pub fn detach_io_queue(&self, qid: u16) {
        lock(&self.connected).remove(&qid);
    }

    /// A signal that fires when the controller is torn down (or at once if
    /// it already was); for an I/O queue (`io`), also on a reset.
    pub fn on_teardown(&self, io: bool) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if self.dead.load(Ordering::Acquire) {
            let _ = tx.send(());
        } else {
            lock(&self.closers).push((io, tx));
        }
        rx
    }

    /// Whether the controller was torn down.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Closes every queue of the controller.
    pub fn teardown(&self) {
        self.dead.store(true, Ordering::Release);
        for (_, tx) in lock(&self.closers).drain(..) {
            let _ = tx.send(());
        }
    }

    /// A reset: every I/O queue's connection closes; the admin queue stays.
    fn close_io_queues(&self) {
        let io: Vec<oneshot::Sender<()>> = {
            let mut closers = lock(&self.closers);
            let (io, admin): (Vec<_>, Vec<_>) = closers.drain(..).partition(|(io, _)| *io);
            *closers = admin;
            io.into_iter().map(|(_, tx)| tx).collect()
        };
        lock(&self.connected).clear();
        for tx in io {
            let _ = tx.send(());
        }
    }
}

/// Every live controller of the target.
#[derive(Debug)]
pub(crate) struct Registry {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u16,
    ctrls: HashMap<u16, Arc<Controller>>,
}

impl Registry {
    /// A registry holding at most `max` controllers.
    pub fn new(max: usize) -> Self {
        Self {
            max: max.clamp(1, 0xFFEF),
            inner: Mutex::default(),
        }
    }

    /// Creates a controller with a fresh id (1..=0xFFEF, the dynamic range).
    pub fn create(
        &self,
        assoc: Association,
        discovery: bool,
        max_queue_entries: u16,
        max_io_queues: u16,
    ) -> Result<Arc<Controller>, Status> {
        let mut inner = lock(&self.inner);
        if inner.ctrls.len() >= self.max {
            return Err(Status::CONNECT_CONTROLLER_BUSY);
        }
        let mut id = inner.next;
        loop {
            id = if id >= 0xFFEF { 1 } else { id + 1 };
            if !inner.ctrls.contains_key(&id) {
                break;
            }
        }
        inner.next = id;
        let c = Arc::new(Controller {
            cntlid: id,
            assoc,
            discovery,
            max_queue_entries,
            io_queues: AtomicU16::new(max_io_queues),
            counters: Counters::default(),
            regs: Mutex::default(),
            connected: Mutex::default(),
            closers: Mutex::default(),
            dead: AtomicBool::new(false),
        });
        inner.ctrls.insert(id, c.clone());
        Ok(c)
    }

    /// The live controller `cntlid`.
    pub fn get(&self, cntlid: u16) -> Option<Arc<Controller>> {
        lock(&self.inner)
            .ctrls
            .get(&cntlid)
            .filter(|c| !c.is_dead())
            .cloned()
    }

    /// Tears a controller down and forgets it.
    pub fn remove(&self, cntlid: u16) {
        let c = lock(&self.inner).ctrls.remove(&cntlid);
        if let Some(c) = c {
            c.teardown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assoc() -> Association {
        Association {
            subnqn: "nqn.s".into(),
            hostnqn: "nqn.h".into(),
            hostid: [0; 16],
            authenticated: false,
        }
    }

    #[test]
    fn enable_ready_shutdown_handshake() {
        let r = Registry::new(4);
        let c = r.create(assoc(), false, 128, 4).unwrap();
        assert_eq!(c.property_get(prop::CSTS, false), Ok(0));
        c.property_set(prop::CC, 1 | 6 << 16 | 4 << 20, false)
            .unwrap();
        assert_eq!(c.property_get(prop::CSTS, false), Ok(1));
        assert!(c.ready());
        c.property_set(prop::CC, 1 | 6 << 16 | 4 << 20 | 1 << 14, false)
            .unwrap();
        assert_eq!(c.property_get(prop::CSTS, false).unwrap() >> 2 & 3, 0b10);
        assert_eq!(c.property_get(prop::CAP, true).unwrap() & 0xFFFF, 127);
        assert_eq!(c.property_get(prop::VS, true), Err(Status::INVALID_FIELD));
        assert_eq!(
            c.property_set(prop::CSTS, 0, false),
            Err(Status::INVALID_FIELD)
        );
    }

    #[test]
    fn queues_ids_and_teardown() {
        let r = Registry::new(2);
        let a = r.create(assoc(), false, 128, 2).unwrap();
        let b = r.create(assoc(), false, 128, 2).unwrap();
        assert_ne!(a.cntlid, b.cntlid);
        assert_eq!(
            r.create(assoc(), false, 128, 2).unwrap_err(),
            Status::CONNECT_CONTROLLER_BUSY
        );
        a.attach_io_queue(1).unwrap();
        assert!(a.attach_io_queue(1).is_err());
        assert!(a.attach_io_queue(3).is_err());
        let mut io = a.on_teardown(true);
        let mut admin = a.on_teardown(false);
        a.property_set(prop::CC, 1 | 6 << 16 | 4 << 20, false)
            .unwrap();
        assert_eq!(a.property_set(prop::CC, 0, false), Ok(true));
        assert_eq!(io.try_recv(), Ok(Some(())));
        assert_eq!(admin.try_recv(), Ok(None));
        assert!(
            a.attach_io_queue(1).is_ok(),
            "a reset forgets the I/O queues"
        );
        let mut rx = a.on_teardown(false);
        r.remove(a.cntlid);
        assert_eq!(rx.try_recv(), Ok(Some(())));
        assert!(r.get(a.cntlid).is_none());
        assert!(r.create(assoc(), false, 128, 2).is_ok());
    }
}
