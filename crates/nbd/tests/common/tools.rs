//! Running the real NBD client tools (libnbd's nbdinfo/nbdcopy, qemu-img,
//! qemu-io, fio, the vm-initiator harness) as subprocesses: lookup with a
//! clear failure naming the Debian package, a hard timeout that kills the
//! tool, and small parsers for their output.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pontoon_nbd::ServerHandle;

/// Where a real client tool is, or a failure naming its Debian package.
/// The tests never skip: a missing tool is a failed test.
pub fn need(name: &str, package: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is not installed: install the Debian package `{package}` \
         (`scripts/deps.sh test` installs everything the NBD client tests need)"
    );
    Command::new(name)
}

pub fn nbdinfo() -> Command {
    need("nbdinfo", "libnbd-bin")
}

pub fn nbdcopy() -> Command {
    need("nbdcopy", "libnbd-bin")
}

pub fn qemu_img() -> Command {
    need("qemu-img", "qemu-utils")
}

pub fn qemu_io() -> Command {
    need("qemu-io", "qemu-utils")
}

pub fn fio() -> Command {
    need("fio", "fio")
}

/// What a finished tool printed.
pub struct Ran {
    pub cmd: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Fails the test with everything the tool printed unless it succeeded.
    pub fn ok(self) -> Self {
        assert!(self.success(), "{} failed\n{}", self.cmd, self.report());
        self
    }

    /// The exit status and both output streams, for failure messages.
    pub fn report(&self) -> String {
        format!(
            "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Reads a pipe to its end on a thread; the result arrives on the channel.
fn drain<R: Read + Send + 'static>(mut r: R) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        let _ = tx.send(String::from_utf8_lossy(&b).into_owned());
    });
    rx
}

/// Asks a process to stop (SIGTERM, so wrappers such as run-vm.sh can
/// clean up what they started), then kills it if it lingers.
fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `cmd` (stdin closed) to completion; if it is still running after
/// `limit`, kills it and fails the test with what it printed so far.
pub fn run(cmd: &mut Command, limit: Duration) -> Ran {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let out = drain(child.stdout.take().expect("stdout piped"));
    let err = drain(child.stderr.take().expect("stderr piped"));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for {shown}: {e}"),
        }
    };
    // A grandchild may keep a pipe open: never wait on it forever.
    let collect = |rx: mpsc::Receiver<String>| {
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| "(output still open after the tool exited)".into())
    };
    let Some(status) = status else {
        terminate(&mut child);
        panic!(
            "{shown} did not finish within {limit:?} and was killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
            collect(out),
            collect(err)
        );
    };
    Ran {
        cmd: shown,
        status,
        stdout: collect(out),
        stderr: collect(err),
    }
}

/// The default limit for one tool run (generous: the tests assert on
/// results, never on time).
pub const LIMIT: Duration = Duration::from_secs(120);

/// Runs `cmd` with [`LIMIT`] and fails the test unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> Ran {
    run(cmd, LIMIT).ok()
}

/// sha256 of a file, via coreutils.
pub fn sha256(path: &Path) -> String {
    let r = run_ok(Command::new("sha256sum").arg(path));
    r.stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `nbd://127.0.0.1:PORT/EXPORT`.
pub fn uri(server: &ServerHandle, export: &str) -> String {
    format!("nbd://127.0.0.1:{}/{export}", server.local_addr().port())
}

/// Every value of `"key"` that is an unsigned integer in JSON-ish output
/// (`"key": 12` or `"key" : 12`), in order of appearance.
pub fn json_u64s(text: &str, key: &str) -> Vec<u64> {
    json_values(text, key)
        .filter_map(|v| {
            let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// The single unsigned integer value of `"key"`.
pub fn json_u64(text: &str, key: &str) -> u64 {
    let v = json_u64s(text, key);
    assert_eq!(v.len(), 1, "expected one \"{key}\" in:\n{text}");
    v[0]
}

/// The single boolean value of `"key"`.
pub fn json_bool(text: &str, key: &str) -> bool {
    let v: Vec<bool> = json_values(text, key)
        .filter_map(|v| {
            if v.starts_with("true") {
                Some(true)
            } else if v.starts_with("false") {
                Some(false)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(v.len(), 1, "expected one boolean \"{key}\" in:\n{text}");
    v[0]
}

/// The text after `"key"` and its colon, for each occurrence.
fn json_values<'a>(text: &'a str, key: &str) -> impl Iterator<Item = &'a str> {
    let quoted = format!("\"{key}\"");
    let values: Vec<&'a str> = text
        .match_indices(&quoted)
        .filter_map(|(i, _)| {
            let rest = text[i + quoted.len()..].trim_start();
            rest.strip_prefix(':').map(str::trim_start)
        })
        .collect();
    values.into_iter()
}

/// One line of `nbdinfo --map`: offset, length, type, description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub offset: u64,
    pub length: u64,
    pub kind: u32,
    pub description: String,
}

/// Runs `nbdinfo --map URI` and parses its lines.
pub fn nbd_map(uri: &str) -> Vec<MapEntry> {
    let r = run_ok(nbdinfo().args(["--map", uri]));
    let map: Vec<MapEntry> = r
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 4, "unexpected nbdinfo --map line {l:?}");
            MapEntry {
                offset: f[0].parse().expect("offset"),
                length: f[1].parse().expect("length"),
                kind: f[2].parse().expect("type"),
                description: f[3..].join(" "),
            }
        })
        .collect();
    // The map covers the export contiguously from 0.
    let mut pos = 0;
    for e in &map {
        assert_eq!(e.offset, pos, "map not contiguous: {map:?}");
        pos += e.length;
    }
    map
}

/// A map entry with the type and description nbdinfo prints for
/// `base:allocation` data (0) or a hole (3, "hole,zero").
pub fn extent(offset: u64, length: u64, data: bool) -> MapEntry {
    let (kind, description) = if data { (0, "data") } else { (3, "hole,zero") };
    MapEntry {
        offset,
        length,
        kind,
        description: description.into(),
    }
}

/// The vm-initiator harness (`PONTOON_VM_INITIATOR` overrides where).
pub fn vm_initiator() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("PONTOON_VM_INITIATOR")
            .unwrap_or_else(|_| "/work/shared/tools/vm-initiator".into()),
    );
    assert!(
        dir.join("run-vm.sh").is_file(),
        "the kernel NBD test needs the vm-initiator harness, not found at {} \
         (set PONTOON_VM_INITIATOR to its directory)",
        dir.display()
    );
    for (bin, pkg) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("busybox", "busybox-static"),
        ("cpio", "cpio"),
        ("gcc", "gcc"),
    ] {
        need(bin, pkg);
    }
    let kernel_readable = fs::read_dir("/boot")
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name().to_string_lossy().starts_with("vmlinuz-")
                    && File::open(e.path()).is_ok()
            })
        })
        .unwrap_or(false);
    assert!(
        kernel_readable,
        "the kernel NBD test boots /boot/vmlinuz-*: install `linux-image-amd64` and run \
         the tests as root (`scripts/deps.sh test`)"
    );
    dir
}

/// Runs the vm-initiator's kernel NBD test (`tests/nbd.sh`, 2 connections,
/// TRIM=1) against `127.0.0.1:port`, export `export`; fails the test
/// unless the guest reports PASS. The guest reaches the host's
/// 127.0.0.1:PORT as 10.0.2.2:PORT. Boots under TCG: callers run it alone.
pub fn kernel_nbd_test(port: u16, export: &str) -> Ran {
    let dir = vm_initiator();
    let boot = || {
        run(
            Command::new(dir.join("run-vm.sh"))
                .current_dir(&dir)
                .env("VM_TIMEOUT", "150")
                .args([
                    "tests/nbd.sh",
                    &format!("PORT={port}"),
                    &format!("EXPORT={export}"),
                    "CONNS=2",
                    "TRIM=1",
                ]),
            Duration::from_secs(240),
        )
    };
    let mut r = boot();
    if !r.success() && r.stdout.contains("FAIL export size is 0") {
        // A race in the harness, not the server: nbd-mini returns once the
        // kernel creates the device's pid file, and Linux 6.1 publishes
        // the capacity only after that, so on a slow (TCG, loaded) guest
        // the script may read size 0. The server already answered the
        // handshake with the right size ("INFO_EXPORT size=...").
        eprintln!(
            "vm-initiator hit its size-0 race; booting once more:\n{}",
            r.report()
        );
        r = boot();
    }
    assert!(
        r.status.code() != Some(2),
        "the vm-initiator harness could not set up the VM (exit 2); it needs root and the \
         Debian packages qemu-system-x86, linux-image-amd64, busybox-static, cpio, gcc and \
         libc6-dev (`scripts/deps.sh test`):\n{}",
        r.report()
    );
    assert!(
        r.success()
            && r.stdout.contains("VMTEST-RESULT: PASS")
            && r.stdout.contains("vm-initiator: RESULT PASS"),
        "the kernel's nbd driver failed against the server:\n{}",
        r.report()
    );
    r
}
