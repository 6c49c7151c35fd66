//! A shard: one core of an OSD, owning a store slice and the PGs whose index
//! maps to it. It takes map updates, dispatches requests to the client,
//! replica and peering paths, and reports its PGs' states.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use pontoon_buf::AlignedBuf;
use pontoon_metrics::Op;
use pontoon_net::{Frame, Handler, Peer};
use pontoon_proto::{Message, Reply, Role, Status};
use pontoon_store::{BlockDevice, SnapSpace, Store, StoreError, StoreStats, VolumeUsage};
use pontoon_types::{Epoch, OsdId, PgId, VolumeId};
use rustc_hash::FxHashMap;

use pontoon_net::budget::Budget;

use crate::deadline::LeaseDeadline;
use crate::heartbeat::Heartbeats;
use crate::locks::{InFlight, ObjectLocks};
use crate::map::ShardMap;
use crate::metrics::ShardMetrics;
use crate::peers::Peers;
use crate::pg::{Pg, Phase};
use crate::reclaim::{Reclaim, ReclaimProgress};
use crate::scrub::{PgScrub, ScrubBook};
use crate::snap_trim::{SnapTrim, SnapTrimProgress};

/// Objects recovered at once per shard unless the map says otherwise
/// (`recovery_max_active`): recovery must not starve client I/O.
pub const RECOVERY_SLOTS: usize = 2;

/// One shard of an OSD.
pub struct Shard<D: BlockDevice, P: Peers> {
    /// This OSD.
    pub me: OsdId,
    /// This shard's index.
    pub index: u32,
    /// Shards of this OSD: PG `i` belongs to shard `i % shards`.
    pub shards: u32,
    pub(crate) store: Store<D>,
    pub(crate) peers: P,
    pub(crate) map: RefCell<Rc<ShardMap>>,
    pub(crate) pgs: RefCell<FxHashMap<PgId, Pg>>,
    pub(crate) locks: Rc<ObjectLocks>,
    /// Local store mutations in flight per PG (see [`InFlight`]).
    pub(crate) inflight: Rc<InFlight>,
    /// Background recovery's slots (counted in objects; bytes unbounded).
    pub(crate) recovery: Rc<Budget>,
    /// Until when this shard may serve (its OSD's lease).
    deadline: Arc<LeaseDeadline>,
    /// What the shard knows of its peers' heartbeats.
    pub(crate) heartbeats: Heartbeats,
    generation: Cell<u64>,
    /// Deleting objects of removed volumes and stray PG copies.
    pub(crate) reclaim: Reclaim,
    /// Freeing what only removed snapshots held.
    pub(crate) snap_trim: SnapTrim,
    /// The last exclusive space per snapshot computed for reports.
    snap_space: RefCell<SnapSpaceCache>,
    /// Scrub stamps and findings per PG.
    pub(crate) scrub: ScrubBook,
    /// Deliberately broken replication, for the simulator's self-test.
    pub(crate) broken_ack: Cell<bool>,
    /// What the shard counts for the OSD's metrics (this thread writes them).
    pub(crate) metrics: Arc<ShardMetrics>,
}

/// Exclusive snapshot space is recomputed at most this often.
const SNAP_SPACE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// What [`Shard::report`] last computed of snapshot space, and from what.
#[derive(Default)]
struct SnapSpaceCache {
    epoch: Epoch,
    key: Vec<(VolumeId, u64)>,
    at: Option<std::time::Instant>,
    value: Vec<(VolumeId, Vec<SnapSpace>)>,
}

/// One PG's state for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgStatus {
    /// Which PG.
    pub pg: PgId,
    /// Interval the state belongs to.
    pub interval: Epoch,
    /// "active+clean", "peering", "incomplete", ...
    pub state: String,
    /// Why the PG is incomplete, or why its recovery waits, if it does.
    pub detail: Option<String>,
    /// Objects in the PG (known to its primary).
    pub objects: u64,
    /// Objects with fewer up-to-date copies than the pool's size.
    pub degraded: u64,
    /// Objects some acting member still lacks.
    pub missing: u64,
    /// Objects recovered in this interval.
    pub recovered: u64,
    /// What scrub knows of the PG (primaries only).
    pub scrub: Option<PgScrub>,
}

/// Everything a shard tells its control loop.
#[derive(Clone, Debug)]
pub struct ShardReport {
    /// Its PGs' states.
    pub pgs: Vec<PgStatus>,
    /// Its store's space and counters.
    pub stats: StoreStats,
    /// Objects and allocated blocks per volume in its store.
    pub volumes: Vec<(VolumeId, VolumeUsage)>,
    /// Exclusive space of each live snapshot, per volume that has any.
    pub snaps: Vec<(VolumeId, Vec<SnapSpace>)>,
    /// How far deleting garbage has got.
    pub reclaim: ReclaimProgress,
    /// What snap trim has done and has left.
    pub snap_trim: SnapTrimProgress,
    /// Why its store stopped accepting writes, if it did.
    pub store_failure: Option<String>,
    /// Peers that have not answered its heartbeats within the grace.
    pub unreachable: Vec<OsdId>,
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// A shard over an open store, serving until `deadline` allows no more.
    pub fn new(
        me: OsdId,
        index: u32,
        shards: u32,
        store: Store<D>,
        peers: P,
        deadline: Arc<LeaseDeadline>,
    ) -> Rc<Self> {
        Self::with_metrics(
            me,
            index,
            shards,
            store,
            peers,
            deadline,
            ShardMetrics::disabled(),
        )
    }

    /// Like [`Shard::new`], counting into `metrics` (see [`crate::metrics`]).
    pub fn with_metrics(
        me: OsdId,
        index: u32,
        shards: u32,
        store: Store<D>,
        peers: P,
        deadline: Arc<LeaseDeadline>,
        metrics: Arc<ShardMetrics>,
    ) -> Rc<Self> {
        Rc::new(Self {
            me,
            index,
            shards: shards.max(1),
            store,
            peers,
            map: RefCell::new(Rc::new(ShardMap::default())),
            pgs: RefCell::new(FxHashMap::default()),
            locks: Rc::new(ObjectLocks::default()),
            inflight: Rc::new(InFlight::default()),
            recovery: Budget::new(RECOVERY_SLOTS, usize::MAX),
            deadline,
            heartbeats: Heartbeats::default(),
            generation: Cell::new(0),
            reclaim: Reclaim::default(),
            snap_trim: SnapTrim::default(),
            snap_space: RefCell::new(SnapSpaceCache::default()),
            scrub: ScrubBook::default(),
            broken_ack: Cell::new(false),
            metrics,
        })
    }

    /// The store slice.
    pub fn store(&self) -> &Store<D> {
        &self.store
    }

    /// The peers transport.
    pub fn peers(&self) -> &P {
        &self.peers
    }

    /// The map in use.
    pub fn map(&self) -> Rc<ShardMap> {
        self.map.borrow().clone()
    }

    /// Whether this shard serves `pg`.
    pub fn owns(&self, pg: PgId) -> bool {
        pg.index % self.shards == self.index
    }

    /// The deadline this shard serves by.
    pub fn deadline(&self) -> &Arc<LeaseDeadline> {
        &self.deadline
    }

    /// Breaks replication on purpose: writes are acknowledged once the
    /// primary alone has them, the other members are sent theirs in the
    /// background. Only for proving that the simulator's checker catches a
    /// lost acknowledged write; never set outside that test.
    #[doc(hidden)]
    pub fn break_replication_for_tests(&self, on: bool) {
        self.broken_ack.set(on);
    }

    /// Whether the shard refuses I/O because its OSD's lease may be gone.
    pub fn is_fenced(&self) -> bool {
        !self.deadline.allows(pontoon_rt::now())
    }

    /// What the control loop needs to know of this shard.
    pub fn report(&self) -> ShardReport {
        let volumes = self.store.volume_usage();
        ShardReport {
            pgs: self.pg_status(),
            stats: self.store.stats(),
            snaps: self.snap_space(&volumes),
            volumes,
            reclaim: self.reclaim.progress(),
            snap_trim: self.snap_trim.progress(),
            store_failure: self.store.failure(),
            unreachable: self.heartbeats.unreachable(pontoon_rt::now()),
        }
    }

    /// Exclusive space per live snapshot of the volumes whose clones hold
    /// blocks, recomputed (one pass over those volumes' objects) when the
    /// map or the clone block counts changed, at most once per
    /// [`SNAP_SPACE_EVERY`].
    fn snap_space(&self, volumes: &[(VolumeId, VolumeUsage)]) -> Vec<(VolumeId, Vec<SnapSpace>)> {
        let map = self.map();
        let key: Vec<(VolumeId, u64)> = volumes
            .iter()
            .filter(|(v, u)| u.snap_blocks > 0 && !map.live_snaps(v.0).is_empty())
            .map(|(v, u)| (*v, u.snap_blocks))
            .collect();
        let now = pontoon_rt::now();
        let mut cache = self.snap_space.borrow_mut();
        let stale = cache.epoch != map.epoch || cache.key != key;
        let due = cache
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= SNAP_SPACE_EVERY);
        if stale && due {
            cache.value = key
                .iter()
                .map(|(v, _)| (*v, self.store.snap_space(*v, map.live_snaps(v.0))))
                .filter(|(_, s)| !s.is_empty())
                .collect();
            cache.key = key;
            cache.epoch = map.epoch;
            cache.at = Some(now);
        }
        cache.value.clone()
    }

    /// Installs a new map: PGs whose acting set changed start a new interval
    /// (the primary peers again); others keep their state.
    pub fn apply_map(self: &Rc<Self>, map: Rc<ShardMap>) {
        if map.epoch < self.map.borrow().epoch {
            return;
        }
        tracing::debug!(osd = %self.me, epoch = %map.epoch, "applying map");
        *self.map.borrow_mut() = map.clone();
        self.recovery.set_max_requests(map.recovery.max_active);
        let mut to_peer = Vec::new();
        {
            let mut pgs = self.pgs.borrow_mut();
            pgs.retain(|id, _| map.pgs.contains_key(id));
            for (id, entry) in map.pgs.iter() {
                if !self.owns(*id) {
                    continue;
                }
                let Some(params) = map.pools.get(&id.pool).copied() else {
                    continue;
                };
                match pgs.get_mut(id) {
                    Some(pg) if pg.entry.interval == entry.interval => {
                        pg.entry = entry.clone();
                        pg.params = params;
                    }
                    existing => {
                        let in_acting = entry.acting.contains(&self.me);
                        if existing.is_none() && !in_acting {
                            continue;
                        }
                        let promised = existing.map(|p| p.promised).unwrap_or(Epoch(0));
                        let g = self.generation.get() + 1;
                        self.generation.set(g);
                        let mut pg = Pg::new(*id, entry.clone(), params, self.me, g);
                        pg.promised = promised;
                        if pg.phase == Phase::Peering {
                            to_peer.push((*id, g));
                        }
                        pgs.insert(*id, pg);
                    }
                }
            }
        }
        for (id, g) in to_peer {
            let shard = self.clone();
            pontoon_rt::spawn(async move { shard.peer_loop(id, g).await });
        }
        self.want_reclaim();
        self.want_snap_trim(&map);
        self.start_scrubbing();
    }

    /// States of this shard's PGs in which this OSD is a member or was asked.
    pub fn pg_status(&self) -> Vec<PgStatus> {
        let mut v: Vec<PgStatus> = self
            .pgs
            .borrow()
            .values()
            .map(|pg| PgStatus {
                pg: pg.id,
                interval: pg.entry.interval,
                state: pg.state_name(),
                detail: match &pg.phase {
                    Phase::Incomplete(why) => Some(why.clone()),
                    _ => pg
                        .waiting
                        .clone()
                        .or_else(|| pg.paused.map(|p| p.note().to_string()))
                        .or_else(|| pg.failing_note()),
                },
                objects: pg.objects,
                degraded: pg.degraded(),
                missing: pg.missing.len() as u64,
                recovered: pg.recovered,
                scrub: pg.is_primary().then(|| self.scrub.get(pg.id)),
            })
            .collect();
        v.sort_by_key(|s| s.pg);
        v
    }

    /// Whether `generation` is still the current life of `pg`.
    pub(crate) fn is_current(&self, pg: PgId, generation: u64) -> bool {
        self.pgs
            .borrow()
            .get(&pg)
            .is_some_and(|p| p.generation == generation)
    }
}

impl<D: BlockDevice + 'static, P: Peers> Handler for Shard<D, P> {
    /// Checks the request against the peer's proven entity, its key and
    /// caps in the current map ([`crate::access`]), then answers it.
    async fn handle_from(
        self: Rc<Self>,
        peer: Rc<Peer>,
        frame: Frame,
    ) -> (Message, Option<AlignedBuf>) {
        if peer.mode.is_protected() || self.map.borrow().access.mode.is_protected() {
            let map = self.map.borrow().clone();
            if let Err(no) = map
                .access
                // before its first map a shard knows no OSD to check
                // against (the peer still proved an osd.N key with
                // profile osd)
                .authorize(&peer, &frame.msg, |id| {
                    map.epoch == Epoch(0) || map.addrs.contains_key(&id)
                })
            {
                let n = self.metrics.denied();
                // the first ten, then one in a thousand: a client looping
                // on a refusal must not fill the disk with the log
                if n <= 10 || n.is_multiple_of(1000) {
                    tracing::warn!(osd = %self.me, peer = ?peer.entity, refused = n, "refused: {}", no.why);
                }
                return error(no.status, map.epoch, no.why);
            }
        }
        self.handle(peer.role, frame).await
    }

    async fn handle(self: Rc<Self>, peer: Role, frame: Frame) -> (Message, Option<AlignedBuf>) {
        if matches!(frame.msg, Message::Ping) {
            return (
                Message::Reply(Reply::ok(pontoon_types::Version::ZERO)),
                None,
            );
        }
        if self.is_fenced() {
            return error(
                Status::Fenced,
                Epoch(0),
                "this OSD lost its lease and is fenced",
            );
        }
        match (frame.msg, peer) {
            (Message::Read(r), _) => {
                let (t0, len) = (self.metrics.begin(), u64::from(r.len));
                let answer = self.client_read(r).await;
                self.metrics.end(t0, Op::Read, len, &answer.0);
                answer
            }
            (Message::Write(w), _) => match frame.data {
                Some(data) => {
                    let (t0, len) = (self.metrics.begin(), data.len() as u64);
                    let answer = self.client_write(w, data).await;
                    self.metrics.end(t0, Op::Write, len, &answer.0);
                    answer
                }
                None => error(Status::InvalidArgument, Epoch(0), "write without data"),
            },
            (Message::Discard(d), _) => {
                let (t0, len) = (self.metrics.begin(), d.len);
                let answer = self.client_discard(d).await;
                self.metrics.end(t0, Op::Discard, len, &answer.0);
                answer
            }
            (Message::Allocation(t), _) => self.client_allocation(t).await,
            (Message::Diff(d), _) => self.client_diff(d).await,
            (Message::SubOp(op), Role::Osd(from)) => {
                self.metrics
                    .subop(frame.data.as_ref().map_or(0, |d| d.len() as u64));
                self.replica_subop(from, op, frame.data).await
            }
            (Message::PeerQuery(q), Role::Osd(from)) => self.answer_peer_query(from, q).await,
            (Message::Pull(t), Role::Osd(_)) => self.answer_pull(t).await,
            (Message::PullLayer(p), Role::Osd(_)) => self.answer_pull_layer(p).await,
            (Message::Digest(q), Role::Osd(_)) => self.answer_digest(q).await,
            (m, role) => error(
                Status::InvalidArgument,
                Epoch(0),
                format!("{:?} is not a request a {role:?} may send", m.msg_type()),
            ),
        }
    }
}

/// An error answer.
pub(crate) fn error(
    status: Status,
    epoch: Epoch,
    msg: impl Into<String>,
) -> (Message, Option<AlignedBuf>) {
    (Message::Reply(Reply::error(status, epoch, msg)), None)
}

/// The wire status for a store failure.
pub(crate) fn status_of(e: &StoreError) -> Status {
    match e {
        StoreError::NoSpace(_) => Status::NoSpace,
        StoreError::InvalidArgument(_) => Status::InvalidArgument,
        StoreError::Checksum { .. } => Status::Checksum,
        StoreError::Closed => Status::ShuttingDown,
        StoreError::Io { .. }
        | StoreError::Corrupt(_)
        | StoreError::NotFormatted(_)
        | StoreError::Failed(_) => Status::Io,
    }
}
