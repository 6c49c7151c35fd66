//! Pontoon's NVMe/TCP target: serves volumes as NVMe namespaces to NVMe
//! over Fabrics hosts (the Linux kernel's nvme-tcp, SPDK, VMware ESXi).
//!
//! The crate owns the NVMe/TCP transport ([`pdu`]: connection set-up,
//! capsules, R2T/H2CData/C2HData, digests, termination requests), the
//! Fabrics commands (Connect, Property Get/Set), a dynamic controller per
//! host association with its admin commands (Identify, Get Log Page,
//! features, asynchronous events, keep alive), the discovery subsystem,
//! and the NVM I/O commands mapped onto a [`pontoon_volume::BlockVolume`].
//! What is exported comes from a [`Subsystems`] handle (the gateway fills
//! it from the cluster map).
//!
//! Like the NBD gateway, it never trusts a length, offset or count from
//! the network before checking it, bounds what one connection can make it
//! hold (commands in flight, buffered data, PDU sizes), and acknowledges a
//! write only once the volume has completed it. A malformed PDU gets a
//! termination request and a closed connection; a bad command gets its
//! NVMe status; other hosts keep being served.

#![warn(missing_docs)]

mod admin;
pub mod auth;
pub mod command;
mod config;
mod controller;
mod fabrics;
mod identify;
pub mod initiator;
mod io;
mod log_page;
pub mod pdu;
mod queue;
mod server;

pub use config::{
    DISCOVERY_NQN, MAX_NQN_LEN, NamespaceConfig, Snapshot, SubsystemConfig, Subsystems, check_nqn,
};
pub use server::{CatalogFactory, DEFAULT_PORT, TargetConfig, TargetHandle, start};

/// Errors of the NVMe/TCP target.
#[derive(Debug, thiserror::Error)]
pub enum NvmfError {
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The target configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A worker thread failed to start or panicked.
    #[error("worker thread: {0}")]
    Worker(String),
}
