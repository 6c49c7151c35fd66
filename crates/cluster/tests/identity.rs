//! The cluster's fsid and the OSD ids handed out to devices, against a
//! real etcd started per test by the testkit.

use pontoon_cluster::testkit::EtcdServer;
use pontoon_cluster::{ClusterError, MapStore};
use pontoon_types::OsdId;

fn addr(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

async fn store(etcd: &EtcdServer, cluster: &str) -> MapStore {
    MapStore::connect(&etcd.endpoints(), cluster)
        .await
        .expect("connect to the test etcd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fsid_per_cluster_and_ids_reserved_until_the_osd_registers() {
    let etcd = EtcdServer::start().expect("start etcd");
    let s = store(&etcd, "ident").await;
    // An empty map has none until asked; concurrent askers agree.
    assert_eq!(s.load().await.unwrap().fsid, None);
    let s2 = store(&etcd, "ident").await;
    let (a, b) = tokio::join!(s.fsid(), s2.fsid());
    let fsid = a.unwrap();
    assert_eq!(b.unwrap(), fsid);
    assert_eq!(s.fsid().await.unwrap(), fsid);
    assert_eq!(s.load().await.unwrap().fsid, Some(fsid));
    // Another cluster name on the same etcd is another cluster.
    let other = store(&etcd, "ident-other").await;
    assert_ne!(other.fsid().await.unwrap(), fsid);

    // Ids handed out to devices before their OSDs run.
    assert_eq!(s.create_osd_id(None).await.unwrap(), OsdId(0));
    assert_eq!(s.create_osd_id(None).await.unwrap(), OsdId(1));
    assert_eq!(s.create_osd_id(Some(OsdId(5))).await.unwrap(), OsdId(5));
    // Asking again for a reserved one is fine; a skipped one is not.
    assert_eq!(s.create_osd_id(Some(OsdId(1))).await.unwrap(), OsdId(1));
    let e = s.create_osd_id(Some(OsdId(3))).await.unwrap_err();
    assert!(matches!(e, ClusterError::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("handed out before"), "{e}");
    let map = s.load().await.unwrap();
    assert_eq!(
        map.created_osds.iter().map(|o| o.0).collect::<Vec<_>>(),
        [0, 1, 5]
    );
    assert_eq!(map.next.osd, 6);

    // Registering consumes the reservation; a given-back id is not reused.
    let weight = pontoon_cluster::weight_for_size(1 << 30);
    let id = s
        .register_osd("h", vec![addr(7000)], weight, 1 << 30, Some(OsdId(0)))
        .await
        .unwrap();
    assert_eq!(id, OsdId(0));
    s.forget_created_osd(OsdId(5)).await.unwrap();
    let map = s.load().await.unwrap();
    assert_eq!(
        map.created_osds.iter().map(|o| o.0).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(map.osds[&OsdId(0)].weight, 1024);
    assert_eq!(s.create_osd_id(None).await.unwrap(), OsdId(6));
    // A registered id may be formatted again (its device replaced).
    assert_eq!(s.create_osd_id(Some(OsdId(0))).await.unwrap(), OsdId(0));

    // The weight follows the device's size...
    let w2 = pontoon_cluster::weight_for_size(2 << 30);
    s.register_osd("h", vec![addr(7001)], w2, 2 << 30, Some(OsdId(0)))
        .await
        .unwrap();
    assert_eq!(s.load().await.unwrap().osds[&OsdId(0)].weight, 2048);
    // ...unless an operator set it.
    s.update::<_, ClusterError>(|m| {
        m.osds.get_mut(&OsdId(0)).expect("osd.0").weight = 7;
        Ok(true)
    })
    .await
    .unwrap();
    let w3 = pontoon_cluster::weight_for_size(3 << 30);
    s.register_osd("h", vec![addr(7002)], w3, 3 << 30, Some(OsdId(0)))
        .await
        .unwrap();
    let rec = &s.load().await.unwrap().osds[&OsdId(0)];
    assert_eq!((rec.weight, rec.device_bytes), (7, 3 << 30));
}
