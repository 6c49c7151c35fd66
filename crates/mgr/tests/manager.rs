//! The manager against a real etcd (started per test by the cluster
//! testkit), with OSD liveness leases standing in for OSD processes.

use std::sync::Arc;
use std::time::Duration;

use pontoon_cluster::testkit::EtcdServer;
use pontoon_cluster::{ClusterMap, FailureDomain, MapStore, OsdLease};
use pontoon_mgr::MgrConfig;
use pontoon_types::OsdId;
use tokio::sync::watch;
use tokio::time::timeout;

/// Waits (bounded) until the watched map satisfies `pred`.
async fn wait_for(
    rx: &mut watch::Receiver<Arc<ClusterMap>>,
    what: &str,
    pred: impl Fn(&ClusterMap) -> bool,
) -> Arc<ClusterMap> {
    let within = Duration::from_secs(20);
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
            "the map did not reach {what} within {within:?}: {:?}",
            rx.borrow()
        ),
    }
}

fn config(name: &str) -> MgrConfig {
    let mut cfg = MgrConfig::new(name);
    cfg.out_after = Duration::from_secs(2);
    cfg.lease_ttl_secs = 2;
    cfg.interval = Duration::from_millis(200);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_osd_goes_down_then_out_and_comes_back_in_and_a_standby_manager_takes_over() {
    let etcd = EtcdServer::start().expect("start etcd for the test (scripts/deps.sh installs it)");
    let store = MapStore::connect(&etcd.endpoints(), "mgr")
        .await
        .expect("connect");
    let mut leases = Vec::new();
    for i in 0..3u16 {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 7000 + i));
        let id = store
            .register_osd("h", vec![addr], 1024, 1 << 30, Some(OsdId(u32::from(i))))
            .await
            .expect("register");
        leases.push(Some(OsdLease::start(&store, id, 2).await.expect("lease")));
    }
    store
        .create_pool("p", 3, 2, 8, FailureDomain::Osd)
        .await
        .expect("create pool");

    let (stop_a, rx_a) = watch::channel(false);
    let a = tokio::spawn(pontoon_mgr::run(store.clone(), config("a"), rx_a));
    let (stop_b, rx_b) = watch::channel(false);
    let b = tokio::spawn(pontoon_mgr::run(store.clone(), config("b"), rx_b));
    let mut maps = store.watch().await.expect("watch");
    let full = |m: &ClusterMap| m.pgs.len() == 8 && m.pgs.values().all(|p| p.acting.len() == 3);
    wait_for(&mut maps, "full acting sets", full).await;
    // create_pool placed the PGs itself: a manager may not have won the
    // election yet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let first = loop {
        if let Some(l) = store.leader().await.expect("leader") {
            break l;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no manager leads after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // osd.1 stops (revokes its lease): down at once, out after 2 s.
    let lease = leases[1].take().expect("lease of osd.1");
    lease.stop().await.expect("revoke");
    let m = wait_for(&mut maps, "osd.1 down", |m| {
        m.osds[&OsdId(1)].down_since_unix.is_some()
            && m.pgs
                .values()
                .all(|p| p.acting.len() == 2 && p.up.len() == 3)
    })
    .await;
    assert!(m.osds[&OsdId(1)].in_cluster, "down is not out yet");
    let m = wait_for(&mut maps, "osd.1 out", |m| !m.osds[&OsdId(1)].in_cluster).await;
    assert!(m.pgs.values().all(|p| !p.up.contains(&OsdId(1))));
    assert!(
        m.pgs.values().any(|p| !p.past_intervals.is_empty()),
        "nothing reported clean, so history is kept"
    );

    // The leader steps down: the standby takes over and keeps deciding.
    let (stop_first, task_first) = if first == "a" {
        (&stop_a, a)
    } else {
        (&stop_b, b)
    };
    let other = if first == "a" { "b" } else { "a" };
    stop_first.send(true).expect("stop the leader");
    timeout(Duration::from_secs(10), task_first)
        .await
        .expect("the leader stops in time")
        .expect("the leader task");
    timeout(Duration::from_secs(10), async {
        while store.leader().await.ok().flatten().as_deref() != Some(other) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the standby becomes leader");

    // osd.1 comes back: up, in again, full acting sets.
    leases[1] = Some(OsdLease::start(&store, OsdId(1), 2).await.expect("lease"));
    let m = wait_for(&mut maps, "osd.1 back in", |m| {
        let o = &m.osds[&OsdId(1)];
        o.in_cluster && o.down_since_unix.is_none() && full(m)
    })
    .await;
    assert!(m.is_alive(OsdId(1)));
    let _ = stop_a.send(true);
    let _ = stop_b.send(true);
}
