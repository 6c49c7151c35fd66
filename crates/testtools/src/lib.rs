//! Running real client tools (fio, qemu-img, nbdinfo, the vm-initiator
//! harness that boots a Linux guest with the kernel's own NBD and NVMe/TCP
//! initiators) as subprocesses from integration tests: lookup with a clear
//! failure naming the Debian package, a hard timeout that kills the tool,
//! and small parsers for their output. The tests never skip: a missing
//! tool is a failed test.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Where a real client tool is, or a failure naming its Debian package.
/// The tests never skip: a missing tool is a failed test.
pub fn need(name: &str, package: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{name}` is not installed: install the Debian package `{package}` \
         (`scripts/deps.sh test` installs everything the tests need)"
    );
    Command::new(name)
}

/// fio.
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

/// The vm-initiator harness (`PONTOON_VM_INITIATOR` overrides where).
pub fn vm_initiator() -> PathBuf {
    let dir = PathBuf::from(
        std::env::var("PONTOON_VM_INITIATOR")
            .unwrap_or_else(|_| "/work/shared/tools/vm-initiator".into()),
    );
    assert!(
        dir.join("run-vm.sh").is_file(),
        "the kernel initiator tests need the vm-initiator harness, not found at {} \
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
        "the kernel initiator tests boot /boot/vmlinuz-*: install `linux-image-amd64` and run \
         the tests as root (`scripts/deps.sh test`)"
    );
    dir
}

/// Boots the vm-initiator guest with `script` (e.g. `tests/nvme-tcp.sh`)
/// and its `KEY=VALUE` arguments; fails the test if the harness itself
/// could not set up the VM (exit 2). The caller judges the result: the
/// guest printed `VMTEST-RESULT: PASS` if and only if [`vm_passed`].
pub fn run_vm(script: &str, args: &[String], limit: Duration) -> Ran {
    run_vm_env(script, args, &[], limit)
}

/// Like [`run_vm`], with harness settings in the environment (e.g.
/// `VM_VHOST_BLK`, `VM_QEMU_ARGS`, `VM_LOG`).
pub fn run_vm_env(script: &str, args: &[String], env: &[(&str, &str)], limit: Duration) -> Ran {
    let dir = vm_initiator();
    let r = run(
        Command::new(dir.join("run-vm.sh"))
            .current_dir(&dir)
            .env(
                "VM_TIMEOUT",
                limit.as_secs().saturating_sub(60).max(60).to_string(),
            )
            .envs(env.iter().copied())
            .arg(script)
            .args(args),
        limit,
    );
    assert!(
        r.status.code() != Some(2),
        "the vm-initiator harness could not set up the VM (exit 2); it needs root and the \
         Debian packages qemu-system-x86, linux-image-amd64, busybox-static, cpio, gcc and \
         libc6-dev (`scripts/deps.sh test`):\n{}",
        r.report()
    );
    r
}

/// Whether a vm-initiator run passed: exit 0 and both PASS markers.
pub fn vm_passed(r: &Ran) -> bool {
    r.success()
        && r.stdout.contains("VMTEST-RESULT: PASS")
        && r.stdout.contains("vm-initiator: RESULT PASS")
}
