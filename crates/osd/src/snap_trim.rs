//! Snap trim: freeing the blocks that only removed snapshots held.
//!
//! `pontoon snap rm` only removes the snapshot's record from the map. Each
//! OSD then trims its own copies of the volume's objects with
//! [`pontoon_store::Store::trim_snaps`], keeping the clones that the map's
//! remaining snapshots read (a snapshot that a clone volume depends on
//! keeps its record, so it stays live) and every clone newer than the
//! map's `snap_seq` for the volume (snapshots this map does not know yet).
//!
//! Every OSD decides from the map alone, so the members of a PG converge
//! on the same clones whatever order and moment each trims in: trimming a
//! clone keeps what every remaining snapshot reads, and the result depends
//! only on the set of live snapshots, not on when the trims ran (see
//! [`crate::scrub`], which compares copies as they will be once trimmed).
//!
//! A volume is scheduled when a map shows it lost snapshot ids, for every
//! volume with snapshots at a shard's first map (a restarted OSD finishes
//! what it did not), and when recovery installs a copy that carries clones
//! (the copy may come from a member that has not trimmed yet). A shard
//! trims one volume at a time, [`BATCH`] objects per call with a pause
//! between calls; the store itself waits while client writes are queued.
//! A call that fails is tried again after [`RETRY`], at most
//! [`MAX_RETRIES`] times per scheduling.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use pontoon_store::BlockDevice;
use pontoon_types::{BLOCK_SIZE_U64, VolumeId};
use rustc_hash::FxHashMap;

use crate::map::ShardMap;
use crate::peers::Peers;
use crate::shard::Shard;

/// Objects one trim call handles.
const BATCH: usize = 32;
/// Pause between calls, so client I/O is served in between.
const PAUSE: Duration = Duration::from_millis(1);
/// Wait before trying a failed call again.
const RETRY: Duration = Duration::from_secs(2);
/// Failed calls per volume before it waits for the next scheduling.
const MAX_RETRIES: u32 = 8;
/// Calls in a row that trimmed nothing yet said more was left, before the
/// volume is given up until the next scheduling (a guard, never expected).
const MAX_IDLE_CALLS: u32 = 4;

/// A shard's snap trim bookkeeping.
#[derive(Default)]
pub struct SnapTrim {
    /// Volumes to trim, with the failed calls each has had.
    pending: RefCell<BTreeMap<u64, u32>>,
    /// Live snapshot ids per volume in the last map looked at (`None`
    /// before the first).
    seen: RefCell<Option<FxHashMap<u64, Vec<u64>>>>,
    /// The trim task is running.
    running: Cell<bool>,
    /// Volumes scheduled again while the task was running: a request that
    /// arrives during the call that finishes a volume's pass (computed
    /// with the live snapshots of an older map) makes another pass.
    again: RefCell<std::collections::BTreeSet<u64>>,
    /// Objects trimmed since the shard started.
    objects: Cell<u64>,
    /// Clones removed since the shard started.
    clones: Cell<u64>,
    /// Data blocks freed since the shard started.
    freed_blocks: Cell<u64>,
}

/// Snap trim progress for reports and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapTrimProgress {
    /// Volumes waiting to be trimmed (the one being trimmed included).
    pub pending_volumes: u64,
    /// Objects whose clones were trimmed since the shard started.
    pub trimmed_objects: u64,
    /// Clones removed since the shard started.
    pub trimmed_clones: u64,
    /// 4 KiB data blocks freed since the shard started.
    pub freed_blocks: u64,
}

impl SnapTrim {
    /// Current progress.
    pub fn progress(&self) -> SnapTrimProgress {
        SnapTrimProgress {
            pending_volumes: self.pending.borrow().len() as u64,
            trimmed_objects: self.objects.get(),
            trimmed_clones: self.clones.get(),
            freed_blocks: self.freed_blocks.get(),
        }
    }
}

/// The volumes `map` asks to trim, given the live snapshot sets of the map
/// looked at before (`None`: this is the first): those that lost a
/// snapshot id, or at the first map every volume that ever had a snapshot.
pub fn volumes_to_trim(before: Option<&FxHashMap<u64, Vec<u64>>>, map: &ShardMap) -> Vec<u64> {
    let mut out: Vec<u64> = match before {
        None => map
            .volumes
            .keys()
            .copied()
            .filter(|v| map.snap_seq(*v) > 0)
            .collect(),
        Some(before) => before
            .iter()
            .filter(|(v, ids)| {
                map.volumes.contains_key(v) && {
                    let now = map.live_snaps(**v);
                    ids.iter().any(|id| now.binary_search(id).is_err())
                }
            })
            .map(|(v, _)| *v)
            .collect(),
    };
    out.sort_unstable();
    out
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Schedules trimming of the volumes `map` (just installed) asks for.
    pub(crate) fn want_snap_trim(self: &Rc<Self>, map: &ShardMap) {
        let volumes = {
            let mut seen = self.snap_trim.seen.borrow_mut();
            let v = volumes_to_trim(seen.as_ref(), map);
            *seen = Some(map.snaps.clone());
            v
        };
        for v in volumes {
            self.schedule_snap_trim(v);
        }
    }

    /// `oid`'s snapshot state as snap trim will leave it under the current
    /// map (see [`pontoon_store::Store::snaps_trimmed`]).
    pub(crate) fn snaps_once_trimmed(
        &self,
        oid: pontoon_types::ObjectId,
    ) -> Option<pontoon_store::SnapInfo> {
        let map = self.map();
        let volume = oid.volume.0;
        self.store
            .snaps_trimmed(oid, map.live_snaps(volume), map.snap_seq(volume))
    }

    /// Whether `oid` holds clones that no snapshot of the map reads.
    pub(crate) fn has_dead_clones(&self, oid: pontoon_types::ObjectId) -> bool {
        self.snaps_once_trimmed(oid) != self.store.snaps(oid)
    }

    /// After a write, discard or delete stamped with `snap_seq` landed on
    /// `oid`: if this shard's map is past that sequence, the operation may
    /// have made a clone for a snapshot removed meanwhile, after the
    /// object's trim (simulator seed 386: a write issued before a create,
    /// stamped with the removed snapshot's sequence, landed on a replica
    /// that had trimmed). Trim the volume again if so. Costs one integer
    /// comparison unless the operation was stale.
    pub(crate) fn trim_after_stale_write(
        self: &Rc<Self>,
        oid: pontoon_types::ObjectId,
        snap_seq: u64,
    ) {
        if snap_seq < self.map().snap_seq(oid.volume.0) && self.has_dead_clones(oid) {
            self.schedule_snap_trim(oid.volume.0);
        }
    }

    /// Schedules trimming of `volume` (after recovery installed a copy
    /// with clones that are dead here).
    pub(crate) fn schedule_snap_trim(self: &Rc<Self>, volume: u64) {
        self.snap_trim.pending.borrow_mut().insert(volume, 0);
        if self.snap_trim.running.get() {
            self.snap_trim.again.borrow_mut().insert(volume);
        }
        if !self.snap_trim.running.replace(true) {
            let shard = self.clone();
            pontoon_rt::spawn(async move { shard.snap_trim_loop().await });
        }
    }

    async fn snap_trim_loop(self: Rc<Self>) {
        let mut idle = 0u32;
        // The volume being trimmed: since when, objects and blocks so far.
        let mut run: Option<(u64, std::time::Instant, u64, u64)> = None;
        loop {
            let next = self
                .snap_trim
                .pending
                .borrow()
                .first_key_value()
                .map(|(v, n)| (*v, *n));
            let Some((volume, failures)) = next else {
                break;
            };
            let (live, seq) = {
                let map = self.map();
                if !map.volumes.contains_key(&volume) {
                    // Removed: reclaim purges its objects, clones and all.
                    self.snap_trim.pending.borrow_mut().remove(&volume);
                    continue;
                }
                (map.live_snaps(volume).to_vec(), map.snap_seq(volume))
            };
            if run.is_none_or(|r| r.0 != volume) {
                run = Some((volume, pontoon_rt::now(), 0, 0));
            }
            self.snap_trim.again.borrow_mut().remove(&volume);
            let done = self
                .store
                .trim_snaps(VolumeId(volume), &live, seq, BATCH)
                .await;
            let t = &self.snap_trim;
            match done {
                Ok(p) => {
                    t.objects.set(t.objects.get() + p.objects);
                    t.clones.set(t.clones.get() + p.clones);
                    t.freed_blocks.set(t.freed_blocks.get() + p.freed_blocks);
                    if let Some(r) = run.as_mut() {
                        r.2 += p.objects;
                        r.3 += p.freed_blocks;
                    }
                    idle = if p.objects == 0 { idle + 1 } else { 0 };
                    let again = p.more && idle < MAX_IDLE_CALLS;
                    if !again {
                        if p.more {
                            tracing::warn!(osd = %self.me, volume, "snap trim makes no progress; left for the next map");
                        }
                        idle = 0;
                        // Scheduled again during this call (simulator
                        // seed 372): its map may have dropped snapshots
                        // this call did not know of; go over it again.
                        if t.again.borrow_mut().remove(&volume) {
                            pontoon_rt::sleep(PAUSE).await;
                            continue;
                        }
                        t.pending.borrow_mut().remove(&volume);
                        if let Some((_, since, objects, blocks)) = run.take()
                            && objects > 0
                        {
                            let secs = pontoon_rt::now()
                                .saturating_duration_since(since)
                                .as_secs_f64();
                            tracing::info!(
                                osd = %self.me, shard = self.index, volume, objects,
                                freed_mib = (blocks * BLOCK_SIZE_U64) as f64 / f64::from(1 << 20),
                                secs,
                                "snap trim done"
                            );
                        }
                    }
                    pontoon_rt::sleep(PAUSE).await;
                }
                Err(e) => {
                    let failures = failures + 1;
                    if failures >= MAX_RETRIES {
                        tracing::warn!(osd = %self.me, volume, "snap trim failed {failures} times, left for the next map: {e}");
                        t.pending.borrow_mut().remove(&volume);
                    } else {
                        tracing::info!(osd = %self.me, volume, "snap trim failed, trying again: {e}");
                        t.pending.borrow_mut().insert(volume, failures);
                    }
                    pontoon_rt::sleep(RETRY).await;
                }
            }
        }
        self.snap_trim.running.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_types::PoolId;

    fn map(vols: &[(u64, u64, &[u64])]) -> ShardMap {
        let mut m = ShardMap::default();
        for (v, seq, ids) in vols {
            m.volumes.insert(*v, PoolId(1));
            if *seq > 0 {
                m.snap_seqs.insert(*v, *seq);
            }
            if !ids.is_empty() {
                m.snaps.insert(*v, ids.to_vec());
            }
        }
        m
    }

    #[test]
    fn volumes_that_lost_a_snapshot_are_trimmed_and_others_are_not() {
        let a = map(&[(1, 3, &[1, 2, 3]), (2, 1, &[1]), (3, 0, &[])]);
        assert_eq!(
            volumes_to_trim(None, &a),
            vec![1, 2],
            "a first map trims every volume that had snapshots"
        );
        let b = map(&[(1, 4, &[1, 3, 4]), (2, 1, &[1]), (3, 1, &[1])]);
        assert_eq!(volumes_to_trim(Some(&a.snaps), &b), vec![1], "2 lost");
        let c = map(&[(1, 4, &[1, 3, 4]), (2, 1, &[]), (3, 1, &[1])]);
        assert_eq!(volumes_to_trim(Some(&b.snaps), &c), vec![2], "all gone");
        let d = map(&[(2, 1, &[])]);
        assert_eq!(
            volumes_to_trim(Some(&c.snaps), &d),
            Vec::<u64>::new(),
            "removed volumes are reclaim's"
        );
    }
}
