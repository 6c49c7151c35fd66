//! A single-threaded executor with a virtual clock.
//!
//! Every task belongs to a simulated process; killing the process drops
//! its tasks where they stand, as a crash does. Among the tasks ready to
//! run, the next one is picked with the seeded generator, so the seed
//! chooses the interleaving; when none is ready the clock jumps to the
//! earliest timer. Nothing here reads the real clock or the OS scheduler,
//! so a seed replays exactly.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use pontoon_rt::{LocalFuture, SimRuntime};
use rand::Rng;
use rand::rngs::StdRng;

/// A simulated process: the unit a crash kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcId(pub u32);

/// The process of the simulator itself (its fault injector, manager,
/// "etcd"): never killed.
pub const WORLD: ProcId = ProcId(0);

struct Task {
    proc: ProcId,
    fut: Option<LocalFuture>,
}

struct TaskWaker {
    id: u64,
    woken: Arc<Mutex<Vec<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut w) = self.woken.lock() {
            w.push(self.id);
        }
    }
}

pub(crate) struct Inner {
    base: Instant,
    now_ns: Cell<u64>,
    tasks: RefCell<BTreeMap<u64, Task>>,
    woken: Arc<Mutex<Vec<u64>>>,
    ready: RefCell<BTreeSet<u64>>,
    timers: RefCell<BinaryHeap<Reverse<(u64, u64)>>>,
    timer_wakers: RefCell<BTreeMap<u64, Waker>>,
    next_id: Cell<u64>,
    current: Cell<ProcId>,
    dead: RefCell<BTreeSet<ProcId>>,
    /// Processes stopped as by SIGSTOP: their tasks wait in `parked`.
    frozen: RefCell<BTreeSet<ProcId>>,
    /// Tasks ready to run whose process is frozen.
    parked: RefCell<BTreeSet<u64>>,
    rng: Rc<RefCell<StdRng>>,
    polls: Cell<u64>,
}

/// Handle to the executor; clones share it.
#[derive(Clone)]
pub struct Executor {
    inner: Rc<Inner>,
}

/// Why [`Executor::run_until`] returned without its condition holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stall {
    /// The virtual deadline passed.
    Deadline,
    /// No task is ready and no timer is set: nothing can ever happen again.
    Deadlock,
    /// Too many polls without the clock moving: something spins.
    Livelock,
}

/// Polls allowed at one instant of virtual time before it counts as a livelock.
const MAX_POLLS_PER_INSTANT: u64 = 2_000_000;

impl Executor {
    /// An executor at virtual time zero, choosing with `rng`.
    pub fn new(rng: Rc<RefCell<StdRng>>) -> Self {
        Self {
            inner: Rc::new(Inner {
                base: Instant::now(),
                now_ns: Cell::new(0),
                tasks: RefCell::new(BTreeMap::new()),
                woken: Arc::new(Mutex::new(Vec::new())),
                ready: RefCell::new(BTreeSet::new()),
                timers: RefCell::new(BinaryHeap::new()),
                timer_wakers: RefCell::new(BTreeMap::new()),
                next_id: Cell::new(1),
                current: Cell::new(WORLD),
                dead: RefCell::new(BTreeSet::new()),
                frozen: RefCell::new(BTreeSet::new()),
                parked: RefCell::new(BTreeSet::new()),
                rng,
                polls: Cell::new(0),
            }),
        }
    }

    /// The [`SimRuntime`] to install so that `pontoon_rt` calls land here.
    pub fn runtime(&self) -> Rc<dyn SimRuntime> {
        Rc::new(Runtime {
            inner: Rc::downgrade(&self.inner),
        })
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.now_ns.get())
    }

    /// Tasks polled so far.
    pub fn polls(&self) -> u64 {
        self.inner.polls.get()
    }

    /// Runs `fut` as a task of process `proc`.
    pub fn spawn_on(&self, proc: ProcId, fut: impl Future<Output = ()> + 'static) {
        self.inner.spawn(proc, Box::pin(fut));
    }

    /// Drops every task of `proc`, now and whenever one would come back.
    pub fn kill(&self, proc: ProcId) {
        debug_assert_ne!(proc, WORLD, "the world process is never killed");
        self.inner.dead.borrow_mut().insert(proc);
        let doomed: Vec<Task> = {
            let mut tasks = self.inner.tasks.borrow_mut();
            let ids: Vec<u64> = tasks
                .iter()
                .filter(|(_, t)| t.proc == proc)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| tasks.remove(&id)).collect()
        };
        drop(doomed);
    }

    /// Stops running `proc`'s tasks, as SIGSTOP does: they keep their state
    /// and timers, and whatever becomes ready waits until [`Executor::thaw`].
    pub fn freeze(&self, proc: ProcId) {
        debug_assert_ne!(proc, WORLD, "the world process is never frozen");
        self.inner.frozen.borrow_mut().insert(proc);
        let tasks = self.inner.tasks.borrow();
        let mut ready = self.inner.ready.borrow_mut();
        let mut parked = self.inner.parked.borrow_mut();
        ready.retain(|id| {
            let keep = tasks.get(id).is_none_or(|t| t.proc != proc);
            if !keep {
                parked.insert(*id);
            }
            keep
        });
    }

    /// Lets a frozen process run again, as SIGCONT does.
    pub fn thaw(&self, proc: ProcId) {
        self.inner.frozen.borrow_mut().remove(&proc);
        let tasks = self.inner.tasks.borrow();
        let mut ready = self.inner.ready.borrow_mut();
        self.inner
            .parked
            .borrow_mut()
            .retain(|id| match tasks.get(id) {
                Some(t) if t.proc == proc => {
                    ready.insert(*id);
                    false
                }
                Some(_) => true,
                None => false,
            });
    }

    /// Drops every task (end of a run), so reference cycles through tasks go.
    pub fn shutdown(&self) {
        loop {
            let all = std::mem::take(&mut *self.inner.tasks.borrow_mut());
            if all.is_empty() {
                break;
            }
            drop(all);
        }
        self.inner.timer_wakers.borrow_mut().clear();
    }

    /// Runs tasks until `done()` holds (checked between polls), the virtual
    /// clock passes `deadline`, or nothing can happen any more.
    pub fn run_until(
        &self,
        deadline: Duration,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), Stall> {
        let inner = &self.inner;
        let deadline_ns = deadline.as_nanos() as u64;
        let mut polls_here = 0u64;
        loop {
            if done() {
                return Ok(());
            }
            inner.collect_woken();
            let next = {
                let ready = inner.ready.borrow();
                if ready.is_empty() {
                    None
                } else {
                    let i = inner.rng.borrow_mut().random_range(0..ready.len());
                    ready.iter().nth(i).copied()
                }
            };
            match next {
                Some(id) => {
                    inner.ready.borrow_mut().remove(&id);
                    inner.poll_task(id);
                    polls_here += 1;
                    if polls_here > MAX_POLLS_PER_INSTANT {
                        return Err(Stall::Livelock);
                    }
                }
                None => {
                    let Some(Reverse((at, seq))) = inner.timers.borrow_mut().pop() else {
                        return Err(Stall::Deadlock);
                    };
                    if at > deadline_ns {
                        inner.timers.borrow_mut().push(Reverse((at, seq)));
                        inner.now_ns.set(deadline_ns.max(inner.now_ns.get()));
                        return Err(Stall::Deadline);
                    }
                    if at > inner.now_ns.get() {
                        inner.now_ns.set(at);
                        polls_here = 0;
                    }
                    let w = inner.timer_wakers.borrow_mut().remove(&seq);
                    if let Some(w) = w {
                        w.wake();
                    }
                }
            }
        }
    }
}

impl Inner {
    fn spawn(&self, proc: ProcId, fut: LocalFuture) {
        if self.dead.borrow().contains(&proc) {
            return;
        }
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        self.tasks.borrow_mut().insert(
            id,
            Task {
                proc,
                fut: Some(fut),
            },
        );
        self.make_ready(id, proc);
    }

    /// Queues task `id` of `proc` to run (or parks it while `proc` is frozen).
    fn make_ready(&self, id: u64, proc: ProcId) {
        if self.frozen.borrow().contains(&proc) {
            self.parked.borrow_mut().insert(id);
        } else {
            self.ready.borrow_mut().insert(id);
        }
    }

    fn collect_woken(&self) {
        let woken = match self.woken.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(_) => return,
        };
        if woken.is_empty() {
            return;
        }
        let procs: Vec<(u64, ProcId)> = {
            let tasks = self.tasks.borrow();
            woken
                .into_iter()
                .filter_map(|id| tasks.get(&id).map(|t| (id, t.proc)))
                .collect()
        };
        for (id, proc) in procs {
            self.make_ready(id, proc);
        }
    }

    fn poll_task(&self, id: u64) {
        let (proc, mut fut) = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(t) = tasks.get_mut(&id) else { return };
            let Some(f) = t.fut.take() else { return };
            (t.proc, f)
        };
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            woken: self.woken.clone(),
        }));
        let mut cx = Context::from_waker(&waker);
        let before = self.current.replace(proc);
        self.polls.set(self.polls.get() + 1);
        let done = fut.as_mut().poll(&mut cx).is_ready();
        self.current.set(before);
        let killed = self.dead.borrow().contains(&proc);
        if done || killed {
            let t = self.tasks.borrow_mut().remove(&id);
            drop(t);
            drop(fut);
        } else if let Some(t) = self.tasks.borrow_mut().get_mut(&id) {
            t.fut = Some(fut);
        }
    }

    fn add_timer(&self, at: u64, waker: Waker, seq: Option<u64>) -> u64 {
        let seq = match seq {
            Some(s) => s,
            None => {
                let s = self.next_id.get();
                self.next_id.set(s + 1);
                self.timers.borrow_mut().push(Reverse((at, s)));
                s
            }
        };
        self.timer_wakers.borrow_mut().insert(seq, waker);
        seq
    }
}

struct Runtime {
    inner: Weak<Inner>,
}

impl SimRuntime for Runtime {
    fn spawn(&self, task: LocalFuture) {
        if let Some(inner) = self.inner.upgrade() {
            let proc = inner.current.get();
            inner.spawn(proc, task);
        }
    }

    fn sleep(&self, d: Duration) -> LocalFuture {
        let at = self
            .inner
            .upgrade()
            .map_or(0, |i| i.now_ns.get().saturating_add(d.as_nanos() as u64));
        Box::pin(Sleep {
            inner: self.inner.clone(),
            at,
            seq: None,
        })
    }

    fn now(&self) -> Instant {
        match self.inner.upgrade() {
            Some(i) => i.base + Duration::from_nanos(i.now_ns.get()),
            None => Instant::now(),
        }
    }
}

/// A timer on the virtual clock.
struct Sleep {
    inner: Weak<Inner>,
    at: u64,
    seq: Option<u64>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(inner) = self.inner.upgrade() else {
            return Poll::Ready(());
        };
        if inner.now_ns.get() >= self.at {
            if let Some(s) = self.seq.take() {
                inner.timer_wakers.borrow_mut().remove(&s);
            }
            return Poll::Ready(());
        }
        let seq = inner.add_timer(self.at, cx.waker().clone(), self.seq);
        self.seq = Some(seq);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let (Some(s), Some(inner)) = (self.seq, self.inner.upgrade())
            && let Ok(mut w) = inner.timer_wakers.try_borrow_mut()
        {
            w.remove(&s);
        }
    }
}
