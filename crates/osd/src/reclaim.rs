//! Reclaim: deleting what a shard holds that nobody will ever need again.
//!
//! Two kinds of garbage, both decided from the map alone:
//! - objects of removed volumes (an id below the map's next volume id that
//!   the map no longer lists: ids are never reused, so no later volume can
//!   claim them);
//! - strays: copies of a PG this OSD does not serve (not in its up or
//!   acting set) while the PG is clean (no past interval is kept, so no
//!   peering will ask this OSD for them).
//!
//! Garbage goes whole: head and snapshot clones, purged. No snapshot reads
//! either kind: the map refuses to remove a volume that has snapshots, and
//! a stray's PG is clean on its acting set, whose members recovery gave
//! whole copies, clones included. (A snapshot-aware delete would instead
//! move the head into a clone that nothing would ever list or trim again.)
//!
//! Each map a shard installs schedules a pass; a restarted OSD thus cleans
//! up at its first map. A pass lists the garbage, then deletes it a batch
//! at a time behind client I/O. Every object is judged again, under its
//! lock and in the same synchronous step that marks the delete in flight
//! for its PG, so a map that makes the PG ours again between the listing
//! and the delete keeps the object, and a peering query answered meanwhile
//! lists the PG only after the delete reached the store.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use pontoon_store::BlockDevice;
use pontoon_types::{ObjectId, OsdId, PgId};
use rustc_hash::FxHashMap;

use crate::locks::InFlightGuard;
use crate::map::ShardMap;
use crate::peers::Peers;
use crate::pg::Phase;
use crate::shard::Shard;

/// Deletes one pass keeps in flight.
const BATCH: usize = 32;
/// Pause between batches, so client I/O is served in between.
const PAUSE: Duration = Duration::from_millis(1);
/// After a pass that deleted something, look once more this much later:
/// a write accepted before the map said its volume was gone may have
/// landed after its object was deleted.
const RECHECK: Duration = Duration::from_secs(2);

/// Why an object is garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Garbage {
    /// Its volume was removed.
    RemovedVolume,
    /// A copy of a clean PG this OSD does not serve.
    Stray(PgId),
}

/// Whether `oid` belongs to a volume `map` says was removed.
pub fn volume_removed(map: &ShardMap, oid: ObjectId) -> bool {
    let volume = oid.volume.0;
    volume < map.next_volume && !map.volumes.contains_key(&volume)
}

/// Whether `oid`, held by OSD `me`, is garbage by `map`.
pub fn classify(map: &ShardMap, me: OsdId, oid: ObjectId) -> Option<Garbage> {
    let Some(pg) = map.pg_of(oid) else {
        return volume_removed(map, oid).then_some(Garbage::RemovedVolume);
    };
    let entry = map.pgs.get(&pg)?;
    let clean_elsewhere = !entry.acting.is_empty()
        && entry.past.is_empty()
        && !entry.acting.contains(&me)
        && !entry.up.contains(&me);
    clean_elsewhere.then_some(Garbage::Stray(pg))
}

/// A shard's reclaim bookkeeping.
#[derive(Default)]
pub struct Reclaim {
    /// A map arrived since the running pass listed its garbage.
    dirty: Cell<bool>,
    /// A pass is running.
    running: Cell<bool>,
    /// Objects the running pass still has to delete.
    pending: Cell<u64>,
    /// Objects deleted since the shard started.
    deleted: Cell<u64>,
}

/// Reclaim progress for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimProgress {
    /// Garbage objects listed and not yet deleted.
    pub pending_objects: u64,
    /// Objects deleted since the shard started.
    pub deleted_objects: u64,
}

impl Reclaim {
    /// Current progress.
    pub fn progress(&self) -> ReclaimProgress {
        ReclaimProgress {
            pending_objects: self.pending.get(),
            deleted_objects: self.deleted.get(),
        }
    }
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Schedules a reclaim pass (after a new map).
    pub(crate) fn want_reclaim(self: &Rc<Self>) {
        self.reclaim.dirty.set(true);
        if !self.reclaim.running.replace(true) {
            let shard = self.clone();
            pontoon_rt::spawn(async move { shard.reclaim_loop().await });
        }
    }

    async fn reclaim_loop(self: Rc<Self>) {
        while self.reclaim.dirty.replace(false) {
            let deleted = self.reclaim_pass().await;
            if deleted > 0 && !self.reclaim.dirty.get() {
                pontoon_rt::sleep(RECHECK).await;
                self.reclaim.dirty.set(true);
            }
        }
        self.reclaim.pending.set(0);
        self.reclaim.running.set(false);
    }

    /// Lists the garbage under the current map and deletes it; returns
    /// how many objects were deleted. Stops early when fenced (the next
    /// map starts a new pass) or when a new map arrived (the loop lists
    /// again with it).
    async fn reclaim_pass(self: &Rc<Self>) -> u64 {
        let map = self.map();
        let me = self.me;
        let garbage = self
            .store
            .list_held_where(|oid| classify(&map, me, oid).is_some());
        if garbage.is_empty() {
            return 0;
        }
        let removed = garbage
            .iter()
            .filter(|(oid, _)| volume_removed(&map, *oid))
            .count();
        drop(map);
        tracing::info!(
            osd = %self.me,
            shard = self.index,
            removed_volumes = removed,
            strays = garbage.len() - removed,
            "reclaiming objects nobody needs"
        );
        self.reclaim.pending.set(garbage.len() as u64);
        let mut deleted = 0;
        for batch in garbage.chunks(BATCH) {
            if self.is_fenced() || self.reclaim.dirty.get() {
                break;
            }
            let mut work: FuturesUnordered<_> = batch
                .iter()
                .map(|(oid, _)| self.reclaim_one(*oid))
                .collect();
            while let Some(done) = work.next().await {
                deleted += u64::from(done);
            }
            self.reclaim.pending.set(
                self.reclaim
                    .pending
                    .get()
                    .saturating_sub(batch.len() as u64),
            );
            pontoon_rt::sleep(PAUSE).await;
        }
        self.reclaim
            .deleted
            .set(self.reclaim.deleted.get() + deleted);
        if removed > 0 {
            self.recount_pg_objects();
        }
        deleted
    }

    /// Sets the object count of every PG this shard leads to what it
    /// holds plus what it still has to recover, dropping the objects of
    /// removed volumes that peering counted.
    fn recount_pg_objects(&self) {
        let map = self.map();
        let mut held: FxHashMap<PgId, u64> = FxHashMap::default();
        for (oid, _) in self.store.list_held_where(|_| true) {
            if let Some(pg) = map.pg_of(oid) {
                *held.entry(pg).or_default() += 1;
            }
        }
        for p in self.pgs.borrow_mut().values_mut() {
            if p.phase != Phase::Active {
                continue;
            }
            let absent = p
                .missing
                .keys()
                .filter(|o| self.store.held_version(**o).is_none())
                .count() as u64;
            p.objects = held.get(&p.id).copied().unwrap_or(0) + absent;
        }
    }

    /// Purges `oid`, clones and all, if it is still garbage; whether it did.
    async fn reclaim_one(self: &Rc<Self>, oid: ObjectId) -> bool {
        let _lock = self.locks.lock(oid).await;
        let Some((version, _inflight)) = self.still_garbage(oid) else {
            return false;
        };
        match self.store.purge(oid, version).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(osd = %self.me, %oid, "reclaim: purge failed: {e}");
                false
            }
        }
    }

    /// Judges `oid` again under the current map and this shard's PG state;
    /// if it is garbage, its version and (for a stray) the in-flight mark
    /// that makes a peering query wait for the delete.
    fn still_garbage(
        &self,
        oid: ObjectId,
    ) -> Option<(pontoon_types::Version, Option<InFlightGuard>)> {
        if self.is_fenced() {
            return None;
        }
        let map = self.map();
        let version = self.store.held_version(oid)?;
        match classify(&map, self.me, oid)? {
            Garbage::RemovedVolume => Some((version, None)),
            Garbage::Stray(pg) => {
                let interval = map.pgs.get(&pg)?.interval;
                // A primary of a newer interval than the map's peered with
                // us, or we serve the PG: not garbage after all.
                let keep = self
                    .pgs
                    .borrow()
                    .get(&pg)
                    .is_some_and(|p| p.known_interval() > interval || p.phase != Phase::Stray);
                (!keep).then(|| (version, Some(self.inflight.enter(pg))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::{PastInterval, PgEntry, PoolParams, pg_for};
    use pontoon_types::{Epoch, PoolId};

    fn map(acting: &[u32], up: &[u32], past: &[&[u32]]) -> (ShardMap, ObjectId) {
        let mut m = ShardMap {
            epoch: Epoch(10),
            next_volume: 5,
            ..Default::default()
        };
        let pool = PoolId(1);
        m.pools.insert(
            pool,
            PoolParams {
                size: 3,
                min_size: 2,
                pgs: 1,
            },
        );
        m.volumes.insert(3, pool);
        let oid = ObjectId::new(3, 0);
        let ids = |v: &[u32]| v.iter().map(|&i| OsdId(i)).collect::<Vec<_>>();
        m.pgs.insert(
            pg_for(pool, 1, oid),
            PgEntry {
                interval: Epoch(9),
                acting: ids(acting),
                up: ids(up),
                past: past
                    .iter()
                    .map(|a| PastInterval {
                        interval: Epoch(1),
                        acting: ids(a),
                    })
                    .collect(),
            },
        );
        (m, oid)
    }

    #[test]
    fn removed_volumes_are_garbage_and_unknown_new_ones_are_not() {
        let (m, _) = map(&[0, 1, 2], &[0, 1, 2], &[]);
        let me = OsdId(0);
        assert_eq!(classify(&m, me, ObjectId::new(3, 7)), None, "live volume");
        assert_eq!(
            classify(&m, me, ObjectId::new(4, 7)),
            Some(Garbage::RemovedVolume)
        );
        assert_eq!(
            classify(&m, me, ObjectId::new(5, 7)),
            None,
            "a volume newer than this map may exist"
        );
    }

    #[test]
    fn a_copy_is_stray_only_when_its_pg_is_clean_elsewhere() {
        let me = OsdId(3);
        let (m, oid) = map(&[0, 1, 2], &[0, 1, 2], &[]);
        assert!(matches!(classify(&m, me, oid), Some(Garbage::Stray(_))));
        let (m, oid) = map(&[0, 1, 2], &[0, 1, 2], &[&[0, 1, 3]]);
        assert_eq!(classify(&m, me, oid), None, "a past interval needs it");
        let (m, oid) = map(&[0, 1], &[0, 1, 3], &[]);
        assert_eq!(classify(&m, me, oid), None, "up, though not acting");
        let (m, oid) = map(&[0, 1, 3], &[0, 1, 3], &[]);
        assert_eq!(classify(&m, me, oid), None, "acting");
        let (m, oid) = map(&[], &[0, 1, 2], &[]);
        assert_eq!(classify(&m, me, oid), None, "nobody serves the PG");
    }
}
