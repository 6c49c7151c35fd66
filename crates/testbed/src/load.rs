//! A load on a volume from the test process, through the client library,
//! with the history of every operation, and the checks made of it once the
//! cluster has healed.
//!
//! [`Load::start`] runs several workers on one compio runtime, on a thread
//! of its own: each picks a block of a small region at random (the region
//! spreads over every object of the volume, so over many PGs and every
//! OSD as primary), writes it with a value never written before
//! ([`pontoon_sim::workload::encode`]: self-checking 4 KiB) or reads it
//! back, and records the operation as a [`pontoon_sim::workload::Op`]
//! (times since the load started). [`Load::finish`] stops the workers,
//! reads every block once more (part of the history) and returns the
//! history, which [`pontoon_sim::checker::check`] judges: no acknowledged
//! write lost, no stale or torn read. [`replicas_identical`] compares the
//! copies of every object on every acting member, as a peer OSD would see
//! them, and [`Figures`] says how long I/O stalled around a fault.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pontoon_client::{Client, MapFeed, Volume};
use pontoon_cluster::ClusterMap;
use pontoon_cluster::auth::EntityName;
use pontoon_net::{ClientAuth, Key, Limits, RpcConn, WireMode};
use pontoon_proto::{Message, Role, SnapLayout, Status, Target};
use pontoon_sim::workload::{
    BLOCK, Kind, Op, Outcome, decode, describe_difference, encode, offset_of,
};
use pontoon_types::{ObjectId, OsdId, PgId};

use crate::testbed::lock;

/// The `client` of the final reads in the history.
pub const FINAL_READER: u32 = 999;
/// The OSD id the replica comparison connects as (no real OSD has it).
const INSPECTOR: OsdId = OsdId(9999);
/// Between two looks at the history while waiting on it.
const POLL: Duration = Duration::from_millis(100);

/// What the load does.
#[derive(Clone, Copy, Debug)]
pub struct LoadShape {
    /// Concurrent workers.
    pub workers: u32,
    /// Blocks of the region (4 KiB each).
    pub blocks: u32,
    /// Blocks used per object: block `b` is block `b % n` of object `b / n`.
    pub blocks_per_object: u32,
    /// Longest pause of a worker between two operations (random up to it).
    pub max_think: Duration,
}

impl Default for LoadShape {
    /// 8 workers on 64 blocks, 2 per object (32 objects), pausing up to 10 ms.
    fn default() -> Self {
        Self {
            workers: 8,
            blocks: 64,
            blocks_per_object: 2,
            max_think: Duration::from_millis(10),
        }
    }
}

/// The history, shared by the load's thread and the test's.
struct Recorder {
    t0: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    fn invoke(&self, client: u32, block: u32, kind: Kind) -> usize {
        let mut ops = lock(&self.ops);
        ops.push(Op {
            client,
            block,
            kind,
            invoke: self.t0.elapsed(),
            complete: None,
            outcome: Outcome::Pending,
        });
        ops.len() - 1
    }

    fn complete(&self, i: usize, outcome: Outcome) {
        let mut ops = lock(&self.ops);
        ops[i].complete = Some(self.t0.elapsed());
        ops[i].outcome = outcome;
    }
}

/// A running load (see the module's description). Dropping it without
/// [`Load::finish`] stops its workers.
pub struct Load {
    rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
    feed: Arc<MapFeed>,
    shape: LoadShape,
    /// The PG of each block.
    block_pgs: Vec<PgId>,
    /// Moments the test marked, for the report.
    marks: Mutex<Vec<(Duration, String)>>,
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Load")
            .field("shape", &self.shape)
            .field("elapsed", &self.elapsed())
            .finish()
    }
}

impl Load {
    /// Starts `shape.workers` workers on volume `volume` of cluster
    /// `cluster` (etcd at `endpoints`), from a thread of the test process.
    /// The region must fit in the volume.
    pub fn start(endpoints: &[String], cluster: &str, volume: &str, shape: LoadShape) -> Load {
        assert!(shape.workers > 0 && shape.blocks > 0 && shape.blocks_per_object > 0);
        let feed = MapFeed::connect(endpoints, cluster)
            .unwrap_or_else(|e| panic!("the load cannot watch the cluster map: {e}"));
        let map = feed.current();
        let v = map
            .volume_by_name(volume)
            .unwrap_or_else(|| panic!("no volume {volume} in the map"))
            .clone();
        let objects = u64::from(shape.blocks.div_ceil(shape.blocks_per_object));
        assert!(
            objects <= v.object_count()
                && u64::from(shape.blocks_per_object) * BLOCK as u64 <= v.object_size,
            "the region ({} blocks, {} per object) does not fit volume {volume} ({} objects of {} bytes)",
            shape.blocks,
            shape.blocks_per_object,
            v.object_count(),
            v.object_size
        );
        let block_pgs = (0..shape.blocks)
            .map(|b| {
                let oid = ObjectId::new(v.id.0, u64::from(b / shape.blocks_per_object));
                map.pg_of_object(&oid).expect("every object has a PG")
            })
            .collect();
        let rec = Arc::new(Recorder {
            t0: Instant::now(),
            ops: Mutex::new(Vec::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (rec, stop, feed) = (rec.clone(), stop.clone(), feed.clone());
            let volume = volume.to_string();
            let object_size = v.object_size;
            std::thread::Builder::new()
                .name("load".into())
                .spawn(move || run(rec, stop, feed, &volume, object_size, shape))
                .expect("cannot start the load's thread")
        };
        Load {
            rec,
            stop,
            thread: Some(thread),
            feed,
            shape,
            block_pgs,
            marks: Mutex::new(Vec::new()),
        }
    }

    /// Time since the load started (the history's clock).
    pub fn elapsed(&self) -> Duration {
        self.rec.t0.elapsed()
    }

    /// Converts an instant to the history's clock.
    pub fn at(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.rec.t0)
    }

    /// The load's shape.
    pub fn shape(&self) -> LoadShape {
        self.shape
    }

    /// The map feed the load routes by.
    pub fn feed(&self) -> &Arc<MapFeed> {
        &self.feed
    }

    /// Notes the moment of `what` (printed by the test's report); returns it.
    pub fn mark(&self, what: &str) -> Duration {
        let t = self.elapsed();
        eprintln!("[{:7.2} s] {what}", t.as_secs_f64());
        lock(&self.marks).push((t, what.to_string()));
        t
    }

    /// Every moment marked so far.
    pub fn marks(&self) -> Vec<(Duration, String)> {
        lock(&self.marks).clone()
    }

    /// A copy of the history so far.
    pub fn ops(&self) -> Vec<Op> {
        lock(&self.rec.ops).clone()
    }

    /// The PG of each block of the region.
    pub fn block_pgs(&self) -> &[PgId] {
        &self.block_pgs
    }

    /// The PGs of the region.
    pub fn pgs(&self) -> BTreeSet<PgId> {
        self.block_pgs.iter().copied().collect()
    }

    /// The PGs of the region whose acting set in `map` holds any of `osds`.
    pub fn pgs_acting_on(&self, map: &ClusterMap, osds: &[OsdId]) -> BTreeSet<PgId> {
        self.pgs()
            .into_iter()
            .filter(|pg| {
                map.pgs
                    .get(pg)
                    .is_some_and(|r| r.acting.iter().any(|o| osds.contains(o)))
            })
            .collect()
    }

    /// How many blocks of the region each OSD is the primary of in `map`.
    pub fn primaries(&self, map: &ClusterMap) -> BTreeMap<OsdId, usize> {
        let mut out = BTreeMap::new();
        for pg in &self.block_pgs {
            if let Some(p) = map.pgs.get(pg).and_then(|r| r.primary()) {
                *out.entry(p).or_default() += 1;
            }
        }
        out
    }

    /// Whether the load's thread has ended (it only does on
    /// [`Load::finish`], or if it failed).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Waits up to `timeout` until `n` operations have succeeded.
    pub fn wait_ok_ops(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let ok = lock(&self.rec.ops)
                .iter()
                .filter(|o| matches!(o.outcome, Outcome::Ok(_)))
                .count();
            if ok >= n {
                return Ok(());
            }
            if Instant::now() >= deadline || !self.is_running() {
                return Err(format!(
                    "{ok} of {n} operations succeeded within {timeout:?} (load running: {})",
                    self.is_running()
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits up to `timeout` until every PG of `pgs` has acknowledged a
    /// write invoked at `since` or later; returns when the last of them did
    /// (history clock). The error names the PGs still waiting.
    pub fn wait_writes_acked(
        &self,
        pgs: &BTreeSet<PgId>,
        since: Duration,
        timeout: Duration,
    ) -> Result<Duration, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let firsts = first_write_acks(&lock(&self.rec.ops), &self.block_pgs, since);
            let waiting: Vec<PgId> = pgs
                .iter()
                .filter(|pg| !firsts.contains_key(pg))
                .copied()
                .collect();
            if waiting.is_empty() {
                return Ok(pgs
                    .iter()
                    .filter_map(|pg| firsts.get(pg))
                    .max()
                    .copied()
                    .unwrap_or(since));
            }
            if Instant::now() >= deadline || !self.is_running() {
                let names: Vec<String> = waiting.iter().map(|p| p.to_string()).collect();
                return Err(format!(
                    "no write invoked after {:.2} s was acknowledged within {timeout:?} on PGs {}",
                    since.as_secs_f64(),
                    names.join(", ")
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Stops the workers (each ends its operation in flight first), reads
    /// every block of the region once more, and returns the whole history.
    /// Call once the cluster is healed and clean.
    pub fn finish(mut self) -> Result<Vec<Op>, String> {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.take().expect("finish runs once");
        let result = thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        let ops = lock(&self.rec.ops).clone();
        result.map(|()| ops)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// A small pseudo-random sequence (splitmix over `pontoon_types::mix64`),
/// for the load's choices and the thrash test's.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        pontoon_types::mix64(self.0)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Two distinct indices below `n` (at least 2).
    pub fn two(&mut self, n: u64) -> (usize, usize) {
        let a = self.next_u64() % n;
        let b = (a + 1 + self.next_u64() % (n - 1)) % n;
        (a as usize, b as usize)
    }
}

/// The load's thread: workers until stopped, then the final reads.
fn run(
    rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    feed: Arc<MapFeed>,
    volume: &str,
    object_size: u64,
    shape: LoadShape,
) -> Result<(), String> {
    let rt = compio::runtime::Runtime::new().map_err(|e| format!("compio runtime: {e}"))?;
    rt.block_on(async {
        let client = Client::new(feed);
        let vol = client
            .open(volume)
            .map_err(|e| format!("opening volume {volume}: {e}"))?;
        let next_value = Rc::new(Cell::new(0u64));
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let workers = (0..shape.workers).map(|w| {
            let (rec, stop, vol, next_value) =
                (rec.clone(), stop.clone(), vol.clone(), next_value.clone());
            async move {
                let mut rng = Rng(seed ^ (u64::from(w) << 56));
                while !stop.load(Ordering::Acquire) {
                    let r = rng.next_u64();
                    let block = (r % u64::from(shape.blocks)) as u32;
                    let at = offset_of(block, shape.blocks_per_object, object_size);
                    if (r >> 32) & 1 == 0 {
                        let id = next_value.get() + 1;
                        next_value.set(id);
                        write_one(&rec, &vol, w, block, at, id).await;
                    } else {
                        read_one(&rec, &vol, w, block, at).await;
                    }
                    let think = shape.max_think.as_micros() as u64;
                    if think > 0 {
                        compio::time::sleep(Duration::from_micros((r >> 40) % think)).await;
                    }
                }
            }
        });
        futures::future::join_all(workers).await;
        for b in 0..shape.blocks {
            let at = offset_of(b, shape.blocks_per_object, object_size);
            read_one(&rec, &vol, FINAL_READER, b, at).await;
        }
        Ok(())
    })
}

async fn write_one(rec: &Recorder, vol: &Volume, client: u32, block: u32, at: u64, id: u64) {
    let i = rec.invoke(client, block, Kind::Write(id));
    let out = match vol.write_at(at, &encode(id)).await {
        Ok(()) => Outcome::Ok(None),
        Err(e) => Outcome::Failed(e.to_string()),
    };
    rec.complete(i, out);
}

async fn read_one(rec: &Recorder, vol: &Volume, client: u32, block: u32, at: u64) {
    let i = rec.invoke(client, block, Kind::Read);
    let out = match vol.read_at(at, BLOCK as u64).await {
        Ok(buf) => match decode(&buf) {
            Ok(v) => Outcome::Ok(Some(v)),
            Err(e) => Outcome::Garbled(e),
        },
        Err(e) => Outcome::Failed(e.to_string()),
    };
    rec.complete(i, out);
}

/// Per PG, when the first write invoked at `since` or later was
/// acknowledged.
fn first_write_acks(ops: &[Op], block_pgs: &[PgId], since: Duration) -> BTreeMap<PgId, Duration> {
    let mut out: BTreeMap<PgId, Duration> = BTreeMap::new();
    for op in ops {
        let (Kind::Write(_), Outcome::Ok(_), Some(done)) = (&op.kind, &op.outcome, op.complete)
        else {
            continue;
        };
        if op.invoke < since {
            continue;
        }
        let Some(pg) = block_pgs.get(op.block as usize) else {
            continue;
        };
        let e = out.entry(*pg).or_insert(done);
        *e = (*e).min(done);
    }
    out
}

/// A stall shorter than this does not count as I/O having stopped (the
/// client looks for a new route once a second).
pub const STALL_THRESHOLD: Duration = Duration::from_secs(1);

/// What a fault did to the load.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// From the fault until I/O resumed: the end of the longest stall,
    /// less the fault's time; zero if no stall reached
    /// [`STALL_THRESHOLD`].
    pub resumed: Duration,
    /// The longest time in the window during which no operation of the
    /// load (read or write) was acknowledged.
    pub longest_stall: Duration,
    /// Where that stall began (history clock).
    pub stall_from: Duration,
    /// From the fault until every affected PG had acknowledged a write
    /// invoked after the fault (`None`: some affected PG never did).
    pub all_pgs_written: Option<Duration>,
    /// Operations of the load invoked in the window (final reads excluded).
    pub ops: usize,
    /// Of those, how many failed (an error from the client library).
    pub failed: usize,
}

impl Figures {
    /// The figures of the window `[fault, end]`, for a fault that affected
    /// the PGs `affected` (the PG of each block is `block_pgs[block]`).
    ///
    /// - `longest_stall`: the longest gap in the window between two
    ///   acknowledgements of any operation (the window's ends count as
    ///   acknowledgements). Every PG of the scenario rig spans the three
    ///   OSD hosts, so a fault that stops I/O stops it for every worker
    ///   within moments (each soon picks a block of a stuck PG): the
    ///   longest gap is the disruption, wherever in the window it falls (a
    ///   lease lapses some seconds after a cut from etcd, say).
    /// - `resumed`: when that stall ended, from the fault: the time until
    ///   I/O resumed. Zero if the longest stall is under
    ///   [`STALL_THRESHOLD`]: I/O never stopped.
    /// - `all_pgs_written`: for each affected PG, the first
    ///   acknowledgement of a write on it invoked at the fault or later;
    ///   the latest of those, less the fault's time. A write waits for
    ///   every member of the acting set, so this is when the last affected
    ///   PG had served a write again (in a new interval, or the old one if
    ///   the fault did not stop it).
    pub fn of(
        ops: &[Op],
        block_pgs: &[PgId],
        affected: &BTreeSet<PgId>,
        fault: Duration,
        end: Duration,
    ) -> Figures {
        let load: Vec<&Op> = ops.iter().filter(|o| o.client != FINAL_READER).collect();
        let firsts = first_write_acks(ops, block_pgs, fault);
        let all_pgs_written = affected
            .iter()
            .map(|pg| firsts.get(pg).map(|t| t.saturating_sub(fault)))
            .collect::<Option<Vec<Duration>>>()
            .map(|v| v.into_iter().max().unwrap_or_default());
        let mut acks: Vec<Duration> = load
            .iter()
            .filter(|o| matches!(o.outcome, Outcome::Ok(_)))
            .filter_map(|o| o.complete)
            .filter(|t| *t > fault && *t < end)
            .collect();
        acks.push(fault);
        acks.push(end);
        acks.sort();
        let (mut longest_stall, mut stall_from) = (Duration::ZERO, fault);
        for w in acks.windows(2) {
            if w[1] - w[0] > longest_stall {
                longest_stall = w[1] - w[0];
                stall_from = w[0];
            }
        }
        let resumed = if longest_stall >= STALL_THRESHOLD {
            (stall_from + longest_stall).saturating_sub(fault)
        } else {
            Duration::ZERO
        };
        let in_window: Vec<&&Op> = load
            .iter()
            .filter(|o| o.invoke >= fault && o.invoke < end)
            .collect();
        Figures {
            resumed,
            longest_stall,
            stall_from,
            all_pgs_written,
            ops: in_window.len(),
            failed: in_window
                .iter()
                .filter(|o| matches!(o.outcome, Outcome::Failed(_)))
                .count(),
        }
    }

    /// `resumed after Y s, longest stall Z s, N ops, M failed`.
    pub fn line(&self) -> String {
        format!(
            "resumed after {:.1} s, longest stall {:.1} s, {} ops, {} failed",
            self.resumed.as_secs_f64(),
            self.longest_stall.as_secs_f64(),
            self.ops,
            self.failed
        )
    }
}

/// What the history holds: operations of the load (final reads
/// excluded), how many failed, and the first few failures' errors.
pub fn summary(ops: &[Op]) -> (usize, usize, Vec<String>) {
    let load: Vec<&Op> = ops.iter().filter(|o| o.client != FINAL_READER).collect();
    let failures: Vec<String> = load
        .iter()
        .filter_map(|o| match &o.outcome {
            Outcome::Failed(e) => Some(format!(
                "client {} {:?} block {} at {:.2} s: {e}",
                o.client,
                o.kind,
                o.block,
                o.invoke.as_secs_f64()
            )),
            _ => None,
        })
        .collect();
    let n = failures.len();
    (load.len(), n, failures.into_iter().take(5).collect())
}

/// Everything wrong with a finished history: the checker's violations
/// (lost acknowledged writes, stale, torn or invented reads), operations
/// still pending, and final reads that failed (they run on a healed, clean
/// cluster, so each must succeed).
pub fn violations(ops: &[Op]) -> Vec<String> {
    let mut out = pontoon_sim::checker::check(ops);
    for o in ops {
        match &o.outcome {
            Outcome::Pending => out.push(format!(
                "client {} {:?} block {} invoked at {:.2} s never returned",
                o.client,
                o.kind,
                o.block,
                o.invoke.as_secs_f64()
            )),
            Outcome::Failed(e) if o.client == FINAL_READER => {
                out.push(format!("final read of block {} failed: {e}", o.block))
            }
            _ => {}
        }
    }
    let finals = ops.iter().filter(|o| o.client == FINAL_READER).count();
    if finals == 0 {
        out.push("the history has no final reads".into());
    }
    out
}

/// One copy of an object as an acting member holds it.
/// A member's copy: who, version, head extents, snapshot layout (objects
/// with snapshot state), and every byte (the head's, then the clones').
type Copy = (
    OsdId,
    pontoon_types::Version,
    Vec<(u64, u64)>,
    Option<SnapLayout>,
    Vec<u8>,
);

/// Whether every acting member of the PG of every object of `volume`
/// (the first `objects` of them, if given) holds the same version and the
/// same bytes of it, snapshot clones included (asked with `Pull`, as a peer OSD would, in the
/// interval of `map`), and every PG has as many members as its pool's
/// size. Returns how many objects were compared, or what differs. Runs on
/// a compio runtime of a thread of its own.
pub fn replicas_identical(
    map: &ClusterMap,
    volume: &str,
    objects: Option<u64>,
) -> Result<u64, Vec<String>> {
    let map = map.clone();
    let volume = volume.to_string();
    std::thread::spawn(move || {
        let rt = compio::runtime::Runtime::new().expect("compio runtime");
        rt.block_on(compare(&map, &volume, objects))
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

async fn compare(map: &ClusterMap, volume: &str, objects: Option<u64>) -> Result<u64, Vec<String>> {
    let Some(v) = map.volume_by_name(volume) else {
        return Err(vec![format!(
            "no volume {volume} in map epoch {}",
            map.epoch
        )]);
    };
    let size = map.pools.get(&v.pool).map_or(0, |p| p.size as usize);
    let mut problems = Vec::new();
    let mut conns: BTreeMap<std::net::SocketAddr, Rc<RpcConn>> = BTreeMap::new();
    let auth = inspector_auth(map).map_err(|e| vec![e])?;
    let count = objects.map_or(v.object_count(), |n| n.min(v.object_count()));
    for index in 0..count {
        let oid = ObjectId::new(v.id.0, index);
        let Some(pg) = map.pg_of_object(&oid) else {
            problems.push(format!("{oid} has no PG"));
            continue;
        };
        let Some(rec) = map.pgs.get(&pg) else {
            problems.push(format!("{pg} is not in the map"));
            continue;
        };
        if rec.acting.len() != size {
            problems.push(format!(
                "{pg} has {} acting members, not {size}: {:?}",
                rec.acting.len(),
                rec.acting
            ));
        }
        let mut copies: Vec<Copy> = Vec::new();
        for osd in &rec.acting {
            match pull(map, auth.as_ref(), &mut conns, *osd, pg, rec.interval, oid).await {
                Ok(c) => copies.push(c),
                Err(e) => problems.push(format!("{oid} on {osd}: {e}")),
            }
        }
        if let Some(first) = copies.first() {
            for c in &copies[1..] {
                if (c.1, &c.2, &c.3, &c.4) != (first.1, &first.2, &first.3, &first.4) {
                    problems.push(format!(
                        "{oid} ({pg}, interval {}): {} holds version {} ({} bytes in {:?}) but {} holds version {} ({} bytes in {:?}){}",
                        rec.interval,
                        first.0,
                        first.1,
                        first.4.len(),
                        first.2,
                        c.0,
                        c.1,
                        c.4.len(),
                        c.2,
                        if first.3 != c.3 {
                            format!(": snapshot clones differ ({:?} / {:?})", first.3, c.3)
                        } else if first.2 == c.2 {
                            describe_difference(&first.4, &c.4)
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(count)
    } else {
        Err(problems)
    }
}

/// In a protected `ms_mode`, the identity the inspector proves: only an
/// OSD of the map with `profile osd` may pull, so it speaks as the first
/// OSD with a key (whose key the map holds). `None` in mode none, where a
/// plain hello as [`INSPECTOR`] is enough.
fn inspector_auth(map: &ClusterMap) -> Result<Option<ClientAuth>, String> {
    if map.settings.ms_mode == WireMode::None {
        return Ok(None);
    }
    let (entity, rec) = map
        .osds
        .keys()
        .find_map(|id| {
            let e = EntityName::osd(id.0);
            map.auth.get(&e).map(|r| (e, r))
        })
        .ok_or_else(|| {
            format!(
                "ms_mode {}: no OSD key in the map to pull with",
                map.settings.ms_mode
            )
        })?;
    let key = Key::from_bytes(*rec.keys.current().key.as_bytes());
    ClientAuth::new(map.settings.ms_mode, &entity.to_string(), key)
        .map(Some)
        .map_err(|e| format!("{entity}'s credentials: {e}"))
}

async fn pull(
    map: &ClusterMap,
    auth: Option<&ClientAuth>,
    conns: &mut BTreeMap<std::net::SocketAddr, Rc<RpcConn>>,
    osd: OsdId,
    pg: PgId,
    interval: pontoon_types::Epoch,
    oid: ObjectId,
) -> Result<Copy, String> {
    let addr = map
        .addr_of(osd, pg)
        .ok_or_else(|| format!("{osd} has no address"))?;
    let conn = match conns.get(&addr) {
        Some(c) => c.clone(),
        None => {
            let c = match auth {
                None => RpcConn::connect(addr, Role::Osd(INSPECTOR), Duration::from_secs(5)).await,
                Some(auth) => {
                    RpcConn::connect_auth(addr, auth, Duration::from_secs(5), Limits::default())
                        .await
                }
            }
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
            conns.insert(addr, c.clone());
            c
        }
    };
    let t = Target {
        pg,
        epoch: interval,
        oid,
    };
    let (reply, data) = conn
        .call(&Message::Pull(t), None, Duration::from_secs(10))
        .await
        .map_err(|e| format!("pull from {addr}: {e}"))?;
    let data = data.map(|d| d.to_vec()).unwrap_or_default();
    match reply {
        Message::Reply(r) if r.status == Status::Ok => Ok((osd, r.version, r.ranges, None, data)),
        Message::Reply(r) => Err(format!("pull: {:?}: {}", r.status, r.message)),
        Message::SnapCopy(c) => Ok((osd, c.version, c.extents, Some(c.snaps), data)),
        other => Err(format!("pull answered with {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(n: u32) -> PgId {
        PgId {
            pool: pontoon_types::PoolId(1),
            index: n,
        }
    }

    fn op(client: u32, block: u32, kind: Kind, a: u64, b: u64, out: Outcome) -> Op {
        Op {
            client,
            block,
            kind,
            invoke: Duration::from_millis(a),
            complete: Some(Duration::from_millis(b)),
            outcome: out,
        }
    }

    #[test]
    fn figures_measure_the_resume_of_affected_pgs_and_the_longest_gap() {
        let block_pgs = [pg(0), pg(1)];
        let ops = [
            op(0, 0, Kind::Write(1), 0, 900, Outcome::Ok(None)),
            // Stuck across the fault: acknowledged late, invoked before it.
            op(1, 1, Kind::Write(2), 950, 4_000, Outcome::Ok(None)),
            op(0, 0, Kind::Read, 1_100, 1_200, Outcome::Ok(Some(1))),
            op(0, 1, Kind::Write(3), 4_100, 4_300, Outcome::Ok(None)),
            op(
                0,
                0,
                Kind::Write(4),
                4_400,
                4_500,
                Outcome::Failed("x".into()),
            ),
            op(
                FINAL_READER,
                0,
                Kind::Read,
                9_000,
                9_100,
                Outcome::Ok(Some(1)),
            ),
        ];
        let affected = [pg(1)].into_iter().collect();
        let f = Figures::of(
            &ops,
            &block_pgs,
            &affected,
            Duration::from_millis(1_000),
            Duration::from_millis(5_000),
        );
        assert_eq!(f.all_pgs_written, Some(Duration::from_millis(3_300)));
        assert_eq!(f.longest_stall, Duration::from_millis(2_800));
        assert_eq!(f.stall_from, Duration::from_millis(1_200));
        assert_eq!(f.resumed, Duration::from_millis(3_000));
        assert_eq!((f.ops, f.failed), (3, 1));
        assert_eq!(
            f.line(),
            "resumed after 3.0 s, longest stall 2.8 s, 3 ops, 1 failed"
        );
        let none: BTreeSet<PgId> = [pg(0)].into_iter().collect();
        let f = Figures::of(
            &ops,
            &block_pgs,
            &none,
            Duration::from_millis(4_450),
            Duration::from_millis(5_000),
        );
        assert_eq!(f.all_pgs_written, None);
        // A stall under a second is no stop.
        assert_eq!(f.longest_stall, Duration::from_millis(550));
        assert_eq!(f.resumed, Duration::ZERO);
    }

    #[test]
    fn violations_include_pending_ops_and_failed_final_reads() {
        let mut pending = op(0, 0, Kind::Write(1), 0, 1, Outcome::Pending);
        pending.complete = None;
        let ops = [
            pending,
            op(
                FINAL_READER,
                0,
                Kind::Read,
                5,
                6,
                Outcome::Failed("down".into()),
            ),
        ];
        let v = violations(&ops);
        assert!(v.iter().any(|x| x.contains("never returned")), "{v:?}");
        assert!(v.iter().any(|x| x.contains("final read")), "{v:?}");
        assert!(
            violations(&ops[..1])
                .iter()
                .any(|x| x.contains("no final reads"))
        );
    }
}
