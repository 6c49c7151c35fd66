//! Data safety with real processes: a local cluster (`pontoon up`: etcd, a
//! manager, three OSD processes), writers going through the client library,
//! one OSD killed with SIGKILL under load, restarted, recovered; then
//! another killed. Every acknowledged write must read back exactly at each
//! step, and the cluster must come back to active+clean.
//!
//! Needs the `pontoon` binary built beside the test (the suite's script
//! builds it first) and Debian's etcd-server.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_client::{Client, MapFeed, Volume};
use pontoon_cluster::{MapStore, PgState};
use pontoon_net::RpcConn;
use pontoon_proto::{Message, Role, Status, Target};
use pontoon_types::OsdId;

const REGION_BLOCKS: u64 = 16 * 1024; // 64 MiB
const WRITERS: u64 = 8;

fn pontoon_bin() -> PathBuf {
    // target/<profile>/deps/<test> -> target/<profile>/pontoon
    let exe = std::env::current_exe().expect("test path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("pontoon");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build --workspace --bins, as scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// `pontoon up` in the background, killed (with its children) on drop.
struct Cluster {
    dir: tempfile::TempDir,
    up: Child,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = std::fs::File::create(dir.path().join("up.log")).expect("log");
        let up = Command::new(pontoon_bin())
            .args(["up", "--dir"])
            .arg(dir.path())
            .args([
                "--osds",
                "3",
                "--osd-size",
                "512M",
                "--shards",
                "1",
                "--lease-ttl",
                "3s",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn pontoon up");
        let c = Cluster { dir, up };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !c.dir.path().join("cluster.toml").exists() {
            assert!(
                Instant::now() < deadline,
                "pontoon up did not get ready: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("up.log")).unwrap_or_default()
    }

    fn setting(&self, key: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("cluster.toml")).expect("cluster.toml");
        text.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("{key} missing from cluster.toml:\n{text}"))
    }

    fn cli(&self, args: &[&str]) {
        let out = Command::new(pontoon_bin())
            .args(args)
            .arg("--cluster")
            .arg(self.dir.path())
            .output()
            .expect("run pontoon");
        assert!(
            out.status.success(),
            "pontoon {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn osd_pid(&self, id: u32) -> i32 {
        let p = self.dir.path().join(format!("run/osd.{id}.pid"));
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .parse()
            .expect("pid")
    }

    fn kill9_osd(&self, id: u32) {
        let pid = self.osd_pid(id);
        // SAFETY: plain kill(2) on a pid this test's cluster started.
        let r = unsafe { libc::kill(pid, libc::SIGKILL) };
        assert_eq!(r, 0, "kill -9 osd.{id} (pid {pid})");
    }

    /// Waits until every PG's primary reports it active+clean in its
    /// current interval.
    fn wait_clean(&self, what: &str) {
        let endpoints = vec![self.setting("etcd")];
        let name = self.setting("cluster_name");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = MapStore::connect(&endpoints, &name).await.expect("etcd");
            let deadline = Instant::now() + Duration::from_secs(90);
            loop {
                let map = store.load().await.expect("map");
                let reports = store.reports().await.expect("reports");
                let mut states: BTreeMap<String, usize> = BTreeMap::new();
                let mut clean = 0;
                for (pg, rec) in &map.pgs {
                    let st = rec.primary().and_then(|p| {
                        reports
                            .iter()
                            .find(|r| r.osd == p)
                            .and_then(|r| {
                                r.pgs
                                    .iter()
                                    .find(|x| x.pg == *pg && x.interval == rec.interval)
                            })
                            .map(|x| x.state)
                    });
                    if st == Some(PgState::ActiveClean) && rec.acting.len() == 3 {
                        clean += 1;
                    }
                    *states.entry(format!("{st:?}")).or_default() += 1;
                }
                if !map.pgs.is_empty() && clean == map.pgs.len() {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{what}: not clean after 90 s: {states:?}\n{}",
                    self.log()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.up.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.up.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.up.kill();
        let _ = self.up.wait();
    }
}

fn block(seed: u64) -> Vec<u8> {
    (0..512u64)
        .flat_map(|i| pontoon_types::mix64(seed.wrapping_mul(512) + i).to_le_bytes())
        .collect()
}

/// What each block should hold: the last acknowledged seed, plus seeds of
/// writes that failed (either may be there).
#[derive(Default)]
struct Model {
    acked: BTreeMap<u64, u64>,
    uncertain: BTreeMap<u64, Vec<u64>>,
    acks: u64,
    failures: u64,
    last_ack: Option<Instant>,
    /// Longest time without any acknowledged write.
    longest_gap: Duration,
}

/// Writers on disjoint blocks for `run_for`; returns the model.
async fn write_load(vol: &Volume, run_for: Duration, model: Rc<RefCell<Model>>, round: u64) {
    let stop = Instant::now() + run_for;
    let tasks = (0..WRITERS).map(|w| {
        let (vol, model) = (vol.clone(), model.clone());
        async move {
            let mut n = 0u64;
            while Instant::now() < stop {
                n += 1;
                let seed = (round << 48) | (w << 40) | n;
                let b = (pontoon_types::mix64(seed) % (REGION_BLOCKS / WRITERS)) * WRITERS + w;
                match vol.write_at(b * 4096, &block(seed)).await {
                    Ok(()) => {
                        let mut m = model.borrow_mut();
                        m.acked.insert(b, seed);
                        m.uncertain.remove(&b);
                        m.acks += 1;
                        let now = Instant::now();
                        if let Some(t) = m.last_ack {
                            m.longest_gap = m.longest_gap.max(now - t);
                        }
                        m.last_ack = Some(now);
                    }
                    Err(_) => {
                        let mut m = model.borrow_mut();
                        m.uncertain.entry(b).or_default().push(seed);
                        m.failures += 1;
                    }
                }
            }
        }
    });
    futures::future::join_all(tasks).await;
}

async fn verify(vol: &Volume, model: &Model, what: &str) {
    let data = vol
        .read_at(0, REGION_BLOCKS * 4096)
        .await
        .expect("read back");
    let mut bad = Vec::new();
    for b in 0..REGION_BLOCKS {
        let got = &data[(b * 4096) as usize..((b + 1) * 4096) as usize];
        let mut ok = match model.acked.get(&b) {
            Some(seed) => got == block(*seed).as_slice(),
            None => got.iter().all(|x| *x == 0),
        };
        if !ok && let Some(maybe) = model.uncertain.get(&b) {
            ok = maybe.iter().any(|s| got == block(*s).as_slice());
        }
        if !ok {
            bad.push(b);
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} blocks differ from acknowledged writes, e.g. {:?}",
        bad.len(),
        &bad[..bad.len().min(8)]
    );
}

/// Every acting member of every object of the volume holds the same version
/// and the same bytes (asked directly, as a peer OSD would).
async fn replicas_identical(feed: &std::sync::Arc<MapFeed>, volume: &str) {
    let map = feed.current();
    let v = map.volume_by_name(volume).expect("volume");
    for index in 0..(REGION_BLOCKS * 4096).div_ceil(v.object_size) {
        let oid = pontoon_types::ObjectId::new(v.id.0, index);
        let pg = map.pg_of_object(&oid).expect("pg");
        let rec = &map.pgs[&pg];
        assert_eq!(rec.acting.len(), 3, "{pg} is clean with 3 members");
        let mut copies = Vec::new();
        for osd in &rec.acting {
            let addr = map.addr_of(*osd, pg).expect("address");
            let conn = RpcConn::connect(addr, Role::Osd(OsdId(9999)), Duration::from_secs(5))
                .await
                .expect("connect to an OSD");
            let t = Target {
                pg,
                epoch: rec.interval,
                oid,
            };
            let (reply, data) = conn
                .call(&Message::Pull(t), None, Duration::from_secs(10))
                .await
                .expect("pull");
            let Message::Reply(r) = reply else {
                panic!("pull answered with {reply:?}")
            };
            assert_eq!(r.status, Status::Ok, "{osd} {oid}: {}", r.message);
            copies.push((
                *osd,
                r.version,
                r.ranges,
                data.map(|d| d.to_vec()).unwrap_or_default(),
            ));
        }
        for c in &copies[1..] {
            assert!(
                (c.1, &c.2, &c.3) == (copies[0].1, &copies[0].2, &copies[0].3),
                "{oid}: {} holds {} but {} holds {}",
                c.0,
                c.1,
                copies[0].0,
                copies[0].1
            );
        }
    }
}

#[test]
fn acknowledged_writes_survive_sigkill_of_osds_under_load() {
    let c = Cluster::start();
    c.cli(&[
        "pool",
        "create",
        "p",
        "--size",
        "3",
        "--min-size",
        "2",
        "--pgs",
        "16",
    ]);
    c.cli(&["volume", "create", "v", "--size", "256M"]);
    c.wait_clean("new pool");
    let feed =
        MapFeed::connect(&[c.setting("etcd")], &c.setting("cluster_name")).expect("map feed");
    let rt = compio::runtime::Runtime::new().unwrap();
    let model = Rc::new(RefCell::new(Model::default()));
    let client = Client::new(feed.clone());
    let vol = client.open("v").expect("open volume");

    // Load, kill -9 osd.1 in the middle, keep writing through the failover.
    rt.block_on(write_load(&vol, Duration::from_secs(2), model.clone(), 1));
    c.kill9_osd(1);
    rt.block_on(write_load(&vol, Duration::from_secs(8), model.clone(), 2));
    rt.block_on(verify(&vol, &model.borrow(), "after kill -9 of osd.1"));
    let gap = model.borrow().longest_gap;
    assert!(
        gap < Duration::from_secs(10),
        "writes stalled for {gap:?} after the kill"
    );

    // Bring it back: recovery must make it complete again.
    c.cli(&["osd", "start", "1"]);
    rt.block_on(write_load(&vol, Duration::from_secs(3), model.clone(), 3));
    c.wait_clean("after osd.1 returned");
    rt.block_on(verify(&vol, &model.borrow(), "after recovery"));
    rt.block_on(replicas_identical(&feed, "v"));

    // Now lose another OSD: what osd.1 recovered must be there.
    c.kill9_osd(0);
    rt.block_on(write_load(&vol, Duration::from_secs(2), model.clone(), 4));
    rt.block_on(verify(&vol, &model.borrow(), "after kill -9 of osd.0"));
    let m = model.borrow();
    eprintln!("acknowledged writes: {}, failed: {}", m.acks, m.failures);
    assert!(m.acks > 1000, "the load made progress: {} acks", m.acks);
    drop(m);
    feed.shutdown();
}
