//! The listener and its worker threads.
//!
//! Each worker thread runs its own compio runtime, builds its own catalog
//! with the factory (catalogs and volumes are `!Send`) and accepts on its
//! own `SO_REUSEPORT` listener bound to the shared address, so the kernel
//! spreads connections over the workers and nothing is shared between them
//! on the data path. [`ServerHandle::stop`] raises one stop signal that
//! every worker and connection watches.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::pin::pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use compio::net::{TcpListener, TcpStream};
use compio::runtime::JoinHandle;
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::{Either, Shared, join_all, select};
use pontoon_volume::{VOLUME_BLOCK, VolumeCatalog};
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, info, warn};

use crate::NbdError;
use crate::handshake::{self, Outcome};
use crate::rmw::RangeLocks;
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
        Ok(())
    }
}

/// The server's stop signal, visible from every thread and task.
#[derive(Clone)]
pub(crate) struct Stop {
    flag: Arc<AtomicBool>,
    signal: Shared<oneshot::Receiver<()>>,
}

impl Stop {
    /// True once stop was requested.
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once stop is requested.
    pub(crate) async fn wait(&self) {
        if !self.is_set() {
            let _ = self.signal.clone().await;
        }
    }
}

/// A running server. Dropping it stops the server too.
pub struct ServerHandle {
    local_addr: SocketAddr,
    flag: Arc<AtomicBool>,
    stop_tx: Option<oneshot::Sender<()>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// The address the server listens on (with the real port when
    /// configured with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets connections finish requests in flight (up to
    /// the configured grace), closes them and joins the worker threads.
    pub fn stop(mut self) -> Result<(), NbdError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), NbdError> {
        self.flag.store(true, Ordering::Release);
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        let mut panicked = 0;
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                panicked += 1;
            }
        }
        if panicked > 0 {
            return Err(NbdError::Worker(format!(
                "{panicked} worker thread(s) panicked"
            )));
        }
        Ok(())
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            warn!("stopping NBD server: {e}");
        }
    }
}

/// Binds the listeners and starts `config.workers` worker threads serving
/// the volumes of the catalogs `factory` builds.
pub fn start<C: VolumeCatalog>(
    config: ServerConfig,
    factory: CatalogFactory<C>,
) -> Result<ServerHandle, NbdError> {
    config.validate()?;
    let listeners = bind_listeners(config.listen, config.workers)?;
    let local_addr = listeners[0].local_addr()?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let flag = Arc::new(AtomicBool::new(false));
    let stop = Stop {
        flag: flag.clone(),
        signal: stop_rx.shared(),
    };
    let mut handle = ServerHandle {
        local_addr,
        flag,
        stop_tx: Some(stop_tx),
        threads: Vec::with_capacity(config.workers),
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    for (i, listener) in listeners.into_iter().enumerate() {
        let (factory, config, stop, ready) = (
            factory.clone(),
            config.clone(),
            stop.clone(),
            ready_tx.clone(),
        );
        let t = thread::Builder::new()
            .name(format!("nbd-worker-{i}"))
            .spawn(move || worker_main(listener, factory, config, stop, ready))?;
        handle.threads.push(t);
    }
    drop(ready_tx);
    for _ in 0..handle.threads.len() {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(NbdError::Worker(e)),
            Err(_) => {
                return Err(NbdError::Worker(
                    "worker thread exited during start-up".into(),
                ));
            }
        }
    }
    info!(%local_addr, workers = config.workers, "NBD server listening");
    Ok(handle)
}

/// One listening socket per worker, all on the same address.
fn bind_listeners(addr: SocketAddr, n: usize) -> Result<Vec<std::net::TcpListener>, NbdError> {
    let mut out = Vec::with_capacity(n);
    let mut addr = addr;
    for i in 0..n {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        if n > 1 {
            s.set_reuse_port(true)?;
        }
        s.bind(&addr.into())?;
        s.listen(1024)?;
        let l: std::net::TcpListener = s.into();
        if i == 0 {
            // Port 0 resolved: the other workers join the same port.
            addr = l.local_addr()?;
        }
        out.push(l);
    }
    Ok(out)
}

/// What one worker thread owns.
struct Worker<C> {
    catalog: C,
    config: ServerConfig,
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

fn worker_main<C: VolumeCatalog>(
    listener: std::net::TcpListener,
    factory: CatalogFactory<C>,
    config: ServerConfig,
    stop: Stop,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let rt = match compio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot create runtime: {e}")));
            return;
        }
    };
    rt.block_on(async move {
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!("cannot register listener: {e}")));
                return;
            }
        };
        let worker = Rc::new(Worker {
            catalog: factory(),
            config,
            stop,
            locks: RefCell::default(),
        });
        let _ = ready.send(Ok(()));
        accept_loop(worker, listener).await;
    });
}

async fn accept_loop<C: VolumeCatalog>(worker: Rc<Worker<C>>, listener: TcpListener) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    loop {
        if worker.stop.is_set() {
            break;
        }
        let accepted = match select(pin!(listener.accept()), pin!(worker.stop.wait())).await {
            Either::Left((r, _)) => r,
            Either::Right(_) => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                conns.retain(|h| !h.is_finished());
                if conns.len() >= worker.config.max_connections {
                    warn!(%peer, "connection limit reached; closing");
                    continue;
                }
                if let Err(e) = stream.set_nodelay(true) {
                    warn!(%peer, "cannot set TCP_NODELAY: {e}; closing");
                    continue;
                }
                debug!(%peer, "accepted");
                conns.push(compio::runtime::spawn(serve_connection(
                    worker.clone(),
                    stream,
                    peer,
                )));
            }
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                warn!("accept: {e}");
                compio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    let grace = worker.config.shutdown_grace;
    if compio::time::timeout(grace, join_all(conns)).await.is_err() {
        warn!("connections still busy after {grace:?}; dropping them");
    }
}

async fn serve_connection<C: VolumeCatalog>(
    worker: Rc<Worker<C>>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let mut inbound = Inbound::new(stream.clone());
    let mut out = stream.clone();
    let negotiated = compio::time::timeout(
        worker.config.handshake_timeout,
        handshake::negotiate(
            &mut inbound,
            &mut out,
            &worker.catalog,
            &worker.config,
            &worker.stop,
        ),
    )
    .await;
    drop(out);
    let session = match negotiated {
        Err(_) => return debug!(%peer, "handshake timed out"),
        Ok(Err(e)) => return debug!(%peer, "handshake failed: {e}"),
        Ok(Ok(Outcome::Closed(why))) => return debug!(%peer, "closed during handshake: {why}"),
        Ok(Ok(Outcome::Transmission(s))) => s,
    };
    debug!(%peer, export = %session.name, structured = session.structured, "transmission");
    let locks = worker.locks_for(&session.name);
    if let Err(e) = transmission::serve(
        session,
        inbound,
        stream,
        locks,
        &worker.config,
        &worker.stop,
    )
    .await
    {
        debug!(%peer, "connection ended: {e}");
    }
}
