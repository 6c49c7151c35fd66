//! The map's key layout and its encoding: [`ClusterMap`] ⇄ relative keys
//! and values. Pure, so it is tested without etcd; [`crate::etcd`] adds the
//! `/pontoon/<cluster>/` prefix and does the I/O.

use std::collections::BTreeMap;

use pontoon_types::{Epoch, OsdId, PgId};

use crate::ClusterError;
use crate::model::{
    ClusterMap, NextIds, NvmfSubsystemRecord, OsdRecord, PgRecord, PoolRecord, VolumeRecord,
};

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
/// Prefix of the NVMe-oF subsystem records (`nvmf/<escaped NQN>`).
pub const NVMF: &str = "nvmf/";
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
/// Key of the cluster-wide settings.
pub const SETTINGS: &str = "settings";
/// Key of the cluster's fsid ([`crate::identity`]).
pub const FSID: &str = "fsid";
/// Key of the OSD ids handed out to devices not yet run ([`crate::identity`]).
pub const CREATED_OSDS: &str = "created_osds";
/// Prefix of the entities' records (`auth/<entity>`, [`crate::auth`]).
pub const AUTH: &str = "auth/";

/// The prefixes (ending in `/`) and single keys a map load reads;
/// anything else under the cluster prefix (reports, leader) is not part of
/// the map.
pub const MAP_RANGES: [&str; 12] = [
    EPOCH,
    NEXT,
    OSDS,
    ALIVE,
    POOLS,
    VOLUMES,
    PGS,
    NVMF,
    SETTINGS,
    FSID,
    CREATED_OSDS,
    AUTH,
];

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

/// Key of an NVMe-oF subsystem's record: `nvmf/` and the NQN with every
/// byte outside `[A-Za-z0-9._:-]` written as `%XX` (upper-case hex). NQNs
/// are free-form printable ASCII and may contain `/` or `%`; escaped, one
/// key is one path segment and decodes back to exactly the NQN
/// ([`nvmf_nqn_of_key`]).
pub fn nvmf_key(nqn: &str) -> String {
    let mut k = String::with_capacity(NVMF.len() + nqn.len());
    k.push_str(NVMF);
    for b in nqn.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') {
            k.push(char::from(b));
        } else {
            k.push_str(&format!("%{b:02X}"));
        }
    }
    k
}

/// The NQN an `nvmf/...` key names, if the key is exactly what
/// [`nvmf_key`] writes for it (so each subsystem has one key).
pub fn nvmf_nqn_of_key(key: &str) -> Option<String> {
    let esc = key.strip_prefix(NVMF)?;
    let bytes = esc.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = esc.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let nqn = String::from_utf8(out).ok()?;
    (nvmf_key(&nqn) == key).then_some(nqn)
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
    out.insert(SETTINGS.to_string(), json(SETTINGS, &map.settings)?);
    if let Some(fsid) = map.fsid {
        out.insert(FSID.to_string(), fsid.to_string().into_bytes());
    }
    if !map.created_osds.is_empty() {
        let ids: Vec<u32> = map.created_osds.iter().map(|o| o.0).collect();
        out.insert(CREATED_OSDS.to_string(), json(CREATED_OSDS, &ids)?);
    }
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
    for (nqn, rec) in &map.nvmf {
        let k = nvmf_key(nqn);
        if rec.nqn != *nqn {
            return Err(corrupt(
                &k,
                format!("cannot encode: holds subsystem {:?}", rec.nqn),
            ));
        }
        let v = json(&k, rec)?;
        out.insert(k, v);
    }
    for (entity, rec) in &map.auth {
        let k = format!("{AUTH}{entity}");
        if rec.entity != *entity {
            return Err(corrupt(&k, format!("cannot encode: holds {}", rec.entity)));
        }
        let v = json(&k, rec)?;
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
        } else if key == SETTINGS {
            map.settings = from_json(key, value)?;
        } else if key == FSID {
            map.fsid = Some(text()?.parse().map_err(|e| corrupt(key, e))?);
        } else if key == CREATED_OSDS {
            let ids: Vec<u32> = from_json(key, value)?;
            map.created_osds = ids.into_iter().map(OsdId).collect();
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
        } else if key.starts_with(NVMF) {
            let nqn =
                nvmf_nqn_of_key(key).ok_or_else(|| corrupt(key, "not a validly escaped NQN"))?;
            let rec: NvmfSubsystemRecord = from_json(key, value)?;
            if rec.nqn != nqn {
                return Err(corrupt(key, format!("holds subsystem {:?}", rec.nqn)));
            }
            if let Some((id, ns)) = rec
                .namespaces
                .iter()
                .find(|(id, ns)| **id == 0 || ns.uuid_bytes().is_none())
            {
                return Err(corrupt(
                    key,
                    format!("namespace {id} (uuid {:?}) is invalid", ns.uuid),
                ));
            }
            map.nvmf.insert(nqn, rec);
        } else if let Some(name) = key.strip_prefix(AUTH) {
            let entity = crate::auth::EntityName::parse(name).map_err(|e| corrupt(key, e))?;
            let rec: crate::auth::AuthRecord = from_json(key, value)?;
            if rec.entity != entity {
                return Err(corrupt(key, format!("holds the record of {}", rec.entity)));
            }
            rec.validate().map_err(|e| corrupt(key, e))?;
            map.auth.insert(entity, rec);
        } else {
            return Err(corrupt(key, "not a key of the cluster map"));
        }
    }
    map.next = next;
    map.validate()?;
    Ok(map)
}

/// The value of the `epoch` key.
pub fn decode_epoch(value: &[u8]) -> Result<Epoch, ClusterError> {
    let text = std::str::from_utf8(value).map_err(|_| corrupt(EPOCH, "value is not UTF-8"))?;
    Ok(Epoch(parse_num(EPOCH, text.trim())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FailureDomain, NvmfNamespaceRecord, PastInterval};
    use pontoon_types::{PoolId, VolumeId};

    fn map() -> ClusterMap {
        let mut m = ClusterMap::new("c");
        m.epoch = Epoch(12);
        m.settings.full_ratios.full = 0.97;
        m.fsid = Some("0b5e4d7e-3f0c-4c1e-9a57-2d1c0e8f6a11".parse().unwrap());
        m.created_osds.insert(OsdId(5));
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
                reported_down: false,
                full: crate::space::FullState::Nearfull,
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
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: None,
            },
        );
        for nqn in ["nqn.2024-01.io.pontoon:db", "nqn.x/y%z w"] {
            let mut rec = NvmfSubsystemRecord {
                nqn: nqn.into(),
                ..Default::default()
            };
            rec.namespaces.insert(
                1,
                NvmfNamespaceRecord {
                    volume: "v".into(),
                    uuid: "00112233-4455-6677-8899-aabbccddeeff".into(),
                },
            );
            rec.hosts.insert("nqn.host".into());
            m.nvmf.insert(nqn.into(), rec);
        }
        let admin: crate::auth::EntityName = "client.admin".parse().unwrap();
        crate::auth::add(
            &mut m.auth,
            &admin,
            crate::auth::Caps::admin(),
            crate::auth::AuthKey::generate(),
            1,
        )
        .unwrap();
        let osd = crate::auth::EntityName::osd(1);
        crate::auth::add(
            &mut m.auth,
            &osd,
            crate::auth::Caps::profile(crate::auth::Profile::Osd),
            crate::auth::AuthKey::generate(),
            1,
        )
        .unwrap();
        crate::auth::rotate(
            &mut m.auth,
            &osd,
            crate::auth::AuthKey::generate(),
            std::time::Duration::from_secs(5),
            2,
        )
        .unwrap();
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
                    scrub_request: None,
                    upmap_items: Vec::new(),
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
        assert!(kvs.contains_key("auth/client.admin") && kvs.contains_key("auth/osd.1"));
        assert!(
            kvs.contains_key("nvmf/nqn.2024-01.io.pontoon:db"),
            "{:?}",
            kvs.keys()
        );
        assert!(
            kvs.contains_key("nvmf/nqn.x%2Fy%25z%20w"),
            "{:?}",
            kvs.keys()
        );
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

    /// Decodes `m` after `spoil` changed one of its records.
    fn decode_spoiled(spoil: impl FnOnce(&mut ClusterMap)) -> String {
        let mut m = map();
        spoil(&mut m);
        let kvs = encode(&m).unwrap();
        match decode("c", kvs.iter().map(|(k, v)| (k.as_str(), v.as_slice()))) {
            Ok(_) => panic!("a spoiled map decoded"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn records_that_would_break_routing_are_refused_with_their_key() {
        let e = decode_spoiled(|m| m.volumes.get_mut(&VolumeId(8)).unwrap().object_size = 0);
        assert!(
            e.contains("volumes/8") && e.contains("object size 0"),
            "{e}"
        );
        let e = decode_spoiled(|m| m.volumes.get_mut(&VolumeId(8)).unwrap().size_bytes = 100);
        assert!(e.contains("volumes/8") && e.contains("size 100"), "{e}");
        let e = decode_spoiled(|m| m.volumes.get_mut(&VolumeId(8)).unwrap().pool = PoolId(9));
        assert!(
            e.contains("volumes/8") && e.contains("pool9 does not exist"),
            "{e}"
        );
        let e = decode_spoiled(|m| m.pools.get_mut(&PoolId(1)).unwrap().pgs = 0);
        assert!(e.contains("pools/1") && e.contains("0 PGs"), "{e}");
        let e = decode_spoiled(|m| m.pools.get_mut(&PoolId(1)).unwrap().min_size = 3);
        assert!(e.contains("pools/1") && e.contains("min_size 3"), "{e}");
        let e = decode_spoiled(|m| m.osds.get_mut(&OsdId(1)).unwrap().addrs.clear());
        assert!(
            e.contains("osds/1") && e.contains("0 listening addresses"),
            "{e}"
        );
        let e = decode_spoiled(|m| {
            m.pgs.get_mut(&PgId::new(1, 5)).unwrap().acting = vec![OsdId(1), OsdId(1)];
        });
        assert!(e.contains("pgs/1/0") && e.contains("twice"), "{e}");
        let e =
            decode_spoiled(|m| m.pgs.get_mut(&PgId::new(1, 5)).unwrap().acting = vec![OsdId(7)]);
        assert!(e.contains("unregistered osd.7"), "{e}");
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
        let nvmf = kvs["nvmf/nqn.2024-01.io.pontoon:db"].clone();
        for key in [
            "nvmf/nqn.2024-01.io.pontoon:dc",
            "nvmf/nqn.2024-01.io.pontoon%3Adb",
            "nvmf/nqn.2024-01.io.pontoon:db%",
        ] {
            let bad = [(key, nvmf.as_slice())];
            assert!(
                matches!(decode("c", bad), Err(ClusterError::Corrupt { .. })),
                "{key}"
            );
        }
        let bad_uuid = String::from_utf8(nvmf.clone())
            .unwrap()
            .replace("00112233-", "0011223x-");
        let bad = [("nvmf/nqn.2024-01.io.pontoon:db", bad_uuid.as_bytes())];
        assert!(matches!(
            decode("c", bad),
            Err(ClusterError::Corrupt { .. })
        ));
        let admin = kvs["auth/client.admin"].clone();
        for key in ["auth/client.other", "auth/admin"] {
            let bad = [(key, admin.as_slice())];
            assert!(
                matches!(decode("c", bad), Err(ClusterError::Corrupt { .. })),
                "{key}"
            );
        }
        let bad = [("weird", b"".as_slice())];
        assert!(matches!(
            decode("c", bad),
            Err(ClusterError::Corrupt { .. })
        ));
    }

    #[test]
    fn nqn_keys_are_escaped_and_round_trip() {
        for nqn in [
            "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
            "nqn.a/b",
            "nqn.100%",
            "nqn.~!@#$^&*()+={}[]|\\;'\"<>,?`",
            "",
        ] {
            let k = nvmf_key(nqn);
            assert!(k.starts_with(NVMF), "{k}");
            assert!(!k[NVMF.len()..].contains('/'), "{k}");
            assert!(
                k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._:-/%".contains(&b)),
                "{k}"
            );
            assert_eq!(nvmf_nqn_of_key(&k).as_deref(), Some(nqn), "{k}");
        }
        assert_eq!(nvmf_key("nqn.a b"), "nvmf/nqn.a%20b");
        assert_eq!(nvmf_nqn_of_key("nvmf/nqn.a%2"), None);
        assert_eq!(nvmf_nqn_of_key("nvmf/nqn.a%zz"), None);
        assert_eq!(
            nvmf_nqn_of_key("nvmf/nqn.a%2b"),
            None,
            "lower-case hex is not canonical"
        );
        assert_eq!(nvmf_nqn_of_key("nvmf/nqn.a%+F"), None);
        assert_eq!(nvmf_nqn_of_key("nvmf/nqn.%C3%A9").as_deref(), Some("nqn.é"));
        assert_eq!(nvmf_nqn_of_key("nvmf/nqn.%C3"), None, "not UTF-8");
        assert_eq!(nvmf_nqn_of_key("pools/1"), None);
    }

    #[test]
    fn only_map_keys_wake_watchers() {
        assert!(is_map_key("epoch"));
        assert!(is_map_key("alive/3"));
        assert!(is_map_key("pgs/1/0"));
        assert!(is_map_key("nvmf/nqn.x"));
        assert!(is_map_key("auth/client.admin"));
        assert!(!is_map_key("reports/3"));
        assert!(!is_map_key("mgr/leader"));
        assert!(!is_map_key("epochs"));
    }
}
