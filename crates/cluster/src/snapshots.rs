//! Volume snapshots in the map: the records, their rules, and the map
//! changes that create, protect and remove them.
//!
//! A volume's snapshots live in its own record (`volumes/<id>`, see
//! [`VolumeRecord::snapshots`]), so a snapshot and the volume's snapshot
//! sequence change in one key of one transaction. Creating a snapshot bumps
//! the volume's `snap_seq`; the new snapshot's id is that value. Ids are
//! never reused: removing a snapshot does not lower the sequence, so a
//! store never mistakes an old clone for a new snapshot.
//!
//! Clients stamp their writes with the `snap_seq` of their map; the OSDs
//! keep, redirect-on-write, every block a snapshot id at or below it still
//! reads. Removing a snapshot only drops its record here: its blocks stay
//! in the stores until they are trimmed (not scheduled yet).
//!
//! Snapshots are named like volumes (`[A-Za-z0-9._-]`, so never `@` or
//! `/`) and addressed as `VOLUME@SNAPSHOT`, as Ceph's RBD does.

use serde::{Deserialize, Serialize};

use crate::etcd::not_found;
use crate::model::{VolumeRecord, is_valid_name};
use crate::{ClusterError, MapStore};

/// Most snapshots one volume may have: bounds the volume's record (one etcd
/// value), the clones each object may carry and every listing.
pub const MAX_SNAPSHOTS_PER_VOLUME: usize = 256;

/// One snapshot of a volume: a read-only image of it as it was when the
/// snapshot was created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The snapshot id: the volume's `snap_seq` the create set. Writes
    /// carrying a sequence of at least this id keep what it reads.
    pub id: u64,
    /// Unique within the volume; rules as for volume names.
    pub name: String,
    /// When it was created, Unix seconds.
    pub created_unix: u64,
    /// The volume's size when it was created: what the snapshot exports.
    pub size_bytes: u64,
    /// Protected snapshots cannot be removed (unprotect first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
}

/// serde helper: skip a zero sequence in the JSON.
pub(crate) fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl VolumeRecord {
    /// The snapshot called `name`.
    pub fn snapshot_by_name(&self, name: &str) -> Option<&SnapshotRecord> {
        self.snapshots.iter().find(|s| s.name == name)
    }

    /// The snapshot with id `id`.
    pub fn snapshot(&self, id: u64) -> Option<&SnapshotRecord> {
        self.snapshots.iter().find(|s| s.id == id)
    }
}

impl crate::ClusterMap {
    /// The size in bytes of what `name` opens: a volume, or with
    /// `VOLUME@SNAPSHOT` that snapshot; `None` if either does not exist.
    pub fn image_size(&self, name: &str) -> Option<u64> {
        match name.split_once('@') {
            Some((volume, snap)) => self
                .volume_by_name(volume)?
                .snapshot_by_name(snap)
                .map(|s| s.size_bytes),
            None => self.volume_by_name(name).map(|v| v.size_bytes),
        }
    }
}

/// Splits `VOLUME@SNAPSHOT` into its two names, checking both. Exactly one
/// `@`; either name may not be empty.
pub fn parse_snap_spec(spec: &str) -> Result<(&str, &str), ClusterError> {
    let Some((volume, snap)) = spec.split_once('@') else {
        return Err(ClusterError::InvalidArgument(format!(
            "{spec:?} is not VOLUME@SNAPSHOT"
        )));
    };
    check_volume_name(volume)?;
    check_snap_name(snap)?;
    Ok((volume, snap))
}

/// Checks a volume name given where a snapshot is addressed.
pub(crate) fn check_volume_name(name: &str) -> Result<(), ClusterError> {
    if is_valid_name(name) {
        return Ok(());
    }
    Err(ClusterError::InvalidArgument(format!(
        "volume name {name:?} must be 1-{} characters of [A-Za-z0-9._-]",
        crate::MAX_NAME_LEN
    )))
}

/// Checks a snapshot name: as a volume name, so never `@` or `/`.
pub fn check_snap_name(name: &str) -> Result<(), ClusterError> {
    if is_valid_name(name) {
        return Ok(());
    }
    Err(ClusterError::InvalidArgument(format!(
        "snapshot name {name:?} must be 1-{} characters of [A-Za-z0-9._-] (no '@' or '/')",
        crate::MAX_NAME_LEN
    )))
}

/// Checks a volume's snapshot records against each other and its
/// sequence (part of [`crate::ClusterMap::validate`]).
pub(crate) fn check_snapshots(v: &VolumeRecord) -> Result<(), String> {
    if v.snapshots.len() > MAX_SNAPSHOTS_PER_VOLUME {
        return Err(format!(
            "{} snapshots (at most {MAX_SNAPSHOTS_PER_VOLUME})",
            v.snapshots.len()
        ));
    }
    let mut prev = 0;
    for (i, s) in v.snapshots.iter().enumerate() {
        if !is_valid_name(&s.name) {
            return Err(format!("snapshot name {:?} is not valid", s.name));
        }
        if s.id <= prev || s.id > v.snap_seq {
            return Err(format!(
                "snapshot {} has id {} (ids ascend, from 1 to the sequence {})",
                s.name, s.id, v.snap_seq
            ));
        }
        prev = s.id;
        if v.snapshots[..i].iter().any(|o| o.name == s.name) {
            return Err(format!("snapshot name {} is used twice", s.name));
        }
    }
    Ok(())
}

impl MapStore {
    /// Creates snapshot `snap` of volume `volume`: bumps the volume's
    /// snapshot sequence and records the snapshot under the new value.
    /// Refused for an unknown volume, a bad or taken name, or a volume with
    /// [`MAX_SNAPSHOTS_PER_VOLUME`] snapshots. Returns the record and the
    /// epoch the map committed at.
    pub async fn create_snapshot(
        &self,
        volume: &str,
        snap: &str,
    ) -> Result<(SnapshotRecord, pontoon_types::Epoch), ClusterError> {
        check_volume_name(volume)?;
        check_snap_name(snap)?;
        let now = crate::etcd::unix_now();
        let mut made = None;
        let updated = self
            .update::<_, ClusterError>(|m| {
                let id = m
                    .volume_by_name(volume)
                    .ok_or_else(|| not_found("volume", volume.to_string()))?
                    .id;
                let Some(v) = m.volumes.get(&id) else {
                    return Err(not_found("volume", volume.to_string()));
                };
                if let Some(p) = &v.parent {
                    let parent = m.parent_spec(p);
                    return Err(ClusterError::InvalidArgument(format!(
                        "volume {volume} is a clone of {parent}; flatten it before taking snapshots"
                    )));
                }
                let Some(v) = m.volumes.get_mut(&id) else {
                    return Err(not_found("volume", volume.to_string()));
                };
                if v.snapshot_by_name(snap).is_some() {
                    return Err(ClusterError::AlreadyExists {
                        kind: "snapshot",
                        name: format!("{volume}@{snap}"),
                    });
                }
                if v.snapshots.len() >= MAX_SNAPSHOTS_PER_VOLUME {
                    return Err(ClusterError::InvalidArgument(format!(
                        "volume {volume} has {} snapshots, the most allowed; remove one first",
                        v.snapshots.len()
                    )));
                }
                let Some(seq) = v.snap_seq.checked_add(1) else {
                    return Err(ClusterError::InvalidArgument(format!(
                        "volume {volume}'s snapshot sequence is exhausted"
                    )));
                };
                v.snap_seq = seq;
                let rec = SnapshotRecord {
                    id: seq,
                    name: snap.to_string(),
                    created_unix: now,
                    size_bytes: v.size_bytes,
                    protected: false,
                };
                v.snapshots.push(rec.clone());
                made = Some(rec);
                Ok(true)
            })
            .await?;
        let rec = made.ok_or_else(|| not_found("snapshot", format!("{volume}@{snap}")))?;
        Ok((rec, updated.map.epoch))
    }

    /// Removes snapshot `snap` of `volume` from the map (its blocks stay in
    /// the stores until trimmed). Refused while it is protected, has
    /// clones, or is exported as an NVMe-oF namespace.
    pub async fn remove_snapshot(
        &self,
        volume: &str,
        snap: &str,
    ) -> Result<SnapshotRecord, ClusterError> {
        check_volume_name(volume)?;
        check_snap_name(snap)?;
        let mut removed = None;
        self.update::<_, ClusterError>(|m| {
            let v = find_volume(m, volume)?;
            let Some(i) = v.snapshots.iter().position(|s| s.name == snap) else {
                return Err(not_found("snapshot", format!("{volume}@{snap}")));
            };
            let (id, sid) = (v.id, v.snapshots[i].id);
            let clones = m.clones_of(id, Some(sid));
            if let Some(reason) = crate::clones::clones_block(&clones) {
                return Err(ClusterError::InUse {
                    kind: "snapshot",
                    name: format!("{volume}@{snap}"),
                    reason,
                });
            }
            let spec = format!("{volume}@{snap}");
            if let Some((nqn, nsid)) = m.nvmf_exports_of(&spec).first() {
                return Err(ClusterError::InUse {
                    kind: "snapshot",
                    name: spec,
                    reason: format!(
                        "it is exported as namespace {nsid} of NVMe-oF subsystem {nqn}"
                    ),
                });
            }
            let v = find_volume(m, volume)?;
            if v.snapshots[i].protected {
                return Err(ClusterError::InUse {
                    kind: "snapshot",
                    name: format!("{volume}@{snap}"),
                    reason: "it is protected; unprotect it first".into(),
                });
            }
            removed = Some(v.snapshots.remove(i));
            Ok(true)
        })
        .await?;
        removed.ok_or_else(|| not_found("snapshot", format!("{volume}@{snap}")))
    }

    /// Protects (`true`) or unprotects a snapshot. Returns whether the
    /// flag changed (setting it to what it is changes nothing).
    pub async fn set_snapshot_protected(
        &self,
        volume: &str,
        snap: &str,
        protected: bool,
    ) -> Result<bool, ClusterError> {
        check_volume_name(volume)?;
        check_snap_name(snap)?;
        let updated = self
            .update::<_, ClusterError>(|m| {
                let v = find_volume(m, volume)?;
                let Some(s) = v.snapshots.iter().find(|s| s.name == snap) else {
                    return Err(not_found("snapshot", format!("{volume}@{snap}")));
                };
                if s.protected == protected {
                    return Ok(false);
                }
                let (id, sid) = (v.id, s.id);
                if !protected
                    && let Some(reason) = crate::clones::clones_block(&m.clones_of(id, Some(sid)))
                {
                    return Err(ClusterError::InUse {
                        kind: "snapshot",
                        name: format!("{volume}@{snap}"),
                        reason,
                    });
                }
                let v = find_volume(m, volume)?;
                let Some(s) = v.snapshots.iter_mut().find(|s| s.id == sid) else {
                    return Err(not_found("snapshot", format!("{volume}@{snap}")));
                };
                s.protected = protected;
                Ok(true)
            })
            .await?;
        Ok(updated.committed)
    }
}

impl MapStore {
    /// Waits (at most `timeout`) until every OSD holding its liveness lease
    /// has reported a map at `epoch` or later, and returns those that did
    /// not. A snapshot is a cut for writes once every OSD knows its
    /// sequence: from then on a write carrying an older one is refused and
    /// sent again under the new one.
    pub async fn osds_behind(
        &self,
        epoch: pontoon_types::Epoch,
        timeout: std::time::Duration,
    ) -> Result<Vec<pontoon_types::OsdId>, ClusterError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let map = self.load().await?;
            let reports = self.reports().await?;
            let behind: Vec<pontoon_types::OsdId> = map
                .alive
                .iter()
                .copied()
                .filter(|o| !reports.iter().any(|r| r.osd == *o && r.epoch >= epoch))
                .collect();
            if behind.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(behind);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// The volume called `name`, to change.
fn find_volume<'a>(
    m: &'a mut crate::ClusterMap,
    name: &str,
) -> Result<&'a mut VolumeRecord, ClusterError> {
    let id = m
        .volume_by_name(name)
        .ok_or_else(|| not_found("volume", name.to_string()))?
        .id;
    m.volumes
        .get_mut(&id)
        .ok_or_else(|| not_found("volume", name.to_string()))
}

/// Why a volume with snapshots cannot be removed, naming them (the first
/// few), or `None` if it has none.
pub fn snapshots_block_removal(v: &VolumeRecord) -> Option<String> {
    const NAMED: usize = 8;
    if v.snapshots.is_empty() {
        return None;
    }
    let names: Vec<String> = v
        .snapshots
        .iter()
        .take(NAMED)
        .map(|s| format!("{}@{}", v.name, s.name))
        .collect();
    let more = match v.snapshots.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "it has {} snapshot(s): {}{more}; remove them first",
        v.snapshots.len(),
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_types::{PoolId, VolumeId};

    fn vol(snaps: &[(u64, &str)], seq: u64) -> VolumeRecord {
        VolumeRecord {
            id: VolumeId(1),
            name: "vm1".into(),
            pool: PoolId(1),
            size_bytes: 1 << 20,
            object_size: 4 << 20,
            snap_seq: seq,
            snapshots: snaps
                .iter()
                .map(|(id, n)| SnapshotRecord {
                    id: *id,
                    name: n.to_string(),
                    created_unix: 1,
                    size_bytes: 1 << 20,
                    protected: false,
                })
                .collect(),
            parent: None,
        }
    }

    #[test]
    fn snap_specs_need_one_at_and_two_valid_names() {
        assert_eq!(parse_snap_spec("vm1@s1").unwrap(), ("vm1", "s1"));
        for bad in [
            "vm1", "@s1", "vm1@", "vm1@s@2", "vm1@a/b", "a/b@s", "vm 1@s",
        ] {
            assert!(parse_snap_spec(bad).is_err(), "{bad}");
        }
        assert!(check_snap_name("x@y").is_err());
        assert!(check_snap_name("x/y").is_err());
        assert!(check_snap_name(&"a".repeat(crate::MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn snapshot_records_must_ascend_within_the_sequence_and_be_named_once() {
        assert!(check_snapshots(&vol(&[(1, "a"), (3, "b")], 3)).is_ok());
        assert!(check_snapshots(&vol(&[(1, "a"), (3, "b")], 2)).is_err());
        assert!(check_snapshots(&vol(&[(2, "a"), (1, "b")], 3)).is_err());
        assert!(check_snapshots(&vol(&[(0, "a")], 3)).is_err());
        assert!(check_snapshots(&vol(&[(1, "a"), (2, "a")], 3)).is_err());
        assert!(check_snapshots(&vol(&[(1, "a@b")], 3)).is_err());
        let many: Vec<(u64, String)> = (1..=MAX_SNAPSHOTS_PER_VOLUME as u64 + 1)
            .map(|i| (i, format!("s{i}")))
            .collect();
        let many: Vec<(u64, &str)> = many.iter().map(|(i, n)| (*i, n.as_str())).collect();
        assert!(check_snapshots(&vol(&many, 1000)).is_err());
        assert!(check_snapshots(&vol(&many[1..], 1000)).is_ok());
    }

    #[test]
    fn a_volume_without_snapshots_keeps_its_old_json() {
        let v = vol(&[], 0);
        let json = serde_json::to_string(&v).unwrap();
        assert!(!json.contains("snap"), "{json}");
        let back: VolumeRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, v);
        let v = vol(&[(2, "before-upgrade")], 2);
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.contains(r#""snap_seq":2"#), "{json}");
        assert!(json.contains(r#""name":"before-upgrade""#), "{json}");
        assert_eq!(serde_json::from_str::<VolumeRecord>(&json).unwrap(), v);
    }

    #[test]
    fn removal_is_blocked_by_snapshots_and_names_them() {
        assert_eq!(snapshots_block_removal(&vol(&[], 3)), None);
        let why = snapshots_block_removal(&vol(&[(1, "a"), (2, "b")], 3)).unwrap();
        assert!(why.contains("vm1@a, vm1@b"), "{why}");
    }
}
