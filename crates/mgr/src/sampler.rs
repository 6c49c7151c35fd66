//! The active manager's history sampler: loads the history its term
//! continues, then each sample interval takes a [`history::Sample`] from
//! the map and the OSDs' reports and writes what the [`Recorder`] asks,
//! fenced by the leader lease. etcd trouble is logged and the writes are
//! retried at the next turn; it never stops the manager's decisions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pontoon_cluster::{ClusterError, ClusterMap, Leadership, MapStore};

use crate::history::{self, Recorder, TIERS, Writes, decode_chunk};

/// Writes not done for etcd trouble are kept at most this long (in
/// samples): after that the oldest are dropped.
const MAX_PENDING: usize = 16;

pub(crate) struct Sampler {
    rec: Recorder,
    loaded: bool,
    /// Writes that failed, oldest first, retried before the next ones.
    pending: Vec<Writes>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Sampler {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            rec: Recorder::new(interval.as_secs().max(1)),
            loaded: false,
            pending: Vec::new(),
        }
    }

    /// Samples if due (loading the stored history first, once per term).
    pub(crate) async fn tick(&mut self, store: &MapStore, leader: &Leadership, map: &ClusterMap) {
        if let Err(e) = self.try_tick(store, leader, map).await {
            match e {
                ClusterError::NotLeader => {}
                e => tracing::warn!("capacity history: {e}"),
            }
        }
    }

    async fn try_tick(
        &mut self,
        store: &MapStore,
        leader: &Leadership,
        map: &ClusterMap,
    ) -> Result<(), ClusterError> {
        let now = unix_now();
        if !self.loaded {
            self.load(store, now).await?;
            self.loaded = true;
        }
        if !self.rec.due(now) {
            return Ok(());
        }
        let reports = store.reports().await?;
        let s = history::sample(map, &reports);
        let w = self.rec.record(now, &s);
        if !w.is_empty() {
            self.pending.push(w);
        }
        if self.pending.len() > MAX_PENDING {
            let drop = self.pending.len() - MAX_PENDING;
            tracing::warn!(
                samples = drop,
                "capacity history: dropping writes etcd did not take"
            );
            self.pending.drain(..drop);
        }
        while let Some(w) = self.pending.first() {
            store
                .history_write(leader.lease_id(), &w.puts, &w.expire)
                .await?;
            tracing::debug!(
                chunks = w.puts.len(),
                bytes = w.bytes(),
                "capacity history written"
            );
            self.pending.remove(0);
        }
        Ok(())
    }

    /// Loads the chunks of the current and previous period of each tier.
    async fn load(&mut self, store: &MapStore, now: u64) -> Result<(), ClusterError> {
        let mut points = 0;
        for tier in TIERS {
            let from = self.rec.load_from(tier, now);
            let mut chunks = Vec::new();
            for (key, value) in store.history_chunks(tier.name, from).await? {
                let Some((_, _, group)) = pontoon_cluster::history::parse_chunk_key(&key) else {
                    continue;
                };
                match decode_chunk(&value) {
                    Ok(c) => {
                        points += c.series.values().map(history::Series::len).sum::<usize>();
                        chunks.push((group.to_string(), c));
                    }
                    Err(e) => tracing::warn!(key, "capacity history: skipping chunk: {e}"),
                }
            }
            self.rec.load(tier, chunks, now);
        }
        tracing::info!(
            points,
            interval_secs = self.rec.interval_secs(),
            "capacity history loaded"
        );
        Ok(())
    }
}

/// Loads the stored history from `since` (Unix seconds; 0 for all): the
/// cluster's, pools' and OSDs' tiers, and the volumes' when `volumes`.
/// Undecodable chunks are skipped with a warning. The sample interval is
/// inferred from the fine points (the median time between them).
pub async fn load_history(
    store: &MapStore,
    since: u64,
    volumes: bool,
) -> Result<history::History, ClusterError> {
    let mut chunks = Vec::new();
    for tier in TIERS {
        if tier.volumes && !volumes {
            continue;
        }
        // A chunk starting before `since` may hold points after it.
        let from = since.saturating_sub(tier.bucket_secs(history::MAX_INTERVAL_SECS) * tier.chunk);
        chunks.extend(store.history_chunks(tier.name, from).await?);
    }
    let (mut h, bad) = history::History::from_chunks(chunks, 0);
    if bad > 0 {
        tracing::warn!(chunks = bad, "capacity history: skipped undecodable chunks");
    }
    for series in h.tiers.values_mut() {
        for s in series.values_mut() {
            s.retain_from(since);
        }
    }
    let mut gaps: Vec<u64> = h
        .tier(history::FINE.name)
        .and_then(|m| m.get(&history::SeriesId::Cluster))
        .map(|s| s.times().windows(2).map(|w| w[1] - w[0]).collect())
        .unwrap_or_default();
    gaps.sort_unstable();
    h.interval_secs = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
    Ok(h)
}
