//! A single-threaded async signal: tasks wait for the next notification.
//!
//! Waiters re-check their condition after every wake-up, so a notification
//! is a hint, never a hand-off; missed or spurious wake-ups are harmless.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// Wakes every task waiting on it when notified.
#[derive(Default)]
pub(crate) struct Signal {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
    /// The previous waiter list, emptied, kept for its capacity: a notify
    /// swaps the two instead of leaving an unallocated list behind (the
    /// data path notifies on every commit).
    spare: RefCell<Vec<Waker>>,
}

impl Signal {
    /// Wakes all current waiters.
    pub(crate) fn notify(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let mut waiters = std::mem::take(&mut *self.spare.borrow_mut());
        std::mem::swap(&mut waiters, &mut *self.waiters.borrow_mut());
        // No borrow is held while waking.
        for w in waiters.drain(..) {
            w.wake();
        }
        *self.spare.borrow_mut() = waiters;
    }

    /// Completes at the next [`Signal::notify`] after this call.
    pub(crate) fn wait(&self) -> Wait<'_> {
        Wait {
            signal: self,
            start: self.generation.get(),
        }
    }
}

/// Future returned by [`Signal::wait`].
pub(crate) struct Wait<'a> {
    signal: &'a Signal,
    start: u64,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation.get() != self.start {
            return Poll::Ready(());
        }
        let mut w = self.signal.waiters.borrow_mut();
        if !w.iter().any(|x| x.will_wake(cx.waker())) {
            w.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Yields to the executor once, letting other tasks run.
pub(crate) async fn yield_now() {
    struct YieldNow(bool);
    impl Future for YieldNow {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
    YieldNow(false).await
}
