//! The daemon registry against a real etcd.

use std::time::Duration;

use pontoon_cluster::daemons::{DAEMON_REFRESH, DaemonRecord, kind};
use pontoon_cluster::testkit::EtcdServer;
use pontoon_cluster::{ClusterError, MapStore};
use tokio::time::{Instant, sleep};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_register_refresh_and_leave() {
    let etcd = EtcdServer::start().expect("start etcd");
    let s = MapStore::connect(&etcd.endpoints(), "reg")
        .await
        .expect("connect");
    let epoch = s.epoch().await.unwrap();
    let osd = s
        .register_daemon(DaemonRecord::new(
            kind::OSD,
            "0",
            "h1",
            Some("127.0.0.1:9001".into()),
        ))
        .await
        .unwrap();
    let mgr = s
        .register_daemon(DaemonRecord::new(kind::MGR, "h1-7", "h1", None))
        .await
        .unwrap();
    assert_eq!(osd.id(), "osd.0");
    let list = s.daemons().await.unwrap();
    let ids: Vec<String> = list.iter().map(DaemonRecord::id).collect();
    assert_eq!(ids, ["mgr.h1-7", "osd.0"]);
    assert_eq!(list[1].metrics.as_deref(), Some("127.0.0.1:9001"));
    assert_eq!(list[1].pid, std::process::id());
    // The record's clock is refreshed with each keep-alive; the map's
    // epoch never moves for the registry.
    let first = list[1].unix_ms;
    let deadline = Instant::now() + DAEMON_REFRESH * 3;
    loop {
        let now = s.daemons().await.unwrap();
        if now.iter().any(|d| d.kind == "osd" && d.unix_ms > first) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unix_ms never refreshed: {now:?}"
        );
        sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(s.epoch().await.unwrap(), epoch);
    // Stopping removes the entry at once; dropping soon after.
    osd.stop().await;
    let ids: Vec<String> = s
        .daemons()
        .await
        .unwrap()
        .iter()
        .map(DaemonRecord::id)
        .collect();
    assert_eq!(ids, ["mgr.h1-7"]);
    drop(mgr);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.daemons().await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "a dropped registration stayed");
        sleep(Duration::from_millis(100)).await;
    }
    // Names are checked.
    let bad = s
        .register_daemon(DaemonRecord::new(kind::NBD, "a/b", "h", None))
        .await;
    assert!(
        matches!(bad, Err(ClusterError::InvalidArgument(_))),
        "{bad:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_publishes_the_volumes_it_has_open() {
    use std::sync::{Arc, Mutex};
    let etcd = EtcdServer::start().expect("start etcd");
    let s = MapStore::connect(&etcd.endpoints(), "open")
        .await
        .expect("connect");
    let open = Arc::new(Mutex::new(Vec::<String>::new()));
    let source = open.clone();
    let _reg = s
        .register_daemon_publishing(
            DaemonRecord::new(kind::NBD, "h-1", "h", None),
            Some(Arc::new(move || source.lock().unwrap().clone())),
        )
        .await
        .unwrap();
    assert!(s.daemons().await.unwrap()[0].open_volumes.is_empty());
    let published = |want: Vec<String>| {
        let s = s.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let now = s.daemons().await.unwrap();
                if now[0].open_volumes == want {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "never published {want:?}: {now:?}"
                );
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    *open.lock().unwrap() = vec!["vm1".into(), "vm2@s1".into()];
    published(vec!["vm1".into(), "vm2@s1".into()]).await;
    open.lock().unwrap().clear();
    published(Vec::new()).await;
}
