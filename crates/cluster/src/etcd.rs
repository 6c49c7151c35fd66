//! [`MapStore`]: the cluster map in etcd v3 — consistent loads, a watched
//! snapshot, optimistic updates and the operator-facing operations built on
//! them. See the crate docs for the key layout and consistency argument.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, KvClient, Txn, TxnOp, TxnOpResponse,
    WatchClient, WatchOptions,
};
use pontoon_types::{BLOCK_SIZE_U64, Epoch, OsdId, PgId};
use tokio::sync::watch;
use tokio::time::{sleep, timeout};

use crate::ScrubRequest;
use crate::etcd_auth::{Credentials, EtcdAuth};
use crate::keys::{self, EPOCH, LEADER};
use crate::model::{
    ClusterMap, DEFAULT_OBJECT_SIZE, FailureDomain, MAX_PGS_PER_POOL, NVMF_DISCOVERY_NQN,
    NVMF_MAX_HOSTS, NVMF_MAX_NAMESPACES, NVMF_MAX_NQN_LEN, NVMF_MAX_NSID, NvmfHostAuthRecord,
    NvmfNamespaceRecord, NvmfSubsystemRecord, OsdRecord, OsdReport, PoolRecord, VolumeRecord,
    format_uuid, is_valid_name,
};
use crate::pgmap::recompute;
use crate::space::FullRatios;
use crate::{ClusterError, Leadership};

/// How long [`MapStore::connect`] waits for etcd to answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long any single etcd request may take before it counts as unavailable.
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times [`MapStore::update`] tries before giving up with
/// [`ClusterError::Conflict`].
pub const UPDATE_ATTEMPTS: u32 = 16;
/// Largest etcd response accepted (a full map of many large pools).
const MAX_MESSAGE: usize = 256 << 20;
/// How long a watch may stay quiet before the watcher checks, with a
/// linearizable read, that its member still serves the current map.
const WATCH_CHECK: Duration = Duration::from_secs(2);
/// How long the watcher lets a burst of changes settle before reloading.
const WATCH_COALESCE: Duration = Duration::from_millis(20);
/// Longest pause between attempts to re-establish a broken watch.
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long moving to another etcd member may take per member.
const FAILOVER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a fresh connection for a lease renewal may take to open.
const FRESH_CONNECT_TIMEOUT: Duration = Duration::from_millis(800);
/// Most shards (listening addresses) one OSD may register.
pub const MAX_SHARDS: usize = 1024;

/// Whether an etcd error says the member did not serve the request (it is
/// down, cut off, or without a leader), so another member may.
fn member_failed(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown
        ),
        _ => false,
    }
}

/// The connection to one etcd member at a time, moved to the next member
/// when the current one fails. One member per client rather than a
/// balanced channel over all of them: a balanced channel kept sending half
/// of the requests to a member that was gone.
struct Conn {
    endpoints: Vec<String>,
    current: std::sync::Mutex<(usize, Client)>,
    /// TLS and user of every connection (the files read once, at connect).
    creds: Credentials,
    /// The key read to check that a member answers (the cluster's
    /// prefix: a user limited to it may read nothing else).
    probe: String,
}

impl Conn {
    fn current(&self) -> (usize, Client) {
        match self.current.lock() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// After member `failed` failed: connects to the next members in turn
    /// (bounded), and uses the first that answers. Another caller may have
    /// moved on already; then nothing is done.
    async fn fail_over(&self, failed: usize) {
        let n = self.endpoints.len();
        for step in 1..=n {
            if self.current().0 != failed {
                return;
            }
            let i = (failed + step) % n;
            if let Ok(client) = connect_member(
                &self.endpoints[i],
                FAILOVER_CONNECT_TIMEOUT,
                &self.creds,
                &self.probe,
            )
            .await
            {
                let mut cur = match self.current.lock() {
                    Ok(c) => c,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if cur.0 == failed {
                    tracing::info!(from = %self.endpoints[failed], to = %self.endpoints[i], "etcd: moving to another member");
                    *cur = (i, client);
                }
                return;
            }
        }
    }
}

/// How a client of one member connects: within `connect_timeout`, with
/// keep-alives, asking for a leader on every request (a member cut off
/// from the others refuses rather than serving stale reads), with the
/// process's TLS settings and etcd user.
fn member_options(connect_timeout: Duration, creds: &Credentials) -> ConnectOptions {
    creds.apply(
        ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true),
    )
}

/// A client of the one member at `endpoint`, once it answers a read of
/// `probe` within `within` (a member without a leader refuses it).
async fn connect_member(
    endpoint: &str,
    within: Duration,
    creds: &Credentials,
    probe: &str,
) -> Result<Client, String> {
    let attempt = async {
        let client = Client::connect([endpoint], Some(member_options(within, creds)))
            .await
            .map_err(|e| e.to_string())?;
        client
            .kv_client()
            .get(probe, Some(GetOptions::new().with_count_only()))
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(client)
    };
    match timeout(within, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// Seconds since the Unix epoch by the local clock (0 if it is before 1970).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A jittered, growing pause before retry `attempt` (1-based): 5 ms doubling
/// up to 200 ms, times 0.5–1.5, so two conflicting writers fall out of step.
async fn backoff(attempt: u32) {
    let base = 5u64 << attempt.min(6).saturating_sub(1);
    let base = base.min(200);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    let jitter = pontoon_types::mix64(nanos ^ u64::from(attempt) ^ u64::from(std::process::id()));
    let ms = base / 2 + jitter % (base + 1);
    sleep(Duration::from_millis(ms)).await;
}

/// The result of [`MapStore::update`].
#[derive(Clone, Debug)]
pub struct Updated {
    /// The map as committed (its epoch is the new one) or, if the closure
    /// reported no change, as read.
    pub map: ClusterMap,
    /// Whether anything was written.
    pub committed: bool,
}

/// A map as read, with what [`MapStore::update`] needs to write it back.
struct Loaded {
    map: ClusterMap,
    /// Relative key → stored value, for every map key except `alive/`.
    raw: BTreeMap<String, Vec<u8>>,
    /// Mod revision of the `epoch` key (0 if it does not exist yet).
    epoch_mod_revision: i64,
    /// etcd revision the read saw.
    revision: i64,
}

/// The cluster map of one cluster in etcd. Cheap to clone (one shared
/// connection); every method is safe to call concurrently.
#[derive(Clone)]
pub struct MapStore {
    conn: Arc<Conn>,
    cluster: String,
    prefix: String,
    endpoints: String,
    endpoint_list: Arc<Vec<String>>,
}

impl std::fmt::Debug for MapStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapStore")
            .field("cluster", &self.cluster)
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl MapStore {
    /// [`MapStore::connect_with`] without TLS or credentials: for an etcd
    /// that asks for none (tests, a `pontoon up --etcd-insecure` cluster).
    pub async fn connect(endpoints: &[String], cluster: &str) -> Result<Self, ClusterError> {
        Self::connect_with(endpoints, cluster, &EtcdAuth::none()).await
    }

    /// Connects to etcd at `endpoints` (`host:port`, `http://host:port` or,
    /// with TLS, `https://host:port`) for the cluster named `cluster`, with
    /// `auth`'s TLS settings and user: to the first member, in order, that
    /// answers within [`CONNECT_TIMEOUT`]. An unreachable etcd, a refused
    /// certificate or password, is reported here, not at the first
    /// operation. Requests go to that member until it fails, then to the
    /// next that answers.
    pub async fn connect_with(
        endpoints: &[String],
        cluster: &str,
        auth: &EtcdAuth,
    ) -> Result<Self, ClusterError> {
        if !is_valid_name(cluster) {
            return Err(ClusterError::InvalidArgument(format!(
                "cluster name {cluster:?} must be 1-{} characters of [A-Za-z0-9._-]",
                crate::MAX_NAME_LEN
            )));
        }
        if endpoints.is_empty() {
            return Err(ClusterError::InvalidArgument(
                "no etcd endpoints given".into(),
            ));
        }
        for ep in endpoints {
            auth.check_endpoint(ep)?;
        }
        let creds = auth.load()?;
        let prefix = format!("/pontoon/{cluster}/");
        let joined = endpoints.join(",");
        let mut why = Vec::new();
        let mut found = None;
        for (i, ep) in endpoints.iter().enumerate() {
            match connect_member(ep, CONNECT_TIMEOUT, &creds, &prefix).await {
                Ok(client) => {
                    found = Some((i, client));
                    break;
                }
                Err(e) => why.push(format!("{ep}: {e}")),
            }
        }
        let Some(current) = found else {
            return Err(ClusterError::Unavailable(format!(
                "cannot reach etcd at {joined}: {}",
                why.join("; ")
            )));
        };
        Ok(MapStore {
            conn: Arc::new(Conn {
                endpoints: endpoints.to_vec(),
                current: std::sync::Mutex::new(current),
                creds,
                probe: prefix.clone(),
            }),
            cluster: cluster.to_string(),
            prefix,
            endpoints: joined,
            endpoint_list: Arc::new(endpoints.to_vec()),
        })
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The etcd key prefix of this cluster, `/pontoon/<cluster>/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The absolute etcd key of a relative one.
    pub(crate) fn key(&self, rel: &str) -> String {
        format!("{}{rel}", self.prefix)
    }

    pub(crate) fn client(&self) -> Client {
        self.conn.current().1
    }

    /// Runs one etcd request built by `f` on the current member's client,
    /// naming it in errors; if that member does not serve it (down, cut
    /// off, without a leader, or silent for [`OP_TIMEOUT`]), moves to the
    /// next member and tries there, once per member.
    pub(crate) async fn run<T, F, Fut>(&self, op: &'static str, mut f: F) -> Result<T, ClusterError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last = None;
        for _ in 0..self.conn.endpoints.len().max(1) {
            let (member, client) = self.conn.current();
            match timeout(OP_TIMEOUT, f(client)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(source)) if !member_failed(&source) => {
                    return Err(ClusterError::Etcd { op, source });
                }
                Ok(Err(source)) => last = Some(ClusterError::Etcd { op, source }),
                Err(_) => {
                    last = Some(ClusterError::Unavailable(format!(
                        "no answer to {op} within {OP_TIMEOUT:?}"
                    )));
                }
            }
            self.conn.fail_over(member).await;
        }
        Err(last.unwrap_or_else(|| ClusterError::Unavailable(format!("{op}: no etcd member"))))
    }

    /// Moves to the next etcd member if the current one is `member`.
    async fn fail_over_from(&self, member: usize) {
        self.conn.fail_over(member).await;
    }

    /// A new connection of its own to one endpoint (`attempt` modulo their
    /// number, so successive attempts go round them), bypassing the shared
    /// channel and its reconnect back-off. For renewals that must not wait.
    pub(crate) async fn fresh_client(&self, attempt: usize) -> Result<Client, etcd_client::Error> {
        let n = self.endpoint_list.len().max(1);
        let ep = self.endpoint_list[attempt % n].clone();
        Client::connect(
            [ep],
            Some(member_options(FRESH_CONNECT_TIMEOUT, &self.conn.creds)),
        )
        .await
    }

    /// The map's epoch as etcd holds it now (a linearizable read).
    pub async fn epoch(&self) -> Result<Epoch, ClusterError> {
        let key = self.key(EPOCH);
        let resp = self
            .run("read the map epoch", |c| {
                let key = key.clone();
                async move { kv_of(&c).get(key, None).await }
            })
            .await?;
        match resp.kvs().first() {
            None => Ok(Epoch(0)),
            Some(kv) => keys::decode_epoch(kv.value()),
        }
    }

    /// The current member, and a watch client of it.
    fn watch_client(&self) -> (usize, WatchClient) {
        let (member, client) = self.conn.current();
        (
            member,
            client.watch_client().max_decoding_message_size(MAX_MESSAGE),
        )
    }

    /// Strips the prefix from an absolute key.
    fn rel<'a>(&self, key: &'a [u8]) -> Result<&'a str, ClusterError> {
        let key = std::str::from_utf8(key).map_err(|_| ClusterError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: "key is not UTF-8".into(),
        })?;
        key.strip_prefix(self.prefix.as_str())
            .ok_or_else(|| ClusterError::Corrupt {
                key: key.to_string(),
                reason: "key outside the cluster prefix".into(),
            })
    }

    /// Reads the whole map in one transaction (one etcd revision).
    async fn load_raw(&self) -> Result<Loaded, ClusterError> {
        let ops: Vec<TxnOp> = keys::MAP_RANGES
            .iter()
            .map(|r| {
                // Prefixes end in `/`; the others are single keys.
                let opts = r.ends_with('/').then(|| GetOptions::new().with_prefix());
                TxnOp::get(self.key(r), opts)
            })
            .collect();
        let resp = self
            .run("load the cluster map", |c| {
                let txn = Txn::new().and_then(ops.clone());
                async move { kv_of(&c).txn(txn).await }
            })
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let mut raw = BTreeMap::new();
        let mut alive = Vec::new();
        let mut epoch_mod_revision = 0;
        for op in resp.op_responses() {
            let TxnOpResponse::Get(get) = op else {
                continue;
            };
            for kv in get.kvs() {
                let rel = self.rel(kv.key())?;
                if rel.starts_with(keys::ALIVE) {
                    alive.push((rel.to_string(), kv.value().to_vec()));
                    continue;
                }
                if rel == EPOCH {
                    epoch_mod_revision = kv.mod_revision();
                }
                raw.insert(rel.to_string(), kv.value().to_vec());
            }
        }
        let map = keys::decode(
            &self.cluster,
            raw.iter()
                .chain(alive.iter().map(|(k, v)| (k, v)))
                .map(|(k, v)| (k.as_str(), v.as_slice())),
        )?;
        Ok(Loaded {
            map,
            raw,
            epoch_mod_revision,
            revision,
        })
    }

    /// Reads the current map (linearizable: it includes every update
    /// committed before the call).
    pub async fn load(&self) -> Result<ClusterMap, ClusterError> {
        Ok(self.load_raw().await?.map)
    }

    /// A receiver that always holds the latest map. A background task
    /// watches the cluster prefix and reloads the map after each change to
    /// it (bursts within 20 ms coalesce into one reload; report and leader
    /// changes are ignored); if the watch breaks it reloads and watches
    /// again, backing off up to 2 s between tries. The task ends when every
    /// receiver is dropped. Must be called inside a tokio runtime.
    pub async fn watch(&self) -> Result<watch::Receiver<Arc<ClusterMap>>, ClusterError> {
        let loaded = self.load_raw().await?;
        let (tx, rx) = watch::channel(Arc::new(loaded.map));
        tokio::spawn(self.clone().watch_task(tx, loaded.revision));
        Ok(rx)
    }

    /// Reloads and publishes the map if it differs; returns the revision read.
    async fn republish(&self, tx: &watch::Sender<Arc<ClusterMap>>) -> Result<i64, ClusterError> {
        let loaded = self.load_raw().await?;
        if **tx.borrow() != loaded.map {
            tx.send_replace(Arc::new(loaded.map));
        }
        Ok(loaded.revision)
    }

    async fn watch_task(self, tx: watch::Sender<Arc<ClusterMap>>, mut revision: i64) {
        let mut pause = Duration::from_millis(50);
        loop {
            if tx.is_closed() {
                return;
            }
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let (member, mut wc) = self.watch_client();
            let stream = timeout(OP_TIMEOUT, wc.watch(self.prefix.clone(), Some(options))).await;
            let mut member_failed = true;
            if let Ok(Ok(mut stream)) = stream {
                loop {
                    let msg = tokio::select! {
                        _ = tx.closed() => return,
                        m = stream.message() => Some(m),
                        _ = sleep(WATCH_CHECK) => None,
                    };
                    let Some(msg) = msg else {
                        // Quiet for a while: a member cut off from the
                        // others keeps a watch open and silent. A
                        // linearizable read says whether the map moved on.
                        match self.epoch().await {
                            Ok(e) if e == tx.borrow().epoch => {}
                            Ok(_) => {
                                member_failed = false;
                                break;
                            }
                            Err(e) => {
                                tracing::debug!(cluster = %self.cluster, "map check failed: {e}");
                                break;
                            }
                        }
                        if self.conn.current().0 != member {
                            member_failed = false;
                            break;
                        }
                        continue;
                    };
                    let resp = match msg {
                        Ok(Some(resp)) => resp,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(cluster = %self.cluster, "map watch broke: {e}");
                            break;
                        }
                    };
                    if resp.canceled() || resp.compact_revision() > 0 {
                        tracing::debug!(cluster = %self.cluster, reason = resp.cancel_reason(), "map watch cancelled");
                        member_failed = resp.compact_revision() == 0;
                        break;
                    }
                    pause = Duration::from_millis(50);
                    let relevant = resp.events().iter().any(|ev| {
                        ev.kv().is_some_and(|kv| {
                            kv.mod_revision() > revision
                                && self.rel(kv.key()).is_ok_and(keys::is_map_key)
                        })
                    });
                    if !relevant {
                        continue;
                    }
                    sleep(WATCH_COALESCE).await;
                    match self.republish(&tx).await {
                        Ok(r) => revision = r,
                        // Keep `revision`: watching again from it replays the change.
                        Err(e) => {
                            tracing::warn!(cluster = %self.cluster, "map reload failed: {e}");
                            break;
                        }
                    }
                }
            }
            // Broken or never established: catch up, then watch again (on
            // another member if this one failed).
            if member_failed {
                self.fail_over_from(member).await;
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = sleep(pause) => {}
            }
            pause = (pause * 2).min(WATCH_BACKOFF_MAX);
            match self.republish(&tx).await {
                Ok(r) => revision = r,
                Err(e) => tracing::warn!(cluster = %self.cluster, "map reload failed: {e}"),
            }
        }
    }

    /// Changes the map atomically: reads it, applies `f`, and writes what
    /// changed together with `epoch + 1`, committing only if nobody else
    /// changed the map meanwhile; otherwise reads again and retries, up to
    /// [`UPDATE_ATTEMPTS`] times ([`ClusterError::Conflict`] after that).
    ///
    /// `f` sees the map with `epoch` already set to the epoch the change
    /// will commit at (so [`recompute`] can be called in it), returns
    /// whether it changed anything (`Ok(false)` writes nothing), and may run
    /// more than once. It may not change `alive` (owned by OSD leases),
    /// `name` or `epoch`. Every committed update bumps the epoch.
    ///
    /// ```no_run
    /// # async fn f(store: pontoon_cluster::MapStore) -> Result<(), pontoon_cluster::ClusterError> {
    /// use pontoon_cluster::{ClusterError, recompute};
    /// // The manager, after an OSD's liveness key vanished:
    /// let updated = store
    ///     .update::<_, ClusterError>(|map| Ok(!recompute(map)?.is_empty()))
    ///     .await?;
    /// println!("now at {}", updated.map.epoch);
    /// # Ok(()) }
    /// ```
    pub async fn update<F, E>(&self, f: F) -> Result<Updated, E>
    where
        F: FnMut(&mut ClusterMap) -> Result<bool, E>,
        E: From<ClusterError>,
    {
        self.update_inner(None, f).await
    }

    /// [`update`](Self::update), committed only while `leader` still holds
    /// the manager key: a manager that lost its lease (and perhaps its
    /// place to another) cannot overwrite the new leader's decisions. Fails
    /// with [`ClusterError::NotLeader`] then.
    pub async fn update_as_leader<F, E>(&self, leader: &Leadership, f: F) -> Result<Updated, E>
    where
        F: FnMut(&mut ClusterMap) -> Result<bool, E>,
        E: From<ClusterError>,
    {
        if !leader.is_leader() {
            return Err(ClusterError::NotLeader.into());
        }
        self.update_inner(Some(leader.lease_id()), f).await
    }

    async fn update_inner<F, E>(&self, leader_lease: Option<i64>, mut f: F) -> Result<Updated, E>
    where
        F: FnMut(&mut ClusterMap) -> Result<bool, E>,
        E: From<ClusterError>,
    {
        for attempt in 1..=UPDATE_ATTEMPTS {
            let loaded = self.load_raw().await?;
            let next_epoch = Epoch(loaded.map.epoch.0.saturating_add(1));
            let mut map = loaded.map.clone();
            map.epoch = next_epoch;
            if !f(&mut map)? {
                return Ok(Updated {
                    map: loaded.map,
                    committed: false,
                });
            }
            if map.alive != loaded.map.alive {
                return Err(ClusterError::InvalidArgument(
                    "the alive set is kept by OSD leases; an update cannot change it".into(),
                )
                .into());
            }
            if map.name != loaded.map.name || map.epoch != next_epoch {
                return Err(ClusterError::InvalidArgument(
                    "an update cannot change the map's name or epoch".into(),
                )
                .into());
            }
            let new = keys::encode(&map)?;
            let mut ops = Vec::new();
            let mut bytes = 0;
            for (k, v) in &new {
                if loaded.raw.get(k) != Some(v) {
                    bytes += k.len() + v.len();
                    ops.push(TxnOp::put(self.key(k), v.clone(), None));
                }
            }
            for k in loaded.raw.keys().filter(|k| !new.contains_key(*k)) {
                bytes += k.len();
                ops.push(TxnOp::delete(self.key(k), None));
            }
            let mut when = vec![Compare::mod_revision(
                self.key(EPOCH),
                CompareOp::Equal,
                loaded.epoch_mod_revision,
            )];
            if let Some(lease) = leader_lease {
                when.push(Compare::lease(self.key(LEADER), CompareOp::Equal, lease));
            }
            let n_ops = ops.len();
            let resp = match self
                .run("commit a map update", |c| {
                    let txn = Txn::new().when(when.clone()).and_then(ops.clone());
                    async move { kv_of(&c).txn(txn).await }
                })
                .await
            {
                Ok(r) => r,
                Err(ClusterError::Etcd { source, .. }) if is_too_large(&source) => {
                    return Err(ClusterError::TooLarge {
                        keys: n_ops,
                        bytes,
                        reason: source.to_string(),
                    }
                    .into());
                }
                Err(e) => return Err(e.into()),
            };
            if resp.succeeded() {
                return Ok(Updated {
                    map,
                    committed: true,
                });
            }
            if let Some(lease) = leader_lease
                && self.leader_lease().await? != Some(lease)
            {
                return Err(ClusterError::NotLeader.into());
            }
            tracing::debug!(cluster = %self.cluster, attempt, "map update conflicted; retrying");
            backoff(attempt).await;
        }
        Err(ClusterError::Conflict {
            attempts: UPDATE_ATTEMPTS,
        }
        .into())
    }

    /// Recomputes every PG's up and acting set from the current OSDs,
    /// liveness and pools, committing (and bumping the epoch) only if some
    /// PG changed. What the manager runs when an OSD's liveness changes.
    pub async fn recompute_pgs(&self) -> Result<Updated, ClusterError> {
        self.update::<_, ClusterError>(|m| Ok(!recompute(m)?.is_empty()))
            .await
    }

    /// Creates a pool and its PG records. `size` replicas (1–32), writes
    /// accepted while at least `min_size` are up, `pgs` PGs (1–65,536, fixed
    /// for the pool's life).
    pub async fn create_pool(
        &self,
        name: &str,
        size: u32,
        min_size: u32,
        pgs: u32,
        failure_domain: FailureDomain,
    ) -> Result<PoolRecord, ClusterError> {
        check_name("pool", name)?;
        if !(1..=pontoon_placement::MAX_POOL_SIZE).contains(&size) {
            return Err(ClusterError::InvalidArgument(format!(
                "pool size {size} must be between 1 and {}",
                pontoon_placement::MAX_POOL_SIZE
            )));
        }
        if !(1..=size).contains(&min_size) {
            return Err(ClusterError::InvalidArgument(format!(
                "min_size {min_size} must be between 1 and the pool size {size}"
            )));
        }
        if !(1..=MAX_PGS_PER_POOL).contains(&pgs) {
            return Err(ClusterError::InvalidArgument(format!(
                "PG count {pgs} must be between 1 and {MAX_PGS_PER_POOL}"
            )));
        }
        let updated = self
            .update::<_, ClusterError>(|m| {
                if m.pool_by_name(name).is_some() {
                    return Err(ClusterError::AlreadyExists {
                        kind: "pool",
                        name: name.to_string(),
                    });
                }
                let id = m.alloc_pool_id();
                m.pools.insert(
                    id,
                    PoolRecord {
                        id,
                        name: name.to_string(),
                        size,
                        min_size,
                        pgs,
                        failure_domain,
                    },
                );
                recompute(m)?;
                Ok(true)
            })
            .await?;
        found(updated.map.pool_by_name(name), "pool", name)
    }

    /// Removes an empty pool and its PGs. Refused while any volume is in it.
    pub async fn remove_pool(&self, name: &str) -> Result<PoolRecord, ClusterError> {
        let mut removed = None;
        self.update::<_, ClusterError>(|m| {
            let pool = found(m.pool_by_name(name), "pool", name)?;
            let users: Vec<&str> = m
                .volumes
                .values()
                .filter(|v| v.pool == pool.id)
                .map(|v| v.name.as_str())
                .collect();
            if let Some(first) = users.first() {
                return Err(ClusterError::InUse {
                    kind: "pool",
                    name: name.to_string(),
                    reason: format!("{} volume(s), e.g. {first}, are in it", users.len()),
                });
            }
            m.pools.remove(&pool.id);
            recompute(m)?;
            removed = Some(pool);
            Ok(true)
        })
        .await?;
        removed.ok_or_else(|| not_found("pool", name))
    }

    /// Creates a thin volume of `size_bytes` (a positive multiple of 4096)
    /// in the named pool, with the default 4 MiB object size.
    pub async fn create_volume(
        &self,
        name: &str,
        pool_name: &str,
        size_bytes: u64,
    ) -> Result<VolumeRecord, ClusterError> {
        check_name("volume", name)?;
        check_volume_size(size_bytes)?;
        let updated = self
            .update::<_, ClusterError>(|m| {
                if m.volume_by_name(name).is_some() {
                    return Err(ClusterError::AlreadyExists {
                        kind: "volume",
                        name: name.to_string(),
                    });
                }
                let pool = found(m.pool_by_name(pool_name), "pool", pool_name)?.id;
                let id = m.alloc_volume_id();
                m.volumes.insert(
                    id,
                    VolumeRecord {
                        id,
                        name: name.to_string(),
                        pool,
                        size_bytes,
                        object_size: DEFAULT_OBJECT_SIZE,
                        snap_seq: 0,
                        snapshots: Vec::new(),
                        parent: None,
                    },
                );
                Ok(true)
            })
            .await?;
        found(updated.map.volume_by_name(name), "volume", name)
    }

    /// Changes a volume's size. Shrinking discards the data past the new
    /// end, so it is refused unless `allow_shrink`.
    pub async fn resize_volume(
        &self,
        name: &str,
        size_bytes: u64,
        allow_shrink: bool,
    ) -> Result<VolumeRecord, ClusterError> {
        check_volume_size(size_bytes)?;
        let updated = self
            .update::<_, ClusterError>(|m| {
                let id = found(m.volume_by_name(name), "volume", name)?.id;
                let Some(vol) = m.volumes.get_mut(&id) else {
                    return Err(not_found("volume", name));
                };
                if size_bytes < vol.size_bytes && !allow_shrink {
                    return Err(ClusterError::InvalidArgument(format!(
                        "shrinking volume {name} from {} to {} discards data; allow shrinking explicitly",
                        pontoon_types::format_size(vol.size_bytes),
                        pontoon_types::format_size(size_bytes)
                    )));
                }
                if vol.size_bytes == size_bytes {
                    return Ok(false);
                }
                vol.size_bytes = size_bytes;
                Ok(true)
            })
            .await?;
        found(updated.map.volume_by_name(name), "volume", name)
    }

    /// Removes a volume's record. Its objects are not deleted here: that
    /// is the OSDs' job once the volume is gone from the map. Refused while
    /// an NVMe-oF namespace exports the volume or it has snapshots.
    pub async fn remove_volume(&self, name: &str) -> Result<VolumeRecord, ClusterError> {
        let mut removed = None;
        self.update::<_, ClusterError>(|m| {
            let vol = found(m.volume_by_name(name), "volume", name)?;
            let exports = m.nvmf_exports_of(name);
            if let Some((nqn, nsid)) = exports.first() {
                let more = match exports.len() {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                return Err(ClusterError::InUse {
                    kind: "volume",
                    name: name.to_string(),
                    reason: format!(
                        "it is exported as namespace {nsid} of NVMe-oF subsystem {nqn}{more}"
                    ),
                });
            }
            if let Some(reason) = crate::clones::clones_block(&m.clones_of(vol.id, None)) {
                return Err(ClusterError::InUse {
                    kind: "volume",
                    name: name.to_string(),
                    reason,
                });
            }
            if let Some(reason) = crate::snapshots::snapshots_block_removal(&vol) {
                return Err(ClusterError::InUse {
                    kind: "volume",
                    name: name.to_string(),
                    reason,
                });
            }
            m.volumes.remove(&vol.id);
            removed = Some(vol);
            Ok(true)
        })
        .await?;
        removed.ok_or_else(|| not_found("volume", name))
    }

    /// Adds an NVMe-oF subsystem with no namespaces and no allowed hosts.
    /// The map checks only what keeps it sound (1 to 223 bytes of printable
    /// ASCII, not the discovery NQN); the NQN's form (`nqn.…`) is the NVMe
    /// target's rule, which the CLI applies before calling this.
    pub async fn nvmf_add_subsystem(&self, nqn: &str) -> Result<NvmfSubsystemRecord, ClusterError> {
        check_nqn("subsystem", nqn)?;
        if nqn == NVMF_DISCOVERY_NQN {
            return Err(ClusterError::InvalidArgument(format!(
                "{nqn} is the discovery subsystem's NQN, which every gateway serves; choose another"
            )));
        }
        let rec = NvmfSubsystemRecord {
            nqn: nqn.to_string(),
            ..Default::default()
        };
        self.update::<_, ClusterError>(|m| {
            if m.nvmf.contains_key(nqn) {
                return Err(ClusterError::AlreadyExists {
                    kind: "subsystem",
                    name: nqn.to_string(),
                });
            }
            m.nvmf.insert(nqn.to_string(), rec.clone());
            Ok(true)
        })
        .await?;
        Ok(rec)
    }

    /// Removes an NVMe-oF subsystem with its namespaces and allow-list
    /// (the volumes stay; gateways stop exporting them there).
    pub async fn nvmf_remove_subsystem(
        &self,
        nqn: &str,
    ) -> Result<NvmfSubsystemRecord, ClusterError> {
        let mut removed = None;
        self.update::<_, ClusterError>(|m| {
            let rec = m
                .nvmf
                .remove(nqn)
                .ok_or_else(|| not_found("subsystem", nqn))?;
            removed = Some(rec);
            Ok(true)
        })
        .await?;
        removed.ok_or_else(|| not_found("subsystem", nqn))
    }

    /// Exports `volume` as a namespace of subsystem `nqn`, with namespace id
    /// `nsid` or else the lowest free one, and a fresh random UUID; returns
    /// the namespace id. A volume is in at most one namespace of a
    /// subsystem (it may be in several subsystems). `VOLUME@SNAPSHOT`
    /// exports that snapshot, read-only (the gateway reports the namespace
    /// write-protected).
    pub async fn nvmf_add_namespace(
        &self,
        nqn: &str,
        volume: &str,
        nsid: Option<u32>,
    ) -> Result<u32, ClusterError> {
        if let Some(id) = nsid
            && !(1..=NVMF_MAX_NSID).contains(&id)
        {
            return Err(ClusterError::InvalidArgument(format!(
                "namespace id {id} must be between 1 and {NVMF_MAX_NSID}"
            )));
        }
        let uuid = format_uuid(&random_uuid()?);
        let mut chosen = None;
        let (kind, vol) = match volume.contains('@') {
            true => ("snapshot", crate::parse_snap_spec(volume)?.0),
            false => ("volume", volume),
        };
        self.update::<_, ClusterError>(|m| {
            if m.volume_by_name(vol).is_none() {
                return Err(not_found("volume", vol));
            }
            if m.image_size(volume).is_none() {
                return Err(not_found(kind, volume));
            }
            let sub = m
                .nvmf
                .get_mut(nqn)
                .ok_or_else(|| not_found("subsystem", nqn))?;
            if let Some(existing) = sub.namespace_of(volume) {
                return Err(ClusterError::InUse {
                    kind: "volume",
                    name: volume.to_string(),
                    reason: format!("it is already namespace {existing} of subsystem {nqn}"),
                });
            }
            if sub.namespaces.len() >= NVMF_MAX_NAMESPACES {
                return Err(ClusterError::InvalidArgument(format!(
                    "subsystem {nqn} already has {NVMF_MAX_NAMESPACES} namespaces, the most it may have"
                )));
            }
            let id = match nsid {
                Some(id) if sub.namespaces.contains_key(&id) => {
                    return Err(ClusterError::AlreadyExists {
                        kind: "namespace",
                        name: format!("{id} of subsystem {nqn}"),
                    });
                }
                Some(id) => id,
                None => sub.free_nsid().ok_or_else(|| {
                    ClusterError::InvalidArgument(format!("subsystem {nqn} has no free namespace id"))
                })?,
            };
            sub.namespaces.insert(
                id,
                NvmfNamespaceRecord {
                    volume: volume.to_string(),
                    uuid: uuid.clone(),
                },
            );
            chosen = Some(id);
            Ok(true)
        })
        .await?;
        chosen.ok_or_else(|| not_found("subsystem", nqn))
    }

    /// Stops exporting namespace `nsid` of subsystem `nqn` (the volume stays).
    pub async fn nvmf_remove_namespace(
        &self,
        nqn: &str,
        nsid: u32,
    ) -> Result<NvmfNamespaceRecord, ClusterError> {
        let missing = || ClusterError::NotFound {
            kind: "namespace",
            name: format!("{nsid} of subsystem {nqn}"),
        };
        let mut removed = None;
        self.update::<_, ClusterError>(|m| {
            let sub = m
                .nvmf
                .get_mut(nqn)
                .ok_or_else(|| not_found("subsystem", nqn))?;
            removed = Some(sub.namespaces.remove(&nsid).ok_or_else(missing)?);
            Ok(true)
        })
        .await?;
        removed.ok_or_else(missing)
    }

    /// Adds `host` (a host NQN) to subsystem `nqn`'s allow-list.
    pub async fn nvmf_allow_host(&self, nqn: &str, host: &str) -> Result<(), ClusterError> {
        self.nvmf_allow_host_with(nqn, host, None).await
    }

    /// Adds `host` to subsystem `nqn`'s allow-list, requiring DH-HMAC-CHAP
    /// with `auth` if given (in the same map change, so the host is never
    /// allowed without it).
    pub async fn nvmf_allow_host_with(
        &self,
        nqn: &str,
        host: &str,
        auth: Option<NvmfHostAuthRecord>,
    ) -> Result<(), ClusterError> {
        check_nqn("host", host)?;
        self.update::<_, ClusterError>(|m| {
            let sub = m
                .nvmf
                .get_mut(nqn)
                .ok_or_else(|| not_found("subsystem", nqn))?;
            if sub.hosts.contains(host) {
                return Err(ClusterError::AlreadyExists {
                    kind: "host",
                    name: format!("{host} in the allow-list of subsystem {nqn}"),
                });
            }
            if sub.hosts.len() >= NVMF_MAX_HOSTS {
                return Err(ClusterError::InvalidArgument(format!(
                    "subsystem {nqn} already allows {NVMF_MAX_HOSTS} hosts, the most it may"
                )));
            }
            sub.hosts.insert(host.to_string());
            if let Some(a) = &auth {
                sub.dhchap.insert(host.to_string(), a.clone());
            }
            Ok(true)
        })
        .await?;
        Ok(())
    }

    /// Sets (or with `None` clears) the DH-HMAC-CHAP secrets of `host`, which
    /// must be on subsystem `nqn`'s allow-list. Gateways use the new
    /// secrets from the host's next authentication on; a host that did
    /// not authenticate when it connected and now must is disconnected.
    pub async fn nvmf_set_host_auth(
        &self,
        nqn: &str,
        host: &str,
        auth: Option<NvmfHostAuthRecord>,
    ) -> Result<(), ClusterError> {
        self.update::<_, ClusterError>(|m| {
            let sub = m
                .nvmf
                .get_mut(nqn)
                .ok_or_else(|| not_found("subsystem", nqn))?;
            if !sub.hosts.contains(host) {
                return Err(ClusterError::NotFound {
                    kind: "host",
                    name: format!("{host} in the allow-list of subsystem {nqn}"),
                });
            }
            Ok(match &auth {
                Some(a) => sub.dhchap.insert(host.to_string(), a.clone()).as_ref() != Some(a),
                None => sub.dhchap.remove(host).is_some(),
            })
        })
        .await?;
        Ok(())
    }

    /// Removes `host` from subsystem `nqn`'s allow-list. Hosts already
    /// connected are not disconnected by the map change itself; the
    /// gateway decides on connect.
    pub async fn nvmf_disallow_host(&self, nqn: &str, host: &str) -> Result<(), ClusterError> {
        self.update::<_, ClusterError>(|m| {
            let sub = m
                .nvmf
                .get_mut(nqn)
                .ok_or_else(|| not_found("subsystem", nqn))?;
            if !sub.hosts.remove(host) {
                return Err(ClusterError::NotFound {
                    kind: "host",
                    name: format!("{host} in the allow-list of subsystem {nqn}"),
                });
            }
            sub.dhchap.remove(host);
            Ok(true)
        })
        .await?;
        Ok(())
    }

    /// Registers an OSD (or re-registers one after a restart) and returns
    /// its id. A new OSD gets `requested_id` if given and free, else the
    /// next unused id, and starts "in". Re-registering an existing id
    /// updates its host, addresses (one per shard) and device size, and
    /// keeps its weight and in/out state, which operators may have set.
    pub async fn register_osd(
        &self,
        host: &str,
        addrs: Vec<SocketAddr>,
        weight: u64,
        device_bytes: u64,
        requested_id: Option<OsdId>,
    ) -> Result<OsdId, ClusterError> {
        check_name("host", host)?;
        if addrs.is_empty() || addrs.len() > MAX_SHARDS {
            return Err(ClusterError::InvalidArgument(format!(
                "an OSD needs 1 to {MAX_SHARDS} shard addresses, not {}",
                addrs.len()
            )));
        }
        let mut id = None;
        self.update::<_, ClusterError>(|m| {
            if let Some(r) = requested_id.filter(|r| m.is_destroyed(*r)) {
                return Err(ClusterError::InvalidArgument(format!(
                    "{r} is destroyed: its old device may not come back; give it a new one with `pontoon osd replace {} --device DEV`",
                    r.0
                )));
            }
            match requested_id.and_then(|r| m.osds.get_mut(&r)) {
                Some(rec) => {
                    if rec.host == host && rec.addrs == addrs && rec.device_bytes == device_bytes {
                        let osd = rec.id;
                        id = Some(osd);
                        return Ok(ensure_osd_key(m, osd));
                    }
                    // The weight follows the device's size unless an
                    // operator set it to something else.
                    if rec.device_bytes != device_bytes
                        && rec.weight == crate::identity::weight_for_size(rec.device_bytes)
                    {
                        rec.weight = weight;
                    }
                    rec.host = host.to_string();
                    rec.addrs.clone_from(&addrs);
                    rec.device_bytes = device_bytes;
                    id = Some(rec.id);
                }
                None => {
                    let new = m.alloc_osd_id(requested_id);
                    m.created_osds.remove(&new);
                    m.osds.insert(
                        new,
                        OsdRecord {
                            id: new,
                            host: host.to_string(),
                            addrs: addrs.clone(),
                            weight,
                            device_bytes,
                            in_cluster: true,
                            down_since_unix: None,
                            reported_down: false,
                            full: Default::default(),
                        },
                    );
                    id = Some(new);
                }
            }
            if let Some(osd) = id {
                ensure_osd_key(m, osd);
            }
            recompute(m)?;
            Ok(true)
        })
        .await?;
        id.ok_or_else(|| ClusterError::InvalidArgument("OSD registration did not run".into()))
    }

    /// Marks an OSD in (it receives PGs) or out (its PGs move elsewhere),
    /// and recomputes the PG table.
    pub async fn set_osd_in(&self, id: OsdId, in_cluster: bool) -> Result<(), ClusterError> {
        self.update::<_, ClusterError>(|m| {
            let Some(rec) = m.osds.get_mut(&id) else {
                return Err(not_found("osd", id.to_string()));
            };
            if rec.in_cluster == in_cluster {
                return Ok(false);
            }
            rec.in_cluster = in_cluster;
            recompute(m)?;
            Ok(true)
        })
        .await?;
        Ok(())
    }

    /// Asks the primaries of `pgs` (every PG of the pool when `pgs` is
    /// empty) to scrub them; returns the PGs and the request's epoch.
    pub async fn request_scrub(
        &self,
        pool: &str,
        pgs: &[u32],
        deep: bool,
    ) -> Result<(Vec<PgId>, Epoch), ClusterError> {
        let mut chosen = Vec::new();
        let updated = self
            .update::<_, ClusterError>(|m| {
                let epoch = m.epoch;
                let Some(p) = m.pool_by_name(pool).map(|p| (p.id, p.pgs)) else {
                    return Err(not_found("pool", pool));
                };
                chosen = if pgs.is_empty() {
                    (0..p.1)
                        .map(|i| PgId {
                            pool: p.0,
                            index: i,
                        })
                        .collect()
                } else {
                    let mut v = Vec::new();
                    for &i in pgs {
                        if i >= p.1 {
                            return Err(ClusterError::InvalidArgument(format!(
                                "pool {pool} has {} PGs: {}.{i:x} does not exist",
                                p.1, p.0.0
                            )));
                        }
                        v.push(PgId {
                            pool: p.0,
                            index: i,
                        });
                    }
                    v
                };
                for pg in &chosen {
                    if let Some(rec) = m.pgs.get_mut(pg) {
                        rec.scrub_request = Some(ScrubRequest { deep, epoch });
                    }
                }
                Ok(true)
            })
            .await?;
        Ok((chosen, updated.map.epoch))
    }

    /// Sets how often every PG is deep-scrubbed (0: only on request).
    pub async fn set_deep_scrub_interval(&self, secs: u64) -> Result<(), ClusterError> {
        self.update::<_, ClusterError>(|m| {
            if m.settings.deep_scrub_interval_secs == secs {
                return Ok(false);
            }
            m.settings.deep_scrub_interval_secs = secs;
            Ok(true)
        })
        .await?;
        Ok(())
    }

    /// Changes the full ratios with `f`; refuses ratios that are out of
    /// range or out of order. Returns the ratios now in force.
    pub async fn set_full_ratios(
        &self,
        f: impl Fn(&mut FullRatios),
    ) -> Result<FullRatios, ClusterError> {
        let updated = self
            .update::<_, ClusterError>(|m| {
                let mut r = m.settings.full_ratios;
                f(&mut r);
                r.validate().map_err(ClusterError::InvalidArgument)?;
                if r == m.settings.full_ratios {
                    return Ok(false);
                }
                m.settings.full_ratios = r;
                Ok(true)
            })
            .await?;
        Ok(updated.map.settings.full_ratios)
    }

    /// Sets an OSD's placement weight (0 drains it) and recomputes the PG table.
    pub async fn set_osd_weight(&self, id: OsdId, weight: u64) -> Result<(), ClusterError> {
        self.update::<_, ClusterError>(|m| {
            let Some(rec) = m.osds.get_mut(&id) else {
                return Err(not_found("osd", id.to_string()));
            };
            if rec.weight == weight {
                return Ok(false);
            }
            rec.weight = weight;
            recompute(m)?;
            Ok(true)
        })
        .await?;
        Ok(())
    }

    /// Stores an OSD's latest report (`reports/<osd>`), replacing the
    /// previous one. Does not touch the map or its epoch.
    pub async fn put_report(&self, report: &OsdReport) -> Result<(), ClusterError> {
        let key = keys::report_key(report.osd);
        let value = serde_json::to_vec(report).map_err(|e| ClusterError::Corrupt {
            key: key.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        let key = self.key(&key);
        self.run("store an OSD report", |c| {
            let (key, value) = (key.clone(), value.clone());
            async move { kv_of(&c).put(key, value, None).await }
        })
        .await?;
        Ok(())
    }

    /// Every OSD's latest report, by OSD id. A report that cannot be
    /// decoded is skipped with a warning rather than hiding all the others.
    pub async fn reports(&self) -> Result<Vec<OsdReport>, ClusterError> {
        let key = self.key(keys::REPORTS);
        let resp = self
            .run("read OSD reports", |c| {
                let key = key.clone();
                async move {
                    kv_of(&c)
                        .get(key, Some(GetOptions::new().with_prefix()))
                        .await
                }
            })
            .await?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            match serde_json::from_slice::<OsdReport>(kv.value()) {
                Ok(r) => out.push(r),
                Err(e) => tracing::warn!(
                    key = %String::from_utf8_lossy(kv.key()),
                    "skipping undecodable OSD report: {e}"
                ),
            }
        }
        out.sort_by_key(|r| r.osd);
        Ok(out)
    }

    /// The name of the active manager, if one holds the leader key.
    pub async fn leader(&self) -> Result<Option<String>, ClusterError> {
        let resp = self.leader_key().await?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }

    /// The lease holding the leader key, if any.
    async fn leader_lease(&self) -> Result<Option<i64>, ClusterError> {
        let resp = self.leader_key().await?;
        Ok(resp.kvs().first().map(|kv| kv.lease()))
    }

    async fn leader_key(&self) -> Result<etcd_client::GetResponse, ClusterError> {
        let key = self.key(LEADER);
        self.run("read the manager leader", |c| {
            let key = key.clone();
            async move { kv_of(&c).get(key, None).await }
        })
        .await
    }
}

/// A KV client of `c` that accepts the largest map.
fn kv_of(c: &Client) -> KvClient {
    c.kv_client().max_decoding_message_size(MAX_MESSAGE)
}

/// Whether etcd refused a transaction for its size or operation count.
fn is_too_large(e: &etcd_client::Error) -> bool {
    let msg = e.to_string();
    // etcd's own checks, and its gRPC server's receive limit
    // (--max-request-bytes plus 512 KiB).
    msg.contains("too large")
        || msg.contains("too many operations")
        || msg.contains("larger than max")
}

/// The error for a `kind` named `name` that the map does not hold.
pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> ClusterError {
    ClusterError::NotFound {
        kind,
        name: name.into(),
    }
}

fn found<T: Clone>(v: Option<&T>, kind: &'static str, name: &str) -> Result<T, ClusterError> {
    v.cloned().ok_or_else(|| not_found(kind, name))
}

fn check_name(kind: &str, name: &str) -> Result<(), ClusterError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(ClusterError::InvalidArgument(format!(
            "{kind} name {name:?} must be 1-{} characters of [A-Za-z0-9._-]",
            crate::MAX_NAME_LEN
        )))
    }
}

/// What the map requires of an NQN (subsystem or host): 1 to 223 bytes of
/// printable ASCII. Such a string is safe in a key (escaped, see
/// [`keys::nvmf_key`]) and in every listing.
fn check_nqn(kind: &str, nqn: &str) -> Result<(), ClusterError> {
    if nqn.is_empty() || nqn.len() > NVMF_MAX_NQN_LEN {
        return Err(ClusterError::InvalidArgument(format!(
            "{kind} NQN must be 1 to {NVMF_MAX_NQN_LEN} bytes, not {}",
            nqn.len()
        )));
    }
    if !nqn.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ClusterError::InvalidArgument(format!(
            "{kind} NQN {nqn:?} has characters other than printable ASCII"
        )));
    }
    Ok(())
}

/// A random (version 4) UUID from the kernel's random source.
fn random_uuid() -> Result<[u8; 16], ClusterError> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| {
            ClusterError::Unavailable(format!(
                "cannot read /dev/urandom for a namespace UUID: {e}"
            ))
        })?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    Ok(b)
}

fn check_volume_size(size_bytes: u64) -> Result<(), ClusterError> {
    if size_bytes == 0 || !size_bytes.is_multiple_of(BLOCK_SIZE_U64) {
        return Err(ClusterError::InvalidArgument(format!(
            "volume size {size_bytes} must be a positive multiple of {BLOCK_SIZE_U64} bytes"
        )));
    }
    Ok(())
}

/// The arguments of a single-member etcd named `name` on loopback, as
/// `pontoon up` runs it (and the tests that run what `up` runs): data in
/// `data_dir`, clients on `client_port`, peers on `peer_port`, hourly
/// auto-compaction, warnings only.
pub fn single_member_args(
    name: &str,
    data_dir: &std::path::Path,
    client_port: u16,
    peer_port: u16,
) -> Vec<String> {
    member_args("http", name, data_dir, client_port, peer_port)
}

/// [`single_member_args`] on `https://` URLs, with `tls` (etcd's
/// certificate, CA and client-certificate flags) added.
pub fn single_member_args_tls(
    name: &str,
    data_dir: &std::path::Path,
    client_port: u16,
    peer_port: u16,
    tls: Vec<String>,
) -> Vec<String> {
    let mut args = member_args("https", name, data_dir, client_port, peer_port);
    args.extend(tls);
    args
}

fn member_args(
    scheme: &str,
    name: &str,
    data_dir: &std::path::Path,
    client_port: u16,
    peer_port: u16,
) -> Vec<String> {
    let client_url = format!("{scheme}://127.0.0.1:{client_port}");
    let peer_url = format!("{scheme}://127.0.0.1:{peer_port}");
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", data_dir.display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster={name}={peer_url}"),
        "--initial-cluster-state=new".into(),
        "--auto-compaction-retention=1".into(),
        "--logger=zap".into(),
        "--log-outputs=stderr".into(),
        "--log-level=warn".into(),
    ]
}

/// Gives OSD `osd` a key with `allow profile osd` if the map has none
/// (as `ceph osd new` makes the OSD's cephx key): an OSD added to a
/// cluster in a protected `ms_mode` can then reach its peers, and a
/// cluster can switch to one later. Registration already needs write
/// access to the map, which holds every key. True if it added one.
fn ensure_osd_key(m: &mut crate::ClusterMap, osd: OsdId) -> bool {
    let entity = crate::auth::EntityName::osd(osd.0);
    if m.auth.contains_key(&entity) {
        return false;
    }
    let added = crate::auth::add(
        &mut m.auth,
        &entity,
        crate::auth::Caps::profile(crate::auth::Profile::Osd),
        crate::auth::AuthKey::generate(),
        crate::auth::now_unix(),
    );
    if let Err(e) = &added {
        tracing::warn!(%osd, "no key made for {entity}: {e}");
    }
    added.is_ok()
}
