//! A throwaway etcd server for tests: [`EtcdServer::start`] runs the real
//! `etcd` binary (Debian's `etcd-server`) on free loopback ports with a
//! temporary data directory, and kills it on drop. Tests of other crates
//! (OSD, manager, end-to-end) use it to get a cluster map of their own, so
//! tests run in parallel without sharing state.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long [`EtcdServer::start`] waits for etcd to report healthy.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times start is tried with fresh ports if etcd exits at once
/// (another process took a port between probing it and etcd binding it).
const START_ATTEMPTS: u32 = 3;

/// A running etcd, killed (and waited for) when dropped.
pub struct EtcdServer {
    child: Child,
    client_port: u16,
    log: PathBuf,
    /// The command line, to restart the same member on the same ports.
    bin: PathBuf,
    args: Vec<String>,
    // Dropped after the process is killed (fields drop after `drop` runs).
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for EtcdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdServer")
            .field("pid", &self.child.id())
            .field("endpoint", &self.endpoint())
            .finish()
    }
}

/// Finds the etcd binary: `$PONTOON_ETCD`, `/usr/bin/etcd`, then `$PATH`.
fn etcd_binary() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("PONTOON_ETCD") {
        return Ok(PathBuf::from(p));
    }
    let debian = Path::new("/usr/bin/etcd");
    if debian.is_file() {
        return Ok(debian.to_path_buf());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("etcd");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "etcd is not installed (looked at $PONTOON_ETCD, /usr/bin/etcd and $PATH): \
         run scripts/deps.sh, which installs Debian's etcd-server",
    ))
}

/// A loopback port that was free a moment ago.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether etcd at `port` answers `/health` with `"health":"true"`.
fn healthy(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = Vec::new();
    let _ = s.take(64 * 1024).read_to_end(&mut body);
    String::from_utf8_lossy(&body).contains(r#""health":"true""#)
}

/// The last `n` lines of a file, for error messages.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs etcd with `args`, appending its output to `log`.
fn spawn(bin: &Path, args: &[String], log: &Path) -> io::Result<Child> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", bin.display())))
}

impl EtcdServer {
    /// Starts a single-member etcd on free loopback ports with a temporary
    /// data directory and waits (at most [`START_TIMEOUT`]) until it is
    /// healthy. Fails with a message naming `scripts/deps.sh` if etcd is
    /// not installed.
    pub fn start() -> io::Result<Self> {
        Self::start_with_args(&[])
    }

    /// [`start`](Self::start) with extra etcd flags, e.g.
    /// `["--max-request-bytes=33554432"]`.
    pub fn start_with_args(extra: &[&str]) -> io::Result<Self> {
        let bin = etcd_binary()?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&bin, extra) {
                Ok(s) => return Ok(s),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    fn try_start(bin: &Path, extra: &[&str]) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("pontoon-etcd-").tempdir()?;
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let log = dir.path().join("etcd.log");
        let mut args = crate::etcd::single_member_args(
            "test",
            &dir.path().join("data"),
            client_port,
            peer_port,
        );
        args.extend(extra.iter().map(|a| a.to_string()));
        let child = spawn(bin, &args, &log)?;
        let mut server = EtcdServer {
            child,
            client_port,
            log,
            bin: bin.to_path_buf(),
            args,
            _dir: dir,
        };
        server.wait_healthy()?;
        Ok(server)
    }

    /// Waits (at most [`START_TIMEOUT`]) for the process to answer healthy.
    fn wait_healthy(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "etcd exited at start ({status}):\n{}",
                    tail(&self.log, 20)
                )));
            }
            if healthy(self.client_port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "etcd was not healthy within {START_TIMEOUT:?}:\n{}",
                        tail(&self.log, 20)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills etcd and starts it again on the same ports and data, as an
    /// etcd crash and restart (or a network outage) looks to its clients.
    /// Waits until it is healthy again.
    pub fn restart(&mut self) -> io::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.bin, &self.args, &self.log)?;
        self.wait_healthy()
    }

    /// Kills etcd, waits `outage`, and starts it again on the same ports
    /// and data; returns once it is healthy.
    pub fn restart_after(&mut self, outage: Duration) -> io::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(outage);
        self.child = spawn(&self.bin, &self.args, &self.log)?;
        self.wait_healthy()
    }

    /// The client URL, e.g. `http://127.0.0.1:40123`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client URL as the list [`MapStore::connect`](crate::MapStore::connect) takes.
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    /// The etcd process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines etcd logged (warnings and errors), for test failures.
    pub fn log_tail(&self) -> String {
        tail(&self.log, 50)
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // `Child::kill` signals this child's own pid, never a process group.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
