//! Pontoon's NBD gateway: serves volumes to NBD clients (qemu, libnbd's
//! tools, fio, the Linux kernel driver) over the fixed-newstyle NBD
//! protocol, one export per volume of a [`pontoon_volume::VolumeCatalog`].
//!
//! This crate owns the NBD wire format ([`proto`]), negotiation, the
//! transmission phase (many requests in flight, replies out of order,
//! structured replies, `base:allocation` block status), read-modify-write
//! of requests that are not 4 KiB-aligned, and the listener with its worker
//! threads. It bounds everything a client can make it hold: payload size,
//! requests in flight and buffered bytes per connection, option sizes and
//! counts, handshake time. It upgrades connections to TLS on
//! `NBD_OPT_STARTTLS` (x509 or pre-shared keys, [`tls`]) and shows each
//! client identity only the exports its list allows ([`ExportAccess`]).
//!
//! It must never trust a length or offset from the network before checking
//! it, panic or allocate on unchecked input, block a worker thread, share a
//! lock between worker threads on the data path, or keep dirty data past an
//! acknowledgement: a reply is sent only once the volume has completed the
//! operation. It knows nothing of the cluster beyond the volume traits.
//!
//! ```no_run
//! use std::sync::Arc;
//! use pontoon_nbd::{ServerConfig, start};
//! use pontoon_volume::{MemCatalog, MemVolume};
//!
//! let config = ServerConfig { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
//! let server = start(config, Arc::new(|| {
//!     let c = MemCatalog::default();
//!     c.insert("vol", MemVolume::new(1 << 30));
//!     c
//! }))
//! .unwrap();
//! println!("serving nbd://{}/vol", server.local_addr());
//! server.stop().unwrap();
//! ```

mod access;
mod handshake;
pub mod proto;
mod rmw;
mod server;
pub mod tls;
mod transmission;

pub use access::{EVERYONE, ExportAccess, ExportRule, PoolOf, format_lists, parse_lists};
pub use server::{CatalogFactory, DEFAULT_PORT, ServerConfig, ServerHandle, start};
pub use tls::{Identity, TlsConfig, TlsMode};
pub use transmission::errno_of;

use pontoon_volume::VolumeError;

/// Errors of the NBD gateway.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the protocol.
    #[error("protocol violation: {0}")]
    Protocol(#[from] proto::ProtoError),
    /// The volume failed.
    #[error("volume error: {0}")]
    Volume(#[from] VolumeError),
    /// The server configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The TLS handshake or session failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// A worker thread failed to start or panicked.
    #[error("worker thread: {0}")]
    Worker(String),
}
