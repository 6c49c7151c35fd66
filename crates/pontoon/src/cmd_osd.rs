//! `pontoon osd run` (the OSD daemon in the foreground), `pontoon osd
//! start` (restart one OSD of a local cluster, detached), `osd out|in`
//! and the full ratios (`osd set-nearfull-ratio` and its kin, as in Ceph).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::MapStore;
use pontoon_osd::daemon::{OsdConfig, run as run_daemon};
use pontoon_types::OsdId;

use crate::cluster_args::{
    ClusterArgs, ClusterFile, format_duration, parse_duration, parse_size_arg,
};
use crate::procs::{self, Attach, Layout};

/// `pontoon osd ...`.
#[derive(Args, Debug)]
pub struct OsdArgs {
    #[command(subcommand)]
    cmd: OsdCmd,
}

#[derive(Subcommand, Debug)]
enum OsdCmd {
    /// Format a device for this cluster and give it an OSD id; refuses a
    /// device holding a filesystem, partition table or another cluster's
    /// data unless --force.
    Create(crate::cmd_osd_create::OsdCreateArgs),
    /// Run one OSD (one data device) in the foreground until SIGINT/SIGTERM.
    Run(OsdRunArgs),
    /// Start a stopped OSD of a local cluster (`pontoon up`) in the
    /// background, with the arguments `pontoon up` gives it.
    Start(OsdStartArgs),
    /// Mark an OSD out: it is given no PGs and its data moves to others.
    Out(OsdIdArgs),
    /// Mark an OSD in again.
    In(OsdIdArgs),
    /// List the OSDs: host, up/down, in/out, weight, reweight, size,
    /// addresses, flags.
    Ls(crate::cmd_osd_admin::LsArgs),
    /// Set an OSD's reweight, 0.0 to 1.0: its weight becomes that share of
    /// its device's (1.0: full weight, 0: no PGs).
    Reweight(crate::cmd_osd_admin::ReweightArgs),
    /// Remove a down, out OSD that no PG needs any more from the map.
    Rm(crate::cmd_osd_admin::RmArgs),
    /// Remove a down OSD from the map and from placement in one step, with
    /// its report, rating and registry entry.
    Purge(crate::cmd_osd_admin::RemoveArgs),
    /// Mark a down OSD destroyed: its id and place are kept for a new
    /// device (`osd replace`), its old device may not come back.
    Destroy(crate::cmd_osd_admin::RemoveArgs),
    /// Format a new device for a destroyed OSD's id, to replace a failed
    /// drive; `osd run --device NEW` runs it and backfill fills it.
    Replace(crate::cmd_osd_admin::ReplaceArgs),
    /// Set a cluster-wide OSD flag: noout, norebalance or norecover.
    Set(crate::cmd_osd_admin::FlagArgs),
    /// Clear a cluster-wide OSD flag.
    Unset(crate::cmd_osd_admin::FlagArgs),
    /// Set the fill ratio at which an OSD is reported nearfull (default 0.85).
    SetNearfullRatio(RatioArgs),
    /// Set the fill ratio above which recovery and backfill do not write
    /// to an OSD (default 0.90).
    SetBackfillfullRatio(RatioArgs),
    /// Set the fill ratio at which writes needing new space are refused
    /// (default 0.95).
    SetFullRatio(RatioArgs),
    /// Show each OSD's drive writes per day, write amplification, journal
    /// share, NVMe SMART and projected wear-out.
    Endurance(crate::cmd_endurance::EnduranceArgs),
    /// Set the drive writes per day an OSD's device is rated for.
    SetRatedDwpd(crate::cmd_endurance::RatedDwpdArgs),
    /// Read an NVMe device's SMART wear (data units written, percentage
    /// used) on this host; needs no cluster.
    Smart(crate::cmd_smart::SmartArgs),
}

/// An OSD to act on.
#[derive(Args, Debug)]
pub struct OsdIdArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The OSD's id number (`3` or `osd.3`).
    #[arg(value_parser = parse_osd_id)]
    id: OsdId,
}

/// A ratio to set.
#[derive(Args, Debug)]
pub struct RatioArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The ratio, in (0, 1].
    ratio: f64,
}

fn parse_osd_id(s: &str) -> Result<OsdId, String> {
    pontoon_mgr::listings::parse_osd_id(s)
}

/// Which full ratio a command sets.
#[derive(Clone, Copy)]
enum Ratio {
    Nearfull,
    Backfillfull,
    Full,
}

fn set_ratio(which: Ratio, a: RatioArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let r = store
            .set_full_ratios(|r| match which {
                Ratio::Nearfull => r.nearfull = a.ratio,
                Ratio::Backfillfull => r.backfillfull = a.ratio,
                Ratio::Full => r.full = a.ratio,
            })
            .await?;
        println!(
            "full ratios: nearfull {}, backfillfull {}, full {}",
            r.nearfull, r.backfillfull, r.full
        );
        Ok(())
    })
}

fn set_in(a: OsdIdArgs, in_cluster: bool) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        store.set_osd_in(a.id, in_cluster).await?;
        println!("marked {} {}", a.id, if in_cluster { "in" } else { "out" });
        Ok(())
    })
}

/// Arguments of `pontoon osd run`.
#[derive(Args, Debug)]
pub struct OsdRunArgs {
    /// etcd endpoint(s), comma-separated, e.g. http://127.0.0.1:2379
    /// (default: etcd.endpoints of the configuration file).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Cluster name, the etcd key prefix (default: the configuration
    /// file's, else "pontoon").
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// etcd's TLS settings and user (default: the configuration file's).
    #[command(flatten)]
    etcd_auth: crate::cluster_args::EtcdAuthArgs,
    /// Data device or file.
    #[arg(long, value_name = "PATH")]
    device: PathBuf,
    /// Create the device file with this size if it does not exist (e.g. 10G).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// OSD id. Not needed: a device knows its id (`osd create` records it)
    /// and one that disagrees is refused. For a new file given --size, the
    /// id to create it as (else a new one); for a device formatted by an
    /// older Pontoon, its id, recorded on it at this start.
    #[arg(long, value_name = "N")]
    id: Option<u32>,
    /// Shards (one thread each) when formatting a new device.
    #[arg(long, value_name = "K", default_value_t = 1)]
    shards: u32,
    /// Address the shards listen on, as clients and other OSDs reach it
    /// (default: osd.listen of the configuration file, else 127.0.0.1).
    #[arg(long, value_name = "IP")]
    listen: Option<IpAddr>,
    /// Ports the shards listen on, e.g. 6800-7300: each takes the next
    /// free one (default: osd.shard_ports of the configuration file, else
    /// any free port).
    #[arg(long, value_name = "FIRST-LAST")]
    shard_ports: Option<String>,
    /// Write-buffer device for the journal, instead of the data device:
    /// used when formatting, needed on every start after (default: the
    /// configuration file's [osd.journal] entry for --device).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Host name, the unit of the `host` failure domain (default: this
    /// machine's name).
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Liveness lease TTL: how soon the cluster sees this OSD down after it
    /// dies. An etcd outage of up to 8/10 of it (less a fraction of a
    /// second) never fences the OSD. Default 7s.
    #[arg(long, value_name = "DURATION")]
    lease_ttl: Option<String>,
    /// Where to serve Prometheus metrics (`GET /metrics`): IP:PORT, port 0
    /// for a free one (the daemon registry and `pontoon status --json`
    /// show it), or `off` (no listener, no per-I/O counting). Default
    /// 127.0.0.1:0.
    #[arg(long, value_name = "ADDR|off")]
    metrics: Option<String>,
}

/// Arguments of `pontoon osd start`.
#[derive(Args, Debug)]
pub struct OsdStartArgs {
    /// The OSD's id.
    id: u32,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Wait at most this long for the OSD to come up.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    timeout: String,
}

impl OsdArgs {
    /// Whether this runs a daemon (`osd run`), which logs what it does;
    /// one-shot commands log only warnings.
    pub fn is_daemon(&self) -> bool {
        matches!(self.cmd, OsdCmd::Run(_) | OsdCmd::Start(_))
    }
}

/// Runs `pontoon osd ...`.
pub fn run(args: OsdArgs) -> Result<()> {
    match args.cmd {
        OsdCmd::Create(a) => crate::cmd_osd_create::run(a),
        OsdCmd::Run(a) => osd_run(a),
        OsdCmd::Start(a) => osd_start(a),
        OsdCmd::Out(a) => set_in(a, false),
        OsdCmd::In(a) => set_in(a, true),
        OsdCmd::Ls(a) => crate::cmd_osd_admin::ls(a),
        OsdCmd::Reweight(a) => crate::cmd_osd_admin::reweight(a),
        OsdCmd::Rm(a) => crate::cmd_osd_admin::rm(a),
        OsdCmd::Purge(a) => crate::cmd_osd_admin::purge(a),
        OsdCmd::Destroy(a) => crate::cmd_osd_admin::destroy(a),
        OsdCmd::Replace(a) => crate::cmd_osd_admin::replace(a),
        OsdCmd::Set(a) => crate::cmd_osd_admin::set_flag(a, true),
        OsdCmd::Unset(a) => crate::cmd_osd_admin::set_flag(a, false),
        OsdCmd::SetNearfullRatio(a) => set_ratio(Ratio::Nearfull, a),
        OsdCmd::SetBackfillfullRatio(a) => set_ratio(Ratio::Backfillfull, a),
        OsdCmd::SetFullRatio(a) => set_ratio(Ratio::Full, a),
        OsdCmd::Endurance(a) => crate::cmd_endurance::run(a),
        OsdCmd::SetRatedDwpd(a) => crate::cmd_endurance::set_rated(a),
        OsdCmd::Smart(a) => crate::cmd_smart::run(a),
    }
}

/// Most shards an OSD may be formatted with.
pub const MAX_SHARDS: u32 = 64;

/// This machine's host name, reduced to the characters cluster names allow.
pub fn local_host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let raw = if r == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(pontoon_cluster::MAX_NAME_LEN)
        .collect();
    if clean.is_empty() {
        "localhost".into()
    } else {
        clean
    }
}

/// Installs SIGINT and SIGTERM handlers that set the returned flag.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install a signal handler")?;
    }
    Ok(stop)
}

fn osd_run(a: OsdRunArgs) -> Result<()> {
    let create_size = a
        .size
        .as_deref()
        .map(|s| parse_size_arg("device size", s))
        .transpose()?;
    if !(1..=MAX_SHARDS).contains(&a.shards) {
        bail!("--shards {} must be between 1 and {MAX_SHARDS}", a.shards);
    }
    let set = crate::config_file::osd_run(&crate::config_file::OsdRunFlags {
        device: &a.device,
        etcd: a.etcd.as_deref(),
        cluster_name: a.cluster_name.as_deref(),
        listen: a.listen,
        host: a.host.as_deref(),
        lease_ttl: a.lease_ttl.as_deref(),
        metrics: a.metrics.as_deref(),
        shard_ports: a.shard_ports.as_deref(),
        journal: a.journal.as_deref(),
        etcd_auth: a.etcd_auth.flags(),
    })?;
    let lease_ttl = set.lease_ttl;
    let host = set.host.unwrap_or_else(local_host_name);
    if !pontoon_cluster::is_valid_name(&host) {
        bail!("host name {host:?} must be 1-128 characters of [A-Za-z0-9._-]");
    }
    let cfg = OsdConfig {
        id: a.id.map(OsdId),
        device: a.device,
        create_size,
        shards: a.shards,
        listen: set.listen,
        host,
        etcd: set.etcd,
        etcd_auth: set.etcd_auth,
        cluster: set.cluster_name,
        lease_ttl,
        metrics: set.metrics,
        shard_ports: set.shard_ports,
        journal: set.journal,
        on_serving: Some(|id| crate::notify::ready(&format!("{id} serving"))),
    };
    let stop = stop_flag()?;
    let id = run_daemon(cfg, stop)?;
    tracing::info!(osd = %id, "exiting");
    Ok(())
}

/// The `pontoon osd run` arguments of OSD `id` of the local cluster in
/// `layout`, as `pontoon up` and `pontoon osd start` pass them.
pub fn osd_run_args(file: &ClusterFile, layout: &Layout, id: u32) -> Vec<String> {
    vec![
        "osd".into(),
        "run".into(),
        "--etcd".into(),
        file.etcd.clone(),
        "--cluster-name".into(),
        file.cluster_name.clone(),
        "--device".into(),
        layout.osd_device(id).to_string_lossy().into_owned(),
        "--size".into(),
        file.osd_size.to_string(),
        "--id".into(),
        id.to_string(),
        "--shards".into(),
        file.shards.to_string(),
        "--listen".into(),
        file.listen.to_string(),
        "--host".into(),
        file.host.clone(),
        "--lease-ttl".into(),
        format_duration(file.lease_ttl),
        "--metrics".into(),
        std::net::SocketAddr::new(file.listen, 0).to_string(),
    ]
    .into_iter()
    .chain(crate::etcd_pki::auth_flags(&crate::etcd_pki::daemon_auth(
        &layout.dir,
        file,
        "osd",
    )))
    .collect()
}

/// The running `pontoon osd run` of OSD `id`, from its pid file.
pub fn running_osd(layout: &Layout, id: u32) -> Option<u32> {
    procs::read_pid(&layout.osd_pid(id))
        .filter(|pid| procs::is_osd_process(*pid, &layout.osd_device(id)))
}

fn osd_start(a: OsdStartArgs) -> Result<()> {
    let timeout = parse_duration(&a.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
    let target = a.cluster.resolve()?;
    let (Some(dir), Some(file)) = (target.dir.clone(), target.file.clone()) else {
        bail!(
            "osd start needs the local cluster's directory: pass --cluster DIR (or set PONTOON_CLUSTER)"
        );
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("cannot open {}", dir.display()))?;
    let layout = Layout::new(&dir);
    let id = a.id;
    if !layout.osd_device(id).exists() && id >= file.osds {
        bail!(
            "osd.{id} is not part of the local cluster in {} (it has osd.0 to osd.{})",
            dir.display(),
            file.osds.saturating_sub(1)
        );
    }
    if let Some(pid) = running_osd(&layout, id) {
        bail!("osd.{id} is already running (pid {pid})");
    }
    let exe = std::env::current_exe().context("cannot find the pontoon binary")?;
    let rt = crate::runtime()?;
    // Reach etcd first: an OSD started without it would only exit again.
    let (store, _) = rt.block_on(a.cluster.connect())?;
    let log = layout.osd_log(id);
    let mut child = procs::spawn(
        &exe,
        &osd_run_args(&file, &layout, id),
        &log,
        Attach::Detached,
    )?;
    procs::write_pid(&layout.osd_pid(id), child.id())?;
    let up = rt.block_on(wait_osd_alive(&store, id, &mut child, &log, timeout));
    match up {
        Ok(addrs) => {
            println!(
                "osd.{id} started (pid {}), listening on {addrs}; log {}",
                child.id(),
                log.display()
            );
            Ok(())
        }
        Err(e) => {
            // Do not leave a half-started OSD behind.
            if procs::alive(child.id()) {
                procs::signal(child.id(), libc::SIGTERM);
                if !procs::wait_child(&mut child, Duration::from_secs(10)) {
                    procs::signal(child.id(), libc::SIGKILL);
                    procs::wait_child(&mut child, Duration::from_secs(5));
                }
            }
            let _ = std::fs::remove_file(layout.osd_pid(id));
            Err(e)
        }
    }
}

/// Waits until OSD `id` holds its liveness lease; fails if `child` exits
/// first or `timeout` passes. Returns its addresses for display.
async fn wait_osd_alive(
    store: &MapStore,
    id: u32,
    child: &mut std::process::Child,
    log: &Path,
    timeout: Duration,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "osd.{id} exited at start ({status}); last lines of {}:\n{}",
                log.display(),
                procs::log_tail(log, 10)
            );
        }
        if let Ok(map) = store.load().await
            && map.is_alive(OsdId(id))
        {
            let addrs = map
                .osds
                .get(&OsdId(id))
                .map(|o| {
                    o.addrs
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            return Ok(addrs);
        }
        if Instant::now() >= deadline {
            bail!(
                "osd.{id} did not come up within {}; see {}",
                format_duration(timeout),
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
