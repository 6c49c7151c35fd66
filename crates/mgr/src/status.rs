//! The cluster's status as `pontoon status` and the REST API show it: OSDs
//! up/in, PG states and recovery, from the map and the OSDs' reports.
//!
//! A PG's state is what its current primary reports for the PG's current
//! interval. A PG with no live member is `inactive`; one whose primary has
//! not reported it in this interval (yet) is `unknown`.

use std::collections::{BTreeMap, HashMap};

use pontoon_cluster::space::{FullState, ratio};
use pontoon_cluster::{ClusterMap, OsdReport, PgRecord, PgReport, PgState};
use pontoon_types::{OsdId, PgId, format_size};
use serde::Serialize;

use crate::health::{self, Context, Health};

/// The state name of a PG no primary has reported in its current interval.
pub const UNKNOWN: &str = "unknown";

/// The whole status, as `status --json` prints it.
#[derive(Serialize, Debug)]
pub struct Status {
    /// HEALTH_OK, HEALTH_WARN or HEALTH_ERR, and why.
    pub health: Health,
    /// Cluster name.
    pub cluster: String,
    /// The cluster's fsid, as OSD devices record it (none until the first
    /// OSD is created).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsid: Option<String>,
    /// Map epoch.
    pub epoch: u64,
    /// The active manager, if any.
    pub manager: Option<String>,
    /// OSD counts and list.
    pub osds: OsdSummary,
    /// OSD flags, hosts in maintenance, destroyed OSDs.
    pub flags: crate::flags::FlagsView,
    /// Number of pools.
    pub pools: usize,
    /// Number of volumes.
    pub volumes: usize,
    /// PG counts by state.
    pub pgs: PgSummary,
    /// Object counts from the primaries' reports.
    pub objects: ObjectSummary,
    /// OSDs at or above a full ratio.
    pub full_osds: Vec<FullOsd>,
    /// Objects of removed volumes and stray copies the OSDs still have to delete.
    pub reclaim_pending_objects: u64,
    /// What the primaries say of PGs that are incomplete or wait.
    pub pg_notes: Vec<PgNote>,
    /// The daemon registry: every running daemon and its `/metrics`
    /// address (filled by the caller from `MapStore::daemons`, see
    /// [`Status::with_daemons`]).
    pub daemons: Vec<pontoon_cluster::daemons::DaemonRecord>,
}

impl Status {
    /// The status with the daemon registry's records.
    pub fn with_daemons(mut self, daemons: Vec<pontoon_cluster::daemons::DaemonRecord>) -> Self {
        self.daemons = daemons;
        self
    }
}

/// An OSD at or above a full ratio.
#[derive(Serialize, Debug)]
pub struct FullOsd {
    /// Its id number.
    pub id: u32,
    /// `nearfull`, `backfillfull` or `full`.
    pub state: FullState,
    /// Fill of its data area, from its last report.
    pub used_ratio: f64,
}

/// A PG and what its primary says of it.
#[derive(Serialize, Debug)]
pub struct PgNote {
    /// The PG.
    pub pg: String,
    /// In words.
    pub note: String,
}

/// OSD counts and the OSDs.
#[derive(Serialize, Debug)]
pub struct OsdSummary {
    /// Registered OSDs.
    pub total: usize,
    /// OSDs holding their liveness lease.
    pub up: usize,
    /// OSDs that receive PGs.
    pub r#in: usize,
    /// Every OSD.
    pub list: Vec<OsdView>,
}

/// One OSD.
#[derive(Serialize, Debug)]
pub struct OsdView {
    /// Its id number.
    pub id: u32,
    /// Its host.
    pub host: String,
    /// Its shards' addresses.
    pub addrs: Vec<String>,
    /// Alive.
    pub up: bool,
    /// In.
    pub r#in: bool,
    /// Placement weight.
    pub weight: u64,
    /// Device size.
    pub device_bytes: u64,
    /// Bytes used, from its last report.
    pub used_bytes: Option<u64>,
    /// Since when it is down (Unix seconds), if the manager noticed.
    pub down_since_unix: Option<u64>,
    /// Held down by the manager: peers on other hosts cannot reach it.
    pub held_down: bool,
    /// Peers it cannot reach by heartbeat, from its last report.
    pub unreachable: Vec<u32>,
    /// Destroyed: its id awaits a replacement drive.
    pub destroyed: bool,
    /// Why it is not marked out while down (`noout`, host maintenance).
    pub noout: Option<String>,
}

/// PG counts.
#[derive(Serialize, Debug)]
pub struct PgSummary {
    /// All PGs.
    pub total: usize,
    /// Count per state name (`active+clean`, `active+degraded`, …,
    /// `inactive`, `unknown`).
    pub states: BTreeMap<String, usize>,
}

/// Object counts summed over the PGs' current reports.
#[derive(Serialize, Debug, Default, Clone)]
pub struct ObjectSummary {
    /// Objects in the PGs reported.
    pub total: u64,
    /// Objects with fewer than `size` up-to-date copies.
    pub degraded: u64,
    /// Objects whose authoritative copy is missing somewhere in the acting set.
    pub missing: u64,
    /// Objects recovered in the PGs' current intervals.
    pub recovered: u64,
    /// Objects scrub repaired (since each primary started).
    pub scrub_repaired: u64,
    /// Objects the last scrubs found no good copy of.
    pub unrecoverable: u64,
}

/// The OSDs' PG reports, indexed so that a PG's state is what its current
/// primary reports of it in its current interval.
pub struct PrimaryReports<'a>(HashMap<OsdId, HashMap<PgId, &'a PgReport>>);

impl<'a> PrimaryReports<'a> {
    /// Indexes `reports`.
    pub fn new(reports: &'a [OsdReport]) -> Self {
        Self(
            reports
                .iter()
                .map(|r| (r.osd, r.pgs.iter().map(|p| (p.pg, p)).collect()))
                .collect(),
        )
    }

    /// The current primary's report of `rec`, and the state name to show:
    /// `inactive` with no primary, [`UNKNOWN`] with no current report.
    pub fn of(&self, rec: &PgRecord) -> (Option<&'a PgReport>, &'static str) {
        let Some(primary) = rec.primary() else {
            return (None, PgState::Inactive.as_str());
        };
        let report = self
            .0
            .get(&primary)
            .and_then(|pgs| pgs.get(&rec.pg))
            .copied()
            .filter(|r| r.interval == rec.interval);
        (report, report.map_or(UNKNOWN, |r| r.state.as_str()))
    }
}

/// Reads the map, the reports, the leader and the daemon registry and
/// builds the status, health included: what `pontoon status`, `pontoon
/// health`, the REST API and the metrics all show.
pub async fn load(
    store: &pontoon_cluster::MapStore,
) -> Result<Status, pontoon_cluster::ClusterError> {
    let (map, reports, manager, daemons) = tokio::try_join!(
        store.load(),
        store.reports(),
        store.leader(),
        store.daemons()
    )?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let ctx = health::context(manager, &daemons, now_ms);
    Ok(summarize_with(&map, &reports, &ctx).with_daemons(daemons))
}

/// Builds the status from a map, the reports and the manager's name.
pub fn summarize(map: &ClusterMap, reports: &[OsdReport], manager: Option<String>) -> Status {
    summarize_with(
        map,
        reports,
        &Context {
            manager,
            ..Context::default()
        },
    )
}

/// Builds the status, with what health needs beyond the map and reports.
pub fn summarize_with(map: &ClusterMap, reports: &[OsdReport], ctx: &Context) -> Status {
    let manager = ctx.manager.clone();
    let by_osd: HashMap<OsdId, &OsdReport> = reports.iter().map(|r| (r.osd, r)).collect();
    let primaries = PrimaryReports::new(reports);
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    let mut objects = ObjectSummary::default();
    let mut pg_notes = Vec::new();
    for rec in map.pgs.values() {
        let (report, state) = primaries.of(rec);
        if let Some(r) = report {
            if let Some(note) = &r.note {
                pg_notes.push(PgNote {
                    pg: r.pg.to_string(),
                    note: note.clone(),
                });
            }
            if r.scrub.unrecoverable_objects > 0 {
                pg_notes.push(PgNote {
                    pg: r.pg.to_string(),
                    note: format!(
                        "{} objects have no good copy (unrecoverable; reads of them fail): {}",
                        r.scrub.unrecoverable_objects,
                        r.scrub.unrecoverable.join(", ")
                    ),
                });
            }
            if let Some((done, all)) = r.scrub.progress {
                pg_notes.push(PgNote {
                    pg: r.pg.to_string(),
                    note: format!("scrubbing: {done} of {all} objects compared"),
                });
            }
            objects.scrub_repaired += r.scrub.repaired_objects;
            objects.unrecoverable += r.scrub.unrecoverable_objects;
            objects.total += r.objects;
            objects.degraded += r.degraded_objects;
            objects.missing += r.missing_objects;
            objects.recovered += r.recovered_objects;
        }
        *states.entry(state.to_string()).or_default() += 1;
    }
    let list: Vec<OsdView> = map
        .osds
        .values()
        .map(|o| OsdView {
            id: o.id.0,
            host: o.host.clone(),
            addrs: o.addrs.iter().map(ToString::to_string).collect(),
            up: map.is_alive(o.id),
            r#in: o.in_cluster,
            weight: o.weight,
            device_bytes: o.device_bytes,
            used_bytes: by_osd.get(&o.id).map(|r| r.used_bytes),
            down_since_unix: o.down_since_unix,
            held_down: o.reported_down,
            unreachable: by_osd
                .get(&o.id)
                .map(|r| r.unreachable.iter().map(|p| p.0).collect())
                .unwrap_or_default(),
            destroyed: map.is_destroyed(o.id),
            noout: map.noout_reason(o.id),
        })
        .collect();
    Status {
        health: health::assess(map, reports, ctx),
        cluster: map.name.clone(),
        fsid: map.fsid.map(|f| f.to_string()),
        epoch: map.epoch.0,
        manager,
        osds: OsdSummary {
            total: list.len(),
            up: list.iter().filter(|o| o.up).count(),
            r#in: list.iter().filter(|o| o.r#in).count(),
            list,
        },
        flags: crate::flags::view(map),
        pools: map.pools.len(),
        volumes: map.volumes.len(),
        pgs: PgSummary {
            total: map.pgs.len(),
            states,
        },
        objects,
        full_osds: map
            .osds
            .values()
            .filter(|o| !o.full.is_ok())
            .map(|o| FullOsd {
                id: o.id.0,
                state: o.full,
                used_ratio: by_osd
                    .get(&o.id)
                    .map_or(0.0, |r| ratio(r.used_bytes, r.capacity_bytes)),
            })
            .collect(),
        reclaim_pending_objects: reports.iter().map(|r| r.reclaim_pending).sum(),
        pg_notes,
        daemons: Vec::new(),
    }
}

/// Recovery progress between two samples of the object counts.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
pub struct RecoveryRate {
    /// Objects made whole per second (missing or degraded objects gone).
    pub objects_per_sec: f64,
    /// Seconds until no object is missing or degraded at that rate.
    pub eta_secs: Option<f64>,
}

/// The recovery rate between `before` and `after`, `secs` apart: how fast
/// the count of objects still to recover (missing, else degraded) falls.
/// `None` when nothing is left to recover.
pub fn recovery_rate(
    before: &ObjectSummary,
    after: &ObjectSummary,
    secs: f64,
) -> Option<RecoveryRate> {
    let left = |o: &ObjectSummary| o.missing.max(o.degraded);
    let remaining = left(after);
    if remaining == 0 || secs <= 0.0 {
        return None;
    }
    let done = left(before).saturating_sub(remaining) as f64;
    let objects_per_sec = done / secs;
    Some(RecoveryRate {
        objects_per_sec,
        eta_secs: (objects_per_sec > 0.0).then(|| remaining as f64 / objects_per_sec),
    })
}

/// The recovery line of the text status.
pub fn render_recovery(r: &RecoveryRate) -> String {
    match r.eta_secs {
        Some(eta) => format!(
            "recovery: {:.1} objects/s, about {} left",
            r.objects_per_sec,
            eta_text(eta)
        ),
        None => "recovery: no progress measured yet".to_string(),
    }
}

/// A time left, rounded: `45s`, `3m20s`, `2h05m`, `3d04h`.
fn eta_text(secs: f64) -> String {
    let s = secs.round().max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// The status as text.
pub fn render(s: &Status) -> String {
    let mut out = vec![format!("health: {}", health::summary_line(&s.health))];
    out.push(format!(
        "cluster {} (epoch {}), manager: {}",
        s.cluster,
        s.epoch,
        s.manager.as_deref().unwrap_or("none")
    ));
    out.push(format!(
        "osds: {} total, {} up, {} in",
        s.osds.total, s.osds.up, s.osds.r#in
    ));
    for o in &s.osds.list {
        let used = o
            .used_bytes
            .map(|u| {
                format!(
                    "  used {} of {}",
                    format_size(u),
                    format_size(o.device_bytes)
                )
            })
            .unwrap_or_default();
        let mut notes = String::new();
        if o.held_down {
            notes.push_str("  held down: unreachable from its peers");
        }
        if o.destroyed {
            notes.push_str("  destroyed");
        } else if !o.up && o.r#in && o.noout.is_some() {
            notes.push_str("  noout");
        }
        if !o.unreachable.is_empty() {
            let peers: Vec<String> = o.unreachable.iter().map(|p| format!("osd.{p}")).collect();
            notes.push_str(&format!("  cannot reach {}", peers.join(", ")));
        }
        out.push(format!(
            "  osd.{:<4} {:<4} {:<3} {:<16} {}{used}{notes}",
            o.id,
            if o.up { "up" } else { "down" },
            if o.r#in { "in" } else { "out" },
            o.host,
            o.addrs.join(","),
        ));
    }
    out.extend(crate::flags::render_lines(&s.flags));
    if !s.daemons.is_empty() {
        out.push(pontoon_cluster::daemons::summary_line(
            &s.daemons,
            s.manager.as_deref(),
        ));
    }
    out.push(format!("pools: {}, volumes: {}", s.pools, s.volumes));
    out.push(format!("pgs: {}", s.pgs.total));
    // Clean first, then the rest by name.
    let clean = PgState::ActiveClean.as_str();
    if let Some(n) = s.pgs.states.get(clean) {
        out.push(format!("  {n:>6} {clean}"));
    }
    for (state, n) in s.pgs.states.iter().filter(|(k, _)| *k != clean) {
        out.push(format!("  {n:>6} {state}"));
    }
    let o = &s.objects;
    let mut recovery = format!(
        "objects: {}, {} degraded, {} missing; recovered {}",
        o.total, o.degraded, o.missing, o.recovered
    );
    if o.missing > 0 {
        let pct = 100 * o.recovered / (o.recovered + o.missing);
        recovery.push_str(&format!(" ({pct}% of the objects to recover)"));
    }
    if o.scrub_repaired > 0 || o.unrecoverable > 0 {
        recovery.push_str(&format!(
            "; scrub repaired {}, {} unrecoverable",
            o.scrub_repaired, o.unrecoverable
        ));
    }
    out.push(recovery);
    for f in &s.full_osds {
        out.push(format!(
            "{}: osd.{} ({:.1}% of its data area used)",
            f.state,
            f.id,
            f.used_ratio * 100.0
        ));
    }
    if s.reclaim_pending_objects > 0 {
        out.push(format!(
            "reclaim: {} objects of removed volumes and stray copies to delete",
            s.reclaim_pending_objects
        ));
    }
    const NOTES: usize = 10;
    for n in s.pg_notes.iter().take(NOTES) {
        out.push(format!("pg {}: {}", n.pg, n.note));
    }
    if s.pg_notes.len() > NOTES {
        out.push(format!("... and {} more PGs", s.pg_notes.len() - NOTES));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::{FailureDomain, OsdRecord, PgRecord, PoolRecord};
    use pontoon_types::{Epoch, PgId, PoolId};

    fn map() -> ClusterMap {
        let mut m = ClusterMap::new("c");
        m.epoch = Epoch(9);
        for i in 0..3 {
            m.osds.insert(
                OsdId(i),
                OsdRecord {
                    id: OsdId(i),
                    host: "h".into(),
                    addrs: vec![format!("127.0.0.1:{}", 7000 + i).parse().unwrap()],
                    weight: 1,
                    device_bytes: 1 << 30,
                    in_cluster: i != 2,
                    down_since_unix: None,
                    reported_down: false,
                    full: Default::default(),
                },
            );
        }
        m.alive.insert(OsdId(0));
        m.alive.insert(OsdId(1));
        m.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "p".into(),
                size: 2,
                min_size: 1,
                pgs: 4,
                failure_domain: FailureDomain::Osd,
            },
        );
        let acting = [
            vec![OsdId(0), OsdId(1)],
            vec![OsdId(1)],
            vec![],
            vec![OsdId(0)],
        ];
        for (i, a) in acting.into_iter().enumerate() {
            let pg = PgId::new(1, i as u32);
            m.pgs.insert(
                pg,
                PgRecord {
                    pg,
                    up: a.clone(),
                    acting: a,
                    interval: Epoch(5),
                    past_intervals: vec![],
                    scrub_request: None,
                    upmap_items: Vec::new(),
                },
            );
        }
        m
    }

    fn pg(index: u32, interval: u64, state: PgState, missing: u64, recovered: u64) -> PgReport {
        PgReport {
            pg: PgId::new(1, index),
            interval: Epoch(interval),
            state,
            objects: 20 + missing,
            degraded_objects: missing,
            missing_objects: missing,
            recovered_objects: recovered,
            note: None,
            scrub: Default::default(),
        }
    }

    #[test]
    fn pg_states_come_from_the_current_primary_at_the_current_interval() {
        let reports = vec![
            OsdReport {
                osd: OsdId(0),
                epoch: Epoch(9),
                // PG 0: clean. PG 3: a stale interval, so unknown.
                pgs: vec![
                    pg(0, 5, PgState::ActiveClean, 0, 0),
                    pg(3, 4, PgState::ActiveClean, 0, 0),
                ],
                used_bytes: 4096,
                capacity_bytes: 1 << 30,
                unreachable: vec![OsdId(2)],
                ..Default::default()
            },
            OsdReport {
                osd: OsdId(1),
                epoch: Epoch(9),
                // PG 0 from a non-primary is ignored; PG 1 recovering.
                pgs: vec![
                    pg(0, 5, PgState::Incomplete, 0, 0),
                    pg(1, 5, PgState::Recovering, 3, 7),
                ],
                used_bytes: 0,
                capacity_bytes: 1 << 30,
                unreachable: Vec::new(),
                ..Default::default()
            },
        ];
        let mut m = map();
        if let Some(o) = m.osds.get_mut(&OsdId(2)) {
            o.reported_down = true;
        }
        let s = summarize(&m, &reports, Some("m1".into()));
        let states: Vec<(&str, usize)> =
            s.pgs.states.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            states,
            vec![
                ("active+clean", 1),
                ("active+recovering", 1),
                ("inactive", 1),
                ("unknown", 1)
            ]
        );
        assert_eq!((s.osds.total, s.osds.up, s.osds.r#in), (3, 2, 2));
        assert_eq!(s.objects.missing, 3);
        assert_eq!(
            s.objects.total,
            20 + 23,
            "PG 0 and PG 1 from their primaries"
        );
        assert_eq!(s.objects.recovered, 7);
        assert_eq!(s.osds.list[0].used_bytes, Some(4096));
        assert_eq!(s.osds.list[2].used_bytes, None);
        let text = render(&s);
        assert!(text.starts_with("health: HEALTH_ERR "), "{text}");
        assert!(
            text.contains("\ncluster c (epoch 9), manager: m1"),
            "{text}"
        );
        assert_eq!(json_health(&s), "HEALTH_ERR");
        assert!(text.contains("osd.2    down out"), "{text}");
        assert!(
            text.contains("held down: unreachable from its peers"),
            "{text}"
        );
        assert!(text.contains("cannot reach osd.2"), "{text}");
        assert!(text.contains("(70% of the objects to recover)"), "{text}");
        assert!(
            text.contains("objects: 43, 3 degraded, 3 missing"),
            "{text}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["pgs"]["states"]["active+clean"], 1);
        assert_eq!(json["osds"]["in"], 2);
        assert_eq!(json["osds"]["list"][2]["held_down"], true);
        assert_eq!(json["osds"]["list"][0]["unreachable"][0], 2);
    }

    #[test]
    fn full_osds_reclaim_backlog_and_scrub_findings_are_named() {
        let mut m = map();
        if let Some(o) = m.osds.get_mut(&OsdId(1)) {
            o.full = FullState::Nearfull;
        }
        let mut lost = pg(0, 5, PgState::ActiveClean, 0, 0);
        lost.scrub.unrecoverable_objects = 1;
        lost.scrub.unrecoverable = vec!["vol3.17".into()];
        lost.scrub.repaired_objects = 2;
        let mut waiting = pg(1, 5, PgState::Recovering, 1, 0);
        waiting.note = Some("osd.0 is backfillfull: recovery onto it waits for space".into());
        let reports = vec![
            OsdReport {
                osd: OsdId(0),
                pgs: vec![lost],
                reclaim_pending: 5,
                ..Default::default()
            },
            OsdReport {
                osd: OsdId(1),
                pgs: vec![waiting],
                used_bytes: 870,
                capacity_bytes: 1000,
                ..Default::default()
            },
        ];
        let text = render(&summarize(&m, &reports, None));
        assert!(
            text.contains("nearfull: osd.1 (87.0% of its data area used)"),
            "{text}"
        );
        assert!(text.contains("reclaim: 5 objects"), "{text}");
        assert!(
            text.contains("pg 1.0: 1 objects have no good copy"),
            "{text}"
        );
        assert!(text.contains("vol3.17"), "{text}");
        assert!(text.contains("pg 1.1: osd.0 is backfillfull"), "{text}");
        assert!(text.contains("scrub repaired 2, 1 unrecoverable"), "{text}");
    }

    fn json_health(s: &Status) -> String {
        serde_json::to_value(s).unwrap()["health"]["status"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn recovery_rate_and_eta_come_from_two_samples() {
        let at = |missing| ObjectSummary {
            missing,
            degraded: missing,
            ..Default::default()
        };
        let r = recovery_rate(&at(1000), &at(800), 2.0).unwrap();
        assert_eq!(r.objects_per_sec, 100.0);
        assert_eq!(r.eta_secs, Some(8.0));
        assert_eq!(
            render_recovery(&r),
            "recovery: 100.0 objects/s, about 8s left"
        );
        assert_eq!(recovery_rate(&at(5), &at(0), 1.0), None);
        let stalled = recovery_rate(&at(5), &at(5), 1.0).unwrap();
        assert_eq!(stalled.eta_secs, None);
        assert_eq!(eta_text(3725.0), "1h02m");
        assert_eq!(eta_text(200.0), "3m20s");
    }
}
