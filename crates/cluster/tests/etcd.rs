//! The cluster map against a real etcd, started per test by the testkit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pontoon_cluster::testkit::EtcdServer;
use pontoon_cluster::{
    ClusterError, ClusterMap, FailureDomain, Leadership, MapStore, OsdLease, OsdReport, PgReport,
    PgState,
};
use pontoon_types::{Epoch, OsdId, PgId};
use tokio::sync::watch;
use tokio::time::{sleep, timeout};

fn etcd() -> EtcdServer {
    match EtcdServer::start() {
        Ok(s) => s,
        Err(e) => panic!("cannot start etcd for the test: {e}"),
    }
}

async fn store(etcd: &EtcdServer, cluster: &str) -> MapStore {
    MapStore::connect(&etcd.endpoints(), cluster)
        .await
        .expect("connect to the test etcd")
}

fn addr(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

/// Waits (bounded) until the watched map satisfies `pred`.
async fn wait_for(
    rx: &mut watch::Receiver<Arc<ClusterMap>>,
    within: Duration,
    pred: impl Fn(&ClusterMap) -> bool,
) -> Arc<ClusterMap> {
    let res = timeout(within, async {
        loop {
            let map = rx.borrow_and_update().clone();
            if pred(&map) {
                return map;
            }
            rx.changed().await.expect("watch task ended");
        }
    })
    .await;
    match res {
        Ok(map) => map,
        Err(_) => panic!(
            "the watched map did not reach the expected state within {within:?}: {:?}",
            rx.borrow()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_and_volumes_lifecycle_with_clear_errors() {
    let etcd = etcd();
    let s = store(&etcd, "lifecycle").await;
    let empty = s.load().await.unwrap();
    assert_eq!(empty.epoch, Epoch(0));
    assert!(empty.pools.is_empty());

    let pool = s
        .create_pool("rbd", 3, 2, 32, FailureDomain::Host)
        .await
        .unwrap();
    assert_eq!((pool.size, pool.min_size, pool.pgs), (3, 2, 32));
    let map = s.load().await.unwrap();
    assert_eq!(map.epoch, Epoch(1));
    assert_eq!(map.pgs.len(), 32, "PG records are created with the pool");
    assert!(map.pgs.values().all(|r| r.up.is_empty()), "no OSDs yet");

    let err = s
        .create_pool("rbd", 3, 2, 32, FailureDomain::Host)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::AlreadyExists { kind: "pool", .. }),
        "{err}"
    );
    assert_eq!(err.to_string(), "pool rbd already exists");
    for (name, size, min, pgs) in [
        ("bad/name", 3, 2, 8),
        ("", 3, 2, 8),
        ("p", 0, 0, 8),
        ("p", 3, 4, 8),
        ("p", 3, 0, 8),
        ("p", 3, 2, 0),
        ("p", 3, 2, 70_000),
        ("p", 33, 2, 8),
    ] {
        let err = s
            .create_pool(name, size, min, pgs, FailureDomain::Osd)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ClusterError::InvalidArgument(_)),
            "{name} {size} {min} {pgs}: {err}"
        );
    }

    // Too big for one etcd transaction at etcd's default request size.
    let err = s
        .create_pool("huge", 3, 2, 65_536, FailureDomain::Osd)
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("--max-request-bytes"), "{err}");
    assert!(s.load().await.unwrap().pool_by_name("huge").is_none());

    let vol = s.create_volume("vm1", "rbd", 1 << 30).await.unwrap();
    assert_eq!(vol.pool, pool.id);
    assert_eq!(vol.object_size, 4 << 20);
    let err = s.create_volume("vm1", "rbd", 1 << 30).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::AlreadyExists { kind: "volume", .. }),
        "{err}"
    );
    let err = s.create_volume("vm2", "nope", 1 << 30).await.unwrap_err();
    assert_eq!(err.to_string(), "pool nope not found");
    for size in [0, 1000, (1 << 20) + 1] {
        let err = s.create_volume("vm2", "rbd", size).await.unwrap_err();
        assert!(
            matches!(err, ClusterError::InvalidArgument(_)),
            "{size}: {err}"
        );
    }
    let err = s.remove_pool("rbd").await.unwrap_err();
    assert!(matches!(err, ClusterError::InUse { .. }), "{err}");
    assert!(err.to_string().contains("vm1"), "{err}");

    let grown = s.resize_volume("vm1", 2 << 30, false).await.unwrap();
    assert_eq!(grown.size_bytes, 2 << 30);
    let err = s.resize_volume("vm1", 1 << 30, false).await.unwrap_err();
    assert!(matches!(err, ClusterError::InvalidArgument(_)), "{err}");
    let shrunk = s.resize_volume("vm1", 1 << 30, true).await.unwrap();
    assert_eq!(shrunk.size_bytes, 1 << 30);
    let err = s.resize_volume("ghost", 1 << 30, true).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::NotFound { kind: "volume", .. }),
        "{err}"
    );

    let removed = s.remove_volume("vm1").await.unwrap();
    assert_eq!(removed.id, vol.id);
    let err = s.remove_volume("vm1").await.unwrap_err();
    assert!(matches!(err, ClusterError::NotFound { .. }), "{err}");
    // Ids are never reused.
    let again = s.create_volume("vm1", "rbd", 4096).await.unwrap();
    assert!(again.id > vol.id);
    s.remove_volume("vm1").await.unwrap();

    s.remove_pool("rbd").await.unwrap();
    let map = s.load().await.unwrap();
    assert!(map.pools.is_empty() && map.pgs.is_empty() && map.volumes.is_empty());
    let err = s.remove_pool("rbd").await.unwrap_err();
    assert!(
        matches!(err, ClusterError::NotFound { kind: "pool", .. }),
        "{err}"
    );

    // Another cluster in the same etcd sees none of it.
    let other = store(&etcd, "other").await;
    assert_eq!(other.load().await.unwrap().epoch, Epoch(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osds_get_pgs_and_reregistering_keeps_out_state() {
    let etcd = etcd();
    let s = store(&etcd, "osds").await;
    let mut ids = Vec::new();
    for i in 0..4u16 {
        let id = s
            .register_osd(
                &format!("host{i}"),
                vec![addr(7000 + 10 * i), addr(7001 + 10 * i)],
                1024,
                1 << 30,
                None,
            )
            .await
            .unwrap();
        ids.push(id);
    }
    assert_eq!(ids, vec![OsdId(0), OsdId(1), OsdId(2), OsdId(3)]);
    let err = s.register_osd("h", vec![], 1, 1, None).await.unwrap_err();
    assert!(matches!(err, ClusterError::InvalidArgument(_)), "{err}");
    s.create_pool("rbd", 3, 2, 16, FailureDomain::Host)
        .await
        .unwrap();

    let map = s.load().await.unwrap();
    for rec in map.pgs.values() {
        assert_eq!(rec.up.len(), 3);
        assert!(rec.acting.is_empty(), "nobody holds a liveness lease yet");
    }
    // Each new OSD got a key of its own, limited to the OSD profile.
    let keys: Vec<_> = ids
        .iter()
        .map(|id| {
            let rec = &map.auth[&pontoon_cluster::auth::EntityName::osd(id.0)];
            assert_eq!(rec.caps.to_string(), "allow profile osd");
            rec.keys.clone()
        })
        .collect();
    assert_ne!(keys[0], keys[1]);
    let mut leases = Vec::new();
    for &id in &ids {
        leases.push(OsdLease::start(&s, id, 10).await.unwrap());
    }
    let err = OsdLease::start(&s, OsdId(99), 10).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::NotFound { kind: "osd", .. }),
        "{err}"
    );
    let before = s.load().await.unwrap().epoch;
    let updated = s.recompute_pgs().await.unwrap();
    assert!(updated.committed);
    assert_eq!(updated.map.epoch, Epoch(before.0 + 1));
    let map = s.load().await.unwrap();
    assert_eq!(map, updated.map);
    for rec in map.pgs.values() {
        assert_eq!(rec.acting, rec.up);
        assert_eq!(rec.interval, map.epoch);
        let primary = map.primary(rec.pg).unwrap();
        let shard = map.addr_of(primary, rec.pg).unwrap();
        assert_eq!(shard, map.osds[&primary].addrs[rec.pg.index as usize % 2]);
    }
    // Nothing changed: no new epoch.
    assert!(!s.recompute_pgs().await.unwrap().committed);

    s.set_osd_in(OsdId(0), false).await.unwrap();
    let map = s.load().await.unwrap();
    assert!(map.pgs.values().all(|r| !r.up.contains(&OsdId(0))));
    assert!(map.pgs.values().all(|r| r.up.len() == 3));
    let err = s.set_osd_in(OsdId(42), false).await.unwrap_err();
    assert_eq!(err.to_string(), "osd osd.42 not found");

    // The OSD restarts with new ports: addresses change, "out" stays.
    let id = s
        .register_osd("host0", vec![addr(9000)], 1024, 1 << 30, Some(OsdId(0)))
        .await
        .unwrap();
    assert_eq!(id, OsdId(0));
    let map = s.load().await.unwrap();
    assert_eq!(map.osds[&OsdId(0)].addrs, vec![addr(9000)]);
    assert!(!map.osds[&OsdId(0)].in_cluster);
    // A requested id that is free is honoured; counters move past it.
    let id = s
        .register_osd("host9", vec![addr(9100)], 1024, 1 << 30, Some(OsdId(10)))
        .await
        .unwrap();
    assert_eq!(id, OsdId(10));
    let id = s
        .register_osd("host9", vec![addr(9101)], 1024, 1 << 30, None)
        .await
        .unwrap();
    assert_eq!(id, OsdId(11));

    // Reports are stored beside the map, not in it.
    let map = s.load().await.unwrap();
    let report = OsdReport {
        osd: OsdId(1),
        epoch: map.epoch,
        pgs: vec![PgReport {
            pg: PgId::new(0, 3),
            interval: map.pgs[&PgId::new(0, 3)].interval,
            state: PgState::ActiveClean,
            objects: 5,
            degraded_objects: 0,
            missing_objects: 0,
            recovered_objects: 0,
            note: None,
            scrub: Default::default(),
        }],
        used_bytes: 1 << 20,
        capacity_bytes: 1 << 30,
        unreachable: vec![OsdId(2)],
        ..Default::default()
    };
    s.put_report(&report).await.unwrap();
    assert_eq!(s.reports().await.unwrap(), vec![report]);
    assert_eq!(s.load().await.unwrap().epoch, map.epoch);

    // Updates cannot fake liveness.
    let err = s
        .update::<_, ClusterError>(|m| {
            m.alive.insert(OsdId(11));
            Ok(true)
        })
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::InvalidArgument(_)), "{err}");

    for l in leases {
        l.stop().await.unwrap();
    }
    assert!(
        s.load().await.unwrap().alive.is_empty(),
        "stop revokes at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_from_two_stores_lose_nothing() {
    let etcd = etcd();
    let a = store(&etcd, "race").await;
    let b = store(&etcd, "race").await;
    a.create_pool("p", 1, 1, 1, FailureDomain::Osd)
        .await
        .unwrap();
    let vol = a.create_volume("v", "p", 4096).await.unwrap();
    let start_epoch = a.load().await.unwrap().epoch;

    const N: u64 = 50;
    let bump = |s: MapStore| async move {
        for _ in 0..N {
            s.update::<_, ClusterError>(|m| {
                let Some(v) = m.volumes.get_mut(&vol.id) else {
                    return Err(ClusterError::InvalidArgument("volume vanished".into()));
                };
                v.size_bytes += 4096;
                Ok(true)
            })
            .await
            .expect("update");
        }
    };
    let started = Instant::now();
    let (ra, rb) = tokio::join!(tokio::spawn(bump(a.clone())), tokio::spawn(bump(b.clone())));
    ra.unwrap();
    rb.unwrap();
    let map = b.load().await.unwrap();
    assert_eq!(map.volumes[&vol.id].size_bytes, 4096 * (1 + 2 * N));
    assert_eq!(
        map.epoch,
        Epoch(start_epoch.0 + 2 * N),
        "one epoch per update"
    );
    eprintln!("2 x {N} contended updates took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_delivers_changes_promptly_and_ignores_reports() {
    let etcd = etcd();
    let s = store(&etcd, "watched").await;
    let writer = store(&etcd, "watched").await;
    let mut rx = s.watch().await.unwrap();
    assert_eq!(rx.borrow().epoch, Epoch(0));

    let t = Instant::now();
    writer
        .create_pool("fast", 2, 1, 8, FailureDomain::Osd)
        .await
        .unwrap();
    let map = wait_for(&mut rx, Duration::from_secs(2), |m| {
        m.pool_by_name("fast").is_some()
    })
    .await;
    assert_eq!(map.pgs.len(), 8);
    eprintln!("watch delivered a pool creation in {:?}", t.elapsed());

    // A burst of changes ends in the final state.
    for i in 0..10 {
        writer
            .create_volume(&format!("v{i}"), "fast", 4096)
            .await
            .unwrap();
    }
    let map = wait_for(&mut rx, Duration::from_secs(2), |m| m.volumes.len() == 10).await;
    assert_eq!(map.epoch, Epoch(11));

    // Liveness changes reach watchers even though they bump no epoch.
    let osd = writer
        .register_osd("h", vec![addr(7000)], 1, 1, None)
        .await
        .unwrap();
    let lease = OsdLease::start(&writer, osd, 10).await.unwrap();
    wait_for(&mut rx, Duration::from_secs(2), |m| m.is_alive(osd)).await;
    lease.stop().await.unwrap();
    wait_for(&mut rx, Duration::from_secs(2), |m| !m.is_alive(osd)).await;

    // Reports are not map changes.
    rx.borrow_and_update();
    writer
        .put_report(&OsdReport {
            osd,
            epoch: Epoch(1),
            pgs: vec![],
            used_bytes: 0,
            capacity_bytes: 0,
            unreachable: Vec::new(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        timeout(Duration::from_millis(300), rx.changed())
            .await
            .is_err(),
        "a report woke map watchers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osd_lease_expiry_fences_the_osd_before_etcd_drops_it() {
    let etcd = etcd();
    let s = store(&etcd, "leases").await;
    let osd = s
        .register_osd("h", vec![addr(7000)], 1, 1, None)
        .await
        .unwrap();
    let mut rx = s.watch().await.unwrap();
    let lease = OsdLease::start(&s, osd, 2).await.unwrap();
    wait_for(&mut rx, Duration::from_secs(2), |m| m.is_alive(osd)).await;

    // Keepalives keep it alive well past the TTL.
    sleep(Duration::from_secs(3)).await;
    assert!(lease.is_valid());
    assert!(s.load().await.unwrap().is_alive(osd));

    // Hang: no more keepalives.
    lease.pause_keepalive();
    let paused = Instant::now();
    while lease.is_valid() {
        assert!(
            paused.elapsed() < Duration::from_secs(3),
            "lease stayed valid"
        );
        sleep(Duration::from_millis(20)).await;
    }
    let fenced = paused.elapsed();
    assert!(
        s.load().await.unwrap().is_alive(osd),
        "etcd dropped the lease before the OSD fenced itself"
    );
    wait_for(&mut rx, Duration::from_secs(5), |m| !m.is_alive(osd)).await;
    let dropped = paused.elapsed();
    assert!(fenced < dropped);
    assert!(!lease.is_valid());
    eprintln!("ttl 2 s: fenced after {fenced:?}, etcd dropped alive/ after {dropped:?}");

    // A lost lease stays lost even if keepalives resume.
    lease.resume_keepalive();
    sleep(Duration::from_secs(1)).await;
    assert!(!lease.is_valid());
    assert!(!s.load().await.unwrap().is_alive(osd));
}

/// Waits until a renewal of `lease` is nearly due (the worst moment for an
/// outage to begin), then runs `outage` on a blocking thread while watching
/// the lease. Returns how long the outage took and the least validity the
/// lease had left; panics if it lapsed.
async fn ride_out(
    lease: &OsdLease,
    ttl: Duration,
    what: &str,
    outage: impl FnOnce() + Send,
) -> Duration {
    let mut before = lease.remaining();
    loop {
        sleep(Duration::from_millis(5)).await;
        let now = lease.remaining();
        if now > before + Duration::from_millis(50) {
            break;
        }
        before = now;
    }
    sleep(pontoon_cluster::lease::renew_period(ttl) - Duration::from_millis(60)).await;
    let done = std::sync::atomic::AtomicBool::new(false);
    let start = Instant::now();
    let watch = async {
        let (mut least, mut lapsed) = (Duration::MAX, false);
        // Until a renewal after the outage is seen (bounded).
        while start.elapsed() < Duration::from_secs(15) {
            let r = lease.remaining();
            lapsed |= !lease.is_valid();
            least = least.min(r);
            if done.load(std::sync::atomic::Ordering::Acquire) && r > least + Duration::from_secs(1)
            {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        (least, lapsed)
    };
    // The outage on a thread of its own, the watch on this one: the
    // lease's keepalive task runs on the runtime's other worker.
    let (took, (least, lapsed)) = tokio::task::block_in_place(|| {
        std::thread::scope(|sc| {
            let outage = sc.spawn(|| {
                outage();
                done.store(true, std::sync::atomic::Ordering::Release);
                start.elapsed()
            });
            let watched = tokio::runtime::Handle::current().block_on(watch);
            (outage.join().expect("outage thread"), watched)
        })
    });
    eprintln!("{what}: {took:?}, least validity left {least:?}");
    assert!(
        !lapsed,
        "the lease lapsed in the {what} ({took:?}); least validity left {least:?}"
    );
    assert!(
        lease.remaining() > least,
        "the lease was not renewed after the {what}"
    );
    took
}

/// An etcd outage shorter than a lease's outage tolerance never lapses the
/// holder's validity, even one that begins just before a renewal was due:
/// a stall (etcd frozen, connections hanging) of 4.8 s, and a crash with a
/// restart, after which renewals go through at once on a fresh connection
/// instead of waiting in the shared channel's reconnect back-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_rides_out_an_etcd_outage_shorter_than_its_tolerance() {
    let mut etcd = etcd();
    let s = store(&etcd, "outage").await;
    let osd = s
        .register_osd("h", vec![addr(7001)], 1, 1, None)
        .await
        .unwrap();
    let ttl = Duration::from_secs(7);
    let tolerance = pontoon_cluster::lease::outage_tolerance(ttl);
    assert!(tolerance > Duration::from_secs(5), "{tolerance:?}");
    let lease = OsdLease::start(&s, osd, ttl.as_secs()).await.unwrap();
    let pid = etcd.pid() as i32;
    ride_out(&lease, ttl, "etcd stall", || {
        // SAFETY: signalling the test's own etcd child.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(4_800));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    })
    .await;
    ride_out(&lease, ttl, "etcd crash and restart", || {
        etcd.restart_after(Duration::from_secs(3))
            .expect("restart etcd");
    })
    .await;
    assert!(s.load().await.unwrap().is_alive(osd));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_manager_takes_over_when_the_leader_resigns_or_hangs() {
    let etcd = etcd();
    let s = store(&etcd, "mgr").await;
    assert_eq!(s.leader().await.unwrap(), None);
    let a = Leadership::campaign(&s, "mgr-a", 2).await.unwrap();
    assert!(a.is_leader());
    assert_eq!(s.leader().await.unwrap().as_deref(), Some("mgr-a"));

    let sb = s.clone();
    let b = tokio::spawn(async move { Leadership::campaign(&sb, "mgr-b", 2).await });
    sleep(Duration::from_millis(2500)).await;
    assert!(!b.is_finished(), "b became leader while a held the key");
    // The leader's updates go through.
    s.update_as_leader::<_, ClusterError>(&a, |m| {
        m.next.volume += 1;
        Ok(true)
    })
    .await
    .unwrap();

    let t = Instant::now();
    a.resign().await.unwrap();
    let b = timeout(Duration::from_secs(3), b)
        .await
        .expect("b took over within 3 s")
        .unwrap()
        .unwrap();
    eprintln!("standby took over {:?} after resignation", t.elapsed());
    assert!(b.is_leader());
    assert_eq!(s.leader().await.unwrap().as_deref(), Some("mgr-b"));

    // b hangs: c takes over once b's lease expires, and b knew first.
    let sc = s.clone();
    let c = tokio::spawn(async move { Leadership::campaign(&sc, "mgr-c", 2).await });
    sleep(Duration::from_millis(300)).await;
    b.pause_keepalive();
    let c = timeout(Duration::from_secs(8), c)
        .await
        .expect("c took over within 8 s")
        .unwrap()
        .unwrap();
    assert!(!b.is_leader(), "the hung leader still believed it led");
    assert!(c.is_leader());
    assert_eq!(s.leader().await.unwrap().as_deref(), Some("mgr-c"));

    // A deposed leader cannot write.
    let bump = |m: &mut ClusterMap| -> Result<bool, ClusterError> {
        m.next.volume += 1;
        Ok(true)
    };
    let err = s.update_as_leader(&b, bump).await.unwrap_err();
    assert!(matches!(err, ClusterError::NotLeader), "{err}");
    s.update_as_leader(&c, bump).await.unwrap();
    drop(b);

    // etcd itself fences a leader whose key is gone, whatever its clock says.
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    raw.delete("/pontoon/mgr/mgr/leader", None).await.unwrap();
    assert!(c.is_leader(), "c's lease is still kept alive");
    let err = s.update_as_leader(&c, bump).await.unwrap_err();
    assert!(matches!(err, ClusterError::NotLeader), "{err}");
    c.resign().await.unwrap();
    assert_eq!(s.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_etcd_is_reported_at_connect() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let err = MapStore::connect(&[format!("127.0.0.1:{port}")], "c")
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Unavailable(_)), "{err}");
    assert!(t.elapsed() < Duration::from_secs(8));
    let err = MapStore::connect(&[format!("127.0.0.1:{port}")], "bad name")
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::InvalidArgument(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_record_is_reported_not_used() {
    let etcd = etcd();
    let s = store(&etcd, "corrupt").await;
    s.create_pool("p", 1, 1, 1, FailureDomain::Osd)
        .await
        .unwrap();
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    raw.put("/pontoon/corrupt/pools/7", "{not json", None)
        .await
        .unwrap();
    let err = s.load().await.unwrap_err();
    assert!(
        matches!(err, ClusterError::Corrupt { ref key, .. } if key == "pools/7"),
        "{err}"
    );
    let err = s.create_volume("v", "p", 4096).await.unwrap_err();
    assert!(matches!(err, ClusterError::Corrupt { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_updates_recover_after_etcd_restarts() {
    let mut etcd = etcd();
    let s = store(&etcd, "restart").await;
    s.create_pool("before", 1, 1, 4, FailureDomain::Osd)
        .await
        .unwrap();
    let mut rx = s.watch().await.unwrap();
    let t = Instant::now();
    tokio::task::block_in_place(|| etcd.restart()).expect("restart etcd");
    // The same store reconnects by itself; the watcher re-establishes its watch.
    let res = timeout(Duration::from_secs(10), async {
        loop {
            match s.create_pool("after", 1, 1, 4, FailureDomain::Osd).await {
                Ok(_) => return,
                Err(e) => {
                    eprintln!("while etcd restarts: {e}");
                    sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
    .await;
    assert!(res.is_ok(), "updates did not resume after the restart");
    let map = wait_for(&mut rx, Duration::from_secs(10), |m| {
        m.pool_by_name("after").is_some()
    })
    .await;
    assert!(map.pool_by_name("before").is_some());
    eprintln!("watch caught up {:?} after the restart began", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvmf_subsystems_namespaces_and_hosts_with_clear_errors() {
    let etcd = etcd();
    let s = store(&etcd, "nvmf").await;
    let mut rx = s.watch().await.unwrap();
    s.create_pool("p", 1, 1, 4, FailureDomain::Osd)
        .await
        .unwrap();
    s.create_volume("a", "p", 1 << 20).await.unwrap();
    s.create_volume("b", "p", 1 << 20).await.unwrap();
    let nqn = "nqn.2024-01.io.pontoon:db/one";

    let rec = s.nvmf_add_subsystem(nqn).await.unwrap();
    assert!(rec.namespaces.is_empty() && rec.hosts.is_empty());
    let err = s.nvmf_add_subsystem(nqn).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::AlreadyExists {
                kind: "subsystem",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.to_string(), format!("subsystem {nqn} already exists"));
    for bad in [
        String::new(),
        "nqn.a b".to_string(),
        format!("nqn.{}", "x".repeat(220)),
        "nqn.2014-08.org.nvmexpress.discovery".to_string(),
    ] {
        let err = s.nvmf_add_subsystem(&bad).await.unwrap_err();
        assert!(
            matches!(err, ClusterError::InvalidArgument(_)),
            "{bad:?}: {err}"
        );
    }
    // One key per subsystem, its NQN escaped into one path segment.
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let got = raw
        .get("/pontoon/nvmf/nvmf/nqn.2024-01.io.pontoon:db%2Fone", None)
        .await
        .unwrap();
    assert_eq!(
        got.kvs().len(),
        1,
        "the record is stored under its escaped key"
    );

    // Namespaces: the lowest free id by default, a chosen one on request.
    assert_eq!(s.nvmf_add_namespace(nqn, "a", None).await.unwrap(), 1);
    assert_eq!(s.nvmf_add_namespace(nqn, "b", Some(7)).await.unwrap(), 7);
    let err = s.nvmf_add_namespace(nqn, "a", None).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::InUse { kind: "volume", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("already namespace 1"), "{err}");
    let err = s.nvmf_add_namespace(nqn, "ghost", None).await.unwrap_err();
    assert_eq!(err.to_string(), "volume ghost not found");
    let err = s
        .nvmf_add_namespace("nqn.nope", "a", None)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "subsystem nqn.nope not found");
    for id in [0, u32::MAX] {
        let err = s.nvmf_add_namespace(nqn, "a", Some(id)).await.unwrap_err();
        assert!(
            matches!(err, ClusterError::InvalidArgument(_)),
            "{id}: {err}"
        );
    }
    // The same volume may be exported by a second subsystem.
    s.nvmf_add_subsystem("nqn.2024-01.io.pontoon:two")
        .await
        .unwrap();
    let nsid = s
        .nvmf_add_namespace("nqn.2024-01.io.pontoon:two", "b", Some(1))
        .await
        .unwrap();
    assert_eq!(nsid, 1);
    let err = s
        .nvmf_add_namespace("nqn.2024-01.io.pontoon:two", "a", Some(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::AlreadyExists {
                kind: "namespace",
                ..
            }
        ),
        "{err}"
    );

    // Hosts.
    let host = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    s.nvmf_allow_host(nqn, host).await.unwrap();
    let err = s.nvmf_allow_host(nqn, host).await.unwrap_err();
    assert!(matches!(err, ClusterError::AlreadyExists { .. }), "{err}");
    let err = s.nvmf_allow_host(nqn, "").await.unwrap_err();
    assert!(matches!(err, ClusterError::InvalidArgument(_)), "{err}");
    let err = s.nvmf_allow_host("nqn.nope", host).await.unwrap_err();
    assert_eq!(err.to_string(), "subsystem nqn.nope not found");

    let map = wait_for(&mut rx, Duration::from_secs(2), |m| {
        m.nvmf.get(nqn).is_some_and(|r| r.hosts.contains(host))
    })
    .await;
    let rec = &map.nvmf[nqn];
    assert_eq!(
        rec.namespaces.keys().copied().collect::<Vec<_>>(),
        vec![1, 7]
    );
    assert_eq!(rec.namespaces[&1].volume, "a");
    let uuids: Vec<[u8; 16]> = rec
        .namespaces
        .values()
        .map(|ns| ns.uuid_bytes().expect("a well-formed uuid"))
        .collect();
    assert_ne!(uuids[0], uuids[1], "every namespace gets its own UUID");
    assert_eq!(uuids[0][6] >> 4, 4, "a version 4 UUID");
    assert_eq!(map.nvmf_exports_of("b").len(), 2);

    // A volume exported as a namespace cannot be removed.
    let err = s.remove_volume("a").await.unwrap_err();
    assert!(
        matches!(err, ClusterError::InUse { kind: "volume", .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("namespace 1 of NVMe-oF subsystem {nqn}")),
        "{err}"
    );
    let err = s.remove_volume("b").await.unwrap_err();
    assert!(err.to_string().contains("(and 1 more)"), "{err}");
    assert!(s.load().await.unwrap().volume_by_name("a").is_some());

    let ns = s.nvmf_remove_namespace(nqn, 1).await.unwrap();
    assert_eq!(ns.volume, "a");
    let err = s.nvmf_remove_namespace(nqn, 1).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("namespace 1 of subsystem {nqn} not found")
    );
    s.remove_volume("a").await.unwrap();
    // The freed id is handed out again.
    s.create_volume("c", "p", 1 << 20).await.unwrap();
    assert_eq!(s.nvmf_add_namespace(nqn, "c", None).await.unwrap(), 1);

    s.nvmf_disallow_host(nqn, host).await.unwrap();
    let err = s.nvmf_disallow_host(nqn, host).await.unwrap_err();
    assert!(
        matches!(err, ClusterError::NotFound { kind: "host", .. }),
        "{err}"
    );

    let removed = s.nvmf_remove_subsystem(nqn).await.unwrap();
    assert_eq!(removed.namespaces.len(), 2);
    let err = s.nvmf_remove_subsystem(nqn).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::NotFound {
                kind: "subsystem",
                ..
            }
        ),
        "{err}"
    );
    let map = wait_for(&mut rx, Duration::from_secs(2), |m| {
        !m.nvmf.contains_key(nqn)
    })
    .await;
    assert_eq!(map.nvmf.len(), 1);
    // The volumes it exported are free to go now (b is still in "two").
    s.remove_volume("c").await.unwrap();
    assert!(s.remove_volume("b").await.is_err());
}
