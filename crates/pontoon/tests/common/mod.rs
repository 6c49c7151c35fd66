//! Helpers the `pontoon` binary's integration tests share: running the
//! binary against a cluster directory with a time limit, and looking at the
//! processes a cluster runs.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub const PONTOON: &str = env!("CARGO_BIN_EXE_pontoon");
/// Longest one CLI command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    assert!(pid > 0);
    // SAFETY: kill on one positive pid.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The pid in a pid file.
pub fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Runs `pontoon ARGS --cluster DIR` (bounded), returning its output.
pub fn pontoon(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(PONTOON)
        .args(args)
        .arg("--cluster")
        .arg(dir)
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pontoon");
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("pontoon {args:?} took longer than {COMMAND_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

/// Runs a command that must succeed; returns its stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = pontoon(dir, args);
    assert!(
        out.status.success(),
        "pontoon {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command that must fail with exit code `code`; returns its stderr.
pub fn fails(dir: &Path, args: &[&str], code: i32) -> String {
    let out = pontoon(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "pontoon {args:?}: {stderr}");
    stderr
}

/// Runs a command that must succeed and print JSON; returns it parsed.
pub fn json(dir: &Path, args: &[&str]) -> Value {
    let text = ok(dir, args);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{args:?} printed bad JSON ({e}): {text}"))
}
