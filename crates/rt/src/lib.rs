//! The runtime seam of Pontoon's protocol code.
//!
//! Replication, peering, recovery and the client's retries spawn tasks,
//! sleep and read the clock only through this crate. In production each
//! call goes to compio (the thread's io_uring runtime) and to the system
//! clock. A deterministic simulator installs a [`SimRuntime`] on its thread
//! instead, and the same code then runs on the simulator's executor and
//! virtual clock, so a schedule is a function of the simulator's seed.
//!
//! The check is one thread-local read per call; none of these calls sits
//! on the per-I/O fast path except [`now`] in the client's retry loop.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A boxed task or timer, as the simulator takes them.
pub type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// What a simulator provides in place of compio and the system clock.
pub trait SimRuntime {
    /// Runs `task` to completion in the background, on behalf of the task
    /// that is running now (it dies with that task's process).
    fn spawn(&self, task: LocalFuture);
    /// A timer that fires `d` from now on the virtual clock.
    fn sleep(&self, d: Duration) -> LocalFuture;
    /// The virtual time now.
    fn now(&self) -> Instant;
}

thread_local! {
    static SIM: RefCell<Option<Rc<dyn SimRuntime>>> = const { RefCell::new(None) };
}

fn sim() -> Option<Rc<dyn SimRuntime>> {
    SIM.with(|s| s.borrow().clone())
}

/// Routes this thread's calls to `rt` until the guard is dropped.
pub fn install(rt: Rc<dyn SimRuntime>) -> Installed {
    let previous = SIM.with(|s| s.borrow_mut().replace(rt));
    Installed { previous }
}

/// Keeps a [`SimRuntime`] installed; dropping it restores what was before.
pub struct Installed {
    previous: Option<Rc<dyn SimRuntime>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SIM.with(|s| *s.borrow_mut() = previous);
    }
}

/// Whether a simulator runs this thread.
pub fn simulated() -> bool {
    SIM.with(|s| s.borrow().is_some())
}

/// Runs `task` in the background on this thread's runtime.
pub fn spawn<F: Future<Output = ()> + 'static>(task: F) {
    match sim() {
        Some(rt) => rt.spawn(Box::pin(task)),
        None => compio::runtime::spawn(task).detach(),
    }
}

/// Waits `d`.
pub async fn sleep(d: Duration) {
    match sim() {
        Some(rt) => rt.sleep(d).await,
        None => compio::time::sleep(d).await,
    }
}

/// The time now (virtual under a simulator).
pub fn now() -> Instant {
    match sim() {
        Some(rt) => rt.now(),
        None => Instant::now(),
    }
}

/// `fut`'s output, or `None` if `d` passes first.
pub async fn timeout<T>(d: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let fut = std::pin::pin!(fut);
    let timer = std::pin::pin!(sleep(d));
    match futures::future::select(fut, timer).await {
        futures::future::Either::Left((v, _)) => Some(v),
        futures::future::Either::Right(_) => None,
    }
}
