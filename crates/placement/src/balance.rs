//! The upmap balancer: bounded exceptions to straw2 that even out per-OSD
//! replica counts.
//!
//! Straw2 alone leaves per-OSD counts Poisson-distributed around their
//! weight-proportional targets. An [`Upmap`] says "in PG `pg`, the replica
//! straw2 puts on `from` lives on `to` instead"; the manager stores the list
//! next to the pool and applies it to every computed placement. The balancer
//! keeps every exception that still applies and adds at most
//! [`BalanceOptions::max_moves`] new moves, each from an OSD above its
//! target to one below it, never breaking the failure domain rule.
//!
//! Hysteresis keeps it from chasing noise: it acts only on OSDs further
//! off target than a trigger ([`BalanceOptions::trigger_deviation`]
//! replicas or [`BalanceOptions::trigger_ratio`] of the target, whichever
//! is larger), and brings those within [`BalanceOptions::goal_deviation`]. Given the acting sets currently in
//! force, it prefers moves that put a replica back where it already is,
//! so rebalancing after a map change moves as little data as it can.

use std::collections::BTreeSet;

use pontoon_types::{OsdId, PgId};

use crate::{FailureDomain, PlacementError, PlacementMap, PoolRule};

/// A move must lower the spread by more than this (in replicas), so float
/// noise in targets can never make the balancer undo its own moves.
const MIN_GAIN: f64 = 1e-9;

/// One exception to straw2 (Ceph's `pg-upmap-items` entry): in `pg`, the
/// replica straw2 places on `from` is placed on `to` instead, in the same
/// position of the acting set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Upmap {
    /// The PG the exception applies to.
    pub pg: PgId,
    /// The OSD straw2 chose.
    pub from: OsdId,
    /// The OSD that holds the replica instead.
    pub to: OsdId,
}

/// Limits and thresholds of one [`PlacementMap::balance`] call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BalanceOptions {
    /// Most new moves (changed replica positions) this call may add. Each
    /// move is one replica's worth of data to copy.
    pub max_moves: u32,
    /// The balancer acts only on OSDs more than this many replicas above
    /// or below their target (or `trigger_ratio` of it, if larger); when
    /// no OSD is that far off, it moves nothing.
    pub trigger_deviation: f64,
    /// The trigger as a fraction of each OSD's target, so that OSDs with
    /// small targets are held to the same relative balance as big ones.
    pub trigger_ratio: f64,
    /// An OSD it acts on is brought within this many replicas of its
    /// target (if moves allow). Keep it below the trigger: the gap is the
    /// headroom that stops small map changes from triggering moves.
    pub goal_deviation: f64,
}

impl BalanceOptions {
    /// For a pool that holds no data yet, where moves cost nothing: every
    /// OSD within one replica of its target.
    pub fn tight() -> Self {
        Self {
            max_moves: 1_000_000,
            trigger_deviation: 1.0,
            trigger_ratio: 0.0,
            goal_deviation: 1.0,
        }
    }
}

impl Default for BalanceOptions {
    /// For a pool that holds data: act only on OSDs more than 5% (and
    /// more than 2 replicas) off target, bring those within 1 replica, and
    /// move at most 10,000 replicas per call. With targets of 20 replicas
    /// or more this keeps every OSD it can fix within 10% of its share.
    fn default() -> Self {
        Self {
            max_moves: 10_000,
            trigger_deviation: 2.0,
            trigger_ratio: 0.05,
            goal_deviation: 1.0,
        }
    }
}

/// Acting sets with exceptions applied, and the exceptions in force.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Balanced {
    /// Acting set of each PG, index = PG index, after the exceptions.
    pub acting: Vec<Vec<OsdId>>,
    /// The exceptions in force for this pool, sorted: those given that
    /// still apply, plus (after [`PlacementMap::balance`]) new ones.
    pub upmaps: Vec<Upmap>,
    /// Exceptions given for this pool that no longer apply (a PG index out
    /// of range, `from` no longer chosen by straw2, `to` out or in conflict
    /// with the failure domain rule) and were dropped: the replicas they
    /// placed move.
    pub dropped: Vec<Upmap>,
    /// Given exceptions whose `from` straw2 no longer chooses but whose
    /// replica could stay where it is: each was replaced by an exception
    /// from the OSD straw2 now chooses in its stead to the same `to`
    /// ([`PlacementMap::balance`] with `current` only).
    pub rebased: u32,
    /// Replica moves the balancer made in this call (0 for
    /// [`PlacementMap::apply_upmaps`]).
    pub moves: u32,
}

/// Working state: everything in map slots rather than OSD ids.
struct State<'a> {
    map: &'a PlacementMap,
    domain: FailureDomain,
    pool: pontoon_types::PoolId,
    /// Straw2's choice per PG.
    raw: Vec<Vec<u32>>,
    /// Acting set per PG (raw with exceptions applied).
    acting: Vec<Vec<u32>>,
    /// Exceptions per PG as (from slot, to slot).
    exceptions: Vec<Vec<(u32, u32)>>,
    /// Replicas per slot.
    counts: Vec<i64>,
    /// Each slot's share of all replicas: by weight, within what its
    /// failure domain can hold ([`PlacementMap::replica_shares`]).
    target: Vec<f64>,
    /// PGs with a replica on each slot.
    pgs_on: Vec<Vec<u32>>,
}

impl State<'_> {
    fn deviation(&self, slot: u32) -> f64 {
        self.counts[slot as usize] as f64 - self.target[slot as usize]
    }

    /// Whether moving PG `pg`'s replica from slot `a` to slot `b` keeps the
    /// acting set valid and the exception list well formed.
    fn can_move(&self, pg: u32, a: u32, b: u32) -> bool {
        let p = pg as usize;
        let set = &self.acting[p];
        debug_assert!(set.contains(&a));
        if a == b || set.contains(&b) {
            return false;
        }
        if self.raw[p].contains(&b) {
            // Only as the undoing of an exception b -> a.
            if !self.exceptions[p].contains(&(b, a)) {
                return false;
            }
        }
        match self.domain {
            FailureDomain::Osd => true,
            FailureDomain::Host => {
                let host = self.map.host_at(b);
                !set.iter().any(|&x| x != a && self.map.host_at(x) == host)
            }
        }
    }

    fn apply_move(&mut self, pg: u32, a: u32, b: u32) {
        debug_assert!(self.can_move(pg, a, b));
        let p = pg as usize;
        if let Some(pos) = self.acting[p].iter().position(|&x| x == a) {
            self.acting[p][pos] = b;
        }
        let exc = &mut self.exceptions[p];
        match exc.iter().position(|&(_, to)| to == a) {
            Some(i) if exc[i].0 == b => {
                exc.remove(i);
            }
            Some(i) => exc[i].1 = b,
            None => exc.push((a, b)),
        }
        self.counts[a as usize] -= 1;
        self.counts[b as usize] += 1;
        let on_a = &mut self.pgs_on[a as usize];
        if let Some(i) = on_a.iter().position(|&x| x == pg) {
            on_a.remove(i);
        }
        self.pgs_on[b as usize].push(pg);
    }

    /// The slots passing `fits`, most underfull first (`ascending`) or most
    /// overfull first, lower slot first on ties. The first usually takes
    /// the move, so it is found with one scan and the rest sorted only if
    /// it does not.
    fn by_deviation(
        &self,
        fits: impl Fn(u32) -> bool,
        ascending: bool,
    ) -> impl Iterator<Item = u32> {
        let key = move |s: u32| {
            let d = self.deviation(s);
            if ascending { d } else { -d }
        };
        let order = move |x: &u32, y: &u32| key(*x).total_cmp(&key(*y)).then(x.cmp(y));
        let all: Vec<u32> = (0..self.counts.len() as u32).filter(|&s| fits(s)).collect();
        let first = all.iter().copied().min_by(order);
        let mut rest: Option<Vec<u32>> = None;
        first.into_iter().chain(std::iter::from_fn(move || {
            let r = rest.get_or_insert_with(|| {
                let mut r: Vec<u32> = all.iter().copied().filter(|&s| Some(s) != first).collect();
                r.sort_by(order);
                r.reverse(); // pop from the end
                r
            });
            r.pop()
        }))
    }

    /// Finds a move off overfull slot `a`: preferably a replica that was
    /// elsewhere in `current`, back to where it was; else to the most
    /// underfull slot that can take one of `a`'s PGs.
    fn find_shed(&self, a: u32, current: Option<&[Vec<u32>]>) -> Option<(u32, u32)> {
        let da = self.deviation(a);
        let fits = |b: u32| self.deviation(b) < da - 1.0 - MIN_GAIN;
        if let Some(cur) = current {
            let mut best: Option<(f64, u32, u32)> = None;
            for &pg in &self.pgs_on[a as usize] {
                let Some(was) = cur.get(pg as usize) else {
                    continue;
                };
                if was.contains(&a) {
                    continue;
                }
                for &b in was {
                    let db = self.deviation(b);
                    if fits(b) && best.is_none_or(|(d, _, _)| db < d) && self.can_move(pg, a, b) {
                        best = Some((db, pg, b));
                    }
                }
            }
            if let Some((_, pg, b)) = best {
                return Some((pg, b));
            }
        }
        for b in self.by_deviation(fits, true) {
            for &pg in &self.pgs_on[a as usize] {
                if self.can_move(pg, a, b) {
                    return Some((pg, b));
                }
            }
        }
        None
    }

    /// Finds a move onto underfull slot `b`: preferably a PG `b` held in
    /// `current`, back from whichever slot took it; else one of the most
    /// overfull slot's PGs that `b` can take.
    fn find_fill(&self, b: u32, lost: &[u32], current: Option<&[Vec<u32>]>) -> Option<(u32, u32)> {
        let db = self.deviation(b);
        let fits = |a: u32| self.deviation(a) > db + 1.0 + MIN_GAIN;
        if let Some(cur) = current {
            let mut best: Option<(f64, u32, u32)> = None;
            for &pg in lost {
                let p = pg as usize;
                if self.acting[p].contains(&b) {
                    continue;
                }
                for &a in &self.acting[p] {
                    let da = self.deviation(a);
                    if !cur[p].contains(&a)
                        && fits(a)
                        && best.is_none_or(|(d, _, _)| da > d)
                        && self.can_move(pg, a, b)
                    {
                        best = Some((da, pg, a));
                    }
                }
            }
            if let Some((_, pg, a)) = best {
                return Some((pg, a));
            }
        }
        for a in self.by_deviation(fits, false) {
            for &pg in &self.pgs_on[a as usize] {
                if self.can_move(pg, a, b) {
                    return Some((pg, a));
                }
            }
        }
        None
    }

    /// Whether a set keeps the failure domain rule.
    fn domains_distinct(&self, set: &[u32]) -> bool {
        match self.domain {
            FailureDomain::Osd => true,
            FailureDomain::Host => set.iter().enumerate().all(|(i, &x)| {
                set[..i]
                    .iter()
                    .all(|&y| self.map.host_at(x) != self.map.host_at(y))
            }),
        }
    }

    /// Applies one PG's given exceptions (in slots; `None` for an OSD not
    /// eligible in the map) to its straw2 set. Returns which applied.
    fn apply_given(&mut self, pg: u32, given: &[Option<(u32, u32)>]) -> Vec<bool> {
        let p = pg as usize;
        // Well formed: `from` chosen by straw2, `to` not, each OSD once.
        let mut seen: Vec<u32> = Vec::new();
        let sound: Vec<bool> = given
            .iter()
            .map(|g| match *g {
                Some((from, to))
                    if self.raw[p].contains(&from)
                        && !self.raw[p].contains(&to)
                        && !seen.contains(&from)
                        && !seen.contains(&to) =>
                {
                    seen.extend([from, to]);
                    true
                }
                _ => false,
            })
            .collect();
        // All together, if the result keeps the failure domain rule: the
        // normal case, and the only way when each exception frees the host
        // the other needs.
        let mut all = self.raw[p].clone();
        for (g, _) in given.iter().zip(&sound).filter(|(_, ok)| **ok) {
            if let Some((from, to)) = *g
                && let Some(pos) = all.iter().position(|&x| x == from)
            {
                all[pos] = to;
            }
        }
        if self.domains_distinct(&all) {
            self.acting[p] = all;
            self.exceptions[p].extend(
                given
                    .iter()
                    .zip(&sound)
                    .filter(|(_, ok)| **ok)
                    .filter_map(|(g, _)| *g),
            );
            return sound;
        }
        // Otherwise one at a time, in order; one that does not fit yet may
        // fit once another has moved a replica off its host, so passes
        // repeat until one applies nothing (at most `given.len()` passes).
        let mut applied = vec![false; given.len()];
        loop {
            let mut progress = false;
            for (k, g) in given.iter().enumerate() {
                let Some((from, to)) = *g else { continue };
                if sound[k]
                    && !applied[k]
                    && self.acting[p].contains(&from)
                    && self.can_move(pg, from, to)
                {
                    if let Some(pos) = self.acting[p].iter().position(|&x| x == from) {
                        self.acting[p][pos] = to;
                    }
                    self.exceptions[p].push((from, to));
                    applied[k] = true;
                    progress = true;
                }
            }
            if !progress {
                return applied;
            }
        }
    }

    fn into_balanced(self, dropped: Vec<Upmap>, rebased: u32, moves: u32) -> Balanced {
        let map = self.map;
        let acting = self
            .acting
            .iter()
            .map(|set| set.iter().map(|&s| map.id_at(s)).collect())
            .collect();
        let mut upmaps: Vec<Upmap> = self
            .exceptions
            .iter()
            .enumerate()
            .flat_map(|(p, exc)| {
                exc.iter().map(move |&(from, to)| Upmap {
                    pg: PgId {
                        pool: self.pool,
                        index: p as u32,
                    },
                    from: map.id_at(from),
                    to: map.id_at(to),
                })
            })
            .collect();
        upmaps.sort();
        Balanced {
            acting,
            upmaps,
            dropped,
            rebased,
            moves,
        }
    }
}

impl PlacementMap {
    /// Applies exceptions to straw2's placement of a pool (`raw`, as
    /// returned by [`place_pool`](Self::place_pool) on this map), dropping
    /// those that no longer apply. Exceptions for other pools are ignored.
    pub fn apply_upmaps(
        &self,
        rule: &PoolRule,
        raw: &[Vec<OsdId>],
        upmaps: &[Upmap],
    ) -> Result<Balanced, PlacementError> {
        let (state, dropped) = self.state(rule, raw, upmaps)?;
        Ok(state.into_balanced(dropped, 0, 0))
    }

    /// Evens out per-OSD replica counts of one pool with upmap exceptions.
    ///
    /// `raw` is straw2's placement of the pool on this map
    /// ([`place_pool`](Self::place_pool)); `existing` the exceptions in
    /// force (those that still apply are kept); `current` the acting sets
    /// in force now, if the pool holds data — the balancer then prefers
    /// moves that leave replicas where they are. Deterministic: the same
    /// inputs give the same exceptions.
    pub fn balance(
        &self,
        rule: &PoolRule,
        raw: &[Vec<OsdId>],
        existing: &[Upmap],
        current: Option<&[Vec<OsdId>]>,
        options: &BalanceOptions,
    ) -> Result<Balanced, PlacementError> {
        let (mut st, mut dropped) = self.state(rule, raw, existing)?;
        let n = st.counts.len();

        // The acting sets in force, in slots; OSDs no longer eligible are
        // left out (nothing can move back to them).
        let current: Option<Vec<Vec<u32>>> = current.map(|cur| {
            (0..raw.len())
                .map(|p| {
                    cur.get(p)
                        .map(|set| set.iter().filter_map(|&id| self.slot_of(id)).collect())
                        .unwrap_or_default()
                })
                .collect()
        });
        // A dropped exception whose replica is still where it was (`to`
        // holds it in `current`) can often stay: straw2 replaced `from` by
        // some newcomer, and mapping that newcomer to `to` keeps the
        // replica in place instead of moving it for nothing.
        let mut rebased = 0u32;
        if let Some(cur) = &current {
            dropped.retain(|u| {
                let p = u.pg.index as usize;
                let Some(to) = self.slot_of(u.to) else {
                    return true;
                };
                if p >= st.acting.len() || !cur[p].contains(&to) || st.acting[p].contains(&to) {
                    return true;
                }
                let newcomer = st.acting[p].iter().copied().find(|&y| {
                    st.raw[p].contains(&y) && !cur[p].contains(&y) && st.can_move(u.pg.index, y, to)
                });
                match newcomer {
                    Some(y) => {
                        st.apply_move(u.pg.index, y, to);
                        rebased += 1;
                        false
                    }
                    None => true,
                }
            });
        }

        // PGs each slot held in `current` but not in the acting sets now.
        let mut lost: Vec<Vec<u32>> = vec![Vec::new(); n];
        if let Some(cur) = &current {
            for (p, was) in cur.iter().enumerate() {
                for &s in was {
                    if !st.acting[p].contains(&s) {
                        lost[s as usize].push(p as u32);
                    }
                }
            }
        }

        let trigger: Vec<f64> = st
            .target
            .iter()
            .map(|t| options.trigger_deviation.max(options.trigger_ratio * t))
            .collect();
        let mut active: Vec<bool> = (0..n as u32)
            .map(|s| st.deviation(s).abs() > trigger[s as usize])
            .collect();
        let mut exhausted = vec![false; n];
        let mut moves = 0u32;
        while moves < options.max_moves {
            // The active slot furthest from its target, lowest slot on ties.
            let mut pick: Option<(f64, u32)> = None;
            for s in 0..n as u32 {
                let dev = st.deviation(s).abs();
                if active[s as usize]
                    && !exhausted[s as usize]
                    && dev > options.goal_deviation
                    && pick.is_none_or(|(d, _)| dev > d)
                {
                    pick = Some((dev, s));
                }
            }
            let Some((_, s)) = pick else { break };
            let found = if st.deviation(s) > 0.0 {
                st.find_shed(s, current.as_deref())
                    .map(|(pg, b)| (pg, s, b))
            } else {
                st.find_fill(s, &lost[s as usize], current.as_deref())
                    .map(|(pg, a)| (pg, a, s))
            };
            match found {
                Some((pg, a, b)) => {
                    st.apply_move(pg, a, b);
                    moves += 1;
                    for t in [a, b] {
                        if st.deviation(t).abs() > trigger[t as usize] {
                            active[t as usize] = true;
                        }
                    }
                }
                None => exhausted[s as usize] = true,
            }
        }
        Ok(st.into_balanced(dropped, rebased, moves))
    }

    /// Builds the working state: raw placement in slots, existing
    /// exceptions validated and applied, counts and targets.
    fn state<'a>(
        &'a self,
        rule: &PoolRule,
        raw: &[Vec<OsdId>],
        upmaps: &[Upmap],
    ) -> Result<(State<'a>, Vec<Upmap>), PlacementError> {
        self.check_rule(rule)?;
        if u32::try_from(raw.len()).is_err() {
            return Err(PlacementError::TooManyPgs(raw.len()));
        }
        let n = self.eligible_count();
        let mut raw_slots: Vec<Vec<u32>> = Vec::with_capacity(raw.len());
        for set in raw {
            let mut slots = Vec::with_capacity(set.len());
            for &id in set {
                slots.push(self.slot_of(id).ok_or(PlacementError::ForeignOsd(id))?);
            }
            raw_slots.push(slots);
        }
        let mut st = State {
            map: self,
            domain: rule.failure_domain,
            pool: rule.pool,
            acting: raw_slots.clone(),
            raw: raw_slots,
            exceptions: vec![Vec::new(); raw.len()],
            counts: vec![0; n],
            target: vec![0.0; n],
            pgs_on: vec![Vec::new(); n],
        };

        // Validate and apply the given exceptions, PG by PG.
        let mine: Vec<Upmap> = upmaps
            .iter()
            .filter(|u| u.pg.pool == rule.pool)
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut dropped = Vec::new();
        let mut i = 0;
        while i < mine.len() {
            let pg = mine[i].pg;
            let j = i + mine[i..].iter().take_while(|u| u.pg == pg).count();
            let group = &mine[i..j];
            i = j;
            let p = pg.index as usize;
            if p >= st.raw.len() {
                dropped.extend_from_slice(group);
                continue;
            }
            let given: Vec<Option<(u32, u32)>> = group
                .iter()
                .map(|u| Some((self.slot_of(u.from)?, self.slot_of(u.to)?)))
                .collect();
            let applied = st.apply_given(pg.index, &given);
            dropped.extend(
                group
                    .iter()
                    .zip(&applied)
                    .filter(|(_, ok)| !**ok)
                    .map(|(u, _)| *u),
            );
        }

        let mut total = 0u64;
        for (p, set) in st.acting.iter().enumerate() {
            for &s in set {
                st.counts[s as usize] += 1;
                st.pgs_on[s as usize].push(p as u32);
                total += 1;
            }
        }
        let shares = self.replica_shares(rule);
        let per_pg: f64 = shares.iter().sum();
        if per_pg > 0.0 {
            for (t, share) in st.target.iter_mut().zip(&shares) {
                *t = total as f64 * share / per_pg;
            }
        }
        Ok((st, dropped))
    }
}

#[cfg(test)]
mod tests {
    use pontoon_types::{OsdId, PgId, PoolId};

    use super::*;
    use crate::{OsdSpec, movement};

    fn cluster(hosts: u32, per_host: u32) -> Vec<OsdSpec> {
        (0..hosts * per_host)
            .map(|i| OsdSpec {
                id: OsdId(i),
                weight: 1000 + u64::from(i % 3) * 500,
                host: format!("host{}", i / per_host),
                in_cluster: true,
            })
            .collect()
    }

    fn rule(domain: FailureDomain) -> PoolRule {
        PoolRule {
            pool: PoolId(3),
            size: 3,
            failure_domain: domain,
        }
    }

    fn up(pg: u32, from: u32, to: u32) -> Upmap {
        Upmap {
            pg: PgId::new(3, pg),
            from: OsdId(from),
            to: OsdId(to),
        }
    }

    fn host_of(osds: &[OsdSpec], id: OsdId) -> &str {
        osds.iter()
            .find(|o| o.id == id)
            .map_or("", |o| o.host.as_str())
    }

    #[test]
    fn a_domain_holds_at_most_one_replica_of_a_pg_in_the_targets() {
        let spec = |id: u32, host: &str, weight: u64| OsdSpec {
            id: OsdId(id),
            weight,
            host: host.into(),
            in_cluster: true,
        };
        // Three hosts, one with two OSDs: under a host rule with size 3
        // each host holds one replica of every PG whatever its weight.
        let osds = vec![
            spec(0, "a", 1000),
            spec(1, "a", 1000),
            spec(2, "b", 1000),
            spec(3, "c", 1000),
        ];
        let map = PlacementMap::new(&osds).unwrap();
        let targets = |r: &PoolRule| -> Vec<f64> {
            map.replica_targets(r, 100)
                .iter()
                .map(|(_, t)| *t)
                .collect()
        };
        assert_eq!(
            targets(&rule(FailureDomain::Host)),
            [50.0, 50.0, 100.0, 100.0]
        );
        assert_eq!(targets(&rule(FailureDomain::Osd)), [75.0, 75.0, 75.0, 75.0]);
        let two = PoolRule {
            size: 2,
            ..rule(FailureDomain::Host)
        };
        assert_eq!(targets(&two), [50.0, 50.0, 50.0, 50.0]);
        // One OSD heavier than the rest together is capped at every PG.
        let heavy = PlacementMap::new(&[
            spec(0, "a", 9000),
            spec(1, "b", 1000),
            spec(2, "c", 1000),
            spec(3, "d", 2000),
        ])
        .unwrap();
        let t: Vec<f64> = heavy
            .replica_targets(&two, 100)
            .iter()
            .map(|(_, t)| *t)
            .collect();
        assert!((t[0] - 100.0).abs() < 1e-9, "{t:?}");
        assert!(
            (t[1] - 25.0).abs() < 1e-9 && (t[3] - 50.0).abs() < 1e-9,
            "{t:?}"
        );
        // The balancer reaches those targets: host a's two OSDs split its
        // replicas evenly (weight targets had both short of an unreachable
        // 96, so nothing moved between them).
        let r = rule(FailureDomain::Host);
        let raw = map.place_pool(&r, 128).unwrap();
        let b = map
            .balance(&r, &raw, &[], None, &BalanceOptions::tight())
            .unwrap();
        let counts = crate::stats::replica_counts(&b.acting);
        assert_eq!((counts[&OsdId(2)], counts[&OsdId(3)]), (128, 128));
        for id in [0, 1] {
            assert!(counts[&OsdId(id)].abs_diff(64) <= 1, "{counts:?}");
        }
    }

    #[test]
    fn tight_balance_brings_every_osd_within_one_replica_of_its_share() {
        let osds = cluster(20, 5);
        let map = PlacementMap::new(&osds).unwrap();
        for domain in [FailureDomain::Osd, FailureDomain::Host] {
            let r = rule(domain);
            let raw = map.place_pool(&r, 2000).unwrap();
            let before = map.utilization(&raw);
            let b = map
                .balance(&r, &raw, &[], None, &BalanceOptions::tight())
                .unwrap();
            let after = map.utilization(&b.acting);
            assert!(
                before.max_ratio > 1.15,
                "{domain:?}: straw2 alone {}",
                before.max_ratio
            );
            for l in &after.loads {
                assert!(
                    (l.replicas as f64 - l.target).abs() <= 1.0 + 1e-9,
                    "{domain:?}: {} holds {} for a share of {:.2}",
                    l.osd,
                    l.replicas,
                    l.target
                );
            }
            assert_eq!(
                b.moves as usize,
                movement(&raw, &b.acting).unwrap().replicas_moved as usize
            );
            // Every set keeps its size and the failure domain rule.
            for (set, raw_set) in b.acting.iter().zip(&raw) {
                assert_eq!(set.len(), raw_set.len());
                let mut seen: Vec<&str> = Vec::new();
                for &id in set {
                    let key = if domain == FailureDomain::Host {
                        host_of(&osds, id)
                    } else {
                        ""
                    };
                    assert!(
                        domain == FailureDomain::Osd || !seen.contains(&key),
                        "{set:?}"
                    );
                    seen.push(key);
                }
                let mut ids = set.clone();
                ids.sort();
                ids.dedup();
                assert_eq!(ids.len(), set.len());
            }
            // Deterministic, and the exceptions alone reproduce the sets.
            let again = map
                .balance(&r, &raw, &[], None, &BalanceOptions::tight())
                .unwrap();
            assert_eq!(again, b);
            let reapplied = map.apply_upmaps(&r, &raw, &b.upmaps).unwrap();
            assert_eq!(reapplied.acting, b.acting);
            assert!(reapplied.dropped.is_empty());
        }
    }

    #[test]
    fn nothing_moves_while_every_osd_is_within_the_trigger() {
        let map = PlacementMap::new(&cluster(10, 4)).unwrap();
        let r = rule(FailureDomain::Host);
        let raw = map.place_pool(&r, 1000).unwrap();
        let lax = BalanceOptions {
            max_moves: 100,
            trigger_deviation: 1e9,
            trigger_ratio: 0.0,
            goal_deviation: 1.0,
        };
        let b = map.balance(&r, &raw, &[], Some(&raw), &lax).unwrap();
        assert_eq!(b.moves, 0);
        assert_eq!(b.acting, raw);
        assert!(b.upmaps.is_empty());
    }

    #[test]
    fn max_moves_bounds_the_exceptions_added() {
        let map = PlacementMap::new(&cluster(10, 4)).unwrap();
        let r = rule(FailureDomain::Host);
        let raw = map.place_pool(&r, 1000).unwrap();
        let few = BalanceOptions {
            max_moves: 7,
            ..BalanceOptions::tight()
        };
        let b = map.balance(&r, &raw, &[], None, &few).unwrap();
        assert_eq!(b.moves, 7);
        assert_eq!(b.upmaps.len(), 7);
        assert_eq!(movement(&raw, &b.acting).unwrap().replicas_moved, 7);
    }

    #[test]
    fn stale_exceptions_are_dropped_and_sound_ones_kept() {
        let mut osds = cluster(6, 2);
        osds[11].in_cluster = false; // osd.11 on host5 is out
        let map = PlacementMap::new(&osds).unwrap();
        let r = rule(FailureDomain::Host);
        let raw = map.place_pool(&r, 50).unwrap();
        let set = &raw[0];
        let hosts: Vec<&str> = set.iter().map(|&id| host_of(&osds, id)).collect();
        // An OSD on a host PG 0 does not use, and one on a host it does.
        let free = osds
            .iter()
            .find(|o| o.is_eligible() && !hosts.contains(&o.host.as_str()))
            .map(|o| o.id.0)
            .unwrap();
        let clash = osds
            .iter()
            .find(|o| o.is_eligible() && !set.contains(&o.id) && o.host == hosts[1])
            .map(|o| o.id.0)
            .unwrap();
        let not_chosen = osds
            .iter()
            .find(|o| !set.contains(&o.id) && o.id.0 != free)
            .map(|o| o.id.0)
            .unwrap();
        let good = up(0, set[0].0, free);
        let given = vec![
            good,
            up(0, set[2].0, clash),    // same host as the second replica
            up(0, not_chosen, free),   // straw2 did not choose `from`
            up(1, raw[1][0].0, 11),    // `to` is out
            up(50, raw[1][0].0, free), // no PG 50 in this pool
            Upmap {
                pg: PgId::new(9, 0), // another pool: ignored
                from: set[0],
                to: OsdId(free),
            },
        ];
        let b = map.apply_upmaps(&r, &raw, &given).unwrap();
        assert_eq!(b.upmaps, vec![good]);
        assert_eq!(b.dropped.len(), 4);
        assert_eq!(b.acting[0][0], OsdId(free));
        assert_eq!(&b.acting[0][1..], &set[1..]);
        assert_eq!(&b.acting[1..], &raw[1..]);
    }

    #[test]
    fn exceptions_that_free_each_others_hosts_apply_together() {
        // PG 0 on hosts A, B, C; exceptions a -> (an OSD on B's host) and
        // b -> (an OSD on A's host) are only valid together.
        let osds = cluster(4, 3);
        let map = PlacementMap::new(&osds).unwrap();
        let r = rule(FailureDomain::Host);
        let raw = map.place_pool(&r, 1).unwrap();
        let (a, b) = (raw[0][0], raw[0][1]);
        let other_on = |host: &str| {
            osds.iter()
                .find(|o| o.host == host && !raw[0].contains(&o.id))
                .map(|o| o.id.0)
                .unwrap()
        };
        let to_b = other_on(host_of(&osds, b));
        let to_a = other_on(host_of(&osds, a));
        let given = [up(0, a.0, to_b), up(0, b.0, to_a)];
        let applied = map.apply_upmaps(&r, &raw, &given).unwrap();
        assert!(applied.dropped.is_empty());
        assert_eq!(applied.acting[0], vec![OsdId(to_b), OsdId(to_a), raw[0][2]]);
    }

    #[test]
    fn a_placement_from_another_map_is_rejected() {
        let map = PlacementMap::new(&cluster(4, 2)).unwrap();
        let r = rule(FailureDomain::Host);
        let raw = vec![vec![OsdId(1), OsdId(99)]];
        assert_eq!(
            map.balance(&r, &raw, &[], None, &BalanceOptions::default())
                .unwrap_err(),
            PlacementError::ForeignOsd(OsdId(99))
        );
    }
}
