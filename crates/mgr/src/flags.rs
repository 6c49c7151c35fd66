//! What the OSD flags, host maintenance and destroyed OSDs look like in
//! health and status (the rules themselves are in
//! [`pontoon_cluster::osd_admin`] and the manager's [`Manager::pass`]).
//!
//! Health names them as Ceph does: `OSDMAP_FLAGS` while any of `noout`,
//! `norebalance`, `norecover` is set, `HOST_IN_MAINTENANCE` while a host is
//! in maintenance; both are warnings, since the cluster then does less to
//! protect its data than it would on its own.
//!
//! [`Manager::pass`]: crate::Manager::pass

use pontoon_cluster::ClusterMap;
use pontoon_cluster::osd_admin::OsdFlag;
use serde::Serialize;

use crate::health::{Check, Severity};

/// Whether the minimum in ratio keeps a down OSD in: `in_count` of
/// `counted` OSDs are in, and that is below `ratio` of them (Ceph's
/// `mon_osd_min_in_ratio`, checked before marking an OSD out).
pub fn min_in_holds(in_count: usize, counted: usize, ratio: f64) -> bool {
    counted > 0 && (in_count as f64) < ratio * counted as f64
}

/// The flags and maintenance state, as `status` shows them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FlagsView {
    /// Flags set (`noout`, `norebalance`, `norecover`).
    pub flags: Vec<String>,
    /// Hosts in maintenance, with their OSDs.
    pub maintenance: Vec<MaintenanceView>,
    /// Destroyed OSDs awaiting a replacement.
    pub destroyed: Vec<u32>,
}

/// A host in maintenance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MaintenanceView {
    /// The host.
    pub host: String,
    /// Its OSDs' ids.
    pub osds: Vec<u32>,
}

/// The flags and maintenance state of `map`.
pub fn view(map: &ClusterMap) -> FlagsView {
    let s = &map.settings.osd;
    FlagsView {
        flags: s.flags.iter().map(|f| f.to_string()).collect(),
        maintenance: s
            .maintenance_hosts
            .iter()
            .map(|h| MaintenanceView {
                host: h.clone(),
                osds: map
                    .osds
                    .values()
                    .filter(|o| o.host == *h)
                    .map(|o| o.id.0)
                    .collect(),
            })
            .collect(),
        destroyed: s.destroyed.iter().map(|o| o.0).collect(),
    }
}

/// The text status lines for `v` (none when nothing is set).
pub fn render_lines(v: &FlagsView) -> Vec<String> {
    let mut out = Vec::new();
    if !v.flags.is_empty() {
        out.push(format!("flags: {}", v.flags.join(",")));
    }
    for m in &v.maintenance {
        out.push(format!(
            "maintenance: host {} ({}): not marked out while down",
            m.host,
            osd_list(&m.osds)
        ));
    }
    if !v.destroyed.is_empty() {
        out.push(format!(
            "destroyed: {} (awaiting `pontoon osd replace`)",
            osd_list(&v.destroyed)
        ));
    }
    out
}

fn osd_list(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "no OSDs".into();
    }
    ids.iter()
        .map(|i| format!("osd.{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The health checks of the flags and maintenance: `OSDMAP_FLAGS` and
/// `HOST_IN_MAINTENANCE`, warnings both.
pub fn health_checks(map: &ClusterMap) -> Vec<Check> {
    let s = &map.settings.osd;
    let mut out = Vec::new();
    if !s.flags.is_empty() {
        let names: Vec<&str> = s.flags.iter().map(|f| f.as_str()).collect();
        out.push(Check {
            code: "OSDMAP_FLAGS",
            severity: Severity::Warn,
            summary: format!("{} flag(s) set", names.join(",")),
            detail: s
                .flags
                .iter()
                .map(|f: &OsdFlag| format!("{f}: {}", f.meaning()))
                .collect(),
        });
    }
    if !s.maintenance_hosts.is_empty() {
        let n = s.maintenance_hosts.len();
        let v = view(map);
        out.push(Check {
            code: "HOST_IN_MAINTENANCE",
            severity: Severity::Warn,
            summary: format!(
                "{n} host{} in maintenance mode",
                if n == 1 { " is" } else { "s are" }
            ),
            detail: v
                .maintenance
                .iter()
                .map(|m| {
                    format!(
                        "host {}: {} not marked out while down",
                        m.host,
                        osd_list(&m.osds)
                    )
                })
                .collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use pontoon_cluster::osd_admin::{self, OsdFlag};
    use pontoon_cluster::{FailureDomain, OsdRecord, PoolRecord, recompute};
    use pontoon_types::{Epoch, OsdId, PoolId};

    use super::*;
    use crate::{Decision, Manager};

    /// `n` alive OSDs, two per host, one pool of 16 PGs × 2, at epoch 1.
    fn cluster(n: u32) -> ClusterMap {
        let mut m = ClusterMap::new("t");
        for i in 0..n {
            m.osds.insert(
                OsdId(i),
                OsdRecord {
                    id: OsdId(i),
                    host: format!("h{}", i / 2),
                    addrs: vec![std::net::SocketAddr::from((
                        [127, 0, 0, 1],
                        7000 + i as u16,
                    ))],
                    weight: 1024,
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
                pgs: 16,
                failure_domain: FailureDomain::Osd,
            },
        );
        m.epoch = Epoch(1);
        recompute(&mut m).unwrap();
        m
    }

    /// A manager (out after 30 s) and the origin of its clock.
    struct Mgr {
        m: Manager,
        base: Instant,
    }

    impl Mgr {
        fn new() -> Self {
            Self {
                m: Manager::new(Duration::from_secs(30)),
                base: Instant::now(),
            }
        }

        /// One pass at second `at`, committed at the next epoch.
        fn pass(&mut self, map: &mut ClusterMap, at: u64) -> Vec<Decision> {
            map.epoch = Epoch(map.epoch.0 + 1);
            self.m
                .pass(map, &[], self.base + Duration::from_secs(at), at)
                .unwrap()
        }
    }

    fn outs(d: &[Decision]) -> Vec<OsdId> {
        d.iter()
            .filter_map(|x| match x {
                Decision::Out { osd, .. } => Some(*osd),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn noout_keeps_a_down_osd_in_and_unsetting_it_marks_it_out_at_once() {
        let mut m = cluster(4);
        let mut g = Mgr::new();
        osd_admin::set_flag(&mut m, OsdFlag::Noout, true);
        m.alive.remove(&OsdId(3));
        g.pass(&mut m, 0);
        assert!(outs(&g.pass(&mut m, 100)).is_empty());
        let rec = &m.osds[&OsdId(3)];
        assert!(rec.in_cluster && rec.down_since_unix.is_some());
        // Degraded, not remapped: its PGs keep it in `up`.
        assert!(m.pgs.values().any(|p| p.up.contains(&OsdId(3))));
        assert!(m.pgs.values().all(|p| !p.acting.contains(&OsdId(3))));
        osd_admin::set_flag(&mut m, OsdFlag::Noout, false);
        assert_eq!(outs(&g.pass(&mut m, 101)), vec![OsdId(3)]);
        assert!(m.pgs.values().all(|p| !p.up.contains(&OsdId(3))));
    }

    #[test]
    fn a_host_in_maintenance_keeps_only_its_own_osds_in() {
        let mut m = cluster(4);
        let mut g = Mgr::new();
        osd_admin::enter_maintenance(&mut m, "h0").unwrap();
        m.alive.remove(&OsdId(0));
        m.alive.remove(&OsdId(2));
        g.pass(&mut m, 0);
        // osd.2 (host h1) goes out; osd.0 (h0, in maintenance) stays in.
        assert_eq!(outs(&g.pass(&mut m, 30)), vec![OsdId(2)]);
        assert!(m.osds[&OsdId(0)].in_cluster);
        osd_admin::exit_maintenance(&mut m, "h0").unwrap();
        assert_eq!(outs(&g.pass(&mut m, 31)), vec![OsdId(0)]);
    }

    #[test]
    fn the_map_out_after_overrides_the_managers_and_takes_effect_live() {
        let mut m = cluster(4);
        let mut g = Mgr::new();
        m.settings.osd.out_after_secs = Some(600);
        m.alive.remove(&OsdId(1));
        g.pass(&mut m, 0);
        assert!(outs(&g.pass(&mut m, 599)).is_empty(), "the manager's 30 s");
        // Lowered while it is down: the timer already ran past it.
        m.settings.osd.out_after_secs = Some(5);
        assert_eq!(outs(&g.pass(&mut m, 600)), vec![OsdId(1)]);
    }

    #[test]
    fn the_min_in_ratio_stops_marking_out_as_ceph_does() {
        // 4 OSDs, 0.75: the first goes out (4/4 in), so does the second
        // (3/4 is not below 0.75), the third stays (2/4 is).
        let mut m = cluster(4);
        let mut g = Mgr::new();
        for i in 0..3 {
            m.alive.remove(&OsdId(i));
        }
        g.pass(&mut m, 0);
        assert_eq!(outs(&g.pass(&mut m, 30)), vec![OsdId(0), OsdId(1)]);
        assert!(m.osds[&OsdId(2)].in_cluster);
        assert!(outs(&g.pass(&mut m, 300)).is_empty());
        // Lowering the ratio lets it go.
        m.settings.osd.min_in_ratio = 0.5;
        assert_eq!(outs(&g.pass(&mut m, 301)), vec![OsdId(2)]);
        assert!(min_in_holds(2, 4, 0.75) && !min_in_holds(3, 4, 0.75));
        assert!(!min_in_holds(0, 0, 0.75));
    }

    #[test]
    fn a_destroyed_osd_is_not_counted_never_held_and_never_marked_in() {
        let mut m = cluster(4);
        let mut g = Mgr::new();
        osd_admin::set_flag(&mut m, OsdFlag::Noout, true);
        m.alive.remove(&OsdId(3));
        g.pass(&mut m, 0);
        osd_admin::destroy(&mut m, OsdId(3), false).unwrap();
        assert_eq!(m.in_counts(), (3, 3));
        // noout holds other OSDs, not a destroyed one: its data is gone.
        assert_eq!(outs(&g.pass(&mut m, 30)), vec![OsdId(3)]);
        // Its old daemon coming back does not bring it in.
        m.alive.insert(OsdId(3));
        let d = g.pass(&mut m, 40);
        assert!(!d.iter().any(|x| matches!(x, Decision::In { .. })), "{d:?}");
        assert!(!m.osds[&OsdId(3)].in_cluster);
    }

    #[test]
    fn flags_and_maintenance_show_in_health_and_status() {
        let mut m = cluster(4);
        assert!(health_checks(&m).is_empty());
        assert!(render_lines(&view(&m)).is_empty());
        osd_admin::set_flag(&mut m, OsdFlag::Norecover, true);
        osd_admin::set_flag(&mut m, OsdFlag::Noout, true);
        osd_admin::enter_maintenance(&mut m, "h1").unwrap();
        let checks = health_checks(&m);
        assert_eq!(checks[0].code, "OSDMAP_FLAGS");
        assert_eq!(checks[0].summary, "noout,norecover flag(s) set");
        assert_eq!(checks[1].code, "HOST_IN_MAINTENANCE");
        assert_eq!(checks[1].summary, "1 host is in maintenance mode");
        assert_eq!(
            checks[1].detail,
            ["host h1: osd.2, osd.3 not marked out while down"]
        );
        let h = crate::health::assess(&m, &[], &crate::health::Context::default());
        assert!(h.checks.iter().any(|c| c.code == "OSDMAP_FLAGS"));
        assert_eq!(
            render_lines(&view(&m)),
            [
                "flags: noout,norecover",
                "maintenance: host h1 (osd.2, osd.3): not marked out while down"
            ]
        );
    }
}
