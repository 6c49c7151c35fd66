//! The capacity history end to end, on a three-OSD `pontoon up` cluster
//! whose manager samples every second:
//! - written at a steady rate, the history shows the used bytes rising
//!   point by point, and the forecast's days until full agree with the
//!   rate the test wrote at (room / rate lies within the forecast's range);
//! - the history survives the manager: `up`'s manager is frozen (SIGSTOP
//!   of `up`), the standby `pontoon mgr` that `up` runs takes over, loads
//!   the history and goes on with it (the cluster's counters keep rising);
//!   that manager is then killed (SIGKILL) and `up`'s, woken, takes over
//!   again — no point is lost either way;
//! - the manager's memory with 1,000 volumes in the history (VmRSS of the
//!   standby manager process while it leads, printed);
//! - `pontoon osd endurance` shows each OSD's writes, write
//!   amplification, DWPD against `--rated-dwpd` and "not NVMe".
//!
//! Needs etcd (Debian's etcd-server).

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const MIB: u64 = 1 << 20;
/// Written per step, logical (3 copies).
const STEP: u64 = 2 * MIB;
/// Steps, one a second.
const STEPS: u64 = 24;
/// Volumes in the memory measurement.
const VOLUMES: usize = 1000;

/// `pontoon df --history --json` (optionally with more flags).
fn history(dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["df", "--history", "--json"];
    args.extend(extra);
    json(dir, &args)
}

/// Column `name` of a series in the history JSON, as (time, value).
fn column(series: &Value, name: &str) -> Vec<(u64, f64)> {
    let metrics = series["metrics"].as_array().expect("metrics");
    let i = metrics
        .iter()
        .position(|m| m == name)
        .unwrap_or_else(|| panic!("no metric {name}"));
    series["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            (
                p[0].as_u64().expect("time"),
                p[i].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// VmRSS of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Wakes a frozen `up`, also on a panic.
struct Guard {
    up: u32,
}

impl Drop for Guard {
    fn drop(&mut self) {
        signal(self.up, libc::SIGCONT);
    }
}

/// Runs `pontoon ARGS --cluster DIR` with its output in a file (it may be
/// larger than a pipe holds), until `pred` holds of its JSON (60 s at most).
fn wait_big_json(dir: &Path, args: &[&str], what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let out = dir.join("big.json");
    loop {
        let mut child = Command::new(PONTOON)
            .args(args)
            .arg("--cluster")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run pontoon");
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if started.elapsed() > COMMAND_TIMEOUT {
                let _ = child.kill();
                panic!("pontoon {args:?} took longer than {COMMAND_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "pontoon {args:?}: {status}");
        let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("JSON");
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{args:?} did not show {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until the cluster's series has a point at or after `t`.
fn wait_point_after(dir: &Path, t: u64, what: &str) -> Value {
    wait_json(
        dir,
        &["df", "--history", "--json", "--since", "10m"],
        what,
        Duration::from_secs(40),
        |h| {
            column(&h["cluster"], "used_bytes")
                .last()
                .is_some_and(|p| p.0 >= t)
        },
    )
}

#[test]
fn history_forecast_and_failover_on_a_cluster_sampled_every_second() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-history-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let mut up = Up::start_sized(
        &dir,
        3,
        "256M",
        &["--history-interval", "1s", "--rated-dwpd", "3"],
    );
    ok(
        &dir,
        &["pool", "create", "rbd", "--size", "3", "--pgs", "16"],
    );

    // Steady writes: 2 MiB into a new volume each second.
    let before = json(&dir, &["df", "--json"]);
    let used0 = before["raw"]["used_bytes"].as_u64().unwrap();
    let t0 = Instant::now();
    for k in 0..STEPS {
        let name = format!("w{k}");
        ok(
            &dir,
            &["volume", "create", &name, "--pool", "rbd", "--size", "8M"],
        );
        ok(
            &dir,
            &[
                "bench", "--volume", &name, "--fill", "--span", "2M", "--bs", "1M", "--qd", "1",
            ],
        );
        let next = t0 + Duration::from_secs(k + 1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let secs = t0.elapsed().as_secs_f64();
    let raw_rate = (STEPS * STEP * 3) as f64 / secs; // bytes/s, every copy
    // Let the OSDs report and the manager sample the last step.
    let want = used0 + STEPS * STEP * 3;
    wait_json(&dir, &["df", "--json"], "every write", WAIT, |d| {
        d["raw"]["used_bytes"].as_u64() >= Some(want)
    });
    std::thread::sleep(Duration::from_secs(3));
    let h = history(&dir, &[]);
    let used = column(&h["cluster"], "used_bytes");
    assert!(used.len() >= STEPS as usize, "{} points", used.len());
    assert!(
        used.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0),
        "used bytes must rise: {used:?}"
    );
    let last = used.last().unwrap().1;
    assert!(last >= want as f64, "last point {last} < {want}");
    let stored = column(&h["pools"][0], "stored_bytes");
    assert_eq!(h["pools"][0]["name"], "rbd");
    assert!(stored.last().unwrap().1 >= (STEPS * STEP) as f64);

    // The forecast against the rate written.
    let f = &h["forecast"]["cluster"];
    let rate = f["trend"]["rate_per_day"].as_f64().unwrap() / 86_400.0;
    let room = f["full_room_bytes"].as_f64().unwrap();
    let expect_days = room / raw_rate / 86_400.0;
    let until = &f["until_full"];
    let (days, earliest, latest) = (
        until["days"].as_f64().unwrap(),
        until["earliest_days"].as_f64().unwrap(),
        until["latest_days"].as_f64(),
    );
    println!(
        "written at {:.2} MiB/s raw; forecast rate {:.2} MiB/s ({:.2}-{:.2}); full in {:.1} s expected, forecast {:.1} s ({:.1}-{})",
        raw_rate / MIB as f64,
        rate / MIB as f64,
        f["trend"]["rate_low_per_day"].as_f64().unwrap() / 86_400.0 / MIB as f64,
        f["trend"]["rate_high_per_day"].as_f64().unwrap() / 86_400.0 / MIB as f64,
        expect_days * 86_400.0,
        days * 86_400.0,
        earliest * 86_400.0,
        latest.map_or("never".into(), |l| format!("{:.1}", l * 86_400.0)),
    );
    assert!(
        (rate - raw_rate).abs() <= 0.25 * raw_rate,
        "forecast rate {rate} vs written {raw_rate}"
    );
    // room / rate within the range (10% leeway for the clock of the steps).
    assert!(earliest <= expect_days * 1.1, "{until}");
    assert!(latest.is_none_or(|l| l >= expect_days / 1.1), "{until}");
    let pool = &h["forecast"]["pools"][0];
    assert_eq!(pool["name"], "rbd");
    assert!(pool["until_full"]["filling"].as_bool().unwrap());

    // The text form names the series and the forecast.
    let text = ok(&dir, &["df", "--history"]);
    assert!(
        text.contains("CAPACITY HISTORY") && text.contains("pool rbd"),
        "{text}"
    );
    assert!(
        text.contains("FORECAST") && text.contains("cluster (raw)"),
        "{text}"
    );
    let one = history(&dir, &["--pool", "rbd", "--since", "30s", "--osds"]);
    assert_eq!(one["pools"].as_array().unwrap().len(), 1);
    assert_eq!(one["osds"].as_array().unwrap().len(), 3);
    assert!(column(&one["cluster"], "used_bytes").len() <= 32);
    fails(&dir, &["df", "--history", "--pool", "nope"], 1);

    // Endurance: writes seen, amplification, DWPD against the rating.
    let e = json(&dir, &["osd", "endurance", "--json"]);
    let e = e.as_array().expect("a list");
    assert_eq!(e.len(), 3);
    for o in e {
        assert_eq!(o["device_kind"], "not NVMe");
        assert!(
            o["device_written_bytes"].as_u64().unwrap() >= STEPS * STEP,
            "{o}"
        );
        let wa = o["write_amplification"].as_f64().unwrap();
        assert!((1.0..4.0).contains(&wa), "{o}");
        assert!(o["dwpd"].as_f64().unwrap() > 0.0);
        assert_eq!(o["rated"]["rated_dwpd"], 3.0);
        assert!(o["rated"]["years_left"].as_f64().unwrap() > 0.0);
    }
    ok(
        &dir,
        &["osd", "set-rated-dwpd", "1", "1", "--capacity", "1T"],
    );
    let text = ok(&dir, &["osd", "endurance"]);
    assert!(
        text.contains("not NVMe") && text.contains("osd.2"),
        "{text}"
    );

    // Failover: `up` runs its manager in its own process and a standby
    // `pontoon mgr` beside it. Freeze `up`: the standby takes over.
    let standby = read_pid(&dir.join("run/mgr.pid")).expect("the standby manager's pid");
    assert!(alive(standby));
    let guard = Guard { up: up.pid() };
    let points_before = used.len();
    let frozen = unix_now();
    signal(up.pid(), libc::SIGSTOP);
    // The leader lease (5 s) expires; the standby takes over and samples.
    let h = wait_point_after(&dir, frozen + 8, "points from the standby manager");
    let mgr_log = std::fs::read_to_string(dir.join("log/mgr.log")).unwrap_or_default();
    assert!(mgr_log.contains("capacity history loaded"), "{mgr_log}");
    let all = history(&dir, &[]);
    let used2 = column(&all["cluster"], "used_bytes");
    assert!(
        used2.len() > points_before,
        "{} <= {points_before}",
        used2.len()
    );
    assert!(used2.windows(2).all(|w| w[0].0 < w[1].0));
    // Everything before the takeover is still there.
    for p in &used {
        assert!(used2.iter().any(|q| q.0 == p.0 && q.1 == p.1), "lost {p:?}");
    }
    let gap = used2
        .windows(2)
        .filter(|w| w[0].0 <= frozen + 8)
        .map(|w| w[1].0 - w[0].0)
        .max()
        .unwrap_or(0);
    println!("failover: the history's largest gap is {gap} s (lease TTL 5 s)");
    let written = column(&h["cluster"], "written_bytes_total");
    assert!(
        written.windows(2).all(|w| w[0].1 <= w[1].1),
        "counters fell: {written:?}"
    );

    // Memory of the (now active) standby manager with 1,000 volumes.
    let rss0 = rss_kib(standby);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let t_vol = Instant::now();
    let etcd = up.etcd();
    rt.block_on(async {
        let auth = etcd_auth(&dir, "mgr");
        let store =
            pontoon_cluster::MapStore::connect_with(std::slice::from_ref(&etcd), "pontoon", &auth)
                .await
                .expect("connect to etcd");
        for i in 0..VOLUMES {
            store
                .create_volume(&format!("m{i:04}"), "rbd", 4 * MIB)
                .await
                .expect("create a volume");
        }
    });
    let created = t_vol.elapsed();
    let v = wait_big_json(
        &dir,
        &["df", "--history", "--json", "--volumes"],
        "every volume in the history",
        |v| {
            v["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| !s["points"].as_array().unwrap().is_empty())
                .count()
                >= VOLUMES
        },
    );
    let rounds = Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let rss1 = rss_kib(standby);
    println!(
        "manager RSS: {rss0} KiB with {STEPS} volumes, {rss1} KiB with {} volumes in the history after {:.0} s more of sampling every second ({VOLUMES} created in {:.1} s)",
        v["volumes"].as_array().unwrap().len(),
        rounds.elapsed().as_secs_f64(),
        created.as_secs_f64()
    );
    assert!(rss1 > 0 && rss1 < 200 * 1024, "{rss1} KiB");

    // The standby dies; `up`'s manager, woken, takes over again.
    signal(standby, libc::SIGKILL);
    let killed = unix_now();
    signal(up.pid(), libc::SIGCONT);
    let h = wait_point_after(&dir, killed + 8, "points from up's manager again");
    let used3 = column(&history(&dir, &[])["cluster"], "used_bytes");
    assert!(used3.len() > used2.len());
    for p in &used2 {
        assert!(used3.iter().any(|q| q.0 == p.0), "lost {p:?}");
    }
    let written3 = column(&h["cluster"], "written_bytes_total");
    assert!(written3.windows(2).all(|w| w[0].1 <= w[1].1));
    drop(guard);
    let status = up.stop();
    assert!(status.success(), "up exited with {status}");
    println!("history test took {:.0} s", started.elapsed().as_secs_f64());
}
