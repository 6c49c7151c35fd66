//! The listings of pools, volumes and PGs as `pontoon pool ls`, `volume
//! ls|info` and `pg ls` print them with `--json`, and as the REST API
//! returns them: one definition of each view for both.

use pontoon_cluster::space::SpaceReport;
use pontoon_cluster::{ClusterMap, OsdReport, PgScrubReport, PoolRecord, VolumeRecord};
use pontoon_types::{OsdId, PgId, format_size};
use serde::Serialize;

use crate::status::PrimaryReports;

/// A pool as `pool ls --json` prints it.
#[derive(Serialize, Debug, Clone)]
pub struct PoolView {
    /// Pool id.
    pub id: u32,
    /// Pool name.
    pub name: String,
    /// Replicas of every object.
    pub size: u32,
    /// Fewest replicas up with which writes are accepted.
    pub min_size: u32,
    /// Placement groups.
    pub pgs: u32,
    /// `osd` or `host`.
    pub failure_domain: String,
    /// Volumes in the pool.
    pub volumes: usize,
}

/// The view of pool `p`.
pub fn pool_view(map: &ClusterMap, p: &PoolRecord) -> PoolView {
    PoolView {
        id: p.id.0,
        name: p.name.clone(),
        size: p.size,
        min_size: p.min_size,
        pgs: p.pgs,
        failure_domain: p.failure_domain.to_string(),
        volumes: map.volumes.values().filter(|v| v.pool == p.id).count(),
    }
}

/// Every pool, by id.
pub fn pool_views(map: &ClusterMap) -> Vec<PoolView> {
    map.pools.values().map(|p| pool_view(map, p)).collect()
}

/// A volume as `volume ls --json` and `volume info --json` print it.
#[derive(Serialize, Debug, Clone)]
pub struct VolumeView {
    /// Volume id.
    pub id: u64,
    /// Volume name.
    pub name: String,
    /// Its pool's name.
    pub pool: String,
    /// Provisioned size in bytes.
    pub size_bytes: u64,
    /// Provisioned size for people (`10.00 GiB`).
    pub size: String,
    /// Object size in bytes.
    pub object_size: u64,
    /// Objects covering the volume's size (not how many exist).
    pub max_objects: u64,
    /// Logical bytes allocated (see `pontoon du`), when reports are in.
    pub used_bytes: Option<u64>,
    /// For a clone, its parent snapshot (`VOLUME@SNAPSHOT`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// For a clone, bytes that read through to the parent (0 otherwise).
    #[serde(skip_serializing_if = "is_zero")]
    pub overlap_bytes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The view of volume `v`, with its usage from `space`.
pub fn volume_view(map: &ClusterMap, v: &VolumeRecord, space: &SpaceReport) -> VolumeView {
    VolumeView {
        id: v.id.0,
        name: v.name.clone(),
        pool: map
            .pools
            .get(&v.pool)
            .map_or_else(|| v.pool.to_string(), |p| p.name.clone()),
        size_bytes: v.size_bytes,
        size: format_size(v.size_bytes),
        object_size: v.object_size,
        max_objects: v.object_count(),
        used_bytes: space
            .volumes
            .iter()
            .find(|u| u.id == v.id.0)
            .map(|u| u.used_bytes),
        parent: v.parent.as_ref().map(|p| map.parent_spec(p)),
        overlap_bytes: v.parent.as_ref().map_or(0, |p| p.overlap),
    }
}

/// Every volume, by id.
pub fn volume_views(map: &ClusterMap, space: &SpaceReport) -> Vec<VolumeView> {
    map.volumes
        .values()
        .map(|v| volume_view(map, v, space))
        .collect()
}

/// One PG as `pg ls --json` prints it.
#[derive(Serialize, Debug, Clone)]
pub struct PgView {
    /// `pool.index` (index in hex).
    pub pgid: String,
    /// Pool name.
    pub pool: String,
    /// State from its primary, or `unknown`.
    pub state: String,
    /// Acting set, primary first.
    pub acting: Vec<u32>,
    /// The balancer's exceptions to placement: `[from, to]` pairs, each an
    /// OSD straw2 chose and the one that holds the copy instead (Ceph's
    /// `pg_upmap_items`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub upmap: Vec<[u32; 2]>,
    /// Objects, from the primary.
    pub objects: u64,
    /// Scrub stamps and findings, from the primary.
    pub scrub: PgScrubReport,
    /// Why it is incomplete or waits.
    pub note: Option<String>,
}

/// Every PG (of `pool`, if given) with what its primary reports.
pub fn pg_views(map: &ClusterMap, reports: &[OsdReport], pool: Option<&str>) -> Vec<PgView> {
    let primaries = PrimaryReports::new(reports);
    map.pgs
        .values()
        .filter_map(|rec| {
            let pool_name = map.pools.get(&rec.pg.pool)?.name.clone();
            if pool.is_some_and(|p| p != pool_name) {
                return None;
            }
            let (report, state) = primaries.of(rec);
            Some(PgView {
                pgid: rec.pg.to_string(),
                pool: pool_name,
                state: state.to_string(),
                acting: rec.acting.iter().map(|o| o.0).collect(),
                upmap: rec.upmap_items.iter().map(|u| [u.from.0, u.to.0]).collect(),
                objects: report.map_or(0, |r| r.objects),
                scrub: report.map(|r| r.scrub.clone()).unwrap_or_default(),
                note: report.and_then(|r| r.note.clone()),
            })
        })
        .collect()
}

/// Parses a PG id as the listings show it: `1.1f` (pool id, a dot, the
/// PG index in hex).
pub fn parse_pgid(s: &str) -> Result<PgId, String> {
    s.split_once('.')
        .and_then(|(p, i)| Some(PgId::new(p.parse().ok()?, u32::from_str_radix(i, 16).ok()?)))
        .ok_or_else(|| {
            format!("{s:?} is not a PG id (pool id, a dot, the index in hex: e.g. 1.1f)")
        })
}

/// Parses an OSD id as the CLI takes it: `3` or `osd.3`.
pub fn parse_osd_id(s: &str) -> Result<OsdId, String> {
    s.strip_prefix("osd.")
        .unwrap_or(s)
        .parse()
        .map(OsdId)
        .map_err(|_| format!("{s:?} is not an OSD id (a number, or osd.N)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_ids_are_pool_dot_hex_index() {
        assert_eq!(parse_pgid("1.1f").unwrap(), PgId::new(1, 31));
        assert_eq!(parse_pgid("1.1f").unwrap().to_string(), "1.1f");
        for bad in ["1", "x.1", "1.g", "", "1.-1"] {
            assert!(parse_pgid(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn osd_ids_are_numbers_with_an_optional_prefix() {
        assert_eq!(parse_osd_id("3").unwrap(), OsdId(3));
        assert_eq!(parse_osd_id("osd.3").unwrap(), OsdId(3));
        assert!(parse_osd_id("osd.x").unwrap_err().contains("not an OSD id"));
    }
}
