//! Clones end to end, with real clients: a two-OSD cluster (`pontoon up`,
//! pools of size 2) with its NBD gateway. `qemu-io` writes pattern A to a
//! volume, `pontoon snap create` and `snap protect` take and protect a
//! snapshot, `pontoon volume clone` makes a clone of it in another pool;
//! the clone reads A; `qemu-io` writes B over parts of the clone (single
//! blocks, a whole object, where A never was), discards and write-zeroes
//! parts of it; after each step `qemu-img compare` finds the clone equal,
//! byte for byte, to a file holding what it should, and the volume and the
//! snapshot still equal A. `pontoon volume flatten` then detaches the
//! clone; the snapshot is unprotected and removed, the parent volume is
//! overwritten and removed, and the clone still reads exactly its data.
//! Bad clone commands, and unprotect/rm of what clones use, each print one
//! line and change nothing.
//!
//! Needs etcd-server and qemu-utils (`scripts/deps.sh test`). Asserts on
//! data and on the clients' answers, never on time.

mod common;

use std::process::Command;

use common::qemu::*;
use common::*;

const MIB: usize = 1 << 20;
const SIZE: usize = 64 * MIB;

/// `qemu-img map` of an export: (start, length, data) per extent.
fn map(port: u16, export: &str) -> Vec<(u64, u64, bool)> {
    let out = Command::new("qemu-img")
        .args(["map", "--output=json", "-f", "raw"])
        .arg(format!("nbd://127.0.0.1:{port}/{export}"))
        .output()
        .expect("run qemu-img map");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("qemu-img map json");
    v.as_array()
        .expect("an array")
        .iter()
        .map(|e| {
            (
                e["start"].as_u64().expect("start"),
                e["length"].as_u64().expect("length"),
                e["data"].as_bool().expect("data"),
            )
        })
        .collect()
}

/// Whether `map` says `start..start+len` is all data (`true`) or all
/// hole (`false`); `None` when mixed.
fn all_data(map: &[(u64, u64, bool)], start: u64, len: u64) -> Option<bool> {
    let kinds: Vec<bool> = map
        .iter()
        .filter(|(s, l, _)| *s < start + len && s + l > start)
        .map(|(_, _, d)| *d)
        .collect();
    match kinds.as_slice() {
        [first, rest @ ..] if rest.iter().all(|d| d == first) => Some(*first),
        _ => None,
    }
}

fn fill(buf: &mut [u8], offset: usize, len: usize, byte: u8) {
    buf[offset..offset + len].fill(byte);
}

#[test]
fn a_clone_reads_its_snapshot_until_written_and_keeps_its_data_after_flatten() {
    let (_tmp, dir) = tempdir("pontoon-clones-");
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let _up = Up::start_with(&dir, 2, &["--nbd", &nbd]);
    ok(&dir, &["pool", "create", "p", "--size", "2", "--pgs", "8"]);
    ok(&dir, &["pool", "create", "q", "--size", "2", "--pgs", "8"]);
    ok(
        &dir,
        &["volume", "create", "v1", "--size", "64M", "--pool", "p"],
    );

    // Pattern A: two 4 MiB objects and part of a third, and one lone block.
    wait_export(port, "v1");
    qemu_io_ok(
        port,
        "v1",
        false,
        &["write -P 0xa1 0 9M", "write -P 0xa3 20M 4k"],
    );
    let mut a = vec![0u8; SIZE];
    fill(&mut a, 0, 9 * MIB, 0xa1);
    fill(&mut a, 20 * MIB, 4096, 0xa3);
    ok(&dir, &["snap", "create", "v1@s1"]);

    // Bad clone commands: one line each, nothing changes.
    let volumes = volume_records(&dir);
    let cases: [(&[&str], &str); 6] = [
        (&["volume", "clone", "v1@s1", "c1"], "not protected"),
        (
            &["volume", "clone", "v1@nosuch", "c1"],
            "snapshot v1@nosuch not found",
        ),
        (
            &["volume", "clone", "nosuch@s1", "c1"],
            "volume nosuch not found",
        ),
        (&["volume", "clone", "v1", "c1"], "not VOLUME@SNAPSHOT"),
        (&["volume", "clone", "v1@s1", "c/1"], "must be 1-"),
        (&["volume", "flatten", "nosuch"], "volume nosuch not found"),
    ];
    for (args, want) in cases {
        let line = one_line_error(&dir, args);
        assert!(line.contains(want), "pontoon {args:?}: {line}");
        assert_eq!(volume_records(&dir), volumes, "{args:?}");
    }
    ok(&dir, &["snap", "protect", "v1@s1"]);
    let volumes = volume_records(&dir);
    let cases: [(&[&str], &str); 2] = [
        (
            &["volume", "clone", "v1@s1", "c1", "--pool", "nosuch"],
            "pool nosuch not found",
        ),
        (&["volume", "clone", "v1@s1", "v1"], "already exists"),
    ];
    for (args, want) in cases {
        let line = one_line_error(&dir, args);
        assert!(line.contains(want), "pontoon {args:?}: {line}");
        assert_eq!(volume_records(&dir), volumes, "{args:?}");
    }

    // The clone: the snapshot's size, in pool q, naming its parent.
    let made = ok(&dir, &["volume", "clone", "v1@s1", "c1", "--pool", "q"]);
    assert!(
        made.contains("volume c1 cloned from v1@s1: 64.00 MiB in pool q"),
        "{made}"
    );
    let info = json(&dir, &["volume", "info", "c1", "--json"]);
    assert_eq!(info["parent"], "v1@s1", "{info}");
    assert_eq!(info["overlap_bytes"], SIZE as u64, "{info}");
    assert_eq!(info["size_bytes"], SIZE as u64, "{info}");
    assert_eq!(info["pool"], "q", "{info}");
    let ls = json(&dir, &["volume", "ls", "--json"]);
    let row = |name: &str| {
        ls.as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(row("c1")["parent"], "v1@s1", "{ls}");
    assert!(row("v1").get("parent").is_none(), "{ls}");
    assert!(ok(&dir, &["volume", "info", "c1"]).contains("parent      v1@s1"));

    // Unwritten, the clone reads A; block status reports where A is (the
    // parent snapshot's blocks) and holes elsewhere, as the snapshot's own
    // export does.
    wait_export(port, "c1");
    wait_export(port, "v1@s1");
    assert_holds(&dir, port, "c1", &a);
    let mib = MIB as u64;
    for export in ["c1", "v1@s1"] {
        let m = map(port, export);
        assert_eq!(all_data(&m, 0, 9 * mib), Some(true), "{export}: {m:?}");
        assert_eq!(
            all_data(&m, 9 * mib, 11 * mib),
            Some(false),
            "{export}: {m:?}"
        );
        assert_eq!(all_data(&m, 20 * mib, 4096), Some(true), "{export}: {m:?}");
        assert_eq!(
            all_data(&m, 20 * mib + 4096, 44 * mib - 4096),
            Some(false),
            "{export}: {m:?}"
        );
    }

    // B over single blocks and a range of object 0, all of object 1, and
    // where A never was; the clone reads B there and A elsewhere.
    qemu_io_ok(
        port,
        "c1",
        false,
        &[
            "write -P 0xb2 4k 4k",
            "write -P 0xb2 1M 64k",
            "write -P 0xb2 4M 4M",
            "write -P 0xb2 40M 1M",
        ],
    );
    let mut c = a.clone();
    fill(&mut c, 4096, 4096, 0xb2);
    fill(&mut c, MIB, 64 << 10, 0xb2);
    fill(&mut c, 4 * MIB, 4 * MIB, 0xb2);
    fill(&mut c, 40 * MIB, MIB, 0xb2);
    assert_holds(&dir, port, "c1", &c);
    // The clone's own blocks join its parent's in block status.
    let m = map(port, "c1");
    assert_eq!(all_data(&m, 40 * mib, mib), Some(true), "{m:?}");
    assert_eq!(all_data(&m, 41 * mib, 23 * mib), Some(false), "{m:?}");
    assert_eq!(all_data(&m, 0, 9 * mib), Some(true), "{m:?}");
    // The parent volume and its snapshot are unchanged.
    assert_holds(&dir, port, "v1", &a);
    wait_export(port, "v1@s1");
    assert_holds(&dir, port, "v1@s1", &a);

    // Discard and write-zeroes (unmapping) on the clone read zeros, not the
    // parent's A.
    qemu_io_ok(
        port,
        "c1",
        false,
        &["discard 0 64k", "write -z -u 2M 128k", "discard 4M 8k"],
    );
    fill(&mut c, 0, 64 << 10, 0);
    fill(&mut c, 2 * MIB, 128 << 10, 0);
    fill(&mut c, 4 * MIB, 8192, 0);
    assert_holds(&dir, port, "c1", &c);
    assert_holds(&dir, port, "v1@s1", &a);

    // What clones use cannot go: one line naming the clone, no change.
    let volumes = volume_records(&dir);
    let snaps = snap_records(&dir, "v1");
    let cases: [(&[&str], &str); 4] = [
        (&["snap", "unprotect", "v1@s1"], "clone(s): c1"),
        (&["snap", "rm", "v1@s1"], "clone(s): c1"),
        (&["volume", "rm", "v1"], "clone(s): c1"),
        (
            &["snap", "create", "c1@s"],
            "flatten it before taking snapshots",
        ),
    ];
    for (args, want) in cases {
        let line = one_line_error(&dir, args);
        assert!(line.contains(want), "pontoon {args:?}: {line}");
        assert_eq!(volume_records(&dir), volumes, "{args:?}");
        assert_eq!(snap_records(&dir, "v1"), snaps, "{args:?}");
    }

    // Flatten: the clone no longer has a parent and reads the same.
    let flat = ok(&dir, &["volume", "flatten", "c1"]);
    assert!(flat.contains("volume c1 flattened"), "{flat}");
    assert!(flat.contains("from v1@s1"), "{flat}");
    let info = json(&dir, &["volume", "info", "c1", "--json"]);
    assert!(info.get("parent").is_none(), "{info}");
    let again = ok(&dir, &["volume", "flatten", "c1"]);
    assert!(again.contains("not a clone"), "{again}");
    assert_holds(&dir, port, "c1", &c);

    // The snapshot and the parent go; the clone keeps its data exactly.
    ok(&dir, &["snap", "unprotect", "v1@s1"]);
    ok(&dir, &["snap", "rm", "v1@s1"]);
    qemu_io_ok(port, "v1", false, &["write -P 0xcc 0 24M"]);
    assert_holds(&dir, port, "c1", &c);
    ok(&dir, &["volume", "rm", "v1"]);
    assert_holds(&dir, port, "c1", &c);
    // Detached, it reports its own blocks: the parent's zeros were not
    // copied in.
    let m = map(port, "c1");
    assert_eq!(
        all_data(&m, 9 * MIB as u64, 11 * MIB as u64),
        Some(false),
        "{m:?}"
    );
    assert_eq!(all_data(&m, 20 * MIB as u64, 4096), Some(true), "{m:?}");
    assert_eq!(
        all_data(&m, 8 * MIB as u64, MIB as u64),
        Some(true),
        "{m:?}"
    );
}
