//! The manager's upmap balancer: it evens out how many PG replicas each
//! OSD holds against its weight share, with the placement crate's bounded
//! exceptions to straw2 ([`PlacementMap::balance`](pontoon_placement::PlacementMap::balance)),
//! a few at a time.
//!
//! While the balancer is on (map setting [`BalancerSettings::active`], on
//! by default as in Ceph), the active manager runs a *round* every
//! [`BalancerSettings::interval_secs`] (and at once when it takes over or
//! the balancer is switched on). A round:
//!
//! 1. does nothing while `norebalance` is set, or while the cluster is not
//!    clean ([`unclean`]: an OSD down but still in, held down or
//!    backfillfull, or a PG not `active+clean` in its current interval
//!    with its whole up set acting), so that it never adds data movement
//!    to recovery or backfill, nor acts on counts about to change;
//! 2. otherwise asks placement for at most [`round_budget`] new replica
//!    moves (a [`BalancerSettings::max_misplaced`] fraction of all PG
//!    replicas, Ceph's `target_max_misplaced_ratio`), pool by pool,
//!    keeping the exceptions in force;
//! 3. writes the exceptions into the PGs' records and recomputes the PG
//!    table, which applies them ([`pontoon_cluster::recompute`], the one
//!    place up sets are computed): the moved PGs start new intervals and
//!    the OSDs backfill them like any other placement change.
//!
//! Moves happen only where an OSD is further from its share than a
//! trigger ([`TRIGGER_DEVIATION`] replicas or [`TRIGGER_RATIO`] of its
//! share, whichever is larger) and bring it within [`GOAL_DEVIATION`], so
//! a balanced cluster stays put. The outcome of each round is stored
//! under `mgr/balancer` for `pontoon balancer status`. Everything but
//! [`run_round`] is pure, so the rules are unit-tested directly.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use pontoon_cluster::balancer::{BalancerSettings, BalancerStatus, UpmapItem};
use pontoon_cluster::pgmap::placement_map;
use pontoon_cluster::space::FullState;
use pontoon_cluster::{
    ClusterError, ClusterMap, Leadership, MapStore, OsdReport, PgMapError, PgState, PoolRecord,
    recompute,
};
use pontoon_placement::{BalanceOptions, Upmap};
use pontoon_types::{Epoch, OsdId, PgId, PoolId};
use serde::Serialize;

use crate::status::PrimaryReports;

/// An OSD is acted on only when it is more than this many replicas off
/// its share (or [`TRIGGER_RATIO`] of the share, if more).
pub const TRIGGER_DEVIATION: f64 = 2.0;
/// An OSD is acted on only when it is more than this fraction of its
/// share off it (or [`TRIGGER_DEVIATION`] replicas, if more): below the
/// 5% an operator expects, so that a balanced cluster is comfortably
/// within it.
pub const TRIGGER_RATIO: f64 = 0.03;
/// An OSD acted on is brought within this many replicas of its share.
pub const GOAL_DEVIATION: f64 = 1.0;
/// Most rounds [`evaluate`] simulates.
const MAX_EVAL_ROUNDS: u32 = 1000;

/// The placement options of a round allowed `max_moves` new moves.
pub fn options(max_moves: u32) -> BalanceOptions {
    BalanceOptions {
        max_moves,
        trigger_deviation: TRIGGER_DEVIATION,
        trigger_ratio: TRIGGER_RATIO,
        goal_deviation: GOAL_DEVIATION,
    }
}

/// PG replicas in the map: the length of every up set.
pub fn replicas(map: &ClusterMap) -> u64 {
    map.pgs.values().map(|r| r.up.len() as u64).sum()
}

/// Most replica moves one round may make: the map's
/// [`BalancerSettings::max_misplaced`] fraction of all PG replicas, at
/// least one.
pub fn round_budget(map: &ClusterMap) -> u32 {
    let share = map.settings.balancer.max_misplaced * replicas(map) as f64;
    (share.floor() as u64).clamp(1, u64::from(u32::MAX)) as u32
}

/// Why the cluster is not clean enough to balance, in words; `None` when
/// it is: every OSD that is in is alive, none is held down or
/// backfillfull, and every PG's primary reports it `active+clean` in its
/// current interval, with its whole up set acting and no past intervals
/// left to trim.
pub fn unclean(map: &ClusterMap, reports: &[OsdReport]) -> Option<String> {
    for o in map.osds.values() {
        if o.reported_down {
            return Some(format!("{} is held down by its peers' reports", o.id));
        }
        if o.in_cluster && !map.is_alive(o.id) {
            return Some(format!(
                "{} is down but still in (it may return or be marked out)",
                o.id
            ));
        }
        if o.in_cluster && o.full >= FullState::Backfillfull {
            return Some(format!("{} is {}", o.id, o.full));
        }
    }
    let primaries = PrimaryReports::new(reports);
    let mut waiting = 0usize;
    let mut example: Option<(PgId, &str)> = None;
    for rec in map.pgs.values() {
        let (report, state) = primaries.of(rec);
        let clean = report.is_some_and(|r| r.state == PgState::ActiveClean)
            && rec.past_intervals.is_empty()
            && rec.acting == rec.up;
        if !clean {
            waiting += 1;
            example.get_or_insert((rec.pg, state));
        }
    }
    example.map(|(pg, state)| {
        format!(
            "{waiting} of {} PGs are not active+clean (e.g. {pg}: {state})",
            map.pgs.len()
        )
    })
}

/// What [`optimize`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Optimized {
    /// Replica moves made (each one replica's worth of data to copy).
    pub moves: u32,
    /// PGs whose up set changed.
    pub pgs: usize,
}

/// The exceptions in force for `pool` and its PGs' up sets, from the map.
fn pool_state(map: &ClusterMap, pool: &PoolRecord) -> (Vec<Upmap>, Vec<Vec<OsdId>>) {
    let mut existing = Vec::new();
    let mut current = vec![Vec::new(); pool.pgs as usize];
    for index in 0..pool.pgs {
        let pg = PgId {
            pool: pool.id,
            index,
        };
        if let Some(rec) = map.pgs.get(&pg) {
            existing.extend(rec.upmap_items.iter().map(|u| Upmap {
                pg,
                from: u.from,
                to: u.to,
            }));
            current[index as usize].clone_from(&rec.up);
        }
    }
    (existing, current)
}

/// Adds at most `budget` replica moves, pool by pool, to the PGs'
/// exceptions and recomputes the PG table at `map.epoch` (which must be
/// the epoch the change commits at, as for [`recompute`]). The map is
/// unchanged when nothing needs to move.
pub fn optimize(map: &mut ClusterMap, budget: u32) -> Result<Optimized, PgMapError> {
    let Some(placement) = placement_map(map)? else {
        return Ok(Optimized::default());
    };
    let mut left = budget;
    let mut moves = 0u32;
    let pools: Vec<PoolRecord> = map.pools.values().cloned().collect();
    for pool in &pools {
        if left == 0 {
            break;
        }
        let rule = pool.rule();
        let raw = placement.place_pool(&rule, pool.pgs)?;
        let (existing, current) = pool_state(map, pool);
        let b = placement.balance(&rule, &raw, &existing, Some(&current), &options(left))?;
        if b.moves == 0 {
            continue;
        }
        left = left.saturating_sub(b.moves);
        moves += b.moves;
        let mut items: BTreeMap<u32, Vec<UpmapItem>> = BTreeMap::new();
        for u in &b.upmaps {
            items.entry(u.pg.index).or_default().push(UpmapItem {
                from: u.from,
                to: u.to,
            });
        }
        for index in 0..pool.pgs {
            let pg = PgId {
                pool: pool.id,
                index,
            };
            if let Some(rec) = map.pgs.get_mut(&pg) {
                rec.upmap_items = items.remove(&index).unwrap_or_default();
            }
        }
    }
    if moves == 0 {
        return Ok(Optimized::default());
    }
    let before: BTreeMap<PgId, Vec<OsdId>> =
        map.pgs.iter().map(|(pg, r)| (*pg, r.up.clone())).collect();
    recompute(map)?;
    let pgs = map
        .pgs
        .iter()
        .filter(|(pg, r)| before.get(pg) != Some(&r.up))
        .count();
    Ok(Optimized { moves, pgs })
}

/// What one round decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The balancer is off.
    Off,
    /// The `norebalance` flag is set.
    NoRebalance,
    /// The cluster is not clean; why.
    NotClean(String),
    /// Every OSD is within the trigger of its share: nothing to move.
    Balanced {
        /// Exceptions in force.
        upmaps: usize,
    },
    /// Replicas were moved.
    Moved {
        /// Replica moves.
        moves: u32,
        /// PGs whose up set changed.
        pgs: usize,
        /// The round's budget.
        budget: u32,
        /// Exceptions in force afterwards.
        upmaps: usize,
    },
}

impl Outcome {
    /// One word for the outcome, as [`BalancerStatus::result`] stores it.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Off => "off",
            Outcome::NoRebalance => "norebalance",
            Outcome::NotClean(_) => "not-clean",
            Outcome::Balanced { .. } => "balanced",
            Outcome::Moved { .. } => "moved",
        }
    }

    /// Replica moves made.
    pub fn moves(&self) -> u32 {
        match self {
            Outcome::Moved { moves, .. } => *moves,
            _ => 0,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Off => f.write_str("the balancer is off"),
            Outcome::NoRebalance => f.write_str("norebalance is set: not moving PGs"),
            Outcome::NotClean(why) => write!(f, "waiting for a clean cluster: {why}"),
            Outcome::Balanced { upmaps } => write!(
                f,
                "every OSD is within its share; nothing to move ({upmaps} upmap exceptions in force)"
            ),
            Outcome::Moved {
                moves,
                pgs,
                budget,
                upmaps,
            } => write!(
                f,
                "moved {moves} PG replicas in {pgs} PGs (at most {budget} per round); {upmaps} upmap exceptions in force"
            ),
        }
    }
}

/// Upmap exceptions in force in the map.
pub fn upmap_count(map: &ClusterMap) -> usize {
    map.pgs.values().map(|r| r.upmap_items.len()).sum()
}

/// One round on `map` (at the epoch it would commit at): off, held by
/// `norebalance`, waiting for a clean cluster, or [`optimize`] within
/// [`round_budget`]. Only [`Outcome::Moved`] changes the map.
pub fn round(
    map: &mut ClusterMap,
    reports: &[OsdReport],
    norebalance: bool,
) -> Result<Outcome, PgMapError> {
    if !map.settings.balancer.active {
        return Ok(Outcome::Off);
    }
    if norebalance {
        return Ok(Outcome::NoRebalance);
    }
    if let Some(why) = unclean(map, reports) {
        return Ok(Outcome::NotClean(why));
    }
    let budget = round_budget(map);
    let done = optimize(map, budget)?;
    let upmaps = upmap_count(map);
    Ok(if done.moves == 0 {
        Outcome::Balanced { upmaps }
    } else {
        Outcome::Moved {
            moves: done.moves,
            pgs: done.pgs,
            budget,
            upmaps,
        }
    })
}

/// When the active manager runs rounds, and what they moved in its term.
/// A new manager starts afresh: its first round comes at once.
#[derive(Debug, Default)]
pub struct Balancer {
    last: Option<Instant>,
    was_active: bool,
    moved_total: u64,
    last_move_unix: Option<u64>,
}

impl Balancer {
    /// A balancer that has run no round yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a round is due at `now` under `settings`: never while the
    /// balancer is off; at once when it was just switched on (or this
    /// manager just took over); else once the interval has passed since
    /// the last round.
    pub fn due(&mut self, now: Instant, settings: &BalancerSettings) -> bool {
        if !settings.active {
            self.was_active = false;
            return false;
        }
        if !self.was_active {
            self.was_active = true;
            return true;
        }
        self.last.is_none_or(|t| {
            now.saturating_duration_since(t) >= Duration::from_secs(settings.interval_secs.max(1))
        })
    }

    /// Notes a round that started at `started` (`unix`, for people) and
    /// returns its status record.
    pub fn record(
        &mut self,
        started: Instant,
        unix: u64,
        outcome: &Outcome,
        manager: &str,
    ) -> BalancerStatus {
        self.last = Some(started);
        let moved = u64::from(outcome.moves());
        if moved > 0 {
            self.moved_total += moved;
            self.last_move_unix = Some(unix);
        }
        BalancerStatus {
            manager: manager.to_string(),
            last_run_unix: unix,
            duration_ms: started.elapsed().as_millis() as u64,
            result: outcome.word().to_string(),
            message: outcome.to_string(),
            moved,
            moved_total: self.moved_total,
            last_move_unix: self.last_move_unix,
        }
    }
}

impl Balancer {
    /// Notes a round that started at `started` and failed with `error`;
    /// returns its status record. The next round waits an interval.
    pub fn record_failure(
        &mut self,
        started: Instant,
        unix: u64,
        error: &dyn fmt::Display,
        manager: &str,
    ) -> BalancerStatus {
        self.last = Some(started);
        BalancerStatus {
            manager: manager.to_string(),
            last_run_unix: unix,
            duration_ms: started.elapsed().as_millis() as u64,
            result: "error".into(),
            message: error.to_string(),
            moved: 0,
            moved_total: self.moved_total,
            last_move_unix: self.last_move_unix,
        }
    }
}

/// Runs one round as the active manager: reads the reports, applies
/// [`round`] inside one [`MapStore::update_as_leader`] (committing only
/// when it moved something), and stores the outcome under `mgr/balancer`.
/// `norebalance` says whether the map's flag of that name is set.
pub async fn run_round(
    store: &MapStore,
    leader: &Leadership,
    balancer: &mut Balancer,
    manager: &str,
    norebalance: fn(&ClusterMap) -> bool,
) -> Result<Outcome, ClusterError> {
    let started = Instant::now();
    let attempt = async {
        let reports = store.reports().await?;
        let mut outcome = Outcome::Off;
        store
            .update_as_leader(leader, |m| {
                let hold = norebalance(m);
                outcome = round(m, &reports, hold)?;
                Ok::<_, ClusterError>(matches!(outcome, Outcome::Moved { .. }))
            })
            .await?;
        Ok::<_, ClusterError>(outcome)
    };
    let (result, status) = match attempt.await {
        Err(ClusterError::NotLeader) => return Err(ClusterError::NotLeader),
        // The next round waits an interval; the status says why.
        Err(e) => {
            let status = balancer.record_failure(started, crate::unix_now(), &e, manager);
            (Err(e), status)
        }
        Ok(outcome) => {
            match &outcome {
                Outcome::Moved { .. } => tracing::info!("balancer: {outcome}"),
                _ => tracing::debug!("balancer: {outcome}"),
            }
            let status = balancer.record(started, crate::unix_now(), &outcome, manager);
            (Ok(outcome), status)
        }
    };
    if let Err(e) = store.put_balancer_status(&status).await {
        tracing::warn!("storing the balancer status: {e}");
    }
    result
}

/// One OSD against its weight share.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OsdScore {
    /// The OSD's id number.
    pub osd: u32,
    /// PG replicas it holds (PGs whose up set names it).
    pub pgs: u64,
    /// Its share of every pool's replicas: by weight, within what its
    /// failure domain can hold.
    pub target: f64,
    /// `pgs` against `target`, in percent (+: above its share).
    pub deviation_pct: f64,
}

/// How evenly PG replicas are spread over the OSDs that can hold data.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Score {
    /// Every OSD that is in with weight, or holds a replica.
    pub osds: Vec<OsdScore>,
    /// All PG replicas.
    pub replicas: u64,
    /// The largest |deviation| of an OSD from its share, in percent.
    pub max_deviation_pct: f64,
    /// Standard deviation of (replicas − share) over the OSDs, in PGs.
    pub stddev: f64,
    /// Upmap exceptions in force.
    pub upmaps: usize,
}

/// Scores the map's up sets: each OSD's PG replicas against its share of
/// each pool's replicas, by weight within what its failure domain can hold
/// ([`PlacementMap::replica_targets`](pontoon_placement::PlacementMap::replica_targets)),
/// the targets the balancer itself aims for.
pub fn score(map: &ClusterMap) -> Score {
    let placement = placement_map(map).ok().flatten();
    let mut rows: BTreeMap<OsdId, (u64, f64)> = map
        .osds
        .values()
        .filter(|o| o.in_cluster && o.weight > 0)
        .map(|o| (o.id, (0, 0.0)))
        .collect();
    let mut replicas = 0u64;
    let mut per_pool: BTreeMap<PoolId, u64> = BTreeMap::new();
    for rec in map.pgs.values() {
        replicas += rec.up.len() as u64;
        *per_pool.entry(rec.pg.pool).or_default() += rec.up.len() as u64;
        for o in &rec.up {
            rows.entry(*o).or_insert((0, 0.0)).0 += 1;
        }
    }
    if let Some(placement) = &placement {
        for (pool, held) in &per_pool {
            let Some(rec) = map.pools.get(pool) else {
                continue;
            };
            let targets = placement.replica_targets(&rec.rule(), 1);
            let per_pg: f64 = targets.iter().map(|(_, t)| t).sum();
            if per_pg <= 0.0 {
                continue;
            }
            for (id, t) in targets {
                if let Some(row) = rows.get_mut(&id) {
                    row.1 += *held as f64 * t / per_pg;
                }
            }
        }
    }
    let osds: Vec<OsdScore> = rows
        .into_iter()
        .map(|(id, (pgs, target))| OsdScore {
            osd: id.0,
            pgs,
            target,
            deviation_pct: if target > 0.0 {
                (pgs as f64 - target) / target * 100.0
            } else if pgs > 0 {
                100.0
            } else {
                0.0
            },
        })
        .collect();
    let n = osds.len().max(1) as f64;
    let var = osds
        .iter()
        .map(|o| (o.pgs as f64 - o.target).powi(2))
        .sum::<f64>()
        / n;
    Score {
        max_deviation_pct: osds
            .iter()
            .map(|o| o.deviation_pct.abs())
            .fold(0.0, f64::max),
        stddev: var.sqrt(),
        replicas,
        upmaps: upmap_count(map),
        osds,
    }
}

/// The score now, and after what the balancer would do were every round
/// allowed to run on the map as it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Eval {
    /// The score of the map's up sets.
    pub before: Score,
    /// The score once the balancer has nothing left to move.
    pub after: Score,
    /// Replica moves that takes.
    pub moves: u64,
    /// Rounds that takes (each within [`round_budget`]).
    pub rounds: u32,
    /// The budget of one round.
    pub round_budget: u32,
}

/// Evaluates the balancer on a copy of `map`: rounds of [`optimize`]
/// within [`round_budget`] until nothing moves (cleanliness aside: as if
/// each round's moves completed before the next).
pub fn evaluate(map: &ClusterMap) -> Result<Eval, PgMapError> {
    let before = score(map);
    let mut m = map.clone();
    let budget = round_budget(&m);
    let (mut moves, mut rounds) = (0u64, 0u32);
    while rounds < MAX_EVAL_ROUNDS {
        m.epoch = Epoch(m.epoch.0.saturating_add(1));
        let done = optimize(&mut m, budget)?;
        if done.moves == 0 {
            break;
        }
        moves += u64::from(done.moves);
        rounds += 1;
        // As if recovery had finished: the new sets are the only ones.
        for rec in m.pgs.values_mut() {
            rec.past_intervals.clear();
        }
    }
    Ok(Eval {
        before,
        after: score(&m),
        moves,
        rounds,
        round_budget: budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::{FailureDomain, OsdRecord, PgReport, PoolRecord};
    use pontoon_types::PoolId;

    fn osd(id: u32) -> OsdRecord {
        OsdRecord {
            id: OsdId(id),
            host: "h".into(),
            addrs: vec![std::net::SocketAddr::from((
                [127, 0, 0, 1],
                7000 + id as u16,
            ))],
            weight: 1024,
            device_bytes: 1 << 30,
            in_cluster: true,
            down_since_unix: None,
            reported_down: false,
            full: Default::default(),
        }
    }

    /// `n` alive OSDs and one pool of `pgs` PGs × 3, committed.
    fn cluster(n: u32, pgs: u32) -> ClusterMap {
        let mut m = ClusterMap::new("t");
        for i in 0..n {
            m.osds.insert(OsdId(i), osd(i));
            m.alive.insert(OsdId(i));
        }
        // Pool 2: straw2 puts its 128 PGs 12.5% off the mean on 4 OSDs.
        m.pools.insert(
            PoolId(2),
            PoolRecord {
                id: PoolId(2),
                name: "p".into(),
                size: 3,
                min_size: 2,
                pgs,
                failure_domain: FailureDomain::Osd,
            },
        );
        m.epoch = Epoch(1);
        recompute(&mut m).unwrap();
        m
    }

    /// Every primary reporting its PGs clean in their current intervals.
    fn clean_reports(m: &ClusterMap) -> Vec<OsdReport> {
        let mut by_osd: BTreeMap<OsdId, Vec<PgReport>> = BTreeMap::new();
        for rec in m.pgs.values() {
            if let Some(p) = rec.primary() {
                by_osd.entry(p).or_default().push(PgReport {
                    pg: rec.pg,
                    interval: rec.interval,
                    state: PgState::ActiveClean,
                    objects: 1,
                    degraded_objects: 0,
                    missing_objects: 0,
                    recovered_objects: 0,
                    note: None,
                    scrub: Default::default(),
                });
            }
        }
        by_osd
            .into_iter()
            .map(|(osd, pgs)| OsdReport {
                osd,
                epoch: m.epoch,
                pgs,
                ..Default::default()
            })
            .collect()
    }

    /// What recovery does once it is done: the primaries report clean and
    /// the manager trims the past intervals.
    fn settle(m: &mut ClusterMap) {
        for rec in m.pgs.values_mut() {
            rec.past_intervals.clear();
        }
    }

    /// One round at the next epoch, as the manager commits it (the map
    /// is kept only when the round moved something).
    fn run(m: &mut ClusterMap, reports: &[OsdReport], norebalance: bool) -> Outcome {
        let mut next = m.clone();
        next.epoch = Epoch(m.epoch.0 + 1);
        let out = round(&mut next, reports, norebalance).unwrap();
        if matches!(out, Outcome::Moved { .. }) {
            *m = next;
        } else {
            next.epoch = m.epoch;
            assert_eq!(&next, m, "{out}: the map changed");
        }
        out
    }

    /// Four OSDs, one added to three, and enough PGs to show imbalance.
    fn grown() -> ClusterMap {
        let mut m = cluster(3, 128);
        m.osds.insert(OsdId(3), osd(3));
        m.alive.insert(OsdId(3));
        m.epoch = Epoch(2);
        recompute(&mut m).unwrap();
        settle(&mut m);
        m
    }

    #[test]
    fn rounds_are_bounded_and_end_within_five_percent_of_the_mean() {
        let mut m = grown();
        let start = score(&m);
        assert!(
            start.max_deviation_pct > 5.0,
            "straw2 alone is already balanced: {start:?}"
        );
        assert_eq!(round_budget(&m), 19, "5% of 384 replicas");
        // 1%: several rounds.
        m.settings.balancer.max_misplaced = 0.01;
        let budget = round_budget(&m);
        assert_eq!(budget, 3);
        let mut total = 0u32;
        let mut rounds = 0;
        loop {
            let reports = clean_reports(&m);
            match run(&mut m, &reports, false) {
                Outcome::Moved { moves, pgs, .. } => {
                    assert!(moves <= budget, "{moves} moves in one round");
                    assert!(pgs as u32 <= moves);
                    total += moves;
                    rounds += 1;
                    // The moved PGs are not clean until recovered: the
                    // next round waits.
                    let reported = clean_reports(&m);
                    assert!(matches!(
                        run(&mut m, &reported, false),
                        Outcome::NotClean(_)
                    ));
                    settle(&mut m);
                }
                Outcome::Balanced { upmaps } => {
                    assert_eq!(upmaps, upmap_count(&m));
                    break;
                }
                other => panic!("unexpected {other}"),
            }
            assert!(rounds < 50);
        }
        let end = score(&m);
        assert!(end.max_deviation_pct <= 5.0, "{end:?}");
        assert!(end.stddev < start.stddev);
        assert!(rounds >= 2, "{rounds} rounds of at most {budget}");
        assert!(total as usize >= end.upmaps && end.upmaps > 0);
        // Balanced stays balanced.
        let reports = clean_reports(&m);
        assert!(matches!(
            run(&mut m, &reports, false),
            Outcome::Balanced { .. }
        ));
        // Every up set is still 3 distinct OSDs.
        for rec in m.pgs.values() {
            let mut s = rec.up.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 3);
        }
    }

    #[test]
    fn a_round_moves_at_most_its_budget() {
        let mut m = grown();
        m.settings.balancer.max_misplaced = 0.001;
        assert_eq!(round_budget(&m), 1);
        let reports = clean_reports(&m);
        match run(&mut m, &reports, false) {
            Outcome::Moved {
                moves, pgs, budget, ..
            } => {
                assert_eq!((moves, pgs, budget), (1, 1, 1));
                assert_eq!(upmap_count(&m), 1);
                let changed: Vec<_> = m
                    .pgs
                    .values()
                    .filter(|r| !r.past_intervals.is_empty())
                    .collect();
                assert_eq!(changed.len(), 1, "one PG starts a new interval");
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn nothing_moves_while_the_cluster_is_not_clean_or_norebalance_is_set() {
        let m0 = grown();
        let reports = clean_reports(&m0);

        let mut m = m0.clone();
        m.settings.balancer.active = false;
        assert_eq!(run(&mut m, &reports, false), Outcome::Off);

        let mut m = m0.clone();
        assert_eq!(run(&mut m, &reports, true), Outcome::NoRebalance);

        // No reports yet: PGs not known clean.
        let mut m = m0.clone();
        let out = run(&mut m, &[], false);
        assert!(
            matches!(&out, Outcome::NotClean(why) if why.starts_with("128 of 128 PGs")),
            "{out}"
        );

        // One PG recovering.
        let mut m = m0.clone();
        let mut rs = reports.clone();
        rs[0].pgs[0].state = PgState::Recovering;
        let out = run(&mut m, &rs, false);
        assert!(
            matches!(&out, Outcome::NotClean(why) if why.contains("active+recovering")),
            "{out}"
        );

        // A PG with past intervals left (backfill not yet confirmed).
        let mut m = m0.clone();
        let pg = *m.pgs.keys().next().unwrap();
        m.pgs
            .get_mut(&pg)
            .unwrap()
            .past_intervals
            .push(pontoon_cluster::PastInterval {
                interval: Epoch(1),
                acting: vec![OsdId(0)],
            });
        assert!(matches!(run(&mut m, &reports, false), Outcome::NotClean(_)));

        // An OSD down but in: its out is pending.
        let mut m = m0.clone();
        m.alive.remove(&OsdId(2));
        let out = run(&mut m, &reports, false);
        assert!(
            matches!(&out, Outcome::NotClean(why) if why.contains("osd.2 is down")),
            "{out}"
        );

        // Down and out, PGs elsewhere and clean: balancing may go on.
        let mut m = m0.clone();
        m.alive.remove(&OsdId(2));
        m.osds.get_mut(&OsdId(2)).unwrap().in_cluster = false;
        m.epoch = Epoch(m.epoch.0 + 1);
        recompute(&mut m).unwrap();
        settle(&mut m);
        let rs = clean_reports(&m);
        assert!(!matches!(run(&mut m, &rs, false), Outcome::NotClean(_)));

        // A backfillfull OSD.
        let mut m = m0.clone();
        m.osds.get_mut(&OsdId(1)).unwrap().full = FullState::Backfillfull;
        let out = run(&mut m, &reports, false);
        assert!(
            matches!(&out, Outcome::NotClean(why) if why.contains("backfillfull")),
            "{out}"
        );
    }

    #[test]
    fn rounds_are_due_every_interval_and_at_once_when_switched_on() {
        let mut b = Balancer::new();
        let t0 = Instant::now();
        let mut s = BalancerSettings {
            interval_secs: 10,
            ..BalancerSettings::default()
        };
        assert!(b.due(t0, &s), "first round at once");
        let st = b.record(t0, 100, &Outcome::Balanced { upmaps: 0 }, "m");
        assert_eq!(st.result, "balanced");
        assert!(!b.due(t0 + Duration::from_secs(9), &s));
        assert!(b.due(t0 + Duration::from_secs(10), &s));
        s.active = false;
        assert!(!b.due(t0 + Duration::from_secs(11), &s));
        s.active = true;
        assert!(b.due(t0 + Duration::from_secs(1), &s), "on again: at once");
        let moved = Outcome::Moved {
            moves: 4,
            pgs: 3,
            budget: 19,
            upmaps: 4,
        };
        let st = b.record(t0, 200, &moved, "m");
        assert_eq!((st.moved, st.moved_total), (4, 4));
        assert_eq!(st.last_move_unix, Some(200));
        let st = b.record(t0, 300, &moved, "m");
        assert_eq!(st.moved_total, 8);
        assert!(st.message.starts_with("moved 4 PG replicas in 3 PGs"));
    }

    #[test]
    fn evaluate_predicts_the_rounds_without_touching_the_map() {
        let m = grown();
        let e = evaluate(&m).unwrap();
        assert_eq!(e.before, score(&m));
        assert!(e.before.max_deviation_pct > 5.0);
        assert!(e.after.max_deviation_pct <= 5.0, "{:?}", e.after);
        assert!(e.moves > 0 && e.rounds >= 1);
        assert!(e.moves <= u64::from(e.round_budget) * u64::from(e.rounds));
        assert!(e.after.upmaps > 0 && e.after.upmaps as u64 <= e.moves);
        assert_eq!(score(&m).upmaps, 0);
        // A balanced map evaluates to itself.
        let three = cluster(3, 16);
        let e = evaluate(&three).unwrap();
        assert_eq!(e.moves, 0);
        assert_eq!(e.before.max_deviation_pct, 0.0);
    }
}
