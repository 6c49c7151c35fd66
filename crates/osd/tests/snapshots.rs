//! Snapshots through three OSD shards over TCP, maps pushed by hand: the
//! snap context writes carry, the refusal of a stale one, and reads at a
//! snapshot from the primary and, after the primary changes, from a
//! former replica.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_net::RpcConn;
use pontoon_osd::testkit::TestOsd;
use pontoon_osd::{PastInterval, PgEntry, PgStatus, PoolParams, ShardMap, pg_for};
use pontoon_proto::{DiscardReq, Message, ReadReq, Reply, Role, Status, Target, WriteReq};
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, PoolId};

const POOL: PoolId = PoolId(1);
const VOLUME: u64 = 5;
const PGS: u32 = 4;

/// The acting set of PG `index`: every OSD, rotated by `index + shift`.
fn acting(addrs: &BTreeMap<u32, SocketAddr>, index: u32, shift: usize) -> Vec<OsdId> {
    let mut a: Vec<OsdId> = addrs.keys().copied().map(OsdId).collect();
    let n = a.len();
    a.rotate_left((index as usize + shift) % n);
    a
}

/// Every PG on all three OSDs, primary rotated by `shift`, in interval
/// `interval` (with `past` = (interval, shift) as its past interval), the
/// volume at snapshot sequence `snap_seq`.
fn make_map(
    epoch: u64,
    (interval, shift): (u64, usize),
    past: Option<(u64, usize)>,
    snap_seq: u64,
    addrs: &BTreeMap<u32, SocketAddr>,
) -> ShardMap {
    let mut m = ShardMap {
        epoch: Epoch(epoch),
        ..Default::default()
    };
    m.pools.insert(
        POOL,
        PoolParams {
            size: 3,
            min_size: 2,
            pgs: PGS,
        },
    );
    m.volumes.insert(VOLUME, POOL);
    if snap_seq > 0 {
        m.snap_seqs.insert(VOLUME, snap_seq);
    }
    for (id, a) in addrs {
        m.addrs.insert(OsdId(*id), vec![*a]);
        m.alive.insert(OsdId(*id));
    }
    for i in 0..PGS {
        let acting = acting(addrs, i, shift);
        let past = past
            .map(|(e, s)| PastInterval {
                interval: Epoch(e),
                acting: self::acting(addrs, i, s),
            })
            .into_iter()
            .collect();
        m.pgs.insert(
            PgId {
                pool: POOL,
                index: i,
            },
            PgEntry {
                interval: Epoch(interval),
                acting: acting.clone(),
                up: acting,
                past,
            },
        );
    }
    m
}

fn wait_all_clean(osds: &[&TestOsd], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let primaries: Vec<PgStatus> = osds
            .iter()
            .flat_map(|o| o.status())
            .filter(|s| s.state.starts_with("active"))
            .collect();
        if primaries
            .iter()
            .filter(|s| s.state == "active+clean")
            .count()
            == PGS as usize
        {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {primaries:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `msg(target)` to the primary of `oid` in `m`, retrying while the
/// PG peers; returns the first other answer.
async fn call(
    m: &ShardMap,
    oid: ObjectId,
    msg: impl Fn(Target) -> Message,
    data: Option<&[u8]>,
) -> (Reply, Vec<u8>) {
    let pg = pg_for(POOL, PGS, oid);
    let entry = &m.pgs[&pg];
    let addr = m.addrs[&entry.acting[0]][0];
    let t = Target {
        pg,
        epoch: entry.interval,
        oid,
    };
    let c: Rc<RpcConn> = RpcConn::connect(addr, Role::Client, Duration::from_secs(5))
        .await
        .expect("connect");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (reply, d) = c
            .call(&msg(t), data, Duration::from_secs(20))
            .await
            .expect("osd answers");
        let Message::Reply(r) = reply else {
            panic!("not a reply")
        };
        let peering = matches!(r.status, Status::PgInactive | Status::EpochAhead);
        if !peering || Instant::now() > deadline {
            return (r, d.map(|d| d.to_vec()).unwrap_or_default());
        }
        compio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn write(m: &ShardMap, oid: ObjectId, off: u64, data: &[u8], snap_seq: u64) -> Reply {
    let crc = crc32c::crc32c(data);
    let msg = |target| {
        Message::Write(WriteReq {
            target,
            offset: off,
            data_crc: crc,
            fua: false,
            snap_seq,
        })
    };
    call(m, oid, msg, Some(data)).await.0
}

async fn read(m: &ShardMap, oid: ObjectId, off: u64, snap: Option<u64>) -> Vec<u8> {
    let msg = |target| {
        Message::Read(ReadReq {
            target,
            offset: off,
            len: 8192,
            snap,
        })
    };
    let (r, d) = call(m, oid, msg, None).await;
    assert_eq!(
        r.status,
        Status::Ok,
        "read {oid} at {snap:?}: {}",
        r.message
    );
    d
}

fn fill(b: u8) -> Vec<u8> {
    vec![b; 8192]
}

#[test]
fn writes_after_a_snapshot_keep_what_it_reads_on_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let path = |i: u32| dir.path().join(format!("osd{i}.img"));
    let osds: Vec<TestOsd> = (0..3)
        .map(|i| TestOsd::start(i, path(i), Some(256 << 20)))
        .collect();
    let addrs: BTreeMap<u32, SocketAddr> = osds
        .iter()
        .enumerate()
        .map(|(i, o)| (i as u32, o.addr))
        .collect();
    let refs: Vec<&TestOsd> = osds.iter().collect();
    let install = |m: &ShardMap| {
        for o in &osds {
            o.map(m);
        }
        // A status answer comes after the map is installed.
        for o in &osds {
            o.status();
        }
    };
    let objects: Vec<ObjectId> = (0..6).map(|i| ObjectId::new(VOLUME, i)).collect();

    let m1 = make_map(1, (1, 0), None, 0, &addrs);
    install(&m1);
    wait_all_clean(&refs, "interval 1");
    let rt = compio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for oid in &objects {
            let r = write(&m1, *oid, 0, &fill(0xA1), 0).await;
            assert_eq!(r.status, Status::Ok, "{}", r.message);
        }
    });

    // Snapshot 1 is taken: every OSD's map has the volume at sequence 1.
    let m2 = make_map(2, (1, 0), None, 1, &addrs);
    install(&m2);
    rt.block_on(async {
        // A client that has not seen the snapshot is sent back for it, and
        // nothing of its write lands.
        let stale = write(&m2, objects[0], 0, &fill(0xEE), 0).await;
        assert_eq!(stale.status, Status::StaleSnapSeq, "{}", stale.message);
        assert!(stale.status.is_retryable());
        let msg = |target| {
            Message::Discard(DiscardReq {
                target,
                offset: 0,
                len: 4096,
                snap_seq: 0,
            })
        };
        let (stale, _) = call(&m2, objects[1], msg, None).await;
        assert_eq!(stale.status, Status::StaleSnapSeq, "{}", stale.message);
        assert_eq!(read(&m2, objects[0], 0, None).await, fill(0xA1));

        for oid in &objects {
            let r = write(&m2, *oid, 0, &fill(0xB2), 1).await;
            assert_eq!(r.status, Status::Ok, "{}", r.message);
        }
        // A discard under the snapshot keeps the block for it too.
        let msg = |target| {
            Message::Discard(DiscardReq {
                target,
                offset: 4096,
                len: 4096,
                snap_seq: 1,
            })
        };
        let (r, _) = call(&m2, objects[2], msg, None).await;
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        for oid in &objects {
            assert_eq!(read(&m2, *oid, 0, Some(1)).await, fill(0xA1), "{oid} at 1");
            let head = read(&m2, *oid, 0, None).await;
            if *oid == objects[2] {
                assert_eq!(&head[..4096], &fill(0xB2)[..4096]);
                assert!(head[4096..].iter().all(|b| *b == 0));
            } else {
                assert_eq!(head, fill(0xB2), "{oid} head");
            }
        }
        // An object first written after the snapshot reads as zeros in it.
        let new = ObjectId::new(VOLUME, 40);
        assert_eq!(write(&m2, new, 0, &fill(0xC3), 1).await.status, Status::Ok);
        assert_eq!(read(&m2, new, 0, Some(1)).await, vec![0; 8192]);
    });

    // The primaries move to former replicas: they kept the snapshot too.
    let m3 = make_map(3, (3, 1), Some((1, 0)), 1, &addrs);
    install(&m3);
    wait_all_clean(&refs, "interval 3");
    rt.block_on(async {
        for oid in &objects {
            assert_eq!(read(&m3, *oid, 0, Some(1)).await, fill(0xA1), "{oid} at 1");
        }
        assert_eq!(read(&m3, objects[3], 0, None).await, fill(0xB2));
    });
}
