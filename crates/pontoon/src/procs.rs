//! Child processes of a local cluster: spawning them (attached to `pontoon
//! up`, or detached), pid files, and signalling and waiting for a process
//! by pid — always one known pid, checked to be the process we mean.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// How a spawned process relates to the one spawning it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A child of `pontoon up`: its own process group (a terminal's Ctrl-C
    /// reaches only `up`, which stops children in order), and SIGTERM when
    /// `up` dies, however it dies. Must be spawned from a thread that lives
    /// as long as the process (the main thread): the death signal follows
    /// the spawning thread.
    Child,
    /// Detached: a session of its own, outliving the command that started it.
    Detached,
}

/// Spawns `program args`, stdin from /dev/null, stdout and stderr appended
/// to `log`.
pub fn spawn(program: &Path, args: &[String], log: &Path, attach: Attach) -> Result<Child> {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let err = out
        .try_clone()
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: both closures only make async-signal-safe system calls
    // (setsid, setpgid, prctl, getppid, _exit) between fork and exec.
    unsafe {
        match attach {
            Attach::Child => {
                // SAFETY: getpid is async-signal-safe; called before fork.
                let parent = libc::getpid();
                cmd.pre_exec(move || {
                    if libc::setpgid(0, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // The parent may have died before prctl: then no signal
                    // will come, so do not start at all.
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                })
            }
            Attach::Detached => cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }),
        };
    }
    cmd.spawn()
        .with_context(|| format!("cannot run {}", program.display()))
}

/// Reads a pid file (`None` if missing or unreadable).
pub fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Writes a pid file atomically.
pub fn write_pid(path: &Path, pid: u32) -> Result<()> {
    crate::cluster_args::write_atomic(path, format!("{pid}\n").as_bytes())
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    let Ok(pid_t) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid_t <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid_t, 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // A zombie (dead, not yet reaped by its parent) counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z"),
        Err(_) => false,
    }
}

/// The command line of process `pid`, split into arguments.
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// Whether `pid` is a running `pontoon osd run` on `device` (and not some
/// other process that reused the pid).
pub fn is_osd_process(pid: u32, device: &Path) -> bool {
    if !alive(pid) {
        return false;
    }
    let Some(args) = cmdline(pid) else {
        return false;
    };
    let dev = device.to_string_lossy();
    args.windows(2).any(|w| w[0] == "osd" && w[1] == "run")
        && args.windows(2).any(|w| w[0] == "--device" && w[1] == dev)
}

/// Sends `sig` to `pid` (one process, never a group). Errors are ignored:
/// the process may be gone already.
pub fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pid)
        && p > 0
    {
        // SAFETY: kill on one positive pid.
        unsafe {
            libc::kill(p, sig);
        }
    }
}

/// Waits until `pid` is gone or `timeout` passes; returns whether it is gone.
/// For processes that are not our children (ours must be reaped instead).
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for our child to exit, up to `timeout`; returns whether it did.
pub fn wait_child(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) => {}
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `n` lines of a log file, indented, for error messages.
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths of a local cluster directory.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The directory.
    pub dir: PathBuf,
}

impl Layout {
    /// The layout of `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// etcd's data directory.
    pub fn etcd_data(&self) -> PathBuf {
        self.dir.join("etcd")
    }

    /// Pid files.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// Logs.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// OSD `id`'s device file.
    pub fn osd_device(&self, id: u32) -> PathBuf {
        self.dir.join(format!("osd.{id}.img"))
    }

    /// OSD `id`'s pid file.
    pub fn osd_pid(&self, id: u32) -> PathBuf {
        self.run_dir().join(format!("osd.{id}.pid"))
    }

    /// OSD `id`'s log.
    pub fn osd_log(&self, id: u32) -> PathBuf {
        self.log_dir().join(format!("osd.{id}.log"))
    }

    /// etcd's pid file.
    pub fn etcd_pid(&self) -> PathBuf {
        self.run_dir().join("etcd.pid")
    }

    /// etcd's log.
    pub fn etcd_log(&self) -> PathBuf {
        self.log_dir().join("etcd.log")
    }

    /// `pontoon up`'s own pid file.
    pub fn up_pid(&self) -> PathBuf {
        self.run_dir().join("up.pid")
    }

    /// Creates the directory and its `run/` and `log/` subdirectories.
    pub fn create(&self) -> Result<()> {
        for d in [self.dir.clone(), self.run_dir(), self.log_dir()] {
            std::fs::create_dir_all(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
        }
        Ok(())
    }
}
