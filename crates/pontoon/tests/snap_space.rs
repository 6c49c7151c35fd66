//! Snap trim and snapshot space end to end, on a real three-OSD cluster
//! (size-3 pool: every OSD holds every object) with its NBD gateway:
//! - `snap ls --json`, `du --json` and `df --json` count each snapshot's
//!   exclusive bytes (the data overwritten since) and the volume's total;
//! - `snap rm` frees the removed snapshot's blocks on every OSD within a
//!   bounded wait (the OSDs' `pontoon_osd_snap_trim_*` counters say so),
//!   while the other snapshots and the head read exactly what they read
//!   before, and a deep scrub then finds every copy consistent;
//! - a snapshot a clone depends on is never trimmed, and an OSD killed
//!   with SIGKILL before `snap rm` and started again trims its copies at
//!   its first map, losing nothing.
//!
//! Needs etcd-server and qemu-utils (qemu-io).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::qemu::*;
use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// The volume's size: four 4 MiB objects.
const SIZE: u64 = 16 * MIB;
const PGS: usize = 8;
/// How long freed blocks may take to show in every OSD's report.
const TRIM_LIMIT: Duration = Duration::from_secs(20);
/// How long reports may take to show new data.
const REPORT_LIMIT: Duration = Duration::from_secs(20);

fn cluster(dir: &Path) -> (Up, u16) {
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let up = Up::start_with(dir, 3, &["--nbd", &nbd]);
    ok(dir, &["pool", "create", "p", "--size", "3", "--pgs", "8"]);
    ok(
        dir,
        &["volume", "create", "v", "--size", "16M", "--pool", "p"],
    );
    wait_export(port, "v");
    (up, port)
}

fn fill(port: u16, export: &str, byte: u8, len: u64) {
    qemu_io_ok(
        port,
        export,
        false,
        &[&format!("write -P {byte:#x} 0 {len}")],
    );
}

/// `VIEW` exported to a file in `dir` and read back.
fn export(dir: &Path, view: &str) -> Vec<u8> {
    let path = dir.join(format!("{}.raw", view.replace('@', "_")));
    let _ = std::fs::remove_file(&path);
    ok(
        dir,
        &["volume", "export", view, path.to_str().expect("utf-8 path")],
    );
    std::fs::read(&path).expect("read the export")
}

/// Asserts `got` is `want` block by block, naming the first block that
/// differs.
fn same_blocks(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(b) = got
        .chunks(4096)
        .zip(want.chunks(4096))
        .position(|(a, b)| a != b)
    {
        panic!("{what}: block {b} differs");
    }
}

fn exclusive(ls: &Value, name: &str) -> Option<u64> {
    ls.as_array()?.iter().find(|s| s["name"] == name)?["exclusive_bytes"].as_u64()
}

fn within(got: u64, want: u64, slack: u64) -> bool {
    got.abs_diff(want) <= slack
}

/// Waits until every OSD holds `want` bytes (give or take 64 KiB).
fn wait_used(dir: &Path, want: u64, limit: Duration, what: &str) -> Value {
    wait_json(dir, &["df", "--json"], what, limit, |d| {
        (0..3).all(|i| within(df_used(d, i), want, 64 << 10))
    })
}

/// The sum over the OSDs' `/metrics` of series `name`.
fn osd_metric(dir: &Path, name: &str) -> u64 {
    let status = json(dir, &["status", "--json"]);
    let mut total = 0;
    for d in status["daemons"].as_array().into_iter().flatten() {
        if d["kind"] != "osd" {
            continue;
        }
        let addr = d["metrics"].as_str().unwrap_or_default();
        let (code, body) =
            http_get(addr, "/metrics").unwrap_or_else(|| panic!("{addr}: no answer"));
        assert_eq!(code, 200, "{addr}");
        total += body
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
    }
    total
}

/// Deep-scrubs pool `p` and asserts every PG found its copies consistent.
fn deep_scrub_clean(dir: &Path) {
    let pgs = deep_scrub(dir, "p", Duration::from_secs(20));
    assert_eq!(pgs.len(), PGS, "every PG listed");
    for p in &pgs {
        let s = &p["scrub"];
        assert!(
            s["inconsistent_objects"] == 0 && s["unrecoverable_objects"] == 0,
            "scrub after trim: {p:#}"
        );
    }
}

#[test]
fn a_removed_snapshot_gives_its_blocks_back_and_the_rest_reads_the_same() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-snap-space-");
    let (_up, port) = cluster(&dir);
    fill(port, "v", 0xa1, SIZE);
    ok(&dir, &["snap", "create", "v@s1"]);
    // Everything overwritten: s1 alone holds A.
    fill(port, "v", 0xb2, SIZE);
    ok(&dir, &["snap", "create", "v@s2"]);
    // A quarter overwritten: s2 alone holds that much of B.
    fill(port, "v", 0xc3, 4 * MIB);
    ok(&dir, &["snap", "create", "v@s3"]);

    let ls = wait_json(
        &dir,
        &["snap", "ls", "v", "--json"],
        "exclusive bytes of s1 and s2",
        REPORT_LIMIT,
        |ls| {
            exclusive(ls, "s1") == Some(SIZE)
                && exclusive(ls, "s2") == Some(4 * MIB)
                && exclusive(ls, "s3") == Some(0)
        },
    );
    eprintln!("snap ls: {ls}");
    let du = json(&dir, &["du", "v", "--json"]);
    assert_eq!(du[0]["used_bytes"], SIZE, "{du:#}");
    assert_eq!(du[0]["snapshot_bytes"], SIZE + 4 * MIB, "{du:#}");
    assert_eq!(du[0]["total_bytes"], 2 * SIZE + 4 * MIB, "{du:#}");
    assert_eq!(du[0]["raw_used_bytes"], 3 * (2 * SIZE + 4 * MIB), "{du:#}");
    let text = ok(&dir, &["du", "v"]);
    assert!(text.contains("SNAPSHOTS") && text.contains("@s1"), "{text}");
    let df = wait_used(
        &dir,
        2 * SIZE + 4 * MIB,
        REPORT_LIMIT,
        "every OSD's used bytes",
    );
    assert_eq!(df["pools"][0]["snapshot_bytes"], SIZE + 4 * MIB, "{df:#}");

    let (s2, s3, head) = (
        export(&dir, "v@s2"),
        export(&dir, "v@s3"),
        export(&dir, "v"),
    );
    let freed_before = osd_metric(&dir, "pontoon_osd_snap_trim_freed_bytes_total");

    let t0 = Instant::now();
    ok(&dir, &["snap", "rm", "v@s1"]);
    wait_used(
        &dir,
        SIZE + 4 * MIB,
        TRIM_LIMIT,
        "s1's blocks freed on every OSD",
    );
    eprintln!(
        "s1 trimmed on every OSD in {:?} (reports included)",
        t0.elapsed()
    );
    let freed = osd_metric(&dir, "pontoon_osd_snap_trim_freed_bytes_total") - freed_before;
    assert_eq!(freed, 3 * SIZE, "three copies of s1's exclusive data freed");
    assert!(osd_metric(&dir, "pontoon_osd_snap_trim_objects_total") >= 3 * 4);

    same_blocks(&export(&dir, "v@s2"), &s2, "s2 after trimming s1");
    same_blocks(&export(&dir, "v@s3"), &s3, "s3 after trimming s1");
    same_blocks(&export(&dir, "v"), &head, "the head after trimming s1");
    assert!(
        s2[..4 * MIB as usize].iter().all(|b| *b == 0xb2),
        "s2 reads B"
    );
    assert!(
        head[..4 * MIB as usize].iter().all(|b| *b == 0xc3),
        "the head reads C"
    );
    let gone = pontoon(&dir, &["volume", "export", "v@s1", "-"]);
    assert!(!gone.status.success(), "a removed snapshot still exports");

    let ls = wait_json(
        &dir,
        &["snap", "ls", "v", "--json"],
        "s2's exclusive bytes alone",
        REPORT_LIMIT,
        |ls| ls.as_array().is_some_and(|a| a.len() == 2) && exclusive(ls, "s2") == Some(4 * MIB),
    );
    assert_eq!(exclusive(&ls, "s3"), Some(0), "{ls:#}");
    let du = json(&dir, &["du", "v", "--json"]);
    assert_eq!(du[0]["snapshot_bytes"], 4 * MIB, "{du:#}");

    // Every snapshot gone: nothing but the head is left.
    ok(&dir, &["snap", "rm", "v@s2"]);
    ok(&dir, &["snap", "rm", "v@s3"]);
    let df = wait_used(&dir, SIZE, TRIM_LIMIT, "every snapshot's blocks freed");
    assert_eq!(df_volume(&df, "v")["snapshot_bytes"], 0, "{df:#}");
    same_blocks(
        &export(&dir, "v"),
        &head,
        "the head after trimming everything",
    );
    deep_scrub_clean(&dir);
    eprintln!("done in {:?}", started.elapsed());
}

#[test]
fn a_snapshot_a_clone_uses_is_kept_and_an_osd_killed_during_snap_rm_trims_when_it_restarts() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-snap-trim-kill-");
    let (_up, port) = cluster(&dir);
    fill(port, "v", 0xa1, SIZE);
    ok(&dir, &["snap", "create", "v@s1"]);
    ok(&dir, &["snap", "protect", "v@s1"]);
    ok(&dir, &["volume", "clone", "v@s1", "c"]);
    fill(port, "v", 0xb2, SIZE);
    ok(&dir, &["snap", "create", "v@s2"]);
    fill(port, "v", 0xc3, SIZE);
    // Head C, s1 holds A, s2 holds B.
    wait_used(&dir, 3 * SIZE, REPORT_LIMIT, "three versions on every OSD");
    let (s1, head, clone) = (export(&dir, "v@s1"), export(&dir, "v"), export(&dir, "c"));
    assert!(s1.iter().all(|b| *b == 0xa1), "s1 reads A");

    // osd.2 is killed, s2 removed while it is down (the others trim), and
    // osd.2 comes back: it trims at its first map.
    signal(osd_pid(&dir, 2), libc::SIGKILL);
    wait_status(&dir, "osd.2 down", |s| s["osds"]["up"] == 2);
    ok(&dir, &["snap", "rm", "v@s2"]);
    let df = wait_json(
        &dir,
        &["df", "--json"],
        "s2's blocks freed on the running OSDs",
        TRIM_LIMIT,
        |d| (0..2).all(|i| within(df_used(d, i), 2 * SIZE, 64 << 10)),
    );
    assert!(
        within(df_used(&df, 2), 3 * SIZE, 64 << 10),
        "osd.2's last report, from before it died, holds s2: {df:#}"
    );
    ok(&dir, &["osd", "start", "2"]);
    wait_status(&dir, "osd.2 up", |s| s["osds"]["up"] == 3);
    let t0 = Instant::now();
    wait_used(&dir, 2 * SIZE, TRIM_LIMIT, "s2's blocks freed on osd.2 too");
    eprintln!("osd.2 trimmed {:?} after it came back", t0.elapsed());

    // s1 is the clone's parent: kept, every block of it.
    same_blocks(&export(&dir, "v@s1"), &s1, "s1, which the clone needs");
    same_blocks(&export(&dir, "c"), &clone, "the clone");
    same_blocks(&export(&dir, "v"), &head, "the head");
    let ls = wait_json(
        &dir,
        &["snap", "ls", "v", "--json"],
        "s1's exclusive bytes",
        REPORT_LIMIT,
        |ls| exclusive(ls, "s1") == Some(SIZE),
    );
    assert_eq!(ls.as_array().map(Vec::len), Some(1), "{ls:#}");
    // Still there after the restarted OSD's first map: nothing trims it.
    wait_used(&dir, 2 * SIZE, REPORT_LIMIT, "s1 kept on every OSD");
    eprintln!("done in {:?}", started.elapsed());
}
