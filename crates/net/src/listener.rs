//! The listener of a front-end gateway (NBD, NVMe/TCP): worker threads,
//! each with its own compio runtime, its own per-thread state built by a
//! factory (catalogs and volumes are `!Send`) and its own `SO_REUSEPORT`
//! listener bound to the shared address, so the kernel spreads connections
//! over the workers and nothing is shared between them on the data path.
//! [`Workers::stop`] raises one [`Stop`] signal that every worker and
//! connection watches, then waits (up to a grace) for connections to end.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use compio::net::{TcpListener, TcpStream};
use compio::runtime::JoinHandle;
use futures::FutureExt;
use futures::channel::oneshot;
use futures::future::{Either, Shared, join_all, select};
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{debug, warn};

/// The stop signal of a gateway, visible from every thread and task.
#[derive(Clone)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    signal: Shared<oneshot::Receiver<()>>,
}

impl Stop {
    /// True once stop was requested.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once stop is requested.
    pub async fn wait(&self) {
        if !self.is_set() {
            let _ = self.signal.clone().await;
        }
    }

    /// Runs `f` unless stop is requested first (then `None`).
    pub async fn or_stop<F: Future>(&self, f: F) -> Option<F::Output> {
        match select(pin!(f), pin!(self.wait())).await {
            Either::Left((out, _)) => Some(out),
            Either::Right(_) => None,
        }
    }
}

/// Connections this process's gateway listeners accepted, since it started.
pub static CONNECTIONS_ACCEPTED: AtomicU64 = AtomicU64::new(0);
/// Connections this process's gateway listeners are serving now.
pub static CONNECTIONS_OPEN: AtomicU64 = AtomicU64::new(0);

/// Counts one connection in [`CONNECTIONS_OPEN`] while it lives (also
/// when its task is dropped at shutdown).
struct OpenConnection;

impl OpenConnection {
    fn new() -> Self {
        CONNECTIONS_ACCEPTED.fetch_add(1, Ordering::Relaxed);
        CONNECTIONS_OPEN.fetch_add(1, Ordering::Relaxed);
        Self
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        CONNECTIONS_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a worker thread does with each accepted connection.
pub trait Service: 'static {
    /// Serves one connection to its end. Called on the worker's runtime.
    fn serve(self: Rc<Self>, stream: TcpStream, peer: SocketAddr) -> impl Future<Output = ()>;
}

/// How the workers listen.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Worker threads.
    pub workers: usize,
    /// Most connections per worker; more are closed on accept.
    pub max_connections: usize,
    /// On stop, how long connections get to end before they are dropped.
    pub shutdown_grace: Duration,
    /// Thread name prefix (`<name>-<index>`).
    pub name: &'static str,
}

/// Builds one worker's service, on the worker's thread.
pub type ServiceFactory<S> = Arc<dyn Fn(Stop) -> S + Send + Sync>;

/// Running worker threads. Dropping it stops them too.
pub struct Workers {
    local_addr: SocketAddr,
    flag: Arc<AtomicBool>,
    stop_tx: Option<oneshot::Sender<()>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Workers {
    /// The address listened on (with the real port when configured with 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets connections end (up to the grace) and joins
    /// the threads. Errors if a worker thread panicked.
    pub fn stop(mut self) -> Result<(), String> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), String> {
        self.flag.store(true, Ordering::Release);
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(());
        }
        let mut failed = 0;
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                failed += 1;
            }
        }
        if failed > 0 {
            return Err(format!("{failed} worker thread(s) panicked"));
        }
        Ok(())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // compio aborts the process when a runtime is woken from a thread
        // that is panicking; a test failing with a server in scope would
        // take the whole test binary down. Raise the stop from a fresh
        // thread then.
        let result = if thread::panicking() {
            thread::scope(|s| {
                s.spawn(|| self.shutdown())
                    .join()
                    .unwrap_or_else(|_| Err("stopping thread panicked".into()))
            })
        } else {
            self.shutdown()
        };
        if let Err(e) = result {
            warn!("stopping workers: {e}");
        }
    }
}

/// Binds the listeners and starts `config.workers` threads, each serving
/// the connections it accepts with the service `factory` builds for it.
pub fn start<S: Service>(config: ListenConfig, factory: ServiceFactory<S>) -> io::Result<Workers> {
    if config.workers == 0 || config.workers > 1024 || config.max_connections == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "workers must be 1..=1024 and max_connections positive",
        ));
    }
    let listeners = bind_listeners(config.listen, config.workers)?;
    let local_addr = listeners[0].local_addr()?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let flag = Arc::new(AtomicBool::new(false));
    let stop = Stop {
        flag: flag.clone(),
        signal: stop_rx.shared(),
    };
    let mut workers = Workers {
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
            .name(format!("{}-{i}", config.name))
            .spawn(move || worker_main(listener, factory, config, stop, ready))?;
        workers.threads.push(t);
    }
    drop(ready_tx);
    for _ in 0..workers.threads.len() {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(io::Error::other(e)),
            Err(_) => return Err(io::Error::other("worker thread exited during start-up")),
        }
    }
    Ok(workers)
}

/// One listening socket per worker, all on the same address.
fn bind_listeners(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
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

fn worker_main<S: Service>(
    listener: std::net::TcpListener,
    factory: ServiceFactory<S>,
    config: ListenConfig,
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
        let service = Rc::new(factory(stop.clone()));
        let _ = ready.send(Ok(()));
        accept_loop(service, listener, &config, &stop).await;
    });
}

async fn accept_loop<S: Service>(
    service: Rc<S>,
    listener: TcpListener,
    config: &ListenConfig,
    stop: &Stop,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.is_set() {
        let Some(accepted) = stop.or_stop(listener.accept()).await else {
            break;
        };
        match accepted {
            Ok((stream, peer)) => {
                conns.retain(|h| !h.is_finished());
                if conns.len() >= config.max_connections {
                    warn!(%peer, "connection limit reached; closing");
                    continue;
                }
                if let Err(e) = stream.set_nodelay(true) {
                    warn!(%peer, "cannot set TCP_NODELAY: {e}; closing");
                    continue;
                }
                debug!(%peer, "accepted");
                let conn = OpenConnection::new();
                let serve = service.clone().serve(stream, peer);
                conns.push(compio::runtime::spawn(async move {
                    serve.await;
                    drop(conn);
                }));
            }
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                warn!("accept: {e}");
                compio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    let grace = config.shutdown_grace;
    if compio::time::timeout(grace, join_all(conns)).await.is_err() {
        warn!("connections still busy after {grace:?}; dropping them");
    }
}
