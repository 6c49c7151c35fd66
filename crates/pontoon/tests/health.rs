//! `pontoon health` on a real 3-OSD cluster: HEALTH_OK once the PGs are
//! clean (`pontoon up` runs a standby manager beside the active one); the
//! standby killed → HEALTH_WARN MGR_NO_STANDBY once its registry entry
//! lapses; an OSD killed → OSD_DOWN and PG_DEGRADED naming it, in
//! `health detail`, `health --json` and the first line of `status`.
//!
//! Needs etcd (Debian's etcd-server; scripts/deps.sh installs it).

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

fn codes(h: &Value) -> Vec<String> {
    h["checks"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|c| c["code"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn health_names_a_lost_standby_and_a_dead_osd() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let _up = Up::start_sized(dir, 3, "256M", &[]);
    ok(
        dir,
        &[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--pgs",
            "16",
            "--failure-domain",
            "osd",
        ],
    );
    ok(
        dir,
        &["volume", "create", "v", "--size", "16M", "--pool", "p"],
    );
    ok(
        dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "4M", "--bs", "1M", "--qd", "4",
        ],
    );
    wait_json(dir, &["health", "--json"], "HEALTH_OK", WAIT, |h| {
        h["status"] == "HEALTH_OK"
    });
    assert_eq!(ok(dir, &["health"]).trim(), "HEALTH_OK");
    assert!(ok(dir, &["status"]).starts_with("health: HEALTH_OK\n"));

    let standby = read_pid(&dir.join("run/mgr.pid")).expect("the standby manager's pid file");
    signal(standby, libc::SIGKILL);
    let h = wait_json(
        dir,
        &["health", "--json"],
        "MGR_NO_STANDBY",
        Duration::from_secs(40),
        |h| codes(h).contains(&"MGR_NO_STANDBY".to_string()),
    );
    assert_eq!(h["status"], "HEALTH_WARN", "{h:#}");

    signal(osd_pid(dir, 2), libc::SIGKILL);
    let h = wait_json(
        dir,
        &["health", "--json"],
        "OSD_DOWN and PG_DEGRADED",
        WAIT,
        |h| {
            let c = codes(h);
            c.contains(&"OSD_DOWN".to_string()) && c.contains(&"PG_DEGRADED".to_string())
        },
    );
    assert_eq!(h["status"], "HEALTH_WARN", "{h:#}");
    let detail = ok(dir, &["health", "detail"]);
    assert!(detail.starts_with("HEALTH_WARN "), "{detail}");
    assert!(detail.contains("osd.2 (host "), "{detail}");
    assert!(
        detail.contains("[WARN] OSD_DOWN: 1 of 3 osds down"),
        "{detail}"
    );
    assert!(detail.contains("[WARN] PG_DEGRADED"), "{detail}");
    let status = ok(dir, &["status"]);
    assert!(status.starts_with("health: HEALTH_WARN "), "{status}");
}
