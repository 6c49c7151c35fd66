//! The listener, its worker threads, and the target's limits.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use compio::net::TcpStream;
use pontoon_net::listener::{self, ListenConfig, Service, Stop, Workers};
use pontoon_volume::VolumeCatalog;
use tracing::info;

use crate::controller::Registry;
use crate::{NvmfError, Subsystems, pdu, queue};

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

impl TargetConfig {
    /// Checks the limits against each other and the protocol's rules.
    pub fn validate(&self) -> Result<(), NvmfError> {
        let bad = |m: &str| Err(NvmfError::Config(m.to_string()));
        if self.workers == 0 || self.workers > 1024 {
            return bad("workers must be 1..=1024");
        }
        if !self.max_data_transfer.is_power_of_two()
            || !(4096..=(1 << 24)).contains(&self.max_data_transfer)
        {
            return bad("max_data_transfer must be a power of two from 4 KiB to 16 MiB");
        }
        if !(32..=4096).contains(&self.max_queue_entries) {
            return bad("max_queue_entries must be 32..=4096");
        }
        if self.max_io_queues == 0 {
            return bad("max_io_queues must be positive");
        }
        if self.in_capsule_data > 65536 || !self.in_capsule_data.is_multiple_of(16) {
            return bad("in_capsule_data must be a multiple of 16 up to 64 KiB");
        }
        if self.max_h2c_data < pdu::MIN_MAXH2CDATA || !self.max_h2c_data.is_multiple_of(4096) {
            return bad("max_h2c_data must be a multiple of 4 KiB");
        }
        if self.max_buffered_bytes < 2 * self.max_data_transfer as usize {
            return bad("max_buffered_bytes must hold two maximal transfers");
        }
        if self.max_connections == 0 || self.max_controllers == 0 {
            return bad("max_connections and max_controllers must be positive");
        }
        Ok(())
    }
}

/// What one worker thread owns.
pub(crate) struct Worker<C> {
    /// This thread's catalog.
    pub catalog: C,
    /// The limits.
    pub config: TargetConfig,
    /// What is exported.
    pub subsystems: Subsystems,
    /// Every controller of the target (shared by the workers).
    pub registry: Arc<Registry>,
    /// The stop signal.
    pub stop: Stop,
}

impl<C: VolumeCatalog> Service for Worker<C> {
    fn serve(self: Rc<Self>, stream: TcpStream, peer: SocketAddr) -> impl Future<Output = ()> {
        queue::serve(self, stream, peer)
    }
}

/// A running target. Dropping it stops the target too.
pub struct TargetHandle {
    workers: Workers,
}

impl TargetHandle {
    /// The address the target listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.workers.local_addr()
    }

    /// Stops accepting, lets connections finish commands in flight (up to
    /// the configured grace), closes them and joins the worker threads.
    pub fn stop(self) -> Result<(), NvmfError> {
        self.workers.stop().map_err(NvmfError::Worker)
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
    config.validate()?;
    let registry = Arc::new(Registry::new(config.max_controllers));
    let listen = ListenConfig {
        listen: config.listen,
        workers: config.workers,
        max_connections: config.max_connections,
        shutdown_grace: config.shutdown_grace,
        name: "nvmf-worker",
    };
    let workers = listener::start(
        listen,
        Arc::new(move |stop| Worker {
            catalog: factory(),
            config: config.clone(),
            subsystems: subsystems.clone(),
            registry: registry.clone(),
            stop,
        }),
    )?;
    info!(local_addr = %workers.local_addr(), "NVMe/TCP target listening");
    Ok(TargetHandle { workers })
}
