//! The PG table as a pure function of the rest of the map: what the manager
//! runs whenever OSDs, liveness or pools change.
//!
//! For every PG of every pool, `up` is placement over the OSDs that are in
//! and have weight, with the balancer's exceptions (the PG's
//! [`upmap_items`](PgRecord::upmap_items)) applied where they still
//! apply, and `acting` is `up` filtered to the alive OSDs, in the
//! same order (so the primary is the best-ranked live OSD). When `acting`
//! changes the PG enters a new *interval*, numbered by the epoch the change is
//! committed at, and the previous acting set is kept as a [`PastInterval`]
//! if it had any member (it may have accepted writes that peering must find).
//! Past intervals are dropped only by [`trim_past_intervals`], when the
//! primary reports the PG clean in its current interval.
//!
//! No I/O, clock or randomness here: identical inputs give identical tables.

use std::collections::{BTreeMap, BTreeSet};

use pontoon_placement::{BalanceOptions, OsdSpec, PlacementError, PlacementMap, Upmap};
use pontoon_types::{Epoch, OsdId, PgId};

use crate::balancer::UpmapItem;
use crate::model::{ClusterMap, OsdReport, PastInterval, PgRecord, PgState, PoolRecord};

/// What [`recompute`] changed in the PG table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgChanges {
    /// PGs created, or whose `up` or `acting` changed.
    pub changed: Vec<PgId>,
    /// PGs whose acting set changed (a subset of `changed`): each started a
    /// new interval at the map's epoch.
    pub new_intervals: Vec<PgId>,
    /// PGs removed because their pool is gone (or shrank).
    pub removed: Vec<PgId>,
}

impl PgChanges {
    /// Whether the table is unchanged.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

/// Why [`recompute`] refused to run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PgMapError {
    /// Placement rejected a pool's rule (size 0 or above the maximum).
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// A PG's interval is later than the map's epoch: the epoch was not
    /// bumped for this change, and reusing an interval number for a second
    /// acting set would let two primaries stamp the same versions.
    #[error("{pg} is in interval {interval}, later than the map's epoch {epoch}")]
    EpochNotBumped {
        /// The PG.
        pg: PgId,
        /// Its interval.
        interval: Epoch,
        /// The map's epoch.
        epoch: Epoch,
    },
}

/// Recomputes every PG's `up` and `acting` set in place, at `map.epoch`.
///
/// `map.epoch` must be the epoch this change will be committed at: strictly
/// greater than the epoch of every published interval. Inside
/// [`MapStore::update`](crate::MapStore::update) that is already so. A PG
/// whose interval equals `map.epoch` was given its acting set earlier in the
/// same (uncommitted) change; nobody can have seen that set, so it is
/// replaced without becoming a past interval.
///
/// PGs of removed pools are dropped; PGs of new pools are created. When no
/// OSD is eligible, every PG's `up` and `acting` are empty.
pub fn recompute(map: &mut ClusterMap) -> Result<PgChanges, PgMapError> {
    let epoch = map.epoch;
    if let Some(bad) = map.pgs.values().find(|r| r.interval > epoch) {
        return Err(PgMapError::EpochNotBumped {
            pg: bad.pg,
            interval: bad.interval,
            epoch,
        });
    }
    let placement = placement_map(map)?;

    let mut changes = PgChanges::default();
    let wanted: BTreeSet<PgId> = map
        .pools
        .values()
        .flat_map(|p| {
            (0..p.pgs).map(move |i| PgId {
                pool: p.id,
                index: i,
            })
        })
        .collect();
    let stale: Vec<PgId> = map
        .pgs
        .keys()
        .filter(|pg| !wanted.contains(pg))
        .copied()
        .collect();
    for pg in stale {
        map.pgs.remove(&pg);
        changes.removed.push(pg);
    }

    for pool in map.pools.values() {
        let placed = place_pool(placement.as_ref(), pool, &map.pgs)?;
        let sets = placed.up.into_iter().zip(placed.upmap_items);
        for (index, (up, upmap_items)) in (0..pool.pgs).zip(sets) {
            let pg = PgId {
                pool: pool.id,
                index,
            };
            let acting: Vec<OsdId> = up
                .iter()
                .copied()
                .filter(|o| map.alive.contains(o))
                .collect();
            match map.pgs.get_mut(&pg) {
                None => {
                    map.pgs.insert(
                        pg,
                        PgRecord {
                            pg,
                            up,
                            acting,
                            interval: epoch,
                            past_intervals: Vec::new(),
                            scrub_request: None,
                            upmap_items,
                        },
                    );
                    changes.changed.push(pg);
                }
                Some(rec) => {
                    let acting_changed = rec.acting != acting;
                    let upmaps_changed = rec.upmap_items != upmap_items;
                    if !acting_changed && rec.up == up && !upmaps_changed {
                        continue;
                    }
                    if upmaps_changed {
                        rec.upmap_items = upmap_items;
                    }
                    if acting_changed {
                        let old_acting = std::mem::replace(&mut rec.acting, acting);
                        if rec.interval < epoch && !old_acting.is_empty() {
                            rec.past_intervals.push(PastInterval {
                                interval: rec.interval,
                                acting: old_acting,
                            });
                        }
                        rec.interval = epoch;
                        changes.new_intervals.push(pg);
                    }
                    if rec.up != up {
                        rec.up = up;
                    }
                    changes.changed.push(pg);
                }
            }
        }
    }
    Ok(changes)
}

/// Placement over the map's OSDs; `None` when there are none or none is
/// eligible (in, with weight): nothing can hold data, every set is empty.
pub fn placement_map(map: &ClusterMap) -> Result<Option<PlacementMap>, PlacementError> {
    let specs: Vec<OsdSpec> = map
        .osds
        .values()
        .map(|o| OsdSpec {
            id: o.id,
            weight: o.weight,
            host: o.host.clone(),
            in_cluster: o.in_cluster,
        })
        .collect();
    match PlacementMap::new(&specs) {
        Ok(p) if p.eligible_count() == 0 => Ok(None),
        Ok(p) => Ok(Some(p)),
        Err(PlacementError::EmptyCluster | PlacementError::NoEligibleOsd) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A pool's PGs as [`place_pool`] places them, index = PG index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolPlacement {
    /// Each PG's up set.
    pub up: Vec<Vec<OsdId>>,
    /// Each PG's exceptions still in force.
    pub upmap_items: Vec<Vec<UpmapItem>>,
}

/// Every PG's up set of `pool`, the balancer's exceptions applied, and the
/// exceptions still in force per PG: straw2's placement on `placement`
/// (empty sets when nothing is eligible), then each PG's
/// [`upmap_items`](PgRecord::upmap_items) from `pgs` where they still
/// apply (see [`PlacementMap::apply_upmaps`]). An exception whose `from`
/// straw2 no longer chooses, while its replica is still in the PG's
/// current up set, is rebased onto the OSD straw2 now chooses instead, so
/// that the replica stays where it is ([`PlacementMap::balance`] with no
/// new moves).
pub fn place_pool(
    placement: Option<&PlacementMap>,
    pool: &PoolRecord,
    pgs: &BTreeMap<PgId, PgRecord>,
) -> Result<PoolPlacement, PlacementError> {
    let n = pool.pgs as usize;
    let Some(p) = placement else {
        return Ok(PoolPlacement {
            up: vec![Vec::new(); n],
            upmap_items: vec![Vec::new(); n],
        });
    };
    let rule = pool.rule();
    let raw = p.place_pool(&rule, pool.pgs)?;
    let first = PgId::new(pool.id.0, 0);
    let mine = || {
        pgs.range(first..)
            .take_while(|(pg, _)| pg.pool == pool.id && pg.index < pool.pgs)
    };
    let given: Vec<Upmap> = mine()
        .flat_map(|(pg, rec)| {
            rec.upmap_items.iter().map(move |u| Upmap {
                pg: *pg,
                from: u.from,
                to: u.to,
            })
        })
        .collect();
    if given.is_empty() {
        return Ok(PoolPlacement {
            up: raw,
            upmap_items: vec![Vec::new(); n],
        });
    }
    let mut current: Vec<Vec<OsdId>> = vec![Vec::new(); n];
    for (pg, rec) in mine() {
        current[pg.index as usize].clone_from(&rec.up);
    }
    let none = BalanceOptions {
        max_moves: 0,
        ..BalanceOptions::default()
    };
    let b = p.balance(&rule, &raw, &given, Some(&current), &none)?;
    let mut items: Vec<Vec<UpmapItem>> = vec![Vec::new(); n];
    for u in b.upmaps {
        items[u.pg.index as usize].push(UpmapItem {
            from: u.from,
            to: u.to,
        });
    }
    Ok(PoolPlacement {
        up: b.acting,
        upmap_items: items,
    })
}

/// Drops all past intervals of `pg` if `clean_at` is its current interval:
/// the primary has reported the PG active+clean there, so every object is
/// complete on the current acting set and older sets need never be asked.
/// A report from an earlier interval trims nothing. Returns whether
/// anything was dropped.
pub fn trim_past_intervals(pg: &mut PgRecord, clean_at: Epoch) -> bool {
    if clean_at != pg.interval || pg.past_intervals.is_empty() {
        return false;
    }
    pg.past_intervals.clear();
    true
}

/// Applies [`trim_past_intervals`] for every PG that its current primary
/// reports `active+clean` in the PG's current interval. Returns the PGs
/// trimmed. Reports from non-primaries or older intervals are ignored.
pub fn trim_clean_pgs(map: &mut ClusterMap, reports: &[OsdReport]) -> Vec<PgId> {
    let mut trimmed = Vec::new();
    for report in reports {
        for pg in &report.pgs {
            if pg.state != PgState::ActiveClean {
                continue;
            }
            let Some(rec) = map.pgs.get_mut(&pg.pg) else {
                continue;
            };
            if rec.primary() == Some(report.osd) && trim_past_intervals(rec, pg.interval) {
                trimmed.push(pg.pg);
            }
        }
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FailureDomain, OsdRecord, PgReport, PoolRecord};
    use pontoon_types::PoolId;
    use proptest::prelude::*;

    fn osd(id: u32, host: &str) -> OsdRecord {
        OsdRecord {
            id: OsdId(id),
            host: host.into(),
            addrs: vec![format!("127.0.0.1:{}", 7000 + id).parse().unwrap()],
            weight: 1024,
            device_bytes: 1 << 30,
            in_cluster: true,
            down_since_unix: None,
            reported_down: false,
            full: Default::default(),
        }
    }

    fn cluster(osds: u32, pgs: u32, size: u32) -> ClusterMap {
        let mut m = ClusterMap::new("t");
        for i in 0..osds {
            m.osds.insert(OsdId(i), osd(i, &format!("h{}", i % 4)));
            m.alive.insert(OsdId(i));
        }
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "p".into(),
                size,
                min_size: 1,
                pgs,
                failure_domain: FailureDomain::Osd,
            },
        );
        m
    }

    fn bump(m: &mut ClusterMap) {
        m.epoch = Epoch(m.epoch.0 + 1);
    }

    #[test]
    fn new_pool_gets_full_acting_sets_at_the_current_epoch() {
        let mut m = cluster(6, 16, 3);
        bump(&mut m);
        let ch = recompute(&mut m).unwrap();
        assert_eq!(ch.changed.len(), 16);
        for rec in m.pgs.values() {
            assert_eq!(rec.up.len(), 3);
            assert_eq!(rec.acting, rec.up);
            assert_eq!(rec.interval, Epoch(1));
            assert!(rec.past_intervals.is_empty());
        }
        // Nothing changed: nothing to do.
        bump(&mut m);
        assert!(recompute(&mut m).unwrap().is_empty());
    }

    #[test]
    fn osd_death_starts_a_new_interval_and_remembers_the_old_set() {
        let mut m = cluster(6, 32, 3);
        bump(&mut m);
        recompute(&mut m).unwrap();
        let before = m.pgs.clone();
        bump(&mut m);
        m.alive.remove(&OsdId(2));
        let ch = recompute(&mut m).unwrap();
        for (pg, old) in &before {
            let rec = &m.pgs[pg];
            assert_eq!(rec.up, old.up, "up ignores liveness");
            if old.acting.contains(&OsdId(2)) {
                assert!(ch.new_intervals.contains(pg));
                assert_eq!(rec.interval, Epoch(2));
                assert_eq!(rec.acting.len(), 2);
                assert!(!rec.acting.contains(&OsdId(2)));
                assert_eq!(
                    rec.past_intervals,
                    vec![PastInterval {
                        interval: Epoch(1),
                        acting: old.acting.clone()
                    }]
                );
            } else {
                assert_eq!(rec, old);
            }
        }
        // Out: placement moves the PGs away, up changes too.
        bump(&mut m);
        m.osds.get_mut(&OsdId(2)).unwrap().in_cluster = false;
        recompute(&mut m).unwrap();
        for rec in m.pgs.values() {
            assert!(!rec.up.contains(&OsdId(2)));
            assert_eq!(rec.up.len(), 3);
        }
    }

    #[test]
    fn empty_acting_set_is_not_a_past_interval() {
        let mut m = cluster(2, 4, 2);
        m.alive.clear();
        bump(&mut m);
        recompute(&mut m).unwrap();
        assert!(
            m.pgs
                .values()
                .all(|r| r.acting.is_empty() && r.up.len() == 2)
        );
        bump(&mut m);
        m.alive.insert(OsdId(0));
        recompute(&mut m).unwrap();
        for rec in m.pgs.values() {
            assert_eq!(rec.acting, vec![OsdId(0)]);
            assert_eq!(rec.interval, Epoch(2));
            assert!(rec.past_intervals.is_empty());
        }
    }

    #[test]
    fn no_eligible_osds_gives_empty_sets_and_removed_pools_drop_their_pgs() {
        let mut m = cluster(0, 4, 3);
        bump(&mut m);
        recompute(&mut m).unwrap();
        assert_eq!(m.pgs.len(), 4);
        assert!(
            m.pgs
                .values()
                .all(|r| r.up.is_empty() && r.acting.is_empty())
        );
        bump(&mut m);
        m.pools.clear();
        let ch = recompute(&mut m).unwrap();
        assert_eq!(ch.removed.len(), 4);
        assert!(m.pgs.is_empty());
    }

    #[test]
    fn all_osds_out_or_weightless_empties_up_sets() {
        let mut m = cluster(3, 4, 2);
        bump(&mut m);
        recompute(&mut m).unwrap();
        bump(&mut m);
        m.osds.get_mut(&OsdId(0)).unwrap().weight = 0;
        for o in 1..3 {
            m.osds.get_mut(&OsdId(o)).unwrap().in_cluster = false;
        }
        recompute(&mut m).unwrap();
        for rec in m.pgs.values() {
            assert!(rec.up.is_empty() && rec.acting.is_empty());
            assert_eq!(rec.interval, Epoch(2));
            assert_eq!(rec.past_intervals.len(), 1);
        }
    }

    #[test]
    fn epoch_must_be_bumped_before_recomputing() {
        let mut m = cluster(3, 4, 2);
        m.epoch = Epoch(5);
        recompute(&mut m).unwrap();
        m.epoch = Epoch(4);
        assert!(matches!(
            recompute(&mut m),
            Err(PgMapError::EpochNotBumped { .. })
        ));
    }

    #[test]
    fn second_recompute_in_one_change_replaces_the_unpublished_set() {
        let mut m = cluster(4, 8, 3);
        bump(&mut m);
        recompute(&mut m).unwrap();
        let published = m.pgs.clone();
        bump(&mut m);
        m.alive.remove(&OsdId(1));
        recompute(&mut m).unwrap();
        m.alive.remove(&OsdId(2));
        recompute(&mut m).unwrap();
        for (pg, rec) in &m.pgs {
            let old = &published[pg];
            if rec.acting == old.acting {
                assert_eq!(rec, old);
            } else {
                // Only the published set is remembered, not the one the
                // first recompute of this change produced.
                assert_eq!(rec.interval, Epoch(2));
                assert_eq!(
                    rec.past_intervals,
                    vec![PastInterval {
                        interval: Epoch(1),
                        acting: old.acting.clone()
                    }],
                    "{pg}"
                );
            }
        }
    }

    #[test]
    fn clean_report_from_primary_trims_only_its_current_interval() {
        let mut m = cluster(4, 4, 2);
        bump(&mut m);
        recompute(&mut m).unwrap();
        bump(&mut m);
        m.alive.remove(&OsdId(0));
        m.alive.remove(&OsdId(1));
        recompute(&mut m).unwrap();
        let pg = *m
            .pgs
            .keys()
            .find(|p| !m.pgs[p].past_intervals.is_empty())
            .unwrap();
        let rec = m.pgs[&pg].clone();
        let primary = rec.primary().unwrap();
        let other = OsdId((0..4).find(|&i| OsdId(i) != primary).unwrap());
        let epoch = m.epoch;
        let report = |osd, interval, state| OsdReport {
            osd,
            epoch,
            pgs: vec![PgReport {
                pg,
                interval,
                state,
                objects: 1,
                degraded_objects: 0,
                missing_objects: 0,
                recovered_objects: 0,
                note: None,
                scrub: Default::default(),
            }],
            used_bytes: 0,
            capacity_bytes: 0,
            unreachable: Vec::new(),
            ..Default::default()
        };
        let stale = report(primary, Epoch(1), PgState::ActiveClean);
        let not_primary = report(other, rec.interval, PgState::ActiveClean);
        let not_clean = report(primary, rec.interval, PgState::Recovering);
        assert!(trim_clean_pgs(&mut m, &[stale, not_primary, not_clean]).is_empty());
        assert_eq!(m.pgs[&pg], rec);
        let good = report(primary, rec.interval, PgState::ActiveClean);
        assert_eq!(trim_clean_pgs(&mut m, &[good]), vec![pg]);
        assert!(m.pgs[&pg].past_intervals.is_empty());
    }

    fn item(from: u32, to: u32) -> UpmapItem {
        UpmapItem {
            from: OsdId(from),
            to: OsdId(to),
        }
    }

    #[test]
    fn upmap_items_are_applied_to_up_and_dropped_once_they_stop_applying() {
        let mut m = cluster(6, 16, 3);
        bump(&mut m);
        recompute(&mut m).unwrap();
        let pg = PgId::new(1, 0);
        let before = m.pgs[&pg].clone();
        let from = before.up[1];
        let to = (0..6).map(OsdId).find(|o| !before.up.contains(o)).unwrap();
        bump(&mut m);
        m.pgs.get_mut(&pg).unwrap().upmap_items = vec![item(from.0, to.0)];
        let ch = recompute(&mut m).unwrap();
        assert_eq!(ch.changed, vec![pg]);
        assert_eq!(ch.new_intervals, vec![pg]);
        let rec = &m.pgs[&pg];
        let mut want = before.up.clone();
        want[1] = to;
        assert_eq!(rec.up, want);
        assert_eq!(rec.acting, want);
        assert_eq!(rec.upmap_items, vec![item(from.0, to.0)]);
        // Stable: nothing more to do.
        bump(&mut m);
        assert!(recompute(&mut m).unwrap().is_empty());

        // `to` goes out: the exception is dropped, straw2's choice is back.
        bump(&mut m);
        m.osds.get_mut(&to).unwrap().in_cluster = false;
        recompute(&mut m).unwrap();
        let rec = &m.pgs[&pg];
        assert!(rec.upmap_items.is_empty());
        assert_eq!(rec.up, before.up);
    }

    #[test]
    fn malformed_or_foreign_upmap_items_are_dropped() {
        let mut m = cluster(4, 8, 2);
        bump(&mut m);
        recompute(&mut m).unwrap();
        let pg = PgId::new(1, 3);
        let up = m.pgs[&pg].up.clone();
        let outside = (0..4).find(|o| !up.contains(&OsdId(*o))).unwrap();
        bump(&mut m);
        m.pgs.get_mut(&pg).unwrap().upmap_items = vec![
            item(up[0].0, 99),      // unregistered OSD
            item(outside, up[0].0), // `from` not chosen by straw2
            item(up[1].0, up[0].0), // `to` already in the set
        ];
        let ch = recompute(&mut m).unwrap();
        assert_eq!(ch.changed, vec![pg]);
        assert!(ch.new_intervals.is_empty());
        assert!(m.pgs[&pg].upmap_items.is_empty());
        assert_eq!(m.pgs[&pg].up, up);
    }

    #[test]
    fn an_exception_whose_from_straw2_drops_is_rebased_so_its_replica_stays() {
        let base = cluster(6, 64, 3);
        let mut grown = base.clone();
        grown.osds.insert(OsdId(6), osd(6, "h2"));
        let (mut m6, mut m7) = (base, grown);
        for m in [&mut m6, &mut m7] {
            bump(m);
            recompute(m).unwrap();
        }
        // A PG from which the new OSD displaces a member `a`.
        let (pg, a) = m6
            .pgs
            .values()
            .find_map(|r| {
                let now = &m7.pgs[&r.pg].up;
                r.up.iter().find(|o| !now.contains(o)).map(|a| (r.pg, *a))
            })
            .expect("osd.6 takes some PG");
        let b = (0..6)
            .map(OsdId)
            .find(|o| !m6.pgs[&pg].up.contains(o) && !m7.pgs[&pg].up.contains(o))
            .unwrap();
        bump(&mut m6);
        m6.pgs.get_mut(&pg).unwrap().upmap_items = vec![item(a.0, b.0)];
        recompute(&mut m6).unwrap();
        let held: BTreeSet<OsdId> = m6.pgs[&pg].up.iter().copied().collect();
        assert!(held.contains(&b));
        // osd.6 joins: straw2 swaps `a` for osd.6, the exception follows.
        bump(&mut m6);
        m6.osds.insert(OsdId(6), osd(6, "h2"));
        m6.alive.insert(OsdId(6));
        recompute(&mut m6).unwrap();
        let rec = &m6.pgs[&pg];
        assert_eq!(rec.upmap_items, vec![item(6, b.0)]);
        assert_eq!(rec.up.iter().copied().collect::<BTreeSet<_>>(), held);
    }

    /// One change to the cluster between two recomputes.
    #[derive(Clone, Debug)]
    enum Event {
        Die(u32),
        Revive(u32),
        Out(u32),
        In(u32),
        Weight(u32, u64),
        Clean(u32),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => (0..8u32).prop_map(Event::Die),
            3 => (0..8u32).prop_map(Event::Revive),
            1 => (0..8u32).prop_map(Event::Out),
            1 => (0..8u32).prop_map(Event::In),
            1 => (0..8u32, 0..3u64).prop_map(|(o, w)| Event::Weight(o, w * 512)),
            2 => (0..16u32).prop_map(Event::Clean),
        ]
    }

    fn is_ordered_subset(sub: &[OsdId], of: &[OsdId]) -> bool {
        let mut it = of.iter();
        sub.iter().all(|x| it.any(|y| y == x))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn intervals_track_acting_changes_and_history_is_kept(
            events in proptest::collection::vec(proptest::collection::vec(event(), 1..4), 1..30),
            domain_host in any::<bool>(),
        ) {
            let mut m = cluster(8, 16, 3);
            if domain_host {
                m.pools.get_mut(&PoolId(1)).unwrap().failure_domain = FailureDomain::Host;
            }
            bump(&mut m);
            recompute(&mut m).unwrap();
            for step in events {
                let before = m.pgs.clone();
                let mut trimmed = BTreeSet::new();
                bump(&mut m);
                for ev in step {
                    match ev {
                        Event::Die(o) => { m.alive.remove(&OsdId(o)); }
                        Event::Revive(o) => { m.alive.insert(OsdId(o)); }
                        Event::Out(o) => m.osds.get_mut(&OsdId(o)).unwrap().in_cluster = false,
                        Event::In(o) => m.osds.get_mut(&OsdId(o)).unwrap().in_cluster = true,
                        Event::Weight(o, w) => m.osds.get_mut(&OsdId(o)).unwrap().weight = w,
                        Event::Clean(i) => {
                            let pg = PgId::new(1, i);
                            let rec = m.pgs.get_mut(&pg).unwrap();
                            let at = rec.interval;
                            if trim_past_intervals(rec, at) { trimmed.insert(pg); }
                        }
                    }
                }
                let ch = recompute(&mut m).unwrap();
                prop_assert!(ch.removed.is_empty());
                for (pg, rec) in &m.pgs {
                    let old = &before[pg];
                    prop_assert!(is_ordered_subset(&rec.acting, &rec.up), "{rec:?}");
                    prop_assert!(rec.acting.iter().all(|o| m.alive.contains(o)));
                    prop_assert!(rec.up.iter().all(|o| m.osds[o].in_cluster && m.osds[o].weight > 0));
                    let expect_acting: Vec<OsdId> =
                        rec.up.iter().copied().filter(|o| m.alive.contains(o)).collect();
                    prop_assert_eq!(&rec.acting, &expect_acting);
                    if rec.acting != old.acting {
                        prop_assert_eq!(rec.interval, m.epoch);
                        prop_assert!(ch.new_intervals.contains(pg));
                    } else {
                        prop_assert_eq!(rec.interval, old.interval);
                        prop_assert!(!ch.new_intervals.contains(pg));
                    }
                    // History: the old list (unless trimmed) is a prefix, and
                    // the old non-empty acting set was appended on a change.
                    let kept: &[PastInterval] =
                        if trimmed.contains(pg) { &[] } else { &old.past_intervals };
                    prop_assert!(rec.past_intervals.starts_with(kept));
                    let mut expect = kept.to_vec();
                    if rec.acting != old.acting && !old.acting.is_empty() {
                        expect.push(PastInterval { interval: old.interval, acting: old.acting.clone() });
                    }
                    prop_assert_eq!(&rec.past_intervals, &expect);
                    prop_assert!(rec.past_intervals.iter().all(|p| p.interval < rec.interval));
                }
            }
        }
    }
}
