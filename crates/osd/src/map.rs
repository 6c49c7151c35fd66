//! What a shard needs to know of the cluster map: its PGs with their
//! intervals and acting sets, where the other OSDs listen, and which pool
//! each volume lives in. Built from the etcd map by the daemon, or by hand
//! in tests and the simulator.

use std::net::SocketAddr;

use std::time::Duration;

use pontoon_cluster::ScrubRequest;
use pontoon_cluster::space::{FullRatios, FullState};
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, PoolId};
use rustc_hash::{FxHashMap, FxHashSet};

/// A pool's replication parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolParams {
    /// Replicas.
    pub size: u32,
    /// Fewest acting members that may accept writes.
    pub min_size: u32,
    /// Number of PGs.
    pub pgs: u32,
}

/// An earlier acting set of a PG that may hold writes the current one lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastInterval {
    /// Epoch at which that interval began.
    pub interval: Epoch,
    /// Its acting set.
    pub acting: Vec<OsdId>,
}

/// One PG as the map places it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgEntry {
    /// Epoch at which the current acting set took over.
    pub interval: Epoch,
    /// Current acting set; first is the primary.
    pub acting: Vec<OsdId>,
    /// Where placement puts the PG ignoring liveness (down members
    /// included): whom the members heartbeat.
    pub up: Vec<OsdId>,
    /// Intervals since the PG was last clean, oldest first.
    pub past: Vec<PastInterval>,
}

/// The shard's view of the cluster map at one epoch.
#[derive(Clone, Debug, Default)]
pub struct ShardMap {
    /// Map epoch.
    pub epoch: Epoch,
    /// Pools by id.
    pub pools: FxHashMap<PoolId, PoolParams>,
    /// Pool of each volume that exists.
    pub volumes: FxHashMap<u64, PoolId>,
    /// Snapshot sequence of each volume that has one above 0 (see
    /// [`crate::snaps`]); a volume not listed is at 0.
    pub snap_seqs: FxHashMap<u64, u64>,
    /// Ids of the snapshots that exist, ascending, of each volume that has
    /// any (a volume not listed has none): what snap trim keeps.
    pub snaps: FxHashMap<u64, Vec<u64>>,
    /// The smallest volume id not yet handed out: an id below it that
    /// `volumes` lacks belongs to a removed volume (0: none is known).
    pub next_volume: u64,
    /// Every PG of every pool.
    pub pgs: FxHashMap<PgId, PgEntry>,
    /// Listening addresses of each OSD, one per shard.
    pub addrs: FxHashMap<OsdId, Vec<SocketAddr>>,
    /// OSDs that held their liveness lease when this map was read. One that
    /// did not is fenced (it stops serving before etcd drops its lease).
    pub alive: FxHashSet<OsdId>,
    /// When OSDs count as backfillfull and full.
    pub full_ratios: FullRatios,
    /// OSDs the manager found at or above a full ratio, with their state.
    pub fullness: FxHashMap<OsdId, FullState>,
    /// Scrubs operators asked for, by PG.
    pub scrub_requests: FxHashMap<PgId, ScrubRequest>,
    /// Deep-scrub every PG this often (zero: no schedule, requests only).
    pub deep_scrub_interval: Duration,
    /// Recovery's throttles and the flags that pause it.
    pub recovery: RecoveryControl,
    /// The cluster's wire mode, entities, keys and caps.
    pub access: std::sync::Arc<crate::access::AccessTable>,
}

/// What the map says of background recovery (and backfill, the same
/// mechanism here): how much of it at once, and whether it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryControl {
    /// Objects a shard recovers at once.
    pub max_active: usize,
    /// Pause after each object a PG's recovery copies.
    pub sleep: Duration,
    /// `norecover`: no background recovery at all.
    pub norecover: bool,
    /// `norebalance`: PGs whose every object has all its copies somewhere
    /// (misplaced, not degraded) are not backfilled.
    pub norebalance: bool,
}

impl Default for RecoveryControl {
    fn default() -> Self {
        Self {
            max_active: crate::shard::RECOVERY_SLOTS,
            sleep: Duration::ZERO,
            norecover: false,
            norebalance: false,
        }
    }
}

impl ShardMap {
    /// The PG holding `oid`, if its volume exists.
    pub fn pg_of(&self, oid: ObjectId) -> Option<PgId> {
        let pool = *self.volumes.get(&oid.volume.0)?;
        let p = self.pools.get(&pool)?;
        Some(pg_for(pool, p.pgs, oid))
    }

    /// The snapshot sequence of volume `volume` in this map (0: none taken).
    pub fn snap_seq(&self, volume: u64) -> u64 {
        self.snap_seqs.get(&volume).copied().unwrap_or(0)
    }

    /// The ids of volume `volume`'s snapshots in this map, ascending.
    pub fn live_snaps(&self, volume: u64) -> &[u64] {
        self.snaps.get(&volume).map_or(&[], Vec::as_slice)
    }

    /// How full the manager last found `osd`.
    pub fn fullness(&self, osd: OsdId) -> FullState {
        self.fullness.get(&osd).copied().unwrap_or_default()
    }

    /// Where `osd` serves `pg`: its shard `pg.index % shards`.
    pub fn addr_of(&self, osd: OsdId, pg: PgId) -> Option<SocketAddr> {
        let a = self.addrs.get(&osd)?;
        if a.is_empty() {
            return None;
        }
        Some(a[pg.index as usize % a.len()])
    }
}

/// The PG of an object in a pool of `pgs` PGs. Must never change: where data
/// lives depends on it.
pub fn pg_for(pool: PoolId, pgs: u32, oid: ObjectId) -> PgId {
    debug_assert!(pgs > 0);
    PgId {
        pool,
        index: (oid.placement_hash() % pgs.max(1) as u64) as u32,
    }
}
