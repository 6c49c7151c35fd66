//! A gateway's requests, bytes and latency per volume and operation,
//! counted by wrapping the volume catalog its workers serve from
//! ([`MeteredCatalog`], [`MeteredVolume`]), so NBD, NVMe/TCP and vhost
//! are measured the same way, where the gateway hands a request to the
//! volume and gets its answer.
//!
//! Each worker thread's catalog keeps its own [`OpStats`] per volume
//! (registered once, at the first open of that volume on that thread), so
//! no two threads write the same counters; a scrape sums them.
//!
//! The gateway also counts which volumes are open now (each open volume
//! holds an [`OpenVolume`] until it is dropped): a gauge, and the list the
//! gateway publishes in its daemon record so that `pontoon snap rollback`
//! can refuse to change a volume under a host's feet.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pontoon_buf::AlignedBuf;
use pontoon_volume::{BlockVolume, Extent, VolumeCatalog, VolumeError, VolumeInfo};

use crate::hist::{Op, OpSnapshot};
use crate::{Exposition, OpStats, labels};

/// Every worker's counters of one gateway process.
#[derive(Debug)]
pub struct GatewayMetrics {
    kind: &'static str,
    volumes: Mutex<Vec<(String, Arc<OpStats>)>>,
    opens: AtomicU64,
    /// Volumes open now, with how many opens each.
    open: Mutex<BTreeMap<String, u64>>,
}

/// One open of a volume, counted in [`GatewayMetrics::open_volumes`] until
/// dropped.
#[derive(Debug)]
pub struct OpenVolume {
    metrics: Arc<GatewayMetrics>,
    name: String,
}

impl Drop for OpenVolume {
    fn drop(&mut self) {
        let mut open = self.metrics.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.name);
            }
        }
    }
}

impl GatewayMetrics {
    /// Counters of a gateway of `kind` (`nbd`, `nvmf`, `vhost`: the
    /// `gateway` label).
    pub fn new(kind: &'static str) -> Arc<Self> {
        Arc::new(Self {
            kind,
            volumes: Mutex::new(Vec::new()),
            opens: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
        })
    }

    /// Counts an open of `volume` (and in the opens total) until the
    /// returned guard is dropped.
    pub fn opened(self: &Arc<Self>, volume: &str) -> OpenVolume {
        self.opens.fetch_add(1, Relaxed);
        *self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(volume.to_string())
            .or_default() += 1;
        OpenVolume {
            metrics: self.clone(),
            name: volume.to_string(),
        }
    }

    /// The volumes open now, sorted.
    pub fn open_volumes(&self) -> Vec<String> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.keys().cloned().collect()
    }

    /// A new set of counters for `volume`, to be written by one thread.
    pub fn register(&self, volume: &str) -> Arc<OpStats> {
        let stats = Arc::new(OpStats::default());
        self.volumes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((volume.to_string(), stats.clone()));
        stats
    }

    /// Adds the gateway's series: `pontoon_gateway_requests_total`,
    /// `pontoon_gateway_bytes_total`, `pontoon_gateway_errors_total`,
    /// `pontoon_gateway_request_duration_seconds` (by gateway, volume, op)
    /// and `pontoon_gateway_volume_opens_total`.
    pub fn add_to(&self, e: &mut Exposition) {
        let mut sums: BTreeMap<(String, usize), OpSnapshot> = BTreeMap::new();
        {
            let volumes = self.volumes.lock().unwrap_or_else(|p| p.into_inner());
            for (name, stats) in volumes.iter() {
                for (i, op) in Op::ALL.iter().enumerate() {
                    sums.entry((name.clone(), i))
                        .or_default()
                        .merge(&stats.snapshot(*op));
                }
            }
        }
        let kind = self.kind;
        e.counter(
            "pontoon_gateway_volume_opens_total",
            "Volumes opened by the gateway's workers (connections, namespaces, queues).",
            labels(&[("gateway", kind)]),
            self.opens.load(Relaxed),
        );
        let open: Vec<(String, u64)> = {
            let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.iter().map(|(k, v)| (k.clone(), *v)).collect()
        };
        for (volume, n) in open {
            e.gauge_u64(
                "pontoon_gateway_volume_open",
                "Opens of the volume the gateway holds now (connections, namespaces, queues).",
                labels(&[("gateway", kind), ("volume", &volume)]),
                n,
            );
        }
        for ((volume, i), s) in sums {
            let op = Op::ALL[i].as_str();
            let l = || labels(&[("gateway", kind), ("volume", &volume), ("op", op)]);
            e.counter(
                "pontoon_gateway_requests_total",
                "Requests the gateway passed to the volume, by operation (failed ones included).",
                l(),
                s.ops,
            );
            e.counter(
                "pontoon_gateway_bytes_total",
                "Bytes of the gateway's successful requests, by operation.",
                l(),
                s.bytes,
            );
            e.counter(
                "pontoon_gateway_errors_total",
                "Requests that failed, by operation.",
                l(),
                s.errors,
            );
            e.histogram(
                "pontoon_gateway_request_duration_seconds",
                "Time from the gateway handing a request to the volume until its answer.",
                l(),
                s.latency,
            );
        }
    }
}

/// A catalog whose volumes count their requests into a [`GatewayMetrics`].
pub struct MeteredCatalog<C> {
    inner: C,
    metrics: Arc<GatewayMetrics>,
    /// This thread's counters per volume name.
    mine: RefCell<HashMap<String, Arc<OpStats>>>,
}

impl<C> MeteredCatalog<C> {
    /// Wraps `inner` (one catalog per worker thread, like `inner`).
    pub fn new(inner: C, metrics: Arc<GatewayMetrics>) -> Self {
        Self {
            inner,
            metrics,
            mine: RefCell::new(HashMap::new()),
        }
    }

    fn stats(&self, name: &str) -> Arc<OpStats> {
        if let Some(s) = self.mine.borrow().get(name) {
            return s.clone();
        }
        let s = self.metrics.register(name);
        self.mine.borrow_mut().insert(name.to_string(), s.clone());
        s
    }
}

impl<C: VolumeCatalog> VolumeCatalog for MeteredCatalog<C> {
    type Volume = MeteredVolume<C::Volume>;

    async fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        self.inner.list().await
    }

    async fn open(&self, name: &str) -> Result<Option<Self::Volume>, VolumeError> {
        let Some(v) = self.inner.open(name).await? else {
            return Ok(None);
        };
        let open = self.metrics.opened(name);
        Ok(Some(MeteredVolume::new(v, self.stats(name)).holding(open)))
    }
}

/// A volume that counts its requests into an [`OpStats`].
pub struct MeteredVolume<V> {
    inner: V,
    stats: Arc<OpStats>,
    /// Keeps the volume counted as open while this lives.
    open: Option<OpenVolume>,
}

impl<V> MeteredVolume<V> {
    /// Wraps `inner`, counting into `stats` (written from this thread only
    /// as far as the caller is concerned; atomics make sharing safe).
    pub fn new(inner: V, stats: Arc<OpStats>) -> Self {
        Self {
            inner,
            stats,
            open: None,
        }
    }

    /// The same volume, counted as open (by `open`) while it lives.
    pub fn holding(mut self, open: OpenVolume) -> Self {
        self.open = Some(open);
        self
    }

    /// The wrapped volume.
    pub fn inner(&self) -> &V {
        &self.inner
    }
}

impl<V: BlockVolume> MeteredVolume<V> {
    fn done<T>(&self, op: Op, bytes: u64, t0: Instant, r: &Result<T, VolumeError>) {
        self.stats.record(op, bytes, r.is_ok(), t0.elapsed());
    }
}

impl<V: BlockVolume> BlockVolume for MeteredVolume<V> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    async fn read(&self, offset: u64, len: u64) -> Result<AlignedBuf, VolumeError> {
        let t0 = Instant::now();
        let r = self.inner.read(offset, len).await;
        self.done(Op::Read, len, t0, &r);
        r
    }

    async fn write(&self, offset: u64, data: AlignedBuf, fua: bool) -> Result<(), VolumeError> {
        let t0 = Instant::now();
        let len = data.len() as u64;
        let r = self.inner.write(offset, data, fua).await;
        self.done(Op::Write, len, t0, &r);
        r
    }

    async fn flush(&self) -> Result<(), VolumeError> {
        let t0 = Instant::now();
        let r = self.inner.flush().await;
        self.done(Op::Flush, 0, t0, &r);
        r
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), VolumeError> {
        let t0 = Instant::now();
        let r = self.inner.discard(offset, len).await;
        self.done(Op::Discard, len, t0, &r);
        r
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        may_unmap: bool,
    ) -> Result<(), VolumeError> {
        let t0 = Instant::now();
        let r = self.inner.write_zeroes(offset, len, may_unmap).await;
        self.done(Op::WriteZeroes, len, t0, &r);
        r
    }

    async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, VolumeError> {
        self.inner.allocation(offset, len).await
    }
}

#[cfg(test)]
mod tests {
    use pontoon_volume::{MemCatalog, MemVolume};

    use super::*;

    #[test]
    fn requests_are_counted_per_volume_and_op() {
        let mem = MemCatalog::default();
        mem.insert("v1", MemVolume::new(1 << 20));
        let m = GatewayMetrics::new("nbd");
        let cat = MeteredCatalog::new(mem, m.clone());
        futures::executor::block_on(async {
            let v = cat.open("v1").await.unwrap().unwrap();
            assert!(cat.open("nope").await.unwrap().is_none());
            v.write(0, AlignedBuf::zeroed(8192), false).await.unwrap();
            v.read(0, 4096).await.unwrap();
            assert!(v.read(1 << 20, 4096).await.is_err());
            v.flush().await.unwrap();
            // A second open on the same thread shares the counters.
            let v2 = cat.open("v1").await.unwrap().unwrap();
            v2.discard(0, 4096).await.unwrap();
            let mut e = Exposition::new();
            m.add_to(&mut e);
            let text = e.render();
            let want = "pontoon_gateway_volume_open{gateway=\"nbd\",volume=\"v1\"} 2\n";
            assert!(text.contains(want), "{want} missing: {text}");
            assert_eq!(m.open_volumes(), vec!["v1".to_string()]);
            drop(v);
            assert_eq!(m.open_volumes(), vec!["v1".to_string()]);
            drop(v2);
        });
        assert!(m.open_volumes().is_empty());
        let mut e = Exposition::new();
        m.add_to(&mut e);
        let text = e.render();
        for want in [
            "pontoon_gateway_requests_total{gateway=\"nbd\",volume=\"v1\",op=\"read\"} 2\n",
            "pontoon_gateway_errors_total{gateway=\"nbd\",volume=\"v1\",op=\"read\"} 1\n",
            "pontoon_gateway_bytes_total{gateway=\"nbd\",volume=\"v1\",op=\"write\"} 8192\n",
            "pontoon_gateway_requests_total{gateway=\"nbd\",volume=\"v1\",op=\"discard\"} 1\n",
            "pontoon_gateway_volume_opens_total{gateway=\"nbd\"} 2\n",
            "pontoon_gateway_request_duration_seconds_count{gateway=\"nbd\",volume=\"v1\",op=\"flush\"} 1\n",
        ] {
            assert!(text.contains(want), "{want} missing: {text}");
        }
        assert_eq!(m.volumes.lock().unwrap().len(), 1);
    }
}
