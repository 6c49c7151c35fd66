//! `pontoon nbd`: the NBD gateway. Serves every volume of the cluster as an
//! NBD export of the same name, through the client library.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use pontoon_client::{Client, ClusterCatalog, MapFeed};
use pontoon_nbd::{ServerConfig, start};

use crate::cluster_args::ClusterArgs;

/// Arguments of `pontoon nbd`.
#[derive(Args, Debug)]
pub struct NbdArgs {
    /// Where to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Address to listen on (default: nbd.listen of the configuration
    /// file, else 127.0.0.1:10809).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Worker threads (each with its own io_uring runtime and connections).
    /// With one worker, requests that are not 4 KiB aligned are served by
    /// read-modify-write; with more, clients must send aligned requests.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Where to serve Prometheus metrics (`GET /metrics`): IP:PORT (port 0
    /// for a free one) or `off` (default: nbd.metrics of the configuration
    /// file, else 127.0.0.1:0).
    #[arg(long, value_name = "ADDR|off")]
    pub metrics: Option<String>,
}

/// Runs the gateway until SIGINT or SIGTERM.
pub fn run(args: NbdArgs) -> Result<()> {
    let target = args.cluster.resolve()?;
    let feed = MapFeed::connect(&target.endpoints, &target.name)
        .with_context(|| format!("loading the map of cluster {:?}", target.name))?;
    let factory_feed = feed.clone();
    let listen = crate::config_file::socket_addr("nbd.listen", "--listen", args.listen)?;
    let metrics_addr = crate::config_file::metrics_addr("nbd.metrics", args.metrics.as_deref())?;
    let counters = pontoon_metrics::GatewayMetrics::new(pontoon_cluster::daemons::kind::NBD);
    let catalog_counters = counters.clone();
    let config = ServerConfig {
        listen,
        workers: args.workers.max(1),
        // A hole lookup before every read would cost a second round trip to
        // the primary; hosts that care ask with BLOCK_STATUS (qemu-img,
        // nbdcopy), which is served.
        sparse_reads: false,
        ..Default::default()
    };
    let server = start(
        config,
        Arc::new(move || {
            pontoon_metrics::MeteredCatalog::new(
                ClusterCatalog::new(Client::new(factory_feed.clone())),
                catalog_counters.clone(),
            )
        }),
    )
    .with_context(|| format!("starting the NBD server on {listen}"))?;
    println!(
        "nbd: serving the volumes of cluster {:?} on nbd://{}/<volume>",
        target.name,
        server.local_addr()
    );
    let metrics = crate::daemon_metrics::start_gateway(
        &target.endpoints,
        &target.name,
        pontoon_cluster::daemons::kind::NBD,
        metrics_addr,
        counters,
    )?;
    let stop = crate::cmd_osd::stop_flag()?;
    crate::notify::ready(&format!("serving NBD on {}", server.local_addr()));
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(metrics);
    server.stop().context("stopping the NBD server")?;
    feed.shutdown();
    Ok(())
}
