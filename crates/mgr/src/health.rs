//! The cluster's health, as `pontoon health`, `pontoon status` and the REST
//! API show it: HEALTH_OK, HEALTH_WARN or HEALTH_ERR, and every reason by
//! name (the names are Ceph's where Ceph has the same check).
//!
//! ERR means data is unavailable or at risk now (PGs not serving I/O,
//! objects with no good copy, full OSDs, a failing device); WARN means the
//! cluster works with less margin than it should (OSDs down or unreachable,
//! PGs degraded or recovering, nearly full OSDs, no manager or no standby,
//! clocks apart).

use std::collections::BTreeMap;

use pontoon_cluster::daemons::{DAEMON_REFRESH, DaemonRecord, kind};
use pontoon_cluster::space::{FullState, ratio};
use pontoon_cluster::{ClusterMap, OsdReport, PgState};
use serde::Serialize;

use crate::status::PrimaryReports;

/// How bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Severity {
    /// Nothing to do.
    #[serde(rename = "HEALTH_OK")]
    Ok,
    /// Working with less margin than it should.
    #[serde(rename = "HEALTH_WARN")]
    Warn,
    /// Data unavailable or at risk.
    #[serde(rename = "HEALTH_ERR")]
    Err,
}

impl Severity {
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Ok => "HEALTH_OK",
            Severity::Warn => "HEALTH_WARN",
            Severity::Err => "HEALTH_ERR",
        }
    }

    /// 0, 1 or 2, for metrics.
    pub fn level(self) -> u8 {
        self as u8
    }
}

/// One reason the cluster is not OK.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Its name, e.g. `OSD_DOWN`.
    pub code: &'static str,
    /// How bad.
    pub severity: Severity,
    /// One line.
    pub summary: String,
    /// One line per OSD, PG or daemon concerned (bounded).
    pub detail: Vec<String>,
}

/// The cluster's health.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Health {
    /// The worst severity of the checks (OK with none).
    pub status: Severity,
    /// Every failing check, worst first.
    pub checks: Vec<Check>,
}

/// A daemon whose clock differs from the manager's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClockSkew {
    /// The daemon, e.g. `osd.2`.
    pub daemon: String,
    /// Its clock minus the manager's, in seconds.
    pub skew_secs: f64,
}

/// What health needs beyond the map and the OSDs' reports.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The active manager, if any.
    pub manager: Option<String>,
    /// Standby managers, when known (from the daemon registry).
    pub standby_managers: Option<usize>,
    /// Measured clock offsets of daemons.
    pub clock_skews: Vec<ClockSkew>,
}

/// What health learns from the daemon registry: the standby managers, and
/// clock offsets. A record's clock was read when it was last refreshed, up
/// to [`DAEMON_REFRESH`] ago, so its offset from `now_ms` is known only
/// within that window: a clock is reported as skewed only when the whole
/// window lies beyond [`CLOCK_SKEW_ALLOWED_SECS`] (so a clock behind is
/// caught only once it is behind by more than the allowance plus the
/// refresh interval).
pub fn context(manager: Option<String>, daemons: &[DaemonRecord], now_ms: u64) -> Context {
    let managers = daemons.iter().filter(|d| d.kind == kind::MGR).count();
    let window = DAEMON_REFRESH.as_secs_f64() + 0.5;
    let clock_skews = daemons
        .iter()
        .filter_map(|d| {
            let low = (d.unix_ms as f64 - now_ms as f64) / 1000.0;
            let high = low + window;
            let skew = if low > CLOCK_SKEW_ALLOWED_SECS {
                low
            } else if high < -CLOCK_SKEW_ALLOWED_SECS {
                high
            } else {
                return None;
            };
            Some(ClockSkew {
                daemon: format!("{}.{}", d.kind, d.name),
                skew_secs: skew,
            })
        })
        .collect();
    Context {
        standby_managers: manager.as_ref().map(|_| managers.saturating_sub(1)),
        manager,
        clock_skews,
    }
}

/// Clocks further apart than this are reported.
pub const CLOCK_SKEW_ALLOWED_SECS: f64 = 1.0;
/// At most this many detail lines per check.
pub const MAX_DETAIL: usize = 50;

fn check(code: &'static str, severity: Severity, summary: String, detail: Vec<String>) -> Check {
    let mut detail = detail;
    if detail.len() > MAX_DETAIL {
        let more = detail.len() - MAX_DETAIL;
        detail.truncate(MAX_DETAIL);
        detail.push(format!("... and {more} more"));
    }
    Check {
        code,
        severity,
        summary,
        detail,
    }
}

/// Assesses the cluster.
pub fn assess(map: &ClusterMap, reports: &[OsdReport], ctx: &Context) -> Health {
    let mut checks = Vec::new();
    let by_osd: BTreeMap<_, _> = reports.iter().map(|r| (r.osd, r)).collect();

    if ctx.manager.is_none() {
        checks.push(check(
            "MGR_DOWN",
            Severity::Warn,
            "no active manager: failed OSDs are not marked down or out".into(),
            vec![],
        ));
    } else if ctx.standby_managers == Some(0) {
        checks.push(check(
            "MGR_NO_STANDBY",
            Severity::Warn,
            "the active manager has no standby".into(),
            vec![format!(
                "mgr {} is the only manager",
                ctx.manager.as_deref().unwrap_or_default()
            )],
        ));
    }

    let down: Vec<String> = map
        .osds
        .values()
        .filter(|o| !map.is_alive(o.id))
        .map(|o| {
            format!(
                "osd.{} (host {}) is down{}",
                o.id.0,
                o.host,
                if o.in_cluster { "" } else { " and out" }
            )
        })
        .collect();
    if !down.is_empty() {
        checks.push(check(
            "OSD_DOWN",
            Severity::Warn,
            format!("{} of {} osds down", down.len(), map.osds.len()),
            down,
        ));
    }
    let held: Vec<String> = map
        .osds
        .values()
        .filter(|o| o.reported_down)
        .map(|o| format!("osd.{} is held down: its peers cannot reach it", o.id.0))
        .collect();
    if !held.is_empty() {
        checks.push(check(
            "OSD_UNREACHABLE",
            Severity::Warn,
            format!("{} osds unreachable from their peers", held.len()),
            held,
        ));
    }

    let failing: Vec<String> = reports
        .iter()
        .filter(|r| r.checksum_errors > 0 || r.store_failure.is_some())
        .map(|r| match &r.store_failure {
            Some(why) => format!("osd.{}: its store failed: {why}", r.osd.0),
            None => format!(
                "osd.{}: {} reads found blocks failing their checksum",
                r.osd.0, r.checksum_errors
            ),
        })
        .collect();
    if !failing.is_empty() {
        checks.push(check(
            "OSD_DEVICE_FAILING",
            Severity::Err,
            format!("{} osds with a failing device or journal", failing.len()),
            failing,
        ));
    }

    for (state, code, severity, what) in [
        (FullState::Full, "OSD_FULL", Severity::Err, "full"),
        (
            FullState::Backfillfull,
            "OSD_BACKFILLFULL",
            Severity::Warn,
            "backfillfull",
        ),
        (
            FullState::Nearfull,
            "OSD_NEARFULL",
            Severity::Warn,
            "nearfull",
        ),
    ] {
        let osds: Vec<String> = map
            .osds
            .values()
            .filter(|o| o.full == state)
            .map(|o| {
                let used = by_osd
                    .get(&o.id)
                    .map_or(0.0, |r| ratio(r.used_bytes, r.capacity_bytes));
                format!("osd.{} is {what} ({:.1}% used)", o.id.0, used * 100.0)
            })
            .collect();
        if !osds.is_empty() {
            checks.push(check(
                code,
                severity,
                format!("{} {what} osd(s)", osds.len()),
                osds,
            ));
        }
    }

    let primaries = PrimaryReports::new(reports);
    let (mut unavailable, mut degraded, mut unknown, mut damaged) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut degraded_objects, mut unfound) = (0u64, 0u64);
    let mut blocked = false;
    for rec in map.pgs.values() {
        let (report, state) = primaries.of(rec);
        let Some(r) = report else {
            if state == PgState::Inactive.as_str() {
                blocked = true;
                unavailable.push(format!("pg {} is inactive (no live member)", rec.pg));
            } else {
                unknown.push(format!(
                    "pg {} has not been reported by its primary",
                    rec.pg
                ));
            }
            continue;
        };
        match r.state {
            PgState::Peering => unavailable.push(format!("pg {} is peering", r.pg)),
            PgState::Inactive | PgState::Incomplete => {
                blocked = true;
                unavailable.push(format!("pg {} is {}", r.pg, r.state.as_str()))
            }
            PgState::Degraded | PgState::Recovering => degraded.push(format!(
                "pg {} is {}: {} objects degraded, {} missing{}",
                r.pg,
                r.state.as_str(),
                r.degraded_objects,
                r.missing_objects,
                r.note
                    .as_ref()
                    .map_or_else(String::new, |n| format!("; {n}"))
            )),
            PgState::Active | PgState::ActiveClean => {}
        }
        degraded_objects += r.degraded_objects;
        if r.scrub.unrecoverable_objects > 0 {
            unfound += r.scrub.unrecoverable_objects;
            damaged.push(format!(
                "pg {}: {} objects have no good copy: {}",
                r.pg,
                r.scrub.unrecoverable_objects,
                r.scrub.unrecoverable.join(", ")
            ));
        }
    }
    if !unavailable.is_empty() {
        // Peering alone is a transient state (a new pool, a map change):
        // a warning, as Ceph has it; a PG that cannot peer is an error.
        checks.push(check(
            "PG_AVAILABILITY",
            if blocked {
                Severity::Err
            } else {
                Severity::Warn
            },
            format!(
                "reduced data availability: {} pgs not serving I/O",
                unavailable.len()
            ),
            unavailable,
        ));
    }
    if !damaged.is_empty() {
        checks.push(check(
            "PG_DAMAGED",
            Severity::Err,
            format!(
                "{unfound} objects in {} pgs have no intact copy",
                damaged.len()
            ),
            damaged,
        ));
    }
    if !degraded.is_empty() {
        checks.push(check(
            "PG_DEGRADED",
            Severity::Warn,
            format!(
                "degraded data redundancy: {degraded_objects} objects degraded, {} pgs degraded \
                 or recovering",
                degraded.len()
            ),
            degraded,
        ));
    }
    if !unknown.is_empty() {
        checks.push(check(
            "PG_NOT_REPORTED",
            Severity::Warn,
            format!("{} pgs not reported by their primary yet", unknown.len()),
            unknown,
        ));
    }

    let skewed: Vec<String> = ctx
        .clock_skews
        .iter()
        .filter(|s| s.skew_secs.abs() > CLOCK_SKEW_ALLOWED_SECS)
        .map(|s| {
            format!(
                "{}'s clock is {:+.3} s from the manager's",
                s.daemon, s.skew_secs
            )
        })
        .collect();
    if !skewed.is_empty() {
        checks.push(check(
            "CLOCK_SKEW",
            Severity::Warn,
            format!(
                "clock skew on {} daemons (more than {CLOCK_SKEW_ALLOWED_SECS} s)",
                skewed.len()
            ),
            skewed,
        ));
    }

    checks.extend(crate::flags::health_checks(map));
    checks.sort_by_key(|c| std::cmp::Reverse(c.severity));
    Health {
        status: checks
            .iter()
            .map(|c| c.severity)
            .max()
            .unwrap_or(Severity::Ok),
        checks,
    }
}

/// One line: `HEALTH_OK`, or the status and every check's summary.
pub fn summary_line(h: &Health) -> String {
    if h.checks.is_empty() {
        return h.status.as_str().to_string();
    }
    let reasons: Vec<&str> = h.checks.iter().map(|c| c.summary.as_str()).collect();
    format!("{} {}", h.status.as_str(), reasons.join("; "))
}

/// Every check with its detail lines, as `pontoon health detail` prints it.
pub fn render_detail(h: &Health) -> String {
    let mut out = vec![summary_line(h)];
    for c in &h.checks {
        out.push(format!(
            "[{}] {}: {}",
            &c.severity.as_str()[7..],
            c.code,
            c.summary
        ));
        out.extend(c.detail.iter().map(|d| format!("    {d}")));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::{FailureDomain, OsdRecord, PgRecord, PgReport, PoolRecord};
    use pontoon_types::{Epoch, OsdId, PgId, PoolId};

    fn map(osds: u32) -> ClusterMap {
        let mut m = ClusterMap::new("c");
        for i in 0..osds {
            m.osds.insert(
                OsdId(i),
                OsdRecord {
                    id: OsdId(i),
                    host: format!("h{i}"),
                    addrs: vec![],
                    weight: 1,
                    device_bytes: 1 << 30,
                    in_cluster: true,
                    down_since_unix: None,
                    reported_down: false,
                    full: Default::default(),
                },
            );
            m.alive.insert(OsdId(i));
        }
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "p".into(),
                size: 2,
                min_size: 1,
                pgs: 2,
                failure_domain: FailureDomain::Osd,
            },
        );
        for i in 0..2 {
            let pg = PgId::new(1, i);
            m.pgs.insert(
                pg,
                PgRecord {
                    pg,
                    up: vec![OsdId(0), OsdId(1)],
                    acting: vec![OsdId(0), OsdId(1)],
                    interval: Epoch(3),
                    past_intervals: vec![],
                    scrub_request: None,
                    upmap_items: Vec::new(),
                },
            );
        }
        m
    }

    fn report(states: &[PgState]) -> OsdReport {
        OsdReport {
            osd: OsdId(0),
            pgs: states
                .iter()
                .enumerate()
                .map(|(i, s)| PgReport {
                    pg: PgId::new(1, i as u32),
                    interval: Epoch(3),
                    state: *s,
                    objects: 5,
                    degraded_objects: if *s == PgState::Recovering { 2 } else { 0 },
                    missing_objects: 0,
                    recovered_objects: 0,
                    note: None,
                    scrub: Default::default(),
                })
                .collect(),
            used_bytes: 10,
            capacity_bytes: 100,
            ..Default::default()
        }
    }

    fn ctx() -> Context {
        Context {
            manager: Some("m".into()),
            standby_managers: Some(1),
            clock_skews: vec![],
        }
    }

    fn codes(h: &Health) -> Vec<&'static str> {
        h.checks.iter().map(|c| c.code).collect()
    }

    #[test]
    fn a_clean_cluster_is_ok() {
        let m = map(2);
        let h = assess(&m, &[report(&[PgState::ActiveClean; 2])], &ctx());
        assert_eq!(h.status, Severity::Ok);
        assert!(h.checks.is_empty());
        assert_eq!(summary_line(&h), "HEALTH_OK");
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["status"], "HEALTH_OK");
    }

    #[test]
    fn each_reason_is_named_worst_first() {
        let mut m = map(3);
        m.alive.remove(&OsdId(2));
        m.osds.get_mut(&OsdId(1)).unwrap().full = FullState::Nearfull;
        let mut r = report(&[PgState::Recovering, PgState::ActiveClean]);
        r.pgs[1].scrub.unrecoverable_objects = 1;
        r.pgs[1].scrub.unrecoverable = vec!["v1.7".into()];
        r.pgs[0].note = Some("recovery of v1.3 fails: too large".into());
        let c = Context {
            standby_managers: Some(0),
            clock_skews: vec![
                ClockSkew {
                    daemon: "osd.1".into(),
                    skew_secs: -2.5,
                },
                ClockSkew {
                    daemon: "osd.0".into(),
                    skew_secs: 0.2,
                },
            ],
            ..ctx()
        };
        let h = assess(&m, &[r], &c);
        assert_eq!(h.status, Severity::Err);
        assert_eq!(
            codes(&h),
            [
                "PG_DAMAGED",
                "MGR_NO_STANDBY",
                "OSD_DOWN",
                "OSD_NEARFULL",
                "PG_DEGRADED",
                "CLOCK_SKEW"
            ]
        );
        let text = render_detail(&h);
        assert!(text.starts_with("HEALTH_ERR 1 objects in 1 pgs"), "{text}");
        assert!(text.contains("osd.2 (host h2) is down"), "{text}");
        assert!(text.contains("osd.1's clock is -2.500 s"), "{text}");
        assert!(!text.contains("osd.0's clock"), "{text}");
        assert!(text.contains("2 objects degraded"), "{text}");
        // Why a recovery keeps failing is part of the degraded PG's line.
        assert!(
            text.contains("0 missing; recovery of v1.3 fails: too large"),
            "{text}"
        );
    }

    #[test]
    fn peering_pgs_are_a_warning_and_incomplete_ones_an_error() {
        let m = map(2);
        let availability = |h: &Health| {
            h.checks
                .iter()
                .find(|c| c.code == "PG_AVAILABILITY")
                .map(|c| c.severity)
        };
        let h = assess(&m, &[report(&[PgState::Peering])], &ctx());
        assert_eq!(h.status, Severity::Warn, "{}", render_detail(&h));
        assert_eq!(availability(&h), Some(Severity::Warn));
        let both = report(&[PgState::Peering, PgState::Incomplete]);
        let h = assess(&m, &[both], &ctx());
        assert_eq!(h.status, Severity::Err, "{}", render_detail(&h));
        assert_eq!(availability(&h), Some(Severity::Err));
    }

    #[test]
    fn unavailable_pgs_full_osds_and_failing_devices_are_errors() {
        let mut m = map(2);
        m.osds.get_mut(&OsdId(0)).unwrap().full = FullState::Full;
        let mut r = report(&[PgState::Incomplete]);
        r.checksum_errors = 3;
        let h = assess(&m, &[r], &Context::default());
        assert_eq!(h.status, Severity::Err);
        let c = codes(&h);
        for code in [
            "OSD_DEVICE_FAILING",
            "OSD_FULL",
            "PG_AVAILABILITY",
            "MGR_DOWN",
            "PG_NOT_REPORTED",
        ] {
            assert!(c.contains(&code), "{code} missing from {c:?}");
        }
        assert!(summary_line(&h).contains("not serving I/O"));
    }

    #[test]
    fn the_registry_gives_standbys_and_clear_clock_skews() {
        let rec = |kind: &str, name: &str, unix_ms| {
            let mut d = DaemonRecord::new(kind, name, "h", None);
            d.unix_ms = unix_ms;
            d
        };
        let now = 1_000_000;
        let daemons = [
            rec("mgr", "a", now),
            rec("mgr", "b", now - 2_000),
            rec("osd", "0", now + 1_500),
            rec("osd", "1", now - 3_000),
            rec("osd", "2", now - 6_000),
        ];
        let c = context(Some("a".into()), &daemons, now);
        assert_eq!(c.standby_managers, Some(1));
        let skewed: Vec<&str> = c.clock_skews.iter().map(|s| s.daemon.as_str()).collect();
        // osd.0 is certainly ahead; osd.1 may only be a stale record; osd.2
        // is behind by more than the allowance even if just refreshed.
        assert_eq!(skewed, ["osd.0", "osd.2"]);
        assert_eq!(context(None, &daemons, now).standby_managers, None);
        let alone = context(Some("a".into()), &daemons[..1], now);
        assert_eq!(alone.standby_managers, Some(0));
    }
}
