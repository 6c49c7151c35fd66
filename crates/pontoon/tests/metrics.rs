//! Prometheus metrics end to end: a `pontoon up` cluster (3 OSDs, the
//! manager, an NBD and an NVMe/TCP gateway) under a short load; every
//! daemon in the registry (`pontoon status --json`) serves `/metrics` that
//! `promtool check metrics` accepts, and a real Prometheus server (Debian's
//! `prometheus`, started and stopped here) scrapes them all and answers,
//! through its HTTP API, with series for every OSD and pool whose counts
//! match the load.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Up, free_port, http_get, json, ok, signal};
use serde_json::Value;

/// Percent-encodes a query-string value.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server started by the test, stopped (by pid) on drop.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Prometheus {
    fn start(dir: &Path, targets: &[String]) -> Prometheus {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: pontoon\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("prometheus log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run prometheus (Debian package prometheus; scripts/deps.sh installs it)");
        Prometheus { child, addr }
    }

    /// The result vector of an instant query (empty until it answers).
    fn query(&self, q: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", encode(q));
        let Some((200, body)) = http_get(&self.addr, &path) else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The value of a sample of a query result.
    fn value(sample: &Value) -> f64 {
        sample["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN)
    }

    /// The single value of a query that returns one sample.
    fn scalar(&self, q: &str) -> f64 {
        let r = self.query(q);
        assert_eq!(r.len(), 1, "{q}: {r:?}");
        Self::value(&r[0])
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `promtool check metrics` on `text`; its output when it fails.
fn promtool_check(text: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool (Debian package prometheus)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = child.wait_with_output().expect("promtool output");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[test]
fn every_daemon_is_scraped_by_prometheus() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-metrics-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let (nbd, nvmf) = (free_port(), free_port());
    let nbd_addr = format!("127.0.0.1:{nbd}");
    let nvmf_addr = format!("127.0.0.1:{}", if nvmf == nbd { nbd + 1 } else { nvmf });
    let _up = Up::start_sized(&dir, 3, "512M", &["--nbd", &nbd_addr, "--nvmf", &nvmf_addr]);
    eprintln!("cluster up after {:?}", started.elapsed());
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "16"]);
    ok(&dir, &["pool", "create", "q", "--size", "2", "--pgs", "8"]);
    ok(
        &dir,
        &["volume", "create", "v", "--size", "128M", "--pool", "p"],
    );

    // The load: 4 MiB written exactly once, then 2 s of random 70/30.
    ok(
        &dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "4M", "--qd", "8", "--json",
        ],
    );
    let load = json(
        &dir,
        &[
            "bench", "--volume", "v", "--rw", "randrw", "--time", "2s", "--json",
        ],
    );
    let bench_ops = load["iops"].as_f64().unwrap() * load["seconds"].as_f64().unwrap();
    eprintln!(
        "load done after {:?}: randrw {bench_ops:.0} ops",
        started.elapsed()
    );
    assert!(bench_ops > 100.0, "{load}");

    // Every daemon is in the registry with its metrics address.
    let status = common::wait_status(&dir, "every daemon registered", |s| {
        let kinds: Vec<&str> = s["daemons"]
            .as_array()
            .map(|a| a.iter().filter_map(|d| d["kind"].as_str()).collect())
            .unwrap_or_default();
        ["osd", "mgr", "nbd", "nvmf"]
            .iter()
            .all(|k| kinds.contains(k))
            && kinds.iter().filter(|k| **k == "osd").count() == 3
            // `pontoon up` runs an active and a standby manager.
            && kinds.iter().filter(|k| **k == "mgr").count() == 2
    });
    let daemons = status["daemons"].as_array().unwrap().clone();
    let text = ok(&dir, &["status"]);
    assert!(
        text.contains("daemons: osd 3, mgr 2 (1 active), nbd 1, nvmf 1, vhost 0"),
        "{text}"
    );
    let targets: Vec<String> = daemons
        .iter()
        .map(|d| {
            assert!(d["pid"].as_u64().unwrap() > 0, "{d}");
            assert!(d["unix_ms"].as_u64().unwrap() > 0, "{d}");
            d["metrics"]
                .as_str()
                .unwrap_or_else(|| panic!("{d}"))
                .to_string()
        })
        .collect();

    // promtool accepts every endpoint.
    for (d, addr) in daemons.iter().zip(&targets) {
        let (code, body) =
            http_get(addr, "/metrics").unwrap_or_else(|| panic!("no answer from {addr} ({d})"));
        assert_eq!(code, 200, "{d}: {body}");
        assert!(body.contains("process_cpu_seconds_total"), "{d}: {body}");
        if let Err(why) = promtool_check(&body) {
            panic!("promtool check metrics failed for {d}: {why}\n{body}");
        }
    }
    eprintln!("promtool passed after {:?}", started.elapsed());

    // A real Prometheus scrapes them all.
    let prom = Prometheus::start(&dir, &targets);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = prom.query("up");
        let healthy = up.iter().filter(|s| Prometheus::value(s) == 1.0).count();
        if healthy == targets.len() && up.len() == targets.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape every target within 20 s: {up:?}; log: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("every target up after {:?}", started.elapsed());

    // Every OSD served client operations, and the counts add up.
    for osd in 0..3 {
        let ops = prom.scalar(&format!("sum(pontoon_osd_ops_total{{osd=\"{osd}\"}})"));
        assert!(ops > 0.0, "osd.{osd} counted no operations");
        let lat = prom.scalar(&format!(
            "sum(pontoon_osd_op_duration_seconds_count{{osd=\"{osd}\"}})"
        ));
        assert_eq!(lat, ops, "osd.{osd}: one latency per operation");
        for series in [
            "pontoon_osd_device_size_bytes",
            "pontoon_osd_journal_fill_ratio",
            "pontoon_osd_objects",
            "pontoon_osd_user_written_bytes_total",
            "pontoon_osd_device_written_bytes_total",
        ] {
            prom.scalar(&format!("{series}{{osd=\"{osd}\"}}"));
        }
        let primary_pgs = prom.scalar(&format!("sum(pontoon_osd_primary_pgs{{osd=\"{osd}\"}})"));
        assert!(primary_pgs > 0.0, "osd.{osd} leads no PG");
        // The manager's view of the same OSD.
        assert_eq!(
            prom.scalar(&format!("pontoon_cluster_osd_up{{osd=\"{osd}\"}}")),
            1.0
        );
        prom.scalar(&format!("pontoon_cluster_osd_used_bytes{{osd=\"{osd}\"}}"));
    }
    let ops = prom.scalar("sum(pontoon_osd_ops_total)");
    let fill_ops = 1024.0;
    assert!(
        ops >= 0.99 * (bench_ops + fill_ops),
        "the OSDs counted {ops} operations, the load did {bench_ops} + {fill_ops}"
    );
    let written = prom.scalar("sum(pontoon_osd_bytes_total{op=\"write\"})");
    assert!(written >= 4.0 * 1048576.0, "{written} bytes written");
    // Bytes and ops of one scrape, in one query (two queries may see two
    // scrapes while the counters still move); ops count failed attempts
    // (answered with an error and retried), bytes only the served ones.
    let per_write = prom.scalar(
        "sum(pontoon_osd_bytes_total{op=\"write\"}) / (sum(pontoon_osd_ops_total{op=\"write\"}) \
         - sum(pontoon_osd_op_errors_total{op=\"write\"}))",
    );
    assert_eq!(per_write, 4096.0, "every write was 4 KiB");
    assert!(prom.scalar("sum(pontoon_osd_ops_total{op=\"read\"})") > 0.0);
    // Size-3 pool: every write is in three stores.
    let user = prom.scalar("sum(pontoon_osd_user_written_bytes_total)");
    assert!(
        user >= 3.0 * written * 0.99,
        "stores wrote {user}, clients {written}"
    );
    let device = prom.scalar("sum(pontoon_osd_device_written_bytes_total)");
    assert!(device >= user, "device {device} < user {user}");

    // Capacity series for every pool, and the volume; health; PGs.
    for pool in ["p", "q"] {
        for series in [
            "pontoon_pool_stored_bytes",
            "pontoon_pool_max_avail_bytes",
            "pontoon_pool_raw_used_bytes",
        ] {
            prom.scalar(&format!("{series}{{pool=\"{pool}\"}}"));
        }
    }
    assert!(prom.scalar("pontoon_pool_max_avail_bytes{pool=\"p\"}") > 0.0);
    assert_eq!(
        prom.scalar("pontoon_volume_provisioned_bytes{volume=\"v\"}"),
        128.0 * 1048576.0
    );
    assert_eq!(prom.scalar("pontoon_cluster_pgs"), 24.0);
    assert!(prom.scalar("pontoon_health_status") <= 2.0);
    assert_eq!(prom.scalar("sum(pontoon_mgr_active)"), 1.0);
    assert_eq!(prom.scalar("pontoon_daemons{kind=\"osd\"}"), 3.0);
    // The gateways.
    for gw in ["nbd", "nvmf"] {
        prom.scalar(&format!("pontoon_gateway_connections{{gateway=\"{gw}\"}}"));
        prom.scalar(&format!(
            "pontoon_gateway_volume_opens_total{{gateway=\"{gw}\"}}"
        ));
    }
    drop(prom);
    eprintln!("done after {:?}", started.elapsed());
}
