//! A real local cluster driven from the CLI, end to end: `pontoon up` with
//! three OSD processes and its own etcd; pools, volumes and status; the
//! error cases; an OSD killed with SIGKILL and restarted with `pontoon osd
//! start`; a clean stop; and `pontoon up` again on the same directory.
//!
//! Needs etcd (Debian's etcd-server; scripts/deps.sh installs it).

mod common;

use common::*;
use std::time::{Duration, Instant};

use serde_json::Value;

fn pgs_in(s: &Value, state: &str) -> u64 {
    s["pgs"]["states"][state].as_u64().unwrap_or(0)
}

fn all_clean(s: &Value) -> bool {
    s["osds"]["up"] == 3 && s["osds"]["in"] == 3 && pgs_in(s, "active+clean") == 16
}

#[test]
fn local_cluster_survives_an_osd_kill_and_a_restart_from_the_cli() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-cli-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let mut up = Up::start_with(&dir, 3, &[]);
    eprintln!("cluster ready after {:?}", started.elapsed());

    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(&dir, &["volume", "create", "v", "--size", "1G"]);
    let vols = json(&dir, &["volume", "ls", "--json"]);
    assert_eq!(vols[0]["name"], "v", "{vols}");
    assert_eq!(vols[0]["size_bytes"], 1u64 << 30, "{vols}");
    assert_eq!(vols[0]["pool"], "p", "{vols}");
    let info = json(&dir, &["volume", "info", "v", "--json"]);
    assert_eq!(info["max_objects"], 256, "{info}");
    let pools = json(&dir, &["pool", "ls", "--json"]);
    assert_eq!(pools[0]["min_size"], 2, "{pools}");
    let s = wait_status(&dir, "3 OSDs up/in and 16 PGs active+clean", all_clean);
    assert_eq!(s["pgs"]["total"], 16);
    eprintln!("pool clean after {:?}", started.elapsed());

    // Data in the first 10 objects (4 MiB each): the primaries count them.
    ok(
        &dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "40M", "--bs", "1M",
        ],
    );
    let s = wait_status(&dir, "10 objects reported", |s| s["objects"]["total"] == 10);
    assert_eq!(s["objects"]["degraded"], 0, "{s:#}");

    // Errors: one line, `error: ...`, exit 1; clap usage errors exit 2.
    let e = fails(&dir, &["volume", "info", "nope"], 1);
    assert!(e.starts_with("error: ") && e.contains("not found"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    let e = fails(
        &dir,
        &["pool", "create", "q", "--size", "2", "--min-size", "3"],
        1,
    );
    assert!(e.starts_with("error: ") && e.contains("min-size"), "{e}");
    let e = fails(&dir, &["volume", "create", "w", "--size", "12XB"], 1);
    assert!(
        e.starts_with("error: ") && e.contains("invalid volume size"),
        "{e}"
    );
    let e = fails(&dir, &["volume", "resize", "v", "--size", "512M"], 1);
    assert!(e.contains("shrinking"), "{e}");
    let e = fails(&dir, &["volume", "create", "v", "--size", "1G"], 1);
    assert!(e.contains("already exists"), "{e}");
    let e = fails(&dir, &["pool", "rm", "p"], 1);
    assert!(e.contains("in use"), "{e}");
    fails(&dir, &["pool", "create", "q"], 2);

    // SIGKILL one OSD: its lease expires, the manager takes it out of the
    // acting sets, and every PG runs degraded on the other two.
    let pid_file = dir.join("run/osd.1.pid");
    let victim = read_pid(&pid_file).expect("osd.1 pid file");
    assert!(is_ours(victim, &dir, ""));
    signal(victim, libc::SIGKILL);
    let s = wait_status(&dir, "osd.1 down and 16 PGs degraded", |s| {
        s["osds"]["up"] == 2 && pgs_in(s, "active+degraded") == 16
    });
    assert_eq!(s["osds"]["list"][1]["up"], false, "{s:#}");
    assert_eq!(s["osds"]["in"], 3, "down is not out yet: {s:#}");
    // Every object has two copies of three: all degraded, none missing
    // from the members that are up.
    let s = wait_status(&dir, "the 10 objects degraded", |s| {
        s["objects"]["degraded"] == 10
    });
    assert_eq!(s["objects"]["total"], 10, "{s:#}");
    assert_eq!(s["objects"]["missing"], 0, "{s:#}");
    eprintln!("degraded after {:?}", started.elapsed());

    // Restart it: back to all clean.
    let out = ok(&dir, &["osd", "start", "1"]);
    assert!(out.contains("osd.1 started"), "{out}");
    let restarted = read_pid(&pid_file).expect("new osd.1 pid file");
    assert_ne!(restarted, victim);
    fails(&dir, &["osd", "start", "1"], 1);
    wait_status(&dir, "all clean again", all_clean);
    eprintln!("clean again after {:?}", started.elapsed());

    // A clean stop takes every process with it, the restarted OSD too.
    let mut pids = up.pids();
    pids.push(restarted);
    let status = up.stop();
    assert!(status.success(), "pontoon up exited with {status}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "still running after up stopped: {left:?}");
    drop(up);

    // The same directory brings the same cluster back, with its data.
    let up = Up::start_with(&dir, 3, &[]);
    let pools = json(&dir, &["pool", "ls", "--json"]);
    assert_eq!(pools[0]["name"], "p", "{pools}");
    let vols = json(&dir, &["volume", "ls", "--json"]);
    assert_eq!(vols[0]["name"], "v", "{vols}");
    let s = wait_status(&dir, "all clean after the restart", all_clean);
    let ids: Vec<u64> = s["osds"]["list"]
        .as_array()
        .expect("osd list")
        .iter()
        .filter_map(|o| o["id"].as_u64())
        .collect();
    assert_eq!(ids, vec![0, 1, 2], "same OSD ids: {s:#}");
    drop(up);
    eprintln!("done after {:?}", started.elapsed());
}
