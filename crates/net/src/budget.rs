//! The per-connection bound on work in flight: how many requests and how
//! many data bytes one connection may hold at once.
//!
//! A [`Budget`] is a small single-threaded semaphore with two dimensions
//! (requests, bytes). Waiters are served strictly first come, first served,
//! so a large request is not starved by a stream of small ones. A request
//! larger than the whole byte limit is admitted once no bytes are held (its
//! charge is clamped to the limit), so it waits but never deadlocks.
//! [`Permit`]s are released on drop, wherever the request ends.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Requests and bytes in flight on one connection, with their limits.
pub struct Budget {
    max_requests: Cell<usize>,
    max_bytes: usize,
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    requests: usize,
    bytes: usize,
    /// Waiting acquirers in arrival order: (ticket, waker).
    waiters: VecDeque<(u64, Option<Waker>)>,
    next_ticket: u64,
    /// Woken when the last request is released.
    idle_waiter: Option<Waker>,
}

impl State {
    fn wake_front(&mut self) -> Option<Waker> {
        self.waiters.front_mut().and_then(|(_, w)| w.take())
    }
}

impl Budget {
    /// A budget of at most `max_requests` requests (at least 1) and
    /// `max_bytes` bytes.
    pub fn new(max_requests: usize, max_bytes: usize) -> Rc<Self> {
        Rc::new(Self {
            max_requests: Cell::new(max_requests.max(1)),
            max_bytes,
            state: RefCell::default(),
        })
    }

    /// Requests currently holding a permit.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.state.borrow().requests
    }

    /// Bytes currently held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.state.borrow().bytes
    }

    fn fits(&self, st: &State, bytes: usize) -> bool {
        st.requests < self.max_requests.get() && st.bytes.saturating_add(bytes) <= self.max_bytes
    }

    /// Changes the request limit (at least 1). Requests holding a permit
    /// keep it; a raised limit admits waiters at once, a lowered one holds
    /// them until enough permits are released.
    pub fn set_max_requests(&self, max_requests: usize) {
        let max_requests = max_requests.max(1);
        if self.max_requests.replace(max_requests) >= max_requests {
            return;
        }
        let front = {
            let mut st = self.state.borrow_mut();
            if self.fits(&st, 0) {
                st.wake_front()
            } else {
                None
            }
        };
        if let Some(w) = front {
            w.wake();
        }
    }

    /// Waits (first come, first served) until one more request charging
    /// `bytes` fits, and takes it. Charges above the byte limit are clamped
    /// to it. Dropping the future gives up its place in line.
    pub fn acquire(self: &Rc<Self>, bytes: usize) -> Acquire {
        Acquire {
            budget: self.clone(),
            bytes: bytes.min(self.max_bytes),
            ticket: None,
        }
    }

    /// Waits until no request holds a permit.
    pub async fn idle(&self) {
        poll_fn(|cx| {
            let mut st = self.state.borrow_mut();
            if st.requests == 0 {
                Poll::Ready(())
            } else {
                st.idle_waiter = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    fn release(&self, bytes: usize) {
        let (front, idle) = {
            let mut st = self.state.borrow_mut();
            debug_assert!(st.requests > 0 && st.bytes >= bytes);
            st.requests -= 1;
            st.bytes -= bytes;
            let idle = if st.requests == 0 {
                st.idle_waiter.take()
            } else {
                None
            };
            (st.wake_front(), idle)
        };
        if let Some(w) = front {
            w.wake();
        }
        if let Some(w) = idle {
            w.wake();
        }
    }
}

/// Future of [`Budget::acquire`].
pub struct Acquire {
    budget: Rc<Budget>,
    bytes: usize,
    /// Our place in line once we had to wait.
    ticket: Option<u64>,
}

impl Future for Acquire {
    type Output = Permit;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let this = &mut *self;
        let budget = &this.budget;
        let mut st = budget.state.borrow_mut();
        let first = match this.ticket {
            None => st.waiters.is_empty(),
            Some(t) => st.waiters.front().is_some_and(|(f, _)| *f == t),
        };
        if first && budget.fits(&st, this.bytes) {
            if this.ticket.take().is_some() {
                st.waiters.pop_front();
            }
            st.requests += 1;
            st.bytes += this.bytes;
            // The next in line may fit as well.
            let next = if budget.fits(&st, 0) {
                st.wake_front()
            } else {
                None
            };
            drop(st);
            if let Some(w) = next {
                w.wake();
            }
            return Poll::Ready(Permit {
                budget: budget.clone(),
                bytes: this.bytes,
            });
        }
        match this.ticket {
            None => {
                let t = st.next_ticket;
                st.next_ticket += 1;
                st.waiters.push_back((t, Some(cx.waker().clone())));
                this.ticket = Some(t);
            }
            Some(t) => {
                if let Some(slot) = st.waiters.iter_mut().find(|(x, _)| *x == t) {
                    slot.1 = Some(cx.waker().clone());
                }
            }
        }
        Poll::Pending
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        let Some(t) = self.ticket else { return };
        let next = {
            let mut st = self.budget.state.borrow_mut();
            let was_front = st.waiters.front().is_some_and(|(f, _)| *f == t);
            st.waiters.retain(|(x, _)| *x != t);
            if was_front { st.wake_front() } else { None }
        };
        if let Some(w) = next {
            w.wake();
        }
    }
}

/// One request's share of a [`Budget`]; released on drop.
pub struct Permit {
    budget: Rc<Budget>,
    bytes: usize,
}

impl Permit {
    /// Charges `extra` more bytes without waiting (e.g. reply data that
    /// exists already); the budget may go over its limit, which holds off
    /// new requests until this permit is released.
    pub fn grow(&mut self, extra: usize) {
        self.budget.state.borrow_mut().bytes += extra;
        self.bytes += extra;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
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
        assert_eq!(b.bytes(), 0);
    }

    #[test]
    fn waiters_are_served_in_order_and_cancel_cleanly() {
        let b = Budget::new(1, 100);
        let p = b.acquire(10).now_or_never().unwrap();
        let mut big = Box::pin(b.acquire(100));
        let mut small = Box::pin(b.acquire(1));
        let w = futures::task::noop_waker();
        let mut cx = Context::from_waker(&w);
        assert!(big.as_mut().poll(&mut cx).is_pending());
        assert!(small.as_mut().poll(&mut cx).is_pending());
        drop(p);
        // The small one may not overtake the big one.
        assert!(small.as_mut().poll(&mut cx).is_pending());
        let Poll::Ready(pb) = big.as_mut().poll(&mut cx) else {
            panic!("first in line fits")
        };
        assert!(small.as_mut().poll(&mut cx).is_pending());
        drop(pb);
        // A cancelled waiter does not block the line.
        let mut third = Box::pin(b.acquire(1));
        assert!(third.as_mut().poll(&mut cx).is_pending());
        drop(small);
        assert!(third.as_mut().poll(&mut cx).is_ready());
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn the_request_limit_changes_live() {
        let b = Budget::new(1, 100);
        let p1 = b.acquire(0).now_or_never().unwrap();
        let mut waiting = Box::pin(b.acquire(0));
        let w = futures::task::noop_waker();
        let mut cx = Context::from_waker(&w);
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        b.set_max_requests(2);
        let Poll::Ready(p2) = waiting.as_mut().poll(&mut cx) else {
            panic!("a raised limit admits the waiter")
        };
        b.set_max_requests(1);
        assert!(b.acquire(0).now_or_never().is_none(), "2 held, limit 1");
        drop(p1);
        assert!(b.acquire(0).now_or_never().is_none(), "1 held, limit 1");
        drop(p2);
        assert!(b.acquire(0).now_or_never().is_some());
        b.set_max_requests(0);
        assert!(b.acquire(0).now_or_never().is_some(), "at least 1");
    }

    #[test]
    fn oversized_charges_are_clamped_and_grow_holds_off_requests() {
        let b = Budget::new(4, 100);
        let mut p = b.acquire(1000).now_or_never().unwrap();
        assert_eq!(b.bytes(), 100);
        drop(p);
        p = b.acquire(0).now_or_never().unwrap();
        p.grow(500);
        assert!(b.acquire(1).now_or_never().is_none());
        drop(p);
        assert_eq!(b.bytes(), 0);
        assert!(b.acquire(1).now_or_never().is_some());
    }
}
