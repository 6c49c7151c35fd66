//! Space comes back, and is accounted exactly, on a real four-OSD cluster:
//! - `df` and `du` agree with the bytes written;
//! - a removed 1 GiB volume is deleted from every running OSD within 60 s,
//!   and from an OSD that was down at the time as soon as it restarts;
//! - an OSD marked out and in again leaves no stray copies behind once the
//!   PGs are clean: the OSDs hold exactly three copies of what was written;
//! - through all of it a kept volume reads back exactly what was written
//!   to it (nbdcopy over the NBD gateway).
//!
//! Needs etcd-server and libnbd-bin (nbdcopy).

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

const MIB: u64 = 1 << 20;
const GONE: u64 = 1 << 30;
const KEPT: u64 = 256 * MIB;
const PGS: u64 = 32;
/// How long removed data may take to disappear.
const PURGE_LIMIT: Duration = Duration::from_secs(60);

fn all_clean(s: &Value, up: u64) -> bool {
    s["osds"]["up"] == up && s["pgs"]["states"]["active+clean"].as_u64() == Some(PGS)
}

fn within(got: u64, want: u64, pct: f64) -> bool {
    (got as f64 - want as f64).abs() <= want as f64 * pct / 100.0
}

/// `len` bytes of a pattern no two 8-byte words of which are alike.
fn pattern(len: u64) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|i| pontoon_types::mix64(i ^ 0x5eed).to_le_bytes())
        .collect()
}

fn nbdcopy(from: &str, to: &str) {
    let out = Command::new("nbdcopy")
        .args([from, to])
        .output()
        .expect("run nbdcopy (libnbd-bin)");
    assert!(
        out.status.success(),
        "nbdcopy {from} {to}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn removed_volumes_and_stray_copies_give_their_space_back() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-reclaim-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let _up = Up::start_sized(&dir, 4, "1536M", &["--nbd", &nbd]);
    // Placement must stay put between the measurements.
    ok(&dir, &["balancer", "off"]);
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "32"]);
    ok(&dir, &["volume", "create", "gone", "--size", "1G"]);
    ok(&dir, &["volume", "create", "kept", "--size", "256M"]);
    wait_json(&dir, &["status", "--json"], "all clean", WAIT, |s| {
        all_clean(s, 4)
    });
    let empty = json(&dir, &["df", "--json"]);
    assert!(
        (0..4).all(|i| df_used(&empty, i) == 0),
        "a new cluster holds data: {empty:#}"
    );

    // 256 MiB of a known pattern through NBD, then 1 GiB through the
    // client library.
    let data = pattern(KEPT);
    let src = dir.join("kept.src");
    std::fs::write(&src, &data).expect("write the pattern file");
    let kept_uri = format!("nbd://{nbd}/kept");
    nbdcopy(src.to_str().expect("utf-8 path"), &kept_uri);
    let df = wait_json(&dir, &["df", "--json"], "`kept`'s data", WAIT, |d| {
        df_volume(d, "kept")["raw_used_bytes"] == 3 * KEPT
    });
    let base: Vec<u64> = (0..4).map(|i| df_used(&df, i)).collect();
    ok(
        &dir,
        &[
            "bench", "--volume", "gone", "--fill", "--bs", "4M", "--qd", "4",
        ],
    );
    eprintln!("written after {:?}", started.elapsed());

    // df and du agree with what was written: exactly, once the reports
    // are in.
    let df = wait_json(&dir, &["df", "--json"], "both volumes' data", WAIT, |d| {
        df_volume(d, "gone")["raw_used_bytes"] == 3 * GONE
    });
    let pool = &df["pools"][0];
    assert_eq!(pool["stored_bytes"], GONE + KEPT, "{df:#}");
    assert_eq!(pool["raw_used_bytes"], 3 * (GONE + KEPT), "{df:#}");
    assert_eq!(pool["objects"], 256 + 64, "{df:#}");
    assert!(
        within(
            df["raw"]["used_bytes"].as_u64().unwrap_or(0),
            3 * (GONE + KEPT),
            1.0
        ),
        "{df:#}"
    );
    let du = json(&dir, &["du", "kept", "--json"]);
    assert_eq!(du[0]["provisioned_bytes"], KEPT, "{du:#}");
    assert_eq!(du[0]["used_bytes"], KEPT, "{du:#}");

    // osd.3 goes down; `gone` is removed while it is.
    let victim = osd_pid(&dir, 3);
    signal(victim, libc::SIGKILL);
    wait_json(&dir, &["status", "--json"], "osd.3 down", WAIT, |s| {
        s["osds"]["up"] == 3
    });
    let removed_at = Instant::now();
    ok(&dir, &["volume", "rm", "gone"]);
    let df = wait_json(
        &dir,
        &["df", "--json"],
        "the running OSDs holding only `kept`",
        PURGE_LIMIT,
        |d| (0..3).all(|i| within(df_used(d, i), base[i as usize], 1.0)),
    );
    let purge = removed_at.elapsed();
    let deleted: u64 = (0..3)
        .map(|i| df_osd(&df, i)["reclaimed_objects"].as_u64().unwrap_or(0))
        .sum();
    assert!(deleted > 0, "{df:#}");
    eprintln!("purged `gone` from the running OSDs ({deleted} objects) in {purge:?}");
    assert_eq!(df["raw"]["reclaim_pending_objects"], 0, "{df:#}");

    // The OSD that was down deletes its copies when it starts again.
    ok(&dir, &["osd", "start", "3"]);
    let df = wait_json(
        &dir,
        &["df", "--json"],
        "osd.3 holding only `kept` after its restart",
        PURGE_LIMIT,
        |d| df_osd(d, 3)["up"] == true && within(df_used(d, 3), base[3], 1.0),
    );
    eprintln!("osd.3 cleaned after restart: {}", df_used(&df, 3));
    wait_json(&dir, &["status", "--json"], "all clean", WAIT, |s| {
        all_clean(s, 4)
    });

    // Out and in again: PGs move off osd.1, are backfilled elsewhere, then
    // come back; the copies the others took meanwhile are strays.
    let reclaimed = |d: &Value| -> u64 {
        (0..4)
            .map(|i| df_osd(d, i)["reclaimed_objects"].as_u64().unwrap_or(0))
            .sum()
    };
    let before_out = reclaimed(&json(&dir, &["df", "--json"]));
    ok(&dir, &["osd", "out", "1"]);
    wait_json(
        &dir,
        &["status", "--json"],
        "clean without osd.1",
        WAIT,
        |s| s["osds"]["in"] == 3 && all_clean(s, 4),
    );
    ok(&dir, &["osd", "in", "osd.1"]);
    wait_json(&dir, &["status", "--json"], "clean with osd.1", WAIT, |s| {
        s["osds"]["in"] == 4 && all_clean(s, 4)
    });
    let df = wait_json(
        &dir,
        &["df", "--json"],
        "exactly three copies of `kept` and nothing else",
        PURGE_LIMIT,
        |d| {
            d["raw"]["reclaim_pending_objects"] == 0
                && df_volume(d, "kept")["raw_used_bytes"] == 3 * KEPT
                && within(d["raw"]["used_bytes"].as_u64().unwrap_or(0), 3 * KEPT, 1.0)
        },
    );
    let strays = reclaimed(&df) - before_out;
    assert!(
        strays > 0,
        "out and in again moved no data, so made no strays to test: {df:#}"
    );
    eprintln!("{strays} stray copies deleted after out/in: {}", df["raw"]);

    // Nothing that was kept was lost.
    let back = dir.join("kept.back");
    nbdcopy(&kept_uri, back.to_str().expect("utf-8 path"));
    let got = std::fs::read(&back).expect("read the copy");
    assert!(got == data, "`kept` does not read back as written");
    eprintln!("done after {:?}", started.elapsed());
}
