//! Pontoon's manager: the control daemon that turns OSD liveness into
//! placement. One manager is active per cluster (etcd election through
//! [`Leadership`]); others wait for it to go.
//!
//! The active manager runs a loop, woken by every map change (an OSD's
//! liveness key appearing or expiring is one) and at least every
//! [`MgrConfig::interval`]: it reads the OSDs' reports and applies
//! [`Manager::pass`] to the map inside one [`MapStore::update_as_leader`],
//! which commits (and bumps the epoch) only when something changed, and
//! only while this manager still holds the leader lease. See
//! [`Manager::pass`] for the rules: held down on peers' reports, down, out
//! after the out-after (the map's, else [`MgrConfig::out_after`]) on this
//! manager's monotonic clock unless `noout` or maintenance holds it, up and
//! in again, acting sets recomputed, past intervals trimmed once a PG is
//! clean. The simulator runs the same [`Manager`].

#![warn(missing_docs)]

pub mod admin;
pub mod balancer;
pub mod dashboard;
mod decide;
pub mod endurance;
pub mod flags;
pub mod forecast;
pub mod health;
pub mod history;
pub mod http;
pub mod listings;
pub mod metrics;
pub mod sampler;
pub mod status;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pontoon_cluster::{ClusterError, Leadership, MapStore};
use tokio::sync::watch;
use tokio::time::{MissedTickBehavior, sleep};

pub use decide::{Decision, MIN_REPORTERS, Manager};

/// How the manager runs.
#[derive(Clone, Debug)]
pub struct MgrConfig {
    /// This candidate's name, stored in `mgr/leader` while it leads.
    pub name: String,
    /// How long an OSD may be down before it is marked out, unless the
    /// map sets it (`pontoon config set out_after`), which wins.
    pub out_after: Duration,
    /// TTL of the leader lease, in seconds: how long the cluster is without
    /// a manager after the active one dies.
    pub lease_ttl_secs: u64,
    /// Longest pause between two passes when nothing changes.
    pub interval: Duration,
    /// How often the capacity history is sampled ([`history`]).
    pub history_interval: Duration,
}

/// Default time an OSD may be down before it is marked out, when the map
/// sets none (`pontoon config set out_after`): ten minutes, as Ceph.
pub const DEFAULT_OUT_AFTER: Duration =
    Duration::from_secs(pontoon_cluster::osd_admin::DEFAULT_OUT_AFTER_SECS);
/// Default TTL of the leader lease, in seconds.
pub const DEFAULT_LEASE_TTL_SECS: u64 = 5;
/// Default longest pause between two passes.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Pause before retrying after etcd trouble.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

impl MgrConfig {
    /// A configuration with the defaults and candidate name `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            out_after: DEFAULT_OUT_AFTER,
            lease_ttl_secs: DEFAULT_LEASE_TTL_SECS,
            interval: DEFAULT_INTERVAL,
            history_interval: history::DEFAULT_INTERVAL,
        }
    }
}

/// A manager name unique enough for this host: `<host>-<pid>`.
pub fn default_name(host: &str) -> String {
    format!("{host}-{}", std::process::id())
}

/// Whether `stop` says to stop (set to true, or its sender is gone).
fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

/// Waits until `stop` says to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // Err: the sender is gone, which also means stop.
    let _ = stop.wait_for(|s| *s).await;
}

/// Seconds since the Unix epoch (0 if the clock is before 1970).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs the manager until `stop` turns true (or its sender is dropped):
/// campaigns for leadership, then makes decisions while it leads, and
/// campaigns again if it loses the lease. etcd errors are logged and
/// retried; on stop, leadership is resigned so another manager takes over
/// at once.
pub async fn run(store: MapStore, cfg: MgrConfig, mut stop: watch::Receiver<bool>) {
    while !stopping(&stop) {
        tracing::info!(name = %cfg.name, cluster = store.cluster(), "campaigning for manager leader");
        let leader = tokio::select! {
            _ = stopped(&mut stop) => return,
            r = Leadership::campaign(&store, &cfg.name, cfg.lease_ttl_secs) => r,
        };
        let leader = match leader {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("campaign failed: {e}");
                tokio::select! {
                    _ = stopped(&mut stop) => return,
                    _ = sleep(RETRY_PAUSE) => continue,
                }
            }
        };
        tracing::info!(name = %cfg.name, out_after = ?cfg.out_after, "active manager");
        // Timers start afresh with each term: they run on this process's
        // monotonic clock from when it saw an OSD down.
        let mut manager = Manager::new(cfg.out_after);
        lead(&store, &cfg, &leader, &mut manager, &mut stop).await;
        if let Err(e) = leader.resign().await {
            tracing::debug!("resigning: {e}");
        }
    }
}

/// The decision loop of the active manager. Returns on stop or when
/// leadership is lost.
async fn lead(
    store: &MapStore,
    cfg: &MgrConfig,
    leader: &Leadership,
    manager: &mut Manager,
    stop: &mut watch::Receiver<bool>,
) {
    let mut maps = loop {
        match store.watch().await {
            Ok(m) => break m,
            Err(e) => {
                tracing::warn!("watching the map: {e}");
                tokio::select! {
                    _ = stopped(stop) => return,
                    _ = sleep(RETRY_PAUSE) => {}
                }
            }
        }
        if !leader.is_leader() {
            return;
        }
    };
    let mut tick = tokio::time::interval(cfg.interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Loads the history this term continues at its first tick.
    let mut sampler = sampler::Sampler::new(cfg.history_interval);
    let mut balancer = balancer::Balancer::new();
    loop {
        tokio::select! {
            _ = stopped(stop) => return,
            changed = maps.changed() => {
                if changed.is_err() {
                    tracing::warn!("the map watch ended");
                    return;
                }
            }
            _ = tick.tick() => {}
        }
        maps.borrow_and_update();
        if !leader.is_leader() {
            tracing::warn!(name = %cfg.name, "lost the manager lease");
            return;
        }
        let map = maps.borrow().clone();
        sampler.tick(store, leader, &map).await;
        match pass(store, leader, manager).await {
            Ok(()) => {}
            Err(ClusterError::NotLeader) => {
                tracing::warn!(name = %cfg.name, "no longer the manager leader");
                return;
            }
            Err(e) => tracing::warn!("manager pass failed: {e}"),
        }
        if balancer.due(Instant::now(), &map.settings.balancer) {
            let round =
                balancer::run_round(store, leader, &mut balancer, &cfg.name, norebalance).await;
            match round {
                Ok(_) => {}
                Err(ClusterError::NotLeader) => {
                    tracing::warn!(name = %cfg.name, "no longer the manager leader");
                    return;
                }
                Err(e) => tracing::warn!("balancer round failed: {e}"),
            }
        }
    }
}

/// Whether the map's `norebalance` flag holds the balancer back.
fn norebalance(map: &pontoon_cluster::ClusterMap) -> bool {
    map.settings
        .osd
        .has(pontoon_cluster::osd_admin::OsdFlag::Norebalance)
}

/// One pass: read the reports, decide, commit if anything changed, log.
async fn pass(
    store: &MapStore,
    leader: &Leadership,
    manager: &mut Manager,
) -> Result<(), ClusterError> {
    let reports = store.reports().await?;
    let (now, unix) = (Instant::now(), unix_now());
    let mut decided = Vec::new();
    let updated = store
        .update_as_leader(leader, |m| {
            decided = manager.pass(m, &reports, now, unix)?;
            Ok::<_, ClusterError>(!decided.is_empty())
        })
        .await?;
    if updated.committed {
        for d in &decided {
            tracing::info!(epoch = %updated.map.epoch, "{d}");
        }
    }
    Ok(())
}
