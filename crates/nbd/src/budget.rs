//! The per-connection bound on work in flight: how many requests and how
//! many payload bytes (write data held until the volume has it, read data
//! held until the socket has taken it) one connection may hold at once.
//!
//! Only the connection's request reader waits on the budget, so a single
//! waker slot suffices; [`Permit`]s are released wherever the request ends
//! (normally after its reply has been written to the socket).

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// Requests and bytes in flight on one connection, with their limits.
pub(crate) struct Budget {
    max_requests: usize,
    max_bytes: usize,
    requests: Cell<usize>,
    bytes: Cell<usize>,
    waiter: Cell<Option<Waker>>,
}

impl Budget {
    /// A budget of at most `max_requests` requests and `max_bytes` bytes.
    pub(crate) fn new(max_requests: usize, max_bytes: usize) -> Rc<Self> {
        assert!(max_requests > 0 && max_bytes > 0);
        Rc::new(Self {
            max_requests,
            max_bytes,
            requests: Cell::new(0),
            bytes: Cell::new(0),
            waiter: Cell::new(None),
        })
    }

    /// Requests currently holding a permit.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.requests.get()
    }

    fn fits(&self, bytes: usize) -> bool {
        self.requests.get() < self.max_requests
            && self.bytes.get().saturating_add(bytes) <= self.max_bytes
    }

    /// Waits until one more request of `bytes` payload bytes fits, and takes
    /// it. `bytes` must not exceed the byte limit (callers check request
    /// lengths against the payload limit first).
    pub(crate) async fn acquire(self: &Rc<Self>, bytes: usize) -> Permit {
        assert!(
            bytes <= self.max_bytes,
            "request larger than the whole budget"
        );
        poll_fn(|cx| {
            if self.fits(bytes) {
                Poll::Ready(())
            } else {
                self.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await;
        self.requests.set(self.requests.get() + 1);
        self.bytes.set(self.bytes.get() + bytes);
        Permit {
            budget: self.clone(),
            bytes,
        }
    }

    /// Waits until no request holds a permit.
    pub(crate) async fn idle(&self) {
        poll_fn(|cx| {
            if self.requests.get() == 0 {
                Poll::Ready(())
            } else {
                self.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// One request's share of a [`Budget`]; released on drop.
pub(crate) struct Permit {
    budget: Rc<Budget>,
    bytes: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let b = &self.budget;
        debug_assert!(b.requests.get() > 0 && b.bytes.get() >= self.bytes);
        b.requests.set(b.requests.get() - 1);
        b.bytes.set(b.bytes.get() - self.bytes);
        if let Some(w) = b.waiter.take() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn acquire_waits_for_room_and_idle_for_zero() {
        let b = Budget::new(2, 100);
        let p1 = b.acquire(60).now_or_never().unwrap();
        assert!(b.acquire(60).now_or_never().is_none(), "bytes exhausted");
        let p2 = b.acquire(40).now_or_never().unwrap();
        assert!(b.acquire(0).now_or_never().is_none(), "requests exhausted");
        assert_eq!(b.in_flight(), 2);
        assert!(b.idle().now_or_never().is_none());
        drop(p1);
        let p3 = b.acquire(60).now_or_never().unwrap();
        drop((p2, p3));
        assert!(b.idle().now_or_never().is_some());
    }
}
