//! Balance and movement arithmetic over placements.

use std::collections::BTreeMap;

use pontoon_types::OsdId;

use crate::{PlacementError, PlacementMap};

/// Replicas per OSD in a placement (one acting set per PG). OSDs holding
/// nothing do not appear; see [`PlacementMap::utilization`] for those.
pub fn replica_counts(placement: &[Vec<OsdId>]) -> BTreeMap<OsdId, u64> {
    let mut counts = BTreeMap::new();
    for &osd in placement.iter().flatten() {
        *counts.entry(osd).or_insert(0) += 1;
    }
    counts
}

/// What one OSD holds in a placement, against its fair share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OsdLoad {
    /// The OSD.
    pub osd: OsdId,
    /// Replicas (PG copies) it holds.
    pub replicas: u64,
    /// PGs it is primary (first in the acting set) of.
    pub primaries: u64,
    /// Its weight-proportional share of all replicas.
    pub target: f64,
}

/// How evenly a placement spreads replicas over the eligible OSDs.
#[derive(Clone, Debug, PartialEq)]
pub struct Utilization {
    /// One entry per eligible OSD of the map, sorted by id.
    pub loads: Vec<OsdLoad>,
    /// All replicas in the placement.
    pub replicas: u64,
    /// Replicas on OSDs that cannot hold data in the map (0 for a
    /// placement computed from the map).
    pub stray: u64,
    /// Mean replicas per eligible OSD.
    pub mean: f64,
    /// Most replicas on one OSD.
    pub max: u64,
    /// Fewest replicas on one OSD.
    pub min: u64,
    /// Largest `replicas / target` over the OSDs: the fullest OSD relative
    /// to its weight. With equal weights this is max / mean.
    pub max_ratio: f64,
    /// Smallest `replicas / target` over the OSDs.
    pub min_ratio: f64,
}

impl PlacementMap {
    /// Per-OSD replica counts and balance of a placement of one pool.
    pub fn utilization(&self, placement: &[Vec<OsdId>]) -> Utilization {
        let counts = replica_counts(placement);
        let mut primaries: BTreeMap<OsdId, u64> = BTreeMap::new();
        for set in placement {
            if let Some(&p) = set.first() {
                *primaries.entry(p).or_insert(0) += 1;
            }
        }
        let replicas: u64 = counts.values().sum();
        let total_weight = self.total_weight() as f64;
        let loads: Vec<OsdLoad> = self
            .eligible_osds()
            .map(|o| OsdLoad {
                osd: o.id,
                replicas: counts.get(&o.id).copied().unwrap_or(0),
                primaries: primaries.get(&o.id).copied().unwrap_or(0),
                target: replicas as f64 * o.weight as f64 / total_weight,
            })
            .collect();
        let held: u64 = loads.iter().map(|l| l.replicas).sum();
        let ratio = |l: &OsdLoad| {
            if l.target > 0.0 {
                l.replicas as f64 / l.target
            } else {
                0.0
            }
        };
        Utilization {
            stray: replicas - held,
            replicas,
            mean: if loads.is_empty() {
                0.0
            } else {
                held as f64 / loads.len() as f64
            },
            max: loads.iter().map(|l| l.replicas).max().unwrap_or(0),
            min: loads.iter().map(|l| l.replicas).min().unwrap_or(0),
            max_ratio: loads.iter().map(ratio).fold(0.0, f64::max),
            min_ratio: loads.iter().map(ratio).reduce(f64::min).unwrap_or(0.0),
            loads,
        }
    }
}

/// What changed between two placements of the same PGs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Movement {
    /// PGs compared.
    pub pgs: usize,
    /// PGs whose acting set changed at all (membership or order).
    pub pgs_changed: u64,
    /// (PG, position) pairs whose OSD changed, counting positions present
    /// in only one of the two sets.
    pub slot_changes: u64,
    /// Replicas that landed on an OSD that did not hold that PG before:
    /// the copies recovery must make, i.e. the data that moves.
    pub replicas_moved: u64,
    /// PGs whose primary changed.
    pub primaries_changed: u64,
}

/// Compares two placements of one pool, PG by PG.
pub fn movement(before: &[Vec<OsdId>], after: &[Vec<OsdId>]) -> Result<Movement, PlacementError> {
    if before.len() != after.len() {
        return Err(PlacementError::PgCountMismatch {
            left: before.len(),
            right: after.len(),
        });
    }
    let mut m = Movement {
        pgs: before.len(),
        ..Movement::default()
    };
    for (b, a) in before.iter().zip(after) {
        if b != a {
            m.pgs_changed += 1;
        }
        let positions = b.len().max(a.len());
        m.slot_changes += (0..positions).filter(|&i| b.get(i) != a.get(i)).count() as u64;
        m.replicas_moved += a.iter().filter(|osd| !b.contains(osd)).count() as u64;
        if b.first() != a.first() {
            m.primaries_changed += 1;
        }
    }
    Ok(m)
}
