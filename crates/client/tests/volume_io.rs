//! The client library against three real OSD shards over TCP: I/O split
//! across objects and PGs, thin reads, discards, allocation maps, errors,
//! and retries across a map change the client learns of late.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pontoon_client::{Client, ClientError, MapFeed};
use pontoon_cluster::{ClusterMap, FailureDomain, OsdRecord, PoolRecord, VolumeRecord, recompute};
use pontoon_osd::testkit::TestOsd;
use pontoon_osd::view::shard_map;
use pontoon_types::{Epoch, OsdId, PoolId, VolumeId};

const MIB: u64 = 1 << 20;
const VOL_SIZE: u64 = 64 * MIB;

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
            pgs: 16,
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

fn wait_clean(osds: &[&TestOsd], pgs: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st: Vec<_> = osds.iter().flat_map(|o| o.status()).collect();
        if st.iter().filter(|s| s.state == "active+clean").count() == pgs {
            return;
        }
        assert!(Instant::now() < deadline, "not clean: {st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (pontoon_types::mix64(seed ^ (i / 8)) >> ((i % 8) * 8)) as u8)
        .collect()
}

#[test]
fn volume_io_across_objects_pgs_and_a_map_change() {
    let dir = tempfile::tempdir().unwrap();
    let osds: Vec<TestOsd> = (0..3)
        .map(|i| TestOsd::start(i, dir.path().join(format!("{i}.img")), Some(256 * MIB)))
        .collect();
    let refs: Vec<&TestOsd> = osds.iter().collect();
    let map = cluster(&refs);
    let view = shard_map(&map);
    for o in &osds {
        o.map(&view);
    }
    wait_clean(&refs, 16);
    let feed = MapFeed::fixed(map.clone());
    let rt = compio::runtime::Runtime::new().unwrap();
    let mut model = vec![0u8; VOL_SIZE as usize];
    rt.block_on(async {
        let client = Client::new(feed.clone());
        assert!(matches!(client.open("nope"), Err(ClientError::NotFound(_))));
        let vol = client.open("v").unwrap();

        // A fresh thin volume reads as zeros and is all hole.
        assert!(
            vol.read_at(0, 8 * MIB)
                .await
                .unwrap()
                .iter()
                .all(|b| *b == 0)
        );
        let alloc = vol.allocation_at(0, VOL_SIZE).await.unwrap();
        assert_eq!(alloc.len(), 1);
        assert!(!alloc[0].allocated);

        // Writes of many shapes, including ones spanning several objects.
        let writes: [(u64, u64); 6] = [
            (0, 4096),
            (4 * MIB - 8192, 16384),
            (10 * MIB, 12 * MIB),
            (33 * MIB + 4096, 4096),
            (VOL_SIZE - 4096, 4096),
            (20 * MIB, 8 * MIB),
        ];
        for (k, (off, len)) in writes.iter().enumerate() {
            let data = pattern(k as u64, *len as usize);
            vol.write_at(*off, &data).await.unwrap();
            model[*off as usize..(*off + *len) as usize].copy_from_slice(&data);
        }
        let all = vol.read_at(0, VOL_SIZE).await.unwrap();
        assert!(
            all[..] == model[..],
            "whole-volume read differs from the model"
        );

        // Discard part of an object and across a boundary: zeros, holes.
        vol.discard_at(10 * MIB, 3 * MIB).await.unwrap();
        model[(10 * MIB) as usize..(13 * MIB) as usize].fill(0);
        let back = vol.read_at(8 * MIB, 8 * MIB).await.unwrap();
        assert!(back[..] == model[(8 * MIB) as usize..(16 * MIB) as usize]);
        let alloc = vol.allocation_at(8 * MIB, 8 * MIB).await.unwrap();
        let total: u64 = alloc.iter().map(|e| e.len).sum();
        assert_eq!(total, 8 * MIB, "extents cover the range: {alloc:?}");
        let allocated: u64 = alloc.iter().filter(|e| e.allocated).map(|e| e.len).sum();
        assert_eq!(
            allocated,
            3 * MIB,
            "13..16 MiB hold data, 8..13 do not: {alloc:?}"
        );

        // Bad requests.
        assert!(matches!(
            vol.read_at(VOL_SIZE - 4096, 8192).await,
            Err(ClientError::InvalidArgument(_))
        ));
        assert!(matches!(
            vol.write_at(100, &[0u8; 4096]).await,
            Err(ClientError::InvalidArgument(_))
        ));
    });

    // OSD 2 leaves. The OSDs learn first; the client, still on epoch 1,
    // is refused as stale and must wait for the new map, then succeed.
    let mut osds = osds;
    let gone = osds.pop().unwrap();
    gone.stop();
    let mut m2 = map.clone();
    m2.epoch = Epoch(2);
    m2.alive = BTreeSet::from([OsdId(0), OsdId(1)]);
    recompute(&mut m2).unwrap();
    let view2 = shard_map(&m2);
    for o in &osds {
        o.map(&view2);
    }
    let late = {
        let feed = feed.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            feed.publish(m2);
        })
    };
    rt.block_on(async {
        let client = Client::new(feed.clone());
        let vol = client.open("v").unwrap();
        let data = pattern(99, (8 * MIB) as usize);
        vol.write_at(40 * MIB, &data).await.unwrap();
        model[(40 * MIB) as usize..(48 * MIB) as usize].copy_from_slice(&data);
        let all = vol.read_at(0, VOL_SIZE).await.unwrap();
        assert!(all[..] == model[..], "reads after the map change differ");
    });
    late.join().unwrap();
    assert_eq!(feed.epoch(), 2);
}
