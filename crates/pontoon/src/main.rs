//! `pontoon`: the one command-line binary of Pontoon, a scale-out block
//! storage system for NVMe.
//!
//! Cluster commands (`pool`, `volume`, `nvmf`, `status`, `osd start`) find the
//! cluster through `--cluster DIR`, `--etcd URL` or the environment (see
//! [`cluster_args`]); they print `error: ...` and exit 1 on failure (clap's
//! usage errors exit 2).

mod cluster_args;
mod cmd_api;
mod cmd_auth;
mod cmd_balancer;
mod cmd_bench;
mod cmd_clone;
mod cmd_config;
mod cmd_config_cluster;
mod cmd_config_show;
mod cmd_demo;
mod cmd_df;
mod cmd_diff;
mod cmd_endurance;
mod cmd_export;
mod cmd_gen;
mod cmd_health;
mod cmd_history;
mod cmd_host;
mod cmd_mgr;
mod cmd_nbd;
mod cmd_nvmf;
mod cmd_osd;
mod cmd_osd_admin;
mod cmd_osd_create;
mod cmd_pg;
mod cmd_pool;
mod cmd_rollback;
mod cmd_smart;
mod cmd_snap;
mod cmd_status;
mod cmd_up;
mod cmd_vhost;
mod cmd_volume;
mod config_file;
mod cpu;
mod daemon_metrics;
mod etcd_pki;
mod fio;
mod load;
mod logging;
mod notify;
mod nvmf_bench;
mod procs;
mod store_bench;
mod store_startup;
mod volume_io;

use clap::{Parser, Subcommand};

/// Pontoon: scale-out block storage that keeps up with NVMe.
#[derive(Parser)]
#[command(name = "pontoon", version, about, long_about = None)]
struct Cli {
    /// The configuration file (default /etc/pontoon/pontoon.toml)
    /// [env: PONTOON_CONFIG]
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<std::path::PathBuf>,
    /// Log lines as text or json (default: log_format of the
    /// configuration file, else text) [env: PONTOON_LOG_FORMAT]
    #[arg(long, global = true, value_name = "text|json")]
    log_format: Option<String>,
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
    /// Run, start, list and maintain OSDs (create, out/in, reweight, rm,
    /// purge, destroy, replace, set/unset flags).
    Osd(cmd_osd::OsdArgs),
    /// Run the manager (leader-elected) in the foreground.
    Mgr(cmd_mgr::MgrArgs),
    /// The manager's REST API: print its token.
    Api(cmd_api::ApiArgs),
    /// Entities, keys and capabilities: add, ls, get, caps, rm, rotate.
    Auth(cmd_auth::AuthArgs),
    /// Create, list, remove and scrub pools.
    Pool(cmd_pool::PoolArgs),
    /// List PGs and scrub them on request.
    Pg(cmd_pg::PgArgs),
    /// The upmap balancer: status, on, off, and a score of the PG spread.
    Balancer(cmd_balancer::BalancerArgs),
    /// Create, list, inspect, resize and remove volumes.
    Volume(cmd_volume::VolumeArgs),
    /// Create, list, protect and remove volume snapshots (VOLUME@SNAPSHOT).
    Snap(cmd_snap::SnapArgs),
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
    /// Settings: the cluster's runtime settings (`set`, `get`, `ls`) and
    /// this node's effective configuration (`show`).
    Config(cmd_config::ConfigArgs),
    /// The hosts OSDs run on, and their maintenance mode.
    Host(cmd_host::HostArgs),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completion(cmd_gen::CompletionArgs),
    /// Write the man pages into a directory.
    #[command(hide = true)]
    Manpages(cmd_gen::ManpagesArgs),
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
    let config = match config_file::init(cli.config.clone(), cli.log_format.clone())
        .and_then(|c| c.setting("log_format", None))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    };
    // Daemons log what they do; one-shot commands only warnings.
    let default_filter = match &cli.command {
        Command::Up(_) => "warn,pontoon_mgr=info",
        Command::Osd(a) if a.is_daemon() => "info",
        Command::Mgr(_) | Command::Nbd(_) | Command::Vhost(_) => "info",
        Command::Nvmf(a) if a.is_gateway() => "info",
        _ => "warn",
    };
    logging::init(default_filter, config.value.as_deref() == Some("json"));
    let r = match cli.command {
        Command::Demo(a) => cmd_demo::run(a),
        Command::Up(a) => cmd_up::run(a),
        Command::Osd(a) => cmd_osd::run(a),
        Command::Mgr(a) => cmd_mgr::run(a),
        Command::Api(a) => cmd_api::run(a),
        Command::Auth(a) => cmd_auth::run(a),
        Command::Pool(a) => cmd_pool::run(a),
        Command::Pg(a) => cmd_pg::run(a),
        Command::Balancer(a) => cmd_balancer::run(a),
        Command::Volume(a) => cmd_volume::run(a),
        Command::Snap(a) => cmd_snap::run(a),
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
        Command::Config(a) => cmd_config::run(a),
        Command::Host(a) => cmd_host::run(a),
        Command::Completion(a) => cmd_gen::completion(a, <Cli as clap::CommandFactory>::command()),
        Command::Manpages(a) => cmd_gen::manpages(a, <Cli as clap::CommandFactory>::command()),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod cli_tests {
    /// No command has two arguments with one long flag or id (a global
    /// `--name` or `--keyring` clashing with a command's own). clap checks
    /// this itself only in debug builds; the suite runs optimized.
    #[test]
    fn no_command_repeats_a_flag() {
        use clap::CommandFactory as _;
        fn walk(cmd: &clap::Command, path: &str, checked: &mut usize) {
            let mut longs = std::collections::BTreeMap::new();
            let mut ids = std::collections::BTreeSet::new();
            for a in cmd.get_arguments() {
                assert!(
                    ids.insert(a.get_id().clone()),
                    "{path}: argument id {} twice",
                    a.get_id()
                );
                if let Some(l) = a.get_long()
                    && let Some(other) = longs.insert(l.to_string(), a.get_id().clone())
                {
                    panic!("{path}: --{l} is both {other} and {}", a.get_id());
                }
            }
            *checked += 1;
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), checked);
            }
        }
        let mut cmd = super::Cli::command();
        cmd.build();
        let mut checked = 0;
        walk(&cmd, "pontoon", &mut checked);
        assert!(checked > 50, "only {checked} commands walked");
        // globals reached the leaves, so they were part of the check
        let ls = cmd
            .find_subcommand("auth")
            .and_then(|a| a.find_subcommand("ls"))
            .expect("auth ls");
        assert!(ls.get_arguments().any(|a| a.get_long() == Some("keyring")));
    }
}
