//! Space: how full each OSD may get (the three ratios Ceph operators know),
//! and the cluster's space accounting — raw, per OSD, per pool and per
//! volume — computed from the map and the OSDs' reports, which carry the
//! stores' own counters (no scan).
//!
//! A volume's logical usage is the bytes its objects hold on all OSDs
//! divided by its pool's replica count: exact while every PG is clean and
//! reclaim has nothing pending, an estimate while copies are missing
//! (lower) or strays await deletion (higher).

use std::collections::BTreeMap;
use std::fmt;

use pontoon_types::{OsdId, PoolId, VolumeId};
use serde::{Deserialize, Serialize};

use crate::model::{ClusterMap, OsdReport};

/// The fill ratios (of each OSD's data area) at which the cluster warns,
/// stops backfill onto an OSD, and refuses writes that need new space.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct FullRatios {
    /// A health warning names the OSD.
    pub nearfull: f64,
    /// Backfill and recovery do not write to the OSD; they wait.
    pub backfillfull: f64,
    /// Writes that need new space fail with "no space" in every pool
    /// placed on the OSD; reads, overwrites, discards and deletes go on.
    pub full: f64,
}

impl Default for FullRatios {
    fn default() -> Self {
        Self {
            nearfull: 0.85,
            backfillfull: 0.90,
            full: 0.95,
        }
    }
}

impl PartialEq for FullRatios {
    fn eq(&self, o: &Self) -> bool {
        self.nearfull.to_bits() == o.nearfull.to_bits()
            && self.backfillfull.to_bits() == o.backfillfull.to_bits()
            && self.full.to_bits() == o.full.to_bits()
    }
}

impl Eq for FullRatios {}

impl FullRatios {
    /// Checks `0 < nearfull <= backfillfull <= full <= 1`.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |r: f64| r.is_finite() && r > 0.0 && r <= 1.0;
        if !(ok(self.nearfull) && ok(self.backfillfull) && ok(self.full)) {
            return Err(format!(
                "full ratios must be in (0, 1]: nearfull {}, backfillfull {}, full {}",
                self.nearfull, self.backfillfull, self.full
            ));
        }
        if !(self.nearfull <= self.backfillfull && self.backfillfull <= self.full) {
            return Err(format!(
                "full ratios must be ordered nearfull <= backfillfull <= full: {} / {} / {}",
                self.nearfull, self.backfillfull, self.full
            ));
        }
        Ok(())
    }

    /// The state of an OSD whose data area is `used` of `capacity` bytes.
    pub fn state(&self, used: u64, capacity: u64) -> FullState {
        let r = ratio(used, capacity);
        if capacity == 0 || r >= self.full {
            FullState::Full
        } else if r >= self.backfillfull {
            FullState::Backfillfull
        } else if r >= self.nearfull {
            FullState::Nearfull
        } else {
            FullState::Ok
        }
    }
}

/// `used / capacity`, 0 for an empty capacity.
pub fn ratio(used: u64, capacity: u64) -> f64 {
    if capacity == 0 {
        0.0
    } else {
        used as f64 / capacity as f64
    }
}

/// How full an OSD is against the [`FullRatios`]; ordered by severity.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum FullState {
    /// Below nearfull.
    #[default]
    Ok,
    /// At or above nearfull.
    Nearfull,
    /// At or above backfillfull.
    Backfillfull,
    /// At or above full.
    Full,
}

impl FullState {
    /// Whether this is [`FullState::Ok`] (serde skips it).
    pub fn is_ok(&self) -> bool {
        *self == FullState::Ok
    }
}

impl fmt::Display for FullState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FullState::Ok => "ok",
            FullState::Nearfull => "nearfull",
            FullState::Backfillfull => "backfillfull",
            FullState::Full => "full",
        })
    }
}

/// The cluster's space, as `pontoon df` and `pontoon du` print it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SpaceReport {
    /// Totals over every OSD that reported.
    pub raw: RawSpace,
    /// Each OSD.
    pub osds: Vec<OsdSpace>,
    /// Each pool.
    pub pools: Vec<PoolSpace>,
    /// Each volume.
    pub volumes: Vec<VolumeUsage>,
    /// The ratios in force.
    pub full_ratios: FullRatios,
}

/// Raw storage over all OSDs, as `ceph df` shows it: `used` is user data,
/// `raw_used` adds the journals and metadata (`size - avail`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RawSpace {
    /// Bytes of the devices.
    pub size_bytes: u64,
    /// Bytes still free for data.
    pub avail_bytes: u64,
    /// Bytes holding data (every copy).
    pub used_bytes: u64,
    /// `size - avail`: data plus journal and metadata overhead.
    pub raw_used_bytes: u64,
    /// `raw_used / size`.
    pub raw_used_ratio: f64,
    /// Objects of removed volumes and stray copies waiting to be deleted.
    pub reclaim_pending_objects: u64,
}

/// One OSD's space.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OsdSpace {
    /// Its id number.
    pub id: u32,
    /// Holds its lease.
    pub up: bool,
    /// Receives PGs.
    pub r#in: bool,
    /// Device bytes.
    pub device_bytes: u64,
    /// Bytes of the data areas.
    pub data_bytes: u64,
    /// Bytes of data held.
    pub used_bytes: u64,
    /// Bytes free for data.
    pub free_bytes: u64,
    /// Bytes of the journal rings.
    pub journal_bytes: u64,
    /// Superblocks, checkpoint slots and alignment: device minus data
    /// areas minus journals.
    pub metadata_bytes: u64,
    /// `used / data`.
    pub used_ratio: f64,
    /// Against the ratios, as the manager last flagged it in the map:
    /// what the OSDs enforce (it follows the reports within a manager
    /// pass).
    pub state: FullState,
    /// Garbage objects waiting to be deleted here.
    pub reclaim_pending_objects: u64,
    /// Garbage objects deleted here since the OSD started.
    pub reclaimed_objects: u64,
    /// Whether it has reported (the other fields are 0 if not).
    pub reported: bool,
}

/// One pool's space, as `ceph df` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PoolSpace {
    /// Pool id.
    pub id: u32,
    /// Pool name.
    pub name: String,
    /// Replicas.
    pub size: u32,
    /// Logical bytes stored (one copy).
    pub stored_bytes: u64,
    /// Logical objects (one copy).
    pub objects: u64,
    /// Bytes used on the OSDs by every copy.
    pub raw_used_bytes: u64,
    /// Logical bytes that can still be written before the first OSD the
    /// pool uses reaches the full ratio, given placement weights and
    /// replicas.
    pub max_avail_bytes: u64,
    /// `stored / (stored + max_avail)`.
    pub used_ratio: f64,
    /// Provisioned bytes of the pool's volumes.
    pub provisioned_bytes: u64,
    /// Logical bytes held by its volumes' snapshots only.
    pub snapshot_bytes: u64,
    /// Saved by compression (0 until compression exists).
    pub compression_saved_bytes: u64,
    /// Parity overhead of erasure coding (0 for replicated pools).
    pub parity_bytes: u64,
}

/// One volume's space, as `rbd du` shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VolumeUsage {
    /// Volume name.
    pub name: String,
    /// Volume id.
    pub id: u64,
    /// Its pool's name.
    pub pool: String,
    /// Size the volume was created (or resized) to.
    pub provisioned_bytes: u64,
    /// Logical bytes allocated: blocks written and not discarded.
    pub used_bytes: u64,
    /// Bytes on the OSDs, every copy, snapshots' included.
    pub raw_used_bytes: u64,
    /// Logical objects.
    pub objects: u64,
    /// Logical bytes only its snapshots hold (clones of overwritten or
    /// discarded blocks): what removing all of them would free, per copy.
    pub snapshot_bytes: u64,
    /// `used + snapshot`: the volume's logical footprint with snapshots.
    pub total_bytes: u64,
    /// Each snapshot, ascending by id.
    pub snapshots: Vec<SnapshotUsage>,
}

/// One snapshot's space, as `rbd du` shows it per snapshot.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SnapshotUsage {
    /// Snapshot id.
    pub id: u64,
    /// Snapshot name.
    pub name: String,
    /// Logical bytes that removing this snapshot alone would free: blocks
    /// it alone still reads that the volume has since overwritten (0 for
    /// a snapshot whose blocks are all the head's).
    pub exclusive_bytes: u64,
}

/// Computes the space report from the map and the OSDs' latest reports.
pub fn space_report(map: &ClusterMap, reports: &[OsdReport]) -> SpaceReport {
    let ratios = map.settings.full_ratios;
    let by_osd: BTreeMap<OsdId, &OsdReport> = reports.iter().map(|r| (r.osd, r)).collect();
    let mut raw = RawSpace::default();
    let mut osds = Vec::new();
    // Raw bytes and object copies per volume, over every OSD.
    let mut held: BTreeMap<VolumeId, (u64, u64, u64)> = BTreeMap::new();
    // Exclusive bytes per snapshot, over every OSD.
    let mut exclusive: BTreeMap<(VolumeId, u64), u64> = BTreeMap::new();
    for o in map.osds.values() {
        let r = by_osd.get(&o.id);
        let (data, used, free, journal, pending, reclaimed) = r.map_or((0, 0, 0, 0, 0, 0), |r| {
            (
                r.capacity_bytes,
                r.used_bytes,
                r.free_bytes,
                r.journal_bytes,
                r.reclaim_pending,
                r.reclaimed_objects,
            )
        });
        let device = r.map_or(o.device_bytes, |r| r.device_bytes.max(o.device_bytes));
        if let Some(r) = r {
            for v in &r.volumes {
                let h = held.entry(v.volume).or_default();
                h.0 += v.bytes;
                h.1 += v.objects;
                h.2 += v.snap_bytes;
            }
            for sp in &r.snapshots {
                *exclusive.entry((sp.volume, sp.snap)).or_default() += sp.exclusive_bytes;
            }
            raw.size_bytes += device;
            raw.avail_bytes += free;
            raw.used_bytes += used;
            raw.reclaim_pending_objects += pending;
        }
        osds.push(OsdSpace {
            id: o.id.0,
            up: map.is_alive(o.id),
            r#in: o.in_cluster,
            device_bytes: device,
            data_bytes: data,
            used_bytes: used,
            free_bytes: free,
            journal_bytes: journal,
            metadata_bytes: device.saturating_sub(data + journal),
            used_ratio: ratio(used, data),
            state: o.full,
            reclaim_pending_objects: pending,
            reclaimed_objects: reclaimed,
            reported: r.is_some(),
        });
    }
    raw.raw_used_bytes = raw.size_bytes.saturating_sub(raw.avail_bytes);
    raw.raw_used_ratio = ratio(raw.raw_used_bytes, raw.size_bytes);

    let raw_avail = pool_raw_avail(map, &by_osd, ratios.full);
    let mut volumes = Vec::new();
    let mut pools: BTreeMap<PoolId, PoolSpace> = map
        .pools
        .values()
        .map(|p| {
            (
                p.id,
                PoolSpace {
                    id: p.id.0,
                    name: p.name.clone(),
                    size: p.size,
                    stored_bytes: 0,
                    objects: 0,
                    raw_used_bytes: 0,
                    max_avail_bytes: raw_avail / u64::from(p.size.max(1)),
                    used_ratio: 0.0,
                    provisioned_bytes: 0,
                    snapshot_bytes: 0,
                    compression_saved_bytes: 0,
                    parity_bytes: 0,
                },
            )
        })
        .collect();
    for v in map.volumes.values() {
        let Some(pool) = pools.get_mut(&v.pool) else {
            continue;
        };
        let copies = u64::from(pool.size.max(1));
        let (bytes, objects, snap_bytes) = held.get(&v.id).copied().unwrap_or_default();
        let snapshots = v
            .snapshots
            .iter()
            .map(|s| SnapshotUsage {
                id: s.id,
                name: s.name.clone(),
                exclusive_bytes: exclusive.get(&(v.id, s.id)).copied().unwrap_or(0) / copies,
            })
            .collect();
        let u = VolumeUsage {
            name: v.name.clone(),
            id: v.id.0,
            pool: pool.name.clone(),
            provisioned_bytes: v.size_bytes,
            used_bytes: bytes / copies,
            raw_used_bytes: bytes + snap_bytes,
            objects: objects.div_ceil(copies),
            snapshot_bytes: snap_bytes / copies,
            total_bytes: (bytes + snap_bytes) / copies,
            snapshots,
        };
        pool.stored_bytes += u.used_bytes;
        pool.objects += u.objects;
        pool.raw_used_bytes += u.raw_used_bytes;
        pool.snapshot_bytes += u.snapshot_bytes;
        pool.provisioned_bytes += u.provisioned_bytes;
        volumes.push(u);
    }
    for p in pools.values_mut() {
        p.used_ratio = ratio(p.stored_bytes, p.stored_bytes + p.max_avail_bytes);
    }
    SpaceReport {
        raw,
        osds,
        pools: pools.into_values().collect(),
        volumes,
        full_ratios: ratios,
    }
}

/// Raw bytes every pool can still write before the first OSD that takes
/// PGs reaches `full` of its data area: each OSD receives its weight's
/// share of new data, so the one with the least room per unit of share
/// runs out first.
pub fn pool_raw_avail(map: &ClusterMap, by_osd: &BTreeMap<OsdId, &OsdReport>, full: f64) -> u64 {
    let takers: Vec<(u64, &OsdReport)> = map
        .osds
        .values()
        .filter(|o| o.in_cluster && o.weight > 0)
        .filter_map(|o| Some((o.weight, *by_osd.get(&o.id)?)))
        .collect();
    let total: u64 = takers.iter().map(|(w, _)| *w).sum();
    if total == 0 {
        return 0;
    }
    takers
        .iter()
        .map(|(w, r)| {
            let limit = (r.capacity_bytes as f64 * full) as u64;
            let room = limit.saturating_sub(r.used_bytes).min(r.free_bytes);
            (room as f64 * total as f64 / *w as f64) as u64
        })
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FailureDomain, OsdRecord, PoolRecord, VolumeRecord, VolumeSpace};
    use pontoon_types::Epoch;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn map() -> ClusterMap {
        let mut m = ClusterMap::new("c");
        m.epoch = Epoch(3);
        for i in 0..3 {
            m.osds.insert(
                OsdId(i),
                OsdRecord {
                    id: OsdId(i),
                    host: "h".into(),
                    addrs: vec!["127.0.0.1:1".parse().unwrap()],
                    weight: 1024,
                    device_bytes: 2 * GIB,
                    in_cluster: true,
                    down_since_unix: None,
                    reported_down: false,
                    full: FullState::Ok,
                },
            );
            m.alive.insert(OsdId(i));
        }
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "rbd".into(),
                size: 3,
                min_size: 2,
                pgs: 8,
                failure_domain: FailureDomain::Osd,
            },
        );
        m.volumes.insert(
            VolumeId(1),
            VolumeRecord {
                id: VolumeId(1),
                name: "v".into(),
                pool: PoolId(1),
                size_bytes: 10 * GIB,
                object_size: 4 * MIB,
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: None,
            },
        );
        m
    }

    fn report(osd: u32, used: u64) -> OsdReport {
        OsdReport {
            osd: OsdId(osd),
            used_bytes: used,
            capacity_bytes: GIB,
            free_bytes: GIB - used,
            device_bytes: 2 * GIB,
            journal_bytes: 512 * MIB,
            volumes: vec![VolumeSpace {
                volume: VolumeId(1),
                objects: 128,
                bytes: used,
                snap_bytes: 0,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn snapshot_space_counts_one_copy_per_snapshot_and_in_the_total() {
        let mut m = map();
        let v = m.volumes.get_mut(&VolumeId(1)).unwrap();
        v.snap_seq = 2;
        for (id, name) in [(1, "a"), (2, "b")] {
            v.snapshots.push(crate::SnapshotRecord {
                id,
                name: name.into(),
                created_unix: 0,
                size_bytes: v.size_bytes,
                protected: false,
            });
        }
        let reports: Vec<OsdReport> = (0..3)
            .map(|i| {
                let mut r = report(i, 96 * MIB);
                r.volumes[0].bytes = 64 * MIB;
                r.volumes[0].snap_bytes = 32 * MIB;
                r.snapshots = vec![crate::SnapSpaceReport {
                    volume: VolumeId(1),
                    snap: 1,
                    exclusive_bytes: 24 * MIB,
                }];
                r
            })
            .collect();
        let s = space_report(&m, &reports);
        let u = &s.volumes[0];
        assert_eq!(u.used_bytes, 64 * MIB);
        assert_eq!(u.snapshot_bytes, 32 * MIB);
        assert_eq!(u.total_bytes, 96 * MIB);
        assert_eq!(u.raw_used_bytes, 3 * 96 * MIB);
        assert_eq!(u.snapshots[0].exclusive_bytes, 24 * MIB);
        assert_eq!(u.snapshots[1].exclusive_bytes, 0, "shared with the head");
        assert_eq!(s.pools[0].snapshot_bytes, 32 * MIB);
    }

    #[test]
    fn a_clean_size3_pool_counts_one_copy_and_is_limited_by_the_fullest_osd() {
        let m = map();
        let reports = [
            report(0, 512 * MIB),
            report(1, 512 * MIB),
            report(2, 700 * MIB),
        ];
        let s = space_report(&m, &reports);
        assert_eq!(s.volumes[0].raw_used_bytes, 1724 * MIB);
        assert_eq!(s.volumes[0].used_bytes, 1724 * MIB / 3);
        assert_eq!(s.volumes[0].objects, 128);
        assert_eq!(s.pools[0].stored_bytes, 1724 * MIB / 3);
        // osd.2 has 0.95 GiB - 700 MiB of room and a third of the share.
        let room2 = (GIB as f64 * 0.95) as u64 - 700 * MIB;
        assert_eq!(s.pools[0].max_avail_bytes, room2 * 3 / 3);
        assert_eq!(s.raw.size_bytes, 6 * GIB);
        assert_eq!(s.raw.used_bytes, 1724 * MIB);
        assert_eq!(s.osds[0].metadata_bytes, 2 * GIB - GIB - 512 * MIB);
        assert_eq!(s.osds[2].state, FullState::Ok);
    }

    #[test]
    fn states_follow_the_ratios() {
        let r = FullRatios::default();
        assert_eq!(r.state(84, 100), FullState::Ok);
        assert_eq!(r.state(85, 100), FullState::Nearfull);
        assert_eq!(r.state(90, 100), FullState::Backfillfull);
        assert_eq!(r.state(95, 100), FullState::Full);
        assert!(r.validate().is_ok());
        let bad = FullRatios {
            nearfull: 0.9,
            backfillfull: 0.8,
            full: 0.95,
        };
        assert!(bad.validate().is_err());
        let bad = FullRatios {
            full: f64::NAN,
            ..r
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn an_osd_out_or_unreported_does_not_limit_max_avail() {
        let mut m = map();
        m.osds.get_mut(&OsdId(2)).unwrap().in_cluster = false;
        let s = space_report(&m, &[report(0, 100 * MIB), report(1, 200 * MIB)]);
        let room1 = (GIB as f64 * 0.95) as u64 - 200 * MIB;
        assert_eq!(s.pools[0].max_avail_bytes, room1 * 2 / 3);
        assert!(!s.osds[2].reported);
    }
}
