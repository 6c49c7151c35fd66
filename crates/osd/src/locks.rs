//! Per-object ordering: at most one mutating operation (write, discard,
//! recovery) per object at a time on a primary, in arrival order.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use futures::channel::oneshot;
use pontoon_types::ObjectId;
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

/// A counting semaphore for one thread: bounds concurrent background work
/// (recovery) so client I/O keeps flowing.
pub struct Slots {
    free: RefCell<usize>,
    waiters: RefCell<VecDeque<oneshot::Sender<()>>>,
}

/// One taken slot, returned on drop.
pub struct Slot {
    slots: Rc<Slots>,
}

impl Slots {
    /// A semaphore with `n` slots.
    pub fn new(n: usize) -> Rc<Self> {
        Rc::new(Self {
            free: RefCell::new(n),
            waiters: RefCell::new(VecDeque::new()),
        })
    }

    /// Waits for a free slot.
    pub async fn take(self: &Rc<Self>) -> Slot {
        let wait = {
            let mut free = self.free.borrow_mut();
            if *free > 0 {
                *free -= 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                self.waiters.borrow_mut().push_back(tx);
                Some(rx)
            }
        };
        if let Some(rx) = wait {
            let _ = rx.await;
        }
        Slot {
            slots: self.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut waiters = self.slots.waiters.borrow_mut();
        while let Some(w) = waiters.pop_front() {
            if w.send(()).is_ok() {
                return;
            }
        }
        *self.slots.free.borrow_mut() += 1;
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
