//! What keeps an OSD from serving data a newer interval has overtaken, each
//! shown with real shards on their own threads and TCP on 127.0.0.1, maps
//! pushed by hand:
//! - a shard stops serving at its lease deadline by itself;
//! - a peering query beyond the receiver's map, or from an OSD that is not
//!   the primary of that interval, is refused and promises nothing (one
//!   such message used to stall a PG until its OSD restarted);
//! - an old primary that a newer interval's primary could peer with serves
//!   none of its old interval's I/O, so no read returns data older than an
//!   acknowledged write;
//! - a replica answering with another version than the one it was sent
//!   does not count as holding the write.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_buf::AlignedBuf;
use pontoon_net::{Frame, Handler, Limits, RpcConn};
use pontoon_osd::testkit::TestOsd;
use pontoon_osd::{LeaseDeadline, PgEntry, PoolParams, ShardMap, pg_for};
use pontoon_proto::{
    Message, PeerInfo, PeerQuery, ReadReq, Reply, Role, Status, SubOp, Target, WriteReq,
};
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, PoolId, Version};

const POOL: PoolId = PoolId(1);
const VOLUME: u64 = 9;
const PGS: u32 = 1;
const OID: ObjectId = ObjectId {
    volume: pontoon_types::VolumeId(VOLUME),
    index: 0,
};

fn pg() -> PgId {
    pg_for(POOL, PGS, OID)
}

/// A map at `epoch` whose one PG has interval `interval` and acting set
/// `acting` (pool size = its length, min_size 1), every OSD alive.
fn map(epoch: u64, interval: u64, acting: &[u32], addrs: &[(u32, SocketAddr)]) -> ShardMap {
    let mut m = ShardMap {
        epoch: Epoch(epoch),
        ..Default::default()
    };
    m.pools.insert(
        POOL,
        PoolParams {
            size: acting.len() as u32,
            min_size: 1,
            pgs: PGS,
        },
    );
    m.volumes.insert(VOLUME, POOL);
    for (id, a) in addrs {
        m.addrs.insert(OsdId(*id), vec![*a]);
        m.alive.insert(OsdId(*id));
    }
    let acting: Vec<OsdId> = acting.iter().copied().map(OsdId).collect();
    m.pgs.insert(
        pg(),
        PgEntry {
            interval: Epoch(interval),
            acting: acting.clone(),
            up: acting,
            past: Vec::new(),
        },
    );
    m
}

fn rt() -> compio::runtime::Runtime {
    compio::runtime::Runtime::new().expect("io_uring runtime")
}

async fn call(addr: SocketAddr, role: Role, msg: &Message, data: Option<&[u8]>) -> Reply {
    let c = RpcConn::connect(addr, role, Duration::from_secs(5))
        .await
        .expect("connect");
    match c.call(msg, data, Duration::from_secs(15)).await {
        Ok((Message::Reply(r), _)) => r,
        Ok((Message::PeerInfo(_), _)) => Reply::ok(Version::ZERO),
        other => panic!("unexpected answer {other:?}"),
    }
}

fn write(epoch: u64, data: &[u8]) -> Message {
    Message::Write(WriteReq {
        target: Target {
            pg: pg(),
            epoch: Epoch(epoch),
            oid: OID,
        },
        offset: 0,
        data_crc: crc32c::crc32c(data),
        fua: false,
        fill: false,
        snap_seq: 0,
    })
}

fn read(epoch: u64) -> Message {
    Message::Read(ReadReq {
        target: Target {
            pg: pg(),
            epoch: Epoch(epoch),
            oid: OID,
        },
        offset: 0,
        len: 4096,
        snap: None,
    })
}

fn query(epoch: u64) -> Message {
    Message::PeerQuery(PeerQuery {
        pg: pg(),
        epoch: Epoch(epoch),
        after: None,
    })
}

/// Retries `msg` while the answer is retryable (peering, maps arriving),
/// for at most `within`; returns the last answer.
async fn until_settled(
    addr: SocketAddr,
    msg: &Message,
    data: Option<&[u8]>,
    within: Duration,
) -> Reply {
    let deadline = Instant::now() + within;
    loop {
        let r = call(addr, Role::Client, msg, data).await;
        if r.status == Status::Ok || !r.status.is_retryable() || Instant::now() >= deadline {
            return r;
        }
        compio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `data` to the test object in interval `epoch` at `addr` until
/// the answer is not a transient refusal, for up to `within`.
async fn write_until_settled(addr: SocketAddr, epoch: u64, data: &[u8], within: Duration) -> Reply {
    until_settled(addr, &write(epoch, data), Some(data), within).await
}

#[test]
fn a_shard_stops_serving_at_its_lease_deadline_with_no_control_loop() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = LeaseDeadline::fenced(Instant::now());
    let o = TestOsd::start_with_deadline(
        0,
        dir.path().join("o.img"),
        Some(64 << 20),
        deadline.clone(),
    );
    let m = map(3, 3, &[0], &[(0, o.addr)]);
    o.map(&m);
    let data = vec![7u8; 4096];
    rt().block_on(async {
        let r = call(o.addr, Role::Client, &write(3, &data), Some(&data)).await;
        assert_eq!(
            r.status,
            Status::Fenced,
            "no deadline set yet: {}",
            r.message
        );
        deadline.set(Some(Instant::now() + Duration::from_millis(1500)));
        let r = write_until_settled(o.addr, 3, &data, Duration::from_secs(1)).await;
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        // Nobody moves the deadline: the shard fences itself.
        compio::time::sleep(Duration::from_millis(1600)).await;
        for msg in [write(3, &data), read(3)] {
            let r = call(o.addr, Role::Client, &msg, Some(&data)).await;
            assert_eq!(r.status, Status::Fenced, "{}", r.message);
        }
        // Heartbeats are answered fenced or not.
        let r = call(o.addr, Role::Osd(OsdId(5)), &Message::Ping, None).await;
        assert_eq!(r.status, Status::Ok);
    });
}

#[test]
fn a_peer_query_beyond_the_map_or_not_from_the_primary_promises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = TestOsd::start(0, dir.path().join("a.img"), Some(64 << 20));
    let b = TestOsd::start(1, dir.path().join("b.img"), Some(64 << 20));
    let addrs = [(0, a.addr), (1, b.addr)];
    let m = map(5, 5, &[0, 1], &addrs);
    a.map(&m);
    b.map(&m);
    let data = vec![1u8; 4096];
    rt().block_on(async {
        let r = write_until_settled(a.addr, 5, &data, Duration::from_secs(10)).await;
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        // A forged or confused query to the replica: an epoch no map has...
        let r = call(b.addr, Role::Osd(OsdId(0)), &query(u64::MAX), None).await;
        assert_eq!(r.status, Status::EpochAhead, "{}", r.message);
        // ...an interval this PG does not have...
        let r = call(b.addr, Role::Osd(OsdId(0)), &query(4), None).await;
        assert_eq!(r.status, Status::StaleEpoch, "{}", r.message);
        // ...or its interval, from an OSD that is not its primary.
        let r = call(b.addr, Role::Osd(OsdId(7)), &query(5), None).await;
        assert_eq!(r.status, Status::InvalidArgument, "{}", r.message);
        // None of them raised the replica's promise: the PG still writes.
        let data = vec![2u8; 4096];
        let r = write_until_settled(a.addr, 5, &data, Duration::from_secs(10)).await;
        assert_eq!(r.status, Status::Ok, "the PG stalled: {}", r.message);
    });
}

#[test]
fn an_old_primary_serves_nothing_of_its_interval_once_a_newer_one_can_take_writes() {
    let dir = tempfile::tempdir().unwrap();
    let a = TestOsd::start(0, dir.path().join("a.img"), Some(64 << 20));
    let b = TestOsd::start(1, dir.path().join("b.img"), Some(64 << 20));
    let c = TestOsd::start(2, dir.path().join("c.img"), Some(64 << 20));
    let addrs = [(0, a.addr), (1, b.addr), (2, c.addr)];
    let m5 = map(5, 5, &[0, 1], &addrs);
    for o in [&a, &b, &c] {
        o.map(&m5);
    }
    let old = vec![5u8; 4096];
    let new = vec![6u8; 4096];
    rt().block_on(async {
        let r = write_until_settled(a.addr, 5, &old, Duration::from_secs(10)).await;
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        // Interval 6 moves the PG to B and C (say A was taken out by an
        // operator: it still holds its lease). Only B and C have the map.
        let mut m6 = map(6, 6, &[1, 2], &addrs);
        if let Some(e) = m6.pgs.get_mut(&pg()) {
            e.past = vec![pontoon_osd::PastInterval {
                interval: Epoch(5),
                acting: vec![OsdId(0), OsdId(1)],
            }];
        }
        b.map(&m6);
        c.map(&m6);
        let w = write_until_settled(b.addr, 6, &new, Duration::from_secs(3)).await;
        // Whatever B managed, A must not return data older than an
        // acknowledged write.
        let r = call(a.addr, Role::Client, &read(5), None).await;
        if w.status == Status::Ok {
            assert_ne!(
                r.status,
                Status::Ok,
                "A served interval 5 after B acknowledged a write in interval 6"
            );
        }
        // Once A has the map, B's interval is served, and A's is over.
        a.map(&m6);
        let w = write_until_settled(b.addr, 6, &new, Duration::from_secs(10)).await;
        assert_eq!(w.status, Status::Ok, "{}", w.message);
        let r = call(a.addr, Role::Client, &read(5), None).await;
        assert_ne!(
            r.status,
            Status::Ok,
            "A served interval 5 after interval 6 took a write"
        );
    });
}

/// A replica that answers every sub-operation with a version one above the
/// one it was sent, and peering with an empty list.
struct LyingReplica;

impl Handler for LyingReplica {
    async fn handle(self: Rc<Self>, _peer: Role, frame: Frame) -> (Message, Option<AlignedBuf>) {
        match frame.msg {
            Message::SubOp(SubOp { version, .. }) => (
                Message::Reply(Reply::ok(Version::new(version.epoch, version.seq + 1))),
                None,
            ),
            Message::PeerQuery(_) => (
                Message::PeerInfo(PeerInfo {
                    objects: Vec::new(),
                    more: false,
                }),
                None,
            ),
            _ => (Message::Reply(Reply::ok(Version::ZERO)), None),
        }
    }
}

#[test]
fn a_replica_answering_another_version_does_not_hold_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        rt().block_on(async move {
            let l = compio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(l.local_addr().unwrap()).unwrap();
            pontoon_net::serve(l, Rc::new(LyingReplica), Limits::default()).await;
        });
    });
    let liar = addr_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let a = TestOsd::start(0, dir.path().join("a.img"), Some(64 << 20));
    let m = map(4, 4, &[0, 1], &[(0, a.addr), (1, liar)]);
    a.map(&m);
    let data = vec![3u8; 4096];
    rt().block_on(async {
        let r = write_until_settled(a.addr, 4, &data, Duration::from_secs(3)).await;
        assert_ne!(
            r.status,
            Status::Ok,
            "acknowledged on a replica's false word"
        );
        assert!(r.message.contains("answered version"), "{}", r.message);
    });
}
