//! The manager's Prometheus series.
//!
//! Every manager shows `pontoon_mgr_active` (1 on the leader, 0 on a
//! standby) and its process series; only the active one adds the
//! cluster-wide series, so a Prometheus scraping every manager counts
//! each cluster once: health, OSD up/in, capacity per OSD, pool and volume
//! (as `pontoon df` and `pontoon du` compute it), PGs by state, objects
//! degraded, missing and recovered, and the daemons registered.
//!
//! [`render`] is what a `/metrics` route calls; [`router`] is that route
//! as an axum router (`GET /metrics` only, no state, no token), to merge
//! into the manager's HTTP server.

use pontoon_cluster::MapStore;
use pontoon_cluster::daemons::{DaemonRecord, kind, unix_ms};
use pontoon_cluster::space::space_report;
use pontoon_metrics::{Exposition, labels};

use crate::status::summarize_with;

/// `GET /metrics` for the manager named `me`, as an axum router.
pub fn router(store: MapStore, me: String) -> axum::Router {
    pontoon_metrics::server::router(render_fn(store, me))
}

/// [`render`] as a [`pontoon_metrics::Render`] (for a listener of its own).
pub fn render_fn(store: MapStore, me: String) -> pontoon_metrics::Render {
    pontoon_metrics::render_fn(move || {
        let (store, me) = (store.clone(), me.clone());
        async move { render(&store, &me).await }
    })
}

/// One scrape of the manager named `me`: the Prometheus text format.
pub async fn render(store: &MapStore, me: &str) -> String {
    let mut e = Exposition::new();
    let leader = store.leader().await.ok().flatten();
    let active = leader.as_deref() == Some(me);
    e.gauge_u64(
        "pontoon_mgr_active",
        "1 if this manager is the active (leader) one, 0 on a standby; only the active \
         manager shows the cluster-wide series.",
        labels(&[("name", me)]),
        u64::from(active),
    );
    if active && let Err(err) = add_cluster_metrics(&mut e, store, leader).await {
        tracing::warn!("cluster metrics: {err}");
        e.gauge_u64(
            "pontoon_mgr_scrape_error",
            "1 if the cluster-wide series could not be read from etcd in this scrape.",
            Vec::new(),
            1,
        );
    }
    pontoon_metrics::process::add_process_metrics(&mut e);
    e.render()
}

/// The cluster-wide series, from the map, the OSDs' reports and the
/// daemon registry.
async fn add_cluster_metrics(
    e: &mut Exposition,
    store: &MapStore,
    leader: Option<String>,
) -> Result<(), pontoon_cluster::ClusterError> {
    let map = store.load().await?;
    let reports = store.reports().await?;
    let daemons = store.daemons().await?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let ctx = crate::health::context(leader, &daemons, now_ms);
    let status = summarize_with(&map, &reports, &ctx);
    let space = space_report(&map, &reports);
    let cluster = map.name.as_str();

    // Health: the one call site is `summarize_with` (crate::health::assess).
    e.gauge_u64(
        "pontoon_health_status",
        "The cluster's health: 0 HEALTH_OK, 1 HEALTH_WARN, 2 HEALTH_ERR.",
        labels(&[("cluster", cluster)]),
        u64::from(status.health.status.level()),
    );
    for c in &status.health.checks {
        e.gauge_u64(
            "pontoon_health_check",
            "A failing health check (always 1 while it fails), by code and severity.",
            labels(&[
                ("cluster", cluster),
                ("code", c.code),
                ("severity", c.severity.as_str()),
            ]),
            1,
        );
    }
    e.gauge_u64(
        "pontoon_cluster_map_epoch",
        "The cluster map's epoch.",
        labels(&[("cluster", cluster)]),
        map.epoch.0,
    );

    // OSDs and raw capacity.
    let r = &space.raw;
    for (name, help, v) in [
        (
            "pontoon_cluster_size_bytes",
            "Bytes of every OSD's device.",
            r.size_bytes,
        ),
        (
            "pontoon_cluster_avail_bytes",
            "Bytes still free for data over every OSD.",
            r.avail_bytes,
        ),
        (
            "pontoon_cluster_used_bytes",
            "Bytes holding data (every copy).",
            r.used_bytes,
        ),
        (
            "pontoon_cluster_raw_used_bytes",
            "Size minus available: data plus journal and metadata overhead.",
            r.raw_used_bytes,
        ),
        (
            "pontoon_cluster_reclaim_pending_objects",
            "Objects of removed volumes and stray copies waiting to be deleted.",
            r.reclaim_pending_objects,
        ),
        (
            "pontoon_cluster_osds",
            "Registered OSDs.",
            status.osds.total as u64,
        ),
        (
            "pontoon_cluster_osds_up",
            "OSDs holding their liveness lease.",
            status.osds.up as u64,
        ),
        (
            "pontoon_cluster_osds_in",
            "OSDs that receive PGs.",
            status.osds.r#in as u64,
        ),
        ("pontoon_cluster_pools", "Pools.", status.pools as u64),
        ("pontoon_cluster_volumes", "Volumes.", status.volumes as u64),
    ] {
        e.gauge_u64(name, help, labels(&[("cluster", cluster)]), v);
    }
    for o in &space.osds {
        let id = o.id.to_string();
        let l = || labels(&[("cluster", cluster), ("osd", &id)]);
        e.gauge_u64(
            "pontoon_cluster_osd_up",
            "1 if the OSD holds its liveness lease.",
            l(),
            u64::from(o.up),
        );
        e.gauge_u64(
            "pontoon_cluster_osd_in",
            "1 if the OSD receives PGs.",
            l(),
            u64::from(o.r#in),
        );
        for (name, help, v) in [
            (
                "pontoon_cluster_osd_size_bytes",
                "Bytes of the OSD's device.",
                o.device_bytes,
            ),
            (
                "pontoon_cluster_osd_data_bytes",
                "Bytes of the OSD's data areas.",
                o.data_bytes,
            ),
            (
                "pontoon_cluster_osd_used_bytes",
                "Bytes of data the OSD holds, from its last report.",
                o.used_bytes,
            ),
            (
                "pontoon_cluster_osd_avail_bytes",
                "Bytes the OSD has free for data, from its last report.",
                o.free_bytes,
            ),
            (
                "pontoon_cluster_osd_journal_bytes",
                "Bytes of the OSD's journal rings.",
                o.journal_bytes,
            ),
        ] {
            e.gauge_u64(name, help, l(), v);
        }
        e.gauge(
            "pontoon_cluster_osd_used_ratio",
            "Used over data bytes of the OSD.",
            l(),
            o.used_ratio,
        );
        e.gauge_u64(
            "pontoon_cluster_osd_full_state",
            "The OSD against the full ratios: 0 ok, 1 nearfull, 2 backfillfull, 3 full.",
            l(),
            full_level(o.state.to_string().as_str()),
        );
    }

    // Pools and volumes.
    for p in &space.pools {
        let l = || labels(&[("cluster", cluster), ("pool", &p.name)]);
        for (name, help, v) in [
            (
                "pontoon_pool_stored_bytes",
                "Logical bytes the pool stores (one copy).",
                p.stored_bytes,
            ),
            (
                "pontoon_pool_objects",
                "Logical objects of the pool (one copy).",
                p.objects,
            ),
            (
                "pontoon_pool_raw_used_bytes",
                "Bytes the pool uses on the OSDs, every copy.",
                p.raw_used_bytes,
            ),
            (
                "pontoon_pool_max_avail_bytes",
                "Logical bytes that can still be written before the first of the pool's OSDs \
                 reaches the full ratio.",
                p.max_avail_bytes,
            ),
            (
                "pontoon_pool_provisioned_bytes",
                "Provisioned bytes of the pool's volumes.",
                p.provisioned_bytes,
            ),
            (
                "pontoon_pool_replicas",
                "Copies the pool keeps.",
                u64::from(p.size),
            ),
        ] {
            e.gauge_u64(name, help, l(), v);
        }
        e.gauge(
            "pontoon_pool_used_ratio",
            "Stored over stored plus max available.",
            l(),
            p.used_ratio,
        );
    }
    for v in &space.volumes {
        let l = || labels(&[("cluster", cluster), ("pool", &v.pool), ("volume", &v.name)]);
        for (name, help, n) in [
            (
                "pontoon_volume_provisioned_bytes",
                "Size the volume was created or resized to.",
                v.provisioned_bytes,
            ),
            (
                "pontoon_volume_used_bytes",
                "Logical bytes allocated in the volume (written and not discarded).",
                v.used_bytes,
            ),
            (
                "pontoon_volume_raw_used_bytes",
                "Bytes the volume uses on the OSDs, every copy.",
                v.raw_used_bytes,
            ),
            (
                "pontoon_volume_objects",
                "Logical objects of the volume.",
                v.objects,
            ),
        ] {
            e.gauge_u64(name, help, l(), n);
        }
    }

    // PGs and objects.
    for (state, n) in &status.pgs.states {
        e.gauge_u64(
            "pontoon_pgs",
            "PGs by state, as their current primaries report them.",
            labels(&[("cluster", cluster), ("state", state)]),
            *n as u64,
        );
    }
    e.gauge_u64(
        "pontoon_cluster_pgs",
        "PGs of every pool.",
        labels(&[("cluster", cluster)]),
        status.pgs.total as u64,
    );
    let o = &status.objects;
    for (name, help, v) in [
        (
            "pontoon_objects",
            "Objects in the PGs, from their primaries' reports.",
            o.total,
        ),
        (
            "pontoon_objects_degraded",
            "Objects with fewer up-to-date copies than their pool's size.",
            o.degraded,
        ),
        (
            "pontoon_objects_missing",
            "Objects some acting member still lacks (recovery to do).",
            o.missing,
        ),
        (
            "pontoon_objects_recovered",
            "Objects recovered in the PGs' current intervals.",
            o.recovered,
        ),
        (
            "pontoon_objects_scrub_repaired",
            "Objects scrub repaired (since each primary started).",
            o.scrub_repaired,
        ),
        (
            "pontoon_objects_unrecoverable",
            "Objects the last scrubs found no good copy of.",
            o.unrecoverable,
        ),
    ] {
        e.gauge_u64(name, help, labels(&[("cluster", cluster)]), v);
    }

    // The daemon registry.
    add_daemon_metrics(e, cluster, &daemons);
    Ok(())
}

/// `pontoon_daemons{kind}` and each daemon's record age.
fn add_daemon_metrics(e: &mut Exposition, cluster: &str, daemons: &[DaemonRecord]) {
    for k in [kind::OSD, kind::MGR, kind::NBD, kind::NVMF, kind::VHOST] {
        e.gauge_u64(
            "pontoon_daemons",
            "Daemons in the registry, by kind.",
            labels(&[("cluster", cluster), ("kind", k)]),
            daemons.iter().filter(|d| d.kind == k).count() as u64,
        );
    }
    let now = unix_ms();
    for d in daemons {
        e.gauge(
            "pontoon_daemon_record_age_seconds",
            "The manager's clock minus the daemon's clock at its last registry refresh \
             (every 3 s); far outside 0..3 means the clocks disagree.",
            labels(&[("cluster", cluster), ("daemon", &d.id())]),
            (now as f64 - d.unix_ms as f64) / 1000.0,
        );
    }
}

fn full_level(state: &str) -> u64 {
    match state {
        "nearfull" => 1,
        "backfillfull" => 2,
        "full" => 3,
        _ => 0,
    }
}
