//! OSD life cycle and maintenance on real 4-OSD clusters (`pontoon up`,
//! pool of size 3 over OSDs): what Ceph operators expect of `noout`,
//! `norebalance`, `norecover`, `config set out_after`, `osd rm`, `osd
//! purge`, `osd destroy` and `osd replace`, and one-line errors for bad
//! input.
//!
//! - noout: an OSD killed and kept down past out-after stays in, its PGs
//!   stay degraded on the survivors (no new member, nothing recovering);
//!   unset, it is marked out and its PGs backfilled to clean, with
//!   norebalance set (it holds back misplaced PGs only, not degraded ones);
//!   then `osd rm` takes it out of the map (refused while it was up).
//! - norebalance / norecover: an OSD marked out while alive leaves its PGs
//!   only misplaced, and norebalance holds their backfill; marked in again
//!   under norecover, recovery waits; each unset lets the PGs go clean.
//!   Then `osd purge` removes a dead OSD and its PGs heal elsewhere.
//! - destroy + replace: a dead OSD (noout set) is destroyed, its old device
//!   may not come back, and `osd replace` formats a new file that takes its
//!   id; `osd run` on it joins, backfill fills it and every PG is clean.
//!
//! Each step's time is printed (`--nocapture` shows it). Needs etcd
//! (Debian's etcd-server; scripts/deps.sh installs it).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Longest a backfill of the test's few MiB may take.
const BACKFILL: Duration = Duration::from_secs(90);

/// A 4-OSD cluster with a size-3 pool `p` (32 PGs) and a volume `v`
/// holding 64 MiB (16 objects), every PG clean.
fn cluster(dir: &Path) -> Up {
    let up = Up::start_sized(dir, 4, "256M", &[]);
    ok(
        dir,
        &[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--pgs",
            "32",
            "--failure-domain",
            "osd",
        ],
    );
    ok(
        dir,
        &["volume", "create", "v", "--size", "96M", "--pool", "p"],
    );
    ok(
        dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "64M", "--bs", "1M", "--qd", "4",
        ],
    );
    wait_clean(dir, "the new cluster clean", WAIT);
    up
}

/// Whether every PG is active+clean in `status --json` output.
fn clean(s: &Value) -> bool {
    let total = s["pgs"]["total"].as_u64().unwrap_or(0);
    total > 0 && s["pgs"]["states"]["active+clean"].as_u64() == Some(total)
}

fn wait_clean(dir: &Path, what: &str, limit: Duration) -> Value {
    wait_json(dir, &["status", "--json"], what, limit, clean)
}

/// OSD `id` in `osd ls --json`, if listed.
fn osd(dir: &Path, id: u64) -> Option<Value> {
    json(dir, &["osd", "ls", "--json"])
        .as_array()
        .expect("osd ls --json prints an array")
        .iter()
        .find(|o| o["id"] == id)
        .cloned()
}

fn wait_osd(dir: &Path, id: u64, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + limit;
    loop {
        let o = osd(dir, id).unwrap_or(Value::Null);
        if pred(&o) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "osd.{id} did not become {what} within {limit:?}: {o:#}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The PGs as `pg ls --json` lists them.
fn pgs(dir: &Path) -> Vec<Value> {
    json(dir, &["pg", "ls", "--json"])
        .as_array()
        .expect("pg ls --json prints an array")
        .clone()
}

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

/// Runs a command that must fail with exit code `code` and one line of
/// error; returns the line.
fn refused(dir: &Path, args: &[&str], code: i32, want: &str) -> String {
    let err = fails(dir, args, code);
    let line = err.trim();
    if code == 1 {
        assert_eq!(line.lines().count(), 1, "{args:?}: {err}");
        assert!(line.starts_with("error: "), "{args:?}: {err}");
    }
    assert!(line.contains(want), "{args:?}: wanted {want:?} in: {err}");
    line.to_string()
}

#[test]
fn noout_holds_a_dead_osd_in_and_unset_it_is_marked_out_and_backfilled() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let _up = cluster(dir);

    // `pontoon up --out-after 120s` seeded the map; config set changes it.
    assert_eq!(ok(dir, &["config", "get", "out_after"]).trim(), "2m");
    assert_eq!(
        ok(dir, &["config", "set", "out_after", "2s"]).trim(),
        "out_after = 2s"
    );
    let entry = json(dir, &["config", "get", "out_after", "--json"]);
    assert_eq!(entry["value"], "2s", "{entry:#}");
    assert_eq!(entry["set"], true, "{entry:#}");
    let ls = ok(dir, &["config", "ls"]);
    assert!(ls.contains("recovery_max_active"), "{ls}");
    ok(dir, &["config", "set", "recovery_max_active", "7"]);
    assert_eq!(
        ok(dir, &["config", "rm", "recovery_max_active"]).trim(),
        "recovery_max_active = 2 (default)"
    );
    let entry = json(dir, &["config", "get", "recovery_max_active", "--json"]);
    assert_eq!(entry["set"], false, "{entry:#}");

    // Bad input: one line each.
    refused(dir, &["osd", "rm", "3"], 1, "osd.3 is up: stop its daemon");
    refused(dir, &["osd", "destroy", "0"], 1, "osd.0 is up");
    refused(dir, &["osd", "rm", "9"], 1, "osd.9 does not exist");
    refused(
        dir,
        &["osd", "reweight", "1", "1.5"],
        1,
        "between 0.0 and 1.0",
    );
    refused(
        dir,
        &["config", "set", "out_after", "soon"],
        1,
        "out_after: \"soon\" is not a duration",
    );
    refused(
        dir,
        &["config", "set", "min_in_ratio", "2"],
        1,
        "min_in_ratio: 2 is not in [0, 1]",
    );
    refused(
        dir,
        &["config", "set", "nearfull_ratio", "0.99"],
        1,
        "full ratios must be ordered",
    );
    refused(
        dir,
        &["config", "get", "bogus"],
        2,
        "unknown setting \"bogus\"",
    );
    refused(
        dir,
        &["osd", "set", "nodown"],
        2,
        "unknown OSD flag \"nodown\"",
    );
    refused(
        dir,
        &["host", "maintenance", "enter", "no-such-host"],
        1,
        "no OSD is registered on host \"no-such-host\"",
    );
    refused(
        dir,
        &["host", "maintenance", "exit", "no-such-host"],
        1,
        "is not in maintenance",
    );
    refused(
        dir,
        &[
            "osd",
            "replace",
            "1",
            "--device",
            &dir.join("x.img").to_string_lossy(),
            "--size",
            "256M",
        ],
        1,
        "osd.1 is not destroyed",
    );
    assert!(
        !dir.join("x.img").exists(),
        "a refused replace leaves no file"
    );

    // noout: shown in status and health.
    assert_eq!(ok(dir, &["osd", "set", "noout"]).trim(), "noout is set");
    let h = json(dir, &["health", "--json"]);
    assert!(codes(&h).contains(&"OSDMAP_FLAGS".to_string()), "{h:#}");
    assert!(ok(dir, &["health"]).contains("noout flag(s) set"));
    let s = json(dir, &["status", "--json"]);
    assert_eq!(s["flags"]["flags"][0], "noout", "{s:#}");
    assert!(ok(dir, &["status"]).contains("\nflags: noout\n"));

    let killed = Instant::now();
    signal(osd_pid(dir, 3), libc::SIGKILL);
    wait_osd(dir, 3, "down", WAIT, |o| o["up"] == false);
    let down_after = killed.elapsed();
    // Well past out-after (2 s): still in, its PGs degraded on the others.
    std::thread::sleep(Duration::from_secs(6));
    let o = osd(dir, 3).expect("osd.3 listed");
    assert_eq!(o["in"], true, "noout keeps it in: {o:#}");
    assert!(o["noout"].as_str().unwrap_or("").contains("noout"), "{o:#}");
    let listed = pgs(dir);
    let mut degraded = 0;
    for pg in &listed {
        let acting = pg["acting"].as_array().expect("acting");
        assert!(
            acting.iter().all(|o| o.as_u64() < Some(3)),
            "no PG moved to a new member: {pg:#}"
        );
        let state = pg["state"].as_str().unwrap_or("");
        assert!(
            state == "active+clean" || state == "active+degraded",
            "degraded, not recovering or remapped: {pg:#}"
        );
        degraded += usize::from(state == "active+degraded");
    }
    assert!(degraded > 0, "osd.3 held some PGs: {listed:#?}");
    assert!(ok(dir, &["status"]).contains("noout"));

    // norebalance holds back misplaced PGs only: these are degraded.
    ok(dir, &["osd", "set", "norebalance"]);
    let unset = Instant::now();
    assert_eq!(ok(dir, &["osd", "unset", "noout"]).trim(), "noout is unset");
    wait_osd(dir, 3, "out", Duration::from_secs(20), |o| o["in"] == false);
    let out_after_unset = unset.elapsed();
    wait_clean(dir, "backfilled to clean", BACKFILL);
    let backfilled = unset.elapsed();
    ok(dir, &["osd", "unset", "norebalance"]);
    assert!(
        pgs(dir)
            .iter()
            .all(|pg| pg["acting"].as_array().is_some_and(|a| a.len() == 3)),
        "every PG has three members again"
    );

    // Down, out, no PG names it once past intervals are trimmed: rm.
    let deadline = Instant::now() + WAIT;
    loop {
        let out = pontoon(dir, &["osd", "rm", "3"]);
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).contains("removed osd.3"));
            break;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("still appears in"), "{err}");
        assert!(Instant::now() < deadline, "osd rm kept refusing: {err}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(osd(dir, 3).is_none(), "osd.3 is gone from osd ls");
    wait_json(dir, &["health", "--json"], "HEALTH_OK", WAIT, |h| {
        h["status"] == "HEALTH_OK"
    });
    eprintln!(
        "noout: osd.3 down {:.1}s after the kill, kept in 6 s past out-after; unset noout: out after {:.1}s, \
         clean after {:.1}s",
        down_after.as_secs_f64(),
        out_after_unset.as_secs_f64(),
        backfilled.as_secs_f64()
    );
}

/// Whether some PG is not clean and every PG that is not says `note`.
fn paused(dir: &Path, note: &str) -> bool {
    let listed = pgs(dir);
    let waiting: Vec<&Value> = listed
        .iter()
        .filter(|p| p["state"] != "active+clean")
        .collect();
    !waiting.is_empty()
        && waiting
            .iter()
            .all(|p| p["note"].as_str().is_some_and(|n| n.contains(note)))
}

#[test]
fn norebalance_and_norecover_pause_backfill_until_unset_and_purge_heals() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let _up = cluster(dir);
    ok(dir, &["config", "set", "recovery_max_active", "4"]);
    ok(dir, &["config", "set", "recovery_sleep", "5ms"]);

    // Out while alive: its copies stay where they are, the PGs are only
    // misplaced, and norebalance holds their backfill.
    ok(dir, &["osd", "set", "norebalance"]);
    ok(dir, &["osd", "out", "3"]);
    let v = wait_json(
        dir,
        &["pg", "ls", "--json"],
        "backfill paused by norebalance",
        WAIT,
        |_| paused(dir, "norebalance"),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(paused(dir, "norebalance"), "still paused: {v:#}");
    let states: Vec<String> = pgs(dir)
        .iter()
        .map(|p| p["state"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        states.iter().all(|s| s == "active+clean" || s == "active"),
        "misplaced, not degraded or recovering: {states:?}"
    );
    let t = Instant::now();
    ok(dir, &["osd", "unset", "norebalance"]);
    wait_clean(dir, "clean after norebalance is unset", BACKFILL);
    let rebalanced = t.elapsed();

    // In again under norecover: nothing is copied back until it is unset.
    ok(dir, &["osd", "set", "norecover"]);
    let h = json(dir, &["health", "--json"]);
    let flags = h["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["code"] == "OSDMAP_FLAGS"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(flags["summary"], "norecover flag(s) set", "{h:#}");
    ok(dir, &["osd", "in", "3"]);
    wait_json(
        dir,
        &["pg", "ls", "--json"],
        "recovery paused by norecover",
        WAIT,
        |_| paused(dir, "norecover"),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(paused(dir, "norecover"), "still paused");
    let s = json(dir, &["status", "--json"]);
    assert!(
        s["pgs"]["states"].get("active+recovering").is_none(),
        "nothing recovers: {s:#}"
    );
    let t = Instant::now();
    ok(dir, &["osd", "unset", "norecover"]);
    wait_clean(dir, "clean after norecover is unset", BACKFILL);
    let recovered = t.elapsed();

    // Purge a dead OSD: out of the map and placement at once, and its
    // PGs heal on the others.
    signal(osd_pid(dir, 3), libc::SIGKILL);
    wait_osd(dir, 3, "down", WAIT, |o| o["up"] == false);
    let t = Instant::now();
    let out = ok(dir, &["osd", "purge", "3"]);
    assert!(out.contains("purged osd.3"), "{out}");
    assert!(osd(dir, 3).is_none());
    wait_clean(dir, "clean after the purge", BACKFILL);
    let purged = t.elapsed();
    let s = json(dir, &["status", "--json"]);
    assert!(
        s["daemons"]
            .as_array()
            .is_some_and(|d| !d.iter().any(|d| d["kind"] == "osd" && d["name"] == "3")),
        "no registry entry: {s:#}"
    );
    eprintln!(
        "norebalance: clean {:.1}s after unset; norecover: clean {:.1}s after unset; \
         purge: clean {:.1}s after it",
        rebalanced.as_secs_f64(),
        recovered.as_secs_f64(),
        purged.as_secs_f64()
    );
}

/// A child process killed (and reaped) on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        signal(self.0.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_failed_drive_is_destroyed_and_replaced_under_the_same_id() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let up = cluster(dir);
    let cluster_name = json(dir, &["status", "--json"])["cluster"]
        .as_str()
        .expect("cluster name")
        .to_string();
    let host = osd(dir, 3).expect("osd.3")["host"]
        .as_str()
        .expect("host")
        .to_string();

    // The drive fails; noout so that nothing moves twice.
    ok(dir, &["osd", "set", "noout"]);
    signal(osd_pid(dir, 3), libc::SIGKILL);
    wait_osd(dir, 3, "down", WAIT, |o| o["up"] == false);
    let out = ok(dir, &["osd", "destroy", "3"]);
    assert!(out.contains("destroyed osd.3"), "{out}");
    assert!(ok(dir, &["osd", "destroy", "3"]).contains("already destroyed"));
    let o = osd(dir, 3).expect("a destroyed OSD stays listed");
    assert_eq!(o["destroyed"], true, "{o:#}");
    assert!(ok(dir, &["osd", "ls"]).contains("destroyed"));
    assert!(ok(dir, &["status"]).contains("destroyed: osd.3"));

    // Its old device may not come back.
    let err = fails(dir, &["osd", "start", "3", "--timeout", "30s"], 1);
    assert!(err.contains("exited at start"), "{err}");
    assert!(err.contains("osd.3 is destroyed"), "{err}");

    // A new file takes its id.
    let new = dir.join("osd.3-new.img");
    let new_s = new.to_string_lossy().to_string();
    let out = ok(
        dir,
        &["osd", "replace", "3", "--device", &new_s, "--size", "256M"],
    );
    assert!(out.contains("is now osd.3"), "{out}");
    let o = osd(dir, 3).expect("osd.3");
    assert_eq!(o["destroyed"], false, "{o:#}");
    refused(
        dir,
        &["osd", "replace", "3", "--device", &new_s],
        1,
        "not destroyed",
    );

    let t = Instant::now();
    let log = std::fs::File::create(dir.join("osd.3-new.log")).expect("log file");
    let child = Command::new(PONTOON)
        .args(["osd", "run", "--device", &new_s, "--etcd", &up.etcd()])
        .args(etcd_flags(dir, "osd"))
        .args(["--cluster-name", &cluster_name, "--host", &host])
        .args(["--lease-ttl", "3s"])
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("run the replacement OSD");
    let _replacement = Guard(child);
    wait_osd(dir, 3, "up and in", WAIT, |o| {
        o["up"] == true && o["in"] == true
    });
    let joined = t.elapsed();
    wait_clean(dir, "backfilled onto the new drive", BACKFILL);
    let backfilled = t.elapsed();
    let df = json(dir, &["df", "--json"]);
    assert!(
        df_used(&df, 3) > 0 && df_used(&df, 3) < u64::MAX,
        "the new drive holds data: {df:#}"
    );
    assert!(
        pgs(dir).iter().any(|p| p["acting"]
            .as_array()
            .is_some_and(|a| a.contains(&Value::from(3)))),
        "osd.3 serves PGs again"
    );
    ok(dir, &["osd", "unset", "noout"]);
    wait_json(dir, &["health", "--json"], "HEALTH_OK", WAIT, |h| {
        h["status"] == "HEALTH_OK"
    });
    eprintln!(
        "replace: the new osd.3 up {:.1}s after start, every PG clean {:.1}s after start",
        joined.as_secs_f64(),
        backfilled.as_secs_f64()
    );
}
