//! `pontoon vhost`: serves volumes to QEMU virtual machines on this host
//! as virtio-blk disks over vhost-user, through the client library (no
//! network gateway).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use pontoon_client::Client;
use pontoon_vhost::{Export, ExportConfig};
use pontoon_volume::VolumeError;

use crate::cluster_args::ClusterArgs;

/// Arguments of `pontoon vhost`.
#[derive(Args, Debug)]
pub struct VhostArgs {
    /// Where to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Unix socket for a VM's `-chardev socket,path=...` (repeat, one per
    /// --volume, paired in order).
    #[arg(long, required = true, value_name = "PATH")]
    pub socket: Vec<PathBuf>,
    /// Volume served on the --socket at the same position.
    #[arg(long, required = true, value_name = "VOLUME")]
    pub volume: Vec<String>,
    /// Request queues per device (each with its own thread); the VM's
    /// `num-queues` may not exceed it.
    #[arg(long, default_value_t = 2)]
    pub queues: usize,
    /// Refuse writes, discards and write-zeroes (the guest sees a
    /// read-only disk).
    #[arg(long)]
    pub read_only: bool,
    /// Where to serve Prometheus metrics (`GET /metrics`): IP:PORT (port 0
    /// for a free one) or `off`.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:0")]
    pub metrics: String,
}

/// Runs the backends until SIGINT or SIGTERM.
pub fn run(args: VhostArgs) -> Result<()> {
    if args.socket.len() != args.volume.len() {
        bail!(
            "give one --volume per --socket ({} sockets, {} volumes)",
            args.socket.len(),
            args.volume.len()
        );
    }
    let target = args.cluster.resolve()?;
    let metrics_addr = crate::daemon_metrics::parse_flag(&args.metrics)?;
    let counters = pontoon_metrics::GatewayMetrics::new(pontoon_cluster::daemons::kind::VHOST);
    let (feed, _) = args.cluster.feed("gateway.vhost")?;
    let mut exports = Vec::new();
    for (socket, volume) in args.socket.iter().zip(&args.volume) {
        let f = feed.clone();
        let name = volume.clone();
        let volume_counters = counters.clone();
        let factory: pontoon_vhost::VolumeFactory<
            pontoon_metrics::MeteredVolume<pontoon_client::Volume>,
        > = Arc::new(move || {
            let v = Client::new(f.clone())
                .open(&name)
                .map_err(VolumeError::from)?;
            Ok(
                pontoon_metrics::MeteredVolume::new(v, volume_counters.register(&name))
                    .holding(volume_counters.opened(&name)),
            )
        });
        let config = ExportConfig {
            socket: socket.clone(),
            name: volume.clone(),
            queues: args.queues,
            read_only: args.read_only,
        };
        let export = Export::start(config, factory)
            .with_context(|| format!("serving volume {volume:?} on {}", socket.display()))?;
        println!(
            "vhost: serving volume {volume:?} ({} bytes, {} queues{}) on {}",
            export.size(),
            args.queues,
            if args.read_only { ", read-only" } else { "" },
            socket.display()
        );
        exports.push(export);
    }
    let metrics = crate::daemon_metrics::start_gateway(
        &target.endpoints,
        &target.name,
        &target.auth,
        pontoon_cluster::daemons::kind::VHOST,
        metrics_addr,
        counters,
    )?;
    let stop = crate::cmd_osd::stop_flag()?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(metrics);
    drop(exports);
    feed.shutdown();
    Ok(())
}
