//! The OSD process: opens (or formats) the device, starts one thread per
//! shard with its own io_uring runtime, store slice and TCP port, and runs
//! the control thread (tokio) that registers the OSD in etcd, keeps its
//! liveness lease, feeds map changes to the shards and reports PG states.

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
use pontoon_cluster::{MapStore, OsdLease, OsdReport, PgReport, PgState};
use pontoon_net::Limits;
use pontoon_store::{FileDevice, FormatOptions, Store, StoreStats};
use pontoon_types::OsdId;

use crate::map::ShardMap;
use crate::peers::NetPeers;
use crate::shard::{PgStatus, Shard};
use crate::view::shard_map;

/// How often the control loop looks at its lease and the shards' PG states.
const TICK: Duration = Duration::from_millis(500);
/// Longest time between two writes of an unchanged report.
const REPORT_REFRESH: Duration = Duration::from_secs(10);

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
    /// Cluster name (etcd prefix).
    pub cluster: String,
    /// Liveness lease time-to-live.
    pub lease_ttl: Duration,
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
}

enum Cmd {
    Start(OsdId),
    Map(Arc<ShardMap>),
    Fence(bool),
    Status(oneshot::Sender<(Vec<PgStatus>, StoreStats)>),
    Stop,
}

struct ShardThread {
    addr: SocketAddr,
    tx: mpsc::UnboundedSender<Cmd>,
    thread: JoinHandle<()>,
}

/// Runs the OSD until `stop` is set. Returns the OSD's id.
pub fn run(cfg: OsdConfig, stop: Arc<AtomicBool>) -> Result<OsdId, OsdError> {
    let dev_err = |what: String| OsdError::Device {
        path: cfg.device.display().to_string(),
        what,
    };
    let slices = prepare_device(&cfg).map_err(dev_err)?;
    let mut shards = Vec::new();
    for i in 0..slices {
        shards.push(start_shard(&cfg, i, slices).map_err(OsdError::Thread)?);
    }
    let addrs: Vec<SocketAddr> = shards.iter().map(|s| s.addr).collect();
    let txs: Vec<_> = shards.iter().map(|s| s.tx.clone()).collect();
    let device_bytes = std::fs::metadata(&cfg.device).map(|m| m.len()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| OsdError::Thread(format!("control runtime: {e}")))?;
    let result = rt.block_on(control(&cfg, addrs, device_bytes, &txs, &stop));
    for s in shards {
        let _ = s.tx.unbounded_send(Cmd::Stop);
        if s.thread.join().is_err() {
            tracing::error!("a shard thread panicked");
        }
    }
    result
}

/// Creates and formats the device if needed; returns its slice count.
fn prepare_device(cfg: &OsdConfig) -> Result<u32, String> {
    if !cfg.device.exists() {
        let size = cfg
            .create_size
            .ok_or("does not exist (give a size to create it)")?;
        FileDevice::create_file(&cfg.device, size).map_err(|e| format!("creating: {e}"))?;
    }
    let rt = compio::runtime::Runtime::new().map_err(|e| format!("io_uring: {e}"))?;
    rt.block_on(async {
        let dev = FileDevice::open(&cfg.device).map_err(|e| format!("opening: {e}"))?;
        match pontoon_store::read_header(&dev, None).await {
            Ok(h) => Ok(h.slices),
            Err(pontoon_store::StoreError::NotFormatted(_)) => {
                let opts = FormatOptions {
                    slices: cfg.shards.max(1),
                    ..Default::default()
                };
                Store::format(&dev, None, &opts)
                    .await
                    .map_err(|e| format!("formatting: {e}"))?;
                tracing::info!(device = %cfg.device.display(), slices = opts.slices, "formatted");
                Ok(opts.slices)
            }
            Err(e) => Err(format!("reading its header: {e}")),
        }
    })
}

/// Starts shard `index`: opens its slice, binds its port, then waits for
/// the OSD id before serving.
fn start_shard(cfg: &OsdConfig, index: u32, slices: u32) -> Result<ShardThread, String> {
    let (tx, mut rx) = mpsc::unbounded::<Cmd>();
    let (ready_tx, ready_rx) = std_mpsc::channel::<Result<SocketAddr, String>>();
    let device = cfg.device.clone();
    let listen = cfg.listen;
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
                    let (store, bg) = Store::open(dev, None, index)
                        .await
                        .map_err(|e| e.to_string())?;
                    let listener = compio::net::TcpListener::bind(SocketAddr::new(listen, 0))
                        .await
                        .map_err(|e| format!("binding {listen}: {e}"))?;
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
                let me = loop {
                    match rx.next().await {
                        Some(Cmd::Start(me)) => break me,
                        Some(Cmd::Stop) | None => {
                            let _ = store.close().await;
                            return;
                        }
                        Some(_) => {}
                    }
                };
                let shard = Shard::new(me, index, slices, store.clone(), NetPeers::new(me));
                let server = compio::runtime::spawn(pontoon_net::serve(
                    listener,
                    shard.clone(),
                    Limits::default(),
                ));
                while let Some(cmd) = rx.next().await {
                    match cmd {
                        Cmd::Map(m) => {
                            let m = Rc::new((*m).clone());
                            shard.peers().set_map(m.clone());
                            shard.apply_map(m);
                        }
                        Cmd::Fence(f) => shard.set_fenced(f),
                        Cmd::Status(reply) => {
                            let _ = reply.send((shard.pg_status(), shard.store().stats()));
                        }
                        Cmd::Stop => break,
                        Cmd::Start(_) => {}
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
    Ok(ShardThread { addr, tx, thread })
}

/// The control loop: register, lease, maps in, reports out.
async fn control(
    cfg: &OsdConfig,
    addrs: Vec<SocketAddr>,
    device_bytes: u64,
    shards: &[mpsc::UnboundedSender<Cmd>],
    stop: &AtomicBool,
) -> Result<OsdId, OsdError> {
    let cl = |e: pontoon_cluster::ClusterError| OsdError::Cluster(e.to_string());
    let store = MapStore::connect(&cfg.etcd, &cfg.cluster)
        .await
        .map_err(cl)?;
    if let Some(want) = cfg.id {
        // Ids are never reused: asking for one the cluster handed out
        // before (and that is gone) would register a new OSD under another
        // id. Refuse instead of leaving a stray record behind.
        let map = store.load().await.map_err(cl)?;
        let taken_before = map.next.osd > want.0 || map.osds.keys().any(|o| o.0 > want.0);
        if !map.osds.contains_key(&want) && taken_before {
            return Err(OsdError::Cluster(format!(
                "{want} is not registered and its id was handed out before (ids are never reused); \
                 start without an id to get a new one"
            )));
        }
    }
    let weight = (device_bytes >> 20).max(1);
    let me = store
        .register_osd(&cfg.host, addrs.clone(), weight, device_bytes, cfg.id)
        .await
        .map_err(cl)?;
    if cfg.id.is_some_and(|want| want != me) {
        return Err(OsdError::Cluster(format!(
            "asked for id {:?} but the cluster registered this OSD as {me}",
            cfg.id
        )));
    }
    tracing::info!(osd = %me, ?addrs, "registered");
    let send_all = |c: &dyn Fn() -> Cmd| {
        for s in shards {
            let _ = s.unbounded_send(c());
        }
    };
    send_all(&|| Cmd::Start(me));
    // Whole seconds, rounded up: a lease is never shorter than asked.
    let ttl = cfg
        .lease_ttl
        .as_millis()
        .div_ceil(1000)
        .clamp(1, u128::from(u64::MAX)) as u64;
    let mut maps = store.watch().await.map_err(cl)?;
    wait_to_be_seen_down(me, &mut maps, cfg.lease_ttl).await;
    let mut lease = OsdLease::start(&store, me, ttl).await.map_err(cl)?;
    tracing::info!(osd = %me, ttl_secs = ttl, "alive");
    let mut fenced = false;
    let mut last_epoch = None;
    let mut last_report: Option<(OsdReport, Instant)> = None;
    let mut tick = tokio::time::interval(TICK);
    while !stop.load(Ordering::Relaxed) {
        tokio::select! {
            changed = maps.changed() => {
                if changed.is_err() {
                    return Err(OsdError::Cluster("map watch ended".into()));
                }
            }
            _ = tick.tick() => {}
        }
        let map = maps.borrow_and_update().clone();
        if last_epoch != Some(map.epoch) {
            last_epoch = Some(map.epoch);
            tracing::debug!(osd = %me, epoch = %map.epoch, "new map");
            let view = Arc::new(shard_map(&map));
            send_all(&|| Cmd::Map(view.clone()));
        }
        let valid = lease.is_valid();
        if valid == fenced {
            fenced = !valid;
            tracing::warn!(osd = %me, fenced, "liveness lease changed");
            send_all(&|| Cmd::Fence(fenced));
        }
        if fenced {
            // Our lease may be gone: take a new one; the manager will see us
            // come back and start new intervals.
            match OsdLease::start(&store, me, ttl).await {
                Ok(l) => lease = l,
                Err(e) => tracing::warn!("renewing the liveness lease: {e}"),
            }
            continue;
        }
        let report = match collect_report(me, map.epoch, shards).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("report: {e}");
                continue;
            }
        };
        // Write only what changed (and a heartbeat now and then): etcd keeps
        // every revision until compaction.
        let due = last_report
            .as_ref()
            .is_none_or(|(r, at)| *r != report || at.elapsed() >= REPORT_REFRESH);
        if due {
            match store.put_report(&report).await {
                Ok(()) => last_report = Some((report, Instant::now())),
                Err(e) => tracing::debug!("report: {e}"),
            }
        }
    }
    // Revoking shows the OSD down at once instead of a TTL later.
    if let Err(e) = lease.stop().await {
        tracing::warn!(osd = %me, "revoking the liveness lease: {e}");
    }
    tracing::info!(osd = %me, "stopped");
    Ok(me)
}

/// Longest wait for the manager to see a restarted OSD down, beyond its
/// previous life's lease.
const SEEN_DOWN_GRACE: Duration = Duration::from_secs(30);

/// Whether `me` is a member of any PG's current interval in `map`.
pub fn in_any_interval(map: &pontoon_cluster::ClusterMap, me: OsdId) -> bool {
    map.pgs.values().any(|pg| pg.acting.contains(&me))
}

/// A restarted OSD must not serve in an interval its previous life served
/// in: the primaries of that interval peered with the old life, so they
/// would not notice what this life lost or what the old life left in
/// flight (a sub-operation arriving after this life peered again). So
/// before taking its lease, an OSD that is still in some acting set waits
/// until the old lease has lapsed and the manager has taken it out of every
/// acting set; its new lease then brings it back in new intervals, which
/// peer afresh. Bounded: without a manager nothing would ever change.
async fn wait_to_be_seen_down(
    me: OsdId,
    maps: &mut tokio::sync::watch::Receiver<Arc<pontoon_cluster::ClusterMap>>,
    lease_ttl: Duration,
) {
    if !in_any_interval(&maps.borrow(), me) {
        return;
    }
    tracing::info!(osd = %me, "waiting for the cluster to see this OSD's previous life down");
    let deadline = tokio::time::Instant::now() + lease_ttl + SEEN_DOWN_GRACE;
    while in_any_interval(&maps.borrow_and_update(), me) {
        match tokio::time::timeout_at(deadline, maps.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(osd = %me, "the manager did not mark this OSD down in time; starting in its current intervals");
                return;
            }
        }
    }
}

/// Collects every shard's PG states and space into a report.
async fn collect_report(
    me: OsdId,
    epoch: pontoon_types::Epoch,
    shards: &[mpsc::UnboundedSender<Cmd>],
) -> Result<OsdReport, String> {
    let mut pgs = Vec::new();
    let (mut used, mut capacity) = (0, 0);
    for s in shards {
        let (tx, rx) = oneshot::channel();
        if s.unbounded_send(Cmd::Status(tx)).is_err() {
            return Err("a shard stopped".into());
        }
        let (st, stats) = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .map_err(|_| "a shard did not answer".to_string())?
            .map_err(|_| "a shard stopped".to_string())?;
        used += stats.used_bytes;
        capacity += stats.capacity_bytes;
        pgs.extend(pg_reports(&st));
    }
    Ok(OsdReport {
        osd: me,
        epoch,
        pgs,
        used_bytes: used,
        capacity_bytes: capacity,
    })
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
            })
        })
        .collect()
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
