//! The manager's decisions as a pure function of the map, the OSDs' reports
//! and the time: no I/O, no clock, so every rule is unit-tested directly.

use std::fmt;
use std::time::Duration;

use pontoon_cluster::{ClusterMap, OsdReport, PgMapError, recompute, trim_clean_pgs};
use pontoon_types::OsdId;

/// One change the manager made to the map, for its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The OSD's liveness key is gone: the down → out timer starts.
    Down {
        /// The OSD.
        osd: OsdId,
        /// When it was first seen down (Unix seconds).
        since_unix: u64,
    },
    /// The OSD has been down longer than the out interval and is now out:
    /// placement gives its PGs to other OSDs, which re-replicate the data.
    Out {
        /// The OSD.
        osd: OsdId,
        /// Seconds it has been down.
        down_secs: u64,
    },
    /// The OSD holds its liveness key again.
    Up {
        /// The OSD.
        osd: OsdId,
        /// Seconds it was down.
        down_secs: u64,
    },
    /// The OSD came back after having been marked out while down, and is in again.
    In {
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
        }
    }
}

/// Applies the manager's rules to `map` (whose epoch is the one the change
/// will commit at, as inside [`MapStore::update`](pontoon_cluster::MapStore::update))
/// at time `now_unix`, and returns what it changed (empty: nothing).
///
/// For each OSD: not alive ⇒ `down_since_unix` is set if unset; down at
/// least `out_after` ⇒ marked out; alive ⇒ `down_since_unix` cleared, and
/// an OSD that was out while down is marked in again (an OSD that is out
/// but never went down was taken out by an operator and stays out). Then
/// the PG table is recomputed and past intervals of PGs whose primary
/// reports them clean in their current interval are dropped.
pub fn decide(
    map: &mut ClusterMap,
    reports: &[OsdReport],
    now_unix: u64,
    out_after: Duration,
) -> Result<Vec<Decision>, PgMapError> {
    let mut out = Vec::new();
    let out_after = out_after.as_secs();
    let alive = map.alive.clone();
    for osd in map.osds.values_mut() {
        if alive.contains(&osd.id) {
            if let Some(since) = osd.down_since_unix.take() {
                out.push(Decision::Up {
                    osd: osd.id,
                    down_secs: now_unix.saturating_sub(since),
                });
                if !osd.in_cluster {
                    osd.in_cluster = true;
                    out.push(Decision::In { osd: osd.id });
                }
            }
            continue;
        }
        let since = match osd.down_since_unix {
            Some(s) => s,
            None => {
                osd.down_since_unix = Some(now_unix);
                out.push(Decision::Down {
                    osd: osd.id,
                    since_unix: now_unix,
                });
                now_unix
            }
        };
        let down_secs = now_unix.saturating_sub(since);
        if osd.in_cluster && down_secs >= out_after {
            osd.in_cluster = false;
            out.push(Decision::Out {
                osd: osd.id,
                down_secs,
            });
        }
    }
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

    /// What one pass does, at the next epoch, as the manager runs it.
    fn pass(m: &mut ClusterMap, reports: &[OsdReport], now: u64) -> Vec<Decision> {
        let before = m.clone();
        m.epoch = Epoch(m.epoch.0 + 1);
        let d = decide(m, reports, now, OUT).unwrap();
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
    fn a_healthy_cluster_needs_no_decision() {
        let mut m = healthy();
        assert!(pass(&mut m, &[], 1000).is_empty());
        assert!(pass(&mut m, &[], 5000).is_empty());
    }

    #[test]
    fn down_then_out_after_the_interval_then_up_and_in_again() {
        let mut m = healthy();
        m.alive.remove(&OsdId(1));
        let d = pass(&mut m, &[], 1000);
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
        assert!(pass(&mut m, &[], 1029).is_empty());
        assert_eq!(m.osds[&OsdId(1)].down_since_unix, Some(1000));

        // 30 s: out, and placement leaves it out of `up`.
        let d = pass(&mut m, &[], 1030);
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
        assert!(pass(&mut m, &[], 1100).is_empty());

        // Back: up and in again, PGs placed on it again.
        m.alive.insert(OsdId(1));
        let d = pass(&mut m, &[], 1200);
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
        m.alive.remove(&OsdId(2));
        pass(&mut m, &[], 100);
        m.alive.insert(OsdId(2));
        let d = pass(&mut m, &[], 110);
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
        m.osds.get_mut(&OsdId(0)).unwrap().in_cluster = false;
        let d = pass(&mut m, &[], 100);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(matches!(d[0], Decision::Pgs { .. }));
        assert!(!m.osds[&OsdId(0)].in_cluster);
        assert!(pass(&mut m, &[], 200).is_empty());
    }

    #[test]
    fn out_after_zero_marks_out_in_the_same_pass() {
        let mut m = healthy();
        m.alive.remove(&OsdId(0));
        m.epoch = Epoch(2);
        let d = decide(&mut m, &[], 50, Duration::ZERO).unwrap();
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
        m.osds.insert(OsdId(3), osd(3));
        let d = pass(&mut m, &[], 7);
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
        m.alive.remove(&OsdId(1));
        pass(&mut m, &[], 10);
        m.alive.insert(OsdId(1));
        pass(&mut m, &[], 12);
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
                })
                .collect(),
            used_bytes: 0,
            capacity_bytes: 0,
        };
        // Still recovering: nothing to trim, no change.
        let recovering: Vec<_> = (0..3)
            .map(|i| report_of(OsdId(i), PgState::Recovering))
            .collect();
        assert!(pass(&mut m, &recovering, 13).is_empty());
        let clean: Vec<_> = (0..3)
            .map(|i| report_of(OsdId(i), PgState::ActiveClean))
            .collect();
        let d = pass(&mut m, &clean, 14);
        assert_eq!(
            d,
            vec![Decision::Trimmed {
                pgs: with_past.len()
            }]
        );
        assert!(m.pgs.values().all(|p| p.past_intervals.is_empty()));
        assert!(pass(&mut m, &clean, 15).is_empty());
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
