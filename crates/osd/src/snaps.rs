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
//! it.

use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_proto::{Message, ReadReq, Reply, Status, Target};
use pontoon_store::BlockDevice;
use pontoon_types::Epoch;

use crate::peers::Peers;
use crate::shard::{Shard, error, status_of};

type Answer = (Message, Option<AlignedBuf>);

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Refuses a mutation whose snap context is older than this shard's
    /// map says the object's volume is at.
    pub(crate) fn check_snap_seq(
        &self,
        t: &Target,
        snap_seq: u64,
        interval: Epoch,
    ) -> Result<(), Answer> {
        let known = self.map().snap_seq(t.oid.volume.0);
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

    /// Reads the primary's copy of `r.target`'s object as snapshot `snap`
    /// sees it. The caller has checked the PG and waited out writes in
    /// flight and recovery, as for head reads. A block failing its
    /// checksum is reported, not repaired: repair copies heads only.
    pub(crate) async fn read_at_snap(
        self: &Rc<Self>,
        r: &ReadReq,
        snap: u64,
        interval: Epoch,
    ) -> Answer {
        let t = r.target;
        match self
            .store
            .read_snap(t.oid, snap, r.offset, u64::from(r.len))
            .await
        {
            Ok(out) => (Message::Reply(Reply::ok(out.version)), Some(out.data)),
            Err(e) => error(
                status_of(&e),
                interval,
                format!("reading {} at snapshot {snap}: {e}", t.oid),
            ),
        }
    }
}
