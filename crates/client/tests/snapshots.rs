//! Snapshots through the client library against three real OSD shards
//! over TCP, maps pushed by hand: a client that learns of a snapshot late
//! is refused (stale snap context), waits for the new map and resends, so
//! the snapshot keeps what the volume held; `VOLUME@SNAPSHOT` opens
//! read-only and reads it; a removed snapshot stops reading.

use std::time::{Duration, Instant};

use pontoon_client::{Client, ClientError, MapFeed};
use pontoon_cluster::{
    ClusterMap, FailureDomain, OsdRecord, PoolRecord, SnapshotRecord, VolumeRecord, recompute,
};
use pontoon_osd::testkit::TestOsd;
use pontoon_osd::view::shard_map;
use pontoon_types::{Epoch, OsdId, PoolId, VolumeId};
use pontoon_volume::BlockVolume;

const MIB: u64 = 1 << 20;
const VOL_SIZE: u64 = 16 * MIB;
const PGS: u32 = 8;

fn cluster(osds: &[&TestOsd]) -> ClusterMap {
    let mut m = ClusterMap::new("t");
    m.epoch = Epoch(1);
    for (i, o) in osds.iter().enumerate() {
        let id = OsdId(i as u32);
        m.osds.insert(
            id,
            OsdRecord {
                id,
                host: format!("h{i}"),
                addrs: vec![o.addr],
                weight: 256,
                device_bytes: 256 * MIB,
                in_cluster: true,
                down_since_unix: None,
                reported_down: false,
                full: Default::default(),
            },
        );
        m.alive.insert(id);
    }
    m.pools.insert(
        PoolId(1),
        PoolRecord {
            id: PoolId(1),
            name: "p".into(),
            size: 3,
            min_size: 2,
            pgs: PGS,
            failure_domain: FailureDomain::Osd,
        },
    );
    m.volumes.insert(
        VolumeId(9),
        VolumeRecord {
            id: VolumeId(9),
            name: "v".into(),
            pool: PoolId(1),
            size_bytes: VOL_SIZE,
            object_size: 4 * MIB,
            snap_seq: 0,
            snapshots: Vec::new(),
            parent: None,
        },
    );
    recompute(&mut m).expect("placement");
    m
}

fn wait_clean(osds: &[&TestOsd]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st: Vec<_> = osds.iter().flat_map(|o| o.status()).collect();
        if st.iter().filter(|s| s.state == "active+clean").count() == PGS as usize {
            return;
        }
        assert!(Instant::now() < deadline, "not clean: {st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn fill(b: u8, len: u64) -> Vec<u8> {
    vec![b; len as usize]
}

#[test]
fn a_client_that_learns_of_a_snapshot_late_resends_its_writes_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let osds: Vec<TestOsd> = (0..3)
        .map(|i| TestOsd::start(i, dir.path().join(format!("{i}.img")), Some(256 * MIB)))
        .collect();
    let refs: Vec<&TestOsd> = osds.iter().collect();
    let map = cluster(&refs);
    for o in &osds {
        o.map(&shard_map(&map));
    }
    wait_clean(&refs);
    let feed = MapFeed::fixed(map.clone());
    let rt = compio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let vol = Client::new(feed.clone()).open("v").unwrap();
        vol.write_at(0, &fill(0xA1, 12 * MIB)).await.unwrap();
    });

    // Snapshot 1 of v: the OSDs learn of it first (as `snap create` waits
    // for), the client only later.
    let mut m2 = map.clone();
    m2.epoch = Epoch(2);
    let v = m2.volumes.get_mut(&VolumeId(9)).unwrap();
    v.snap_seq = 1;
    v.snapshots.push(SnapshotRecord {
        id: 1,
        name: "s1".into(),
        created_unix: 1,
        size_bytes: VOL_SIZE,
        protected: false,
    });
    m2.validate().expect("valid map");
    for o in &osds {
        o.map(&shard_map(&m2));
    }
    for o in &osds {
        // Answered after the map is installed.
        o.status();
    }
    let late = {
        let (feed, m2) = (feed.clone(), m2.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            feed.publish(m2);
        })
    };
    rt.block_on(async {
        let client = Client::new(feed.clone());
        let vol = client.open("v").unwrap();
        // Not openable before the client's map has it.
        assert!(matches!(client.open("v@s1"), Err(ClientError::NotFound(_))));
        // Sent under sequence 0, refused, resent under 1 once the map
        // arrives: the snapshot keeps pattern A.
        vol.write_at(2 * MIB, &fill(0xB2, 8 * MIB)).await.unwrap();
        vol.discard_at(11 * MIB, MIB).await.unwrap();
        assert_eq!(feed.epoch(), 2);

        let snap = client.open("v@s1").unwrap();
        assert!(snap.is_snapshot() && snap.read_only());
        assert_eq!(snap.name(), "v@s1");
        assert!(snap.read_at(0, 12 * MIB).await.unwrap()[..] == fill(0xA1, 12 * MIB)[..]);
        assert!(snap.read_at(12 * MIB, 4 * MIB).await.unwrap()[..] == fill(0, 4 * MIB)[..]);
        let head = vol.read_at(0, VOL_SIZE).await.unwrap();
        assert!(head[..2 * MIB as usize] == fill(0xA1, 2 * MIB)[..]);
        assert!(head[2 * MIB as usize..10 * MIB as usize] == fill(0xB2, 8 * MIB)[..]);
        assert!(head[10 * MIB as usize..11 * MIB as usize] == fill(0xA1, MIB)[..]);
        assert!(head[11 * MIB as usize..] == fill(0, 5 * MIB)[..]);

        // Read-only, refused before anything is sent.
        for r in [
            snap.write_at(0, &fill(1, 4096)).await,
            snap.discard_at(0, 4096).await,
        ] {
            assert!(
                matches!(r, Err(ClientError::ReadOnly(ref n)) if n == "v@s1"),
                "{r:?}"
            );
        }
        assert!(matches!(
            BlockVolume::write_zeroes(&snap, 0, 4096, true).await,
            Err(pontoon_volume::VolumeError::ReadOnly)
        ));
        for bad in ["v@", "v@s1@x", "v@a/b"] {
            assert!(
                matches!(client.open(bad), Err(ClientError::InvalidArgument(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            client.open("v@nope"),
            Err(ClientError::NotFound(_))
        ));
        assert!(matches!(client.open("w@s1"), Err(ClientError::NotFound(_))));

        // Removed from the map, an open snapshot stops reading.
        let mut m3 = m2.clone();
        m3.epoch = Epoch(3);
        m3.volumes.get_mut(&VolumeId(9)).unwrap().snapshots.clear();
        feed.publish(m3);
        assert!(matches!(
            snap.read_at(0, 4096).await,
            Err(ClientError::NotFound(_))
        ));
    });
    late.join().unwrap();
}
