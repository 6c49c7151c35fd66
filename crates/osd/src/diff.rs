//! The primary's answer to a changed-extents query ([`DiffReq`]): which
//! ranges of an object differ between two views of it, and what the newer
//! one reads there, from the store's metadata alone (no data is read).
//!
//! It waits out writes in flight and recovery like a read, so it describes
//! what every member holds. Snapshot existence is the client's check, as
//! for snapshot reads.

use std::rc::Rc;

use pontoon_buf::AlignedBuf;
use pontoon_proto::diff::encode_extents;
use pontoon_proto::{ChangedExtent, DiffReq, DiffView, Message, Reply};
use pontoon_store::{BlockDevice, HEAD};
use pontoon_types::Version;

use crate::peers::Peers;
use crate::shard::Shard;

type Answer = (Message, Option<AlignedBuf>);

/// The store's name for a view (`None`: nothing).
fn store_view(v: DiffView) -> Option<u64> {
    match v {
        DiffView::Nothing => None,
        DiffView::Snap(id) => Some(id),
        DiffView::Head => Some(HEAD),
    }
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Lists the changed extents of `d.target`'s object in the reply's
    /// ranges (see [`pontoon_proto::diff`]).
    pub(crate) async fn client_diff(self: &Rc<Self>, d: DiffReq) -> Answer {
        let t = d.target;
        let c = match self.ready_to_read(&t, 0, 0).await {
            Ok(c) => c,
            Err(a) => return a,
        };
        let to = store_view(d.to).unwrap_or(HEAD);
        let extents: Vec<ChangedExtent> = self
            .store
            .diff_extents(t.oid, store_view(d.from), to)
            .into_iter()
            .map(|e| ChangedExtent {
                offset: e.range.start,
                len: e.range.end - e.range.start,
                data: e.data,
            })
            .collect();
        let mut r = Reply::ok(self.store.version(t.oid).unwrap_or(Version::ZERO));
        r.epoch = c.interval;
        r.ranges = encode_extents(&extents);
        (Message::Reply(r), None)
    }
}
