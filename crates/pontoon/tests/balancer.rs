//! The upmap balancer on a real cluster: three OSDs and a pool of 128 PGs
//! holding data, a fourth OSD added (a `pontoon osd run` of its own, as on
//! a real node), and once the cluster is clean the balancer brings every
//! OSD's PG count within 5% of its weight share (`pontoon balancer eval`),
//! a bounded number of replicas per round, while the data reads back
//! exactly (nbdcopy over the NBD gateway). Prints the time taken and the
//! replicas moved.
//!
//! Needs etcd-server and libnbd-bin (nbdcopy).

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const MIB: u64 = 1 << 20;
const DATA: u64 = 192 * MIB;
const PGS: u64 = 128;
/// Longest the balancer may take to even the PG counts out.
const BALANCE_LIMIT: Duration = Duration::from_secs(240);

/// `len` bytes of a pattern no two 8-byte words of which are alike.
fn pattern(len: u64) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|i| pontoon_types::mix64(i ^ 0xba1a).to_le_bytes())
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

fn all_clean(s: &Value, up: u64) -> bool {
    s["osds"]["up"] == up && s["pgs"]["states"]["active+clean"].as_u64() == Some(PGS)
}

/// A value of the cluster.toml `pontoon up` wrote.
fn cluster_toml(dir: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(dir.join("cluster.toml")).expect("cluster.toml");
    let prefix = format!("{key} = \"");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no {key} in cluster.toml: {text}"))
        .to_string()
}

/// An OSD this test runs itself; stopped on drop (also on a panic).
struct ExtraOsd(Child);

impl Drop for ExtraOsd {
    fn drop(&mut self) {
        signal(self.0.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Each OSD's used bytes once stray copies are deleted (`df` shows
/// exactly three copies of the volume and nothing pending).
fn settled_usage(dir: &Path) -> Vec<u64> {
    let df = wait_json(
        dir,
        &["df", "--json"],
        "three copies and no stray ones",
        Duration::from_secs(120),
        |d| {
            d["raw"]["reclaim_pending_objects"] == 0
                && df_volume(d, "v")["raw_used_bytes"] == 3 * DATA
                && (0..4).map(|i| df_used(d, i)).sum::<u64>() == 3 * DATA
        },
    );
    (0..4).map(|i| df_used(&df, i)).collect()
}

fn max_deviation(eval: &Value) -> f64 {
    eval["before"]["max_deviation_pct"]
        .as_f64()
        .unwrap_or(f64::MAX)
}

fn pg_counts(eval: &Value) -> String {
    eval["before"]["osds"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| format!("osd.{}={}", o["osd"], o["pgs"]))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

#[test]
fn an_added_osd_is_balanced_to_within_five_percent_and_the_data_survives() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-balancer-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let port = free_port();
    let nbd = format!("127.0.0.1:{port}");
    let _up = Up::start_sized(&dir, 3, "1G", &["--nbd", &nbd]);

    // Off while the cluster is set up, so that the rounds measured are
    // the ones after the new OSD.
    ok(&dir, &["balancer", "off"]);
    let st = json(&dir, &["balancer", "status", "--json"]);
    assert_eq!(st["active"], false, "{st:#}");
    assert_eq!(st["mode"], "upmap", "{st:#}");
    ok(
        &dir,
        &[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--pgs",
            &PGS.to_string(),
        ],
    );
    ok(&dir, &["volume", "create", "v", "--size", "192M"]);
    wait_status(&dir, "all clean on three OSDs", |s| all_clean(s, 3));
    let data = pattern(DATA);
    let src = dir.join("v.src");
    std::fs::write(&src, &data).expect("write the pattern file");
    let uri = format!("nbd://{nbd}/v");
    nbdcopy(src.to_str().expect("utf-8 path"), &uri);
    eprintln!("{} MiB written after {:?}", DATA / MIB, started.elapsed());

    // A fourth OSD, run as on a new node's drive.
    let log = std::fs::File::create(dir.join("osd.3.out")).expect("osd.3 log");
    let device = dir.join("osd.3.img");
    let child = Command::new(PONTOON)
        .args(["osd", "run", "--etcd"])
        .arg(cluster_toml(&dir, "etcd"))
        .args(["--cluster-name", &cluster_toml(&dir, "cluster_name")])
        .arg("--device")
        .arg(&device)
        .args(["--size", "1G", "--id", "3", "--shards", "1"])
        .args(["--host", &cluster_toml(&dir, "host")])
        .args(["--lease-ttl", "3s", "--metrics", "127.0.0.1:0"])
        .args(etcd_flags(&dir, "osd"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("run the fourth OSD");
    let osd3 = ExtraOsd(child);
    std::fs::write(dir.join("run/osd.3.pid"), osd3.0.id().to_string()).expect("pid file");
    let added = Instant::now();
    wait_json(
        &dir,
        &["status", "--json"],
        "all clean on four OSDs",
        Duration::from_secs(180),
        |s| all_clean(s, 4),
    );
    let backfill = added.elapsed();
    let eval = json(&dir, &["balancer", "eval", "--json"]);
    eprintln!(
        "osd.3 added and backfilled in {backfill:?}: {} (max deviation {:.1}%); \
         the balancer would move {} replicas in {} rounds of at most {} to reach {:.1}%",
        pg_counts(&eval),
        max_deviation(&eval),
        eval["moves"],
        eval["rounds"],
        eval["round_budget"],
        eval["after"]["max_deviation_pct"]
            .as_f64()
            .unwrap_or(f64::MAX),
    );
    assert!(
        eval["after"]["max_deviation_pct"]
            .as_f64()
            .unwrap_or(f64::MAX)
            <= 5.0,
        "{eval:#}"
    );
    // Placement is deterministic: straw2 alone leaves this pool 8.3% off.
    assert!(max_deviation(&eval) > 5.0, "nothing to balance: {eval:#}");
    let budget = eval["round_budget"].as_u64().expect("round budget");
    assert_eq!(budget, 3 * PGS / 20, "5% of the PG replicas per round");

    let used_before = settled_usage(&dir);
    let st = json(&dir, &["balancer", "status", "--json"]);
    assert!(
        st["active"] == false && st["upmaps"] == 0,
        "the balancer acted while off: {st:#}"
    );

    // The balancer, a round every 2 s, each moving at most 1% of the PG
    // replicas (3 of 384), so that it takes several rounds.
    let on = Instant::now();
    ok(
        &dir,
        &[
            "balancer",
            "on",
            "--interval",
            "2s",
            "--max-misplaced",
            "0.01",
        ],
    );
    let st = json(&dir, &["balancer", "status", "--json"]);
    assert_eq!(st["active"], true, "{st:#}");
    let budget = st["round_budget"].as_u64().expect("round budget");
    assert_eq!(budget, 3 * PGS / 100, "1% of the PG replicas per round");
    let mut rounds_seen = Vec::new();
    let deadline = on + BALANCE_LIMIT;
    let balanced = loop {
        let st = json(&dir, &["balancer", "status", "--json"]);
        let last = &st["last"];
        if last["result"] == "moved" {
            let moved = last["moved"].as_u64().unwrap_or(u64::MAX);
            assert!(moved <= budget, "a round moved {moved} > {budget}: {st:#}");
            let stamp = last["last_run_unix"].as_u64().unwrap_or(0);
            if !rounds_seen.contains(&(stamp, moved)) {
                rounds_seen.push((stamp, moved));
            }
        }
        let s = json(&dir, &["status", "--json"]);
        let e = json(&dir, &["balancer", "eval", "--json"]);
        // A round that found nothing to move after this manager moved
        // some ran on a clean cluster after the moves.
        let done = last["result"] == "balanced" && last["moved_total"].as_u64().unwrap_or(0) > 0;
        if done && all_clean(&s, 4) && max_deviation(&e) <= 5.0 {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "not balanced within {BALANCE_LIMIT:?}: {} (max {:.1}%); balancer: {st:#}",
            pg_counts(&e),
            max_deviation(&e)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let took = on.elapsed();
    assert!(
        rounds_seen.len() >= 2,
        "one round moved everything: {rounds_seen:?}"
    );
    let st = json(&dir, &["balancer", "status", "--json"]);
    let moved = st["last"]["moved_total"].as_u64().unwrap_or(0);
    eprintln!(
        "balanced in {took:?}: {} (max deviation {:.1}%, stddev {:.2} PGs); \
         {moved} PG replicas moved, {} upmap exceptions; rounds seen (unix, moved): {rounds_seen:?}",
        pg_counts(&balanced),
        max_deviation(&balanced),
        balanced["before"]["stddev"].as_f64().unwrap_or(0.0),
        st["upmaps"],
    );
    for o in balanced["before"]["osds"].as_array().expect("osds") {
        let (pgs, target) = (
            o["pgs"].as_f64().unwrap_or(0.0),
            o["target"].as_f64().unwrap_or(0.0),
        );
        assert!(
            (pgs - target).abs() <= 0.05 * target,
            "osd.{} holds {pgs} PG replicas for a share of {target:.1}: {balanced:#}",
            o["osd"]
        );
    }
    assert_eq!(
        st["upmaps"].as_u64().unwrap_or(0) > 0,
        moved > 0,
        "moves are upmap exceptions: {st:#}"
    );
    // `pg ls` shows each exception on its PG, and the acting set follows it.
    let pgs = json(&dir, &["pg", "ls", "--json"]);
    let listed: Vec<&Value> = pgs
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.get("upmap").is_some())
        .collect();
    assert_eq!(
        listed
            .iter()
            .map(|p| p["upmap"].as_array().unwrap().len() as u64)
            .sum::<u64>(),
        st["upmaps"].as_u64().unwrap_or(0),
        "{pgs:#}"
    );
    for p in &listed {
        for pair in p["upmap"].as_array().unwrap() {
            let acting = p["acting"].as_array().unwrap();
            assert!(
                acting.contains(&pair[1]) && !acting.contains(&pair[0]),
                "{p:#}"
            );
        }
    }

    let used_after = settled_usage(&dir);
    let moved_bytes: u64 = used_before
        .iter()
        .zip(&used_after)
        .map(|(b, a)| a.saturating_sub(*b))
        .sum();
    eprintln!(
        "data moved by the balancer: {:.1} MiB (used per OSD before {:?} MiB, after {:?} MiB)",
        moved_bytes as f64 / MIB as f64,
        used_before.iter().map(|b| b / MIB).collect::<Vec<_>>(),
        used_after.iter().map(|b| b / MIB).collect::<Vec<_>>(),
    );

    // The data moved intact.
    let back = dir.join("v.back");
    nbdcopy(&uri, back.to_str().expect("utf-8 path"));
    let got = std::fs::read(&back).expect("read the copy");
    assert!(got == data, "the volume does not read back as written");

    // Off again: nothing more moves, the exceptions stay.
    ok(&dir, &["balancer", "off"]);
    let st = json(&dir, &["balancer", "status", "--json"]);
    assert_eq!(st["active"], false, "{st:#}");
    drop(osd3);
    eprintln!("done after {:?}", started.elapsed());
}
