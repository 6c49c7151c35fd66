//! Processes a testbed started in its hosts: signals, waits and logs.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a SIGKILLed process may take to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// A process started in a host of a testbed (or in the root namespace).
/// Clones are handles on the same process; the testbed kills it on drop.
#[derive(Clone)]
pub struct Proc {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    host: String,
    pid: u32,
    log: PathBuf,
    child: Mutex<Child>,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proc")
            .field("name", &self.inner.name)
            .field("host", &self.inner.host)
            .field("pid", &self.inner.pid)
            .finish()
    }
}

impl Proc {
    pub(crate) fn new(name: &str, host: &str, child: Child, log: PathBuf) -> Proc {
        Proc {
            inner: Arc::new(Inner {
                name: name.to_string(),
                host: host.to_string(),
                pid: child.id(),
                log,
                child: Mutex::new(child),
            }),
        }
    }

    fn child(&self) -> MutexGuard<'_, Child> {
        // A panic while holding the lock leaves the Child usable.
        self.inner
            .child
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Its name, which is also its log's name (`log/<name>.log`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The host it runs in (`"test"` for the root namespace).
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// Its process id (the program's own: nothing sits in between).
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    /// Its log file (stdout and stderr, appended).
    pub fn log_path(&self) -> &Path {
        &self.inner.log
    }

    /// Its exit status, if it has exited (a stopped process has not).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.child()
            .try_wait()
            .unwrap_or_else(|e| panic!("cannot wait for {self:?}: {e}"))
    }

    /// Whether it has not exited yet (a stopped process is running).
    pub fn is_running(&self) -> bool {
        self.exit_status().is_none()
    }

    /// Sends `sig` if it has not exited; returns whether it was sent.
    /// The child is not reaped before the lock is released, so the pid
    /// cannot belong to another process meanwhile.
    fn signal(&self, sig: i32) -> bool {
        let mut child = self.child();
        if child
            .try_wait()
            .unwrap_or_else(|e| panic!("cannot wait for {self:?}: {e}"))
            .is_some()
        {
            return false;
        }
        // SAFETY: kill(2) on our own unreaped child.
        let r = unsafe { libc::kill(self.inner.pid as i32, sig) };
        assert_eq!(
            r,
            0,
            "kill({}, {sig}) of {self:?}: {}",
            self.inner.pid,
            std::io::Error::last_os_error()
        );
        true
    }

    /// Waits up to `timeout` for it to exit; `None` if it is still running.
    pub fn wait_exit(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.exit_status() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs it (if it still runs) and reaps it.
    pub fn kill9(&self) {
        self.signal(libc::SIGKILL);
        assert!(
            self.wait_exit(REAP_TIMEOUT).is_some(),
            "{self:?} did not die within {REAP_TIMEOUT:?} of SIGKILL"
        );
    }

    /// Sends SIGKILL (if it still runs) without waiting for it to die, so
    /// several processes can be killed at the same moment; reap them with
    /// [`Proc::kill9`] or [`Proc::wait_exit`]. Returns whether it was sent.
    pub fn send_sigkill(&self) -> bool {
        self.signal(libc::SIGKILL)
    }

    /// SIGSTOPs it: it stays alive, holds its sockets and answers nothing.
    /// Panics if it has exited.
    pub fn sigstop(&self) {
        assert!(
            self.signal(libc::SIGSTOP),
            "cannot SIGSTOP {self:?}: it has exited ({:?})\n{}",
            self.exit_status(),
            self.log_tail(20)
        );
    }

    /// SIGCONTs it after [`Proc::sigstop`]. Panics if it has exited.
    pub fn sigcont(&self) {
        assert!(
            self.signal(libc::SIGCONT),
            "cannot SIGCONT {self:?}: it has exited ({:?})\n{}",
            self.exit_status(),
            self.log_tail(20)
        );
    }

    /// SIGTERMs it (and SIGCONTs it, in case it is stopped) and waits up to
    /// `timeout` for it to exit. Panics, after SIGKILLing it, if it does not.
    pub fn sigterm_and_wait(&self, timeout: Duration) -> ExitStatus {
        if self.signal(libc::SIGTERM) {
            self.signal(libc::SIGCONT);
        }
        match self.wait_exit(timeout) {
            Some(st) => st,
            None => {
                self.kill9();
                panic!(
                    "{self:?} did not exit within {timeout:?} of SIGTERM (SIGKILLed it)\n{}",
                    self.log_tail(40)
                )
            }
        }
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.inner.log, lines)
    }

    /// How many lines of its log contain `pattern`.
    pub fn log_count(&self, pattern: &str) -> usize {
        count_lines(&self.inner.log, pattern)
    }

    /// Kills and reaps it without panicking (for drop).
    pub(crate) fn kill_quietly(&self) {
        self.signal(libc::SIGKILL);
        let _ = self.wait_exit(REAP_TIMEOUT);
    }
}

/// The last `lines` lines of a file ("" if it cannot be read).
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How many lines of a file contain `pattern` (0 if it cannot be read).
pub(crate) fn count_lines(path: &Path, pattern: &str) -> usize {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| l.contains(pattern))
        .count()
}
