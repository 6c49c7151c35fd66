//! qemu-io over a `pontoon up` cluster's NBD gateway, and the CLI's
//! one-line refusals: what the snapshot and clone tests share.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::pontoon;

/// Runs qemu-io on `export` of the gateway at `port` with commands `cmds`
/// (read-only with `ro`).
pub fn qemu_io(port: u16, export: &str, ro: bool, cmds: &[&str]) -> Output {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    if ro {
        c.arg("-r");
    }
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    c.arg(format!("nbd://127.0.0.1:{port}/{export}"));
    let shown = format!("{c:?}");
    c.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {shown}: {e} (scripts/deps.sh test installs qemu-utils)"))
}

/// qemu-io's output, asserting that every command succeeded (qemu-io
/// prints failures and, for `read -P`, "Pattern verification failed").
pub fn qemu_io_ok(port: u16, export: &str, ro: bool, cmds: &[&str]) -> String {
    let out = qemu_io(port, export, ro, cmds);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("failed") && !text.contains("error"),
        "qemu-io {cmds:?} on {export}: {}\n{text}",
        out.status
    );
    text
}

/// Waits (at most 15 s) until the gateway at `port` serves `export`: the
/// CLI's change is in etcd when it returns, the gateway learns it from its
/// map watch a moment later.
pub fn wait_export(port: u16, export: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let out = qemu_io(port, export, true, &["read 0 4k"]);
        if out.status.success() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway does not serve {export}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Runs `pontoon ARGS`, which must fail with exactly one line on stderr
/// and nothing on stdout; returns that line.
pub fn one_line_error(dir: &Path, args: &[&str]) -> String {
    let out = pontoon(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "pontoon {args:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "pontoon {args:?} printed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "pontoon {args:?}: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    lines[0].to_string()
}

/// Asserts that export `export` of the gateway at `port` holds exactly
/// `want` (qemu-img compare against a raw file of it).
pub fn assert_holds(dir: &Path, port: u16, export: &str, want: &[u8]) {
    let file = dir.join("want.raw");
    std::fs::write(&file, want).expect("write want.raw");
    let cmp = Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&file)
        .arg(format!("nbd://127.0.0.1:{port}/{export}"))
        .output()
        .expect("run qemu-img (scripts/deps.sh test installs qemu-utils)");
    assert!(
        cmp.status.success(),
        "{export} differs from what it should hold: {}{}",
        String::from_utf8_lossy(&cmp.stdout),
        String::from_utf8_lossy(&cmp.stderr)
    );
}
