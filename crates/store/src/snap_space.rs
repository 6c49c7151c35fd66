//! Snapshot space as operators ask for it: each live snapshot's exclusive
//! blocks, and an object's snapshot state as it will be once trimmed.
//!
//! Both take the volume's live snapshot ids from the caller (the cluster
//! map), since the store knows clones, not snapshots: a clone serves every
//! snapshot id in (previous clone's id, its id], which may hold several
//! live snapshots, one, or none (a clone that trim has not removed yet).

use pontoon_types::{ObjectId, VolumeId};

use crate::device::BlockDevice;
use crate::objects::ObjectMeta;
use crate::snap_ops::SnapInfo;
use crate::store::Store;

/// Space one live snapshot holds in a volume on this slice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapSpace {
    /// The snapshot id.
    pub id: u64,
    /// Data blocks that removing this snapshot alone would free: blocks of
    /// clones it alone reads, that no older snapshot reads through them.
    pub exclusive_blocks: u64,
}

/// The ids of `live` (ascending) in (`after`, `upto`].
fn live_in(live: &[u64], after: u64, upto: u64) -> &[u64] {
    let a = live.partition_point(|&x| x <= after);
    let b = live.partition_point(|&x| x <= upto);
    &live[a..b.max(a)]
}

/// Which clones snap trim removes, for a volume whose live snapshot ids
/// are `live`, read at snapshot sequence `seq`: the clones no live
/// snapshot reads, except those newer than `seq` (they belong to
/// snapshots the caller has not seen yet, so they count as live). The one
/// rule [`Store::trim_snaps`] applies and [`Store::snaps_trimmed`]
/// predicts.
pub(crate) struct TrimRule {
    /// `live`, sorted and deduplicated, then `seq + 1`.
    live_all: Vec<u64>,
    seq: u64,
}

impl TrimRule {
    pub(crate) fn new(live: &[u64], seq: u64) -> Self {
        let mut live_all = live.to_vec();
        live_all.sort_unstable();
        live_all.dedup();
        live_all.push(seq.saturating_add(1));
        Self { live_all, seq }
    }

    /// The clones of `obj` this trim removes.
    pub(crate) fn dead_clones(&self, obj: &ObjectMeta) -> Vec<u64> {
        let mut d = obj.dead_clones(&self.live_all);
        d.retain(|&id| id <= self.seq);
        d
    }
}

impl<D: BlockDevice> Store<D> {
    /// Exclusive space of each of `live` (the volume's snapshot ids,
    /// ascending) in `volume`'s objects on this slice, ascending by id;
    /// snapshots holding nothing exclusively are left out. One pass over
    /// the volume's objects (for reports, not for the data path).
    pub fn snap_space(&self, volume: VolumeId, live: &[u64]) -> Vec<SnapSpace> {
        let mut live = live.to_vec();
        live.sort_unstable();
        live.dedup();
        let st = self.inner.st.borrow();
        let mut by_id: std::collections::BTreeMap<u64, u64> = Default::default();
        for (oid, obj) in &st.objects.map {
            if oid.volume != volume {
                continue;
            }
            let Some(s) = obj.snaps.as_ref() else {
                continue;
            };
            let mut prev = 0u64;
            for (i, c) in s.clones.iter().enumerate() {
                let readers = live_in(&live, prev, c.id);
                prev = c.id;
                let [only] = readers else {
                    // Shared by several snapshots, or by none (trim
                    // removes it): nobody's exclusively.
                    continue;
                };
                let (_, n) = s.clone_space(i);
                if n > 0 {
                    *by_id.entry(*only).or_default() += n;
                }
            }
        }
        by_id
            .into_iter()
            .map(|(id, exclusive_blocks)| SnapSpace {
                id,
                exclusive_blocks,
            })
            .collect()
    }

    /// `oid`'s snapshot state as it will be once trimmed with `live` at
    /// sequence `seq` (see [`Store::trim_snaps`]), computed on a copy of
    /// its metadata: what replicas that trimmed at different moments agree
    /// on. `None` if it has no snapshot state.
    pub fn snaps_trimmed(&self, oid: ObjectId, live: &[u64], seq: u64) -> Option<SnapInfo> {
        let rule = TrimRule::new(live, seq);
        let mut obj = {
            let st = self.inner.st.borrow();
            let o = st.objects.get(&oid)?;
            o.snaps.as_ref()?;
            ObjectMeta {
                version: o.version,
                blocks: Vec::new(),
                snaps: o.snaps.clone(),
            }
        };
        let has_head = obj.has_head();
        for id in rule.dead_clones(&obj) {
            obj.trim_clone(id, |_| {});
        }
        let s = obj.snaps.as_ref()?;
        Some(SnapInfo::of(s, has_head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_in_is_the_half_open_range() {
        let live = [2, 5, 9];
        assert_eq!(live_in(&live, 0, 5), &[2, 5]);
        assert_eq!(live_in(&live, 5, 8), &[] as &[u64]);
        assert_eq!(live_in(&live, 5, 9), &[9]);
    }
}
