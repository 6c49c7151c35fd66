//! Leases: OSD liveness ([`OsdLease`]) and manager election
//! ([`Leadership`]).
//!
//! Both hold an etcd lease kept alive from a tokio task, and both answer
//! "am I still alive / still the leader?" from the *local clock*, without
//! asking etcd: the lease counts as valid until the send time of the last
//! keepalive etcd acknowledged, plus the TTL, minus a safety margin of a
//! tenth of the TTL (clock-rate differences are parts per million; the
//! margin is far wider). etcd can only expire the lease a full TTL after it
//! *received* that keepalive, which is later, so the holder always stops
//! believing in its lease before anyone else can act on its expiry (given
//! clocks that run at roughly the same rate). That is what lets an OSD
//! fence itself — stop serving writes — before the manager moves its PGs.
//!
//! Renewals go every tenth of the TTL, so an etcd outage shorter than
//! `TTL × 8/10` minus one retry never costs the holder its validity: once
//! a renewal fails, the next ones are tried every [`RETRY_AFTER_FAILURE`],
//! each on a fresh connection to the next endpoint in turn. A fresh
//! connection matters: the shared gRPC channel reconnects with a growing
//! back-off (seen at 1.8 s after a 4 s outage), which could outlast the
//! remaining validity while etcd is already back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{
    Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp, WatchOptions,
};
use pontoon_types::OsdId;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

use crate::ClusterError;
use crate::etcd::{MapStore, OP_TIMEOUT, unix_now};
use crate::keys::{self, LEADER};

/// Shortest lease TTL accepted, in seconds (etcd's own minimum is about 1.5 s).
pub const MIN_TTL_SECS: u64 = 1;
/// Longest lease TTL accepted, in seconds.
pub const MAX_TTL_SECS: u64 = 3600;

/// Validity of a lease as the holder sees it, shared with its keepalive task.
struct Validity {
    /// Reference point of `until_nanos`.
    base: Instant,
    /// Valid until `base + until_nanos`; 0 once the lease is known lost.
    until_nanos: AtomicU64,
    /// Keepalives suspended (fault injection for tests).
    paused: AtomicBool,
}

impl Validity {
    fn extend_to(&self, until: Instant) {
        let nanos = until
            .saturating_duration_since(self.base)
            .as_nanos()
            .clamp(1, u128::from(u64::MAX)) as u64;
        // Never move backwards (a slow answer must not shorten validity),
        // and never resurrect a lost lease.
        let _ = self
            .until_nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                (cur != 0 && nanos > cur).then_some(nanos)
            });
    }

    fn mark_lost(&self) {
        self.until_nanos.store(0, Ordering::Release);
    }

    fn is_lost(&self) -> bool {
        self.until_nanos.load(Ordering::Acquire) == 0
    }

    fn remaining(&self) -> Duration {
        let until = self.until_nanos.load(Ordering::Acquire);
        if until == 0 {
            return Duration::ZERO;
        }
        (self.base + Duration::from_nanos(until)).saturating_duration_since(Instant::now())
    }
}

/// Pause before trying again after a keepalive failed (etcd down or
/// unreachable), instead of a whole period: a lease must be renewed as soon
/// as etcd answers again, or its holder's validity may run out meanwhile.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(200);

/// Longest wait for one renewal (connecting included) before it counts as
/// failed and the next is tried on a fresh connection.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// The part of the TTL a holder gives up as safety margin.
pub fn margin(ttl: Duration) -> Duration {
    ttl / 10
}

/// How often a healthy lease is renewed.
pub fn renew_period(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(50))
}

/// The longest etcd outage a lease holder rides out without its validity
/// lapsing: validity after a renewal, less one period (the outage may
/// begin just before a renewal) and one retry (the first after etcd is
/// back may just miss it).
pub fn outage_tolerance(ttl: Duration) -> Duration {
    (ttl - margin(ttl))
        .saturating_sub(renew_period(ttl) + RETRY_AFTER_FAILURE + ATTEMPT_TIMEOUT / 5)
}

/// An etcd lease kept alive by a background task, with local-clock validity.
struct KeptLease {
    id: i64,
    ttl: Duration,
    validity: Arc<Validity>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    store: MapStore,
    revoked: bool,
}

impl KeptLease {
    async fn grant(store: &MapStore, ttl_secs: u64) -> Result<Self, ClusterError> {
        if !(MIN_TTL_SECS..=MAX_TTL_SECS).contains(&ttl_secs) {
            return Err(ClusterError::InvalidArgument(format!(
                "lease TTL {ttl_secs} s must be between {MIN_TTL_SECS} and {MAX_TTL_SECS} s"
            )));
        }
        let sent = Instant::now();
        // The bound above keeps the TTL far inside i64.
        let resp = store
            .run("grant a lease", |mut c| async move {
                c.lease_grant(ttl_secs as i64, None).await
            })
            .await?;
        let id = resp.id();
        // etcd may raise a TTL below its minimum; trust what it granted.
        let ttl = Duration::from_secs(resp.ttl().max(1).unsigned_abs());
        let validity = Arc::new(Validity {
            base: sent,
            until_nanos: AtomicU64::new(1),
            paused: AtomicBool::new(false),
        });
        validity.extend_to(sent + ttl - margin(ttl));
        let opened = store
            .run("keep a lease alive", |mut c| async move {
                c.lease_keep_alive(id).await
            })
            .await;
        let (keeper, stream) = match opened {
            Ok(ks) => ks,
            Err(e) => {
                let _ = revoke(store, id).await;
                return Err(e);
            }
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(keepalive_task(
            store.clone(),
            id,
            ttl,
            validity.clone(),
            keeper,
            stream,
            stop_rx,
        ));
        Ok(KeptLease {
            id,
            ttl,
            validity,
            stop: Some(stop_tx),
            task: Some(task),
            store: store.clone(),
            revoked: false,
        })
    }

    fn is_valid(&self) -> bool {
        !self.revoked && !self.validity.remaining().is_zero()
    }

    /// Stops the keepalives and revokes the lease, deleting its keys now.
    async fn revoke(&mut self) -> Result<(), ClusterError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = timeout(OP_TIMEOUT, task).await;
        }
        self.validity.mark_lost();
        if self.revoked {
            return Ok(());
        }
        self.revoked = true;
        revoke(&self.store, self.id).await.map(|_| ())
    }
}

/// Revokes lease `id`, deleting its keys. Whether it still existed (one
/// that expired meanwhile is gone, which is what was wanted).
async fn revoke(store: &MapStore, id: i64) -> Result<bool, ClusterError> {
    match store
        .run(
            "revoke a lease",
            |mut c| async move { c.lease_revoke(id).await },
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(ClusterError::Etcd { source, .. })
            if source.to_string().contains("lease not found") =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if self.revoked {
            return;
        }
        self.validity.mark_lost();
        // Best effort: revoke now rather than let the keys linger a TTL.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let store = self.store.clone();
            let id = self.id;
            rt.spawn(async move {
                let _ = timeout(OP_TIMEOUT, revoke(&store, id)).await;
            });
        }
    }
}

/// Keeps lease `id` alive every [`renew_period`] until told to stop, the
/// lease is found expired, or (while paused) never. After a failed renewal
/// the next is tried every [`RETRY_AFTER_FAILURE`] on a fresh connection,
/// each to the next endpoint in turn.
async fn keepalive_task(
    store: MapStore,
    id: i64,
    ttl: Duration,
    validity: Arc<Validity>,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    mut stop: oneshot::Receiver<()>,
) {
    let period = renew_period(ttl);
    let attempt = ATTEMPT_TIMEOUT.min(ttl / 3);
    let mut session = Some((keeper, stream));
    let mut failures: usize = 0;
    let mut pause = period;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = sleep(pause) => {}
        }
        if validity.is_lost() {
            return;
        }
        if validity.paused.load(Ordering::Acquire) {
            continue;
        }
        pause = period.min(RETRY_AFTER_FAILURE);
        let sent = Instant::now();
        let (mut keeper, mut stream) = match session.take() {
            Some(s) => s,
            None => match timeout(attempt, reopen(&store, id, failures)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) if e.to_string().contains("not found") => {
                    tracing::warn!(lease = id, "lease expired in etcd; it cannot be renewed");
                    validity.mark_lost();
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(lease = id, "cannot reopen lease keepalive: {e}");
                    failures += 1;
                    continue;
                }
                Err(_) => {
                    tracing::debug!(lease = id, "reopening lease keepalive timed out");
                    failures += 1;
                    continue;
                }
            },
        };
        let answer = timeout(attempt, async {
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        match answer {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                let granted = Duration::from_secs(resp.ttl().unsigned_abs());
                validity.extend_to(sent + granted - margin(granted));
                if failures > 0 {
                    tracing::info!(lease = id, failures, "lease renewed again");
                }
                failures = 0;
                pause = period;
                session = Some((keeper, stream));
            }
            Ok(Ok(Some(_))) => {
                tracing::warn!(lease = id, "lease expired in etcd; it cannot be renewed");
                validity.mark_lost();
                return;
            }
            // The stream broke or stalled: drop it (a late answer on it
            // could otherwise be credited to a later send time) and use a
            // fresh connection next time.
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => failures += 1,
        }
    }
}

/// A keepalive stream for lease `id` on a fresh connection to the
/// `attempt`-th endpoint (modulo their number).
async fn reopen(
    store: &MapStore,
    id: i64,
    attempt: usize,
) -> Result<(LeaseKeeper, LeaseKeepAliveStream), etcd_client::Error> {
    let mut client = store.fresh_client(attempt).await?;
    client.lease_keep_alive(id).await
}

/// An OSD's liveness: an etcd lease holding `alive/<id>`, kept alive in
/// the background. While the OSD keeps it, the map shows the OSD alive;
/// when the process dies or hangs, etcd deletes the key a TTL later and the
/// manager takes the OSD out of acting sets.
///
/// [`is_valid`](Self::is_valid) turns false before etcd can expire the
/// lease (see the module docs): an OSD must stop acknowledging writes then.
/// A lost lease is never renewed; start a new one (after re-peering).
/// Dropping the handle revokes the lease (best effort; [`stop`](Self::stop)
/// reports errors).
pub struct OsdLease {
    osd: OsdId,
    lease: KeptLease,
}

impl std::fmt::Debug for OsdLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsdLease")
            .field("osd", &self.osd)
            .field("lease", &self.lease.id)
            .field("valid", &self.is_valid())
            .finish()
    }
}

impl OsdLease {
    /// Grants a lease of `ttl_secs`, marks `osd` alive with it, and keeps
    /// it alive from a tokio task. The OSD must be registered.
    pub async fn start(store: &MapStore, osd: OsdId, ttl_secs: u64) -> Result<Self, ClusterError> {
        let rec_key = store.key(&keys::osd_key(osd));
        let rec = store
            .run("look up an OSD", |c| {
                let key = rec_key.clone();
                async move { c.kv_client().get(key, None).await }
            })
            .await?;
        if rec.kvs().is_empty() {
            return Err(ClusterError::NotFound {
                kind: "osd",
                name: osd.to_string(),
            });
        }
        let mut lease = KeptLease::grant(store, ttl_secs).await?;
        let value = format!(r#"{{"lease":{},"since_unix":{}}}"#, lease.id, unix_now());
        let alive_key = store.key(&keys::alive_key(osd));
        let lease_id = lease.id;
        let put = store
            .run("mark an OSD alive", |c| {
                let (key, value) = (alive_key.clone(), value.clone());
                async move {
                    c.kv_client()
                        .put(key, value, Some(PutOptions::new().with_lease(lease_id)))
                        .await
                }
            })
            .await;
        if let Err(e) = put {
            let _ = lease.revoke().await;
            return Err(e);
        }
        Ok(OsdLease { osd, lease })
    }

    /// Revokes the lease that holds `alive/<osd>`, if any: what a new
    /// life of the OSD does about its previous life's lease, so that the
    /// manager sees that life down at once instead of a TTL later. Only
    /// for a process that knows the previous life is dead (it holds the
    /// OSD's device exclusively). Returns whether a lease was revoked.
    pub async fn clear_previous(store: &MapStore, osd: OsdId) -> Result<bool, ClusterError> {
        let key = store.key(&keys::alive_key(osd));
        let resp = store
            .run("look up an OSD's liveness", |c| {
                let key = key.clone();
                async move { c.kv_client().get(key, None).await }
            })
            .await?;
        let Some(found) = resp.kvs().first() else {
            return Ok(false);
        };
        let lease = found.lease();
        if lease == 0 {
            return Ok(false);
        }
        revoke(store, lease).await
    }

    /// End of the lease's validity by the local clock; `None` once it is
    /// lost, revoked or lapsed.
    pub fn valid_until(&self) -> Option<Instant> {
        if self.lease.revoked {
            return None;
        }
        let until = self.lease.validity.until_nanos.load(Ordering::Acquire);
        let at = self.lease.validity.base + Duration::from_nanos(until);
        (until != 0 && at > Instant::now()).then_some(at)
    }

    /// The OSD this lease keeps alive.
    pub fn osd(&self) -> OsdId {
        self.osd
    }

    /// The etcd lease id.
    pub fn lease_id(&self) -> i64 {
        self.lease.id
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    /// Whether the OSD may still consider itself alive, judged from the
    /// local clock (conservatively early). False forever once it turns false
    /// for a lost lease.
    pub fn is_valid(&self) -> bool {
        self.lease.is_valid()
    }

    /// How much longer the lease is certainly valid without another
    /// successful keepalive.
    pub fn remaining(&self) -> Duration {
        if self.lease.revoked {
            return Duration::ZERO;
        }
        self.lease.validity.remaining()
    }

    /// Suspends keepalives, as a hung OSD would. For fault-injection tests:
    /// the lease then expires one TTL later.
    pub fn pause_keepalive(&self) {
        self.lease.validity.paused.store(true, Ordering::Release);
    }

    /// Resumes keepalives after [`pause_keepalive`](Self::pause_keepalive)
    /// (too late if the lease has expired meanwhile).
    pub fn resume_keepalive(&self) {
        self.lease.validity.paused.store(false, Ordering::Release);
    }

    /// Stops keepalives and revokes the lease: the OSD shows down at once.
    pub async fn stop(mut self) -> Result<(), ClusterError> {
        self.lease.revoke().await
    }
}

/// Being the active manager: `mgr/leader` holds this candidate's name,
/// attached to its lease. Dropping the handle resigns (best effort).
pub struct Leadership {
    name: String,
    lease: KeptLease,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name)
            .field("lease", &self.lease.id)
            .field("leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// Becomes the manager leader as `name`, waiting as long as another
    /// candidate holds the key: the key is created only if absent, in one
    /// transaction, and attached to a lease of `ttl_secs` kept alive from
    /// a tokio task. While waiting it watches the key and tries again when
    /// the key is deleted (or every TTL, in case a deletion was missed).
    /// Wrap in a timeout to bound the wait; etcd errors are returned.
    pub async fn campaign(
        store: &MapStore,
        name: &str,
        ttl_secs: u64,
    ) -> Result<Self, ClusterError> {
        if name.is_empty() || name.len() > crate::MAX_NAME_LEN {
            return Err(ClusterError::InvalidArgument(format!(
                "manager name {name:?} must be 1-{} bytes",
                crate::MAX_NAME_LEN
            )));
        }
        let key = store.key(LEADER);
        let mut lease = KeptLease::grant(store, ttl_secs).await?;
        loop {
            if !lease.is_valid() {
                let _ = lease.revoke().await;
                lease = KeptLease::grant(store, ttl_secs).await?;
            }
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    name,
                    Some(PutOptions::new().with_lease(lease.id)),
                )]);
            let resp = store
                .run("campaign for manager leader", |c| {
                    let txn = txn.clone();
                    async move { c.kv_client().txn(txn).await }
                })
                .await?;
            if resp.succeeded() {
                tracing::info!(name, lease = lease.id, "became manager leader");
                return Ok(Leadership {
                    name: name.to_string(),
                    lease,
                });
            }
            let revision = resp.header().map_or(0, |h| h.revision());
            wait_for_delete(store, &key, revision, lease.ttl).await;
        }
    }

    /// Whether this candidate may still act as the leader, judged from the
    /// local clock (conservatively early, like [`OsdLease::is_valid`]).
    pub fn is_leader(&self) -> bool {
        self.lease.is_valid()
    }

    /// This candidate's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The etcd lease holding the leader key.
    pub fn lease_id(&self) -> i64 {
        self.lease.id
    }

    /// Suspends keepalives, as a hung manager would (fault-injection tests).
    pub fn pause_keepalive(&self) {
        self.lease.validity.paused.store(true, Ordering::Release);
    }

    /// Gives up leadership: revokes the lease, deleting the key, so a
    /// waiting candidate takes over at once.
    pub async fn resign(mut self) -> Result<(), ClusterError> {
        self.lease.revoke().await
    }
}

/// Waits (at most `max_wait`) until `key` changes after `revision`.
/// Returns early on any watch trouble; the caller re-checks the key.
async fn wait_for_delete(store: &MapStore, key: &str, revision: i64, max_wait: Duration) {
    let mut wc = store.client().watch_client();
    let options = WatchOptions::new().with_start_revision(revision + 1);
    let wait = async {
        let Ok(mut stream) = wc.watch(key, Some(options)).await else {
            sleep(Duration::from_millis(200)).await;
            return;
        };
        loop {
            match stream.message().await {
                Ok(Some(resp)) => {
                    // Any event (a deletion, or a new holder after one)
                    // is a reason to look again.
                    if resp.canceled() || !resp.events().is_empty() {
                        return;
                    }
                }
                _ => {
                    sleep(Duration::from_millis(200)).await;
                    return;
                }
            }
        }
    };
    let _ = timeout(max_wait, wait).await;
}
