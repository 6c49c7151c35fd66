//! The primary's side of client requests: check the sender's view of the
//! PG, order mutations per object, stamp versions, replicate to every
//! acting member in parallel and acknowledge only when all have it durable.

use std::rc::Rc;

use futures::channel::oneshot;
use futures::future::{Either, Shared, join_all, select};
use pontoon_buf::AlignedBuf;
use pontoon_proto::{
    DiscardReq, Message, ReadReq, Reply, Status, SubOp, SubOpKind, Target, WriteReq,
};
use pontoon_store::{BlockDevice, StoreError};
use pontoon_types::{BLOCK_SIZE_U64, Epoch, OsdId, Version};

use crate::peers::Peers;
use crate::pg::{Missing, Phase};
use crate::shard::{Shard, error, status_of};

type Answer = (Message, Option<AlignedBuf>);

/// What a client operation needs of its PG, checked.
pub(crate) struct Checked {
    pub(crate) interval: Epoch,
    acting: Vec<OsdId>,
    generation: u64,
    /// Fires when the interval ends on this shard.
    ended: Shared<oneshot::Receiver<()>>,
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Checks that this shard is the active primary of the target's PG at
    /// the sender's interval, and that the range fits the object.
    fn check_target(&self, t: &Target, offset: u64, len: u64) -> Result<Checked, Answer> {
        let object_size = self.store.object_size();
        if !offset.is_multiple_of(BLOCK_SIZE_U64) || !len.is_multiple_of(BLOCK_SIZE_U64) {
            return Err(error(
                Status::InvalidArgument,
                Epoch(0),
                format!("offset {offset} and length {len} must be multiples of 4096"),
            ));
        }
        if offset.checked_add(len).is_none_or(|end| end > object_size) {
            return Err(error(
                Status::InvalidArgument,
                Epoch(0),
                format!("range {offset}+{len} is outside the {object_size}-byte object"),
            ));
        }
        match self.map().pg_of(t.oid) {
            Some(pg) if pg == t.pg => {}
            Some(pg) => {
                return Err(error(
                    Status::StaleEpoch,
                    Epoch(0),
                    format!("object {} is in pg {pg}, not {}", t.oid, t.pg),
                ));
            }
            // A volume this shard has not seen yet: its map is behind.
            None => {
                return Err(error(
                    Status::EpochAhead,
                    Epoch(0),
                    format!("volume of {} is not in this OSD's map yet", t.oid),
                ));
            }
        }
        let pgs = self.pgs.borrow();
        let Some(pg) = pgs.get(&t.pg).filter(|p| p.is_primary()) else {
            return Err(error(
                Status::NotPrimary,
                Epoch(0),
                format!("{} is not the primary of pg {}", self.me, t.pg),
            ));
        };
        let interval = pg.entry.interval;
        // A newer interval's primary peered with this OSD: the map is
        // behind, and whatever this shard holds may be overtaken already.
        if pg.overtaken() {
            return Err(error(
                Status::StaleEpoch,
                pg.promised,
                format!(
                    "pg {} promised interval {} to a newer primary",
                    t.pg, pg.promised
                ),
            ));
        }
        if t.epoch < interval {
            return Err(error(
                Status::StaleEpoch,
                interval,
                format!("pg {} is at interval {interval}", t.pg),
            ));
        }
        if t.epoch > interval {
            return Err(error(
                Status::EpochAhead,
                interval,
                format!("pg {} interval {} not seen yet", t.pg, t.epoch),
            ));
        }
        // Fewer members than min_size: the next peering may skip this
        // interval (it could not have accepted writes), so a value read
        // here could vanish afterwards. No I/O at all, as for writes.
        let members = pg.entry.acting.len() as u32;
        if pg.phase == Phase::Active && members < pg.params.min_size {
            return Err(error(
                Status::PgInactive,
                interval,
                format!(
                    "pg {} has {members} of the {} members it needs to serve I/O",
                    t.pg, pg.params.min_size
                ),
            ));
        }
        match &pg.phase {
            Phase::Active => {}
            Phase::Incomplete(why) => {
                return Err(error(
                    Status::PgInactive,
                    interval,
                    format!("pg {} is incomplete: {why}", t.pg),
                ));
            }
            other => {
                return Err(error(
                    Status::PgInactive,
                    interval,
                    format!("pg {} is {other:?}", t.pg),
                ));
            }
        }
        Ok(Checked {
            interval,
            acting: pg.entry.acting.clone(),
            generation: pg.generation,
            ended: pg.end.ended(),
        })
    }

    /// After any wait: the lease must still be valid and the PG still
    /// active in the same life, with no newer interval promised (the
    /// interval may have ended, or the PG been found incomplete, while the
    /// request waited, and then this copy may be stale).
    fn still_serving(&self, t: &Target, c: &Checked) -> Result<(), Answer> {
        if self.is_fenced() {
            return Err(error(
                Status::Fenced,
                c.interval,
                "this OSD's lease ran out while the request waited",
            ));
        }
        let pgs = self.pgs.borrow();
        match pgs.get(&t.pg) {
            Some(p)
                if p.generation == c.generation && p.phase == Phase::Active && !p.overtaken() =>
            {
                Ok(())
            }
            _ => Err(error(
                Status::StaleEpoch,
                c.interval,
                format!(
                    "pg {} left interval {} while the request waited",
                    t.pg, c.interval
                ),
            )),
        }
    }

    /// Recovers `t.oid` first if some member lacks it. Caller holds the lock.
    async fn ensure_recovered(self: &Rc<Self>, t: &Target, c: &Checked) -> Result<(), Answer> {
        let missing = self
            .pgs
            .borrow()
            .get(&t.pg)
            .is_some_and(|p| p.missing.contains_key(&t.oid));
        if !missing {
            return Ok(());
        }
        // No recovery slot here: background recovery takes a slot and then
        // an object lock, so waiting for a slot while holding a lock could
        // deadlock; a client waiting on an object goes first anyway.
        self.recover_object(t.pg, c.generation, t.oid)
            .await
            .map_err(|why| {
                error(
                    Status::PgInactive,
                    c.interval,
                    format!("object {} is being recovered: {why}", t.oid),
                )
            })
    }

    /// What every request that reads an object (its data or its
    /// metadata) does first: check the PG, wait out writes in flight, and
    /// bring every member level if some lacks the object's newest version.
    pub(crate) async fn ready_to_read(
        self: &Rc<Self>,
        t: &Target,
        offset: u64,
        len: u64,
    ) -> Result<Checked, Answer> {
        let c = self.check_target(t, offset, len)?;
        // Never return a write that is not yet on every member.
        self.locks.wait_unlocked(t.oid).await;
        self.still_serving(t, &c)?;
        // Some member lacks the object's newest version (a write that
        // failed half way, or one this interval inherited): serving it now
        // could return a value a later primary never sees, or an old one.
        // Bring every member level first.
        let missing = self
            .pgs
            .borrow()
            .get(&t.pg)
            .is_some_and(|p| p.missing.contains_key(&t.oid));
        if missing {
            let _g = self.locks.lock(t.oid).await;
            self.ensure_recovered(t, &c).await?;
            self.still_serving(t, &c)?;
        }
        Ok(c)
    }

    /// Serves a client read from the primary's copy (its head, or a
    /// snapshot's view).
    pub(crate) async fn client_read(self: &Rc<Self>, r: ReadReq) -> Answer {
        let t = r.target;
        let c = match self.ready_to_read(&t, r.offset, r.len as u64).await {
            Ok(c) => c,
            Err(a) => return a,
        };
        match self.read_local(&r).await {
            Ok(answer) => answer,
            Err(StoreError::Checksum { .. }) => self.read_after_repair(&t, &c, &r).await,
            Err(e) => self.read_error(&r, &e, c.interval),
        }
    }

    /// A local block failed its checksum: fetch the whole object, clones
    /// included, from another member holding the same version, install it,
    /// and read again.
    async fn read_after_repair(self: &Rc<Self>, t: &Target, c: &Checked, r: &ReadReq) -> Answer {
        let _g = self.locks.lock(t.oid).await;
        if let Err(a) = self.still_serving(t, c) {
            return a;
        }
        let version = self.store.held_version(t.oid).unwrap_or(Version::ZERO);
        let others: Vec<OsdId> = c.acting.iter().copied().filter(|o| *o != self.me).collect();
        tracing::warn!(oid = %t.oid, "checksum mismatch on the primary: repairing from a replica");
        let img = match self.pull_from(&others, *t, version).await {
            Ok(img) => img,
            Err(why) => {
                return error(
                    Status::Checksum,
                    c.interval,
                    format!(
                        "object {} is corrupt here and no replica could repair it: {why}",
                        t.oid
                    ),
                );
            }
        };
        if let Err(e) = self.install_copy(t.oid, &img).await {
            return error(
                status_of(&e),
                c.interval,
                format!("repairing {}: {e}", t.oid),
            );
        }
        if let Err(a) = self.still_serving(t, c) {
            return a;
        }
        match self.read_local(r).await {
            Ok(answer) => answer,
            Err(e) => self.read_error(r, &e, c.interval),
        }
    }

    /// Replicates a client write to every acting member.
    pub(crate) async fn client_write(self: &Rc<Self>, w: WriteReq, data: AlignedBuf) -> Answer {
        let t = w.target;
        if crc32c::crc32c(&data) != w.data_crc {
            return error(Status::Malformed, Epoch(0), "write data checksum mismatch");
        }
        let len = data.len() as u64;
        if let Some(why) = self.full_refusal(&t, w.offset, len) {
            return error(Status::NoSpace, Epoch(0), why);
        }
        if w.fill {
            return self.client_fill(w, data).await;
        }
        self.write_range(w, (w.offset, w.data_crc), data, None)
            .await
    }

    /// Writes `data` (with its checksum) at `offset` of `w`'s object like
    /// `w` (versioned and replicated), unless `unless` says otherwise under
    /// the object's lock.
    async fn write_range(
        self: &Rc<Self>,
        w: WriteReq,
        (offset, data_crc): (u64, u32),
        data: AlignedBuf,
        unless: Option<&dyn Fn() -> bool>,
    ) -> Answer {
        let t = w.target;
        let len = data.len() as u64;
        let op = |t: Target, version| SubOp {
            target: t,
            version,
            kind: SubOpKind::Write,
            extents: vec![(offset, len)],
            data_crc,
            snap_seq: w.snap_seq,
            snaps: None,
        };
        let span = (offset, len, w.snap_seq);
        self.mutate(t, span, op, Some(data), unless, |version, data| {
            let store = self.store.clone();
            async move {
                let data =
                    data.ok_or_else(|| StoreError::InvalidArgument("write without data".into()))?;
                store
                    .write_snap(t.oid, offset, data, version, w.snap_seq)
                    .await
            }
        })
        .await
    }

    /// A flatten's write ([`WriteReq::fill`]): only the runs of blocks the
    /// object does not hold are written, each versioned and replicated like
    /// a write. Each run is checked again under the object's lock, so a
    /// client write landing meanwhile is never overwritten: the runs are
    /// then worked out again (a few times at most, then `Busy`).
    async fn client_fill(self: &Rc<Self>, w: WriteReq, data: AlignedBuf) -> Answer {
        const ATTEMPTS: usize = 8;
        let t = w.target;
        let end = w.offset + data.len() as u64;
        let mut last = (Message::Reply(Reply::ok(Version::ZERO)), None);
        for _ in 0..ATTEMPTS {
            let raced = std::cell::Cell::new(false);
            let runs = unallocated_runs(&self.store.allocated(t.oid), w.offset, end);
            for (s, e) in runs {
                let held = || {
                    let taken =
                        self.store.unallocated_blocks(t.oid, s, e - s) != (e - s) / BLOCK_SIZE_U64;
                    raced.set(raced.get() || taken);
                    taken
                };
                let at = (s - w.offset) as usize..(e - w.offset) as usize;
                let piece = AlignedBuf::copy_from(&data[at]);
                let crc = crc32c::crc32c(&piece);
                last = self.write_range(w, (s, crc), piece, Some(&held)).await;
                if raced.get() {
                    break;
                }
                if !matches!(&last.0, Message::Reply(r) if r.status == Status::Ok) {
                    return last;
                }
            }
            if !raced.get() {
                return last;
            }
        }
        error(
            Status::Busy,
            Epoch(0),
            format!(
                "{}: the range kept being written while it was filled",
                t.oid
            ),
        )
    }

    /// Replicates a client discard to every acting member.
    pub(crate) async fn client_discard(self: &Rc<Self>, d: DiscardReq) -> Answer {
        let t = d.target;
        let op = |t: Target, version| SubOp {
            target: t,
            version,
            kind: SubOpKind::Discard,
            extents: vec![(d.offset, d.len)],
            data_crc: crc32c::crc32c(&[]),
            snap_seq: d.snap_seq,
            snaps: None,
        };
        let span = (d.offset, d.len, d.snap_seq);
        self.mutate(t, span, op, None, None, |version, _| {
            let store = self.store.clone();
            async move {
                store
                    .discard_snap(t.oid, d.offset, d.len, version, d.snap_seq)
                    .await
            }
        })
        .await
    }

    /// Which ranges of an object hold data.
    pub(crate) async fn client_allocation(self: &Rc<Self>, t: Target) -> Answer {
        // As a read: a primary that lacks the object's newest version
        // (it is missing here) would answer with a stale allocation, and a
        // clone's client would then read its parent's data for blocks the
        // clone has written (simulator seeds 478 and churn 24).
        let c = match self.ready_to_read(&t, 0, 0).await {
            Ok(c) => c,
            Err(a) => return a,
        };
        let mut r = Reply::ok(self.store.version(t.oid).unwrap_or(Version::ZERO));
        r.epoch = c.interval;
        r.ranges = self
            .store
            .allocated(t.oid)
            .into_iter()
            .map(|x| (x.start, x.end - x.start))
            .collect();
        (Message::Reply(r), None)
    }

    /// The common path of writes and discards: lock the object, check the
    /// snap context, recover the object if needed, stamp a version, apply
    /// locally and on every other member at once, and answer once all have
    /// it durable. `span` is (offset, length, snap context). If `unless`
    /// says so once the object is locked and recovered, nothing is done
    /// (answered `Ok` with the object's version).
    async fn mutate<F, Fut>(
        self: &Rc<Self>,
        t: Target,
        (offset, len, snap_seq): (u64, u64, u64),
        make_op: impl Fn(Target, Version) -> SubOp,
        data: Option<AlignedBuf>,
        unless: Option<&dyn Fn() -> bool>,
        local: F,
    ) -> Answer
    where
        F: FnOnce(Version, Option<AlignedBuf>) -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        if let Err(a) = self.check_target(&t, offset, len) {
            return a;
        }
        let _g = self.locks.lock(t.oid).await;
        // The interval may have changed while we waited for the lock.
        let c = match self.check_target(&t, offset, len) {
            Ok(c) => c,
            Err(a) => return a,
        };
        if let Err(a) = self.check_snap_seq(&t, snap_seq, c.interval) {
            return a;
        }
        if let Err(a) = self.ensure_recovered(&t, &c).await {
            return a;
        }
        if unless.is_some_and(|f| f()) {
            let have = self.store.held_version(t.oid).unwrap_or(Version::ZERO);
            return (Message::Reply(Reply::ok(have)), None);
        }
        // The primary holds every object of the PG it serves (recovered
        // first when it lacked one), so none here means a new object.
        let creates = self.store.held_version(t.oid).is_none();
        // Stamped, and counted in flight until the local store has it, in
        // one step with the interval check: peering lists objects only
        // after what was accepted before it began has landed.
        let (version, inflight) = {
            let mut pgs = self.pgs.borrow_mut();
            let Some(p) = pgs.get_mut(&t.pg).filter(|p| p.generation == c.generation) else {
                return error(Status::PgInactive, c.interval, "interval changed");
            };
            p.seq += 1;
            (Version::new(c.interval.0, p.seq), self.inflight.enter(t.pg))
        };
        let msg = Message::SubOp(make_op(t, version));
        // The local store takes the received buffer; the other members'
        // requests share one copy of it (none when there are none).
        let shared = match &data {
            Some(d) if c.acting.iter().any(|o| *o != self.me) => {
                Some(Rc::new(AlignedBuf::copy_from(d)))
            }
            _ => None,
        };
        if self.broken_ack.get() {
            self.replicate_in_background(&c.acting, t, &msg, shared.as_ref());
            drop(inflight);
            return match local(version, data).await {
                Ok(()) => (Message::Reply(Reply::ok(version)), None),
                Err(e) => error(status_of(&e), c.interval, e.to_string()),
            };
        }
        let shared = shared.as_ref();
        let remote = c.acting.iter().copied().filter(|o| *o != self.me).map(|o| {
            let msg = &msg;
            async move { (o, self.member_call(o, t.pg, msg, shared).await) }
        });
        let local = async move {
            let r = local(version, data).await;
            drop(inflight);
            if r.is_ok() {
                self.trim_after_stale_write(t.oid, snap_seq);
            }
            r
        };
        // The other members' answers are awaited only while the interval
        // lasts (a member that froze or was cut off is replaced in the
        // next one); the local write always completes.
        let remote = std::pin::pin!(join_all(remote));
        let remote = select(remote, c.ended.clone());
        let (mine, theirs) = futures::join!(local, remote);
        let theirs = match theirs {
            Either::Left((theirs, _)) => theirs,
            Either::Right(_) => {
                return error(
                    Status::StaleEpoch,
                    c.interval,
                    format!(
                        "pg {} left interval {} while the write was replicated",
                        t.pg, c.interval
                    ),
                );
            }
        };
        let mut ok = Vec::new();
        let mut failed: Vec<(OsdId, Status, String)> = Vec::new();
        match mine {
            Ok(()) => ok.push(self.me),
            Err(e) => failed.push((self.me, status_of(&e), e.to_string())),
        }
        for (o, r) in theirs {
            match r {
                Ok(()) => ok.push(o),
                Err((s, why)) => failed.push((o, s, why)),
            }
        }
        if creates
            && !ok.is_empty()
            && let Some(p) = self
                .pgs
                .borrow_mut()
                .get_mut(&t.pg)
                .filter(|p| p.generation == c.generation)
        {
            p.objects += 1;
        }
        if failed.is_empty() {
            let mut r = Reply::ok(version);
            r.epoch = c.interval;
            return (Message::Reply(r), None);
        }
        if !ok.is_empty() {
            // Some members have the new version and some do not: remember,
            // so the next operation on the object brings them level first,
            // Background recovery too: the object may not be touched again.
            if let Some(p) = self
                .pgs
                .borrow_mut()
                .get_mut(&t.pg)
                .filter(|p| p.generation == c.generation)
            {
                p.missing.insert(
                    t.oid,
                    Missing {
                        version,
                        holders: ok.clone(),
                        stale: failed.iter().map(|f| f.0).collect(),
                    },
                );
            }
            self.start_recovery(t.pg, c.generation);
        }
        let status = if failed.iter().all(|f| f.1 == Status::NoSpace) {
            Status::NoSpace
        } else if failed.iter().all(|f| f.1 == Status::InvalidArgument) {
            Status::InvalidArgument
        } else {
            Status::PgInactive
        };
        let why: Vec<String> = failed.iter().map(|f| format!("{}: {}", f.0, f.2)).collect();
        error(
            status,
            c.interval,
            format!("not on every replica: {}", why.join("; ")),
        )
    }

    /// The broken variant's replication (see
    /// [`Shard::break_replication_for_tests`]): fire and forget.
    fn replicate_in_background(
        self: &Rc<Self>,
        acting: &[OsdId],
        t: Target,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
    ) {
        for o in acting.iter().copied().filter(|o| *o != self.me) {
            let (shard, msg, data) = (self.clone(), msg.clone(), data.cloned());
            pontoon_rt::spawn(async move {
                let _ = shard.member_call(o, t.pg, &msg, data.as_ref()).await;
            });
        }
    }
}

/// The runs of `start..end` that `allocated` (ascending, disjoint byte
/// ranges) does not cover.
fn unallocated_runs(allocated: &[std::ops::Range<u64>], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = start;
    for r in allocated {
        if r.end <= at {
            continue;
        }
        if r.start >= end {
            break;
        }
        if r.start > at {
            out.push((at, r.start));
        }
        at = r.end;
    }
    if at < end {
        out.push((at, end));
    }
    out
}
