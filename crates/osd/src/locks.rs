//! Per-object ordering: at most one mutating operation (write, discard,
//! recovery) per object at a time on a primary, in arrival order; and the
//! count of local store mutations in flight per PG, which peering waits
//! out before it lists a PG's objects.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use futures::channel::oneshot;
use pontoon_types::{ObjectId, PgId};
use rustc_hash::FxHashMap;

/// FIFO locks keyed by object; entries exist only while held.
#[derive(Default)]
pub struct ObjectLocks {
    held: RefCell<FxHashMap<ObjectId, VecDeque<oneshot::Sender<()>>>>,
}

/// Holds an object's lock until dropped.
pub struct ObjectGuard {
    locks: Rc<ObjectLocks>,
    oid: ObjectId,
}

impl ObjectLocks {
    /// Waits for the lock of `oid`.
    pub async fn lock(self: &Rc<Self>, oid: ObjectId) -> ObjectGuard {
        let wait = {
            let mut held = self.held.borrow_mut();
            match held.get_mut(&oid) {
                None => {
                    held.insert(oid, VecDeque::new());
                    None
                }
                Some(q) => {
                    let (tx, rx) = oneshot::channel();
                    q.push_back(tx);
                    Some(rx)
                }
            }
        };
        if let Some(rx) = wait {
            // The sender is only dropped by handing the lock over.
            let _ = rx.await;
        }
        ObjectGuard {
            locks: self.clone(),
            oid,
        }
    }

    /// Waits until nobody holds or waits for `oid`'s lock (returns at once
    /// if it is free): reads use it so they never see a write that is not
    /// yet on every replica.
    pub async fn wait_unlocked(self: &Rc<Self>, oid: ObjectId) {
        if self.held.borrow().contains_key(&oid) {
            drop(self.lock(oid).await);
        }
    }

    /// Objects currently locked.
    pub fn held(&self) -> usize {
        self.held.borrow().len()
    }
}

impl Drop for ObjectGuard {
    fn drop(&mut self) {
        let mut held = self.locks.held.borrow_mut();
        let Some(q) = held.get_mut(&self.oid) else {
            debug_assert!(false, "unlocking an object that is not locked");
            return;
        };
        while let Some(next) = q.pop_front() {
            if next.send(()).is_ok() {
                return;
            }
        }
        held.remove(&self.oid);
    }
}

/// Local store mutations in flight, per PG (entries exist only while some
/// are). A mutation enters once it is accepted for an interval — in the
/// same synchronous step as the interval check — and leaves when the store
/// has applied it or failed.
///
/// Peering needs this: it lists a member's objects after the member has
/// promised to refuse earlier intervals, but a mutation of an earlier
/// interval accepted just before the promise may still be on its way to
/// the store. Listed too early, the member would report the older version
/// while it holds the newer one a moment later; the new interval would then
/// take an older version as authoritative (losing a write that may have
/// been acknowledged) and its recovery would find copies newer than
/// expected and never finish. Waiting for [`InFlight::drained`] before
/// listing closes that gap; it is short, as only store writes are counted.
#[derive(Default)]
pub struct InFlight {
    pgs: RefCell<FxHashMap<PgId, PgInFlight>>,
}

/// A PG's mutations in flight and who waits for them to end.
#[derive(Default)]
struct PgInFlight {
    count: usize,
    waiters: Vec<oneshot::Sender<()>>,
}

/// One mutation in flight on a PG, until dropped.
pub struct InFlightGuard {
    inflight: Rc<InFlight>,
    pg: PgId,
}

impl InFlight {
    /// Counts a mutation of `pg` as in flight until the guard is dropped.
    pub fn enter(self: &Rc<Self>, pg: PgId) -> InFlightGuard {
        self.pgs.borrow_mut().entry(pg).or_default().count += 1;
        InFlightGuard {
            inflight: self.clone(),
            pg,
        }
    }

    /// Waits until no mutation of `pg` is in flight (returns at once if none is).
    pub async fn drained(&self, pg: PgId) {
        let rx = {
            let mut pgs = self.pgs.borrow_mut();
            let Some(p) = pgs.get_mut(&pg) else {
                return;
            };
            let (tx, rx) = oneshot::channel();
            p.waiters.push(tx);
            rx
        };
        // The sender is only dropped when the count reaches zero.
        let _ = rx.await;
    }

    /// Mutations of `pg` in flight.
    pub fn count(&self, pg: PgId) -> usize {
        self.pgs.borrow().get(&pg).map_or(0, |p| p.count)
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut pgs = self.inflight.pgs.borrow_mut();
        let Some(entry) = pgs.get_mut(&self.pg) else {
            debug_assert!(false, "leaving a PG with nothing in flight");
            return;
        };
        entry.count -= 1;
        if entry.count == 0
            && let Some(p) = pgs.remove(&self.pg)
        {
            for w in p.waiters {
                let _ = w.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn waiters_run_in_order_and_entries_are_removed() {
        compio::runtime::Runtime::new().unwrap().block_on(async {
            let locks = Rc::new(ObjectLocks::default());
            let oid = ObjectId::new(1, 2);
            let order = Rc::new(RefCell::new(Vec::new()));
            let g = locks.lock(oid).await;
            let mut tasks = Vec::new();
            for i in 0..5 {
                let (locks, order) = (locks.clone(), order.clone());
                tasks.push(compio::runtime::spawn(async move {
                    let _g = locks.lock(oid).await;
                    order.borrow_mut().push(i);
                    compio::time::sleep(std::time::Duration::from_millis(1)).await;
                }));
                compio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            drop(g);
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(*order.borrow(), vec![0, 1, 2, 3, 4]);
            assert_eq!(locks.held(), 0);
        });
    }

    #[test]
    fn drained_waits_for_every_mutation_in_flight_on_its_pg() {
        compio::runtime::Runtime::new().unwrap().block_on(async {
            let inflight = Rc::new(InFlight::default());
            let (pg, other) = (PgId::new(1, 0), PgId::new(1, 1));
            inflight.drained(pg).await; // nothing in flight: at once
            let a = inflight.enter(pg);
            let b = inflight.enter(pg);
            let _c = inflight.enter(other);
            assert_eq!(inflight.count(pg), 2);
            let done = Rc::new(Cell::new(false));
            let t = {
                let (inflight, done) = (inflight.clone(), done.clone());
                compio::runtime::spawn(async move {
                    inflight.drained(pg).await;
                    done.set(true);
                })
            };
            compio::time::sleep(std::time::Duration::from_millis(2)).await;
            drop(a);
            compio::time::sleep(std::time::Duration::from_millis(2)).await;
            assert!(!done.get(), "one mutation is still in flight");
            drop(b);
            t.await.unwrap();
            assert!(done.get());
            assert_eq!(inflight.count(pg), 0);
            assert_eq!(inflight.count(other), 1, "other PGs are not waited for");
        });
    }

    #[test]
    fn a_cancelled_waiter_does_not_block_the_next() {
        compio::runtime::Runtime::new().unwrap().block_on(async {
            let locks = Rc::new(ObjectLocks::default());
            let oid = ObjectId::new(1, 2);
            let g = locks.lock(oid).await;
            let cancelled = {
                let locks = locks.clone();
                compio::runtime::spawn(async move {
                    let _g = locks.lock(oid).await;
                })
            };
            compio::time::sleep(std::time::Duration::from_millis(1)).await;
            drop(cancelled);
            let got = Rc::new(Cell::new(false));
            let t = {
                let (locks, got) = (locks.clone(), got.clone());
                compio::runtime::spawn(async move {
                    let _g = locks.lock(oid).await;
                    got.set(true);
                })
            };
            compio::time::sleep(std::time::Duration::from_millis(1)).await;
            drop(g);
            t.await.unwrap();
            assert!(got.get());
            assert_eq!(locks.held(), 0);
        });
    }
}
