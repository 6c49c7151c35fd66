//! The map's key layout and its encoding: [`ClusterMap`] ⇄ relative keys
//! and values. Pure, so it is tested without etcd; [`crate::etcd`] adds the
//! `/pontoon/<cluster>/` prefix and does the I/O.

use std::collections::BTreeMap;

use pontoon_types::{Epoch, OsdId, PgId};

use crate::ClusterError;
use crate::model::{ClusterMap, NextIds, OsdRecord, PgRecord, PoolRecord, VolumeRecord};

/// PGs per `pgs/<pool>/<first>` value. One key per PG would make a change
/// that moves many PGs (an OSD failing in a cluster with thousands of PGs)
/// a transaction of thousands of operations, and etcd refuses more than 128
/// per transaction by default (`--max-txn-ops`). Chunks keep a whole-table
/// rewrite of a 65,536-PG pool at 64 operations.
pub const PG_CHUNK: u32 = 1024;

/// Key of the epoch counter.
pub const EPOCH: &str = "epoch";
/// Key of the manager leader (held by the leader's lease).
pub const LEADER: &str = "mgr/leader";
/// Prefix of the OSD records.
pub const OSDS: &str = "osds/";
/// Prefix of the liveness keys (each held by its OSD's lease).
pub const ALIVE: &str = "alive/";
/// Prefix of the pool records.
pub const POOLS: &str = "pools/";
/// Prefix of the volume records.
pub const VOLUMES: &str = "volumes/";
/// Prefix of the PG chunks.
pub const PGS: &str = "pgs/";
/// Prefix of the OSD reports (not part of the map).
pub const REPORTS: &str = "reports/";
/// Prefix of the id counters.
pub const NEXT: &str = "next/";
/// Key of the next OSD id.
pub const NEXT_OSD: &str = "next/osd";
/// Key of the next pool id.
pub const NEXT_POOL: &str = "next/pool";
/// Key of the next volume id.
pub const NEXT_VOLUME: &str = "next/volume";

/// The prefixes (and the epoch key) a map load reads; anything else under
/// the cluster prefix (reports, leader) is not part of the map.
pub const MAP_RANGES: [&str; 7] = [EPOCH, NEXT, OSDS, ALIVE, POOLS, VOLUMES, PGS];

/// Whether a relative key belongs to the map (a change to it must reach
/// watchers).
pub fn is_map_key(rel: &str) -> bool {
    rel == EPOCH || MAP_RANGES[1..].iter().any(|p| rel.starts_with(p))
}

/// Key of an OSD's record.
pub fn osd_key(id: OsdId) -> String {
    format!("{OSDS}{}", id.0)
}

/// Key of an OSD's liveness marker.
pub fn alive_key(id: OsdId) -> String {
    format!("{ALIVE}{}", id.0)
}

/// Key of an OSD's latest report.
pub fn report_key(id: OsdId) -> String {
    format!("{REPORTS}{}", id.0)
}

/// Key of the chunk holding `pg`.
pub fn pg_chunk_key(pg: PgId) -> String {
    format!("{PGS}{}/{}", pg.pool.0, pg.index - pg.index % PG_CHUNK)
}

fn json<T: serde::Serialize>(key: &str, v: &T) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(v).map_err(|e| ClusterError::Corrupt {
        key: key.to_string(),
        reason: format!("cannot encode: {e}"),
    })
}

/// Encodes every stored part of `map` except `alive` (which leases own) as
/// relative key → value.
pub fn encode(map: &ClusterMap) -> Result<BTreeMap<String, Vec<u8>>, ClusterError> {
    let mut out = BTreeMap::new();
    out.insert(EPOCH.to_string(), map.epoch.0.to_string().into_bytes());
    out.insert(NEXT_OSD.to_string(), map.next.osd.to_string().into_bytes());
    out.insert(
        NEXT_POOL.to_string(),
        map.next.pool.to_string().into_bytes(),
    );
    out.insert(
        NEXT_VOLUME.to_string(),
        map.next.volume.to_string().into_bytes(),
    );
    for o in map.osds.values() {
        let k = osd_key(o.id);
        let v = json(&k, o)?;
        out.insert(k, v);
    }
    for p in map.pools.values() {
        let k = format!("{POOLS}{}", p.id.0);
        let v = json(&k, p)?;
        out.insert(k, v);
    }
    for v in map.volumes.values() {
        let k = format!("{VOLUMES}{}", v.id.0);
        let val = json(&k, v)?;
        out.insert(k, val);
    }
    let mut chunks: BTreeMap<String, Vec<&PgRecord>> = BTreeMap::new();
    for rec in map.pgs.values() {
        chunks.entry(pg_chunk_key(rec.pg)).or_default().push(rec);
    }
    for (k, recs) in chunks {
        let v = json(&k, &recs)?;
        out.insert(k, v);
    }
    Ok(out)
}

fn corrupt(key: &str, reason: impl std::fmt::Display) -> ClusterError {
    ClusterError::Corrupt {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, s: &str) -> Result<T, ClusterError> {
    s.parse()
        .map_err(|_| corrupt(key, format!("{s:?} is not a number")))
}

fn from_json<'a, T: serde::Deserialize<'a>>(key: &str, v: &'a [u8]) -> Result<T, ClusterError> {
    serde_json::from_slice(v).map_err(|e| corrupt(key, e))
}

/// Decodes relative key → value pairs (as [`encode`] writes them, plus
/// `alive/<id>` keys) into a map. Unknown or inconsistent keys are errors:
/// a map that cannot be trusted must not be used to route I/O.
pub fn decode<'a>(
    name: &str,
    kvs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<ClusterMap, ClusterError> {
    let mut map = ClusterMap::new(name);
    let mut next = NextIds::default();
    for (key, value) in kvs {
        let text = || std::str::from_utf8(value).map_err(|_| corrupt(key, "value is not UTF-8"));
        if key == EPOCH {
            map.epoch = Epoch(parse_num(key, text()?.trim())?);
        } else if key == NEXT_OSD {
            next.osd = parse_num(key, text()?.trim())?;
        } else if key == NEXT_POOL {
            next.pool = parse_num(key, text()?.trim())?;
        } else if key == NEXT_VOLUME {
            next.volume = parse_num(key, text()?.trim())?;
        } else if let Some(id) = key.strip_prefix(OSDS) {
            let id = OsdId(parse_num(key, id)?);
            let rec: OsdRecord = from_json(key, value)?;
            if rec.id != id {
                return Err(corrupt(key, format!("holds the record of {}", rec.id)));
            }
            map.osds.insert(id, rec);
        } else if let Some(id) = key.strip_prefix(ALIVE) {
            map.alive.insert(OsdId(parse_num(key, id)?));
        } else if let Some(id) = key.strip_prefix(POOLS) {
            let rec: PoolRecord = from_json(key, value)?;
            if rec.id.0 != parse_num::<u32>(key, id)? {
                return Err(corrupt(key, format!("holds the record of {}", rec.id)));
            }
            map.pools.insert(rec.id, rec);
        } else if let Some(id) = key.strip_prefix(VOLUMES) {
            let rec: VolumeRecord = from_json(key, value)?;
            if rec.id.0 != parse_num::<u64>(key, id)? {
                return Err(corrupt(key, format!("holds the record of {}", rec.id)));
            }
            map.volumes.insert(rec.id, rec);
        } else if key.starts_with(PGS) {
            let recs: Vec<PgRecord> = from_json(key, value)?;
            for rec in recs {
                if pg_chunk_key(rec.pg) != key {
                    return Err(corrupt(key, format!("holds {}", rec.pg)));
                }
                map.pgs.insert(rec.pg, rec);
            }
        } else {
            return Err(corrupt(key, "not a key of the cluster map"));
        }
    }
    map.next = next;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FailureDomain, PastInterval};
    use pontoon_types::{PoolId, VolumeId};

    fn map() -> ClusterMap {
        let mut m = ClusterMap::new("c");
        m.epoch = Epoch(12);
        m.next = NextIds {
            osd: 3,
            pool: 2,
            volume: 9,
        };
        m.osds.insert(
            OsdId(1),
            OsdRecord {
                id: OsdId(1),
                host: "a".into(),
                addrs: vec!["[::1]:6800".parse().unwrap()],
                weight: 1,
                device_bytes: 2,
                in_cluster: false,
                down_since_unix: Some(77),
            },
        );
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "p".into(),
                size: 2,
                min_size: 1,
                pgs: 2000,
                failure_domain: FailureDomain::Osd,
            },
        );
        m.volumes.insert(
            VolumeId(8),
            VolumeRecord {
                id: VolumeId(8),
                name: "v".into(),
                pool: PoolId(1),
                size_bytes: 4096,
                object_size: 4 << 20,
            },
        );
        for i in 0..2000 {
            let pg = PgId::new(1, i);
            m.pgs.insert(
                pg,
                PgRecord {
                    pg,
                    up: vec![OsdId(1)],
                    acting: vec![],
                    interval: Epoch(3),
                    past_intervals: vec![PastInterval {
                        interval: Epoch(2),
                        acting: vec![OsdId(1)],
                    }],
                },
            );
        }
        m
    }

    #[test]
    fn map_round_trips_through_its_keys() {
        let mut m = map();
        let kvs = encode(&m).unwrap();
        assert!(kvs.contains_key("pgs/1/0") && kvs.contains_key("pgs/1/1024"));
        assert_eq!(kvs.keys().filter(|k| k.starts_with(PGS)).count(), 2);
        let mut with_alive: Vec<(String, Vec<u8>)> = kvs.into_iter().collect();
        with_alive.push((alive_key(OsdId(1)), b"{}".to_vec()));
        let back = decode(
            "c",
            with_alive.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
        )
        .unwrap();
        m.alive.insert(OsdId(1));
        assert_eq!(back, m);
    }

    #[test]
    fn misplaced_or_unknown_keys_are_corruption() {
        let kvs = encode(&map()).unwrap();
        let osd = kvs["osds/1"].clone();
        let bad = [("osds/2", osd.as_slice())];
        assert!(matches!(
            decode("c", bad),
            Err(ClusterError::Corrupt { .. })
        ));
        let bad = [("epoch", b"twelve".as_slice())];
        assert!(matches!(
            decode("c", bad),
            Err(ClusterError::Corrupt { .. })
        ));
        let bad = [("pgs/1/1024", kvs["pgs/1/0"].as_slice())];
        assert!(matches!(
            decode("c", bad),
            Err(ClusterError::Corrupt { .. })
        ));
        let bad = [("weird", b"".as_slice())];
        assert!(matches!(
            decode("c", bad),
            Err(ClusterError::Corrupt { .. })
        ));
    }

    #[test]
    fn only_map_keys_wake_watchers() {
        assert!(is_map_key("epoch"));
        assert!(is_map_key("alive/3"));
        assert!(is_map_key("pgs/1/0"));
        assert!(!is_map_key("reports/3"));
        assert!(!is_map_key("mgr/leader"));
        assert!(!is_map_key("epochs"));
    }
}
