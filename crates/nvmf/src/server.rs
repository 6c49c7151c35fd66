//! The listener, its worker threads, and the target's limits.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use pontoon_volume::VolumeCatalog;

use crate::{NvmfError, Subsystems};

/// The IANA port for NVMe over Fabrics over TCP.
pub const DEFAULT_PORT: u16 = 4420;

/// Builds one catalog per worker thread; every catalog must see the same
/// volumes.
pub type CatalogFactory<C> = Arc<dyn Fn() -> C + Send + Sync>;

/// How the target listens and what it bounds.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Worker threads, each with its own runtime and catalog.
    pub workers: usize,
    /// Let any host connect to every subsystem (allow-lists ignored).
    pub allow_any_host: bool,
    /// Entries per I/O queue the target accepts (CAP.MQES + 1).
    pub max_queue_entries: u16,
    /// Most I/O queues per controller.
    pub max_io_queues: u16,
    /// Largest data transfer of one command, in bytes (MDTS); a power of
    /// two of at least 4 KiB.
    pub max_data_transfer: u32,
    /// Largest in-capsule data of an I/O command, in bytes (IOCCSZ).
    pub in_capsule_data: u32,
    /// Largest data in one H2CData PDU (MAXH2CDATA).
    pub max_h2c_data: u32,
    /// Most data bytes (writes being received, reads being sent) held per
    /// connection.
    pub max_buffered_bytes: usize,
    /// Longest a host may take between accepting and Connect.
    pub handshake_timeout: Duration,
    /// On stop, how long connections get to finish commands in flight.
    pub shutdown_grace: Duration,
    /// Most connections per worker; more are closed on accept.
    pub max_connections: usize,
    /// Most controllers alive at once.
    pub max_controllers: usize,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, DEFAULT_PORT)),
            workers: 1,
            allow_any_host: false,
            max_queue_entries: 256,
            max_io_queues: 16,
            max_data_transfer: 1 << 20,
            in_capsule_data: 8192,
            max_h2c_data: 128 << 10,
            max_buffered_bytes: 64 << 20,
            handshake_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            max_connections: 1024,
            max_controllers: 1024,
        }
    }
}

/// A running target. Dropping it stops the target too.
pub struct TargetHandle {
    local_addr: SocketAddr,
}

impl TargetHandle {
    /// The address the target listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets connections finish commands in flight (up to
    /// the configured grace), closes them and joins the worker threads.
    pub fn stop(self) -> Result<(), NvmfError> {
        Ok(())
    }
}

/// Binds the listeners and starts the worker threads serving the
/// subsystems in `subsystems` with volumes from the catalogs `factory`
/// builds.
pub fn start<C: VolumeCatalog>(
    config: TargetConfig,
    subsystems: Subsystems,
    factory: CatalogFactory<C>,
) -> Result<TargetHandle, NvmfError> {
    let _ = (subsystems, factory);
    Err(NvmfError::Config(format!(
        "not implemented yet (listen {})",
        config.listen
    )))
}
