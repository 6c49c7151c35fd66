//! Who a cluster is and which OSD ids it handed out to devices: the
//! cluster's fsid (made once, recorded in every OSD's device header so an
//! OSD never joins another cluster with its data) and the ids `pontoon osd
//! create` reserves for devices whose OSD has not started yet.
//!
//! Keys: `fsid` (the fsid as a UUID, text) and `created_osds` (a JSON array
//! of OSD ids); both absent in maps made before they existed.

use std::fmt;
use std::str::FromStr;

use pontoon_types::OsdId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::{format_uuid, parse_uuid};
use crate::{ClusterError, MapStore};

/// A cluster's unique id (Ceph's fsid), shown as a UUID. Made once per
/// cluster; the cluster name (the etcd prefix) may repeat across etcd
/// clusters, the fsid does not.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterFsid(pub u128);

impl ClusterFsid {
    /// A new random fsid (a version 4 UUID).
    pub fn random() -> Self {
        let mut v = rand::random::<u128>();
        // Version 4, variant 1 (RFC 4122), as `uuidgen -r` prints.
        v = (v & !(0xf << 76)) | (0x4 << 76);
        v = (v & !(0x3 << 62)) | (0x2 << 62);
        Self(v)
    }
}

impl fmt::Display for ClusterFsid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_uuid(&self.0.to_be_bytes()))
    }
}

impl fmt::Debug for ClusterFsid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterFsid({self})")
    }
}

impl FromStr for ClusterFsid {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_uuid(s.trim())
            .map(|b| Self(u128::from_be_bytes(b)))
            .ok_or_else(|| format!("{s:?} is not a UUID"))
    }
}

impl Serialize for ClusterFsid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClusterFsid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An OSD's placement weight for a data device of `bytes` bytes: MiB of
/// capacity (at least 1), so weight follows size.
pub fn weight_for_size(bytes: u64) -> u64 {
    (bytes >> 20).max(1)
}

impl MapStore {
    /// The cluster's fsid. A map without one (a new cluster, or one made
    /// before fsids existed) is given one here, once: concurrent callers
    /// all get the one that committed first.
    pub async fn fsid(&self) -> Result<ClusterFsid, ClusterError> {
        if let Some(f) = self.load().await?.fsid {
            return Ok(f);
        }
        let updated = self
            .update::<_, ClusterError>(|m| {
                if m.fsid.is_some() {
                    return Ok(false);
                }
                m.fsid = Some(ClusterFsid::random());
                Ok(true)
            })
            .await?;
        updated.map.fsid.ok_or_else(|| {
            ClusterError::InvalidArgument("the cluster map has no fsid after making one".into())
        })
    }

    /// Hands out the OSD id a device is about to be formatted for, before
    /// its OSD first runs (`pontoon osd create`). With `requested`, that id:
    /// one already registered (its device is being formatted again), one
    /// already handed out to a device that never ran, or one never handed
    /// out; an id handed out before whose OSD is gone is refused (ids are
    /// never reused). Without it, the next free id. The id stays reserved
    /// (in [`ClusterMap::created_osds`](crate::ClusterMap::created_osds))
    /// until the OSD registers or [`forget_created_osd`](Self::forget_created_osd).
    pub async fn create_osd_id(&self, requested: Option<OsdId>) -> Result<OsdId, ClusterError> {
        let mut id = None;
        self.update::<_, ClusterError>(|m| {
            if let Some(r) = requested {
                if m.osds.contains_key(&r) || m.created_osds.contains(&r) {
                    id = Some(r);
                    return Ok(false);
                }
                if id_handed_out(m, r) {
                    return Err(ClusterError::InvalidArgument(format!(
                        "{r} was handed out before and is no longer in the cluster (ids are never reused); \
                         leave the id out to get a new one"
                    )));
                }
            }
            let new = m.alloc_osd_id(requested);
            m.created_osds.insert(new);
            id = Some(new);
            Ok(true)
        })
        .await?;
        id.ok_or_else(|| ClusterError::InvalidArgument("OSD id allocation did not run".into()))
    }

    /// Takes back an id [`create_osd_id`](Self::create_osd_id) reserved for
    /// a device that could not be formatted after all. The id is not
    /// handed out again (ids are never reused).
    pub async fn forget_created_osd(&self, id: OsdId) -> Result<(), ClusterError> {
        self.update::<_, ClusterError>(|m| Ok(m.created_osds.remove(&id)))
            .await?;
        Ok(())
    }
}

/// Whether `id` was handed out by `map` before: below the next id or
/// below a registered one.
pub fn id_handed_out(map: &crate::ClusterMap, id: OsdId) -> bool {
    map.next.osd > id.0 || map.osds.keys().any(|o| o.0 > id.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsids_print_as_uuids_and_parse_back() {
        let f = ClusterFsid::random();
        let text = f.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "4", "version 4: {text}");
        assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"), "{text}");
        assert_eq!(text.parse::<ClusterFsid>().unwrap(), f);
        assert_ne!(ClusterFsid::random(), f);
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<ClusterFsid>(&json).unwrap(), f);
        assert!("not-a-uuid".parse::<ClusterFsid>().is_err());
    }

    #[test]
    fn weight_follows_size() {
        assert_eq!(weight_for_size(0), 1);
        assert_eq!(weight_for_size(256 << 20), 256);
        assert_eq!(weight_for_size(4 << 40), 4 << 20);
    }
}
