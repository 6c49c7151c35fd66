//! The server's limits and its worker threads: each worker (see
//! [`pontoon_net::listener`]) builds its own catalog with the factory
//! (catalogs and volumes are `!Send`) and serves the connections it
//! accepts.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use compio::net::TcpStream;
use pontoon_net::listener::{self, ListenConfig, Service, Stop, Workers};
use pontoon_volume::{VOLUME_BLOCK, VolumeCatalog};
use tracing::{debug, info};

use crate::NbdError;
use crate::access::ExportAccess;
use crate::handshake::{self, Link, Outcome};
use crate::rmw::RangeLocks;
use crate::tls::{TlsAcceptor, TlsConfig};
use crate::transmission;
use pontoon_net::stream::Inbound;

/// The IANA port for NBD.
pub const DEFAULT_PORT: u16 = 10809;

/// Builds one catalog per worker thread. Every catalog it builds must see
/// the same volumes (the server advertises `NBD_FLAG_CAN_MULTI_CONN`).
pub type CatalogFactory<C> = Arc<dyn Fn() -> C + Send + Sync>;

/// How the server listens and what it bounds.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on; port 0 picks a free port (see
    /// [`ServerHandle::local_addr`]).
    pub listen: SocketAddr,
    /// Worker threads, each with its own runtime, catalog and listener.
    pub workers: usize,
    /// Largest READ/WRITE payload, advertised as the maximum block size.
    /// Longer reads get `EINVAL`; longer writes get `EINVAL` and a
    /// disconnect (their payload is not read).
    pub max_payload: u32,
    /// Most requests in flight per connection.
    pub max_in_flight: usize,
    /// Most payload bytes (write data, read data awaiting the socket) held
    /// per connection.
    pub max_buffered_bytes: usize,
    /// Minimum block size to advertise; `None` picks 1 with one worker
    /// (unaligned requests are read-modify-written under a range lock) and
    /// 4096 with several (the range lock is per worker).
    pub min_block_size: Option<u32>,
    /// Export served to clients asking for the default ("") export.
    pub default_export: Option<String>,
    /// Structured reads report holes as hole chunks (one allocation
    /// lookup per read) instead of sending zeros.
    pub sparse_reads: bool,
    /// Longest a client may take to finish negotiation.
    pub handshake_timeout: Duration,
    /// On stop, how long connections get to finish requests in flight
    /// before they are dropped.
    pub shutdown_grace: Duration,
    /// Most connections per worker; more are closed on accept.
    pub max_connections: usize,
    /// TLS mode and credentials.
    pub tls: TlsConfig,
    /// Which exports each client identity may list and open.
    pub access: ExportAccess,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, DEFAULT_PORT)),
            workers: 1,
            max_payload: 32 << 20,
            max_in_flight: 128,
            max_buffered_bytes: 64 << 20,
            min_block_size: None,
            default_export: None,
            sparse_reads: true,
            handshake_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            max_connections: 1024,
            tls: TlsConfig::default(),
            access: ExportAccess::unrestricted(),
        }
    }
}

impl ServerConfig {
    /// The minimum block size advertised.
    pub fn min_block(&self) -> u32 {
        self.min_block_size.unwrap_or(if self.workers > 1 {
            VOLUME_BLOCK as u32
        } else {
            1
        })
    }

    /// The preferred block size advertised: the volume block.
    pub fn preferred_block(&self) -> u32 {
        VOLUME_BLOCK as u32
    }

    /// Checks the limits against each other and the protocol's rules.
    pub fn validate(&self) -> Result<(), NbdError> {
        let bad = |m: &str| Err(NbdError::Config(m.to_string()));
        let min = self.min_block();
        if self.workers == 0 || self.workers > 1024 {
            return bad("workers must be 1..=1024");
        }
        if !min.is_power_of_two() || min > 65536 {
            return bad("minimum block size must be a power of two up to 65536");
        }
        if self.workers > 1 && min < VOLUME_BLOCK as u32 {
            return bad("several workers need a minimum block size of at least 4096");
        }
        if self.max_payload < VOLUME_BLOCK as u32 || !self.max_payload.is_multiple_of(min) {
            return bad(
                "max_payload must be at least 4096 and a multiple of the minimum block size",
            );
        }
        if (self.max_buffered_bytes as u64) < u64::from(self.max_payload) + 2 * VOLUME_BLOCK {
            return bad("max_buffered_bytes must hold one maximal request plus two blocks");
        }
        if self.max_in_flight == 0 || self.max_connections == 0 {
            return bad("max_in_flight and max_connections must be positive");
        }
        self.tls.validate(self.listen)
    }
}

/// A running server. Dropping it stops the server too.
pub struct ServerHandle {
    workers: Workers,
}

impl ServerHandle {
    /// The address the server listens on (with the real port when
    /// configured with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.workers.local_addr()
    }

    /// Stops accepting, lets connections finish requests in flight (up to
    /// the configured grace), closes them and joins the worker threads.
    pub fn stop(self) -> Result<(), NbdError> {
        self.workers.stop().map_err(NbdError::Worker)
    }
}

/// Binds the listeners and starts `config.workers` worker threads serving
/// the volumes of the catalogs `factory` builds.
pub fn start<C: VolumeCatalog>(
    config: ServerConfig,
    factory: CatalogFactory<C>,
) -> Result<ServerHandle, NbdError> {
    config.validate()?;
    let tls = TlsAcceptor::new(&config.tls)?;
    let (tls_mode, export_lists) = (config.tls.mode, config.access.is_restricted());
    let listen = ListenConfig {
        listen: config.listen,
        workers: config.workers,
        max_connections: config.max_connections,
        shutdown_grace: config.shutdown_grace,
        name: "nbd-worker",
    };
    let workers = listener::start(
        listen,
        Arc::new(move |stop| Worker {
            catalog: factory(),
            config: config.clone(),
            tls: tls.clone(),
            stop,
            locks: RefCell::default(),
        }),
    )?;
    info!(
        local_addr = %workers.local_addr(),
        tls = %tls_mode,
        export_lists,
        "NBD server listening"
    );
    Ok(ServerHandle { workers })
}

/// What one worker thread owns.
struct Worker<C> {
    catalog: C,
    config: ServerConfig,
    /// The TLS context, unless TLS is off.
    tls: Option<TlsAcceptor>,
    stop: Stop,
    /// Range locks per volume name, shared by this worker's connections.
    locks: RefCell<HashMap<String, Weak<RangeLocks>>>,
}

impl<C> Worker<C> {
    fn locks_for(&self, name: &str) -> Rc<RangeLocks> {
        let mut map = self.locks.borrow_mut();
        if let Some(l) = map.get(name).and_then(Weak::upgrade) {
            return l;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let l = Rc::new(RangeLocks::default());
        map.insert(name.to_string(), Rc::downgrade(&l));
        l
    }
}

impl<C: VolumeCatalog> Service for Worker<C> {
    fn serve(self: Rc<Self>, stream: TcpStream, peer: SocketAddr) -> impl Future<Output = ()> {
        serve_connection(self, stream, peer)
    }
}

async fn serve_connection<C: VolumeCatalog>(
    worker: Rc<Worker<C>>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let link = Link::Plain {
        inbound: Inbound::new(stream.clone()),
        out: stream.clone(),
    };
    let negotiated = compio::time::timeout(
        worker.config.handshake_timeout,
        handshake::negotiate(
            link,
            stream.clone(),
            &worker.catalog,
            &worker.config,
            worker.tls.as_ref(),
            &worker.stop,
        ),
    )
    .await;
    let (session, link) = match negotiated {
        Err(_) => return debug!(%peer, "handshake timed out"),
        Ok(Err(NbdError::Tls(e))) => return info!(%peer, "TLS handshake refused: {e}"),
        Ok(Err(e)) => return debug!(%peer, "handshake failed: {e}"),
        Ok(Ok(Outcome::Closed(why))) => return debug!(%peer, "closed during handshake: {why}"),
        Ok(Ok(Outcome::Transmission(s, link))) => (s, link),
    };
    debug!(
        %peer,
        export = %session.name,
        structured = session.structured,
        tls = link.is_tls(),
        "transmission"
    );
    let locks = worker.locks_for(&session.name);
    let served = match link {
        Link::Plain { inbound, out } => {
            transmission::serve(
                session,
                inbound,
                out,
                Some(stream),
                locks,
                &worker.config,
                &worker.stop,
            )
            .await
        }
        Link::Tls { inbound, out } => {
            transmission::serve(
                session,
                inbound,
                out,
                None,
                locks,
                &worker.config,
                &worker.stop,
            )
            .await
        }
    };
    if let Err(e) = served {
        debug!(%peer, "connection ended: {e}");
    }
}
