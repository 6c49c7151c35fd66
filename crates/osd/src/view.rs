//! Turns the etcd cluster map into the view a shard works from.

use std::time::Duration;

use pontoon_cluster::ClusterMap;
use pontoon_cluster::osd_admin::OsdFlag;

use crate::map::{PastInterval, PgEntry, PoolParams, ShardMap};

/// The shard's view of `map`.
pub fn shard_map(map: &ClusterMap) -> ShardMap {
    let mut m = ShardMap {
        epoch: map.epoch,
        next_volume: map.next.volume,
        ..Default::default()
    };
    for (id, p) in &map.pools {
        m.pools.insert(
            *id,
            PoolParams {
                size: p.size,
                min_size: p.min_size,
                pgs: p.pgs,
            },
        );
    }
    for (id, v) in &map.volumes {
        m.volumes.insert(id.0, v.pool);
        if v.snap_seq > 0 {
            m.snap_seqs.insert(id.0, v.snap_seq);
        }
        if !v.snapshots.is_empty() {
            let mut ids: Vec<u64> = v.snapshots.iter().map(|s| s.id).collect();
            ids.sort_unstable();
            m.snaps.insert(id.0, ids);
        }
    }
    for (id, o) in &map.osds {
        m.addrs.insert(*id, o.addrs.clone());
        if !o.full.is_ok() {
            m.fullness.insert(*id, o.full);
        }
    }
    m.full_ratios = map.settings.full_ratios;
    m.deep_scrub_interval = Duration::from_secs(map.settings.deep_scrub_interval_secs);
    let osd = &map.settings.osd;
    m.recovery = crate::map::RecoveryControl {
        max_active: osd.recovery_max_active.max(1) as usize,
        sleep: osd.recovery_sleep(),
        norecover: osd.has(OsdFlag::Norecover),
        norebalance: osd.has(OsdFlag::Norebalance),
    };
    m.alive.extend(map.alive.iter().copied());
    m.access = std::sync::Arc::new(crate::access::AccessTable::of(map));
    for (id, pg) in &map.pgs {
        if let Some(r) = pg.scrub_request {
            m.scrub_requests.insert(*id, r);
        }
        m.pgs.insert(
            *id,
            PgEntry {
                interval: pg.interval,
                acting: pg.acting.clone(),
                up: pg.up.clone(),
                past: pg
                    .past_intervals
                    .iter()
                    .map(|p| PastInterval {
                        interval: p.interval,
                        acting: p.acting.clone(),
                    })
                    .collect(),
            },
        );
    }
    m
}
