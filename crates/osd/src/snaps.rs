//! Snapshots on the OSD: the snap context a write or discard carries, and
//! reads at a snapshot.
//!
//! A client stamps each write and discard with its volume's snapshot
//! sequence (`snap_seq`, from its map). The primary refuses one carrying a
//! sequence older than its own map's with [`Status::StaleSnapSeq`]: the
//! client refreshes its map and sends it again, so once every OSD has the
//! map holding a new snapshot, no write issued without knowledge of it can
//! land and overwrite what it must keep. Accepted operations are applied
//! with the store's redirect-on-write calls at the request's sequence, on
//! the primary and (through the sub-operation, which carries it) on every
//! replica.
//!
//! A sequence newer than the primary's map is accepted: the store keeps
//! what every snapshot up to it reads, which is only ever more than needed.
//!
//! Reads at a snapshot resolve through the store's clones. Snapshot
//! existence is the client's check (the map it opened the snapshot from):
//! the store answers any id, reading as of the newest snapshot at or below
//! it. Recovery and repair copy clones with the head, so a rebuilt replica
//! answers snapshot reads like the others (see [`crate::copies`]).

use pontoon_buf::AlignedBuf;
use pontoon_proto::{Message, ReadReq, Reply, Status, Target};
use pontoon_store::{BlockDevice, StoreError};
use pontoon_types::Epoch;

use crate::peers::Peers;
use crate::shard::{Shard, error, status_of};

type Answer = (Message, Option<AlignedBuf>);

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Refuses a mutation whose snap context is older than this shard's
    /// map says the object's volume is at, or than the object was last
    /// written under: a client whose map already had a newer snapshot
    /// wrote it, which made the snapshot's clone, so a write with the old
    /// context would land outside the snapshot although its sender may
    /// have writes in the snapshot that it issued after this one was
    /// acknowledged. (Called under the object's lock.)
    pub(crate) fn check_snap_seq(
        &self,
        t: &Target,
        snap_seq: u64,
        interval: Epoch,
    ) -> Result<(), Answer> {
        let known = self
            .map()
            .snap_seq(t.oid.volume.0)
            .max(self.store.snap_seq_of(t.oid));
        if snap_seq < known {
            return Err(error(
                Status::StaleSnapSeq,
                interval,
                format!(
                    "volume {} is at snapshot sequence {known}, the request carries {snap_seq}",
                    t.oid.volume.0
                ),
            ));
        }
        Ok(())
    }

    /// Reads the primary's copy of `r`'s range, of the head or of the
    /// snapshot it names. The caller has checked the PG and waited out
    /// writes in flight and recovery. A block failing its checksum is an
    /// error the caller repairs from a replica (whole copies carry clones,
    /// so snapshot reads are repaired like head reads).
    pub(crate) async fn read_local(&self, r: &ReadReq) -> Result<Answer, StoreError> {
        let (oid, offset, len) = (r.target.oid, r.offset, u64::from(r.len));
        let out = match r.snap {
            Some(snap) => self.store.read_snap(oid, snap, offset, len).await?,
            None => self.store.read(oid, offset, len).await?,
        };
        Ok((Message::Reply(Reply::ok(out.version)), Some(out.data)))
    }

    /// The answer to a read that failed with `e`.
    pub(crate) fn read_error(&self, r: &ReadReq, e: &StoreError, interval: Epoch) -> Answer {
        let oid = r.target.oid;
        let what = match r.snap {
            Some(snap) => format!("reading {oid} at snapshot {snap}: {e}"),
            None => e.to_string(),
        };
        error(status_of(e), interval, what)
    }
}
