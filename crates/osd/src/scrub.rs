//! Scrub: the primary of a clean PG compares every member's copy of every
//! object and repairs what differs from a good copy.
//!
//! A light scrub compares object lists, versions and allocated block
//! counts (the head's and its snapshot clones'); a deep scrub also has
//! every member read every block of the head (so the store verifies each
//! block's checksum) and compares digests of the content, reading each
//! object in 256 KiB pieces, and of the snapshot metadata (sequence, and
//! each clone's id, completeness, blocks and holes). Clone contents are
//! not read: a clone block that fails its checksum is found, and repaired
//! from a replica, when a snapshot read reaches it. Clones are compared as
//! they will be once snap trim has run with the member's map
//! ([`pontoon_store::Store::snaps_trimmed`]), so a member that trimmed a
//! removed snapshot earlier than its peers is not found inconsistent. One object at a time,
//! under its lock (client writes to it wait for the comparison, nothing
//! else does), with a pause after each object three times as long as the
//! object took, so a scrub takes at most a quarter of the time a shard has.
//!
//! The good copy is the newest version whose blocks all pass their
//! checksums, and on a deep scrub the content most members at that version
//! agree on (the primary's on a tie). Bad copies are repaired the way
//! recovery repairs: the object is marked missing on the bad members and
//! recovered from the good ones. An object with no good copy is reported
//! unrecoverable by name; its reads keep failing with a checksum error
//! rather than return bad data.
//!
//! Scrubs run on a schedule (a deep scrub of every PG once per
//! [`crate::ShardMap::deep_scrub_interval`]) and on request: an operator's request
//! is a stamp in the PG's map entry, served once the PG's last scrub began
//! at an older epoch.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use pontoon_proto::{DigestReq, Message, ObjectDigest, Target};
use pontoon_store::{BlockDevice, StoreError};
use pontoon_types::{BLOCK_SIZE_U64, Epoch, ObjectId, OsdId, PgId, Version};
use rustc_hash::FxHashMap;

use crate::peers::Peers;
use crate::pg::Missing;
use crate::shard::{Shard, error, status_of};

type Answer = (Message, Option<pontoon_buf::AlignedBuf>);

/// How often a shard looks for a PG due for a scrub.
const SCHEDULE_TICK: Duration = Duration::from_secs(1);
/// After each object, scrub pauses this many times as long as the object
/// took: it uses at most a quarter of a shard's time. Measured on a 2-vCPU
/// VM with objects digested in [`DIGEST_PIECE`]s, client 4 KiB randread at
/// QD32 kept 0.92-0.96x of its IOPS during a deep scrub (docs/benchmarks.md).
const PAUSE_FACTOR: u32 = 3;
/// Bytes a deep scrub reads and digests at once.
const DIGEST_PIECE: u64 = 256 << 10;
/// Unrecoverable objects named per PG (the count is exact).
const MAX_NAMED: usize = 16;

/// What scrub knows of one PG on this shard (kept across intervals).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgScrub {
    /// When the last scrub (light or deep) finished.
    pub last_scrub: Option<Instant>,
    /// When the last deep scrub finished.
    pub last_deep_scrub: Option<Instant>,
    /// The same two moments in Unix seconds, for people.
    pub last_scrub_unix: Option<u64>,
    /// See `last_scrub_unix`.
    pub last_deep_scrub_unix: Option<u64>,
    /// Map epoch at which the last scrub and the last deep scrub began
    /// (requests stamped at or before them are served).
    pub scrub_epoch: Epoch,
    /// See `scrub_epoch`.
    pub deep_scrub_epoch: Epoch,
    /// Objects whose copies differed in the last scrub.
    pub inconsistent: u64,
    /// Objects repaired by scrubs since the shard started.
    pub repaired: u64,
    /// Objects with no good copy found by the last scrub (at most
    /// [`MAX_NAMED`]) and how many there were.
    pub unrecoverable: Vec<ObjectId>,
    /// See `unrecoverable`.
    pub unrecoverable_count: u64,
    /// Objects compared in the running scrub, and how many it will compare.
    pub progress: Option<(u64, u64)>,
}

/// A shard's scrub bookkeeping.
#[derive(Default)]
pub struct ScrubBook {
    pgs: RefCell<FxHashMap<PgId, PgScrub>>,
    started: Cell<bool>,
    /// Where the shard's life began: PGs never scrubbed count from here.
    born: Cell<Option<Instant>>,
}

impl ScrubBook {
    /// The PG's scrub record.
    pub fn get(&self, pg: PgId) -> PgScrub {
        self.pgs.borrow().get(&pg).cloned().unwrap_or_default()
    }
}

/// How one copy looked.
type Copy = (OsdId, Result<ObjectDigest, String>);

/// What one object's comparison found.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Consistent,
    /// Good holders, bad holders, the good version.
    Repair(Vec<OsdId>, Vec<OsdId>, Version),
    Unrecoverable,
}

/// Picks the good copies: the newest readable version, and among those the
/// digest most share (`first` wins a tie).
fn judge(copies: &[Copy], deep: bool, first: OsdId) -> Verdict {
    let readable: Vec<(OsdId, ObjectDigest)> = copies
        .iter()
        .filter_map(|(o, r)| r.as_ref().ok().map(|d| (*o, *d)))
        .collect();
    let Some(newest) = readable.iter().map(|(_, d)| d.version).max() else {
        return Verdict::Unrecoverable;
    };
    if newest == Version::ZERO {
        // Nobody holds it (it was listed, then removed): nothing to compare.
        return Verdict::Consistent;
    }
    let at_newest: Vec<&(OsdId, ObjectDigest)> = readable
        .iter()
        .filter(|(_, d)| d.version == newest)
        .collect();
    let key = |d: &ObjectDigest| (d.blocks, if deep { d.digest } else { 0 });
    let mut votes: Vec<((u64, u64), usize, bool)> = Vec::new();
    for (o, d) in &at_newest {
        match votes.iter_mut().find(|v| v.0 == key(d)) {
            Some(v) => {
                v.1 += 1;
                v.2 |= *o == first;
            }
            None => votes.push((key(d), 1, *o == first)),
        }
    }
    let Some(best) = votes.iter().max_by_key(|v| (v.1, v.2)).map(|v| v.0) else {
        return Verdict::Unrecoverable;
    };
    let good: Vec<OsdId> = at_newest
        .iter()
        .filter(|(_, d)| key(d) == best)
        .map(|(o, _)| *o)
        .collect();
    let bad: Vec<OsdId> = copies
        .iter()
        .map(|(o, _)| *o)
        .filter(|o| !good.contains(o))
        .collect();
    if bad.is_empty() {
        Verdict::Consistent
    } else {
        Verdict::Repair(good, bad, newest)
    }
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// This OSD's copy of `oid` as scrub compares it.
    pub(crate) async fn local_digest(
        &self,
        oid: ObjectId,
        deep: bool,
    ) -> Result<ObjectDigest, StoreError> {
        let Some(version) = self.store.held_version(oid) else {
            return Ok(ObjectDigest {
                version: Version::ZERO,
                blocks: 0,
                digest: 0,
            });
        };
        let ranges = self.store.allocated(oid);
        // Clones as they will be once trimmed by this map: a member that
        // trimmed earlier than another holds the same.
        let snaps = self.snaps_once_trimmed(oid);
        let clone_blocks: u64 = snaps.iter().flat_map(|s| &s.clones).map(|c| c.blocks).sum();
        let blocks = ranges
            .iter()
            .map(|r| (r.end - r.start) / BLOCK_SIZE_U64)
            .sum::<u64>()
            + clone_blocks;
        if !deep {
            return Ok(ObjectDigest {
                version,
                blocks,
                digest: 0,
            });
        }
        // Read in pieces, so one object's read and checksums never hold the
        // shard's loop for long; the primary holds the object's lock, so
        // nothing changes it meanwhile (a version that moves anyway makes
        // this copy count as bad, and repair rewrites it).
        let (mut layout, mut content) = (0u32, 0u32);
        if let Some(s) = &snaps {
            layout = crc32c::crc32c_append(layout, &s.seq.to_le_bytes());
            layout = crc32c::crc32c_append(layout, &[u8::from(s.has_head)]);
            for c in &s.clones {
                for v in [c.id, u64::from(c.complete), c.blocks, c.holes] {
                    layout = crc32c::crc32c_append(layout, &v.to_le_bytes());
                }
            }
        }
        for r in ranges {
            layout = crc32c::crc32c_append(layout, &r.start.to_le_bytes());
            layout = crc32c::crc32c_append(layout, &(r.end - r.start).to_le_bytes());
            let mut at = r.start;
            while at < r.end {
                let n = (r.end - at).min(DIGEST_PIECE);
                let out = self.store.read(oid, at, n).await?;
                if out.version != version {
                    return Err(StoreError::InvalidArgument(format!(
                        "{oid} changed from {version} to {} while scrub read it",
                        out.version
                    )));
                }
                content = crc32c::crc32c_append(content, &out.data);
                at += n;
            }
        }
        Ok(ObjectDigest {
            version,
            blocks,
            digest: (u64::from(layout) << 32) | u64::from(content),
        })
    }

    /// Answers a primary's scrub question about our copy.
    pub(crate) async fn answer_digest(self: &Rc<Self>, q: DigestReq) -> Answer {
        match self.local_digest(q.target.oid, q.deep).await {
            Ok(d) => (Message::DigestInfo(d), None),
            Err(e) => error(status_of(&e), Epoch(0), e.to_string()),
        }
    }

    async fn member_digest(self: &Rc<Self>, osd: OsdId, target: Target, deep: bool) -> Copy {
        if osd == self.me {
            let r = self.local_digest(target.oid, deep).await;
            return (osd, r.map_err(|e| e.to_string()));
        }
        let msg = Message::Digest(DigestReq { target, deep });
        let r = match self.peers.call(osd, target.pg, &msg, None).await {
            Ok((Message::DigestInfo(d), _)) => Ok(d),
            Ok((Message::Reply(r), _)) => Err(format!("{:?}: {}", r.status, r.message)),
            Ok((m, _)) => Err(format!("unexpected answer {:?}", m.msg_type())),
            Err(e) => Err(e.to_string()),
        };
        (osd, r)
    }

    /// Starts the schedule once (at the first map).
    pub(crate) fn start_scrubbing(self: &Rc<Self>) {
        if self.scrub.started.replace(true) {
            return;
        }
        self.scrub.born.set(Some(pontoon_rt::now()));
        let shard = self.clone();
        pontoon_rt::spawn(async move { shard.scrub_schedule().await });
    }

    async fn scrub_schedule(self: Rc<Self>) {
        loop {
            pontoon_rt::sleep(SCHEDULE_TICK).await;
            if let Some((pg, deep)) = self.next_due()
                && let Err(why) = self.scrub_pg(pg, deep).await
            {
                tracing::info!(osd = %self.me, %pg, deep, "scrub stopped: {why}");
            }
        }
    }

    /// The PG this shard leads that is most due for a scrub: requested
    /// ones first, then the one whose deep scrub is oldest, if overdue.
    fn next_due(&self) -> Option<(PgId, bool)> {
        if self.is_fenced() {
            return None;
        }
        let map = self.map();
        let now = pontoon_rt::now();
        let born = self.scrub.born.get().unwrap_or(now);
        let book = self.scrub.pgs.borrow();
        let mut overdue: Option<(Instant, PgId)> = None;
        for (id, pg) in self.pgs.borrow().iter() {
            if !pg.scrubbable() {
                continue;
            }
            let rec = book.get(id).cloned().unwrap_or_default();
            if let Some(req) = map.scrub_requests.get(id) {
                if req.deep && req.epoch > rec.deep_scrub_epoch {
                    return Some((*id, true));
                }
                if !req.deep && req.epoch > rec.scrub_epoch.max(rec.deep_scrub_epoch) {
                    return Some((*id, false));
                }
            }
            let last = rec.last_deep_scrub.unwrap_or(born);
            if !map.deep_scrub_interval.is_zero()
                && now.saturating_duration_since(last) >= map.deep_scrub_interval
                && overdue.is_none_or(|(t, _)| last < t)
            {
                overdue = Some((last, *id));
            }
        }
        overdue.map(|(_, id)| (id, true))
    }

    /// Scrubs `pg` (deep or light) if this shard is its active primary.
    pub async fn scrub_pg(self: &Rc<Self>, pg: PgId, deep: bool) -> Result<PgScrub, String> {
        let (generation, interval, acting) = {
            let pgs = self.pgs.borrow();
            let p = pgs
                .get(&pg)
                .filter(|p| p.scrubbable())
                .ok_or("not the active primary of a recovered PG")?;
            (p.generation, p.entry.interval, p.entry.acting.clone())
        };
        let epoch = self.map().epoch;
        let started = pontoon_rt::now();
        tracing::info!(osd = %self.me, %pg, deep, "scrub starting");
        // Every member's list: an object only a replica holds is found too.
        let lists = join_all(acting.iter().map(|o| self.query_member(*o, pg, interval))).await;
        let mut objects = BTreeSet::new();
        for (o, l) in acting.iter().zip(lists) {
            objects.extend(
                l.map_err(|e| format!("listing {o}: {e}"))?
                    .into_iter()
                    .map(|(id, _)| id),
            );
        }
        self.with_scrub(pg, |s| s.progress = Some((0, objects.len() as u64)));
        let (mut inconsistent, mut repaired, mut lost) = (0u64, 0u64, Vec::new());
        for (i, oid) in objects.into_iter().enumerate() {
            if !self.is_current(pg, generation) {
                self.with_scrub(pg, |s| s.progress = None);
                return Err("the interval changed".into());
            }
            let t0 = pontoon_rt::now();
            let (verdict, fixed) = self
                .scrub_object(pg, generation, interval, &acting, oid, deep)
                .await;
            match verdict {
                Verdict::Consistent => {}
                Verdict::Repair(..) => inconsistent += 1,
                Verdict::Unrecoverable => {
                    inconsistent += 1;
                    lost.push(oid);
                }
            }
            repaired += u64::from(fixed);
            self.metrics
                .scrubbed(!matches!(verdict, Verdict::Consistent), fixed);
            self.with_scrub(pg, |s| {
                s.progress = Some((i as u64 + 1, s.progress.map_or(0, |p| p.1)))
            });
            // Behind client I/O: a pause of PAUSE_FACTOR times what the
            // object took.
            let took = pontoon_rt::now().saturating_duration_since(t0);
            pontoon_rt::sleep(took * PAUSE_FACTOR).await;
        }
        let now = pontoon_rt::now();
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let rec = self.with_scrub(pg, |s| {
            s.progress = None;
            s.last_scrub = Some(now);
            s.last_scrub_unix = Some(unix);
            s.scrub_epoch = epoch;
            if deep {
                s.last_deep_scrub = Some(now);
                s.last_deep_scrub_unix = Some(unix);
                s.deep_scrub_epoch = epoch;
            }
            s.inconsistent = inconsistent;
            s.repaired += repaired;
            s.unrecoverable_count = lost.len() as u64;
            lost.truncate(MAX_NAMED);
            s.unrecoverable = lost;
        });
        tracing::info!(
            osd = %self.me, %pg, deep, inconsistent, repaired,
            unrecoverable = rec.unrecoverable_count,
            secs = now.saturating_duration_since(started).as_secs_f64(),
            "scrub done"
        );
        Ok(rec)
    }

    fn with_scrub(&self, pg: PgId, f: impl FnOnce(&mut PgScrub)) -> PgScrub {
        let mut book = self.scrub.pgs.borrow_mut();
        let s = book.entry(pg).or_default();
        f(s);
        s.clone()
    }

    /// Compares every member's copy of `oid` and, under the same hold of
    /// its lock (no write may slip in between), repairs the bad ones.
    /// Returns the verdict and whether the repair finished; one that could
    /// not is left to background recovery (the object stays missing on the
    /// bad members).
    async fn scrub_object(
        self: &Rc<Self>,
        pg: PgId,
        generation: u64,
        interval: Epoch,
        acting: &[OsdId],
        oid: ObjectId,
        deep: bool,
    ) -> (Verdict, bool) {
        let _lock = self.locks.lock(oid).await;
        // Gone with its volume (reclaim deletes the copies), or the PG's
        // life ended: nothing to compare.
        if !self.is_current(pg, generation) || self.map().pg_of(oid) != Some(pg) {
            return (Verdict::Consistent, false);
        }
        let target = Target {
            pg,
            epoch: interval,
            oid,
        };
        let copies = join_all(acting.iter().map(|o| self.member_digest(*o, target, deep))).await;
        let verdict = judge(&copies, deep, self.me);
        let mut fixed = false;
        match &verdict {
            Verdict::Consistent => {}
            Verdict::Unrecoverable => {
                let why: Vec<String> = copies
                    .iter()
                    .filter_map(|(o, r)| r.as_ref().err().map(|e| format!("{o}: {e}")))
                    .collect();
                tracing::error!(
                    osd = %self.me, %pg, %oid,
                    "scrub: no good copy of the object, it is unrecoverable ({})",
                    why.join("; ")
                );
            }
            Verdict::Repair(good, bad, version) => {
                tracing::warn!(osd = %self.me, %pg, %oid, ?bad, ?good, "scrub: copies differ; repairing");
                let marked = {
                    let mut pgs = self.pgs.borrow_mut();
                    match pgs.get_mut(&pg).filter(|p| p.generation == generation) {
                        Some(p) => {
                            p.missing.insert(
                                oid,
                                Missing {
                                    version: *version,
                                    holders: good.clone(),
                                    stale: bad.clone(),
                                },
                            );
                            true
                        }
                        None => false,
                    }
                };
                if marked {
                    match self.recover_object(pg, generation, oid).await {
                        Ok(()) => fixed = true,
                        Err(why) => {
                            tracing::warn!(%pg, %oid, "scrub: repair failed, left to recovery: {why}");
                            self.start_recovery(pg, generation);
                        }
                    }
                }
            }
        }
        (verdict, fixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: u64, digest: u64) -> ObjectDigest {
        ObjectDigest {
            version: Version::new(1, v),
            blocks: 4,
            digest,
        }
    }

    #[test]
    fn the_majority_at_the_newest_readable_version_is_good() {
        let (a, b, c) = (OsdId(0), OsdId(1), OsdId(2));
        let same = [(a, Ok(d(2, 7))), (b, Ok(d(2, 7))), (c, Ok(d(2, 7)))];
        assert_eq!(judge(&same, true, a), Verdict::Consistent);
        let rotten = [(a, Ok(d(2, 7))), (b, Ok(d(2, 9))), (c, Ok(d(2, 7)))];
        assert_eq!(
            judge(&rotten, true, a),
            Verdict::Repair(vec![a, c], vec![b], Version::new(1, 2))
        );
        assert_eq!(
            judge(&rotten, false, a),
            Verdict::Consistent,
            "light scrub reads no content"
        );
        let unreadable = [
            (a, Err("checksum".to_string())),
            (b, Ok(d(2, 7))),
            (c, Ok(d(2, 7))),
        ];
        assert_eq!(
            judge(&unreadable, true, a),
            Verdict::Repair(vec![b, c], vec![a], Version::new(1, 2))
        );
        let stale = [(a, Ok(d(3, 1))), (b, Ok(d(2, 7))), (c, Ok(d(2, 7)))];
        assert_eq!(
            judge(&stale, true, a),
            Verdict::Repair(vec![a], vec![b, c], Version::new(1, 3))
        );
        let tie = [(a, Ok(d(2, 1))), (b, Ok(d(2, 2)))];
        assert_eq!(
            judge(&tie, true, b),
            Verdict::Repair(vec![b], vec![a], Version::new(1, 2)),
            "a tie goes to the primary's copy"
        );
        let lost = [
            (a, Err("checksum".to_string())),
            (b, Err("checksum".to_string())),
        ];
        assert_eq!(judge(&lost, true, a), Verdict::Unrecoverable);
    }
}
