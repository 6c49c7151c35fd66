//! The OSD process: locks the device, works out which OSD it is (formatting
//! a new file; see [`crate::identity`]), starts one thread per
//! shard with its own io_uring runtime, store slice and TCP port, and runs
//! the control loop ([`crate::control`]) on a tokio thread against etcd:
//! registration, the liveness lease, maps to the shards, reports.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use pontoon_cluster::{
    ClusterMap, MapStore, OsdLease, OsdReport, PgReport, PgScrubReport, PgState,
};
use pontoon_net::{Limits, ServerAuth};
use pontoon_store::{FileDevice, Store};
use pontoon_types::{Epoch, OsdId};

use crate::access::MapKeys;
use crate::control::{self, Exit, MapSource, ShardSet};
use crate::deadline::LeaseDeadline;
use crate::map::ShardMap;
use crate::metrics::{SCRAPE_SHARD_TIMEOUT, ShardMetrics, add_osd_metrics};
use crate::peers::NetPeers;
use crate::shard::{PgStatus, Shard, ShardReport};
use crate::view::shard_map;

/// How long a shard may take to answer its control loop before it counts
/// as stuck (its event loop has not turned in that long).
pub const SHARD_STUCK_AFTER: Duration = Duration::from_secs(5);

/// How an OSD process is started.
#[derive(Clone, Debug)]
pub struct OsdConfig {
    /// Id to claim; a new one is allocated when `None`.
    pub id: Option<OsdId>,
    /// Data device or file.
    pub device: PathBuf,
    /// Create the file with this size if it does not exist.
    pub create_size: Option<u64>,
    /// Shards (threads) when formatting; an existing device keeps its count.
    pub shards: u32,
    /// Address the shards listen on (port chosen per shard).
    pub listen: IpAddr,
    /// Host name for failure domains.
    pub host: String,
    /// etcd endpoints.
    pub etcd: Vec<String>,
    /// etcd's TLS settings and user.
    pub etcd_auth: pontoon_cluster::EtcdAuth,
    /// Cluster name (etcd prefix).
    pub cluster: String,
    /// Liveness lease time-to-live.
    pub lease_ttl: Duration,
    /// Where `/metrics` listens (port 0: a free port); `None`: no metrics
    /// and no per-I/O counting.
    pub metrics: Option<SocketAddr>,
    /// The ports the shards may listen on: each takes the lowest free one
    /// (shards start one after another); `None`: any free port.
    pub shard_ports: Option<std::ops::RangeInclusive<u16>>,
    /// The write-buffer device holding the journal, when it is not on the
    /// data device (used when formatting, needed on every open after).
    pub journal: Option<PathBuf>,
    /// Called once, when the OSD first holds its liveness lease: it is up
    /// in the map and its shards serve (systemd's readiness notification,
    /// so that `systemctl start` returns once `osd ls` shows it up).
    pub on_serving: Option<fn(OsdId)>,
}

/// Why the OSD could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    /// The device could not be opened, created or formatted.
    #[error("device {path}: {what}")]
    Device {
        /// Device path.
        path: String,
        /// What failed.
        what: String,
    },
    /// The cluster map could not be reached or refused us.
    #[error("cluster: {0}")]
    Cluster(String),
    /// A thread failed.
    #[error("{0}")]
    Thread(String),
    /// A shard's store failed or a shard got stuck: the OSD gave up its
    /// lease and must exit.
    #[error("{0}")]
    Failed(String),
    /// The device is in use by another process.
    #[error(transparent)]
    Lock(#[from] crate::device_lock::LockError),
    /// The device belongs to another OSD or cluster, holds other data, or
    /// could not be formatted for this one.
    #[error("{0}")]
    Identity(String),
}

/// A connection on which nothing arrives for this long is closed (peers
/// ping every heartbeat; clients reconnect when they next need it).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

enum Cmd {
    Start(OsdId, Arc<crate::access::AccessTable>),
    Map(Arc<ShardMap>),
    Report(oneshot::Sender<ShardReport>),
    Stop,
}

struct ShardThread {
    addr: SocketAddr,
    metrics: Arc<ShardMetrics>,
    tx: mpsc::UnboundedSender<Cmd>,
    deadline: Arc<LeaseDeadline>,
    thread: JoinHandle<()>,
}

/// Runs the OSD until `stop` is set. Returns the OSD's id.
pub fn run(cfg: OsdConfig, stop: Arc<AtomicBool>) -> Result<OsdId, OsdError> {
    let dev_err = |what: String| OsdError::Device {
        path: cfg.device.display().to_string(),
        what,
    };
    // Held until the process exits: no second OSD process on this device,
    // which is also what makes revoking a previous life's lease safe.
    let lock = crate::device_lock::DeviceLock::acquire(&cfg.device, cfg.create_size)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| OsdError::Thread(format!("control runtime: {e}")))?;
    let store = rt
        .block_on(MapStore::connect_with(
            &cfg.etcd,
            &cfg.cluster,
            &cfg.etcd_auth,
        ))
        .map_err(|e| OsdError::Cluster(e.to_string()))?;
    // Which OSD the device is (a new file given a size is formatted).
    let may_format = cfg.create_size.is_some() && !lock.is_block_device();
    let layout = crate::identity::NewDevice {
        slices: cfg.shards,
        journal: cfg.journal.as_deref(),
    };
    let claimed = rt
        .block_on(crate::identity::claim_for_run(
            &store,
            &lock,
            &cfg.cluster,
            cfg.id,
            may_format,
            layout,
        ))
        .map_err(OsdError::Identity)?;
    let slices = claimed.slices;
    let mut shards = Vec::new();
    for i in 0..slices {
        shards.push(start_shard(&cfg, i, slices).map_err(OsdError::Thread)?);
    }
    let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.addr).collect();
    let set = EtcdShards {
        metrics: shards.iter().map(|s| s.metrics.clone()).collect(),
        txs: shards.iter().map(|s| s.tx.clone()).collect(),
        deadlines: shards.iter().map(|s| s.deadline.clone()).collect(),
    };
    let device_bytes = lock
        .size()
        .map_err(|e| dev_err(format!("cannot read its size: {e}")))?;
    let result = rt.block_on(control(
        &cfg,
        claimed.id,
        store,
        addrs,
        device_bytes,
        &set,
        &stop,
    ));
    for s in shards {
        let _ = s.tx.unbounded_send(Cmd::Stop);
        if s.thread.join().is_err() {
            tracing::error!("a shard thread panicked");
        }
    }
    result
}

/// Opens the OSD's write-buffer (journal) device, if it has one.
fn open_journal(journal: Option<&PathBuf>) -> Result<Option<FileDevice>, String> {
    journal
        .map(|j| {
            FileDevice::open(j)
                .map_err(|e| format!("opening the journal device {}: {e}", j.display()))
        })
        .transpose()
}

/// Binds a shard's listener on `listen`: the lowest free port of `ports`,
/// or any free port.
async fn bind_shard(
    listen: IpAddr,
    ports: Option<std::ops::RangeInclusive<u16>>,
) -> Result<compio::net::TcpListener, String> {
    let Some(ports) = ports else {
        return compio::net::TcpListener::bind(SocketAddr::new(listen, 0))
            .await
            .map_err(|e| format!("binding {listen}: {e}"));
    };
    for port in ports.clone() {
        match compio::net::TcpListener::bind(SocketAddr::new(listen, port)).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(format!("binding {listen}:{port}: {e}")),
        }
    }
    Err(format!(
        "no free port in the shard port range {}-{} on {listen}",
        ports.start(),
        ports.end()
    ))
}

/// Starts shard `index`: opens its slice, binds its port, then waits for
/// the OSD id before serving.
fn start_shard(cfg: &OsdConfig, index: u32, slices: u32) -> Result<ShardThread, String> {
    let (tx, mut rx) = mpsc::unbounded::<Cmd>();
    let (ready_tx, ready_rx) = std_mpsc::channel::<Result<SocketAddr, String>>();
    let device = cfg.device.clone();
    let journal_path = cfg.journal.clone();
    let ports = cfg.shard_ports.clone();
    let listen = cfg.listen;
    let deadline = LeaseDeadline::fenced(Instant::now());
    let shard_deadline = deadline.clone();
    let metrics = match cfg.metrics {
        Some(_) => ShardMetrics::new(),
        None => ShardMetrics::disabled(),
    };
    let shard_metrics = metrics.clone();
    let thread = std::thread::Builder::new()
        .name(format!("shard-{index}"))
        .spawn(move || {
            let rt = match compio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("io_uring: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let opened = async {
                    let dev = FileDevice::open(&device).map_err(|e| e.to_string())?;
                    let journal = open_journal(journal_path.as_ref())?;
                    let (store, bg) = Store::open(dev, journal, index)
                        .await
                        .map_err(|e| e.to_string())?;
                    let listener = bind_shard(listen, ports).await?;
                    let addr = listener.local_addr().map_err(|e| e.to_string())?;
                    Ok::<_, String>((store, bg, listener, addr))
                };
                let (store, bg, listener, addr) = match opened.await {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("shard {index}: {e}")));
                        return;
                    }
                };
                compio::runtime::spawn(bg).detach();
                let _ = ready_tx.send(Ok(addr));
                let (me, access) = loop {
                    match rx.next().await {
                        Some(Cmd::Start(me, access)) => break (me, access),
                        Some(Cmd::Stop) | None => {
                            let _ = store.close().await;
                            return;
                        }
                        Some(_) => {}
                    }
                };
                let shard = Shard::with_metrics(
                    me,
                    index,
                    slices,
                    store.clone(),
                    NetPeers::new(me),
                    shard_deadline,
                    shard_metrics,
                );
                // Served from the start (peers' pings must be answered
                // while this OSD waits to go live), in the mode and with
                // the keys of the map it registered with; its first map
                // to apply replaces them.
                let start = Rc::new(ShardMap {
                    access: access.clone(),
                    ..ShardMap::default()
                });
                *shard.map.borrow_mut() = start.clone();
                shard.peers().set_map(start);
                let keys = MapKeys(Rc::new(std::cell::RefCell::new(access.clone())));
                let auth =
                    match ServerAuth::new(access.mode, &me.to_string(), Rc::new(keys.clone())) {
                        Ok(a) => Rc::new(a),
                        Err(e) => {
                            tracing::error!(shard = index, "server auth: {e}");
                            let _ = store.close().await;
                            return;
                        }
                    };
                let server = compio::runtime::spawn(pontoon_net::serve_auth(
                    listener,
                    shard.clone(),
                    Limits {
                        idle_timeout: Some(IDLE_TIMEOUT),
                        ..Limits::default()
                    },
                    auth.clone(),
                ));
                shard.start_heartbeats();
                while let Some(cmd) = rx.next().await {
                    match cmd {
                        Cmd::Map(m) => {
                            *keys.0.borrow_mut() = m.access.clone();
                            if auth.mode() != m.access.mode {
                                tracing::info!(
                                    shard = index,
                                    "wire mode {} -> {} for new connections",
                                    auth.mode(),
                                    m.access.mode
                                );
                                auth.set_mode(m.access.mode);
                            }
                            let m = Rc::new((*m).clone());
                            shard.peers().set_map(m.clone());
                            shard.apply_map(m);
                        }
                        Cmd::Report(reply) => {
                            let _ = reply.send(shard.report());
                        }
                        Cmd::Stop => break,
                        Cmd::Start(..) => {}
                    }
                }
                drop(server);
                shard.peers().close_all();
                if let Err(e) = store.close().await {
                    tracing::error!(shard = index, "closing the store: {e}");
                }
            });
        })
        .map_err(|e| format!("spawning shard {index}: {e}"))?;
    let addr = ready_rx
        .recv_timeout(Duration::from_secs(120))
        .map_err(|_| format!("shard {index} did not start"))??;
    Ok(ShardThread {
        addr,
        metrics,
        tx,
        deadline,
        thread,
    })
}

/// Registers the OSD, then runs the control loop against etcd.
/// `id` is the OSD the device belongs to ([`crate::identity`]).
async fn control(
    cfg: &OsdConfig,
    id: OsdId,
    store: MapStore,
    addrs: Vec<SocketAddr>,
    device_bytes: u64,
    shards: &EtcdShards,
    stop: &AtomicBool,
) -> Result<OsdId, OsdError> {
    let cl = |e: pontoon_cluster::ClusterError| OsdError::Cluster(e.to_string());
    let weight = pontoon_cluster::weight_for_size(device_bytes);
    let me = store
        .register_osd(&cfg.host, addrs.clone(), weight, device_bytes, Some(id))
        .await
        .map_err(cl)?;
    if me != id {
        return Err(OsdError::Cluster(format!(
            "the device is {id} but the cluster registered this OSD as {me}"
        )));
    }
    tracing::info!(osd = %me, ?addrs, "registered");
    let metrics = start_metrics(cfg, &store, me, device_bytes, shards).await;
    let maps = store.watch().await.map_err(cl)?;
    let first = maps.borrow().clone();
    let access = Arc::new(crate::access::AccessTable::of(&first));
    for s in &shards.txs {
        let _ = s.unbounded_send(Cmd::Start(me, access.clone()));
    }
    // Whole seconds, rounded up: a lease is never shorter than asked.
    let ttl = cfg
        .lease_ttl
        .as_millis()
        .div_ceil(1000)
        .clamp(1, u128::from(u64::MAX)) as u64;
    let mut source = EtcdSource {
        store,
        me,
        ttl,
        maps,
        lease: None,
        wear: crate::wear::WearWatch::start(&cfg.device),
        on_up: cfg.on_serving,
    };
    let exit = control::run(me, true, first, &mut source, shards, || {
        stop.load(Ordering::Relaxed)
    })
    .await;
    if let Some(m) = metrics {
        m.stop().await;
    }
    match exit {
        Exit::Stopped => Ok(me),
        Exit::Failed(why) => {
            tracing::error!(osd = %me, "giving up: {why}; the lease is revoked and the process exits");
            Err(OsdError::Failed(format!("{me}: {why}")))
        }
        Exit::SourceLost(why) => {
            source.give_up_lease().await;
            Err(OsdError::Cluster(why))
        }
    }
}

/// The daemon's [`MapSource`]: the map watched in etcd, the liveness
/// lease, reports written to etcd.
struct EtcdSource {
    store: MapStore,
    me: OsdId,
    ttl: u64,
    maps: tokio::sync::watch::Receiver<Arc<ClusterMap>>,
    lease: Option<OsdLease>,
    /// The device's NVMe wear, added to each report (none if not NVMe).
    wear: crate::wear::WearWatch,
    /// [`OsdConfig::on_serving`], until the first lease is taken.
    on_up: Option<fn(OsdId)>,
}

impl MapSource for EtcdSource {
    async fn next_map(&mut self, until: Instant) -> Result<Option<Arc<ClusterMap>>, String> {
        let deadline = tokio::time::Instant::from_std(until);
        match tokio::time::timeout_at(deadline, self.maps.changed()).await {
            Err(_) => Ok(None),
            Ok(Err(_)) => Err("the map watch ended".into()),
            Ok(Ok(())) => Ok(Some(self.maps.borrow_and_update().clone())),
        }
    }

    async fn clear_previous_life(&mut self) -> Result<bool, String> {
        OsdLease::clear_previous(&self.store, self.me)
            .await
            .map_err(|e| e.to_string())
    }

    async fn take_lease(&mut self) -> Result<(Epoch, Instant), String> {
        let lease = OsdLease::start(&self.store, self.me, self.ttl)
            .await
            .map_err(|e| e.to_string())?;
        // The old lease (if any) goes after the new one holds alive/<id>.
        self.lease = Some(lease);
        let epoch = self.store.epoch().await.map_err(|e| e.to_string())?;
        let valid_until = self
            .lease_valid_until()
            .ok_or("the new lease lapsed at once")?;
        if let Some(up) = self.on_up.take() {
            up(self.me);
        }
        Ok((epoch, valid_until))
    }

    fn lease_valid_until(&self) -> Option<Instant> {
        self.lease.as_ref().and_then(OsdLease::valid_until)
    }

    async fn give_up_lease(&mut self) {
        if let Some(lease) = self.lease.take()
            && let Err(e) = lease.stop().await
        {
            tracing::warn!(osd = %self.me, "revoking the liveness lease: {e}");
        }
    }

    async fn put_report(&mut self, report: &OsdReport) -> Result<(), String> {
        let with_wear;
        let report = match self.wear.latest() {
            Some(w) => {
                let mut r = report.clone();
                r.io.nvme = Some(w);
                with_wear = r;
                &with_wear
            }
            None => report,
        };
        self.store
            .put_report(report)
            .await
            .map_err(|e| e.to_string())
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// The daemon's [`ShardSet`]: shard threads reached by channel, their
/// deadlines written directly.
struct EtcdShards {
    /// Each shard's counters, for `/metrics`.
    metrics: Vec<Arc<ShardMetrics>>,
    txs: Vec<mpsc::UnboundedSender<Cmd>>,
    deadlines: Vec<Arc<LeaseDeadline>>,
}

impl ShardSet for EtcdShards {
    fn apply_map(&self, map: &Arc<ClusterMap>) {
        let view = Arc::new(shard_map(map));
        for s in &self.txs {
            let _ = s.unbounded_send(Cmd::Map(view.clone()));
        }
    }

    fn set_deadline(&self, until: Option<Instant>) {
        for d in &self.deadlines {
            d.set(until);
        }
    }

    async fn reports(&self) -> Result<Vec<ShardReport>, String> {
        let mut out = Vec::with_capacity(self.txs.len());
        for (i, s) in self.txs.iter().enumerate() {
            let (tx, rx) = oneshot::channel();
            if s.unbounded_send(Cmd::Report(tx)).is_err() {
                return Err(format!("shard {i} stopped"));
            }
            let r = tokio::time::timeout(SHARD_STUCK_AFTER, rx)
                .await
                .map_err(|_| {
                    format!("shard {i} did not answer for {SHARD_STUCK_AFTER:?}: it is stuck")
                })?
                .map_err(|_| format!("shard {i} stopped"))?;
            if let Some(why) = control::trouble(i, &r) {
                return Err(why);
            }
            out.push(r);
        }
        Ok(out)
    }
}

/// Whether `me` is a member of any PG's current interval in `map`.
pub fn in_any_interval(map: &pontoon_cluster::ClusterMap, me: OsdId) -> bool {
    map.pgs.values().any(|pg| pg.acting.contains(&me))
}

/// What the manager is told of a shard's PGs: the ones it leads, with
/// their cluster-wide state (the simulator reports through this too).
pub fn pg_reports(statuses: &[PgStatus]) -> Vec<PgReport> {
    statuses
        .iter()
        .filter_map(|s| {
            Some(PgReport {
                pg: s.pg,
                interval: s.interval,
                state: pg_state(&s.state)?,
                objects: s.objects,
                degraded_objects: s.degraded,
                missing_objects: s.missing,
                recovered_objects: s.recovered,
                note: s.detail.clone(),
                scrub: s.scrub.as_ref().map(scrub_report).unwrap_or_default(),
            })
        })
        .collect()
}

/// What a PG's primary reports of its scrubs.
fn scrub_report(s: &crate::scrub::PgScrub) -> PgScrubReport {
    PgScrubReport {
        last_scrub_unix: s.last_scrub_unix,
        last_deep_scrub_unix: s.last_deep_scrub_unix,
        inconsistent_objects: s.inconsistent,
        repaired_objects: s.repaired,
        unrecoverable_objects: s.unrecoverable_count,
        unrecoverable: s.unrecoverable.iter().map(ToString::to_string).collect(),
        progress: s.progress,
    }
}

/// The cluster-wide state for a primary's PG status; `None` for PGs this
/// OSD does not lead.
fn pg_state(s: &str) -> Option<PgState> {
    Some(match s {
        "peering" => PgState::Peering,
        "incomplete" => PgState::Incomplete,
        s if s.starts_with("inactive") => PgState::Inactive,
        "active+clean" => PgState::ActiveClean,
        s if s.contains("recovering") => PgState::Recovering,
        s if s.contains("degraded") => PgState::Degraded,
        s if s.starts_with("active") => PgState::Active,
        _ => return None,
    })
}

/// The OSD's `/metrics` listener (a task on the control runtime) and its
/// entry in the daemon registry.
struct OsdMetrics {
    server: tokio::task::JoinHandle<()>,
    registration: Option<pontoon_cluster::daemons::DaemonRegistration>,
}

impl OsdMetrics {
    async fn stop(mut self) {
        if let Some(r) = self.registration.take() {
            r.stop().await;
        }
        self.server.abort();
    }
}

/// Serves the OSD's metrics on `cfg.metrics` and registers the OSD in the
/// daemon registry (with that address). A listener that cannot be bound
/// or a registry that cannot be written is logged, not fatal.
async fn start_metrics(
    cfg: &OsdConfig,
    store: &MapStore,
    me: OsdId,
    device_bytes: u64,
    shards: &EtcdShards,
) -> Option<OsdMetrics> {
    use pontoon_cluster::daemons::{DaemonRecord, kind};
    let addr = cfg.metrics?;
    let listener = match pontoon_metrics::server::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(osd = %me, "cannot listen for /metrics on {addr}: {e}");
            return None;
        }
    };
    let local = listener.local_addr().ok()?;
    let txs = shards.txs.clone();
    let counters = shards.metrics.clone();
    let render = pontoon_metrics::render_fn(move || {
        let (txs, counters) = (txs.clone(), counters.clone());
        async move {
            let mut reports = Vec::with_capacity(txs.len());
            for s in &txs {
                let (tx, rx) = oneshot::channel();
                if s.unbounded_send(Cmd::Report(tx)).is_ok()
                    && let Ok(Ok(r)) = tokio::time::timeout(SCRAPE_SHARD_TIMEOUT, rx).await
                {
                    reports.push(r);
                }
            }
            let mut e = pontoon_metrics::Exposition::new();
            add_osd_metrics(&mut e, me, device_bytes, &reports, &counters);
            pontoon_metrics::process::add_process_metrics(&mut e);
            e.render()
        }
    });
    let server = tokio::spawn(async move {
        if let Err(e) = pontoon_metrics::serve(listener, render).await {
            tracing::warn!("metrics listener: {e}");
        }
    });
    tracing::info!(osd = %me, "metrics on http://{local}/metrics");
    let record = DaemonRecord::new(
        kind::OSD,
        &me.0.to_string(),
        &cfg.host,
        Some(local.to_string()),
    );
    let registration = match store.register_daemon(record).await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(osd = %me, "cannot register in the daemon registry: {e}");
            None
        }
    };
    Some(OsdMetrics {
        server,
        registration,
    })
}
