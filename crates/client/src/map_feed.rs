//! The cluster map, shared by every data-path thread of a process without a
//! lock per I/O: each thread keeps its own `Arc` and only takes the lock
//! when the published epoch moved.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pontoon_cluster::{ClusterMap, EtcdAuth, MapStore};

use crate::ClientError;

/// Who a process's clients are to the OSDs: an entity (`client.NAME`,
/// `gateway.NAME`) and its key, from its keyring. Needed when the
/// cluster's `ms_mode` is not `none`.
#[derive(Clone)]
pub struct ClientIdentity {
    /// The entity.
    pub entity: String,
    /// Its key.
    pub key: [u8; 32],
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("entity", &self.entity)
            .finish_non_exhaustive()
    }
}

/// The newest map a process has seen, published by one feeder (an etcd
/// watch, or a test) and read by any thread.
pub struct MapFeed {
    /// The identity, and how often it was set (threads compare the count
    /// and reread only when it moved).
    identity: Mutex<Option<Arc<ClientIdentity>>>,
    identity_generation: AtomicU64,
    epoch: AtomicU64,
    map: Mutex<Arc<ClusterMap>>,
    /// Signalled (with `map`'s lock) on every publish, for control-plane
    /// threads that wait for a change ([`MapFeed::wait_newer`]).
    changed: Condvar,
    stop: AtomicBool,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl MapFeed {
    /// A feed holding `map`, updated only through [`MapFeed::publish`].
    pub fn fixed(map: ClusterMap) -> Arc<Self> {
        Arc::new(Self {
            identity: Mutex::new(None),
            identity_generation: AtomicU64::new(0),
            epoch: AtomicU64::new(map.epoch.0),
            map: Mutex::new(Arc::new(map)),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            watcher: Mutex::new(None),
        })
    }

    /// [`MapFeed::connect_with`] an etcd that asks for no TLS or credentials.
    pub fn connect(endpoints: &[String], name: &str) -> Result<Arc<Self>, ClientError> {
        Self::connect_with(endpoints, name, &EtcdAuth::none())
    }

    /// A feed kept current by a watch on the etcd map of cluster `name`
    /// (reached with `auth`), from a thread of its own. Returns once the
    /// first map is loaded.
    pub fn connect_with(
        endpoints: &[String],
        name: &str,
        auth: &EtcdAuth,
    ) -> Result<Arc<Self>, ClientError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Cluster(format!("starting the control runtime: {e}")))?;
        let (store, mut rx) = rt
            .block_on(async {
                let store = MapStore::connect_with(endpoints, name, auth).await?;
                let rx = store.watch().await?;
                Ok::<_, pontoon_cluster::ClusterError>((store, rx))
            })
            .map_err(|e| ClientError::Cluster(e.to_string()))?;
        let first = rx.borrow_and_update().clone();
        let feed = Arc::new(Self {
            identity: Mutex::new(None),
            identity_generation: AtomicU64::new(0),
            epoch: AtomicU64::new(first.epoch.0),
            map: Mutex::new(first),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            watcher: Mutex::new(None),
        });
        let f = feed.clone();
        let handle = std::thread::Builder::new()
            .name("map-watch".into())
            .spawn(move || {
                rt.block_on(async move {
                    let _store = store;
                    while !f.stop.load(Ordering::Relaxed) {
                        match tokio::time::timeout(Duration::from_millis(200), rx.changed()).await {
                            Ok(Ok(())) => {
                                let m = rx.borrow_and_update().clone();
                                f.publish_arc(m);
                            }
                            Ok(Err(_)) => {
                                tracing::error!("the cluster map watch ended");
                                return;
                            }
                            Err(_) => {}
                        }
                    }
                })
            })
            .map_err(|e| ClientError::Cluster(format!("starting the map watcher: {e}")))?;
        *feed.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
        Ok(feed)
    }

    /// Sets who this process's clients are (a new key after a rotation
    /// too): connections made from now on use it, open ones are kept.
    pub fn set_identity(&self, identity: ClientIdentity) {
        *self.identity.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(identity));
        self.identity_generation.fetch_add(1, Ordering::Release);
    }

    /// How many times the identity was set (0: never).
    pub fn identity_generation(&self) -> u64 {
        self.identity_generation.load(Ordering::Acquire)
    }

    /// The identity, if one was set.
    pub fn identity(&self) -> Option<Arc<ClientIdentity>> {
        self.identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Publishes a newer map (older epochs are ignored).
    pub fn publish(&self, map: ClusterMap) {
        self.publish_arc(Arc::new(map));
    }

    fn publish_arc(&self, map: Arc<ClusterMap>) {
        let mut cur = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.epoch >= cur.epoch {
            self.epoch.store(map.epoch.0, Ordering::Release);
            *cur = map;
            self.changed.notify_all();
        }
    }

    /// Blocks the calling (control-plane) thread until a map newer than
    /// epoch `seen` is published or `timeout` passes; returns the newest
    /// map either way.
    pub fn wait_newer(&self, seen: u64, timeout: Duration) -> Arc<ClusterMap> {
        let cur = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let (cur, _) = self
            .changed
            .wait_timeout_while(cur, timeout, |m| m.epoch.0 <= seen)
            .unwrap_or_else(|p| p.into_inner());
        cur.clone()
    }

    /// The newest epoch published.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The newest map (takes the lock; threads use a [`LocalMap`]).
    pub fn current(&self) -> Arc<ClusterMap> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops the etcd watcher, if any.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let h = self
            .watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

impl Drop for MapFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One thread's cached view of a [`MapFeed`].
pub struct LocalMap {
    feed: Arc<MapFeed>,
    epoch: Cell<u64>,
    map: RefCell<Arc<ClusterMap>>,
}

impl LocalMap {
    /// A view of `feed`.
    pub fn new(feed: Arc<MapFeed>) -> Self {
        let map = feed.current();
        Self {
            epoch: Cell::new(map.epoch.0),
            map: RefCell::new(map),
            feed,
        }
    }

    /// The newest map: a load of one atomic unless the epoch moved.
    pub fn get(&self) -> Arc<ClusterMap> {
        if self.feed.epoch() != self.epoch.get() {
            let m = self.feed.current();
            self.epoch.set(m.epoch.0);
            *self.map.borrow_mut() = m;
        }
        self.map.borrow().clone()
    }

    /// The feed behind this view.
    pub fn feed(&self) -> &Arc<MapFeed> {
        &self.feed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_types::Epoch;
    use std::time::Instant;

    #[test]
    fn wait_newer_wakes_on_publish_and_times_out_without_one() {
        let feed = MapFeed::fixed(ClusterMap::new("t"));
        let t0 = Instant::now();
        assert_eq!(
            feed.wait_newer(0, Duration::from_millis(50)).epoch,
            Epoch(0)
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let publisher = {
            let feed = feed.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                let mut m = ClusterMap::new("t");
                m.epoch = Epoch(7);
                feed.publish(m);
            })
        };
        let t0 = Instant::now();
        let m = feed.wait_newer(0, Duration::from_secs(30));
        assert_eq!(m.epoch, Epoch(7));
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "woken by the publish"
        );
        publisher.join().unwrap();
    }
}
