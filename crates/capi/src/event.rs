//! `pontoon_event_fd`: one descriptor an event loop can wait on, readable
//! whenever `pontoon_poll` has something to do.
//!
//! It is an epoll descriptor holding three others:
//! - the context's io_uring descriptor, readable when the kernel has
//!   completed I/O the runtime has not reaped (the runtime's cross-thread
//!   wake-ups arrive this way too, as the completion of a poll on its own
//!   eventfd);
//! - an eventfd, kept readable while completions wait in the context's
//!   queue or tasks are ready to run;
//! - a timerfd, armed for the runtime's earliest timer (retry backoff,
//!   attempt timeouts), which lives in user space and would otherwise
//!   never wake a waiting loop.
//!
//! After every call on a context in this mode, [`EventFd::sync`] runs the
//! ready tasks, submits the I/O they queued, marks the runtime idle (so a
//! wake-up from another thread writes its eventfd), and sets the eventfd
//! and the timer accordingly.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The descriptors behind an event fd, and what they are set to.
pub(crate) struct EventFd {
    epoll: OwnedFd,
    signal: OwnedFd,
    timer: OwnedFd,
    /// Whether `signal` holds a count (is readable).
    signalled: bool,
    /// When `timer` fires, if armed.
    armed: Option<Instant>,
}

/// `Ok(fd)` unless a libc call returned -1.
fn check(r: libc::c_int) -> io::Result<RawFd> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(r: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a descriptor just returned to us, owned by nobody else.
    check(r).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
}

impl EventFd {
    /// An event fd over the io_uring descriptor `ring`.
    pub fn new(ring: RawFd) -> io::Result<Self> {
        // SAFETY: plain syscalls on descriptors we own.
        unsafe {
            let epoll = owned(libc::epoll_create1(libc::EPOLL_CLOEXEC))?;
            let signal = owned(libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
            let timer = owned(libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
            ))?;
            for fd in [ring, signal.as_raw_fd(), timer.as_raw_fd()] {
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: fd as u64,
                };
                check(libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    fd,
                    &mut ev,
                ))?;
            }
            Ok(Self {
                epoll,
                signal,
                timer,
                signalled: false,
                armed: None,
            })
        }
    }

    /// The descriptor handed out.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Makes `signal` readable iff `ready`; arms the timer for `next`
    /// (from now) unless it is armed for as early already.
    pub fn set(&mut self, ready: bool, next: Option<Duration>) {
        let fd = self.signal.as_raw_fd();
        if ready != self.signalled {
            let mut v: u64 = 1;
            // SAFETY: an 8-byte read or write on our eventfd.
            unsafe {
                if ready {
                    libc::write(fd, (&raw const v).cast(), 8);
                } else {
                    libc::read(fd, (&raw mut v).cast(), 8);
                }
            }
            self.signalled = ready;
        }
        let now = Instant::now();
        if self.armed.is_some_and(|t| t <= now) {
            let mut v: u64 = 0;
            // SAFETY: an 8-byte read on our non-blocking timerfd (clears it).
            unsafe { libc::read(self.timer.as_raw_fd(), (&raw mut v).cast(), 8) };
            self.armed = None;
        }
        let Some(d) = next else { return };
        let at = now + d;
        if self.armed.is_some_and(|t| t <= at) {
            return;
        }
        // A zero it_value disarms: fire after at least a nanosecond.
        let d = d.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: arms our timerfd with a valid, relative itimerspec.
        let r = unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut())
        };
        if r == 0 {
            self.armed = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `fd` is readable now.
    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn readable_while_signalled_and_when_the_timer_fires() {
        let rt = compio::runtime::Runtime::new().unwrap();
        let mut e = EventFd::new(rt.as_raw_fd()).unwrap();
        assert!(!readable(e.fd()));
        e.set(true, None);
        assert!(readable(e.fd()));
        e.set(false, None);
        assert!(!readable(e.fd()));
        e.set(false, Some(Duration::from_millis(20)));
        assert!(!readable(e.fd()));
        std::thread::sleep(Duration::from_millis(40));
        assert!(readable(e.fd()));
        e.set(false, None);
        assert!(!readable(e.fd()), "the fired timer is cleared");
    }
}
