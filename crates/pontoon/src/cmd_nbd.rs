//! `pontoon nbd`: the NBD gateway. Serves every volume of the cluster as an
//! NBD export of the same name, through the client library: over TLS
//! (`NBD_OPT_STARTTLS`, x509 or pre-shared keys) when credentials are
//! given, which is required on any address that is not loopback, and to
//! each client identity only the volumes its export list names.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use pontoon_client::{Client, ClusterCatalog};
use pontoon_nbd::{ExportAccess, ServerConfig, TlsConfig, TlsMode, start};

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
    /// TLS: off, on (at the client's choice) or require (default: require
    /// when credentials are given or the address is not loopback, else
    /// off; nbd.tls of the configuration file).
    #[arg(long, value_name = "off|on|require")]
    pub tls: Option<String>,
    /// Serve plain NBD on an address that is not loopback.
    #[arg(long)]
    pub insecure: bool,
    /// The server's certificate chain, PEM (x509 clients).
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key, PEM.
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// CA of client certificates: clients must present one signed by it,
    /// and its subject CN is their identity.
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Pre-shared keys, `username:hexkey` a line (`psktool -u NAME -p
    /// FILE` writes them); the username is the client's identity.
    #[arg(long, value_name = "FILE")]
    pub tls_psk_file: Option<PathBuf>,
    /// Volumes an identity may see and open: ID=VOLUME[,VOLUME...], where
    /// VOLUME is a name, POOL/* or *; ID * applies to every client.
    /// Repeatable. Given any, a client sees only its lists' volumes.
    #[arg(long = "export", value_name = "ID=VOLUMES")]
    pub exports: Vec<String>,
}

/// The TLS settings and export lists of the flags, else the environment
/// and the configuration file.
fn tls_settings(args: &NbdArgs, listen: SocketAddr) -> Result<(TlsConfig, ExportAccess)> {
    use crate::config_file::value;
    let path = |key: &str, flag: &str, v: &Option<PathBuf>| -> Result<Option<PathBuf>> {
        let given = v.as_ref().map(|p| p.display().to_string());
        Ok(value(key, flag, given.as_deref())?.map(PathBuf::from))
    };
    let cert = path("nbd.tls_cert", "--tls-cert", &args.tls_cert)?;
    let key = path("nbd.tls_key", "--tls-key", &args.tls_key)?;
    let ca = path("nbd.tls_ca", "--tls-ca", &args.tls_ca)?;
    let psk_file = path("nbd.tls_psk_file", "--tls-psk-file", &args.tls_psk_file)?;
    let insecure =
        args.insecure || value("nbd.insecure", "--insecure", None)?.is_some_and(|v| v == "true");
    let has_credentials = cert.is_some() || psk_file.is_some();
    let mode = match value("nbd.tls", "--tls", args.tls.as_deref())? {
        Some(m) => m.parse::<TlsMode>().map_err(anyhow::Error::msg)?,
        None => pontoon_nbd::tls::default_mode(listen, has_credentials),
    };
    let tls = TlsConfig {
        mode,
        insecure,
        cert,
        key,
        ca,
        psk_file,
    };
    let exports = if args.exports.is_empty() {
        value(crate::config_file::NBD_EXPORTS_TABLE, "--export", None)?.unwrap_or_default()
    } else {
        args.exports.join(";")
    };
    let access = ExportAccess::parse(&exports, None)
        .map_err(|e| anyhow::anyhow!("NBD export lists: {e}"))?;
    Ok((tls, access))
}

/// Runs the gateway until SIGINT or SIGTERM.
pub fn run(args: NbdArgs) -> Result<()> {
    let (feed, target) = args.cluster.feed("gateway.nbd")?;
    let factory_feed = feed.clone();
    let listen = crate::config_file::socket_addr("nbd.listen", "--listen", args.listen)?;
    let metrics_addr = crate::config_file::metrics_addr("nbd.metrics", args.metrics.as_deref())?;
    let (tls, access) = tls_settings(&args, listen)?;
    let pool_feed = feed.clone();
    let access = access.with_pool_of(Arc::new(move |volume: &str| {
        let map = pool_feed.current();
        let v = map.volumes.values().find(|v| v.name == volume)?;
        map.pools.get(&v.pool).map(|p| p.name.clone())
    }));
    let (tls_mode, restricted) = (tls.mode, access.is_restricted());
    let counters = pontoon_metrics::GatewayMetrics::new(pontoon_cluster::daemons::kind::NBD);
    let catalog_counters = counters.clone();
    let config = ServerConfig {
        listen,
        workers: args.workers.max(1),
        // A hole lookup before every read would cost a second round trip to
        // the primary; hosts that care ask with BLOCK_STATUS (qemu-img,
        // nbdcopy), which is served.
        sparse_reads: false,
        tls,
        access,
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
    let scheme = if tls_mode == TlsMode::Off {
        "nbd"
    } else {
        "nbds"
    };
    println!(
        "nbd: serving the volumes of cluster {:?} on {scheme}://{}/<volume> (TLS {tls_mode}{})",
        target.name,
        server.local_addr(),
        if restricted {
            ", per-identity export lists"
        } else {
            ""
        }
    );
    let metrics = crate::daemon_metrics::start_gateway(
        &target.endpoints,
        &target.name,
        &target.auth,
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
