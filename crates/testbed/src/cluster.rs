//! Pontoon on a testbed: OSD, manager and gateway processes in hosts, the
//! `pontoon` CLI against the testbed's etcd, and waits on the cluster map.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use pontoon_cluster::{ClusterMap, MapStore, OsdReport, PgState};
use pontoon_types::OsdId;

use crate::proc::Proc;
use crate::testbed::{Host, Testbed, lock};

/// The cluster name (etcd key prefix) of every testbed's Pontoon cluster.
const CLUSTER_NAME: &str = "pontoon";
/// How long [`Testbed::wait_clean`] waits.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(90);
/// Between two looks at the map.
const POLL: Duration = Duration::from_millis(250);

/// The `pontoon` binary: `$PONTOON_BIN`, else beside the test executable
/// (`target/<profile>/pontoon` for `target/<profile>/deps/<test>`).
pub fn pontoon_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PONTOON_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("cannot find the test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable is not in target/<profile>/deps");
    let bin = dir.join("pontoon");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build --workspace --bins, as scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// A single-threaded tokio runtime for control-plane calls.
pub fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("cannot build a tokio runtime")
}

/// A duration as the CLI reads it.
fn dur_arg(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// How [`Testbed::start_osd`] runs an OSD.
#[derive(Clone, Debug)]
pub struct OsdOpts {
    /// Device file size (created on first start), e.g. `"256M"`.
    pub size: String,
    /// Shards when formatting.
    pub shards: u32,
    /// Liveness lease TTL.
    pub lease_ttl: Duration,
}

impl Default for OsdOpts {
    fn default() -> Self {
        Self {
            size: "256M".into(),
            shards: 1,
            lease_ttl: Duration::from_secs(3),
        }
    }
}

/// How [`Testbed::start_mgr`] runs a manager.
#[derive(Clone, Debug)]
pub struct MgrOpts {
    /// How long an OSD may be down before it is marked out.
    pub out_after: Duration,
}

impl Default for MgrOpts {
    fn default() -> Self {
        Self {
            out_after: Duration::from_secs(30),
        }
    }
}

impl Testbed {
    /// The Pontoon cluster's name (`--cluster-name`).
    pub fn cluster_name(&self) -> &str {
        CLUSTER_NAME
    }

    /// The etcd endpoints, comma-separated. Panics before
    /// [`Testbed::start_etcd`].
    pub fn etcd_endpoints(&self) -> String {
        lock(&self.inner.etcd)
            .clone()
            .expect("no etcd on this testbed: call start_etcd first")
    }

    /// The device file of OSD `id`.
    pub fn osd_device(&self, id: u32) -> PathBuf {
        self.dir().join(format!("osd.{id}.img"))
    }

    /// Starts `pontoon osd run` for OSD `id` on `host` (process `osd.<id>`,
    /// listening on the host's address, registering the host's name), on
    /// its device file in the testbed's directory; returns without waiting.
    /// Start it again after a kill to restart it on the same device.
    pub fn start_osd(&self, host: &Host, id: u32, opts: &OsdOpts) -> Proc {
        let args = [
            "osd".to_string(),
            "run".into(),
            "--etcd".into(),
            self.etcd_endpoints(),
            "--cluster-name".into(),
            CLUSTER_NAME.into(),
            "--device".into(),
            self.osd_device(id).to_string_lossy().into_owned(),
            "--size".into(),
            opts.size.clone(),
            "--id".into(),
            id.to_string(),
            "--shards".into(),
            opts.shards.to_string(),
            "--listen".into(),
            host.ip().to_string(),
            "--host".into(),
            host.name().to_string(),
            "--lease-ttl".into(),
            dur_arg(opts.lease_ttl),
        ];
        host.spawn(&format!("osd.{id}"), pontoon_bin(), args)
    }

    /// Starts OSD `id` like [`Testbed::start_osd`] and waits up to
    /// `timeout` until it is alive (registered, holding its lease);
    /// panics with the logs if it exits first. Start new OSDs this way, in
    /// id order: the cluster refuses an explicit id below one it already
    /// handed out, so OSDs started at once with ids can race each other.
    pub fn start_osd_alive(&self, host: &Host, id: u32, opts: &OsdOpts, timeout: Duration) -> Proc {
        let p = self.start_osd(host, id, opts);
        let gone = || {
            p.exit_status()
                .map(|st| format!("osd.{id} exited ({st}): {}", p.log_tail(10)))
        };
        self.wait_until(&format!("osd.{id} alive"), timeout, gone, |m, _| {
            if m.is_alive(OsdId(id)) {
                Ok(())
            } else {
                Err("not alive".into())
            }
        });
        p
    }

    /// Starts `pontoon mgr` named `name` on `host` (process `mgr.<name>`);
    /// returns without waiting.
    pub fn start_mgr(&self, host: &Host, name: &str, opts: &MgrOpts) -> Proc {
        let args = [
            "mgr".to_string(),
            "--etcd".into(),
            self.etcd_endpoints(),
            "--cluster-name".into(),
            CLUSTER_NAME.into(),
            "--out-after".into(),
            dur_arg(opts.out_after),
            "--name".into(),
            name.to_string(),
        ];
        host.spawn(&format!("mgr.{name}"), pontoon_bin(), args)
    }

    /// Starts the NBD gateway `pontoon nbd` on `host`, listening on the
    /// host's address and `port` (process `nbd.<host>`); returns without
    /// waiting.
    pub fn start_nbd(&self, host: &Host, port: u16) -> Proc {
        let args = [
            "nbd".to_string(),
            "--listen".into(),
            format!("{}:{port}", host.ip()),
            "--etcd".into(),
            self.etcd_endpoints(),
            "--cluster-name".into(),
            CLUSTER_NAME.into(),
            // Plain NBD on a namespace address that is not loopback: the
            // testbed's network exists only inside the test.
            "--tls".into(),
            "off".into(),
            "--insecure".into(),
        ];
        host.spawn(&format!("nbd.{}", host.name()), pontoon_bin(), args)
    }

    /// Runs `pontoon ARGS --etcd ... --cluster-name ...` from the test
    /// process (root namespace); returns its output whatever its status.
    pub fn try_cli(&self, args: &[&str]) -> Output {
        Command::new(pontoon_bin())
            .args(args)
            .args(["--etcd", &self.etcd_endpoints()])
            .args(["--cluster-name", CLUSTER_NAME])
            .output()
            .unwrap_or_else(|e| panic!("cannot run pontoon {args:?}: {e}"))
    }

    /// Creates pool `p` (3 replicas on 3 hosts, writes need 2, `pgs` PGs)
    /// and volume `volume` of `size` in it, then waits until every PG is
    /// active+clean; returns that map.
    pub fn three_host_volume(&self, pgs: u32, volume: &str, size: &str) -> ClusterMap {
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
            "--failure-domain",
            "host",
        ]);
        self.cli(&["volume", "create", volume, "--size", size, "--pool", "p"]);
        self.wait_clean("the new pool")
    }

    /// Like [`Testbed::try_cli`], but it must succeed; returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.try_cli(args);
        assert!(
            out.status.success(),
            "pontoon {args:?} failed ({}): {}{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.logs_tail()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Connects to the cluster's etcd (retrying for up to 30s) and runs `f`.
    /// Its requests are not retried: with an etcd member down, some fail.
    pub fn with_store<T, F, Fut>(&self, f: F) -> T
    where
        F: FnOnce(MapStore) -> Fut,
        Fut: Future<Output = T>,
    {
        tokio_rt().block_on(async {
            let store = self.connect(Duration::from_secs(30)).await;
            f(store).await
        })
    }

    /// Connects to the cluster's etcd, retrying until `timeout`.
    async fn connect(&self, timeout: Duration) -> MapStore {
        let eps: Vec<String> = self
            .etcd_endpoints()
            .split(',')
            .map(str::to_string)
            .collect();
        let deadline = Instant::now() + timeout;
        loop {
            match MapStore::connect(&eps, CLUSTER_NAME).await {
                Ok(s) => return s,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "cannot connect to etcd at {eps:?} within {timeout:?}: {e}\n{}",
                    self.logs_tail()
                ),
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The current cluster map (retrying failed loads for up to 30s).
    pub fn map(&self) -> ClusterMap {
        self.wait_for("the cluster map", Duration::from_secs(30), |_, _| Ok(()))
    }

    /// Waits up to `timeout` until `check(map, reports)` is `Ok`, panicking
    /// with its last complaint and the logs if it never is. Returns the map
    /// it accepted. Failed etcd requests count as "not yet" (a client with
    /// every endpoint fails some requests while a member is down).
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&ClusterMap, &[OsdReport]) -> Result<(), String>,
    ) -> ClusterMap {
        self.wait_until(what, timeout, || None, check)
    }

    /// [`Testbed::wait_for`], giving up at once (with the logs) as soon as
    /// `abort` says why.
    fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        abort: impl Fn() -> Option<String>,
        check: impl FnMut(&ClusterMap, &[OsdReport]) -> Result<(), String>,
    ) -> ClusterMap {
        tokio_rt().block_on(async {
            let store = self.connect(timeout).await;
            poll_map(&store, what, timeout, abort, check, || self.logs_tail()).await
        })
    }

    /// Waits until every OSD of `ids` holds its liveness lease.
    pub fn wait_osds_alive(&self, ids: &[u32], timeout: Duration) -> ClusterMap {
        self.wait_for(&format!("osds {ids:?} alive"), timeout, |m, _| {
            let dead: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|id| !m.is_alive(OsdId(*id)))
                .collect();
            if dead.is_empty() {
                Ok(())
            } else {
                Err(format!("not alive: {dead:?}"))
            }
        })
    }

    /// Waits (up to 90s) until every PG is active+clean with a full acting
    /// set ([`all_clean`]).
    pub fn wait_clean(&self, what: &str) -> ClusterMap {
        self.wait_for(what, CLEAN_TIMEOUT, all_clean)
    }
}

/// Polls `store` until `check` accepts its map and the OSDs' reports;
/// panics with what it last saw and `logs()` once `timeout` passes, or at
/// once when `abort` says why.
pub async fn poll_map(
    store: &MapStore,
    what: &str,
    timeout: Duration,
    abort: impl Fn() -> Option<String>,
    mut check: impl FnMut(&ClusterMap, &[OsdReport]) -> Result<(), String>,
    logs: impl Fn() -> String,
) -> ClusterMap {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(why) = abort() {
            panic!("{what}: {why}\n{}", logs());
        }
        let why = match (store.load().await, store.reports().await) {
            (Ok(map), Ok(reports)) => match check(&map, &reports) {
                Ok(()) => return map,
                Err(why) => why,
            },
            (Err(e), _) | (_, Err(e)) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {timeout:?}: {why}\n{}",
            logs()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Whether every PG's primary reports it active+clean in its current
/// interval, with as many acting members as its pool's size (and there is
/// at least one PG).
pub fn all_clean(map: &ClusterMap, reports: &[OsdReport]) -> Result<(), String> {
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    let mut clean = 0;
    for (pg, rec) in &map.pgs {
        let size = map.pools.get(&pg.pool).map_or(0, |p| p.size as usize);
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
        if st == Some(PgState::ActiveClean) && rec.acting.len() == size {
            clean += 1;
        }
        *states
            .entry(format!("{st:?} with {} members", rec.acting.len()))
            .or_default() += 1;
    }
    if !map.pgs.is_empty() && clean == map.pgs.len() {
        Ok(())
    } else {
        Err(format!(
            "{clean} of {} PGs clean at epoch {}: {states:?}",
            map.pgs.len(),
            map.epoch
        ))
    }
}
