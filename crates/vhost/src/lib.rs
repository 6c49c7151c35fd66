//! Pontoon's vhost-user-blk backend: a volume served to a QEMU virtual
//! machine on the same host as a virtio-blk disk, with no network gateway
//! in between.
//!
//! QEMU connects to a unix socket, hands over the guest's memory and one
//! virtqueue per queue; the vhost-user protocol itself is rust-vmm's
//! (`vhost-user-backend`, `virtio-queue`, `vm-memory`). Each queue has its
//! own worker thread with its own io_uring runtime and client-library
//! volume ([`VolumeFactory`]); a queue's event thread only moves the
//! available descriptor chains to its worker, so no lock is shared between
//! queues. Data goes from guest memory to the volume in one copy (the
//! client library needs an owned, aligned buffer) and back in one copy.
//!
//! Requests complete in the order the guest made them available. That is
//! what lets a restarted backend carry on: when the backend dies, QEMU
//! rewinds each queue to its used index, so every request not yet
//! completed is offered again to the next backend (see [`export`]).

mod backend;
pub mod config;
pub mod export;
pub mod request;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

pub use export::{Export, ExportConfig};
use pontoon_volume::{BlockVolume, VolumeError};

/// Opens the exported volume on a queue's worker thread; called once per
/// queue (volumes are `!Send`). Every volume it returns must be the same.
pub type VolumeFactory<V> = Arc<dyn Fn() -> Result<V, VolumeError> + Send + Sync>;

/// Why an export could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum VhostError {
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Config(String),
    /// The volume could not be opened.
    #[error("opening the volume: {0}")]
    Volume(#[from] VolumeError),
    /// The socket could not be created.
    #[error("listening on {path}: {source}")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A thread or event file could not be created.
    #[error("starting the backend: {0}")]
    Start(String),
}

/// A volume the backend can serve.
pub trait ExportVolume: BlockVolume {}
impl<T: BlockVolume> ExportVolume for T {}
