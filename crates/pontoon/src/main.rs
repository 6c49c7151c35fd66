//! `pontoon`: the one command-line binary of Pontoon, a scale-out block
//! storage system for NVMe.
//!
//! Cluster commands (`pool`, `volume`, `nvmf`, `status`, `osd start`) find the
//! cluster through `--cluster DIR`, `--etcd URL` or the environment (see
//! [`cluster_args`]); they print `error: ...` and exit 1 on failure (clap's
//! usage errors exit 2).

mod cluster_args;
mod cmd_api;
mod cmd_bench;
mod cmd_demo;
mod cmd_df;
mod cmd_endurance;
mod cmd_health;
mod cmd_history;
mod cmd_mgr;
mod cmd_nbd;
mod cmd_nvmf;
mod cmd_osd;
mod cmd_pg;
mod cmd_pool;
mod cmd_status;
mod cmd_up;
mod cmd_vhost;
mod cmd_volume;
mod cpu;
mod daemon_metrics;
mod fio;
mod load;
mod nvmf_bench;
mod procs;
mod store_bench;
mod store_startup;

use clap::{Parser, Subcommand};

/// Pontoon: scale-out block storage that keeps up with NVMe.
#[derive(Parser)]
#[command(name = "pontoon", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pontoon's main job: measure the disk, start a local cluster, serve a
    /// volume over NBD, load it with fio and show the results.
    Demo(cmd_demo::DemoArgs),
    /// Run a whole local cluster (etcd, manager, OSDs on files) in the foreground.
    Up(cmd_up::UpArgs),
    /// Run or start an OSD.
    Osd(cmd_osd::OsdArgs),
    /// Run the manager (leader-elected) in the foreground.
    Mgr(cmd_mgr::MgrArgs),
    /// The manager's REST API: print its token.
    Api(cmd_api::ApiArgs),
    /// Create, list, remove and scrub pools.
    Pool(cmd_pool::PoolArgs),
    /// List PGs and scrub them on request.
    Pg(cmd_pg::PgArgs),
    /// Create, list, inspect, resize and remove volumes.
    Volume(cmd_volume::VolumeArgs),
    /// Show the cluster's OSDs, PG states and recovery.
    Status(cmd_status::StatusArgs),
    /// Cluster health: HEALTH_OK / HEALTH_WARN / HEALTH_ERR and why.
    Health(cmd_health::HealthArgs),
    /// Show raw storage, each OSD's and each pool's space (like `ceph df`).
    Df(cmd_df::DfArgs),
    /// Show each volume's provisioned and used space (like `rbd du`).
    Du(cmd_df::DuArgs),
    /// Serve every volume over NBD (qemu, nbd-client, libnbd tools, fio).
    Nbd(cmd_nbd::NbdArgs),
    /// Serve volumes to local VMs as virtio-blk disks (vhost-user-blk).
    Vhost(cmd_vhost::VhostArgs),
    /// Manage NVMe-oF subsystems, namespaces and allowed hosts; with no
    /// subcommand, run the NVMe/TCP gateway that serves them.
    Nvmf(cmd_nvmf::NvmfArgs),
    /// Load a volume through the client library and measure it.
    Bench(cmd_bench::BenchArgs),
    /// Benchmark the device store against raw fio on the same filesystem.
    StoreBench(store_bench::StoreBenchArgs),
    /// Measure how long a store holding many objects takes to open.
    StoreStartup(store_startup::StoreStartupArgs),
}

/// A single-threaded tokio runtime for a command's control-plane work.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))
}

fn main() {
    let cli = Cli::parse();
    // Daemons log what they do; one-shot commands only warnings.
    let default_filter = match &cli.command {
        Command::Up(_) => "warn,pontoon_mgr=info",
        Command::Osd(_) | Command::Mgr(_) | Command::Nbd(_) | Command::Vhost(_) => "info",
        Command::Nvmf(a) if a.is_gateway() => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PONTOON_LOG")
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let r = match cli.command {
        Command::Demo(a) => cmd_demo::run(a),
        Command::Up(a) => cmd_up::run(a),
        Command::Osd(a) => cmd_osd::run(a),
        Command::Mgr(a) => cmd_mgr::run(a),
        Command::Api(a) => cmd_api::run(a),
        Command::Pool(a) => cmd_pool::run(a),
        Command::Pg(a) => cmd_pg::run(a),
        Command::Volume(a) => cmd_volume::run(a),
        Command::Status(a) => cmd_status::run(a),
        Command::Health(a) => cmd_health::run(a),
        Command::Df(a) => cmd_df::run_df(a),
        Command::Du(a) => cmd_df::run_du(a),
        Command::Nbd(a) => cmd_nbd::run(a),
        Command::Vhost(a) => cmd_vhost::run(a),
        Command::Nvmf(a) => cmd_nvmf::run(a),
        Command::Bench(a) => cmd_bench::run(a),
        Command::StoreBench(a) => store_bench::run(a),
        Command::StoreStartup(a) => store_startup::run(a),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
