//! `/metrics` and the daemon registry for the CLI's daemons (the manager,
//! the gateways `pontoon nbd`, `pontoon nvmf`, `pontoon vhost`): a small
//! thread with a one-thread tokio runtime of its own, off the daemon's
//! data path (compio), that serves `GET /metrics` on `--metrics ADDR` and
//! keeps the daemon's entry in `daemons/<kind>.<name>` alive. A gateway
//! registers even with `--metrics off`, and publishes the volumes it has
//! open there.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use pontoon_cluster::daemons::{DaemonRecord, OpenVolumesFn};
use pontoon_cluster::{EtcdAuth, MapStore};
use pontoon_metrics::{Exposition, GatewayMetrics, Render};
use tokio::sync::oneshot;

/// How long start-up (etcd, bind, registration) may take.
const START: Duration = Duration::from_secs(20);

/// A running `/metrics` listener (if asked for) and registry entry.
/// Dropping it stops both (the registry entry is revoked).
pub struct DaemonMetrics {
    addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DaemonMetrics {
    /// Connects to the cluster at `endpoints`/`cluster`, serves what
    /// `render` (given that connection) produces on `addr`, and registers
    /// `kind.name` with the listening address.
    // Where etcd is (three of them) and what to serve: one call per daemon.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        endpoints: &[String],
        cluster: &str,
        auth: &EtcdAuth,
        kind: &str,
        name: &str,
        host: &str,
        addr: SocketAddr,
        render: impl FnOnce(MapStore) -> Render + Send + 'static,
    ) -> Result<Self> {
        let who = Registrant {
            kind,
            name,
            host,
            open: None,
        };
        Self::start_with(endpoints, cluster, auth, who, Some(addr), render)
    }

    /// [`DaemonMetrics::start`] for a gateway: no listener when `addr` is
    /// `None` (the registration alone), and `who.open` published.
    fn start_with(
        endpoints: &[String],
        cluster: &str,
        auth: &EtcdAuth,
        who: Registrant<'_>,
        addr: Option<SocketAddr>,
        render: impl FnOnce(MapStore) -> Render + Send + 'static,
    ) -> Result<Self> {
        let Registrant {
            kind,
            name,
            host,
            open,
        } = who;
        let (endpoints, cluster) = (endpoints.to_vec(), cluster.to_string());
        let auth = auth.clone();
        let (kind, name, host) = (kind.to_string(), name.to_string(), host.to_string());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Option<SocketAddr>, String>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let store = match MapStore::connect_with(&endpoints, &cluster, &auth).await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let listener = match addr {
                        Some(addr) => match pontoon_metrics::server::bind(addr).await {
                            Ok(l) => Some(l),
                            Err(e) => {
                                let _ = ready_tx.send(Err(format!("cannot listen on {addr}: {e}")));
                                return;
                            }
                        },
                        None => None,
                    };
                    let local = match listener.as_ref().map(|l| l.local_addr()).transpose() {
                        Ok(a) => a,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let record =
                        DaemonRecord::new(&kind, &name, &host, local.map(|a| a.to_string()));
                    let registration = match store.register_daemon_publishing(record, open).await {
                        Ok(r) => Some(r),
                        Err(e) => {
                            tracing::warn!(
                                "cannot register {kind}.{name} in the daemon registry: {e}"
                            );
                            None
                        }
                    };
                    let _ = ready_tx.send(Ok(local));
                    match listener {
                        Some(listener) => {
                            let router = pontoon_metrics::server::router(render(store));
                            let served = axum::serve(listener, router)
                                .with_graceful_shutdown(async move {
                                    let _ = stop_rx.await;
                                })
                                .await;
                            if let Err(e) = served {
                                tracing::warn!("metrics listener: {e}");
                            }
                        }
                        None => {
                            let _ = stop_rx.await;
                        }
                    }
                    if let Some(r) = registration {
                        r.stop().await;
                    }
                });
            })
            .context("starting the metrics thread")?;
        let addr = ready_rx
            .recv_timeout(START)
            .map_err(|_| anyhow!("the metrics listener did not start within {START:?}"))?
            .map_err(|e| anyhow!("metrics: {e}"))?;
        if let Some(addr) = addr {
            tracing::info!("metrics on http://{addr}/metrics");
        }
        Ok(Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address `/metrics` listens on (`None`: no listener).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }
}

impl Drop for DaemonMetrics {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a gateway shows: its requests per volume and operation, its
/// connections (NBD and NVMe/TCP), and its process.
pub fn gateway_render(metrics: Arc<GatewayMetrics>, kind: &'static str) -> Render {
    pontoon_metrics::render_fn(move || {
        let metrics = metrics.clone();
        async move {
            let mut e = Exposition::new();
            metrics.add_to(&mut e);
            if kind != pontoon_cluster::daemons::kind::VHOST {
                use std::sync::atomic::Ordering::Relaxed;
                let l = pontoon_metrics::labels(&[("gateway", kind)]);
                e.counter(
                    "pontoon_gateway_connections_total",
                    "Connections the gateway accepted.",
                    l.clone(),
                    pontoon_net::listener::CONNECTIONS_ACCEPTED.load(Relaxed),
                );
                e.gauge_u64(
                    "pontoon_gateway_connections",
                    "Connections the gateway is serving now.",
                    l,
                    pontoon_net::listener::CONNECTIONS_OPEN.load(Relaxed),
                );
            }
            pontoon_metrics::process::add_process_metrics(&mut e);
            e.render()
        }
    })
}

/// The `--metrics` value parsed (`off`: `None`).
pub fn parse_flag(s: &str) -> Result<Option<SocketAddr>> {
    pontoon_metrics::parse_metrics_addr(s).map_err(|e| anyhow!("--metrics: {e}"))
}

/// Who registers: kind, name, host, and (gateways) the volumes it has open.
struct Registrant<'a> {
    kind: &'a str,
    name: &'a str,
    host: &'a str,
    open: Option<OpenVolumesFn>,
}

/// Starts a gateway's registry entry, which publishes the volumes it has
/// open, and its `/metrics` listener on `addr` (`None`: `--metrics off`,
/// the entry alone); prints where metrics are served.
pub fn start_gateway(
    endpoints: &[String],
    cluster: &str,
    auth: &EtcdAuth,
    kind: &'static str,
    addr: Option<SocketAddr>,
    counters: Arc<GatewayMetrics>,
) -> Result<DaemonMetrics> {
    let host = crate::cmd_osd::local_host_name();
    let name = gateway_name(&host);
    let open_counters = counters.clone();
    let who = Registrant {
        kind,
        name: &name,
        host: &host,
        open: Some(Arc::new(move || open_counters.open_volumes())),
    };
    let m = DaemonMetrics::start_with(endpoints, cluster, auth, who, addr, move |_| {
        gateway_render(counters, kind)
    })?;
    if let Some(addr) = m.addr() {
        println!("{kind}: metrics on http://{addr}/metrics");
    }
    Ok(m)
}

/// A gateway's name in the registry: `<host>-<pid>`.
pub fn gateway_name(host: &str) -> String {
    format!("{host}-{}", std::process::id())
}
