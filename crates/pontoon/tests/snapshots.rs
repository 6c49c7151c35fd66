//! Volume snapshots end to end, with real clients: a two-OSD cluster
//! (`pontoon up`, pool of size 2) with its NBD gateway; `qemu-io` writes
//! pattern A, `pontoon snap create` takes a snapshot, `qemu-io` writes
//! pattern B over it and where A never was; then the NBD export
//! `VOLUME@SNAPSHOT` reads A (and zeros where A never was) while the
//! volume reads B. The snapshot export is read-only: advertised with
//! NBD_FLAG_READ_ONLY, a write on the wire answered EPERM, and qemu cannot
//! write it. Bad snapshot commands each print one line and change nothing.
//!
//! Needs etcd-server and qemu-utils (`scripts/deps.sh test`). Asserts on
//! data and on the clients' answers, never on time.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::qemu::*;
use common::*;

const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
const NBD_CMD_WRITE: u16 = 1;
const NBD_CMD_READ: u16 = 0;
const NBD_EPERM: u32 = 1;

/// A raw NBD client in transmission on one export.
struct RawExport {
    s: TcpStream,
    flags: u16,
}

impl RawExport {
    /// Fixed newstyle, no zeroes, NBD_OPT_EXPORT_NAME `name`.
    fn open(port: u16, name: &str) -> RawExport {
        let (s, _, flags) = common::nbd_raw::nbd_export_name(port, name, Duration::from_secs(30));
        RawExport { s, flags }
    }

    /// Sends one request (with `data`) and returns the simple reply's error.
    fn request(&mut self, kind: u16, offset: u64, len: u32, data: &[u8]) -> (u32, Vec<u8>) {
        let mut req = 0x2560_9513u32.to_be_bytes().to_vec();
        req.extend_from_slice(&0u16.to_be_bytes());
        req.extend_from_slice(&kind.to_be_bytes());
        req.extend_from_slice(&77u64.to_be_bytes());
        req.extend_from_slice(&offset.to_be_bytes());
        req.extend_from_slice(&len.to_be_bytes());
        req.extend_from_slice(data);
        self.s.write_all(&req).expect("request");
        let mut rep = [0u8; 16];
        self.s.read_exact(&mut rep).expect("reply");
        assert_eq!(&rep[..4], &0x6744_6698u32.to_be_bytes());
        assert_eq!(&rep[8..], &77u64.to_be_bytes());
        let error = u32::from_be_bytes([rep[4], rep[5], rep[6], rep[7]]);
        let mut body = Vec::new();
        if kind == NBD_CMD_READ && error == 0 {
            body = vec![0u8; len as usize];
            self.s.read_exact(&mut body).expect("read data");
        }
        (error, body)
    }
}

#[test]
fn a_snapshot_over_nbd_keeps_what_the_volume_held_and_refuses_writes() {
    let (_tmp, dir) = tempdir("pontoon-snapshots-");
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let _up = Up::start_with(&dir, 2, &["--nbd", &nbd]);
    ok(&dir, &["pool", "create", "p", "--size", "2", "--pgs", "8"]);
    ok(
        &dir,
        &["volume", "create", "v1", "--size", "64M", "--pool", "p"],
    );

    // Pattern A over two 4 MiB objects and part of a third.
    wait_export(port, "v1");
    qemu_io_ok(port, "v1", false, &["write -P 0xa1 0 9M"]);

    let made = ok(&dir, &["snap", "create", "v1@s1"]);
    assert!(made.contains("snapshot v1@s1 created (id 1"), "{made}");
    let ls = json(&dir, &["snap", "ls", "v1", "--json"]);
    assert_eq!(ls[0]["name"], "s1", "{ls}");
    assert_eq!(ls[0]["id"], 1, "{ls}");
    assert_eq!(ls[0]["size_bytes"], 64u64 << 20, "{ls}");
    let map = json(&dir, &["volume", "info", "v1", "--json"]);
    assert!(map["name"] == "v1", "{map}");

    // Pattern B over part of A (the first object partly, the second
    // wholly) and where A never was.
    qemu_io_ok(
        port,
        "v1",
        false,
        &["write -P 0xb2 1M 7M", "write -P 0xb2 40M 1M"],
    );

    // The volume reads B where it was written and A elsewhere.
    qemu_io_ok(
        port,
        "v1",
        true,
        &[
            "read -P 0xa1 0 1M",
            "read -P 0xb2 1M 7M",
            "read -P 0xa1 8M 1M",
            "read -P 0xb2 40M 1M",
            "read -P 0 9M 31M",
        ],
    );
    // The snapshot reads A, and zeros where A never was.
    wait_export(port, "v1@s1");
    qemu_io_ok(
        port,
        "v1@s1",
        true,
        &["read -P 0xa1 0 9M", "read -P 0 9M 31M", "read -P 0 40M 1M"],
    );
    // The same through qemu-img: the snapshot equals a file of A.
    let mut a = vec![0xa1u8; 9 << 20];
    a.resize(64 << 20, 0);
    assert_holds(&dir, port, "v1@s1", &a);

    // Read-only: the export says so, a write on the wire is refused with
    // EPERM (and changes nothing), and qemu cannot write it.
    let mut raw = RawExport::open(port, "v1@s1");
    assert_ne!(raw.flags & NBD_FLAG_READ_ONLY, 0, "flags {:#x}", raw.flags);
    let (err, _) = raw.request(NBD_CMD_WRITE, 0, 4096, &[0x55; 4096]);
    assert_eq!(err, NBD_EPERM);
    let (err, data) = raw.request(NBD_CMD_READ, 0, 4096, &[]);
    assert_eq!(err, 0);
    assert!(data.iter().all(|b| *b == 0xa1));
    let raw_vol = RawExport::open(port, "v1");
    assert_eq!(raw_vol.flags & NBD_FLAG_READ_ONLY, 0);
    let w = qemu_io(port, "v1@s1", false, &["write -P 0x55 0 4k"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&w.stdout),
        String::from_utf8_lossy(&w.stderr)
    );
    assert!(
        !w.status.success() || text.contains("ermission") || text.contains("read-only"),
        "qemu-io wrote a snapshot: {text}"
    );
    qemu_io_ok(port, "v1@s1", true, &["read -P 0xa1 0 9M"]);

    // Bad input: one line each, nothing changes.
    let before = snap_records(&dir, "v1");
    ok(&dir, &["snap", "protect", "v1@s1"]);
    let protected = snap_records(&dir, "v1");
    assert_eq!(protected[0]["protected"], true, "{protected}");
    let cases: [(&[&str], &str); 10] = [
        (&["snap", "create", "nosuch@s2"], "volume nosuch not found"),
        (&["snap", "create", "v1@s1"], "already exists"),
        (&["snap", "create", "v1@a/b"], "no '@' or '/'"),
        (&["snap", "create", "v1@a@b"], "no '@' or '/'"),
        (&["snap", "create", "v1"], "not VOLUME@SNAPSHOT"),
        (&["snap", "rm", "v1@nosuch"], "snapshot v1@nosuch not found"),
        (&["snap", "rm", "v1@s1"], "protected"),
        (&["snap", "protect", "nosuch@s1"], "volume nosuch not found"),
        (&["snap", "ls", "nosuch"], "volume nosuch not found"),
        (&["volume", "rm", "v1"], "v1@s1"),
    ];
    for (args, want) in cases {
        let line = one_line_error(&dir, args);
        assert!(line.contains(want), "pontoon {args:?}: {line}");
        assert_eq!(snap_records(&dir, "v1"), protected, "{args:?}");
    }
    assert!(json(&dir, &["volume", "info", "v1", "--json"])["name"] == "v1");
    qemu_io_ok(port, "v1@s1", true, &["read -P 0xa1 0 9M"]);

    // Unprotected, it goes; the export goes with it; then the volume.
    ok(&dir, &["snap", "unprotect", "v1@s1"]);
    assert_eq!(snap_records(&dir, "v1"), before);
    let gone = ok(&dir, &["snap", "rm", "v1@s1"]);
    assert!(gone.contains("snapshot v1@s1 removed"), "{gone}");
    assert!(ok(&dir, &["snap", "ls", "v1"]).contains("no snapshots"));
    // The gateway learns of the removal from its map watch.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while qemu_io(port, "v1@s1", true, &["read 0 4k"])
        .status
        .success()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a removed snapshot was still exported"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(&dir, &["volume", "rm", "v1"]);
}
