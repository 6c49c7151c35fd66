//! What the end-to-end tests with real processes share: a local cluster
//! (etcd, a manager, OSD processes), writers going through the client
//! library with a model of what every block must hold, and the checks —
//! every acknowledged write reads back exactly, every replica is identical,
//! every PG is active+clean.
//!
//! The cluster is either `pontoon up` ([`Cluster::up`]) or the same
//! processes started one by one by the test ([`Cluster::own`]), which the
//! test can then kill and restart individually — etcd included, which
//! `pontoon up` does not survive.
//!
//! Needs the `pontoon` binary built beside the tests (the suite's script
//! builds it first) and Debian's etcd-server. Set `PONTOON_TEST_KEEP=1` to
//! keep the cluster directory (logs included) after a test.

// Every test binary uses its own part of the harness.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pontoon_client::{MapFeed, Volume};
use pontoon_cluster::auth::EntityName;
use pontoon_cluster::auth::keyring::local_keyring;
use pontoon_cluster::{ClusterMap, MapStore, OsdReport};
pub use pontoon_testbed::{all_clean, etcd_bin, poll_map, pontoon_bin, tokio_rt};
use pontoon_types::OsdId;

/// Blocks the writers write: the first 64 MiB of the volume.
pub const REGION_BLOCKS: u64 = 16 * 1024;
/// Concurrent writers, each on its own blocks (`block % WRITERS`).
pub const WRITERS: u64 = 8;
/// Every this many writes, a writer reads its block back.
const READ_BACK_EVERY: u64 = 4;

/// How a test cluster is set up.
#[derive(Clone, Debug)]
pub struct Opts {
    /// OSD processes.
    pub osds: u32,
    /// Device file size of each (`pontoon up --osd-size`).
    pub osd_size: &'static str,
    /// OSD liveness lease TTL.
    pub lease_ttl: Duration,
    /// How long an OSD may be down before the manager marks it out.
    pub out_after: Duration,
    /// The cluster's `ms_mode` (`pontoon up --ms-mode`; a cluster of
    /// [`Cluster::own`] runs `none`).
    pub ms_mode: &'static str,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            osds: 3,
            osd_size: "512M",
            lease_ttl: Duration::from_secs(3),
            out_after: Duration::from_secs(30),
            ms_mode: "authenticated",
        }
    }
}

/// A duration as the CLI reads it.
fn dur_arg(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// The processes behind a [`Cluster`].
enum Procs {
    /// `pontoon up`, which owns etcd, the manager and the OSDs.
    Up(Child),
    /// Started one by one by the test.
    Own(Own),
}

/// etcd, the OSDs and the manager as children of the test.
struct Own {
    etcd: Option<Child>,
    etcd_args: Vec<String>,
    osds: BTreeMap<u32, Child>,
    mgr: Option<Child>,
}

/// A local cluster in a temporary directory, laid out as `pontoon up` lays
/// it out (`cluster.toml`, `run/*.pid`, `log/*.log`, `osd.<id>.img`, `etcd/`),
/// so that `pontoon ... --cluster DIR` works on it either way. Everything is
/// stopped on drop.
pub struct Cluster {
    dir: tempfile::TempDir,
    procs: Procs,
    /// How it was set up.
    pub opts: Opts,
}

impl Cluster {
    /// `pontoon up` with three OSDs and the default settings.
    pub fn start() -> Cluster {
        Cluster::up(Opts::default())
    }

    /// `pontoon up` in the background; returns once it is ready.
    pub fn up(opts: Opts) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = std::fs::File::create(dir.path().join("up.log")).expect("log");
        let up = Command::new(pontoon_bin())
            .args(["up", "--dir"])
            .arg(dir.path())
            .args(["--osds", &opts.osds.to_string()])
            .args(["--osd-size", opts.osd_size])
            .args(["--shards", "1"])
            .args(["--lease-ttl", &dur_arg(opts.lease_ttl)])
            .args(["--out-after", &dur_arg(opts.out_after)])
            .args(["--ms-mode", opts.ms_mode])
            // These tests reach etcd directly (map feeds, `osd run
            // --etcd`); etcd's TLS and users have tests of their own
            // (crates/pontoon/tests/etcd_security.rs).
            .arg("--etcd-insecure")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn pontoon up");
        let c = Cluster {
            dir,
            procs: Procs::Up(up),
            opts,
        };
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

    /// The same processes `pontoon up` runs — etcd with its arguments,
    /// `pontoon osd run` per OSD, `pontoon mgr` — started by the test, so
    /// that it can kill and restart any of them (etcd too).
    pub fn own(opts: Opts) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["run", "log"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
        }
        let client_port = free_port();
        let peer_port = free_port();
        let client_url = format!("http://127.0.0.1:{client_port}");
        // What crates/pontoon/src/cmd_up.rs start_etcd runs.
        let etcd_args = pontoon_cluster::etcd::single_member_args(
            "pontoon",
            &dir.path().join("etcd"),
            client_port,
            peer_port,
        );
        let name = "pontoon";
        let host = "testhost";
        let toml = format!(
            "cluster_name = \"{name}\"\netcd = \"{client_url}\"\netcd_peer_port = \"{peer_port}\"\n\
             osds = \"{}\"\nosd_size = \"{}\"\nshards = \"1\"\nlease_ttl = \"{}\"\n\
             out_after = \"{}\"\nlisten = \"127.0.0.1\"\nhost = \"{host}\"\npid = \"{}\"\n",
            opts.osds,
            pontoon_types::parse_size(opts.osd_size).expect("osd size"),
            dur_arg(opts.lease_ttl),
            dur_arg(opts.out_after),
            std::process::id()
        );
        let mut c = Cluster {
            dir,
            procs: Procs::Own(Own {
                etcd: None,
                etcd_args,
                osds: BTreeMap::new(),
                mgr: None,
            }),
            opts,
        };
        c.start_etcd();
        std::fs::write(c.path().join("cluster.toml"), toml).expect("cluster.toml");
        for id in 0..c.opts.osds {
            c.start_osd(id);
            // Ids are handed out in order: wait for each to register.
            c.wait_for(
                &format!("osd.{id} alive"),
                Duration::from_secs(60),
                |m, _| {
                    m.is_alive(OsdId(id))
                        .then_some(())
                        .ok_or_else(|| "not alive".into())
                },
            );
        }
        let args = vec![
            "mgr".to_string(),
            "--etcd".into(),
            client_url,
            "--cluster-name".into(),
            name.into(),
            "--out-after".into(),
            dur_arg(c.opts.out_after),
            "--name".into(),
            "test-mgr".into(),
        ];
        let mgr = c.spawn(&pontoon_bin(), &args, "mgr");
        c.own_mut().mgr = Some(mgr);
        c
    }

    fn own_mut(&mut self) -> &mut Own {
        match &mut self.procs {
            Procs::Own(o) => o,
            Procs::Up(_) => panic!("only a cluster started by Cluster::own has its processes"),
        }
    }

    /// Spawns a child with its output in `log/<log>.log`, killed if the
    /// test's thread dies.
    fn spawn(&self, program: &Path, args: &[String], log: &str) -> Child {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join("log").join(format!("{log}.log")))
            .expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                Ok(())
            });
        }
        cmd.spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()))
    }

    /// Starts etcd (again, on its data, ports and arguments) and waits
    /// until it is healthy. Own clusters only.
    pub fn start_etcd(&mut self) {
        let args = self.own_mut().etcd_args.clone();
        let child = self.spawn(&etcd_bin(), &args, "etcd");
        std::fs::write(
            self.path().join("run/etcd.pid"),
            format!("{}\n", child.id()),
        )
        .expect("pid file");
        self.own_mut().etcd = Some(child);
        let port: u16 = args
            .iter()
            .find_map(|a| a.strip_prefix("--listen-client-urls=http://127.0.0.1:"))
            .and_then(|p| p.parse().ok())
            .expect("client port");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !etcd_healthy(port) {
            let etcd = self.own_mut().etcd.as_mut().expect("etcd");
            if let Ok(Some(st)) = etcd.try_wait() {
                panic!("etcd exited at start ({st}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "etcd not healthy: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs etcd (by the pid in `run/etcd.pid`). Own clusters only.
    pub fn kill9_etcd(&mut self) {
        let pid = read_pid(&self.path().join("run/etcd.pid"));
        kill9(pid, "etcd");
        if let Some(mut etcd) = self.own_mut().etcd.take() {
            let _ = etcd.wait();
        }
    }

    /// Starts `pontoon osd run` for OSD `id` with the arguments `pontoon up`
    /// gives it. Own clusters only; returns without waiting.
    pub fn start_osd(&mut self, id: u32) {
        let args: Vec<String> = [
            "osd",
            "run",
            "--etcd",
            &self.etcd_url(),
            "--cluster-name",
            "pontoon",
            "--device",
            &self.path().join(format!("osd.{id}.img")).to_string_lossy(),
            "--size",
            self.opts.osd_size,
            "--id",
            &id.to_string(),
            "--shards",
            "1",
            "--listen",
            "127.0.0.1",
            "--host",
            "testhost",
            "--lease-ttl",
            &dur_arg(self.opts.lease_ttl),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let child = self.spawn(&pontoon_bin(), &args, &format!("osd.{id}"));
        std::fs::write(
            self.path().join(format!("run/osd.{id}.pid")),
            format!("{}\n", child.id()),
        )
        .expect("pid file");
        if let Some(mut old) = self.own_mut().osds.insert(id, child) {
            let _ = old.kill();
            let _ = old.wait();
        }
    }

    /// The etcd URL, from cluster.toml or (before it is written) etcd's arguments.
    fn etcd_url(&self) -> String {
        match &self.procs {
            Procs::Own(o) if !self.path().join("cluster.toml").exists() => o
                .etcd_args
                .iter()
                .find_map(|a| a.strip_prefix("--advertise-client-urls="))
                .expect("client url")
                .to_string(),
            _ => self.setting("etcd"),
        }
    }

    /// The cluster directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// What the processes logged: `pontoon up`'s output, and the end of
    /// every log in `log/`.
    pub fn log(&self) -> String {
        let mut s = std::fs::read_to_string(self.path().join("up.log")).unwrap_or_default();
        let mut logs: Vec<_> = std::fs::read_dir(self.path().join("log"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.sort();
        for p in logs {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("\n--- {} (end)\n", p.display()));
            for l in &lines[lines.len().saturating_sub(40)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    /// How many lines of `log/<name>.log` contain `pattern`.
    pub fn log_count(&self, name: &str, pattern: &str) -> usize {
        std::fs::read_to_string(self.path().join("log").join(format!("{name}.log")))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(pattern))
            .count()
    }

    /// A value of `cluster.toml`.
    pub fn setting(&self, key: &str) -> String {
        let text = std::fs::read_to_string(self.path().join("cluster.toml")).expect("cluster.toml");
        text.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
            .unwrap_or_else(|| panic!("{key} missing from cluster.toml:\n{text}"))
    }

    /// etcd endpoints and cluster name, for a [`MapFeed`] or [`MapStore`].
    pub fn endpoints(&self) -> (Vec<String>, String) {
        // An own cluster is named "pontoon" (before cluster.toml is written).
        match self.path().join("cluster.toml").exists() {
            true => (vec![self.setting("etcd")], self.setting("cluster_name")),
            false => (vec![self.etcd_url()], "pontoon".into()),
        }
    }

    /// A map feed watching this cluster, proving `client.admin`'s key
    /// when the cluster directory has one (`pontoon up` clusters run
    /// `ms_mode authenticated`).
    pub fn feed(&self) -> Arc<MapFeed> {
        let (eps, name) = self.endpoints();
        let feed = MapFeed::connect(&eps, &name).expect("map feed");
        let admin = EntityName::parse("client.admin").expect("entity name");
        let path = local_keyring(self.path(), &admin);
        if path.exists() {
            let me = pontoon_client::identity_from_keyring(&path, &admin).expect("admin keyring");
            feed.set_identity(me);
        }
        feed
    }

    /// Runs `pontoon ARGS --cluster DIR`.
    pub fn try_cli(&self, args: &[&str]) -> Output {
        Command::new(pontoon_bin())
            .args(args)
            .arg("--cluster")
            .arg(self.path())
            .output()
            .expect("run pontoon")
    }

    /// Runs `pontoon ARGS --cluster DIR`, which must succeed; returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.try_cli(args);
        assert!(
            out.status.success(),
            "pontoon {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `f` with a connection to the cluster's etcd.
    pub fn with_store<T, F, Fut>(&self, f: F) -> T
    where
        F: FnOnce(MapStore) -> Fut,
        Fut: Future<Output = T>,
    {
        let (eps, name) = self.endpoints();
        tokio_rt().block_on(async {
            let store = MapStore::connect(&eps, &name).await.expect("etcd");
            f(store).await
        })
    }

    /// The current map.
    pub fn map(&self) -> ClusterMap {
        self.with_store(|s| async move { s.load().await.expect("map") })
    }

    /// The pid of OSD `id`, from its pid file.
    pub fn osd_pid(&self, id: u32) -> i32 {
        read_pid(&self.path().join(format!("run/osd.{id}.pid")))
    }

    /// SIGKILLs OSD `id`.
    pub fn kill9_osd(&mut self, id: u32) {
        kill9(self.osd_pid(id), &format!("osd.{id}"));
        if let Procs::Own(o) = &mut self.procs
            && let Some(mut child) = o.osds.remove(&id)
        {
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` until `check(map, reports)` is `Ok`, panicking
    /// with its last complaint (and the logs) if it never is. Returns the
    /// map it accepted.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&ClusterMap, &[OsdReport]) -> Result<(), String>,
    ) -> ClusterMap {
        let (eps, name) = self.endpoints();
        tokio_rt().block_on(async {
            let store = MapStore::connect(&eps, &name).await.expect("etcd");
            poll_map(&store, what, timeout, || None, check, || self.log()).await
        })
    }

    /// Waits until every PG is active+clean with a full acting set.
    pub fn wait_clean(&self, what: &str) -> ClusterMap {
        self.wait_for(what, Duration::from_secs(90), all_clean)
    }

    /// Creates pool `p` (3 replicas, writes need 2, `pgs` PGs) and volume
    /// `v` of `size` in it, then waits until every PG is active+clean.
    pub fn three_replica_volume(&self, pgs: u32, size: &str) -> ClusterMap {
        let pgs = pgs.to_string();
        self.cli(&[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--min-size",
            "2",
            "--pgs",
            &pgs,
        ]);
        self.cli(&["volume", "create", "v", "--size", size]);
        self.wait_clean("new pool")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("PONTOON_TEST_KEEP").is_some() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "PONTOON_TEST_KEEP: the cluster directory {} is kept",
                self.path().display()
            );
        }
        match &mut self.procs {
            Procs::Up(up) => {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
                if !wait_child(up, Duration::from_secs(20)) {
                    let _ = up.kill();
                    let _ = up.wait();
                }
            }
            Procs::Own(o) => {
                // Manager, OSDs, etcd: the order `pontoon up` stops them in.
                let mut children: Vec<Child> = o.mgr.take().into_iter().collect();
                children.extend(std::mem::take(&mut o.osds).into_values());
                for c in &children {
                    // SAFETY: signalling our own children.
                    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                }
                let deadline = Instant::now() + Duration::from_secs(15);
                for c in &mut children {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if !wait_child(c, left) {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                }
                if let Some(mut etcd) = o.etcd.take() {
                    let _ = etcd.kill();
                    let _ = etcd.wait();
                }
            }
        }
    }
}

fn wait_child(c: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .expect("pid")
}

fn kill9(pid: i32, what: &str) {
    // SAFETY: plain kill(2) on a pid this test's cluster started.
    let r = unsafe { libc::kill(pid, libc::SIGKILL) };
    assert_eq!(r, 0, "kill -9 {what} (pid {pid})");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Whether etcd at `port` answers `/health` with `"health":"true"`.
fn etcd_healthy(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = Vec::new();
    let _ = s.take(64 * 1024).read_to_end(&mut body);
    String::from_utf8_lossy(&body).contains(r#""health":"true""#)
}

/// The 4 KiB pattern of write `seed`.
pub fn block(seed: u64) -> Vec<u8> {
    (0..512u64)
        .flat_map(|i| pontoon_types::mix64(seed.wrapping_mul(512) + i).to_le_bytes())
        .collect()
}

/// What each block should hold: the last acknowledged seed, plus seeds of
/// writes that failed (either may be there); and what the load saw.
#[derive(Default)]
pub struct Model {
    /// Block → seed of its last acknowledged write.
    pub acked: BTreeMap<u64, u64>,
    /// Block → seeds of failed writes since then (any may have landed).
    pub uncertain: BTreeMap<u64, Vec<u64>>,
    /// Acknowledged writes.
    pub acks: u64,
    /// Failed writes.
    pub failures: u64,
    /// When each write was acknowledged.
    pub ack_times: Vec<Instant>,
    /// Last acknowledgement.
    pub last_ack: Option<Instant>,
    /// Longest time without any acknowledged write (see [`Model::reset_gap`]).
    pub longest_gap: Duration,
    /// Successful read-backs.
    pub reads: u64,
    /// Failed read-backs.
    pub read_failures: u64,
    /// Read-backs that returned something other than the acknowledged write.
    pub bad_reads: Vec<String>,
}

impl Model {
    /// Acknowledgements in `[from, to)`.
    pub fn acks_between(&self, from: Instant, to: Instant) -> usize {
        self.ack_times
            .iter()
            .filter(|t| **t >= from && **t < to)
            .count()
    }

    /// Starts measuring [`Model::longest_gap`] afresh from now.
    pub fn reset_gap(&mut self) {
        self.longest_gap = Duration::ZERO;
        self.last_ack = Some(Instant::now());
    }
}

/// Shared model of a load.
pub type SharedModel = Rc<RefCell<Model>>;

/// [`WRITERS`] writers on disjoint blocks for `run_for`, recording into
/// `model`; each reads its block back after every few acknowledged writes
/// (it must get exactly what it wrote: nobody else writes that block).
pub async fn write_load(vol: &Volume, run_for: Duration, model: SharedModel, round: u64) {
    let stop = Instant::now() + run_for;
    let tasks = (0..WRITERS).map(|w| {
        let (vol, model) = (vol.clone(), model.clone());
        async move {
            let mut n = 0u64;
            while Instant::now() < stop {
                n += 1;
                let seed = (round << 48) | (w << 40) | n;
                let b = (pontoon_types::mix64(seed) % (REGION_BLOCKS / WRITERS)) * WRITERS + w;
                let data = block(seed);
                match vol.write_at(b * 4096, &data).await {
                    Ok(()) => {
                        let mut m = model.borrow_mut();
                        m.acked.insert(b, seed);
                        m.uncertain.remove(&b);
                        m.acks += 1;
                        let now = Instant::now();
                        m.ack_times.push(now);
                        if let Some(t) = m.last_ack {
                            m.longest_gap = m.longest_gap.max(now - t);
                        }
                        m.last_ack = Some(now);
                    }
                    Err(_) => {
                        let mut m = model.borrow_mut();
                        m.uncertain.entry(b).or_default().push(seed);
                        m.failures += 1;
                        continue;
                    }
                }
                if !n.is_multiple_of(READ_BACK_EVERY) {
                    continue;
                }
                let got = vol.read_at(b * 4096, 4096).await;
                let mut m = model.borrow_mut();
                match got {
                    Ok(got) if got[..] == data[..] => m.reads += 1,
                    Ok(_) => {
                        m.reads += 1;
                        m.bad_reads.push(format!(
                            "block {b} did not read back acknowledged write {seed:#x}"
                        ));
                    }
                    Err(_) => m.read_failures += 1,
                }
            }
        }
    });
    futures::future::join_all(tasks).await;
}

/// Reads the whole region back: every block holds its last acknowledged
/// write (or one that failed after it), untouched blocks are zero; and no
/// read-back during the load returned anything else.
pub async fn verify(vol: &Volume, model: &Model, what: &str) {
    assert!(
        model.bad_reads.is_empty(),
        "{what}: {} read-backs missed acknowledged writes, e.g. {:?}",
        model.bad_reads.len(),
        &model.bad_reads[..model.bad_reads.len().min(4)]
    );
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

/// Every acting member of every object of the volume's written region holds
/// the same version and the same bytes (asked directly, as a peer OSD
/// would), and there are as many members as the pool's size. Returns how
/// many objects were compared.
pub fn replicas_identical(feed: &Arc<MapFeed>, volume: &str) -> u64 {
    let map = feed.current();
    let v = map.volume_by_name(volume).expect("volume");
    let objects = (REGION_BLOCKS * 4096).div_ceil(v.object_size);
    pontoon_testbed::load::replicas_identical(&map, volume, Some(objects))
        .unwrap_or_else(|problems| panic!("replicas differ:\n{}", problems.join("\n")))
}
