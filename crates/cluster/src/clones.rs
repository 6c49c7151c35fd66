//! Clones in the map: a clone is a volume whose [`VolumeRecord::parent`]
//! names a protected snapshot of another volume; the client library reads
//! the clone's unwritten blocks from that snapshot (layering is done by
//! the client, as librbd does), and `flatten` copies them in and detaches
//! the parent here.
//!
//! Rules kept by the map changes below: a clone's parent snapshot is
//! protected, and stays so (unprotect and remove are refused while a clone
//! names it); a volume with clones cannot be removed; a clone has the
//! parent's object size, so object `i` of the clone lies over object `i` of
//! the parent. A clone takes no snapshots until it is flattened, and a
//! parent is never itself a clone, so every layer chain is one step deep.

use pontoon_types::VolumeId;
use serde::{Deserialize, Serialize};

use crate::etcd::not_found;
use crate::model::{VolumeRecord, ids};
use crate::snapshots::check_volume_name;
use crate::{ClusterError, ClusterMap, MapStore};

/// Clones named in a refusal before "and N more".
const NAMED: usize = 8;

/// The snapshot a clone reads its unwritten blocks from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRecord {
    /// The parent volume.
    #[serde(with = "ids::volume_id")]
    pub volume: VolumeId,
    /// The parent snapshot's id.
    pub snap: u64,
    /// Bytes from the start of the clone that fall through to the parent
    /// (the snapshot's size when the clone was made).
    pub overlap: u64,
}

impl ClusterMap {
    /// Names of the volumes that are clones of snapshot `snap` of volume
    /// `parent` (any of its snapshots for `None`), by id.
    pub fn clones_of(&self, parent: VolumeId, snap: Option<u64>) -> Vec<String> {
        self.volumes
            .values()
            .filter(|v| {
                v.parent
                    .as_ref()
                    .is_some_and(|p| p.volume == parent && snap.is_none_or(|s| p.snap == s))
            })
            .map(|v| v.name.clone())
            .collect()
    }

    /// `VOLUME@SNAPSHOT` of a clone's parent, as far as the map knows it.
    pub fn parent_spec(&self, p: &ParentRecord) -> String {
        let Some(v) = self.volumes.get(&p.volume) else {
            return format!("volume-id-{}@snap-id-{}", p.volume.0, p.snap);
        };
        match v.snapshot(p.snap) {
            Some(s) => format!("{}@{}", v.name, s.name),
            None => format!("{}@snap-id-{}", v.name, p.snap),
        }
    }
}

/// Why something used by clones cannot change, naming them (the first
/// few), or `None` if there are none.
pub fn clones_block(clones: &[String]) -> Option<String> {
    if clones.is_empty() {
        return None;
    }
    let more = match clones.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let names: Vec<&str> = clones.iter().take(NAMED).map(String::as_str).collect();
    Some(format!(
        "it has {} clone(s): {}{more}; flatten or remove them first",
        clones.len(),
        names.join(", ")
    ))
}

/// Checks a volume's parent link against the map (part of
/// [`ClusterMap::validate`]).
pub(crate) fn check_parent(m: &ClusterMap, v: &VolumeRecord) -> Result<(), String> {
    let Some(p) = &v.parent else {
        return Ok(());
    };
    let Some(pv) = m.volumes.get(&p.volume) else {
        return Err(format!("parent volume {} is not in the map", p.volume.0));
    };
    if pv.parent.is_some() {
        return Err(format!("parent volume {} is itself a clone", pv.name));
    }
    if pv.object_size != v.object_size {
        return Err(format!(
            "object size {} differs from parent {}'s {}",
            v.object_size, pv.name, pv.object_size
        ));
    }
    if !v.snapshots.is_empty() {
        return Err("a clone has snapshots".into());
    }
    match pv.snapshot(p.snap) {
        Some(s) if s.protected && p.overlap <= s.size_bytes => Ok(()),
        Some(s) => Err(format!(
            "parent snapshot {}@{} is unprotected or smaller than the overlap {}",
            pv.name, s.name, p.overlap
        )),
        None => Err(format!(
            "parent snapshot id {} of {} is not in the map",
            p.snap, pv.name
        )),
    }
}

impl MapStore {
    /// Creates volume `name` as a clone of snapshot `snap` of `volume`, in
    /// pool `pool` (the parent's when `None`), with the snapshot's size and
    /// the parent's object size. Refused unless the snapshot exists and is
    /// protected, the pool exists, the name is free, and the parent is not
    /// itself a clone.
    pub async fn clone_volume(
        &self,
        volume: &str,
        snap: &str,
        name: &str,
        pool: Option<&str>,
    ) -> Result<VolumeRecord, ClusterError> {
        let spec = format!("{volume}@{snap}");
        check_volume_name(name)?;
        let updated = self
            .update::<_, ClusterError>(|m| {
                let parent = m
                    .volume_by_name(volume)
                    .ok_or_else(|| not_found("volume", volume.to_string()))?
                    .clone();
                let s = parent
                    .snapshot_by_name(snap)
                    .ok_or_else(|| not_found("snapshot", spec.clone()))?;
                if !s.protected {
                    return Err(ClusterError::InvalidArgument(format!(
                        "snapshot {spec} is not protected; `pontoon snap protect {spec}` first"
                    )));
                }
                if let Some(p) = &parent.parent {
                    return Err(ClusterError::InvalidArgument(format!(
                        "volume {volume} is a clone of {}; flatten it before cloning it",
                        m.parent_spec(p)
                    )));
                }
                let pool_id = match pool {
                    Some(p) => {
                        m.pool_by_name(p)
                            .ok_or_else(|| not_found("pool", p.to_string()))?
                            .id
                    }
                    None => parent.pool,
                };
                if m.volume_by_name(name).is_some() {
                    return Err(ClusterError::AlreadyExists {
                        kind: "volume",
                        name: name.to_string(),
                    });
                }
                let id = m.alloc_volume_id();
                let rec = VolumeRecord {
                    id,
                    name: name.to_string(),
                    pool: pool_id,
                    size_bytes: s.size_bytes,
                    object_size: parent.object_size,
                    snap_seq: 0,
                    snapshots: Vec::new(),
                    parent: Some(ParentRecord {
                        volume: parent.id,
                        snap: s.id,
                        overlap: s.size_bytes,
                    }),
                };
                m.volumes.insert(id, rec);
                Ok(true)
            })
            .await?;
        updated
            .map
            .volume_by_name(name)
            .cloned()
            .ok_or_else(|| not_found("volume", name.to_string()))
    }

    /// Detaches clone `name` from its parent (after `flatten` copied the
    /// parent's data in), if it still names `expect`. Returns whether it
    /// changed anything (a volume without a parent changes nothing).
    pub async fn detach_parent(
        &self,
        name: &str,
        expect: &ParentRecord,
    ) -> Result<bool, ClusterError> {
        let updated = self
            .update::<_, ClusterError>(|m| {
                let id = m
                    .volume_by_name(name)
                    .ok_or_else(|| not_found("volume", name.to_string()))?
                    .id;
                let Some(v) = m.volumes.get_mut(&id) else {
                    return Err(not_found("volume", name.to_string()));
                };
                match &v.parent {
                    None => Ok(false),
                    Some(p) if p == expect => {
                        v.parent = None;
                        Ok(true)
                    }
                    Some(_) => Err(ClusterError::InvalidArgument(format!(
                        "volume {name}'s parent changed during flatten; run it again"
                    ))),
                }
            })
            .await?;
        Ok(updated.committed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_first_clones_and_count_the_rest() {
        assert_eq!(clones_block(&[]), None);
        let why = clones_block(&["c1".into(), "c2".into()]).unwrap();
        assert!(why.contains("2 clone(s): c1, c2;"), "{why}");
        let many: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        let why = clones_block(&many).unwrap();
        assert!(why.contains("c7 and 2 more"), "{why}");
    }

    #[test]
    fn a_volume_without_a_parent_keeps_its_old_json() {
        let json = r#"{"id":3,"name":"v","pool":1,"size_bytes":4096,"object_size":4194304}"#;
        let v: VolumeRecord = serde_json::from_str(json).unwrap();
        assert_eq!(v.parent, None);
        assert_eq!(serde_json::to_string(&v).unwrap(), json);
        let p = ParentRecord {
            volume: VolumeId(1),
            snap: 2,
            overlap: 4096,
        };
        let c = VolumeRecord {
            parent: Some(p.clone()),
            ..v
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(
            json.contains(r#""parent":{"volume":1,"snap":2,"overlap":4096}"#),
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<VolumeRecord>(&json).unwrap().parent,
            Some(p)
        );
    }
}
