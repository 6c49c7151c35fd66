//! Pontoon's client library: open a volume by name and read, write,
//! discard and query it at any 4 KiB-aligned range. Requests are split at
//! object boundaries and each piece goes straight to the primary shard of
//! its PG, found in the cluster map; pieces run concurrently.
//!
//! Requests are retried across map changes, peering and recovery with
//! backoff, each bounded by [`OP_TIMEOUT`](object_io::OP_TIMEOUT); requests
//! in flight are bounded per connection by the network layer. A write
//! returns only once every member of its PG's acting set has it durable,
//! so `flush` has nothing to wait for.
//!
//! Threading: a [`MapFeed`] is shared by the process; each data-path thread
//! (a compio runtime) makes its own [`Client`] and opens volumes from it.
//! Nothing on the I/O path takes a lock.
//!
//! ```no_run
//! # async fn f() -> Result<(), pontoon_client::ClientError> {
//! let feed = pontoon_client::MapFeed::connect(&["http://127.0.0.1:2379".into()], "pontoon")?;
//! let client = pontoon_client::Client::new(feed);
//! let vol = client.open("vol1")?;
//! vol.write_at(0, &[7u8; 4096]).await?;
//! assert_eq!(&vol.read_at(0, 4096).await?[..], &[7u8; 4096][..]);
//! # Ok(()) }
//! ```

mod catalog;
mod clone;
mod diff;
pub mod diff_stream;
pub mod keyring;
pub mod locate;
pub mod map_feed;
pub mod object_io;
mod snapshot;
mod volume;

use std::rc::Rc;
use std::sync::Arc;

pub use catalog::ClusterCatalog;
pub use clone::FlattenStats;
pub use diff::{Change, READ_CHUNK};
pub use keyring::{KeyringError, follow_keyring, identity_from_keyring};
pub use map_feed::{ClientIdentity, LocalMap, MapFeed};
pub use object_io::{CustomWire, Transport, Wire};
pub use pontoon_proto::{ChangedExtent, DiffView};
pub use volume::Volume;

use pontoon_proto::{Reply, Status};
use pontoon_types::ObjectId;
use pontoon_volume::VolumeError;

/// Why a client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// No volume of that name.
    #[error("volume {0} not found")]
    NotFound(String),
    /// Bad offset, length or alignment.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The pool (some OSD of the PG) is full.
    #[error("no space: {0}")]
    NoSpace(String),
    /// No intact copy could be read.
    #[error("data integrity error: {0}")]
    Checksum(String),
    /// An OSD failed the request.
    #[error("I/O error: {0}")]
    Io(String),
    /// Retries did not succeed in time.
    #[error("{what} timed out; last error: {last}")]
    Timeout {
        /// What was being done.
        what: String,
        /// The last failure seen.
        last: String,
    },
    /// An OSD broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The cluster map could not be loaded.
    #[error("cluster map: {0}")]
    Cluster(String),
    /// The OSDs refused this client's identity, or its caps do not allow
    /// the operation.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A write, discard or write-zeroes to a volume opened read-only (a
    /// snapshot, `VOLUME@SNAPSHOT`).
    #[error("{0} is a snapshot and read-only")]
    ReadOnly(String),
}

impl ClientError {
    fn from_status(r: &Reply, oid: ObjectId) -> Self {
        let m = format!("object {oid}: {}", r.message);
        match r.status {
            Status::NoSpace => Self::NoSpace(m),
            Status::InvalidArgument => Self::InvalidArgument(m),
            Status::Checksum => Self::Checksum(m),
            Status::Malformed => Self::Protocol(m),
            Status::PermissionDenied => Self::PermissionDenied(m),
            _ => Self::Io(format!("{:?}: {m}", r.status)),
        }
    }
}

impl From<ClientError> for VolumeError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::InvalidArgument(m) => VolumeError::InvalidArgument(m),
            ClientError::NoSpace(m) => VolumeError::NoSpace(m),
            ClientError::Checksum(m) => VolumeError::DataLoss(m),
            ClientError::PermissionDenied(m) => VolumeError::PermissionDenied(m),
            ClientError::ReadOnly(_) => VolumeError::ReadOnly,
            e @ (ClientError::Timeout { .. } | ClientError::Cluster(_)) => {
                VolumeError::Unavailable(e.to_string())
            }
            e => VolumeError::Io(e.to_string()),
        }
    }
}

/// One thread's handle on the cluster: its map view and connections.
#[derive(Clone)]
pub struct Client {
    transport: Rc<Transport>,
}

impl Client {
    /// A client for this thread over the process's map feed.
    pub fn new(feed: Arc<MapFeed>) -> Self {
        Self {
            transport: Transport::new(LocalMap::new(feed)),
        }
    }

    /// A client whose requests travel over `wire` instead of TCP.
    pub fn with_wire(feed: Arc<MapFeed>, wire: Wire) -> Self {
        Self {
            transport: Transport::with_wire(LocalMap::new(feed), wire),
        }
    }

    /// Opens volume `name`; `VOLUME@SNAPSHOT` opens that snapshot,
    /// read-only (see [`Client::open_snapshot`]).
    pub fn open(&self, name: &str) -> Result<Volume, ClientError> {
        if name.contains('@') {
            let (volume, snap) = pontoon_cluster::parse_snap_spec(name)
                .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
            return self.open_snapshot(volume, snap);
        }
        Volume::open(self.transport.clone(), name)
    }

    /// Opens snapshot `snap` of volume `volume` read-only: reads see the
    /// volume as it was when the snapshot was taken; writes, discards and
    /// write-zeroes fail with [`ClientError::ReadOnly`].
    pub fn open_snapshot(&self, volume: &str, snap: &str) -> Result<Volume, ClientError> {
        Volume::open_snapshot(self.transport.clone(), volume, snap)
    }

    /// The thread's transport (map view and connections).
    pub fn transport(&self) -> &Rc<Transport> {
        &self.transport
    }
}
