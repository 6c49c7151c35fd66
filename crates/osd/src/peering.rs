//! Peering and recovery, run by a PG's primary at the start of every
//! interval.
//!
//! Peering asks every member of the acting set, and every member of each
//! past interval that could have accepted writes (at least `min_size`
//! members), for the versions of the PG's objects. Answering is a promise:
//! the member refuses operations of earlier intervals from then on, so no
//! old primary can slip a write in afterwards. Every acting member must
//! answer; of each past interval at least one member must (a write
//! acknowledged in that interval is on all of its members), else the PG is
//! incomplete and serves nothing. And each past interval's primary must
//! answer too unless the map shows it without a lease: an old primary
//! with a lease and an old map would otherwise go on serving reads of its
//! interval after this one acknowledged newer writes. A past member
//! outside the acting set that the map shows without a lease gets a
//! second to answer, not the whole peer timeout (a frozen process would
//! otherwise hold every PG it was in for that long). The highest version
//! of each object is authoritative; acting members with an older one, or
//! none, are stale for it. An object whose head was deleted while
//! snapshots still read it is listed with the version of that delete, so
//! the delete wins over older heads. Stale copies are recovered in the
//! background (a few objects at a time per shard) and on demand before an
//! operation touches the object, each as a whole copy: head and clones
//! (see [`crate::copies`]).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use futures::future::join_all;
use pontoon_buf::AlignedBuf;
use pontoon_proto::{Message, PeerQuery, PullLayerReq, Reply, Status, SubOp, SubOpKind, Target};
use pontoon_store::{BlockDevice, SnapImage, StoreError};
use pontoon_types::{Epoch, ObjectId, OsdId, PgId, Version};

use crate::copies::{CopyError, MAX_COPY_BYTES, extent_bytes, from_wire, same_layout, to_wire};
use crate::peers::{PeerError, Peers};
use crate::pg::{Missing, Phase};
use crate::reclaim::volume_removed;
use crate::shard::Shard;

/// Why a peering attempt did not finish.
enum PeerFail {
    /// Try again shortly (a member did not answer yet, the map moved on).
    Retry(String),
    /// Some past interval has no reachable member.
    Incomplete(String),
}

/// Longest pause between peering attempts.
const MAX_PEER_BACKOFF: Duration = Duration::from_secs(2);
/// How often a replica that has not seen the primary's interval is retried,
/// and how many times.
const EPOCH_AHEAD_RETRY: Duration = Duration::from_millis(50);
const EPOCH_AHEAD_TRIES: u32 = 100;
/// How long peering waits for a past member that is not in the acting set
/// and holds no lease: it cannot serve, and what it holds that matters
/// (acknowledged writes) is on every other member of its interval too; a
/// frozen process must not hold peering up for the whole peer timeout.
const LEASELESS_MEMBER_WAIT: Duration = Duration::from_secs(1);
/// How often a PG whose recovery a flag pauses looks at the map again.
const PAUSED_POLL: Duration = Duration::from_millis(500);

/// What a PG's recovery loop does next.
enum Step {
    /// Recover this object.
    Object(ObjectId),
    /// A flag pauses recovery: wait.
    Paused,
    /// Every object was tried once; some are left.
    PassDone,
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Peers `pg` for as long as `generation` is its current life, then
    /// starts its recovery.
    pub(crate) async fn peer_loop(self: Rc<Self>, pg: PgId, generation: u64) {
        let mut delay = Duration::from_millis(20);
        loop {
            let Some(ended) = self
                .pgs
                .borrow()
                .get(&pg)
                .filter(|p| p.generation == generation)
                .map(|p| p.end.ended())
            else {
                return;
            };
            // A member that does not answer holds peering up only while
            // the interval lasts.
            let attempt = std::pin::pin!(self.try_peer(pg, generation));
            let outcome = match futures::future::select(attempt, ended).await {
                futures::future::Either::Left((r, _)) => r,
                futures::future::Either::Right(_) => return,
            };
            match outcome {
                Ok(()) => {
                    self.start_recovery(pg, generation);
                    return;
                }
                Err(PeerFail::Incomplete(why)) => {
                    tracing::warn!(%pg, "incomplete: {why}");
                    if let Some(p) = self.pgs.borrow_mut().get_mut(&pg)
                        && p.generation == generation
                    {
                        p.phase = Phase::Incomplete(why);
                    }
                }
                Err(PeerFail::Retry(why)) => tracing::debug!(%pg, "peering again: {why}"),
            }
            pontoon_rt::sleep(delay).await;
            delay = (delay * 2).min(MAX_PEER_BACKOFF);
        }
    }

    async fn try_peer(self: &Rc<Self>, pg: PgId, generation: u64) -> Result<(), PeerFail> {
        let map = self.map();
        let (entry, params) = {
            let mut pgs = self.pgs.borrow_mut();
            let p = pgs
                .get_mut(&pg)
                .filter(|p| p.generation == generation)
                .ok_or_else(|| PeerFail::Retry("interval changed".into()))?;
            p.promised = p.promised.max(p.entry.interval);
            (p.entry.clone(), p.params)
        };
        let e = entry.interval;
        let past: Vec<_> = entry
            .past
            .iter()
            .filter(|i| i.acting.len() as u32 >= params.min_size.max(1) && i.interval < e)
            .collect();
        let mut ask: BTreeSet<OsdId> = entry.acting.iter().copied().collect();
        for i in &past {
            ask.extend(i.acting.iter().copied());
        }
        let answers: BTreeMap<OsdId, Result<Vec<(ObjectId, Version)>, String>> =
            join_all(ask.iter().map(|&osd| {
                let leaseless = !entry.acting.contains(&osd) && !map.alive.contains(&osd);
                async move {
                    let q = self.query_member(osd, pg, e);
                    let answer = if leaseless {
                        pontoon_rt::timeout(LEASELESS_MEMBER_WAIT, q)
                            .await
                            .unwrap_or_else(|| {
                                Err(format!(
                                    "no answer within {LEASELESS_MEMBER_WAIT:?} (it holds no lease)"
                                ))
                            })
                    } else {
                        q.await
                    };
                    (osd, answer)
                }
            }))
            .await
            .into_iter()
            .collect();
        for osd in &entry.acting {
            if let Some(Err(why)) = answers.get(osd) {
                return Err(PeerFail::Retry(format!("acting member {osd}: {why}")));
            }
        }
        for i in &past {
            if let Some(p) = i.acting.first()
                && *p != self.me
                && map.alive.contains(p)
                && let Some(Err(why)) = answers.get(p)
            {
                return Err(PeerFail::Retry(format!(
                    "the primary {p} of interval {} holds a lease and has not promised: {why}",
                    i.interval
                )));
            }
            if !i
                .acting
                .iter()
                .any(|o| matches!(answers.get(o), Some(Ok(_))))
            {
                let names: Vec<String> = i.acting.iter().map(|o| o.to_string()).collect();
                return Err(PeerFail::Incomplete(format!(
                    "no member of interval {} ({}) answered",
                    i.interval,
                    names.join(", ")
                )));
            }
        }
        // Highest version wins; note who holds it.
        let mut auth: BTreeMap<ObjectId, (Version, Vec<OsdId>)> = BTreeMap::new();
        let mut held: BTreeMap<(OsdId, ObjectId), Version> = BTreeMap::new();
        for (osd, list) in &answers {
            let Ok(list) = list else { continue };
            for &(oid, v) in list {
                held.insert((*osd, oid), v);
                let a = auth.entry(oid).or_insert((v, Vec::new()));
                if v > a.0 {
                    *a = (v, vec![*osd]);
                } else if v == a.0 {
                    a.1.push(*osd);
                }
            }
        }
        let mut missing = BTreeMap::new();
        let mut seq = 0;
        let objects = auth.len() as u64;
        for (oid, (v, holders)) in auth {
            if v.epoch == e.0 {
                seq = seq.max(v.seq);
            }
            let stale: Vec<OsdId> = entry
                .acting
                .iter()
                .copied()
                .filter(|o| held.get(&(*o, oid)).is_none_or(|have| *have < v))
                .collect();
            if !stale.is_empty() {
                missing.insert(
                    oid,
                    Missing {
                        version: v,
                        holders,
                        stale,
                    },
                );
            }
        }
        let mut pgs = self.pgs.borrow_mut();
        let p = pgs
            .get_mut(&pg)
            .filter(|p| p.generation == generation)
            .ok_or_else(|| PeerFail::Retry("interval changed".into()))?;
        tracing::info!(osd = %self.me, %pg, interval = %e, missing = missing.len(), "peered");
        p.missing = missing;
        p.objects = objects;
        p.seq = p.seq.max(seq);
        p.phase = Phase::Active;
        Ok(())
    }

    /// All `(object, version)` pairs `osd` holds for `pg`, fencing it at `e`.
    pub(crate) async fn query_member(
        self: &Rc<Self>,
        osd: OsdId,
        pg: PgId,
        e: Epoch,
    ) -> Result<Vec<(ObjectId, Version)>, String> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let (page, more) = if osd == self.me {
                // Our own writes of the previous interval may still be on
                // their way to the store: list what it will hold.
                self.inflight.drained(pg).await;
                self.list_pg(pg, after, pontoon_proto::PEER_PAGE)
            } else {
                let q = Message::PeerQuery(PeerQuery {
                    pg,
                    epoch: e,
                    after,
                });
                match self.peers.call(osd, pg, &q, None).await {
                    Ok((Message::PeerInfo(info), _)) => (info.objects, info.more),
                    Ok((Message::Reply(r), _)) => {
                        return Err(format!("{:?}: {}", r.status, r.message));
                    }
                    Ok((m, _)) => return Err(format!("unexpected answer {:?}", m.msg_type())),
                    Err(e) => return Err(e.to_string()),
                }
            };
            after = page.last().map(|(o, _)| *o);
            all.extend(page);
            if !more || after.is_none() {
                return Ok(all);
            }
        }
    }

    /// Starts background recovery of `pg` unless it runs already.
    pub(crate) fn start_recovery(self: &Rc<Self>, pg: PgId, generation: u64) {
        {
            let mut pgs = self.pgs.borrow_mut();
            let Some(p) = pgs.get_mut(&pg).filter(|p| p.generation == generation) else {
                return;
            };
            if p.recovering {
                return;
            }
            p.recovering = true;
        }
        let shard = self.clone();
        pontoon_rt::spawn(async move { shard.recovery_loop(pg, generation).await });
    }

    /// Recovers the PG's missing objects in the background, a few at a time
    /// per shard (the map's `recovery_max_active`, pausing the map's
    /// `recovery_sleep` after each), until none are left or the interval
    /// ends. While `norecover` is set, or `norebalance` and the PG is only
    /// misplaced, it waits (objects a client touches are still recovered
    /// on demand).
    async fn recovery_loop(self: Rc<Self>, pg: PgId, generation: u64) {
        let mut cursor: Option<ObjectId> = None;
        loop {
            let control = self.map().recovery;
            let next = {
                let mut pgs = self.pgs.borrow_mut();
                let Some(p) = pgs.get_mut(&pg).filter(|p| p.generation == generation) else {
                    return;
                };
                if p.missing.is_empty() {
                    p.recovering = false;
                    p.paused = None;
                    return;
                }
                let paused = p.pause_for(&control);
                if paused != p.paused {
                    tracing::debug!(osd = %self.me, %pg, ?paused, "recovery pause changed");
                    p.paused = paused;
                }
                if paused.is_some() {
                    Step::Paused
                } else {
                    let from = cursor.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
                    p.missing
                        .range((from, std::ops::Bound::Unbounded))
                        .next()
                        .map_or(Step::PassDone, |(o, _)| Step::Object(*o))
                }
            };
            let oid = match next {
                Step::Object(oid) => oid,
                Step::Paused => {
                    pontoon_rt::sleep(PAUSED_POLL).await;
                    continue;
                }
                Step::PassDone => {
                    // A pass ended with objects left (their holders were
                    // unreachable): wait before the next pass.
                    cursor = None;
                    pontoon_rt::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            cursor = Some(oid);
            tracing::debug!(%pg, %oid, "recovery: waiting for a slot");
            let slot = self.recovery.acquire(0).await;
            tracing::debug!(%pg, %oid, "recovery: waiting for the object lock");
            let guard = self.locks.lock(oid).await;
            match self.recover_object(pg, generation, oid).await {
                Ok(()) => tracing::debug!(%pg, %oid, "recovered"),
                Err(why) => {
                    tracing::warn!(%pg, %oid, "recovery failed: {why}");
                    if let Some(p) = self
                        .pgs
                        .borrow_mut()
                        .get_mut(&pg)
                        .filter(|p| p.generation == generation && p.missing.contains_key(&oid))
                    {
                        p.failing.insert(oid, why);
                    }
                }
            }
            drop((guard, slot));
            if !control.sleep.is_zero() {
                pontoon_rt::sleep(control.sleep).await;
            }
        }
    }

    /// Brings every stale acting member of `oid` to its authoritative
    /// version. The caller holds the object's lock.
    pub(crate) async fn recover_object(
        self: &Rc<Self>,
        pg: PgId,
        generation: u64,
        oid: ObjectId,
    ) -> Result<(), String> {
        let (m, e) = {
            let mut pgs = self.pgs.borrow_mut();
            let Some(p) = pgs.get_mut(&pg).filter(|p| p.generation == generation) else {
                return Err("interval changed".into());
            };
            if volume_removed(&self.map(), oid) {
                // Peered before its volume was removed: nothing to recover,
                // and reclaim deletes every copy.
                p.no_longer_missing(&oid);
                p.objects = p.objects.saturating_sub(1);
                return Ok(());
            }
            match p.missing.get(&oid) {
                None => return Ok(()),
                Some(m) => (m.clone(), p.entry.interval),
            }
        };
        tracing::debug!(%pg, %oid, version = %m.version, holders = ?m.holders, stale = ?m.stale, me = %self.me, "recovering");
        let target = Target { pg, epoch: e, oid };
        if let Some(why) = m.stale.iter().find_map(|o| self.backfill_refusal(*o)) {
            self.note_recovery_wait(pg, generation, Some(why.clone()));
            return Err(why);
        }
        // `None`: our copy is at the version but larger than one message,
        // so the stale members fetch it from us a layer at a time.
        let image = if m.stale.contains(&self.me) {
            Some(self.pull_and_install(pg, generation, target, &m).await?)
        } else {
            match self.read_copy(oid).await {
                Ok(Some(img)) if img.version == m.version => Some(img),
                Ok(other) => {
                    return Err(format!(
                        "local copy of {oid} is at {:?}, expected {}",
                        other.map(|i| i.version),
                        m.version
                    ));
                }
                Err(CopyError::TooLarge { .. })
                    if self.store.held_version(oid) == Some(m.version) =>
                {
                    None
                }
                // Our copy rotted: take another holder's, and mend ours.
                Err(CopyError::Store(e @ StoreError::Checksum { .. })) => {
                    tracing::warn!(osd = %self.me, %oid, "recovery source failed its checksum ({e}); pulling another copy");
                    Some(self.pull_and_install(pg, generation, target, &m).await?)
                }
                Err(e) => return Err(format!("reading {oid}: {e}")),
            }
        };
        let op = SubOp {
            target,
            version: m.version,
            kind: SubOpKind::Fetch,
            extents: Vec::new(),
            data_crc: crc32c::crc32c(&[]),
            snap_seq: 0,
            snaps: None,
        };
        let (op, data) = match image.as_ref().map(|img| to_wire(oid, img)) {
            Some(Ok(copy)) => {
                let data = Rc::new(copy.data);
                let op = SubOp {
                    kind: SubOpKind::Replace,
                    extents: copy.extents,
                    data_crc: crc32c::crc32c(&data),
                    snaps: copy.snaps.map(Box::new),
                    ..op
                };
                (op, Some(data))
            }
            _ => (op, None),
        };
        let msg = Message::SubOp(op);
        let pushes = m.stale.iter().copied().filter(|o| *o != self.me).map(|o| {
            let (msg, data) = (&msg, data.as_ref());
            async move { (o, self.member_call(o, pg, msg, data).await) }
        });
        let results = join_all(pushes).await;
        let pushed = results.iter().filter(|(_, r)| r.is_ok()).count()
            + usize::from(m.stale.contains(&self.me));
        let mut left = Vec::new();
        let mut failures = Vec::new();
        for (o, r) in results {
            if let Err((_, why)) = r {
                left.push(o);
                failures.push(format!("{o}: {why}"));
            }
        }
        let bytes = data.as_ref().map_or(0, |d| d.len());
        self.metrics
            .recovery(u64::from(left.is_empty()), (pushed * bytes) as u64);
        let mut pgs = self.pgs.borrow_mut();
        if let Some(p) = pgs.get_mut(&pg).filter(|p| p.generation == generation) {
            if left.is_empty() {
                p.no_longer_missing(&oid);
                p.recovered += 1;
                p.waiting = None;
            } else if let Some(mm) = p.missing.get_mut(&oid) {
                for o in &mm.stale {
                    if !left.contains(o) && !mm.holders.contains(o) {
                        mm.holders.push(*o);
                    }
                }
                mm.stale = left;
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }

    /// Pulls the authoritative copy from another holder and installs it
    /// here, unless the interval ended meanwhile.
    async fn pull_and_install(
        self: &Rc<Self>,
        pg: PgId,
        generation: u64,
        target: Target,
        m: &Missing,
    ) -> Result<SnapImage, String> {
        let img = self.pull_from(&m.holders, target, m.version).await?;
        if !self.is_current(pg, generation) {
            return Err("interval changed".into());
        }
        let _inflight = self.inflight.enter(pg);
        self.install_copy(target.oid, &img)
            .await
            .map_err(|e| format!("installing {} locally: {e}", target.oid))?;
        Ok(img)
    }

    /// Records why the PG's recovery waits (`None`: it no longer does).
    fn note_recovery_wait(&self, pg: PgId, generation: u64, why: Option<String>) {
        if let Some(p) = self
            .pgs
            .borrow_mut()
            .get_mut(&pg)
            .filter(|p| p.generation == generation)
        {
            p.waiting = why;
        }
    }

    /// Fetches `version` of an object, head and clones, from the first
    /// holder that has it: whole, or a layer at a time if the holder
    /// refuses it as larger than one message.
    pub(crate) async fn pull_from(
        self: &Rc<Self>,
        holders: &[OsdId],
        target: Target,
        version: Version,
    ) -> Result<SnapImage, String> {
        let mut why = Vec::new();
        for &h in holders.iter().filter(|h| **h != self.me) {
            let answer = self
                .peers
                .call(h, target.pg, &Message::Pull(target), None)
                .await;
            let whole = match answer {
                Ok((Message::Reply(r), _)) if r.status == Status::InvalidArgument => {
                    self.pull_layers(h, target, version).await
                }
                answer => copy_answer(h, answer, version),
            };
            match whole {
                Ok(img) => return Ok(img),
                Err(e) => why.push(e),
            }
        }
        if why.is_empty() {
            why.push("no other holder".into());
        }
        Err(format!(
            "no copy of {} at {version}: {}",
            target.oid,
            why.join("; ")
        ))
    }

    /// Fetches `version` of an object from `holder` a layer at a time (the
    /// head, then each clone), each answer with the whole layout, which
    /// must stay the same; at most [`MAX_COPY_BYTES`] of data.
    pub(crate) async fn pull_layers(
        self: &Rc<Self>,
        holder: OsdId,
        target: Target,
        version: Version,
    ) -> Result<SnapImage, String> {
        let pull = |layer: u64| async move {
            let req = Message::PullLayer(PullLayerReq { target, layer });
            let answer = self.peers.call(holder, target.pg, &req, None).await;
            copy_answer(holder, answer, version)
        };
        let mut img = pull(0).await?;
        let mut total = img.head.as_deref().map_or(0, extent_bytes);
        for i in 0..img.clones.len() {
            let part = pull(img.clones[i].id).await?;
            if !same_layout(&img, &part) {
                return Err(format!(
                    "{holder}: {}'s clones changed while it was pulled",
                    target.oid
                ));
            }
            let Some(extents) = part.clones.into_iter().nth(i).map(|c| c.extents) else {
                return Err(format!("{holder}: a layer answer without its clone"));
            };
            total += extent_bytes(&extents);
            if total > MAX_COPY_BYTES {
                self.metrics.recovery_refused();
                return Err(format!(
                    "{holder}: {} with its snapshots is more than {MAX_COPY_BYTES} bytes of data, \
                     more than one copy may hold in memory",
                    target.oid
                ));
            }
            img.clones[i].extents = extents;
        }
        Ok(img)
    }

    /// Sends a versioned operation to a member, retrying for a while if it
    /// has not seen this interval yet.
    pub(crate) async fn member_call(
        self: &Rc<Self>,
        osd: OsdId,
        pg: PgId,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
    ) -> Result<(), (Status, String)> {
        let expect = match msg {
            Message::SubOp(op) => Some(op.version),
            _ => None,
        };
        for _ in 0..EPOCH_AHEAD_TRIES {
            match self.peers.call(osd, pg, msg, data).await {
                Ok((
                    Message::Reply(Reply {
                        status: Status::Ok,
                        version,
                        ..
                    }),
                    _,
                )) => {
                    // The member must now hold exactly this version: one
                    // that claims another (a newer one it should never
                    // have) does not hold what was acknowledged.
                    return match expect {
                        Some(want) if version != want => Err((
                            Status::Io,
                            format!("{osd} answered version {version} for {want}"),
                        )),
                        _ => Ok(()),
                    };
                }
                Ok((Message::Reply(r), _)) if r.status == Status::EpochAhead => {
                    pontoon_rt::sleep(EPOCH_AHEAD_RETRY).await;
                }
                Ok((Message::Reply(r), _)) => {
                    return Err((r.status, format!("{osd}: {}", r.message)));
                }
                Ok((m, _)) => {
                    return Err((Status::Io, format!("{osd}: unexpected {:?}", m.msg_type())));
                }
                Err(e) => return Err((Status::PgInactive, e.to_string())),
            }
        }
        Err((
            Status::PgInactive,
            format!("{osd} has not seen this interval"),
        ))
    }
}

/// The copy a holder's answer to a pull (whole or one layer) carries, if
/// it is at `version` and its ranges match its data.
fn copy_answer(
    holder: OsdId,
    answer: Result<(Message, Option<AlignedBuf>), PeerError>,
    version: Version,
) -> Result<SnapImage, String> {
    let (have, extents, snaps, data) = match answer {
        Ok((Message::Reply(r), data)) if r.status == Status::Ok => {
            (r.version, r.ranges, None, data)
        }
        Ok((Message::SnapCopy(c), data)) => (c.version, c.extents, Some(c.snaps), data),
        Ok((Message::Reply(r), _)) => {
            return Err(format!("{holder}: {:?} {}", r.status, r.message));
        }
        Ok((m, _)) => return Err(format!("{holder}: unexpected {:?}", m.msg_type())),
        Err(e) => return Err(e.to_string()),
    };
    if have != version {
        return Err(format!("{holder} has {have} not {version}"));
    }
    let data = data.unwrap_or_else(|| AlignedBuf::for_read(0));
    from_wire(version, &extents, snaps.as_ref(), &data)
        .ok_or_else(|| format!("{holder} sent extents that do not match its data"))
}
