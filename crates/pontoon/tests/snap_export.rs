//! Rolling back, exporting and importing volumes, snapshots and diffs end
//! to end, with real clients: a two-OSD cluster (`pontoon up`, pool of
//! size 2) and its NBD gateway; `qemu-io` writes and checks patterns,
//! `nbdcopy` reads NBD exports, `qemu-img compare` compares volumes,
//! `sha256sum` compares files. Bad input prints one line, exits non-zero
//! and changes nothing, which each case checks on the data afterwards.
//!
//! Needs etcd-server, qemu-utils and libnbd-bin (`scripts/deps.sh test`).
//! Asserts on data and on the clients' answers, never on time.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::qemu::*;
use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// The NBD URI of `export` on the gateway at `port`.
fn uri(port: u16, export: &str) -> String {
    format!("nbd://127.0.0.1:{port}/{export}")
}

fn sha256(path: &Path) -> String {
    let out = must(Command::new("sha256sum").arg(path));
    out.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `qemu-img compare` of two images (NBD URIs or raw files): equal.
fn same_images(a: &str, b: &str) {
    must(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", a, b]));
}

/// Whether some gateway lists `volume` among its open volumes.
fn open_on_a_gateway(status: &Value, volume: &str) -> bool {
    status["daemons"].as_array().is_some_and(|ds| {
        ds.iter().any(|d| {
            d["open_volumes"]
                .as_array()
                .is_some_and(|o| o.iter().any(|v| v == volume))
        })
    })
}

/// Waits until no gateway lists `export` as open (a host that just
/// disconnected is unlisted a moment later).
fn closed_everywhere(dir: &Path, export: &str) {
    wait_status(dir, &format!("no gateway holding {export}"), |s| {
        !open_on_a_gateway(s, export)
    });
}

/// A host holding `export` open: qemu-io waiting for commands on stdin.
struct Holder(Child);

impl Holder {
    fn open(dir: &Path, port: u16, export: &str) -> Holder {
        let child = Command::new("qemu-io")
            .args(["-f", "raw", &uri(port, export)])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run qemu-io");
        wait_status(dir, &format!("a gateway holding {export} open"), |s| {
            open_on_a_gateway(s, export)
        });
        Holder(child)
    }

    /// Closes the connection and waits until no gateway lists `export`.
    fn close(mut self, dir: &Path, export: &str) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
        closed_everywhere(dir, export);
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most 15 s) until the gateway at `port` serves `export` with
/// at least `size` bytes: it learns a resize from its map watch.
fn wait_size(port: u16, export: &str, size: u64) {
    let last = format!("read {} 4k", size - 4096);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let out = qemu_io(port, export, true, &[&last]);
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        if out.status.success() && !text.contains("failed") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway does not serve {size} bytes of {export}: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `pontoon up` with two OSDs and an NBD gateway, a pool `p` of size 2
/// and volume `v1` of `size`; returns the gateway's port.
fn cluster(dir: &Path, size: &str) -> (Up, u16) {
    let port = free_port();
    let up = Up::start_with(dir, 2, &["--nbd", &format!("127.0.0.1:{port}")]);
    ok(dir, &["pool", "create", "p", "--size", "2", "--pgs", "8"]);
    ok(
        dir,
        &["volume", "create", "v1", "--size", size, "--pool", "p"],
    );
    wait_export(port, "v1");
    (up, port)
}

#[test]
fn rollback_returns_the_volume_to_the_snapshot_unless_a_gateway_has_it_open() {
    let (_tmp, dir) = tempdir("pontoon-rollback-");
    let (_up, port) = cluster(&dir, "64M");
    qemu_io_ok(port, "v1", false, &["write -P 0xa1 0 9M"]);
    ok(&dir, &["snap", "create", "v1@a"]);
    qemu_io_ok(
        port,
        "v1",
        false,
        &["write -P 0xb2 1M 7M", "write -P 0xb2 40M 1M"],
    );
    ok(&dir, &["snap", "create", "v1@b"]);
    // The volume grows past the snapshot and is written there.
    ok(&dir, &["volume", "resize", "v1", "--size", "128M"]);
    wait_size(port, "v1", 128 * MIB);
    qemu_io_ok(port, "v1", false, &["write -P 0xc3 100M 2M"]);
    let b = [
        "read -P 0xa1 0 1M",
        "read -P 0xb2 1M 7M",
        "read -P 0xa1 8M 1M",
        "read -P 0 9M 31M",
        "read -P 0xb2 40M 1M",
    ];
    qemu_io_ok(port, "v1", true, &b);

    // A host has v1 open: refused, naming the gateway; nothing changes.
    let host = Holder::open(&dir, port, "v1");
    let line = one_line_error(&dir, &["snap", "rollback", "v1@a"]);
    assert!(
        line.contains("volume v1 is open on gateway nbd.") && line.contains("--force"),
        "{line}"
    );
    host.close(&dir, "v1");
    qemu_io_ok(port, "v1", true, &b);
    qemu_io_ok(port, "v1", true, &["read -P 0xc3 100M 2M"]);

    // Bad specs: one line each, nothing changes.
    let cases: [(&[&str], &str); 4] = [
        (&["snap", "rollback", "nosuch@a"], "volume nosuch not found"),
        (
            &["snap", "rollback", "v1@nosuch"],
            "snapshot v1@nosuch not found",
        ),
        (&["snap", "rollback", "v1@a/b"], "no '@' or '/'"),
        (&["snap", "rollback", "v1"], "not VOLUME@SNAPSHOT"),
    ];
    for (args, want) in cases {
        let line = one_line_error(&dir, args);
        assert!(line.contains(want), "pontoon {args:?}: {line}");
    }
    qemu_io_ok(port, "v1", true, &b);
    let info = json(&dir, &["volume", "info", "v1", "--json"]);
    assert_eq!(info["size_bytes"], 128 * MIB, "{info}");

    // Rolled back: pattern A, zeros elsewhere, the snapshot's size; what
    // lay past it is gone (it reads zeros once the volume grows again).
    closed_everywhere(&dir, "v1");
    let done = ok(&dir, &["snap", "rollback", "v1@a"]);
    assert!(
        done.contains("volume v1 rolled back to snapshot a"),
        "{done}"
    );
    let info = json(&dir, &["volume", "info", "v1", "--json"]);
    assert_eq!(info["size_bytes"], 64 * MIB, "{info}");
    qemu_io_ok(port, "v1", true, &["read -P 0xa1 0 9M", "read -P 0 9M 55M"]);
    // The newer snapshot still reads B.
    wait_export(port, "v1@b");
    qemu_io_ok(port, "v1@b", true, &b);
    ok(&dir, &["volume", "resize", "v1", "--size", "128M"]);
    wait_size(port, "v1", 128 * MIB);
    qemu_io_ok(port, "v1", true, &["read -P 0 64M 64M"]);

    // --force rolls back under an open host (forward, to b, here).
    let host = Holder::open(&dir, port, "v1");
    let done = ok(&dir, &["snap", "rollback", "v1@b", "--force"]);
    assert!(done.contains("rolled back to snapshot b"), "{done}");
    host.close(&dir, "v1");
    qemu_io_ok(port, "v1", true, &b);
    let info = json(&dir, &["volume", "info", "v1", "--json"]);
    assert_eq!(info["size_bytes"], 64 * MIB, "{info}");
}

#[test]
fn exports_match_nbdcopy_and_diffs_rebuild_the_second_snapshot_from_the_first() {
    let (_tmp, dir) = tempdir("pontoon-snap-export-");
    let (_up, port) = cluster(&dir, "256M");
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    qemu_io_ok(
        port,
        "v1",
        false,
        &["write -P 0xa1 0 3M", "write -P 0xa2 100M 1M"],
    );
    ok(&dir, &["snap", "create", "v1@s1"]);
    // 1 MiB rewritten, 512 KiB discarded.
    qemu_io_ok(
        port,
        "v1",
        false,
        &["write -P 0xb1 1M 1M", "discard 100M 512k"],
    );
    ok(&dir, &["snap", "create", "v1@s2"]);
    wait_export(port, "v1@s1");
    wait_export(port, "v1@s2");

    // `volume export` of a snapshot equals nbdcopy of its NBD export.
    let out = ok(&dir, &["volume", "export", "v1@s1", &path("s1.raw")]);
    assert!(out.contains("exported v1@s1"), "{out}");
    must(Command::new("nbdcopy").args([&uri(port, "v1@s1"), &path("s1.nbd.raw")]));
    assert_eq!(
        std::fs::metadata(path("s1.raw")).map(|m| m.len()).ok(),
        Some(256 * MIB)
    );
    assert_eq!(
        sha256(Path::new(&path("s1.raw"))),
        sha256(Path::new(&path("s1.nbd.raw")))
    );

    // Imported, the export is a thin copy of the snapshot.
    ok(
        &dir,
        &["volume", "import", &path("s1.raw"), "w", "--pool", "p"],
    );
    wait_export(port, "w");
    same_images(&uri(port, "w"), &uri(port, "v1@s1"));
    let du = json(&dir, &["volume", "info", "w", "--json"]);
    assert_eq!(du["size_bytes"], 256 * MIB, "{du}");

    // The diff s1 -> s2 is about the changed data, not the volume; a full
    // diff of the mostly empty volume is small too.
    let out = ok(
        &dir,
        &[
            "volume",
            "export-diff",
            "v1@s2",
            "--from-snap",
            "s1",
            &path("d12"),
        ],
    );
    assert!(out.contains("2 record(s)"), "{out}");
    let d12 = std::fs::metadata(path("d12")).map(|m| m.len()).unwrap_or(0);
    assert!(
        (MIB..2 * MIB).contains(&d12),
        "the s1->s2 diff is {d12} bytes"
    );
    ok(&dir, &["volume", "export-diff", "v1@s1", &path("full1")]);
    let full = std::fs::metadata(path("full1"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        (4 * MIB..5 * MIB).contains(&full),
        "the full diff is {full} bytes"
    );

    // Bad input: one line each, nothing changes (checked below).
    ok(
        &dir,
        &["volume", "create", "w3", "--size", "256M", "--pool", "p"],
    );
    let bytes = std::fs::read(path("d12")).expect("read d12");
    std::fs::write(path("trunc"), &bytes[..bytes.len() - 100]).expect("write trunc");
    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    std::fs::write(path("corrupt"), &bad).expect("write corrupt");
    std::fs::write(path("junk"), b"not a diff").expect("write junk");
    let volumes = volume_records(&dir);
    let w_snaps = snap_records(&dir, "w");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "volume".into(),
                "export".into(),
                "nosuch".into(),
                path("x.raw"),
            ],
            "volume nosuch not found",
        ),
        (
            vec![
                "volume".into(),
                "export".into(),
                "v1@nosuch".into(),
                path("x.raw"),
            ],
            "snapshot v1@nosuch not found",
        ),
        (
            vec![
                "volume".into(),
                "export".into(),
                "v1@a/b".into(),
                path("x.raw"),
            ],
            "no '@' or '/'",
        ),
        (
            vec![
                "volume".into(),
                "export".into(),
                "v1@s1".into(),
                "/nonexistent/x.raw".into(),
            ],
            "cannot write /nonexistent/x.raw",
        ),
        (
            vec!["volume".into(), "import".into(), path("s1.raw"), "w".into()],
            "volume w already exists",
        ),
        (
            vec![
                "volume".into(),
                "import".into(),
                path("nosuch.raw"),
                "w9".into(),
            ],
            "cannot read",
        ),
        (
            vec![
                "volume".into(),
                "export-diff".into(),
                "v1@s2".into(),
                "--from-snap".into(),
                "nosuch".into(),
                path("x.diff"),
            ],
            "snapshot v1@nosuch not found",
        ),
        (
            vec![
                "volume".into(),
                "export-diff".into(),
                "v1@s1".into(),
                "--from-snap".into(),
                "s2".into(),
                path("x.diff"),
            ],
            "not older",
        ),
        (
            vec![
                "volume".into(),
                "export-diff".into(),
                "v1".into(),
                path("x.diff"),
            ],
            "not VOLUME@SNAPSHOT",
        ),
        (
            vec![
                "volume".into(),
                "import-diff".into(),
                path("d12"),
                "nosuch".into(),
            ],
            "volume nosuch not found",
        ),
        (
            vec![
                "volume".into(),
                "import-diff".into(),
                path("d12"),
                "w3".into(),
            ],
            "w3 has no snapshots",
        ),
        (
            vec![
                "volume".into(),
                "import-diff".into(),
                path("trunc"),
                "w3".into(),
                "--force".into(),
            ],
            "truncated",
        ),
        (
            vec![
                "volume".into(),
                "import-diff".into(),
                path("corrupt"),
                "w3".into(),
                "--force".into(),
            ],
            "corrupt",
        ),
        (
            vec![
                "volume".into(),
                "import-diff".into(),
                path("junk"),
                "w3".into(),
            ],
            "not a Pontoon diff stream",
        ),
    ];
    for (args, want) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let line = one_line_error(&dir, &args);
        assert!(line.contains(want), "pontoon {args:?}: {line}");
        assert!(!Path::new(&path("x.raw")).exists() && !Path::new(&path("x.diff")).exists());
        assert_eq!(volume_records(&dir), volumes, "{args:?}");
    }
    assert_eq!(snap_records(&dir, "w"), w_snaps);
    assert!(ok(&dir, &["snap", "ls", "w3"]).contains("no snapshots"));
    wait_export(port, "w3");
    qemu_io_ok(port, "w3", true, &["read -P 0 0 256M"]);
    same_images(&uri(port, "w"), &uri(port, "v1@s1"));

    // Applied to the copy of s1 (after taking s1 there, as rbd's
    // import-diff expects), the diff gives a volume byte-identical to s2,
    // and takes s2 on it.
    ok(&dir, &["snap", "create", "w@s1"]);
    let out = ok(&dir, &["volume", "import-diff", &path("d12"), "w"]);
    assert!(out.contains("snapshot w@s2 created"), "{out}");
    same_images(&uri(port, "w"), &uri(port, "v1@s2"));
    let line = one_line_error(&dir, &["volume", "import-diff", &path("d12"), "w"]);
    assert!(line.contains("snapshot w@s2 already exists"), "{line}");
    ok(&dir, &["volume", "export", "w@s2", &path("w2.raw")]);
    ok(&dir, &["volume", "export", "v1@s2", &path("s2.raw")]);
    assert_eq!(
        sha256(Path::new(&path("w2.raw"))),
        sha256(Path::new(&path("s2.raw")))
    );

    // Through pipes: import from standard input, a full diff onto an
    // empty volume, then export-diff | import-diff.
    let me = env!("CARGO_BIN_EXE_pontoon");
    let d = dir.to_string_lossy();
    let sh = |script: &str| must(Command::new("timeout").args(["120", "sh", "-c", script]));
    sh(&format!(
        "cat {} | {me} volume import - w4 --cluster {d}",
        path("s1.raw")
    ));
    let info = json(&dir, &["volume", "info", "w4", "--json"]);
    assert_eq!(info["size_bytes"], 256 * MIB, "{info}");
    ok(
        &dir,
        &["volume", "create", "w5", "--size", "256M", "--pool", "p"],
    );
    ok(&dir, &["volume", "import-diff", &path("full1"), "w5"]);
    sh(&format!(
        "{me} volume export-diff v1@s2 --from-snap s1 - --cluster {d} | {me} volume import-diff - w5 --cluster {d}"
    ));
    wait_export(port, "w4");
    wait_export(port, "w5");
    same_images(&uri(port, "w4"), &path("s1.raw"));
    same_images(&uri(port, "w5"), &uri(port, "v1@s2"));
    let snaps = json(&dir, &["snap", "ls", "w5", "--json"]);
    let names: Vec<&str> = snaps
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["s1", "s2"], "{snaps}");
}
