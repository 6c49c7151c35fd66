//! Heartbeats between OSDs that share PGs. Every shard pings, once a
//! second, the shard of each other OSD that serves (or is placed to serve)
//! a PG it owns, over the same network path the PG's traffic takes. A peer
//! that has not answered for longer than [`HEARTBEAT_GRACE`] is reported
//! unreachable to the manager, which holds an OSD down when enough peers
//! on other hosts report it (see `pontoon_mgr`): the failure detector that
//! does not depend on etcd alone.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use pontoon_store::BlockDevice;
use pontoon_types::{OsdId, PgId};

use crate::peers::Peers;
use crate::shard::Shard;

/// How often each peer is pinged.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a peer may go without answering before it is reported.
pub const HEARTBEAT_GRACE: Duration = Duration::from_secs(3);

/// What a shard knows of one peer's heartbeats.
#[derive(Debug)]
struct Beat {
    /// When the peer became a target (a new peer gets a grace too).
    since: Instant,
    /// Send time of the last ping it answered.
    last_ok: Instant,
    /// Pings out (one per interval, so one lost ping does not hold up the
    /// next; at most [`MAX_IN_FLIGHT`]).
    in_flight: u32,
}

/// Most pings out to one peer at once.
const MAX_IN_FLIGHT: u32 = 4;

/// The heartbeat state of one shard.
#[derive(Debug, Default)]
pub(crate) struct Heartbeats {
    peers: RefCell<BTreeMap<OsdId, Beat>>,
}

impl Heartbeats {
    /// Peers that have not answered for longer than the grace.
    pub(crate) fn unreachable(&self, now: Instant) -> Vec<OsdId> {
        self.peers
            .borrow()
            .iter()
            .filter(|(_, b)| {
                now.saturating_duration_since(b.last_ok) > HEARTBEAT_GRACE
                    && now.saturating_duration_since(b.since) > HEARTBEAT_GRACE
            })
            .map(|(o, _)| *o)
            .collect()
    }
}

impl<D: BlockDevice + 'static, P: Peers> Shard<D, P> {
    /// Starts pinging this shard's peers in the background, for as long
    /// as the shard exists.
    pub fn start_heartbeats(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        pontoon_rt::spawn(heartbeat_loop(weak));
    }

    /// Each other OSD in the up or acting set of a PG this shard owns,
    /// with one such PG (which says which of its shards to ping).
    fn heartbeat_targets(&self) -> BTreeMap<OsdId, PgId> {
        let map = self.map();
        let mut out = BTreeMap::new();
        for (pg, entry) in map.pgs.iter() {
            if !self.owns(*pg) {
                continue;
            }
            let mine = entry.acting.contains(&self.me) || entry.up.contains(&self.me);
            if !mine {
                continue;
            }
            for o in entry.acting.iter().chain(&entry.up) {
                if *o != self.me {
                    out.entry(*o).or_insert(*pg);
                }
            }
        }
        out
    }
}

async fn heartbeat_loop<D: BlockDevice + 'static, P: Peers>(shard: Weak<Shard<D, P>>) {
    let mut last_round = pontoon_rt::now();
    loop {
        pontoon_rt::sleep(HEARTBEAT_INTERVAL).await;
        let Some(s) = shard.upgrade() else { return };
        let targets = s.heartbeat_targets();
        let now = pontoon_rt::now();
        // This shard itself stood still (the process was stopped, or its
        // event loop stalled): what it knows of its peers is old, not bad.
        let stalled = now.saturating_duration_since(last_round) > 2 * HEARTBEAT_INTERVAL;
        last_round = now;
        let mut send = Vec::new();
        {
            let mut peers = s.heartbeats.peers.borrow_mut();
            peers.retain(|o, _| targets.contains_key(o));
            if stalled {
                for b in peers.values_mut() {
                    b.since = now;
                }
            }
            for (osd, pg) in &targets {
                let b = peers.entry(*osd).or_insert(Beat {
                    since: now,
                    last_ok: now,
                    in_flight: 0,
                });
                if b.in_flight < MAX_IN_FLIGHT {
                    b.in_flight += 1;
                    send.push((*osd, *pg));
                }
            }
        }
        for (osd, pg) in send {
            let weak = Rc::downgrade(&s);
            pontoon_rt::spawn(async move {
                let Some(s) = weak.upgrade() else { return };
                let sent = pontoon_rt::now();
                let ok = s.peers.ping(osd, pg, HEARTBEAT_GRACE).await.is_ok();
                if let Some(b) = s.heartbeats.peers.borrow_mut().get_mut(&osd) {
                    b.in_flight = b.in_flight.saturating_sub(1);
                    if ok {
                        b.last_ok = b.last_ok.max(sent);
                    }
                }
            });
        }
    }
}
