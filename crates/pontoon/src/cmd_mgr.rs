//! `pontoon mgr`: the manager daemon in the foreground.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use pontoon_cluster::MapStore;
use pontoon_mgr::MgrConfig;

use crate::cluster_args::{DEFAULT_CLUSTER_NAME, parse_duration, split_endpoints};
use crate::cmd_osd::{local_host_name, stop_flag};

/// Arguments of `pontoon mgr`.
#[derive(Args, Debug)]
pub struct MgrArgs {
    /// etcd endpoint(s), comma-separated (default: etcd.endpoints of the
    /// configuration file).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Cluster name, the etcd key prefix (default: the configuration
    /// file's, else "pontoon").
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// etcd's TLS settings and user (default: the configuration file's).
    #[command(flatten)]
    etcd_auth: crate::cluster_args::EtcdAuthArgs,
    /// How long an OSD may be down before it is marked out and its data
    /// re-replicated elsewhere, while the map sets none (`pontoon config
    /// set out_after` wins over every manager's flag).
    #[arg(long, value_name = "DURATION", default_value = "600s")]
    out_after: String,
    /// This manager's name in the election (default: host-pid).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Where to serve Prometheus metrics (`GET /metrics`): IP:PORT (port 0
    /// for a free one) or `off`. The active manager adds the cluster-wide
    /// series. Default: mgr.metrics of the configuration file, else
    /// 127.0.0.1:0.
    #[arg(long, value_name = "ADDR|off")]
    metrics: Option<String>,
    /// Where to serve the REST API (and the dashboard): IP:PORT, port 0
    /// for a free one. Standby managers serve it too. Default: mgr.http of
    /// the configuration file, else 127.0.0.1:0.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// How often the active manager samples the capacity history (1s to
    /// 10m; a short one is for tests).
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    history_interval: String,
}

/// Runs `pontoon mgr` until SIGINT/SIGTERM.
pub fn run(args: MgrArgs) -> Result<()> {
    let out_after = parse_duration(&args.out_after).map_err(|e| anyhow!("--out-after: {e}"))?;
    let history_interval = crate::cmd_history::parse_interval(&args.history_interval)?;
    let endpoints = split_endpoints(&crate::config_file::required(
        "etcd.endpoints",
        "--etcd",
        args.etcd.as_deref(),
    )?)?;
    let cluster_name = crate::config_file::value(
        "cluster_name",
        "--cluster-name",
        args.cluster_name.as_deref(),
    )?
    .unwrap_or_else(|| DEFAULT_CLUSTER_NAME.to_string());
    let auth = args.etcd_auth.resolve()?;
    let http_addr = crate::config_file::socket_addr("mgr.http", "--http", args.http)?;
    let name = args
        .name
        .unwrap_or_else(|| pontoon_mgr::default_name(&local_host_name()));
    if name.is_empty() || name.len() > pontoon_cluster::MAX_NAME_LEN {
        bail!("--name must be 1-{} bytes", pontoon_cluster::MAX_NAME_LEN);
    }
    let metrics_addr = crate::config_file::metrics_addr("mgr.metrics", args.metrics.as_deref())?;
    let stop = stop_flag()?;
    let host = local_host_name();
    let _metrics = metrics_addr
        .map(|addr| {
            let me = name.clone();
            crate::daemon_metrics::DaemonMetrics::start(
                &endpoints,
                &cluster_name,
                &auth,
                pontoon_cluster::daemons::kind::MGR,
                &name,
                &host,
                addr,
                move |store| pontoon_mgr::metrics::render_fn(store, me),
            )
        })
        .transpose()?;
    crate::runtime()?.block_on(async move {
        let store = MapStore::connect_with(&endpoints, &cluster_name, &auth).await?;
        let mut cfg = MgrConfig::new(name);
        cfg.out_after = out_after;
        cfg.history_interval = history_interval;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let http =
            pontoon_mgr::http::start(http_addr, store.clone(), &cfg.name, rx.clone()).await?;
        tracing::info!(
            "REST API at http://{}/api/v1/ (`pontoon api token` prints the token)",
            http.addr
        );
        crate::notify::ready(&format!("manager, REST API at http://{}", http.addr));
        let mut task = tokio::spawn(pontoon_mgr::run(store, cfg, rx));
        loop {
            tokio::select! {
                r = &mut task => {
                    r.map_err(|e| anyhow!("the manager task failed: {e}"))?;
                    return Ok(());
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if stop.load(Ordering::Relaxed) {
                let _ = tx.send(true);
                return match tokio::time::timeout(Duration::from_secs(10), task).await {
                    Ok(_) => Ok(()),
                    Err(_) => Err(anyhow!("the manager did not stop within 10s")),
                };
            }
        }
    })
}
