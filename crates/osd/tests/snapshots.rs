//! Snapshots through three OSD shards over TCP, maps pushed by hand: the
//! snap context writes carry, the refusal of a stale one, and reads at a
//! snapshot from the primary and, after the primary changes, from a
//! former replica.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_net::RpcConn;
use pontoon_osd::testkit::TestOsd;
use pontoon_osd::{PastInterval, PgEntry, PgStatus, PoolParams, ShardMap, pg_for};
use pontoon_proto::{
    DiscardReq, Message, PullLayerReq, ReadReq, Reply, Role, Status, SubOp, SubOpKind, Target,
    WriteReq,
};
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, PoolId, Version};

const POOL: PoolId = PoolId(1);
const VOLUME: u64 = 5;
const PGS: u32 = 4;

/// `ids` rotated left by `by`.
fn rotated(ids: &[u32], by: usize) -> Vec<u32> {
    let mut a = ids.to_vec();
    let n = a.len();
    a.rotate_left(by % n);
    a
}

/// The acting set of PG `index`.
type Acting<'a> = &'a dyn Fn(u32) -> Vec<u32>;

/// How the PGs of a map are laid out: PG `index` → (acting set, past
/// intervals as (interval, acting set)).
type Layout<'a> = &'a dyn Fn(u32) -> (Vec<u32>, Vec<(u64, Vec<u32>)>);

/// A map at `epoch` whose PGs are in interval `interval` laid out by
/// `layout`, with OSDs `alive` holding leases, the volume at snapshot
/// sequence `snap_seq` (`None`: the volume was removed) and the pool
/// serving with `min_size` members.
fn map_with(
    epoch: u64,
    interval: u64,
    addrs: &BTreeMap<u32, SocketAddr>,
    alive: &[u32],
    snap_seq: Option<u64>,
    min_size: u32,
    layout: Layout,
) -> ShardMap {
    let mut m = ShardMap {
        epoch: Epoch(epoch),
        next_volume: VOLUME + 1,
        ..Default::default()
    };
    m.pools.insert(
        POOL,
        PoolParams {
            size: 3,
            min_size,
            pgs: PGS,
        },
    );
    if let Some(seq) = snap_seq {
        m.volumes.insert(VOLUME, POOL);
        if seq > 0 {
            m.snap_seqs.insert(VOLUME, seq);
            // Every snapshot taken is kept (none is removed here).
            m.snaps.insert(VOLUME, (1..=seq).collect());
        }
    }
    for (id, a) in addrs {
        m.addrs.insert(OsdId(*id), vec![*a]);
    }
    m.alive.extend(alive.iter().copied().map(OsdId));
    let ids = |v: Vec<u32>| v.into_iter().map(OsdId).collect::<Vec<_>>();
    for i in 0..PGS {
        let (acting, past) = layout(i);
        m.pgs.insert(
            PgId {
                pool: POOL,
                index: i,
            },
            PgEntry {
                interval: Epoch(interval),
                acting: ids(acting.clone()),
                up: ids(acting),
                past: past
                    .into_iter()
                    .map(|(e, a)| PastInterval {
                        interval: Epoch(e),
                        acting: ids(a),
                    })
                    .collect(),
            },
        );
    }
    m
}

/// Every PG on all OSDs of `addrs`, primary rotated by `shift`, in
/// interval `interval` (with `past` = (interval, shift) as its past
/// interval), the volume at snapshot sequence `snap_seq`.
fn make_map(
    epoch: u64,
    (interval, shift): (u64, usize),
    past: Option<(u64, usize)>,
    snap_seq: u64,
    addrs: &BTreeMap<u32, SocketAddr>,
) -> ShardMap {
    let ids: Vec<u32> = addrs.keys().copied().collect();
    let layout = |i: u32| {
        let past = past.map(|(e, s)| (e, rotated(&ids, i as usize + s)));
        (
            rotated(&ids, i as usize + shift),
            past.into_iter().collect(),
        )
    };
    map_with(epoch, interval, addrs, &ids, Some(snap_seq), 2, &layout)
}

fn wait_all_clean(osds: &[&TestOsd], what: &str) {
    wait_all(osds, what, |s| s.state == "active+clean");
}

/// Waits until every PG's primary among `osds` reports a status `done`
/// accepts.
fn wait_all(osds: &[&TestOsd], what: &str, done: impl Fn(&PgStatus) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let primaries: Vec<PgStatus> = osds
            .iter()
            .flat_map(|o| o.status())
            .filter(|s| s.state.starts_with("active"))
            .collect();
        if primaries.iter().filter(|s| done(s)).count() == PGS as usize {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {primaries:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every PG is served by `osd` alone, all it can be: active,
/// with nothing to recover.
fn wait_alone(osd: &TestOsd, what: &str) {
    wait_all(&[osd], what, |s| s.state == "active+undersized+degraded");
}

/// Sends `msg(target)` to the primary of `oid` in `m`, retrying while the
/// PG peers; returns the first other answer.
async fn call(
    m: &ShardMap,
    oid: ObjectId,
    msg: impl Fn(Target) -> Message,
    data: Option<&[u8]>,
) -> (Reply, Vec<u8>) {
    call_within(m, oid, msg, data, Duration::from_secs(30)).await
}

/// [`call`], retrying for `patience` at most (zero: one attempt).
async fn call_within(
    m: &ShardMap,
    oid: ObjectId,
    msg: impl Fn(Target) -> Message,
    data: Option<&[u8]>,
    patience: Duration,
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
    let deadline = Instant::now() + patience;
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
    send_write(m, oid, off, data, snap_seq, false).await
}

/// A client write (with `fill`, a flatten's fill) of `data` at `off`.
async fn send_write(
    m: &ShardMap,
    oid: ObjectId,
    off: u64,
    data: &[u8],
    snap_seq: u64,
    fill: bool,
) -> Reply {
    let crc = crc32c::crc32c(data);
    let msg = |target| {
        Message::Write(WriteReq {
            target,
            offset: off,
            data_crc: crc,
            fua: false,
            fill,
            snap_seq,
        })
    };
    call(m, oid, msg, Some(data)).await.0
}

async fn read(m: &ShardMap, oid: ObjectId, off: u64, snap: Option<u64>) -> Vec<u8> {
    read_len(m, oid, off, 8192, snap).await
}

async fn read_len(m: &ShardMap, oid: ObjectId, off: u64, len: u32, snap: Option<u64>) -> Vec<u8> {
    let msg = |target| {
        Message::Read(ReadReq {
            target,
            offset: off,
            len,
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

/// Blocks of each object the recovery tests write.
const BLOCKS: u32 = 8;
/// Objects the recovery tests use: 0..20 are written before the first
/// snapshot, 20.. only after it; what happens to each after the snapshot
/// depends on its index (see [`after_snapshot_1`], [`after_snapshot_2`]).
const OBJECTS: u64 = 24;
const FIRST_NEW: u64 = 20;

/// Block contents for `seed`: 4 KiB no other seed shares.
fn pattern(seed: u64) -> Vec<u8> {
    (0..4096u64)
        .map(|i| (pontoon_types::mix64(seed * 4096 + i) & 0xff) as u8)
        .collect()
}

/// What every block of the test objects holds, as (object index, block)
/// → seed, at the head and at each snapshot.
#[derive(Default)]
struct Model {
    head: BTreeMap<(u64, u32), u64>,
    snaps: BTreeMap<u64, BTreeMap<(u64, u32), u64>>,
    seeds: u64,
}

impl Model {
    fn snapshot(&mut self, id: u64) {
        self.snaps.insert(id, self.head.clone());
    }

    /// The seed of each block of object `idx` at `snap` (`None`: the
    /// head); `None` for a block that reads as zeros.
    fn expected(&self, idx: u64, snap: Option<u64>) -> Vec<Option<u64>> {
        let view = snap.map_or(&self.head, |id| &self.snaps[&id]);
        (0..BLOCKS).map(|b| view.get(&(idx, b)).copied()).collect()
    }
}

/// Writes new contents to blocks `start..start + n` of object `idx`.
async fn write_blocks(m: &ShardMap, model: &mut Model, idx: u64, blocks: (u32, u32), seq: u64) {
    let (start, n) = blocks;
    let mut data = Vec::new();
    for b in start..start + n {
        model.seeds += 1;
        model.head.insert((idx, b), model.seeds);
        data.extend(pattern(model.seeds));
    }
    let oid = ObjectId::new(VOLUME, idx);
    let r = write(m, oid, u64::from(start) * 4096, &data, seq).await;
    assert_eq!(r.status, Status::Ok, "write {oid}: {}", r.message);
}

/// Discards blocks `start..start + n` of object `idx`.
async fn discard_blocks(m: &ShardMap, model: &mut Model, idx: u64, blocks: (u32, u32), seq: u64) {
    let (start, n) = blocks;
    for b in start..start + n {
        model.head.remove(&(idx, b));
    }
    let msg = |target| {
        Message::Discard(DiscardReq {
            target,
            offset: u64::from(start) * 4096,
            len: u64::from(n) * 4096,
            snap_seq: seq,
        })
    };
    let oid = ObjectId::new(VOLUME, idx);
    let (r, _) = call(m, oid, msg, None).await;
    assert_eq!(r.status, Status::Ok, "discard {oid}: {}", r.message);
}

/// Deletes the head of object `idx` under snapshot sequence `seq` as its
/// PG's primary would: a delete sub-operation at `version`, in the
/// primary's name, to every acting member (clients have no delete).
async fn delete_head(m: &ShardMap, model: &mut Model, idx: u64, version: Version, seq: u64) {
    model.head.retain(|(i, _), _| *i != idx);
    let oid = ObjectId::new(VOLUME, idx);
    let op = SubOp {
        snap_seq: seq,
        ..sub_op(m, oid, version, SubOpKind::Delete)
    };
    for member in &m.pgs[&op.target.pg].acting {
        let r = as_primary(m, *member, &op, None).await;
        assert_eq!(
            r.status,
            Status::Ok,
            "delete {oid} on {member}: {}",
            r.message
        );
    }
}

/// A sub-operation on `oid` in its PG's interval in `m`, without data.
fn sub_op(m: &ShardMap, oid: ObjectId, version: Version, kind: SubOpKind) -> SubOp {
    let pg = pg_for(POOL, PGS, oid);
    SubOp {
        target: Target {
            pg,
            epoch: m.pgs[&pg].interval,
            oid,
        },
        version,
        kind,
        extents: Vec::new(),
        data_crc: crc32c::crc32c(&[]),
        snap_seq: 0,
        snaps: None,
    }
}

/// Sends `op` to `member` in the name of its object's primary in `m`;
/// returns the answer.
async fn as_primary(m: &ShardMap, member: OsdId, op: &SubOp, data: Option<&[u8]>) -> Reply {
    let primary = m.pgs[&op.target.pg].acting[0];
    let c = RpcConn::connect(
        m.addrs[&member][0],
        Role::Osd(primary),
        Duration::from_secs(5),
    )
    .await
    .expect("connect");
    let (reply, _) = c
        .call(&Message::SubOp(op.clone()), data, Duration::from_secs(20))
        .await
        .expect("osd answers");
    let Message::Reply(r) = reply else {
        panic!("not a reply")
    };
    r
}

/// Before any snapshot: pattern A everywhere but the objects made later.
async fn before_snapshot(m: &ShardMap, model: &mut Model) {
    for idx in 0..FIRST_NEW {
        write_blocks(m, model, idx, (0, BLOCKS), 0).await;
    }
}

/// Under snapshot 1: overwrites, a head discarded whole, partial
/// discards, untouched objects, objects first written now.
async fn after_snapshot_1(m: &ShardMap, model: &mut Model) {
    for idx in 0..OBJECTS {
        match (idx >= FIRST_NEW, idx % 5) {
            (true, _) => write_blocks(m, model, idx, (2, 4), 1).await,
            (false, 0) => write_blocks(m, model, idx, (0, 4), 1).await,
            (false, 1) => discard_blocks(m, model, idx, (0, BLOCKS), 1).await,
            (false, 2) => {
                discard_blocks(m, model, idx, (6, 2), 1).await;
                write_blocks(m, model, idx, (3, 2), 1).await;
            }
            (false, 3) => {}
            _ => write_blocks(m, model, idx, (0, 2), 1).await,
        }
    }
}

/// Under snapshot 2: more overwrites, a discarded head written again,
/// heads deleted (the objects live on for their snapshots) at versions
/// above any the interval `interval` stamps.
async fn after_snapshot_2(m: &ShardMap, model: &mut Model, interval: u64) {
    for idx in 0..OBJECTS {
        match (idx >= FIRST_NEW, idx % 5) {
            (true, k) if k % 2 == 0 => discard_blocks(m, model, idx, (2, 2), 2).await,
            (false, 0) => write_blocks(m, model, idx, (2, 4), 2).await,
            (false, 1) => write_blocks(m, model, idx, (0, 2), 2).await,
            (false, 4) => {
                let v = Version::new(interval, 1_000_000 + idx);
                delete_head(m, model, idx, v, 2).await;
            }
            _ => {}
        }
    }
}

/// Reads every test object at the head and at every snapshot through the
/// primaries of `m` and checks each block against the model.
async fn check_reads(m: &ShardMap, model: &Model, what: &str) {
    let views: Vec<Option<u64>> = std::iter::once(None)
        .chain(model.snaps.keys().map(|id| Some(*id)))
        .collect();
    for snap in views {
        let at = snap.map_or("the head".to_string(), |s| format!("snapshot {s}"));
        for idx in 0..OBJECTS {
            let got = read_len(m, ObjectId::new(VOLUME, idx), 0, BLOCKS * 4096, snap).await;
            for (b, want) in model.expected(idx, snap).into_iter().enumerate() {
                let block = &got[b * 4096..(b + 1) * 4096];
                let ok = match want {
                    Some(seed) => block == pattern(seed).as_slice(),
                    None => block.iter().all(|x| *x == 0),
                };
                assert!(
                    ok,
                    "{what}: object {idx} block {b} at {at} should hold {} but does not",
                    want.map_or("zeros".to_string(), |s| format!("seed {s}"))
                );
            }
        }
    }
}

/// A connection to OSD `addr` as another OSD, and `oid`'s target for
/// recovery requests.
async fn as_peer(addr: SocketAddr, oid: ObjectId) -> (Rc<RpcConn>, Target) {
    let c = RpcConn::connect(addr, Role::Osd(OsdId(900)), Duration::from_secs(5))
        .await
        .expect("connect");
    let t = Target {
        pg: pg_for(POOL, PGS, oid),
        epoch: Epoch(0),
        oid,
    };
    (c, t)
}

/// OSD `addr`'s whole copy of `oid` as it answers a recovery pull.
async fn pull(addr: SocketAddr, oid: ObjectId) -> (Message, Vec<u8>) {
    let (c, t) = as_peer(addr, oid).await;
    let (m, d) = c
        .call(&Message::Pull(t), None, Duration::from_secs(20))
        .await
        .expect("osd answers");
    (m, d.map(|d| d.to_vec()).unwrap_or_default())
}

/// Whether a pull answer says the OSD holds nothing of the object.
fn absent(answer: &(Message, Vec<u8>)) -> bool {
    matches!(&answer.0, Message::Reply(r) if r.status == Status::Ok && r.version == Version::ZERO)
}

/// Every OSD of `osds` holds the same whole copy (head, clones, version)
/// of every test object.
async fn same_copies(osds: &[SocketAddr], what: &str) {
    for idx in 0..OBJECTS {
        let oid = ObjectId::new(VOLUME, idx);
        let first = pull(osds[0], oid).await;
        assert!(!absent(&first), "{what}: {oid} missing on {}", osds[0]);
        for a in &osds[1..] {
            assert!(pull(*a, oid).await == first, "{what}: {oid} differs on {a}");
        }
    }
}

/// Waits until no OSD of `osds` holds anything of any test object.
fn wait_reclaimed(osds: &[SocketAddr], rt: &compio::runtime::Runtime, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = rt.block_on(async {
            let mut left = Vec::new();
            for a in osds {
                for idx in 0..OBJECTS {
                    let oid = ObjectId::new(VOLUME, idx);
                    if !absent(&pull(*a, oid).await) {
                        left.push(format!("{oid} on {a}"));
                    }
                }
            }
            left
        });
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still held: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn recovered(osds: &[&TestOsd]) -> u64 {
    osds.iter()
        .flat_map(|o| o.status())
        .map(|s| s.recovered)
        .sum()
}

fn install(m: &ShardMap, osds: &[&TestOsd]) {
    for o in osds {
        o.map(m);
    }
    // A status answer comes after the map is installed.
    for o in osds {
        o.status();
    }
}

/// OSDs `0..n` on fresh stores in `dir`, and their addresses.
fn start_osds(dir: &Path, n: u32) -> (BTreeMap<u32, TestOsd>, BTreeMap<u32, SocketAddr>) {
    let osds: BTreeMap<u32, TestOsd> = (0..n)
        .map(|i| (i, TestOsd::start(i, osd_path(dir, i), Some(256 << 20))))
        .collect();
    let addrs = osds.iter().map(|(i, o)| (*i, o.addr)).collect();
    (osds, addrs)
}

fn osd_path(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("osd{i}.img"))
}

/// The whole workload in interval 1 with PG `i` on `layout(i)` and every
/// OSD of `addrs` alive: before the snapshots, snapshot 1, after it,
/// snapshot 2, after that. Returns the model and the last map.
fn workload_in_one_interval(
    rt: &compio::runtime::Runtime,
    osds: &[&TestOsd],
    addrs: &BTreeMap<u32, SocketAddr>,
    layout: Acting,
) -> (Model, ShardMap) {
    let alive: Vec<u32> = addrs.keys().copied().collect();
    let map = |epoch: u64, seq: u64| {
        map_with(epoch, 1, addrs, &alive, Some(seq), 2, &|i| {
            (layout(i), vec![])
        })
    };
    let mut model = Model::default();
    let m1 = map(1, 0);
    install(&m1, osds);
    wait_all_clean(osds, "interval 1");
    rt.block_on(before_snapshot(&m1, &mut model));
    let m2 = map(2, 1);
    install(&m2, osds);
    model.snapshot(1);
    rt.block_on(after_snapshot_1(&m2, &mut model));
    let m3 = map(3, 2);
    install(&m3, osds);
    model.snapshot(2);
    rt.block_on(after_snapshot_2(&m3, &mut model, 1));
    (model, m3)
}

/// Stops every OSD but `last` and gives it every PG alone in interval
/// `epoch` (after `past`: (interval, layout)); it must then read every
/// snapshot and the head exactly as the model says. Returns the map.
fn serve_alone(
    rt: &compio::runtime::Runtime,
    osds: &mut BTreeMap<u32, TestOsd>,
    addrs: &BTreeMap<u32, SocketAddr>,
    last: u32,
    (epoch, past): (u64, (u64, Acting)),
    model: &Model,
) -> ShardMap {
    let others: Vec<u32> = osds.keys().copied().filter(|i| *i != last).collect();
    for i in others {
        osds.remove(&i).expect("running").stop();
    }
    let alone = map_with(epoch, epoch, addrs, &[last], Some(2), 1, &|i| {
        (vec![last], vec![(past.0, past.1(i))])
    });
    let osd = &osds[&last];
    install(&alone, &[osd]);
    wait_alone(osd, &format!("osd {last} alone"));
    rt.block_on(check_reads(&alone, model, &format!("osd {last} alone")));
    alone
}

/// The PGs the test objects fall in: all of them, so that recovery pulls
/// (the stale OSD is a PG's primary) and pushes (it is a replica) are both
/// exercised.
fn assert_objects_cover_every_pg() {
    let pgs: std::collections::BTreeSet<u32> = (0..OBJECTS)
        .map(|i| pg_for(POOL, PGS, ObjectId::new(VOLUME, i)).index)
        .collect();
    assert_eq!(pgs.len(), PGS as usize, "the test objects miss a PG");
}

/// An OSD down while snapshots were taken and objects overwritten,
/// discarded and deleted comes back and is recovered; then, with the
/// others stopped, it alone serves: every snapshot and the head read
/// exactly what they held, block by block.
#[test]
fn a_replica_rebuilt_by_recovery_alone_serves_every_snapshot_and_the_head() {
    assert_objects_cover_every_pg();
    let dir = tempfile::tempdir().unwrap();
    let (mut osds, mut addrs) = start_osds(dir.path(), 3);
    let all = [0, 1, 2];
    let full = |i: u32| rotated(&all, i as usize);
    let without_2 = |i: u32| full(i).into_iter().filter(|o| *o != 2).collect::<Vec<_>>();
    let rt = compio::runtime::Runtime::new().unwrap();
    let mut model = Model::default();

    let m1 = map_with(1, 1, &addrs, &all, Some(0), 2, &|i| (full(i), vec![]));
    install(&m1, &osds.values().collect::<Vec<_>>());
    wait_all_clean(&osds.values().collect::<Vec<_>>(), "interval 1");
    rt.block_on(before_snapshot(&m1, &mut model));

    // Snapshot 1 is taken; osd 2 stops and misses everything after it.
    let m2 = map_with(2, 1, &addrs, &all, Some(1), 2, &|i| (full(i), vec![]));
    install(&m2, &osds.values().collect::<Vec<_>>());
    model.snapshot(1);
    osds.remove(&2).expect("osd 2").stop();
    let degraded = |i: u32| (without_2(i), vec![(1, full(i))]);
    let m3 = map_with(3, 3, &addrs, &[0, 1], Some(1), 2, &degraded);
    install(&m3, &osds.values().collect::<Vec<_>>());
    rt.block_on(after_snapshot_1(&m3, &mut model));
    let m4 = map_with(4, 3, &addrs, &[0, 1], Some(2), 2, &degraded);
    install(&m4, &osds.values().collect::<Vec<_>>());
    model.snapshot(2);
    rt.block_on(after_snapshot_2(&m4, &mut model, 3));

    // osd 2 returns with its old copies and is recovered.
    osds.insert(2, TestOsd::start(2, osd_path(dir.path(), 2), None));
    addrs.insert(2, osds[&2].addr);
    let m5 = map_with(5, 5, &addrs, &all, Some(2), 2, &|i| {
        (full(i), vec![(1, full(i)), (3, without_2(i))])
    });
    let refs: Vec<&TestOsd> = osds.values().collect();
    install(&m5, &refs);
    wait_all_clean(&refs, "osd 2 back");
    assert!(
        recovered(&refs) > 0,
        "osd 2 missed writes: something is recovered"
    );
    rt.block_on(check_reads(&m5, &model, "after recovery"));
    let live: Vec<SocketAddr> = addrs.values().copied().collect();
    rt.block_on(same_copies(&live, "after recovery"));

    serve_alone(&rt, &mut osds, &addrs, 2, (6, (5, &full)), &model);
}

/// An OSD is taken out after snapshots were taken and objects overwritten,
/// discarded and deleted: a fourth OSD replaces it in every PG and is
/// backfilled. Once the PGs are clean the old copies are strays and are
/// reclaimed, clones too; the new OSD alone then serves every snapshot and
/// the head exactly. When the volume is removed, its copies go entirely.
#[test]
fn a_replica_built_by_backfill_alone_serves_every_snapshot_and_old_copies_are_reclaimed() {
    assert_objects_cover_every_pg();
    let dir = tempfile::tempdir().unwrap();
    let (mut osds, addrs) = start_osds(dir.path(), 4);
    let all = [0, 1, 2, 3];
    let full = |i: u32| rotated(&[0, 1, 2], i as usize);
    let moved = |i: u32| {
        full(i)
            .into_iter()
            .map(|o| if o == 2 { 3 } else { o })
            .collect::<Vec<_>>()
    };
    let rt = compio::runtime::Runtime::new().unwrap();
    let refs: Vec<&TestOsd> = osds.values().collect();
    let (model, _) = workload_in_one_interval(&rt, &refs, &addrs, &full);

    // osd 2 is out: osd 3 takes its place and is backfilled.
    let m4 = map_with(4, 4, &addrs, &all, Some(2), 2, &|i| {
        (moved(i), vec![(1, full(i))])
    });
    install(&m4, &refs);
    wait_all_clean(&refs, "backfilled");
    assert!(
        recovered(&refs) > 0,
        "osd 3 started empty: it was backfilled"
    );
    rt.block_on(check_reads(&m4, &model, "after backfill"));
    rt.block_on(same_copies(
        &[addrs[&0], addrs[&1], addrs[&3]],
        "after backfill",
    ));

    // Clean: the past is dropped, and osd 2's copies are reclaimed.
    let m5 = map_with(5, 4, &addrs, &all, Some(2), 2, &|i| (moved(i), vec![]));
    install(&m5, &refs);
    wait_reclaimed(&[addrs[&2]], &rt, "osd 2's strays");

    drop(refs);
    serve_alone(&rt, &mut osds, &addrs, 3, (6, (4, &moved)), &model);
    let refs: Vec<&TestOsd> = osds.values().collect();

    // The volume is removed (its snapshots were removed first): every copy
    // of its objects goes, clones included.
    let removed = map_with(7, 6, &addrs, &[3], None, 1, &|_| (vec![3], vec![]));
    install(&removed, &refs);
    wait_reclaimed(&[addrs[&3]], &rt, "the removed volume");
}

/// Blocks of the default 4 MiB object.
const OBJECT_BLOCKS: usize = 1024;

/// Writes generation `generation` over the whole of `oid`, 1 MiB at a time.
async fn write_whole(m: &ShardMap, oid: ObjectId, generation: u64, seq: u64) {
    let chunk = pattern(generation).repeat(256);
    for off in (0..4u64).map(|i| i << 20) {
        let r = write(m, oid, off, &chunk, seq).await;
        assert_eq!(r.status, Status::Ok, "write {oid}+{off}: {}", r.message);
    }
}

/// Whether all of `oid`, read at `snap`, holds generation `generation`.
async fn holds_generation(m: &ShardMap, oid: ObjectId, snap: Option<u64>, generation: u64) -> bool {
    let want = pattern(generation);
    let mut ok = true;
    for off in (0..4u64).map(|i| i << 20) {
        let got = read_len(m, oid, off, 1 << 20, snap).await;
        ok &= got.chunks(4096).all(|b| b == want.as_slice());
    }
    ok
}

/// A fill write (a clone's flatten) writes only the blocks the object does
/// not hold: blocks a client wrote before keep the client's data, on every
/// replica, and a fill over a wholly written range changes nothing.
#[test]
fn a_fill_write_never_overwrites_what_the_object_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (osds, addrs) = start_osds(dir.path(), 3);
    let all = [0, 1, 2];
    let full = |i: u32| rotated(&all, i as usize);
    let refs: Vec<&TestOsd> = osds.values().collect();
    let m = map_with(1, 1, &addrs, &all, Some(0), 2, &|i| (full(i), vec![]));
    install(&m, &refs);
    wait_all_clean(&refs, "interval 1");
    let oid = ObjectId::new(VOLUME, 3);
    let rt = compio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // The client's blocks: 1 and 4..6 of 0..8.
        let client = [1u64, 4, 5];
        for b in client {
            let r = write(&m, oid, b * 4096, &vec![0xc1; 4096], 0).await;
            assert_eq!(r.status, Status::Ok, "{}", r.message);
        }
        let r = send_write(&m, oid, 0, &[0xf1; 8 * 4096], 0, true).await;
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        let got = read_len(&m, oid, 0, 8 * 4096, None).await;
        for (b, block) in got.chunks(4096).enumerate() {
            let want = if client.contains(&(b as u64)) {
                0xc1
            } else {
                0xf1
            };
            assert!(block.iter().all(|x| *x == want), "block {b}");
        }
        let before = pull(addrs[&0], oid).await;
        let r = send_write(&m, oid, 0, &[0xf2; 8 * 4096], 0, true).await;
        assert_eq!(r.status, Status::Ok, "{}", r.message);
        assert!(
            pull(addrs[&0], oid).await == before,
            "a fill of a wholly held range changes nothing"
        );
        let live: Vec<SocketAddr> = addrs.values().copied().collect();
        for a in &live[1..] {
            assert!(pull(*a, oid).await == before, "{a} holds the same copy");
        }
    });
}

/// OSD `addr`'s copy of `oid` a layer at a time, as it answers layer
/// pulls: the head's answer, then each clone's.
async fn pull_by_layer(addr: SocketAddr, oid: ObjectId) -> Vec<(Message, Vec<u8>)> {
    let (c, target) = as_peer(addr, oid).await;
    let c = &c;
    let layer = |layer| async move {
        let req = Message::PullLayer(PullLayerReq { target, layer });
        let (m, d) = c
            .call(&req, None, Duration::from_secs(20))
            .await
            .expect("osd answers");
        (m, d.map(|d| d.to_vec()).unwrap_or_default())
    };
    let head = layer(0).await;
    let Message::SnapCopy(copy) = &head.0 else {
        panic!(
            "{addr}: {oid}'s head comes without its layout: {:?}",
            head.0
        );
    };
    let ids: Vec<u64> = copy.snaps.clones.iter().map(|c| c.id).collect();
    let mut out = vec![head];
    for id in ids {
        out.push(layer(id).await);
    }
    out
}

/// Objects whose head and four clones (20 MiB) do not fit one message are
/// recovered a layer at a time, in both directions: one where the stale
/// OSD is the PG's primary (it pulls the layers) and one where it is a
/// replica (the primary sends a fetch, the replica pulls the layers); and
/// one whose head was deleted, which lives on in five clones.
/// Every PG comes back clean, every member holds the same layers, and the
/// rebuilt OSD alone serves every snapshot of both exactly.
#[test]
fn objects_too_large_for_one_message_are_recovered_a_layer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let (mut osds, mut addrs) = start_osds(dir.path(), 3);
    let all = [0, 1, 2];
    let full = |i: u32| rotated(&all, i as usize);
    let without_2 = |i: u32| full(i).into_iter().filter(|o| *o != 2).collect::<Vec<_>>();
    let find = |primary_is_2: bool| {
        (0..)
            .map(|i| ObjectId::new(VOLUME, i))
            .find(|o| (full(pg_for(POOL, PGS, *o).index)[0] == 2) == primary_is_2)
            .expect("an object in such a PG")
    };
    let bigs = [find(true), find(false)];
    // Lives on for its snapshots only: its head is deleted after a fifth
    // snapshot, so its clones alone (20 MiB) do not fit one message.
    let headless = (0..)
        .map(|i| ObjectId::new(VOLUME, i))
        .find(|o| !bigs.contains(o))
        .expect("a third object");
    let rt = compio::runtime::Runtime::new().unwrap();
    assert_eq!(OBJECT_BLOCKS * 4096, 4 << 20);

    let m1 = map_with(1, 1, &addrs, &all, Some(0), 2, &|i| (full(i), vec![]));
    install(&m1, &osds.values().collect::<Vec<_>>());
    wait_all_clean(&osds.values().collect::<Vec<_>>(), "interval 1");
    let all_three = [bigs[0], bigs[1], headless];
    rt.block_on(async {
        for big in all_three {
            write_whole(&m1, big, 100, 0).await;
        }
    });

    // osd 2 stops; four snapshots, each followed by a full overwrite.
    osds.remove(&2).expect("osd 2").stop();
    let degraded = |i: u32| (without_2(i), vec![(1, full(i))]);
    for seq in 1..=4u64 {
        let m = map_with(1 + seq, 2, &addrs, &[0, 1], Some(seq), 2, &degraded);
        install(&m, &osds.values().collect::<Vec<_>>());
        rt.block_on(async {
            for big in all_three {
                write_whole(&m, big, 100 + seq, seq).await;
            }
        });
    }
    // A fifth snapshot, then the third object's head is deleted.
    let m5 = map_with(6, 2, &addrs, &[0, 1], Some(5), 2, &degraded);
    install(&m5, &osds.values().collect::<Vec<_>>());
    rt.block_on(async {
        let op = SubOp {
            snap_seq: 5,
            ..sub_op(&m5, headless, Version::new(2, 1_000_000), SubOpKind::Delete)
        };
        for member in &m5.pgs[&op.target.pg].acting {
            let r = as_primary(&m5, *member, &op, None).await;
            assert_eq!(r.status, Status::Ok, "delete on {member}: {}", r.message);
        }
    });
    let whole = rt.block_on(pull(addrs[&0], bigs[0]));
    assert!(
        matches!(&whole.0, Message::Reply(r) if r.status == Status::InvalidArgument
            && r.message.contains("more than one message carries")),
        "a whole pull is refused: {:?}",
        whole.0
    );

    // osd 2 returns and is recovered.
    osds.insert(2, TestOsd::start(2, osd_path(dir.path(), 2), None));
    addrs.insert(2, osds[&2].addr);
    let back = map_with(7, 7, &addrs, &all, Some(5), 2, &|i| {
        (full(i), vec![(1, full(i)), (2, without_2(i))])
    });
    let refs: Vec<&TestOsd> = osds.values().collect();
    install(&back, &refs);
    wait_all_clean(&refs, "osd 2 back");
    assert!(recovered(&refs) >= 3, "the three objects were recovered");
    rt.block_on(async {
        for big in all_three {
            let layers = pull_by_layer(addrs[&0], big).await;
            let clones = if big == headless { 5 } else { 4 };
            assert_eq!(
                layers.len(),
                1 + clones,
                "{big}: the head's answer and each clone's"
            );
            for o in [1, 2] {
                assert!(
                    pull_by_layer(addrs[&o], big).await == layers,
                    "{big} differs on osd {o}"
                );
            }
        }
    });

    // osd 2 alone serves all three whole.
    drop(refs);
    for i in [0, 1] {
        osds.remove(&i).expect("running").stop();
    }
    let alone = map_with(8, 8, &addrs, &[2], Some(5), 1, &|i| {
        (vec![2], vec![(7, full(i))])
    });
    let osd = &osds[&2];
    install(&alone, &[osd]);
    wait_alone(osd, "osd 2 alone");
    rt.block_on(async {
        for big in bigs {
            assert!(
                holds_generation(&alone, big, None, 104).await,
                "{big}: head"
            );
        }
        for big in all_three {
            for snap in 1..=4u64 {
                assert!(
                    holds_generation(&alone, big, Some(snap), 99 + snap).await,
                    "{big}: snapshot {snap}"
                );
            }
        }
        assert!(
            holds_generation(&alone, headless, Some(5), 104).await,
            "{headless}: snapshot 5"
        );
        assert_eq!(
            read_len(&alone, headless, 0, 4096, None).await,
            vec![0u8; 4096],
            "{headless}: no head"
        );
    });
}

/// Makes OSD `osd` lose every clone of the test objects while its heads
/// stay at their versions, as recovery that copied heads only left
/// replicas: a head-only replace at the same version, in the name of the
/// object's primary.
async fn drop_clones(m: &ShardMap, osd: u32) {
    for idx in 0..OBJECTS {
        let oid = ObjectId::new(VOLUME, idx);
        let (answer, data) = pull(m.addrs[&OsdId(osd)][0], oid).await;
        let Message::SnapCopy(c) = answer else {
            // Untouched since before the first snapshot: no clones.
            continue;
        };
        let head_bytes: u64 = c.extents.iter().map(|(_, len)| len).sum();
        let head = &data[..head_bytes as usize];
        let op = SubOp {
            extents: c.extents,
            data_crc: crc32c::crc32c(head),
            ..sub_op(m, oid, c.version, SubOpKind::Replace)
        };
        let r = as_primary(m, OsdId(osd), &op, Some(head)).await;
        assert_eq!(
            r.status,
            Status::Ok,
            "dropping {oid}'s clones: {}",
            r.message
        );
    }
}

/// A replica that lost its clones but kept its heads at the right versions
/// (what head-only recovery left behind) reads wrong snapshots and looks
/// clean to peering; a deep scrub finds every such object and repairs it
/// with whole copies, after which it alone serves every snapshot exactly.
#[test]
fn a_deep_scrub_finds_a_replica_without_its_clones_and_repairs_it() {
    assert_objects_cover_every_pg();
    let dir = tempfile::tempdir().unwrap();
    let (mut osds, addrs) = start_osds(dir.path(), 3);
    let all = [0, 1, 2];
    let full = |i: u32| rotated(&all, i as usize);
    let rt = compio::runtime::Runtime::new().unwrap();
    let refs: Vec<&TestOsd> = osds.values().collect();
    let (model, m3) = workload_in_one_interval(&rt, &refs, &addrs, &full);
    rt.block_on(drop_clones(&m3, 2));
    let damaged = (0..OBJECTS).any(|idx| {
        let oid = ObjectId::new(VOLUME, idx);
        rt.block_on(async { pull(addrs[&0], oid).await != pull(addrs[&2], oid).await })
    });
    assert!(damaged, "osd 2 lost its clones");

    // Every PG is deep-scrubbed on request.
    let mut m4 = map_with(4, 1, &addrs, &all, Some(2), 2, &|i| (full(i), vec![]));
    for i in 0..PGS {
        let request = pontoon_cluster::ScrubRequest {
            deep: true,
            epoch: Epoch(4),
        };
        m4.scrub_requests.insert(
            PgId {
                pool: POOL,
                index: i,
            },
            request,
        );
    }
    install(&m4, &refs);
    wait_all(&refs, "deep scrubs", |s| {
        s.scrub
            .as_ref()
            .is_some_and(|r| r.deep_scrub_epoch >= Epoch(4))
    });
    let repaired: u64 = refs
        .iter()
        .flat_map(|o| o.status())
        .filter_map(|s| s.scrub.map(|r| r.repaired))
        .sum();
    assert!(repaired > 0, "the scrubs repaired osd 2");
    let live: Vec<SocketAddr> = addrs.values().copied().collect();
    rt.block_on(same_copies(&live, "after the scrubs"));

    drop(refs);
    serve_alone(&rt, &mut osds, &addrs, 2, (5, (1, &full)), &model);
}
