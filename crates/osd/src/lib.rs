//! Pontoon's OSD: one daemon per data device. The device is cut into store
//! slices, one per shard (a core with its own io_uring runtime and TCP
//! port); each shard serves the PGs whose index maps to it, so no request
//! and no lock crosses cores on the data path.
//!
//! For each PG a shard is its primary, a replica or a stray holding old
//! data. The primary orders mutations per object, stamps versions
//! (interval epoch, counter), applies them locally and on every other
//! acting member in parallel, and answers only when all have them durable.
//! At the start of every interval the primary peers (see [`peering`]): it
//! fences every current member and one member of every earlier interval,
//! takes the highest version of each object as authoritative, and recovers
//! stale copies before they serve, in the background and on demand.
//!
//! The PG logic talks to other OSDs only through [`Peers`], so the
//! deterministic simulator can run it unchanged.

pub mod access;
mod client_ops;
pub mod control;
mod copies;
pub mod daemon;
pub mod deadline;
pub mod device_lock;
mod diff;
mod full;
pub mod heartbeat;
pub mod identity;
pub mod life;
pub mod locks;
pub mod map;
pub mod metrics;
pub mod peering;
pub mod peers;
pub mod pg;
pub mod reclaim;
mod replica;
pub mod scrub;
pub mod shard;
pub mod snap_trim;
mod snaps;
#[doc(hidden)]
pub mod testkit;
pub mod view;
pub mod wear;

pub use deadline::LeaseDeadline;
pub use map::{PastInterval, PgEntry, PoolParams, ShardMap, pg_for};
pub use peers::{NetPeers, PEER_TIMEOUT, PeerError, Peers};
pub use shard::{PgStatus, Shard, ShardReport};
