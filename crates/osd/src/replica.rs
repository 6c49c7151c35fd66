//! What a shard does for other OSDs: apply a primary's versioned
//! operations, answer peering queries (and promise to refuse older
//! intervals), and hand out whole objects, clones included, for recovery.

use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_proto::{
    Message, PEER_PAGE, PeerInfo, PeerQuery, PullLayerReq, Reply, Status, SubOp, SubOpKind, Target,
};
use pontoon_store::BlockDevice;
use pontoon_types::{Epoch, ObjectId, OsdId, Version};

use crate::copies::{CopyError, from_wire, pull_answer, to_wire};
use crate::map::{PgEntry, pg_for};
use crate::peers::Peers;
use crate::pg::Pg;
use crate::shard::{Shard, error, status_of};

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Applies an operation the primary of the current interval versioned.
    pub(crate) async fn replica_subop(
        self: &Rc<Self>,
        from: OsdId,
        op: SubOp,
        data: Option<AlignedBuf>,
    ) -> (Message, Option<AlignedBuf>) {
        let t = op.target;
        // One operation per object at a time, and never an older one over a
        // newer: a request that sat in a stalled handler (or was sent again
        // after its sender gave up on it) may arrive after its successors.
        // The interval is checked after the wait, with nothing in between
        // that yields: the wait may outlast the interval.
        let _guard = self.locks.lock(t.oid).await;
        let (known, primary) = match self.pgs.borrow().get(&t.pg) {
            Some(pg) => (
                pg.known_interval(),
                // Known only while the map's interval is the current one.
                (!pg.overtaken())
                    .then(|| pg.entry.acting.first().copied())
                    .flatten(),
            ),
            None => (Epoch(0), None),
        };
        if t.epoch < known {
            return error(
                Status::StaleEpoch,
                known,
                format!("pg {} is at interval {known}, not {}", t.pg, t.epoch),
            );
        }
        if t.epoch > known {
            return error(
                Status::EpochAhead,
                known,
                format!("pg {} interval {} not seen yet", t.pg, t.epoch),
            );
        }
        if primary.is_some_and(|p| p != from) {
            return error(
                Status::InvalidArgument,
                known,
                format!(
                    "{from} is not the primary of pg {} in interval {known}",
                    t.pg
                ),
            );
        }
        // An object whose head was deleted still has its version.
        let have = self.store.held_version(t.oid).unwrap_or(Version::ZERO);
        let superseded = match op.kind {
            SubOpKind::Replace | SubOpKind::Fetch => have > op.version,
            _ => have >= op.version,
        };
        if superseded {
            tracing::debug!(oid = %t.oid, %have, op = %op.version, "sub-operation superseded");
            return (Message::Reply(Reply::ok(have)), None);
        }
        // Accepted for this interval: in flight until the store has it (a
        // peering query answered meanwhile lists it only after that).
        let _inflight = self.inflight.enter(t.pg);
        let data = data.unwrap_or_else(|| AlignedBuf::for_read(0));
        if crc32c::crc32c(&data) != op.data_crc {
            return error(
                Status::Malformed,
                known,
                "sub-operation data checksum mismatch",
            );
        }
        let r = match op.kind {
            SubOpKind::Write => match op.extents.as_slice() {
                [(off, len)] if *len == data.len() as u64 => {
                    self.store
                        .write_snap(t.oid, *off, data, op.version, op.snap_seq)
                        .await
                }
                _ => {
                    return error(
                        Status::Malformed,
                        known,
                        "write needs one extent matching its data",
                    );
                }
            },
            SubOpKind::Discard => match op.extents.as_slice() {
                [(off, len)] => {
                    self.store
                        .discard_snap(t.oid, *off, *len, op.version, op.snap_seq)
                        .await
                }
                _ => return error(Status::Malformed, known, "discard needs one extent"),
            },
            SubOpKind::Replace => {
                match from_wire(op.version, &op.extents, op.snaps.as_deref(), &data) {
                    Some(img) => {
                        let grows = self.copy_grows(t.oid, &img);
                        if let Some(why) = self.backfill_refusal(self.me).filter(|_| grows) {
                            return error(Status::NoSpace, known, why);
                        }
                        self.install_copy(t.oid, &img).await
                    }
                    None => {
                        return error(
                            Status::Malformed,
                            known,
                            "replace extents do not match data",
                        );
                    }
                }
            }
            SubOpKind::Fetch => match self.pull_layers(from, t, op.version).await {
                Ok(img) => {
                    let grows = self.copy_grows(t.oid, &img);
                    if let Some(why) = self.backfill_refusal(self.me).filter(|_| grows) {
                        return error(Status::NoSpace, known, why);
                    }
                    self.install_copy(t.oid, &img).await
                }
                Err(why) => return error(Status::Io, known, why),
            },
            SubOpKind::Delete => self.store.delete_snap(t.oid, op.version, op.snap_seq).await,
        };
        match r {
            Ok(()) => {
                if op.kind != SubOpKind::Replace {
                    self.trim_after_stale_write(t.oid, op.snap_seq);
                }
                (Message::Reply(Reply::ok(op.version)), None)
            }
            Err(e) => error(status_of(&e), known, e.to_string()),
        }
    }

    /// Lists the PG's objects held here with their versions, after
    /// promising not to accept operations of intervals before the query's
    /// and letting those accepted before the promise reach the store.
    ///
    /// The query's interval must be one this OSD's map can vouch for: not
    /// beyond its map (it waits for the map: `EpochAhead`), and, when the
    /// map has reached it, the PG's interval then, asked by that
    /// interval's primary. Any other epoch would raise the promise on
    /// nobody's authority and stall the PG.
    pub(crate) async fn answer_peer_query(
        self: &Rc<Self>,
        from: OsdId,
        q: PeerQuery,
    ) -> (Message, Option<AlignedBuf>) {
        let map = self.map();
        let Some(params) = map.pools.get(&q.pg.pool).copied() else {
            return error(
                Status::InvalidArgument,
                Epoch(0),
                format!("pool of pg {} unknown", q.pg),
            );
        };
        if q.epoch > map.epoch {
            return error(
                Status::EpochAhead,
                map.epoch,
                format!(
                    "pg {} interval {} is beyond map {}",
                    q.pg, q.epoch, map.epoch
                ),
            );
        }
        if let Some(entry) = map.pgs.get(&q.pg) {
            if q.epoch > entry.interval {
                return error(
                    Status::InvalidArgument,
                    entry.interval,
                    format!(
                        "pg {} has no interval {} (map {} has it at {})",
                        q.pg, q.epoch, map.epoch, entry.interval
                    ),
                );
            }
            if q.epoch == entry.interval && entry.acting.first() != Some(&from) {
                return error(
                    Status::InvalidArgument,
                    entry.interval,
                    format!(
                        "{from} is not the primary of pg {} in interval {}",
                        q.pg, q.epoch
                    ),
                );
            }
        }
        {
            let mut pgs = self.pgs.borrow_mut();
            let pg = pgs.entry(q.pg).or_insert_with(|| {
                let entry = map.pgs.get(&q.pg).cloned().unwrap_or(PgEntry {
                    interval: Epoch(0),
                    acting: Vec::new(),
                    up: Vec::new(),
                    past: Vec::new(),
                });
                Pg::new(q.pg, entry, params, self.me, 0)
            });
            if q.epoch < pg.known_interval() {
                return error(
                    Status::StaleEpoch,
                    pg.known_interval(),
                    format!(
                        "pg {} already promised interval {}",
                        q.pg,
                        pg.known_interval()
                    ),
                );
            }
            pg.promised = pg.promised.max(q.epoch);
        }
        self.inflight.drained(q.pg).await;
        let (objects, more) = self.list_pg(q.pg, q.after, PEER_PAGE);
        (Message::PeerInfo(PeerInfo { objects, more }), None)
    }

    /// Objects of `pg` after `after`, at most `limit`, and whether more follow.
    pub(crate) fn list_pg(
        &self,
        pg: pontoon_types::PgId,
        after: Option<ObjectId>,
        limit: usize,
    ) -> (Vec<(ObjectId, pontoon_types::Version)>, bool) {
        let map = self.map();
        let Some(params) = map.pools.get(&pg.pool) else {
            return (Vec::new(), false);
        };
        // Objects that live on only for their snapshots count: their
        // version decides, like any other's, which copy is good.
        let mut page = self.store.list_held_where(|oid| {
            after.is_none_or(|a| oid > a)
                && map.volumes.get(&oid.volume.0) == Some(&pg.pool)
                && pg_for(pg.pool, params.pgs, oid) == pg
        });
        let more = page.len() > limit;
        page.truncate(limit);
        (page, more)
    }

    /// Sends this OSD's whole copy of an object, clones included, to a
    /// recovering primary.
    pub(crate) async fn answer_pull(self: &Rc<Self>, t: Target) -> (Message, Option<AlignedBuf>) {
        let copy = match self.read_copy(t.oid).await {
            Ok(Some(img)) => to_wire(t.oid, &img).map(|w| (img.version, w)),
            Ok(None) => return (Message::Reply(Reply::ok(Version::ZERO)), None),
            Err(e) => Err(e),
        };
        match copy {
            Ok((version, w)) => pull_answer(version, w),
            Err(CopyError::Store(e)) => error(status_of(&e), Epoch(0), e.to_string()),
            Err(e @ CopyError::TooLarge { .. }) => {
                // The puller asks again a layer at a time.
                tracing::debug!(osd = %self.me, oid = %t.oid, "whole pull refused: {e}");
                error(Status::InvalidArgument, Epoch(0), e.to_string())
            }
        }
    }

    /// Sends one layer of this OSD's copy of an object (the head, or one
    /// clone) with the whole layout, for a copy too large for one message.
    pub(crate) async fn answer_pull_layer(
        self: &Rc<Self>,
        req: PullLayerReq,
    ) -> (Message, Option<AlignedBuf>) {
        let oid = req.target.oid;
        let img = match self.store.read_object_layers(oid, |l| l == req.layer).await {
            Ok(Some(img)) => img,
            Ok(None) => return (Message::Reply(Reply::ok(Version::ZERO)), None),
            Err(e) => return error(status_of(&e), Epoch(0), e.to_string()),
        };
        // Layer 0 always answers (with the layout, and no head if the
        // object lives on for its snapshots only).
        let held = req.layer == 0 || img.clones.iter().any(|c| c.id == req.layer);
        if !held {
            return error(
                Status::InvalidArgument,
                Epoch(0),
                format!("{oid} has no layer {} here", req.layer),
            );
        }
        match to_wire(oid, &img) {
            Ok(w) => pull_answer(img.version, w),
            Err(e) => {
                self.metrics.recovery_refused();
                tracing::warn!(osd = %self.me, %oid, layer = req.layer, "layer pull refused: {e}");
                error(Status::InvalidArgument, Epoch(0), e.to_string())
            }
        }
    }
}
