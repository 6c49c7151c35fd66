//! A context: one thread's compio runtime and client, the requests it has
//! outstanding and the bounded queue of their completions; and the
//! volumes opened through it.
//!
//! An asynchronous request is a task spawned on the context's runtime; it
//! runs when the caller drives the runtime (`pontoon_poll`, a synchronous
//! call, `pontoon_close`), in the caller's thread, and ends by queueing its
//! completion. A request counts against the context's limit from its
//! submission until `pontoon_poll` hands its completion out, so the queue
//! never holds more than the limit.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::os::fd::{AsRawFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use compio::runtime::Runtime;
use futures::FutureExt;
use pontoon_client::{Client, Volume};
use pontoon_volume::{BlockVolume, check_io};

use crate::error::{Fail, panic_text, set_last_error};
use crate::event::EventFd;
use crate::feeds::{self, FeedRef, Owner};
use crate::{
    PONTOON_BLOCK_SIZE, PONTOON_DEFAULT_MAX_IN_FLIGHT, PONTOON_MAX_IO, pontoon_completion,
    pontoon_stat, pontoon_vol,
};

/// A completion waiting to be handed out.
struct Done {
    user_data: u64,
    result: i64,
    /// The failure's message, for `pontoon_last_error`.
    err: Option<String>,
}

/// What a context's tasks share with it.
struct Shared {
    /// Completions not yet handed out (at most `limit`).
    done: RefCell<VecDeque<Done>>,
    /// Requests submitted whose completion has not been handed out.
    outstanding: Cell<usize>,
    /// Most requests outstanding at once.
    limit: Cell<usize>,
}

impl Shared {
    fn complete(&self, d: Done) {
        self.done.borrow_mut().push_back(d);
    }
}

/// One thread's connection to a cluster.
pub(crate) struct Ctx {
    owner: Owner,
    shared: Rc<Shared>,
    /// Set once the runtime panicked: its tasks are gone, so is every
    /// request in flight; every call fails from then on.
    poisoned: RefCell<Option<String>>,
    /// The event fd, once handed out.
    event: RefCell<Option<EventFd>>,
    /// Every volume handle made here, open or closed; freed on disconnect.
    vols: RefCell<Vec<*mut pontoon_vol>>,
    client: Client,
    rt: Runtime,
    _feed: FeedRef,
}

/// Marks the context poisoned if the runtime unwinds through it.
struct PoisonOnPanic<'a>(&'a Ctx);

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(mut p) = self.0.poisoned.try_borrow_mut()
        {
            p.get_or_insert_with(|| "the context's runtime panicked".into());
        }
    }
}

impl Ctx {
    /// Connects to the cluster `spec` names (see `pontoon_connect`).
    pub fn connect(spec: Option<&str>) -> Result<Rc<Self>, Fail> {
        let at = crate::target::resolve(spec)?;
        let me = crate::target::identity(spec, &at)?;
        let feed = feeds::acquire(&at.endpoints, &at.name, &at.auth, me)?;
        let rt = Runtime::new().map_err(|e| {
            Fail::new(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("starting the io_uring runtime: {e}"),
            )
        })?;
        let client = rt.enter(|| Client::new(feed.feed().clone()));
        let limit = PONTOON_DEFAULT_MAX_IN_FLIGHT as usize;
        Ok(Rc::new(Self {
            owner: Owner::current(),
            shared: Rc::new(Shared {
                done: RefCell::new(VecDeque::with_capacity(limit)),
                outstanding: Cell::new(0),
                limit: Cell::new(limit),
            }),
            poisoned: RefCell::new(None),
            event: RefCell::new(None),
            vols: RefCell::new(Vec::new()),
            client,
            rt,
            _feed: feed,
        }))
    }

    /// `Ok` if the calling thread owns the context and it still works.
    pub fn check(&self) -> Result<(), Fail> {
        self.owner.check()?;
        match &*self.poisoned.borrow() {
            None => Ok(()),
            Some(why) => Err(Fail::new(
                libc::EIO,
                format!("context unusable: {why}; disconnect it"),
            )),
        }
    }

    /// `Ok` if the calling thread owns the context (poisoned or not).
    pub fn check_owner(&self) -> Result<(), Fail> {
        self.owner.check()
    }

    /// Runs the runtime until `f` is ready or `deadline` passes (`None`
    /// then). Unlike `Runtime::block_on`, which waits in the kernel once
    /// more after the tasks it ran have made `f` ready, it polls `f` after
    /// every turn of the tasks, so a request costs one wait in the kernel.
    fn drive<F: Future>(&self, f: F, deadline: Option<Instant>) -> Option<F::Output> {
        let _g = PoisonOnPanic(self);
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        self.rt.enter(|| {
            loop {
                if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    return Some(v);
                }
                let more = self.rt.run();
                if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    return Some(v);
                }
                let left = match deadline {
                    None => None,
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => Some(left),
                        _ => return None,
                    },
                };
                let wait = if more {
                    Some(Duration::ZERO)
                } else {
                    match (self.rt.current_timeout(), left) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                };
                self.rt.poll_with(wait);
            }
        })
    }

    /// Runs the runtime until `cond` holds or `deadline` passes.
    fn drive_until(&self, cond: impl Fn() -> bool, deadline: Option<Instant>) {
        self.drive(
            poll_fn(|_| {
                if cond() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }),
            deadline,
        );
    }

    /// Runs what is ready without waiting: tasks, then the I/O and timers
    /// that have completed, then the tasks those woke.
    fn drive_once(&self) {
        let _g = PoisonOnPanic(self);
        self.rt.enter(|| {
            self.rt.run();
            self.rt.poll_with(Some(Duration::ZERO));
            self.rt.run();
        });
    }

    /// Leaves the event fd (if handed out) readable iff there is work:
    /// runs ready tasks, submits their I/O, marks the runtime idle so that
    /// wake-ups from other threads reach its eventfd, arms the timer.
    fn after_call(&self) {
        let Ok(mut ev) = self.event.try_borrow_mut() else {
            return;
        };
        let Some(ev) = ev.as_mut() else { return };
        if self.poisoned.borrow().is_some() {
            ev.set(true, None);
            return;
        }
        let _g = PoisonOnPanic(self);
        let more = self.rt.enter(|| self.rt.run());
        let woken = self.rt.flush();
        let ready = more || woken || !self.shared.done.borrow().is_empty();
        ev.set(ready, self.rt.current_timeout());
    }

    /// `pontoon_poll`: waits (driving the runtime) for `min` completions
    /// (at most those outstanding) or `timeout` (`None`: no limit), then
    /// hands out up to `out.len()`.
    pub fn poll(
        &self,
        out: &mut [pontoon_completion],
        min: usize,
        timeout: Option<Duration>,
    ) -> Result<usize, Fail> {
        self.check()?;
        let sh = &*self.shared;
        let need = min.min(sh.outstanding.get());
        if need == 0 || timeout == Some(Duration::ZERO) {
            self.drive_once();
        } else if sh.done.borrow().len() < need {
            let deadline = timeout.map(|d| Instant::now() + d);
            self.drive_until(|| sh.done.borrow().len() >= need, deadline);
        }
        let mut done = sh.done.borrow_mut();
        let n = out.len().min(done.len());
        let mut failure = None;
        for (slot, d) in out.iter_mut().zip(done.drain(..n)) {
            *slot = pontoon_completion {
                user_data: d.user_data,
                result: d.result,
            };
            if d.err.is_some() {
                failure = d.err;
            }
        }
        drop(done);
        sh.outstanding.set(sh.outstanding.get() - n);
        if let Some(msg) = failure {
            set_last_error(&msg);
        }
        self.after_call();
        Ok(n)
    }

    /// `pontoon_event_fd`.
    pub fn event_fd(&self) -> Result<RawFd, Fail> {
        self.check()?;
        let fd = {
            let mut ev = self.event.borrow_mut();
            match &*ev {
                Some(e) => e.fd(),
                None => {
                    let e = EventFd::new(self.rt.as_raw_fd())?;
                    let fd = e.fd();
                    *ev = Some(e);
                    fd
                }
            }
        };
        self.after_call();
        Ok(fd)
    }

    /// `pontoon_set_max_in_flight`.
    pub fn set_limit(&self, n: usize) -> Result<(), Fail> {
        self.check()?;
        if !(1..=MAX_LIMIT).contains(&n) {
            return Err(Fail::inval(format!(
                "max in flight {n} must be between 1 and {MAX_LIMIT}"
            )));
        }
        self.shared.limit.set(n);
        let mut done = self.shared.done.borrow_mut();
        let have = done.capacity();
        done.reserve(n.saturating_sub(have));
        Ok(())
    }

    /// `pontoon_open`: a new handle, owned by the context.
    pub fn open(self: &Rc<Self>, name: &str) -> Result<*mut pontoon_vol, Fail> {
        self.check()?;
        let (vol, object_size) = self.rt.enter(|| {
            let vol = self.client.open(name)?;
            let map = self.client.transport().map.get();
            let object_size = map.volume_by_name(name).map_or(0, |v| v.object_size);
            Ok::<_, Fail>((vol, object_size))
        })?;
        let handle = Box::into_raw(Box::new(pontoon_vol {
            vol: Vol {
                ctx: self.clone(),
                open: RefCell::new(Some(OpenVol {
                    vol,
                    object_size,
                    inflight: Rc::new(Cell::new(0)),
                })),
            },
        }));
        self.vols.borrow_mut().push(handle);
        Ok(handle)
    }

    /// `pontoon_disconnect`: closes every volume still open (waiting for
    /// their requests), frees every handle, stops the runtime, and releases
    /// the map feed.
    pub fn disconnect(this: Rc<Self>) -> Result<(), Fail> {
        this.owner.check()?;
        let handles = std::mem::take(&mut *this.vols.borrow_mut());
        for h in handles {
            // SAFETY: made by `open` with Box::into_raw, freed only here.
            let h = unsafe { Box::from_raw(h) };
            let _ = h.vol.close();
        }
        let Ok(ctx) = Rc::try_unwrap(this) else {
            return Err(Fail::new(libc::EBUSY, "context still referenced"));
        };
        let Ctx {
            event,
            client,
            rt,
            shared,
            _feed,
            ..
        } = ctx;
        drop(event);
        rt.enter(|| {
            drop(client);
            drop(shared);
        });
        drop(rt);
        drop(_feed);
        Ok(())
    }
}

/// Largest `pontoon_set_max_in_flight`.
const MAX_LIMIT: usize = 65536;

/// An open volume's state.
struct OpenVol {
    vol: Volume,
    object_size: u64,
    /// Its requests not yet completed.
    inflight: Rc<Cell<usize>>,
}

/// A volume handle: open, or closed (then every call is `-EBADF`).
pub(crate) struct Vol {
    ctx: Rc<Ctx>,
    open: RefCell<Option<OpenVol>>,
}

/// One request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// Read into `buf`.
    Read { buf: *mut u8, len: u64, off: u64 },
    /// Write from `buf`.
    Write { buf: *const u8, len: u64, off: u64 },
    /// Flush.
    Flush,
    /// Deallocate.
    Discard { len: u64, off: u64 },
    /// Write zeros (allocated).
    WriteZeroes { len: u64, off: u64 },
}

fn ebadf() -> Fail {
    Fail::new(libc::EBADF, "the volume is closed")
}

impl Op {
    /// Checks the request against the volume: `-EINVAL` at once.
    fn validate(&self, vol: &Volume) -> Result<(), Fail> {
        let (len, off, buf_null) = match *self {
            Op::Read { buf, len, off } => (len, off, Some(buf.is_null())),
            Op::Write { buf, len, off } => (len, off, Some(buf.is_null())),
            Op::Discard { len, off } | Op::WriteZeroes { len, off } => (len, off, None),
            Op::Flush => return Ok(()),
        };
        if let Some(null) = buf_null {
            if null && len > 0 {
                return Err(Fail::inval("buf is NULL"));
            }
            if len > PONTOON_MAX_IO {
                return Err(Fail::inval(format!(
                    "length {len} is more than PONTOON_MAX_IO ({PONTOON_MAX_IO})"
                )));
            }
        }
        check_io(vol.current_size(), off, len).map_err(|e| Fail::inval(e.to_string()))
    }

    /// Runs the request; the bytes transferred (0 for the others).
    async fn run(self, vol: Volume) -> Result<i64, Fail> {
        match self {
            Op::Read { buf, len, off } => {
                let data = vol.read_at(off, len).await?;
                if data.len() as u64 != len {
                    return Err(Fail::new(
                        libc::EIO,
                        format!("read of {len} bytes returned {}", data.len()),
                    ));
                }
                // SAFETY: the caller keeps `buf` valid for `len` bytes until
                // the request completes (the API's contract); `data` is ours.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len()) };
                Ok(len as i64)
            }
            Op::Write { buf, len, off } => {
                let data: &[u8] = if len == 0 {
                    &[]
                } else {
                    // SAFETY: as for reads; validated non-NULL, len <= PONTOON_MAX_IO.
                    unsafe { std::slice::from_raw_parts(buf, len as usize) }
                };
                vol.write_at(off, data).await?;
                Ok(len as i64)
            }
            Op::Flush => {
                BlockVolume::flush(&vol).await?;
                Ok(0)
            }
            Op::Discard { len, off } => {
                vol.discard_at(off, len).await?;
                Ok(0)
            }
            Op::WriteZeroes { len, off } => {
                BlockVolume::write_zeroes(&vol, off, len, false).await?;
                Ok(0)
            }
        }
    }
}

impl Vol {
    /// `pontoon_aio_*`: queues `op`; its completion carries `user_data`.
    pub fn submit(&self, user_data: u64, op: Op) -> Result<(), Fail> {
        let ctx = &*self.ctx;
        ctx.check()?;
        {
            let open = self.open.borrow();
            let o = open.as_ref().ok_or_else(ebadf)?;
            op.validate(&o.vol)?;
            let sh = &ctx.shared;
            if sh.outstanding.get() >= sh.limit.get() {
                return Err(Fail::new(
                    libc::EAGAIN,
                    format!(
                        "{} requests outstanding (the context's limit): reap completions with pontoon_poll first",
                        sh.outstanding.get()
                    ),
                ));
            }
            sh.outstanding.set(sh.outstanding.get() + 1);
            o.inflight.set(o.inflight.get() + 1);
            let (shared, inflight, vol) = (sh.clone(), o.inflight.clone(), o.vol.clone());
            ctx.rt
                .spawn(async move {
                    let (result, err) = match AssertUnwindSafe(op.run(vol)).catch_unwind().await {
                        Ok(Ok(n)) => (n, None),
                        Ok(Err(f)) => (-i64::from(f.errno), Some(f.msg)),
                        Err(p) => (
                            -i64::from(libc::EIO),
                            Some(format!("internal error: {}", panic_text(&*p))),
                        ),
                    };
                    inflight.set(inflight.get() - 1);
                    shared.complete(Done {
                        user_data,
                        result,
                        err,
                    });
                })
                .detach();
        }
        ctx.after_call();
        Ok(())
    }

    /// The synchronous calls: runs `op` to completion (other requests make
    /// progress meanwhile; their completions stay queued).
    pub fn run_sync(&self, op: Op) -> Result<i64, Fail> {
        let ctx = &*self.ctx;
        ctx.check()?;
        let vol = {
            let open = self.open.borrow();
            let o = open.as_ref().ok_or_else(ebadf)?;
            op.validate(&o.vol)?;
            o.vol.clone()
        };
        let r = ctx
            .drive(op.run(vol), None)
            .expect("drive without a deadline returns only once the future is ready");
        ctx.after_call();
        r
    }

    /// `pontoon_stat`.
    pub fn stat(&self) -> Result<pontoon_stat, Fail> {
        self.ctx.check()?;
        let open = self.open.borrow();
        let o = open.as_ref().ok_or_else(ebadf)?;
        Ok(pontoon_stat {
            size: o.vol.current_size(),
            block_size: PONTOON_BLOCK_SIZE,
            object_size: u32::try_from(o.object_size).unwrap_or(u32::MAX),
        })
    }

    /// `pontoon_close`: waits for the volume's requests, then closes it
    /// (the handle stays, answering `-EBADF`, until disconnect).
    pub fn close(&self) -> Result<(), Fail> {
        let ctx = &*self.ctx;
        ctx.owner.check()?;
        let inflight = {
            let open = self.open.borrow();
            open.as_ref().ok_or_else(ebadf)?.inflight.clone()
        };
        if ctx.poisoned.borrow().is_none() && inflight.get() > 0 {
            ctx.drive_until(|| inflight.get() == 0, None);
        }
        let gone = self.open.borrow_mut().take();
        ctx.rt.enter(|| drop(gone));
        ctx.after_call();
        Ok(())
    }
}
