//! The manager's decisions as a pure function of the map, the OSDs'
//! reports and the time: no I/O, no clock of its own, so every rule is
//! unit-tested directly and the simulator runs the same rules as the
//! daemon.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use pontoon_cluster::space::{FullState, ratio};
use pontoon_cluster::{ClusterMap, OsdReport, PgMapError, recompute, trim_clean_pgs};
use pontoon_types::OsdId;

/// Fewest peers on other hosts that must report an OSD unreachable before
/// the manager holds it down.
pub const MIN_REPORTERS: usize = 2;

/// How long an OSD must have been alive (as this manager saw it) before
/// reports can hold it down: its peers' reports may still describe its
/// previous life until their next heartbeats reach the new one.
pub const HOLD_AFTER_ALIVE: Duration = Duration::from_secs(5);

/// One change the manager made to the map, for its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The OSD's liveness key is gone: the down → out timer starts.
    Down {
        /// The OSD.
        osd: OsdId,
        /// When it was first seen down (Unix seconds, for people).
        since_unix: u64,
    },
    /// The OSD has been down longer than the out interval and is now out:
    /// placement gives its PGs to other OSDs, which re-replicate the data.
    Out {
        /// The OSD.
        osd: OsdId,
        /// Seconds it has been down, as this manager saw it.
        down_secs: u64,
    },
    /// The OSD holds its liveness key again.
    Up {
        /// The OSD.
        osd: OsdId,
        /// Seconds it was down, as this manager saw it (0 if this manager
        /// never saw it down).
        down_secs: u64,
    },
    /// The OSD came back after having been marked out while down, and is in again.
    In {
        /// The OSD.
        osd: OsdId,
    },
    /// Peers on other hosts cannot reach the OSD: it is held down (it
    /// fences itself and gives up its lease, and its PGs move on).
    HeldDown {
        /// The OSD.
        osd: OsdId,
        /// Who reported it.
        reporters: Vec<OsdId>,
    },
    /// No peer reports the OSD any more: it may take a lease again.
    Released {
        /// The OSD.
        osd: OsdId,
    },
    /// Acting sets were recomputed and some changed.
    Pgs {
        /// PGs created or whose up or acting set changed.
        changed: usize,
        /// PGs that started a new interval (acting set changed).
        new_intervals: usize,
        /// PGs removed with their pool.
        removed: usize,
    },
    /// Past intervals dropped for PGs their primary reports clean.
    Trimmed {
        /// How many PGs.
        pgs: usize,
    },
    /// The OSD crossed a full ratio (either way).
    Fullness {
        /// The OSD.
        osd: OsdId,
        /// Its state before.
        from: FullState,
        /// Its state now.
        to: FullState,
        /// Its data area's fill, in tenths of a percent, from its report.
        permille: u64,
    },
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Down { osd, since_unix } => {
                write!(
                    f,
                    "{osd} is down (no liveness lease) since unix time {since_unix}"
                )
            }
            Decision::Out { osd, down_secs } => write!(
                f,
                "{osd} has been down {down_secs}s: marking it out; its PGs move to other OSDs"
            ),
            Decision::Up { osd, down_secs } => {
                write!(f, "{osd} is alive again after {down_secs}s down")
            }
            Decision::In { osd } => write!(f, "{osd} is back: marking it in again"),
            Decision::HeldDown { osd, reporters } => {
                let names: Vec<String> = reporters.iter().map(|o| o.to_string()).collect();
                write!(
                    f,
                    "{osd} is unreachable from {}: holding it down",
                    names.join(", ")
                )
            }
            Decision::Released { osd } => {
                write!(f, "{osd} is reachable from its peers again: released")
            }
            Decision::Pgs {
                changed,
                new_intervals,
                removed,
            } => write!(
                f,
                "recomputed PGs: {changed} changed, {new_intervals} new intervals, {removed} removed"
            ),
            Decision::Trimmed { pgs } => {
                write!(f, "dropped past intervals of {pgs} PGs reported clean")
            }
            Decision::Fullness {
                osd,
                from,
                to,
                permille,
            } => write!(
                f,
                "{osd} is {to} ({}.{}% used; was {from})",
                permille / 10,
                permille % 10
            ),
        }
    }
}

/// The active manager's rules and the little state they need that is not
/// in the map: when this manager first saw each OSD down, on its own
/// monotonic clock. A new manager (after a failover) starts those timers
/// afresh, which can only delay an out, never hasten one; a wall-clock
/// jump changes nothing.
#[derive(Debug)]
pub struct Manager {
    out_after: Duration,
    down_seen: BTreeMap<OsdId, Instant>,
    alive_seen: BTreeMap<OsdId, Instant>,
    /// Down OSDs due to go out that are kept in, and why (logged once).
    kept_in: BTreeMap<OsdId, String>,
}

impl Manager {
    /// A manager marking OSDs out after `out_after` down, unless the map
    /// sets its own out-after (`pontoon config set out_after`).
    pub fn new(out_after: Duration) -> Self {
        Self {
            out_after,
            down_seen: BTreeMap::new(),
            alive_seen: BTreeMap::new(),
            kept_in: BTreeMap::new(),
        }
    }

    /// Applies the rules to `map` (whose epoch is the one the change will
    /// commit at, as inside [`MapStore::update`](pontoon_cluster::MapStore::update))
    /// at `now` (monotonic; `now_unix` only labels the log and the map),
    /// and returns what it changed (empty: nothing). May run more than
    /// once for one commit.
    ///
    /// - Peers: an alive OSD that at least [`MIN_REPORTERS`] alive peers
    ///   on other hosts, and more than half of those it shares PGs with
    ///   there, report unreachable is held down (once it has been alive
    ///   for [`HOLD_AFTER_ALIVE`]); it is released when none reports it.
    /// - Liveness: not alive ⇒ down, with a timer from when this manager
    ///   first saw it so; down at least the out-after (the map's, else
    ///   this manager's) ⇒ out, unless `noout` is set or its host is in
    ///   maintenance, or fewer than `min_in_ratio` of the OSDs are in
    ///   (counted before marking it, as Ceph does; destroyed OSDs are not
    ///   counted and never held back); alive again ⇒ up, and in again if
    ///   it went out while down (an OSD that is out but never went down was
    ///   taken out by an operator and stays out; a destroyed one stays out).
    /// - Then the PG table is recomputed and past intervals of PGs whose
    ///   primary reports them clean in their current interval are dropped.
    pub fn pass(
        &mut self,
        map: &mut ClusterMap,
        reports: &[OsdReport],
        now: Instant,
        now_unix: u64,
    ) -> Result<Vec<Decision>, PgMapError> {
        let mut out = Vec::new();
        let reported = reported_unreachable(map, reports);
        let out_after = map.settings.osd.out_after(self.out_after);
        let min_in_ratio = map.settings.osd.min_in_ratio;
        let (mut in_count, counted) = map.in_counts();
        let destroyed = map.settings.osd.destroyed.clone();
        let noout: BTreeMap<OsdId, String> = map
            .osds
            .keys()
            .filter_map(|o| Some((*o, map.noout_reason(*o)?)))
            .collect();
        let alive = map.alive.clone();
        self.alive_seen.retain(|o, _| alive.contains(o));
        for o in &alive {
            self.alive_seen.entry(*o).or_insert(now);
        }
        for osd in map.osds.values_mut() {
            let reporters = reported.get(&osd.id);
            let settled = self
                .alive_seen
                .get(&osd.id)
                .is_some_and(|t| now.saturating_duration_since(*t) >= HOLD_AFTER_ALIVE);
            if !osd.reported_down
                && settled
                && let Some(r) = reporters
            {
                osd.reported_down = true;
                out.push(Decision::HeldDown {
                    osd: osd.id,
                    reporters: r.clone(),
                });
            } else if osd.reported_down && reporters.is_none() {
                osd.reported_down = false;
                out.push(Decision::Released { osd: osd.id });
            }
        }
        for osd in map.osds.values_mut() {
            let is_destroyed = destroyed.contains(&osd.id);
            if alive.contains(&osd.id) {
                let seen = self.down_seen.remove(&osd.id);
                self.kept_in.remove(&osd.id);
                if osd.down_since_unix.take().is_some() {
                    out.push(Decision::Up {
                        osd: osd.id,
                        down_secs: seen.map_or(0, |s| now.saturating_duration_since(s).as_secs()),
                    });
                    if !osd.in_cluster && !is_destroyed {
                        osd.in_cluster = true;
                        in_count += 1;
                        out.push(Decision::In { osd: osd.id });
                    }
                }
                continue;
            }
            let seen = *self.down_seen.entry(osd.id).or_insert(now);
            if osd.down_since_unix.is_none() {
                osd.down_since_unix = Some(now_unix);
                out.push(Decision::Down {
                    osd: osd.id,
                    since_unix: now_unix,
                });
            }
            let down = now.saturating_duration_since(seen);
            if osd.in_cluster && down >= out_after {
                let held = if is_destroyed {
                    None
                } else {
                    noout.get(&osd.id).cloned().or_else(|| {
                        crate::flags::min_in_holds(in_count, counted, min_in_ratio).then(|| {
                            format!(
                                "only {in_count} of {counted} OSDs are in (min_in_ratio {min_in_ratio})"
                            )
                        })
                    })
                };
                match held {
                    Some(why) => {
                        if self.kept_in.get(&osd.id) != Some(&why) {
                            tracing::info!(
                                "{} has been down {}s but stays in: {why}",
                                osd.id,
                                down.as_secs()
                            );
                            self.kept_in.insert(osd.id, why);
                        }
                    }
                    None => {
                        self.kept_in.remove(&osd.id);
                        osd.in_cluster = false;
                        if !is_destroyed {
                            in_count = in_count.saturating_sub(1);
                        }
                        out.push(Decision::Out {
                            osd: osd.id,
                            down_secs: down.as_secs(),
                        });
                    }
                }
            }
        }
        self.down_seen.retain(|o, _| map.osds.contains_key(o));
        self.kept_in.retain(|o, _| map.osds.contains_key(o));
        out.extend(update_fullness(map, reports));
        let changes = recompute(map)?;
        if !changes.is_empty() {
            out.push(Decision::Pgs {
                changed: changes.changed.len(),
                new_intervals: changes.new_intervals.len(),
                removed: changes.removed.len(),
            });
        }
        let trimmed = trim_clean_pgs(map, reports);
        if !trimmed.is_empty() {
            out.push(Decision::Trimmed { pgs: trimmed.len() });
        }
        Ok(out)
    }
}

/// Sets each reporting OSD's full state from its report against the
/// cluster's full ratios. An OSD that has not reported keeps its state.
fn update_fullness(map: &mut ClusterMap, reports: &[OsdReport]) -> Vec<Decision> {
    let ratios = map.settings.full_ratios;
    let mut out = Vec::new();
    for r in reports {
        let Some(osd) = map.osds.get_mut(&r.osd) else {
            continue;
        };
        let to = ratios.state(r.used_bytes, r.capacity_bytes);
        if to != osd.full && r.capacity_bytes > 0 {
            out.push(Decision::Fullness {
                osd: osd.id,
                from: osd.full,
                to,
                permille: (ratio(r.used_bytes, r.capacity_bytes) * 1000.0) as u64,
            });
            osd.full = to;
        }
    }
    out
}

/// The OSDs that enough of their peers report unreachable, with the
/// reporters. A reporter counts if it is alive, not held down itself, on
/// another host than the OSD, and shares a PG with it (in an up or acting
/// set); the reporters must be at least [`MIN_REPORTERS`] and more than
/// half of such peers, so a minority cut off from the rest reports the
/// rest in vain.
fn reported_unreachable(map: &ClusterMap, reports: &[OsdReport]) -> BTreeMap<OsdId, Vec<OsdId>> {
    let eligible =
        |o: &OsdId| map.alive.contains(o) && map.osds.get(o).is_some_and(|r| !r.reported_down);
    let host = |o: &OsdId| map.osds.get(o).map(|r| r.host.as_str());
    let mut peers: BTreeMap<OsdId, BTreeSet<OsdId>> = BTreeMap::new();
    for pg in map.pgs.values() {
        let members: BTreeSet<OsdId> = pg.up.iter().chain(&pg.acting).copied().collect();
        for a in &members {
            for b in &members {
                if a != b && host(a) != host(b) && eligible(b) {
                    peers.entry(*a).or_default().insert(*b);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    for (osd, its_peers) in &peers {
        let reporters: Vec<OsdId> = reports
            .iter()
            .filter(|r| its_peers.contains(&r.osd) && r.unreachable.contains(osd))
            .map(|r| r.osd)
            .collect();
        if reporters.len() >= MIN_REPORTERS && 2 * reporters.len() > its_peers.len() {
            out.insert(*osd, reporters);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::{FailureDomain, OsdRecord, PgReport, PgState, PoolRecord};
    use pontoon_types::{Epoch, PoolId};

    const OUT: Duration = Duration::from_secs(30);

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

    /// Three alive OSDs, one pool of 8 PGs × 3, committed at epoch 1.
    fn healthy() -> ClusterMap {
        let mut m = ClusterMap::new("t");
        for i in 0..3 {
            m.osds.insert(OsdId(i), osd(i));
            m.alive.insert(OsdId(i));
        }
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "p".into(),
                size: 3,
                min_size: 2,
                pgs: 8,
                failure_domain: FailureDomain::Osd,
            },
        );
        m.epoch = Epoch(1);
        recompute(&mut m).unwrap();
        m
    }

    /// A manager with a fixed origin for its monotonic clock.
    struct Mgr {
        m: Manager,
        base: Instant,
    }

    fn mgr() -> Mgr {
        Mgr {
            m: Manager::new(OUT),
            base: Instant::now(),
        }
    }

    /// What one pass at second `now` does, at the next epoch, as the
    /// manager runs it (the wall clock reads the same second).
    fn pass(g: &mut Mgr, m: &mut ClusterMap, reports: &[OsdReport], now: u64) -> Vec<Decision> {
        pass_at(g, m, reports, now, now)
    }

    /// [`pass`] with the wall clock reading `unix`.
    fn pass_at(
        g: &mut Mgr,
        m: &mut ClusterMap,
        reports: &[OsdReport],
        now: u64,
        unix: u64,
    ) -> Vec<Decision> {
        let before = m.clone();
        m.epoch = Epoch(m.epoch.0 + 1);
        let d =
            g.m.pass(m, reports, g.base + Duration::from_secs(now), unix)
                .unwrap();
        if d.is_empty() {
            // Nothing committed: the epoch stays.
            let mut same = m.clone();
            same.epoch = before.epoch;
            assert_eq!(same, before, "no decision but the map changed");
            *m = before;
        }
        d
    }

    #[test]
    fn osds_crossing_the_full_ratios_are_flagged_both_ways() {
        let mut m = healthy();
        let mut g = mgr();
        let fill = |osd: u32, used: u64| OsdReport {
            osd: OsdId(osd),
            used_bytes: used,
            capacity_bytes: 1000,
            ..Default::default()
        };
        let d = pass(
            &mut g,
            &mut m,
            &[fill(0, 960), fill(1, 860), fill(2, 10)],
            0,
        );
        assert_eq!(m.osds[&OsdId(0)].full, FullState::Full);
        assert_eq!(m.osds[&OsdId(1)].full, FullState::Nearfull);
        assert_eq!(m.osds[&OsdId(2)].full, FullState::Ok);
        assert_eq!(
            d.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "osd.0 is full (96.0% used; was ok)",
                "osd.1 is nearfull (86.0% used; was ok)"
            ]
        );
        m.settings.full_ratios.full = 0.97;
        pass(&mut g, &mut m, &[fill(0, 960)], 0);
        assert_eq!(m.osds[&OsdId(0)].full, FullState::Backfillfull);
        assert_eq!(
            m.osds[&OsdId(1)].full,
            FullState::Nearfull,
            "no report: kept"
        );
        pass(&mut g, &mut m, &[fill(0, 100), fill(1, 100)], 0);
        assert!(m.osds.values().all(|o| o.full == FullState::Ok));
    }

    #[test]
    fn a_healthy_cluster_needs_no_decision() {
        let mut m = healthy();
        let mut g = mgr();
        assert!(pass(&mut g, &mut m, &[], 1000).is_empty());
        assert!(pass(&mut g, &mut m, &[], 5000).is_empty());
    }

    #[test]
    fn down_then_out_after_the_interval_then_up_and_in_again() {
        let mut m = healthy();
        let mut g = mgr();
        m.alive.remove(&OsdId(1));
        let d = pass(&mut g, &mut m, &[], 1000);
        assert_eq!(
            d[0],
            Decision::Down {
                osd: OsdId(1),
                since_unix: 1000
            }
        );
        assert!(
            matches!(
                d[1],
                Decision::Pgs {
                    new_intervals: 8,
                    ..
                }
            ),
            "{d:?}"
        );
        assert_eq!(m.osds[&OsdId(1)].down_since_unix, Some(1000));
        assert!(m.osds[&OsdId(1)].in_cluster);
        assert!(
            m.pgs
                .values()
                .all(|p| p.acting.len() == 2 && p.up.len() == 3)
        );

        // Not yet: 29 s down changes nothing (the timer is not restarted).
        assert!(pass(&mut g, &mut m, &[], 1029).is_empty());
        assert_eq!(m.osds[&OsdId(1)].down_since_unix, Some(1000));

        // 30 s: out, and placement leaves it out of `up`.
        let d = pass(&mut g, &mut m, &[], 1030);
        assert_eq!(
            d[0],
            Decision::Out {
                osd: OsdId(1),
                down_secs: 30
            }
        );
        assert!(!m.osds[&OsdId(1)].in_cluster);
        assert!(m.pgs.values().all(|p| !p.up.contains(&OsdId(1))));
        // Out is decided once.
        assert!(pass(&mut g, &mut m, &[], 1100).is_empty());

        // Back: up and in again, PGs placed on it again.
        m.alive.insert(OsdId(1));
        let d = pass(&mut g, &mut m, &[], 1200);
        assert_eq!(
            d[0],
            Decision::Up {
                osd: OsdId(1),
                down_secs: 200
            }
        );
        assert_eq!(d[1], Decision::In { osd: OsdId(1) });
        assert!(matches!(d[2], Decision::Pgs { .. }));
        let rec = &m.osds[&OsdId(1)];
        assert!(rec.in_cluster && rec.down_since_unix.is_none());
        assert!(m.pgs.values().all(|p| p.acting.len() == 3));
    }

    #[test]
    fn a_short_outage_clears_the_timer_without_going_out() {
        let mut m = healthy();
        let mut g = mgr();
        m.alive.remove(&OsdId(2));
        pass(&mut g, &mut m, &[], 100);
        m.alive.insert(OsdId(2));
        let d = pass(&mut g, &mut m, &[], 110);
        assert_eq!(
            d[0],
            Decision::Up {
                osd: OsdId(2),
                down_secs: 10
            }
        );
        assert!(!d.iter().any(|x| matches!(x, Decision::In { .. })));
        assert!(m.osds[&OsdId(2)].down_since_unix.is_none());
    }

    #[test]
    fn an_operator_out_osd_that_never_went_down_stays_out() {
        let mut m = healthy();
        let mut g = mgr();
        m.osds.get_mut(&OsdId(0)).unwrap().in_cluster = false;
        let d = pass(&mut g, &mut m, &[], 100);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(matches!(d[0], Decision::Pgs { .. }));
        assert!(!m.osds[&OsdId(0)].in_cluster);
        assert!(pass(&mut g, &mut m, &[], 200).is_empty());
    }

    #[test]
    fn out_after_zero_marks_out_in_the_same_pass() {
        let mut m = healthy();
        m.alive.remove(&OsdId(0));
        m.epoch = Epoch(2);
        let d = Manager::new(Duration::ZERO)
            .pass(&mut m, &[], Instant::now(), 50)
            .unwrap();
        assert_eq!(
            d[0],
            Decision::Down {
                osd: OsdId(0),
                since_unix: 50
            }
        );
        assert_eq!(
            d[1],
            Decision::Out {
                osd: OsdId(0),
                down_secs: 0
            }
        );
    }

    #[test]
    fn a_registered_osd_that_never_came_alive_is_down() {
        let mut m = healthy();
        let mut g = mgr();
        m.osds.insert(OsdId(3), osd(3));
        let d = pass(&mut g, &mut m, &[], 7);
        assert_eq!(
            d[0],
            Decision::Down {
                osd: OsdId(3),
                since_unix: 7
            }
        );
        // It is in, so placement counts it in `up`; it is in no acting set.
        assert!(m.pgs.values().all(|p| !p.acting.contains(&OsdId(3))));
    }

    #[test]
    fn clean_reports_from_primaries_trim_past_intervals() {
        let mut m = healthy();
        let mut g = mgr();
        m.alive.remove(&OsdId(1));
        pass(&mut g, &mut m, &[], 10);
        m.alive.insert(OsdId(1));
        pass(&mut g, &mut m, &[], 12);
        let with_past: Vec<_> = m
            .pgs
            .values()
            .filter(|p| !p.past_intervals.is_empty())
            .cloned()
            .collect();
        assert!(!with_past.is_empty());
        let epoch = m.epoch;
        let report_of = |osd: OsdId, state: PgState| OsdReport {
            osd,
            epoch,
            pgs: with_past
                .iter()
                .filter(|p| p.primary() == Some(osd))
                .map(|p| PgReport {
                    pg: p.pg,
                    interval: p.interval,
                    state,
                    objects: 0,
                    degraded_objects: 0,
                    missing_objects: 0,
                    recovered_objects: 0,
                    note: None,
                    scrub: Default::default(),
                })
                .collect(),
            used_bytes: 0,
            capacity_bytes: 0,
            unreachable: Vec::new(),
            ..Default::default()
        };
        // Still recovering: nothing to trim, no change.
        let recovering: Vec<_> = (0..3)
            .map(|i| report_of(OsdId(i), PgState::Recovering))
            .collect();
        assert!(pass(&mut g, &mut m, &recovering, 13).is_empty());
        let clean: Vec<_> = (0..3)
            .map(|i| report_of(OsdId(i), PgState::ActiveClean))
            .collect();
        let d = pass(&mut g, &mut m, &clean, 14);
        assert_eq!(
            d,
            vec![Decision::Trimmed {
                pgs: with_past.len()
            }]
        );
        assert!(m.pgs.values().all(|p| p.past_intervals.is_empty()));
        assert!(pass(&mut g, &mut m, &clean, 15).is_empty());
    }

    #[test]
    fn out_timers_run_on_the_managers_own_clock() {
        let mut m = healthy();
        let mut g = mgr();
        m.alive.remove(&OsdId(2));
        pass_at(&mut g, &mut m, &[], 100, 1_000);
        // The wall clock jumps a day ahead: nothing goes out early.
        assert!(pass_at(&mut g, &mut m, &[], 101, 87_400).is_empty());
        assert!(m.osds[&OsdId(2)].in_cluster);
        // A new manager (failover, perhaps to a host whose clock is off)
        // times the outage from when it saw the OSD down.
        let mut g2 = Mgr {
            m: Manager::new(OUT),
            base: g.base,
        };
        assert!(pass_at(&mut g2, &mut m, &[], 120, 9_999_999).is_empty());
        assert!(pass(&mut g2, &mut m, &[], 149).is_empty());
        let d = pass(&mut g2, &mut m, &[], 150);
        assert_eq!(
            d[0],
            Decision::Out {
                osd: OsdId(2),
                down_secs: 30
            }
        );
    }

    /// `n` alive OSDs on hosts of their own, one pool of 8 PGs × 3.
    fn on_hosts(n: u32) -> ClusterMap {
        let mut m = healthy();
        for i in 0..n {
            let mut o = osd(i);
            o.host = format!("h{i}");
            m.osds.insert(OsdId(i), o);
            m.alive.insert(OsdId(i));
        }
        m.epoch = Epoch(m.epoch.0 + 1);
        recompute(&mut m).unwrap();
        m
    }

    fn unreachable(osd: u32, peers: &[u32]) -> OsdReport {
        OsdReport {
            osd: OsdId(osd),
            epoch: Epoch(1),
            pgs: Vec::new(),
            used_bytes: 0,
            capacity_bytes: 0,
            unreachable: peers.iter().copied().map(OsdId).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_osd_its_peers_on_other_hosts_cannot_reach_is_held_down_then_released() {
        let mut m = on_hosts(3);
        let mut g = mgr();
        // Reports right after an OSD (re)appears may describe its previous
        // life: they wait.
        let both = [
            unreachable(1, &[0]),
            unreachable(2, &[0]),
            unreachable(0, &[1, 2]),
        ];
        assert!(pass(&mut g, &mut m, &both, 5).is_empty());
        // One reporter is not enough (a cut between two OSDs).
        let one = [unreachable(1, &[0]), unreachable(0, &[1])];
        assert!(pass(&mut g, &mut m, &one, 10).is_empty());
        // Both peers report osd.0 (cut from them, not from etcd).
        let d = pass(&mut g, &mut m, &both, 11);
        assert_eq!(
            d,
            vec![Decision::HeldDown {
                osd: OsdId(0),
                reporters: vec![OsdId(1), OsdId(2)]
            }]
        );
        assert!(m.osds[&OsdId(0)].reported_down);
        // Its PGs stay where they are until it gives its lease up.
        assert!(m.pgs.values().all(|p| p.acting.len() == 3));
        // osd.0's own reports of its peers no longer count.
        assert!(pass(&mut g, &mut m, &both, 12).is_empty());
        m.alive.remove(&OsdId(0));
        let d = pass(&mut g, &mut m, &both, 13);
        assert!(
            matches!(d[0], Decision::Down { osd: OsdId(0), .. }),
            "{d:?}"
        );
        assert!(m.pgs.values().all(|p| !p.acting.contains(&OsdId(0))));
        // The cut heals: nobody reports it, it is released.
        let d = pass(&mut g, &mut m, &[], 20);
        assert_eq!(d, vec![Decision::Released { osd: OsdId(0) }]);
    }

    #[test]
    fn peers_on_the_same_host_and_a_cut_off_minority_hold_nobody_down() {
        let mut m = on_hosts(5);
        let mut g = mgr();
        assert!(pass(&mut g, &mut m, &[], 0).is_empty());
        // osd.3 and osd.4 are cut from the other three and report them;
        // the three report osd.3 and osd.4.
        let reports = [
            unreachable(0, &[3, 4]),
            unreachable(1, &[3, 4]),
            unreachable(2, &[3, 4]),
            unreachable(3, &[0, 1, 2]),
            unreachable(4, &[0, 1, 2]),
        ];
        let d = pass(&mut g, &mut m, &reports, 10);
        let held: BTreeSet<OsdId> = d
            .iter()
            .filter_map(|x| match x {
                Decision::HeldDown { osd, .. } => Some(*osd),
                _ => None,
            })
            .collect();
        assert_eq!(held, BTreeSet::from([OsdId(3), OsdId(4)]), "{d:?}");
        // Peers on the OSD's own host do not count.
        let mut m = on_hosts(3);
        for o in m.osds.values_mut() {
            o.host = "same".into();
        }
        let both = [unreachable(1, &[0]), unreachable(2, &[0])];
        assert!(pass(&mut g, &mut m, &both, 11).is_empty());
    }

    #[test]
    fn decisions_read_well_in_the_log() {
        let d = Decision::Out {
            osd: OsdId(4),
            down_secs: 31,
        };
        assert_eq!(
            d.to_string(),
            "osd.4 has been down 31s: marking it out; its PGs move to other OSDs"
        );
    }
}
