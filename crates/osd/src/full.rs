//! Running out of space, gracefully: at the full ratio a write that needs
//! new blocks is refused with "no space" (reads, overwrites of allocated
//! blocks, discards and deletes go on, so an operator can free space and
//! writes resume by themselves); at the backfillfull ratio recovery stops
//! pushing data to the OSD and waits.
//!
//! Each shard judges its own slice from the store's counters at once; the
//! other members it knows from the map, where the manager records every
//! OSD's state from its reports.

use pontoon_cluster::space::{FullState, ratio};
use pontoon_proto::Target;
use pontoon_store::BlockDevice;
use pontoon_types::OsdId;

use crate::peers::Peers;
use crate::shard::Shard;

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// This slice's state against the map's ratios.
    pub(crate) fn slice_fullness(&self) -> FullState {
        let (used, capacity) = self.store.fill();
        self.map().full_ratios.state(used, capacity)
    }

    /// Why a write of `len` bytes at `offset` of the target must fail for
    /// lack of space, if it must: it needs new blocks, and this slice or a
    /// member of the acting set is full.
    pub(crate) fn full_refusal(&self, t: &Target, offset: u64, len: u64) -> Option<String> {
        if self.store.unallocated_blocks(t.oid, offset, len) == 0 {
            return None;
        }
        let map = self.map();
        let (used, capacity) = self.store.fill();
        if map.full_ratios.state(used, capacity) == FullState::Full {
            return Some(format!(
                "{} is full ({:.1}% of its data area used): writes needing new space are refused until space is freed",
                self.me,
                ratio(used, capacity) * 100.0
            ));
        }
        map.pgs
            .get(&t.pg)?
            .acting
            .iter()
            .find(|o| map.fullness(**o) == FullState::Full)
            .map(|o| {
                format!("{o} is full: writes needing new space are refused until space is freed")
            })
    }

    /// Why recovery may not push a copy to `osd` now, if it may not: the
    /// OSD is at or above the backfillfull ratio (its own slice, judged
    /// here, when it is this OSD).
    pub(crate) fn backfill_refusal(&self, osd: OsdId) -> Option<String> {
        let state = if osd == self.me {
            self.slice_fullness()
        } else {
            self.map().fullness(osd)
        };
        (state >= FullState::Backfillfull)
            .then(|| format!("{osd} is {state}: recovery onto it waits for space"))
    }
}
