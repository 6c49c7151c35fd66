//! The daemon registry: every long-running Pontoon process (OSD, manager,
//! gateways) announces itself under `daemons/<kind>.<name>` with a lease,
//! so operators and tools (`pontoon status`, a Prometheus configuration)
//! find every daemon and its `/metrics` address, and a dead daemon drops
//! out within the lease's TTL.
//!
//! The value ([`DaemonRecord`]) is rewritten at every keep-alive with the
//! daemon's wall clock in `unix_ms`, so a reader can compare daemons'
//! clocks (clock-skew checks). A gateway also lists the volumes it has
//! open, rewritten within [`OPEN_POLL`] of a change, so a tool about to
//! change a volume behind its hosts' backs (`snap rollback`) can refuse. The registry is not part of the map: its
//! writes never bump the epoch nor wake the map's watchers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{GetOptions, PutOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout};

use crate::etcd::{MapStore, OP_TIMEOUT};
use crate::{ClusterError, is_valid_name};

/// Prefix of the registry's keys (`daemons/<kind>.<name>`).
pub const DAEMONS: &str = "daemons/";
/// TTL of a registration's lease, in seconds.
pub const DAEMON_TTL_SECS: i64 = 10;
/// How often a registration is renewed (and `unix_ms` refreshed).
pub const DAEMON_REFRESH: Duration = Duration::from_secs(3);
/// How often a gateway's registration looks for a change in the volumes
/// it has open (a change is written at once; no change costs no write).
pub const OPEN_POLL: Duration = Duration::from_millis(200);

/// What a gateway's registration asks for the volumes it has open now
/// (sorted).
pub type OpenVolumesFn = std::sync::Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// The kinds of daemon (the `kind` field and the key's first part).
pub mod kind {
    /// An OSD (`pontoon osd run`); its name is the OSD id.
    pub const OSD: &str = "osd";
    /// A manager (`pontoon mgr`, or the one `pontoon up` runs); its name
    /// is its election name.
    pub const MGR: &str = "mgr";
    /// An NBD gateway (`pontoon nbd`).
    pub const NBD: &str = "nbd";
    /// An NVMe/TCP gateway (`pontoon nvmf`).
    pub const NVMF: &str = "nvmf";
    /// A vhost-user-blk backend (`pontoon vhost`).
    pub const VHOST: &str = "vhost";
}

/// What a daemon says of itself in the registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    /// `osd`, `mgr`, `nbd`, `nvmf`, `vhost` (see [`kind`]).
    pub kind: String,
    /// Unique among daemons of its kind (an OSD's id, a manager's name,
    /// a gateway's `host-pid` or listen address).
    pub name: String,
    /// Host it runs on.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Address its `/metrics` listens on (`IP:PORT`), if it serves metrics.
    pub metrics: Option<String>,
    /// URL of its HTTP API or dashboard, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// Its version.
    pub version: String,
    /// When it started, Unix seconds.
    pub started_unix: u64,
    /// Its wall clock at the last refresh, Unix milliseconds.
    pub unix_ms: u64,
    /// Volumes a gateway has open now (served to a host by a connection,
    /// namespace or queue), sorted; `VOLUME@SNAPSHOT` for a snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_volumes: Vec<String>,
}

impl DaemonRecord {
    /// A record for this process: `kind`, `name`, `host`, its pid, this
    /// crate's version, started now.
    pub fn new(kind: &str, name: &str, host: &str, metrics: Option<String>) -> Self {
        Self {
            kind: kind.to_string(),
            name: name.to_string(),
            host: host.to_string(),
            pid: std::process::id(),
            metrics,
            http: None,
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_unix: unix_ms() / 1000,
            unix_ms: unix_ms(),
            open_volumes: Vec::new(),
        }
    }

    /// `<kind>.<name>`, its id in the registry.
    pub fn id(&self) -> String {
        format!("{}.{}", self.kind, self.name)
    }
}

/// Milliseconds since the Unix epoch by the local clock.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A daemon's registration, kept alive by a tokio task until dropped (or
/// [`stop`](Self::stop)ped, which deletes the key at once).
pub struct DaemonRegistration {
    id: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DaemonRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonRegistration")
            .field("id", &self.id)
            .finish()
    }
}

impl DaemonRegistration {
    /// `<kind>.<name>`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Stops the keep-alives and revokes the lease (the key goes at once).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = timeout(OP_TIMEOUT, task).await;
        }
    }
}

impl Drop for DaemonRegistration {
    fn drop(&mut self) {
        // The task revokes the lease when told to stop; a dropped sender
        // tells it too.
        self.stop.take();
    }
}

fn check_part(what: &str, s: &str) -> Result<(), ClusterError> {
    if is_valid_name(s) {
        Ok(())
    } else {
        Err(ClusterError::InvalidArgument(format!(
            "daemon {what} {s:?} must be 1-{} characters of [A-Za-z0-9._-]",
            crate::MAX_NAME_LEN
        )))
    }
}

impl MapStore {
    /// Registers a daemon under `daemons/<kind>.<name>` with a lease of
    /// [`DAEMON_TTL_SECS`], and keeps it alive (rewriting the record with
    /// a fresh `unix_ms`) every [`DAEMON_REFRESH`] from a tokio task, until
    /// the returned guard is dropped or stopped. A lost lease (etcd down
    /// longer than the TTL) is replaced by a new one once etcd answers.
    /// The first registration is done before this returns.
    pub async fn register_daemon(
        &self,
        record: DaemonRecord,
    ) -> Result<DaemonRegistration, ClusterError> {
        self.register_daemon_publishing(record, None).await
    }

    /// [`MapStore::register_daemon`] for a gateway: `open` says which
    /// volumes it has open, and a change is written within [`OPEN_POLL`].
    pub async fn register_daemon_publishing(
        &self,
        mut record: DaemonRecord,
        open: Option<OpenVolumesFn>,
    ) -> Result<DaemonRegistration, ClusterError> {
        if let Some(f) = &open {
            record.open_volumes = f();
        }
        check_part("kind", &record.kind)?;
        check_part("name", &record.name)?;
        let id = record.id();
        let key = self.key(&format!("{DAEMONS}{id}"));
        let lease = self.put_daemon(&key, &record, None).await?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(keep_registered(
            self.clone(),
            key,
            record,
            lease,
            open,
            stop_rx,
        ));
        Ok(DaemonRegistration {
            id,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }

    /// Writes `record` at `key` with the lease `lease` (a new one when
    /// `None`); returns the lease used.
    async fn put_daemon(
        &self,
        key: &str,
        record: &DaemonRecord,
        lease: Option<i64>,
    ) -> Result<i64, ClusterError> {
        let lease = match lease {
            Some(l) => l,
            None => self
                .run("grant a daemon lease", |mut c| async move {
                    c.lease_grant(DAEMON_TTL_SECS, None).await
                })
                .await?
                .id(),
        };
        let value = serde_json::to_vec(record).map_err(|e| ClusterError::Corrupt {
            key: key.to_string(),
            reason: format!("cannot encode: {e}"),
        })?;
        self.run("register a daemon", |c| {
            let (key, value) = (key.to_string(), value.clone());
            async move {
                c.kv_client()
                    .put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        })
        .await?;
        Ok(lease)
    }

    /// Every registered daemon, sorted by kind and name. A record that
    /// cannot be decoded is skipped with a warning.
    pub async fn daemons(&self) -> Result<Vec<DaemonRecord>, ClusterError> {
        let key = self.key(DAEMONS);
        let resp = self
            .run("list daemons", |c| {
                let key = key.clone();
                async move {
                    c.kv_client()
                        .get(key, Some(GetOptions::new().with_prefix()))
                        .await
                }
            })
            .await?;
        let mut out = Vec::new();
        for kv in resp.kvs() {
            match serde_json::from_slice::<DaemonRecord>(kv.value()) {
                Ok(r) => out.push(r),
                Err(e) => tracing::warn!(
                    key = %String::from_utf8_lossy(kv.key()),
                    "skipping undecodable daemon record: {e}"
                ),
            }
        }
        out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        Ok(out)
    }
}

/// The kinds `daemons:` lines always name, in order (others follow).
const SUMMARY_KINDS: [&str; 5] = [kind::OSD, kind::MGR, kind::NBD, kind::NVMF, kind::VHOST];

/// One line for `pontoon status`: how many daemons of each kind are
/// registered, the managers with how many are active (`active_mgr` is the
/// leader's name), e.g. `daemons: osd 3, mgr 2 (1 active), nbd 1, nvmf 1, vhost 0`.
pub fn summary_line(daemons: &[DaemonRecord], active_mgr: Option<&str>) -> String {
    let mut kinds: Vec<&str> = SUMMARY_KINDS.to_vec();
    for d in daemons {
        if !kinds.contains(&d.kind.as_str()) {
            kinds.push(&d.kind);
        }
    }
    let parts: Vec<String> = kinds
        .iter()
        .map(|k| {
            let n = daemons.iter().filter(|d| d.kind == *k).count();
            if *k == kind::MGR {
                let active = daemons
                    .iter()
                    .filter(|d| d.kind == *k && Some(d.name.as_str()) == active_mgr)
                    .count();
                format!("{k} {n} ({active} active)")
            } else {
                format!("{k} {n}")
            }
        })
        .collect();
    format!("daemons: {}", parts.join(", "))
}

/// Renews the registration's lease and rewrites its record every
/// [`DAEMON_REFRESH`], and at once when the open volumes change; on stop,
/// revokes the lease.
async fn keep_registered(
    store: MapStore,
    key: String,
    mut record: DaemonRecord,
    lease: i64,
    open: Option<OpenVolumesFn>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut lease = Some(lease);
    let tick = if open.is_some() {
        OPEN_POLL
    } else {
        DAEMON_REFRESH
    };
    let mut published = record.open_volumes.clone();
    let mut refreshed = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = sleep(tick) => {}
        }
        if let Some(f) = &open {
            record.open_volumes = f();
        }
        let due = refreshed.elapsed() >= DAEMON_REFRESH;
        if !due && record.open_volumes == published {
            continue;
        }
        if due {
            refreshed = tokio::time::Instant::now();
        }
        if due && let Some(id) = lease {
            let renewed = store
                .run("renew a daemon lease", |mut c| async move {
                    let (mut keeper, mut stream) = c.lease_keep_alive(id).await?;
                    keeper.keep_alive().await?;
                    stream.message().await
                })
                .await;
            match renewed {
                Ok(Some(r)) if r.ttl() > 0 => {}
                Ok(_) => {
                    tracing::info!(key, "daemon lease expired; registering again");
                    lease = None;
                }
                Err(e) => {
                    tracing::debug!(key, "renewing the daemon lease: {e}");
                    continue;
                }
            }
        }
        record.unix_ms = unix_ms();
        match store.put_daemon(&key, &record, lease).await {
            Ok(id) => {
                lease = Some(id);
                published = record.open_volumes.clone();
            }
            Err(e) => tracing::debug!(key, "refreshing the daemon record: {e}"),
        }
    }
    if let Some(id) = lease {
        let _ = timeout(
            OP_TIMEOUT,
            store.run("revoke a daemon lease", |mut c| async move {
                c.lease_revoke(id).await
            }),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_as_json() {
        let mut r = DaemonRecord::new(kind::NBD, "h-42", "h", Some("127.0.0.1:9100".into()));
        assert_eq!(r.id(), "nbd.h-42");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["kind"], "nbd");
        assert_eq!(v["metrics"], "127.0.0.1:9100");
        assert!(v.get("http").is_none());
        r.http = Some("http://127.0.0.1:8080".into());
        let back: DaemonRecord = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(r.unix_ms >= r.started_unix * 1000);
    }

    #[test]
    fn summary_line_counts_kinds_and_the_active_manager() {
        let d = |k: &str, n: &str| DaemonRecord::new(k, n, "h", None);
        let all = vec![
            d(kind::MGR, "a"),
            d(kind::MGR, "b"),
            d(kind::NBD, "h-1"),
            d(kind::OSD, "0"),
            d("iscsi", "x"),
        ];
        assert_eq!(
            summary_line(&all, Some("b")),
            "daemons: osd 1, mgr 2 (1 active), nbd 1, nvmf 0, vhost 0, iscsi 1"
        );
        assert_eq!(
            summary_line(&[], None),
            "daemons: osd 0, mgr 0 (0 active), nbd 0, nvmf 0, vhost 0"
        );
    }
}
