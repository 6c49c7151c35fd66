//! `pontoon up`: a whole local cluster in the foreground — its own etcd,
//! a manager (in this process) and N OSD processes on device files — in
//! one directory, brought back with its data by running it again.
//!
//! Layout of DIR: `cluster.toml` (written when the cluster is ready),
//! `etcd/` (etcd's data), `osd.<id>.img` (device files), `run/*.pid`,
//! `log/*.log`. Children get their own process group (a terminal's Ctrl-C
//! reaches only `up`, which stops them in order: manager, OSDs, etcd) and
//! SIGTERM if `up` dies. An OSD that dies is not restarted (so failures can
//! be tested); `pontoon osd start <id> --cluster DIR` restarts it.
//!
//! etcd is secured unless `--etcd-insecure` is given (see
//! [`crate::etcd_pki`]): HTTPS only, a client certificate of the cluster's
//! own CA required, and etcd's authentication on, with a user per kind of
//! daemon limited to the cluster's prefix and an `admin` user for the CLI
//! (`cluster.toml` names its files, in `DIR/etcd-pki/`). A cluster keeps
//! the mode it was created with.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use pontoon_cluster::{EtcdAuth, MapStore};
use pontoon_mgr::MgrConfig;
use pontoon_types::{OsdId, format_size};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster_args::{
    ClusterFile, DEFAULT_CLUSTER_NAME, format_duration, parse_duration, parse_size_arg,
    split_endpoints,
};
use crate::cmd_osd::{MAX_SHARDS, local_host_name, osd_run_args, running_osd, stop_flag};
use crate::etcd_pki::{Pki, auth_flags, daemon_auth};
use crate::procs::{self, Attach, Layout};

/// Most OSDs one local cluster runs.
const MAX_OSDS: u32 = 256;
/// Smallest OSD device file accepted.
const MIN_OSD_SIZE: u64 = 64 << 20;
/// How long etcd may take to become healthy.
const ETCD_START: Duration = Duration::from_secs(30);
/// How long one OSD may take to register.
const OSD_REGISTER: Duration = Duration::from_secs(60);
/// How long all OSDs may take to hold their leases once registered.
const OSDS_ALIVE: Duration = Duration::from_secs(30);
/// How long a gateway may take to listen.
const GATEWAY_START: Duration = Duration::from_secs(30);
/// How long stopping processes may take before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How often the foreground loop looks at its children and signals.
const POLL: Duration = Duration::from_millis(200);

/// Arguments of `pontoon up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Directory holding the cluster (created if missing; reused with its
    /// data when it exists).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Number of OSDs (default 3, or as last time).
    #[arg(long, value_name = "N")]
    osds: Option<u32>,
    /// Size of each OSD's device file (default 1G, or as last time).
    #[arg(long, value_name = "SIZE")]
    osd_size: Option<String>,
    /// Shards (threads) per OSD when formatting (default 1, or as last time).
    #[arg(long, value_name = "K")]
    shards: Option<u32>,
    /// OSD liveness lease TTL (default 7s, or as last time).
    #[arg(long, value_name = "DURATION")]
    lease_ttl: Option<String>,
    /// How long an OSD may be down before it is marked out and its data
    /// re-replicated (default 600s, or as last time). Written to the map
    /// when given, and for a new cluster; `pontoon config set out_after`
    /// changes it later.
    #[arg(long, value_name = "DURATION")]
    out_after: Option<String>,
    /// Cluster name (default "pontoon", or as last time).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Address the OSDs listen on (default 127.0.0.1, or as last time).
    #[arg(long, value_name = "IP")]
    listen: Option<IpAddr>,
    /// Also run an NBD gateway serving every volume on this address,
    /// e.g. 127.0.0.1:10809.
    #[arg(long, value_name = "ADDR")]
    nbd: Option<SocketAddr>,
    /// Also run an NVMe/TCP gateway serving the cluster's NVMe-oF
    /// subsystems (`pontoon nvmf subsystem ...`) on this address,
    /// e.g. 127.0.0.1:4420.
    #[arg(long, value_name = "ADDR")]
    nvmf: Option<SocketAddr>,
    /// Address of the manager's HTTP server (REST API, dashboard), e.g.
    /// 127.0.0.1:8080 (default: last run's if free, else a free port on
    /// 127.0.0.1). Written to cluster.toml as `http`, with the API token.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// How often the manager samples the capacity history (default 60s;
    /// a short one is for tests).
    #[arg(long, value_name = "DURATION")]
    history_interval: Option<String>,
    /// Rate every OSD's device for this many drive writes per day
    /// (`pontoon osd set-rated-dwpd` sets one OSD).
    #[arg(long, value_name = "DWPD")]
    rated_dwpd: Option<f64>,
    /// Run etcd on plain HTTP without authentication, as before etcd was
    /// secured: anyone who reaches its port may rewrite the cluster map.
    /// Only for a new cluster (or one created so).
    #[arg(long)]
    etcd_insecure: bool,
    /// How OSD connections authenticate: none, authenticated (every
    /// connection proves its entity's key, every frame signed; the default
    /// for a new cluster) or secure (also encrypted). Sets the map's
    /// `ms_mode` (`pontoon config set ms_mode` changes it later); unset,
    /// an existing cluster keeps its mode.
    #[arg(long, value_name = "MODE")]
    ms_mode: Option<pontoon_types::WireMode>,
}

/// Runs `pontoon up`.
pub fn run(args: UpArgs) -> Result<()> {
    let stop = stop_flag()?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("cannot open {}", args.dir.display()))?;
    let layout = Layout::new(&dir);
    layout.create()?;
    if let Some(pid) = procs::read_pid(&layout.up_pid())
        && pid != std::process::id()
        && procs::alive(pid)
        && procs::cmdline(pid).is_some_and(|a| a.iter().any(|x| x == "up"))
    {
        bail!(
            "a cluster is already running from {} (pid {pid})",
            dir.display()
        );
    }
    let previous = match ClusterFile::path(&dir).exists() {
        true => Some(ClusterFile::load(&dir)?),
        false => None,
    };
    let settings = settings(&args, previous.as_ref())?;
    let listen = settings.listen;
    procs::write_pid(&layout.up_pid(), std::process::id())?;
    // cluster.toml appears again only when the cluster is ready, so a
    // script can wait for it; restored if start-up fails.
    if previous.is_some() {
        std::fs::remove_file(ClusterFile::path(&dir))
            .with_context(|| format!("cannot replace {}", ClusterFile::path(&dir).display()))?;
    }
    let rt = crate::runtime()?;
    let mut cluster = Cluster {
        layout: layout.clone(),
        file: settings,
        etcd: None,
        osds: BTreeMap::new(),
        mgr: None,
        mgr_metrics: None,
        http: args.http,
        history_interval: crate::cmd_history::parse_interval(
            args.history_interval.as_deref().unwrap_or("60s"),
        )?,
        rated_dwpd: args.rated_dwpd,
        ms_mode: ms_mode(&args, previous.is_some()),
        out_after_given: args.out_after.is_some(),
        gateways: [
            args.nbd.map(|a| Gateway::new(GatewayKind::Nbd, a)),
            args.nvmf.map(|a| Gateway::new(GatewayKind::Nvmf, a)),
            // A standby manager in its own process, so that the cluster
            // survives its manager's death (health: MGR_NO_STANDBY without).
            Some(Gateway::new(
                GatewayKind::StandbyMgr,
                SocketAddr::new(listen, reuse_or_free_port(None)?),
            )),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    for gw in &mut cluster.gateways {
        if gw.kind == GatewayKind::StandbyMgr {
            let secs = cluster.history_interval.as_secs();
            gw.extra = vec!["--history-interval".into(), format!("{secs}s")];
        }
    }
    let result = rt.block_on(async {
        let ready = cluster.start(&stop).await;
        match ready {
            Ok(()) => cluster.foreground(&stop).await,
            Err(e) => {
                if let Some(prev) = &previous {
                    let _ = prev.store(&dir);
                }
                Err(e)
            }
        }
    });
    rt.block_on(cluster.shutdown());
    let _ = std::fs::remove_file(layout.up_pid());
    result
}

/// This run's settings: flags, else the previous run's, else defaults.
fn settings(args: &UpArgs, prev: Option<&ClusterFile>) -> Result<ClusterFile> {
    let name = match (&args.name, prev) {
        (Some(n), Some(p)) if *n != p.cluster_name => bail!(
            "{} holds cluster {:?}, not {n:?}",
            args.dir.display(),
            p.cluster_name
        ),
        (Some(n), _) => n.clone(),
        (None, Some(p)) => p.cluster_name.clone(),
        (None, None) => DEFAULT_CLUSTER_NAME.to_string(),
    };
    if !pontoon_cluster::is_valid_name(&name) {
        bail!("cluster name {name:?} must be 1-128 characters of [A-Za-z0-9._-]");
    }
    let osds = args.osds.or(prev.map(|p| p.osds)).unwrap_or(3);
    if !(1..=MAX_OSDS).contains(&osds) {
        bail!("--osds {osds} must be between 1 and {MAX_OSDS}");
    }
    let osd_size = match &args.osd_size {
        Some(s) => parse_size_arg("--osd-size", s)?,
        None => prev.map_or(1 << 30, |p| p.osd_size),
    };
    if osd_size < MIN_OSD_SIZE {
        bail!(
            "--osd-size {} is too small: at least {}",
            format_size(osd_size),
            format_size(MIN_OSD_SIZE)
        );
    }
    let shards = args.shards.or(prev.map(|p| p.shards)).unwrap_or(1);
    if !(1..=MAX_SHARDS).contains(&shards) {
        bail!("--shards {shards} must be between 1 and {MAX_SHARDS}");
    }
    let duration =
        |flag: &str, given: &Option<String>, old: Option<Duration>, default: u64| match given {
            Some(s) => parse_duration(s).map_err(|e| anyhow!("{flag}: {e}")),
            None => Ok(old.unwrap_or(Duration::from_secs(default))),
        };
    let lease_ttl = duration("--lease-ttl", &args.lease_ttl, prev.map(|p| p.lease_ttl), 7)?;
    if lease_ttl < Duration::from_secs(1) {
        bail!("--lease-ttl must be at least 1s");
    }
    let out_after = duration(
        "--out-after",
        &args.out_after,
        prev.map(|p| p.out_after),
        pontoon_cluster::osd_admin::DEFAULT_OUT_AFTER_SECS,
    )?;
    Ok(ClusterFile {
        cluster_name: name,
        etcd: prev.map(|p| p.etcd.clone()).unwrap_or_default(),
        etcd_peer_port: prev.map_or(0, |p| p.etcd_peer_port),
        osds,
        osd_size,
        shards,
        lease_ttl,
        out_after,
        listen: args
            .listen
            .or(prev.map(|p| p.listen))
            .unwrap_or(IpAddr::from([127, 0, 0, 1])),
        host: prev.map_or_else(local_host_name, |p| p.host.clone()),
        pid: std::process::id(),
        http: prev.and_then(|p| p.http.clone()),
        api_token: None,
        etcd_auth: etcd_mode(args, prev)?,
    })
}

/// The wire mode to set before the OSDs start: `--ms-mode`, else
/// authenticated for a new cluster (keys are made for every daemon before
/// any starts), else none (an existing cluster keeps its mode).
fn ms_mode(args: &UpArgs, existing: bool) -> Option<pontoon_types::WireMode> {
    args.ms_mode
        .or((!existing).then_some(pontoon_types::WireMode::Authenticated))
}

/// What `cluster.toml` records about etcd's security: the admin's
/// credentials for a secured etcd (the default for a new cluster), none
/// for `--etcd-insecure` or a cluster created insecure.
fn etcd_mode(args: &UpArgs, prev: Option<&ClusterFile>) -> Result<EtcdAuth> {
    let was_secure = prev.is_some_and(|p| !p.etcd_auth.is_empty());
    let was_insecure = prev.is_some_and(|p| p.etcd_auth.is_empty() && !p.etcd.is_empty());
    if args.etcd_insecure && was_secure {
        bail!(
            "--etcd-insecure: the etcd of {} has TLS and authentication on; it cannot be turned off",
            args.dir.display()
        );
    }
    Ok(if args.etcd_insecure || was_insecure {
        EtcdAuth::none()
    } else {
        Pki::admin_auth_relative()
    })
}

/// The running cluster: its child processes and the manager task.
struct Cluster {
    layout: Layout,
    file: ClusterFile,
    etcd: Option<Child>,
    /// OSD children of this process, by id (an OSD restarted by `pontoon
    /// osd start` is not a child; it is found through its pid file).
    osds: BTreeMap<u32, Child>,
    mgr: Option<(watch::Sender<bool>, JoinHandle<()>)>,
    /// The manager's `/metrics` listener and daemon-registry entry.
    mgr_metrics: Option<crate::daemon_metrics::DaemonMetrics>,
    /// The manager's HTTP address asked for with `--http`.
    http: Option<SocketAddr>,
    /// The manager's capacity-history sample interval.
    history_interval: Duration,
    /// `--rated-dwpd`, set on every OSD at start.
    rated_dwpd: Option<f64>,
    /// `--ms-mode`, set in the map before any OSD starts.
    ms_mode: Option<pontoon_types::WireMode>,
    /// `--out-after` was given: it replaces the map's out-after.
    out_after_given: bool,
    /// The gateways asked for (NBD, NVMe/TCP), started after the manager.
    gateways: Vec<Gateway>,
}

/// A front-end gateway `pontoon up` runs as a child process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GatewayKind {
    /// `pontoon nbd`.
    Nbd,
    /// `pontoon nvmf` (no subcommand).
    Nvmf,
    /// `pontoon mgr`: a standby manager (its address is its HTTP API's).
    StandbyMgr,
}

impl GatewayKind {
    /// The subcommand, also the name of its pid and log files.
    fn command(self) -> &'static str {
        match self {
            GatewayKind::Nbd => "nbd",
            GatewayKind::Nvmf => "nvmf",
            GatewayKind::StandbyMgr => "mgr",
        }
    }

    /// How messages name it.
    fn label(self) -> &'static str {
        match self {
            GatewayKind::Nbd => "the NBD gateway",
            GatewayKind::Nvmf => "the NVMe/TCP gateway",
            GatewayKind::StandbyMgr => "the standby manager",
        }
    }

    /// What clients connect to.
    fn endpoint(self, addr: SocketAddr) -> String {
        match self {
            GatewayKind::Nbd => format!("nbd://{addr}/<volume>"),
            GatewayKind::Nvmf => format!("nvme-tcp://{addr}"),
            GatewayKind::StandbyMgr => format!("http://{addr} (standby manager)"),
        }
    }
}

/// One gateway child: `pontoon <kind> --listen ADDR --etcd ... --cluster-name ...`,
/// with `run/<kind>.pid` and `log/<kind>.log`.
struct Gateway {
    kind: GatewayKind,
    addr: SocketAddr,
    child: Option<Child>,
    /// More arguments (the standby manager's `--history-interval`).
    extra: Vec<String>,
}

impl Gateway {
    fn new(kind: GatewayKind, addr: SocketAddr) -> Self {
        Self {
            kind,
            addr,
            child: None,
            extra: Vec::new(),
        }
    }

    fn pid_file(&self, layout: &Layout) -> PathBuf {
        layout
            .run_dir()
            .join(format!("{}.pid", self.kind.command()))
    }

    fn log_file(&self, layout: &Layout) -> PathBuf {
        layout
            .log_dir()
            .join(format!("{}.log", self.kind.command()))
    }

    /// Starts the gateway and waits until it accepts connections.
    async fn start(
        &mut self,
        exe: &Path,
        layout: &Layout,
        file: &ClusterFile,
        stop: &AtomicBool,
    ) -> Result<()> {
        let (addr, label) = (self.addr, self.kind.label());
        let log = self.log_file(layout);
        let listen_flag = match self.kind {
            GatewayKind::StandbyMgr => "--http",
            _ => "--listen",
        };
        let mut args: Vec<String> = vec![
            self.kind.command().into(),
            listen_flag.into(),
            addr.to_string(),
            "--etcd".into(),
            file.etcd.clone(),
            "--cluster-name".into(),
            file.cluster_name.clone(),
            "--metrics".into(),
            SocketAddr::new(file.listen, 0).to_string(),
        ];
        args.extend(auth_flags(&daemon_auth(
            &layout.dir,
            file,
            self.kind.command(),
        )));
        if self.kind != GatewayKind::StandbyMgr {
            // the key the gateway proves to the OSDs (bootstrap_local made it)
            let entity = pontoon_cluster::auth::EntityName::parse(&format!(
                "gateway.{}",
                self.kind.command()
            ))?;
            let keyring = crate::cmd_auth::local_keyring(&layout.dir, &entity);
            args.extend(["--name".into(), entity.to_string(), "--keyring".into()]);
            args.push(keyring.display().to_string());
        }
        args.extend(self.extra.iter().cloned());
        let child = procs::spawn(exe, &args, &log, Attach::Child)?;
        procs::write_pid(&self.pid_file(layout), child.id())?;
        let child = self.child.insert(child);
        let deadline = Instant::now() + GATEWAY_START;
        loop {
            check_stop(stop)?;
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "{label} exited at start ({status}); last lines of {}:\n{}",
                    log.display(),
                    procs::log_tail(&log, 10)
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{label} did not listen on {addr} within {}; see {}",
                    format_duration(GATEWAY_START),
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reports (once) a gateway that exited while the cluster runs; it is
    /// not restarted.
    fn check_exited(&mut self, layout: &Layout) {
        if let Some(child) = &mut self.child
            && let Ok(Some(status)) = child.try_wait()
        {
            eprintln!(
                "{} (pid {}) exited: {status}; see {}",
                self.kind.label(),
                child.id(),
                self.log_file(layout).display()
            );
            self.child = None;
            let _ = std::fs::remove_file(self.pid_file(layout));
        }
    }

    /// Stops the gateway: SIGTERM, SIGKILL after the grace time.
    fn stop(&mut self, layout: &Layout) {
        if let Some(mut child) = self.child.take() {
            procs::signal(child.id(), libc::SIGTERM);
            if !procs::wait_child(&mut child, STOP_GRACE) {
                eprintln!("{} did not stop in time: killing it", self.kind.label());
                procs::signal(child.id(), libc::SIGKILL);
                procs::wait_child(&mut child, Duration::from_secs(5));
            }
            let _ = std::fs::remove_file(self.pid_file(layout));
        }
    }
}

impl Cluster {
    /// Starts etcd, the OSDs one by one (ids are handed out in order) and
    /// the manager; writes cluster.toml and prints the endpoints.
    async fn start(&mut self, stop: &AtomicBool) -> Result<()> {
        let exe = std::env::current_exe().context("cannot find the pontoon binary")?;
        self.start_etcd(stop).await?;
        // The manager in this process is a daemon like the others.
        let auth = daemon_auth(&self.layout.dir, &self.file, "mgr");
        let store = MapStore::connect_with(
            &split_endpoints(&self.file.etcd)?,
            &self.file.cluster_name,
            &auth,
        )
        .await
        .map_err(|e| anyhow!("{e}; etcd log {}", self.layout.etcd_log().display()))?;
        // Keys for the admin and every daemon, before any daemon starts.
        let gateways: Vec<&str> = self.gateways.iter().map(|g| g.kind.command()).collect();
        crate::cmd_auth::bootstrap_local(&store, &self.layout.dir, self.file.osds, &gateways)
            .await?;
        if let Some(mode) = self.ms_mode {
            crate::cmd_config_cluster::set_ms_mode(&store, mode).await?;
        }
        for id in 0..self.file.osds {
            check_stop(stop)?;
            self.start_osd(&exe, &store, id, stop).await?;
        }
        self.wait_alive(&store, stop).await?;
        crate::cmd_config_cluster::seed_out_after(
            &store,
            self.file.out_after,
            self.out_after_given,
        )
        .await?;
        // The manager starts once every OSD is alive: a restarted cluster
        // then finds the acting sets it left, with no interval changes.
        let mut mgr_cfg = MgrConfig::new(pontoon_mgr::default_name(&self.file.host));
        mgr_cfg.out_after = self.file.out_after;
        mgr_cfg.history_interval = self.history_interval;
        if let Some(dwpd) = self.rated_dwpd {
            crate::cmd_endurance::rate_all(&store, 0..self.file.osds, dwpd).await?;
        }
        let (tx, rx) = watch::channel(false);
        let mgr_name = mgr_cfg.name.clone();
        let http_stop = rx.clone();
        let task = tokio::spawn(pontoon_mgr::run(store.clone(), mgr_cfg, rx));
        self.mgr = Some((tx, task));
        let server = start_http(
            self.http,
            self.file.http.as_deref(),
            &store,
            &mgr_name,
            http_stop,
        )
        .await?;
        self.file.http = Some(format!("http://{}", server.addr));
        self.file.api_token = Some(server.token);
        let me = mgr_name.clone();
        self.mgr_metrics = Some(crate::daemon_metrics::DaemonMetrics::start(
            &split_endpoints(&self.file.etcd)?,
            &self.file.cluster_name,
            &auth,
            pontoon_cluster::daemons::kind::MGR,
            &mgr_name,
            &self.file.host,
            SocketAddr::new(self.file.listen, 0),
            move |store| pontoon_mgr::metrics::render_fn(store, me),
        )?);
        for gw in &mut self.gateways {
            gw.start(&exe, &self.layout, &self.file, stop).await?;
        }
        self.file.store(&self.layout.dir)?;
        self.print_ready(&store).await;
        Ok(())
    }

    async fn start_etcd(&mut self, stop: &AtomicBool) -> Result<()> {
        let bin = etcd_binary()?;
        let data = self.layout.etcd_data();
        let old_client = self
            .file
            .etcd
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse::<u16>().ok());
        // Same ports as last time when they are free (nothing to change for
        // clients that remember them), else new free ones.
        let client_port = reuse_or_free_port(old_client)?;
        let peer_port = reuse_or_free_port(
            Some(self.file.etcd_peer_port).filter(|p| *p != 0 && *p != client_port),
        )?;
        let secure = !self.file.etcd_auth.is_empty();
        let pki = Pki::new(&self.layout.dir);
        let mut renewed = false;
        let (client_url, args) = if secure {
            renewed = pki.ensure()?;
            let args = pontoon_cluster::etcd::single_member_args_tls(
                "pontoon",
                &data,
                client_port,
                peer_port,
                pki.etcd_args(),
            );
            (format!("https://127.0.0.1:{client_port}"), args)
        } else {
            let args =
                pontoon_cluster::etcd::single_member_args("pontoon", &data, client_port, peer_port);
            (format!("http://127.0.0.1:{client_port}"), args)
        };
        let log = self.layout.etcd_log();
        let child = procs::spawn(&bin, &args, &log, Attach::Child)?;
        procs::write_pid(&self.layout.etcd_pid(), child.id())?;
        self.file.etcd = client_url.clone();
        self.file.etcd_peer_port = peer_port;
        let child = self.etcd.insert(child);
        let deadline = Instant::now() + ETCD_START;
        loop {
            check_stop(stop)?;
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "etcd exited at start ({status}); last lines of {}:\n{}",
                    log.display(),
                    procs::log_tail(&log, 10)
                );
            }
            let healthy = if secure {
                let within = Duration::from_millis(500);
                pontoon_cluster::etcd_auth::serves(&client_url, &pki.auth("root"), within)
                    .await
                    .is_ok()
            } else {
                etcd_healthy(client_port)
            };
            if healthy {
                if secure {
                    // Roles, users and authentication, the first time (or
                    // again with new passwords, if the files were lost).
                    pontoon_cluster::etcd_auth::enable_auth(
                        &client_url,
                        &pki.auth("root"),
                        &self.file.cluster_name,
                        &pki.root_password()?,
                        &pki.prefix_users()?,
                        renewed,
                    )
                    .await
                    .map_err(|e| {
                        anyhow!(
                            "setting up etcd's authentication: {e}; etcd log {}",
                            log.display()
                        )
                    })?;
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcd was not healthy within {}; see {}",
                    format_duration(ETCD_START),
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts OSD `id` and waits until it has registered (so the next one
    /// cannot take its id).
    async fn start_osd(
        &mut self,
        exe: &Path,
        store: &MapStore,
        id: u32,
        stop: &AtomicBool,
    ) -> Result<()> {
        // One left over from an earlier run (restarted by `osd start`, so
        // not killed with its parent) talks to the old etcd: replace it.
        if let Some(pid) = running_osd(&self.layout, id) {
            eprintln!("stopping osd.{id} left running by an earlier run (pid {pid})");
            stop_foreign(pid, &self.layout.osd_device(id));
        }
        let log = self.layout.osd_log(id);
        let args = osd_run_args(&self.file, &self.layout, id);
        let child = procs::spawn(exe, &args, &log, Attach::Child)?;
        procs::write_pid(&self.layout.osd_pid(id), child.id())?;
        let child = self.osds.entry(id).or_insert(child);
        let deadline = Instant::now() + OSD_REGISTER;
        loop {
            check_stop(stop)?;
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "osd.{id} exited at start ({status}); last lines of {}:\n{}",
                    log.display(),
                    procs::log_tail(&log, 10)
                );
            }
            if let Ok(map) = store.load().await
                && map.osds.contains_key(&OsdId(id))
                && map.osds[&OsdId(id)].host == self.file.host
                && map.is_alive(OsdId(id))
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "osd.{id} did not register within {}; see {}",
                    format_duration(OSD_REGISTER),
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every OSD holds its liveness lease.
    async fn wait_alive(&mut self, store: &MapStore, stop: &AtomicBool) -> Result<()> {
        let deadline = Instant::now() + OSDS_ALIVE;
        loop {
            check_stop(stop)?;
            let map = store.load().await?;
            let missing: Vec<u32> = (0..self.file.osds)
                .filter(|i| !map.is_alive(OsdId(*i)))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            for (id, child) in &mut self.osds {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "osd.{id} exited at start ({status}); see {}",
                        self.layout.osd_log(*id).display()
                    );
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "OSDs {missing:?} did not come alive within {}",
                    format_duration(OSDS_ALIVE)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn print_ready(&self, store: &MapStore) {
        let map = store.load().await.ok();
        let dir = self.layout.dir.display();
        println!(
            "pontoon cluster {:?} is up: {} OSDs of {} (pid {})",
            self.file.cluster_name,
            self.file.osds,
            format_size(self.file.osd_size),
            std::process::id()
        );
        println!("  etcd     {}", self.file.etcd);
        if let Some(user) = &self.file.etcd_auth.user {
            println!(
                "           TLS with client certificates, user {user:?}: {dir}/{}/",
                crate::etcd_pki::PKI_DIR
            );
        }
        if let Some(http) = &self.file.http {
            println!("  http     {http}  (REST API at /api/v1/; token in cluster.toml)");
            if let Some(token) = &self.file.api_token {
                println!("  dashboard {http}/#token={token}");
            }
        }
        for (id, child) in &self.osds {
            let addrs = map
                .as_ref()
                .and_then(|m| m.osds.get(&OsdId(*id)))
                .map(|o| {
                    o.addrs
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            println!("  osd.{id:<4} {addrs}  pid {}", child.id());
        }
        for gw in &self.gateways {
            if let Some(child) = &gw.child {
                println!(
                    "  {:<8} {}  pid {}",
                    gw.kind.command(),
                    gw.kind.endpoint(gw.addr),
                    child.id()
                );
            }
        }
        // Every daemon's /metrics, from the daemon registry (the gateways
        // register a moment after they listen).
        let mut daemons = Vec::new();
        let want = self.file.osds as usize + 1 + self.gateways.len();
        for _ in 0..50 {
            daemons = store.daemons().await.unwrap_or_default();
            if daemons.len() >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for d in &daemons {
            if let Some(m) = &d.metrics {
                println!("  metrics  {:<12} http://{m}/metrics", d.id());
            }
        }
        println!("  config   {dir}/cluster.toml");
        println!("  keyring  {dir}/keys/client.admin.keyring");
        println!("  logs     {dir}/log/");
        println!(
            "Try `pontoon status --cluster {dir}` (or export PONTOON_CLUSTER={dir}). Stop with Ctrl-C."
        );
        let _ = std::io::stdout().flush();
    }

    /// Runs until SIGINT/SIGTERM (Ok) or etcd dies (Err). OSDs that exit
    /// are reported, not restarted.
    async fn foreground(&mut self, stop: &AtomicBool) -> Result<()> {
        loop {
            if stop.load(Ordering::Relaxed) {
                eprintln!("stopping the cluster");
                return Ok(());
            }
            if let Some(etcd) = &mut self.etcd
                && let Ok(Some(status)) = etcd.try_wait()
            {
                bail!(
                    "etcd exited ({status}); see {}",
                    self.layout.etcd_log().display()
                );
            }
            let mut exited = Vec::new();
            for (id, child) in &mut self.osds {
                if let Ok(Some(status)) = child.try_wait() {
                    exited.push((*id, child.id(), status));
                }
            }
            for (id, pid, status) in exited {
                self.osds.remove(&id);
                let pid_file = self.layout.osd_pid(id);
                if procs::read_pid(&pid_file) == Some(pid) {
                    let _ = std::fs::remove_file(&pid_file);
                }
                eprintln!(
                    "osd.{id} (pid {pid}) exited: {status}; not restarted — run `pontoon osd start {id} --cluster {}`",
                    self.layout.dir.display()
                );
            }
            for gw in &mut self.gateways {
                gw.check_exited(&self.layout);
            }
            if let Some((_, task)) = &self.mgr
                && task.is_finished()
            {
                bail!("the manager stopped unexpectedly");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops everything, in order: gateways, manager, OSDs (children and ones
    /// restarted by `osd start`), etcd. Bounded: what does not stop in
    /// time is killed.
    async fn shutdown(&mut self) {
        for gw in &mut self.gateways {
            gw.stop(&self.layout);
        }
        self.mgr_metrics.take();
        if let Some((tx, task)) = self.mgr.take() {
            let _ = tx.send(true);
            if tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .is_err()
            {
                eprintln!("the manager did not stop in time");
            }
        }
        // Children first, then the OSDs started by `osd start` (by pid file).
        let mut foreign = Vec::new();
        for child in self.osds.values() {
            procs::signal(child.id(), libc::SIGTERM);
        }
        for id in 0..self
            .file
            .osds
            .max(self.osds.keys().next_back().map_or(0, |m| m + 1))
        {
            if self.osds.contains_key(&id) {
                continue;
            }
            if let Some(pid) = running_osd(&self.layout, id) {
                procs::signal(pid, libc::SIGTERM);
                foreign.push((id, pid));
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        for (id, child) in &mut self.osds {
            let left = deadline.saturating_duration_since(Instant::now());
            if !procs::wait_child(child, left) {
                eprintln!("osd.{id} did not stop in time: killing it");
                procs::signal(child.id(), libc::SIGKILL);
                procs::wait_child(child, Duration::from_secs(5));
            }
            let _ = std::fs::remove_file(self.layout.osd_pid(*id));
        }
        self.osds.clear();
        for (id, pid) in foreign {
            let left = deadline.saturating_duration_since(Instant::now());
            if !procs::wait_gone(pid, left) {
                eprintln!("osd.{id} did not stop in time: killing it");
                procs::signal(pid, libc::SIGKILL);
                procs::wait_gone(pid, Duration::from_secs(5));
            }
            let _ = std::fs::remove_file(self.layout.osd_pid(id));
        }
        if let Some(mut etcd) = self.etcd.take() {
            procs::signal(etcd.id(), libc::SIGTERM);
            if !procs::wait_child(&mut etcd, Duration::from_secs(10)) {
                procs::signal(etcd.id(), libc::SIGKILL);
                procs::wait_child(&mut etcd, Duration::from_secs(5));
            }
            let _ = std::fs::remove_file(self.layout.etcd_pid());
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Only reached without `shutdown` on a panic: kill what is left.
        for child in self
            .gateways
            .iter_mut()
            .filter_map(|g| g.child.as_mut())
            .chain(self.osds.values_mut())
            .chain(self.etcd.as_mut())
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Fails if a stop signal arrived.
fn check_stop(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

/// Stops an OSD that is not our child: SIGTERM, then SIGKILL after the grace time.
fn stop_foreign(pid: u32, device: &Path) {
    if !procs::is_osd_process(pid, device) {
        return;
    }
    procs::signal(pid, libc::SIGTERM);
    if !procs::wait_gone(pid, STOP_GRACE) {
        procs::signal(pid, libc::SIGKILL);
        procs::wait_gone(pid, Duration::from_secs(5));
    }
}

/// Starts the manager's HTTP server (REST API, dashboard) on `asked`, else
/// on the address of the last run (`previous`, `http://ADDR`) when it is
/// free, else on a free port of 127.0.0.1.
async fn start_http(
    asked: Option<SocketAddr>,
    previous: Option<&str>,
    store: &MapStore,
    name: &str,
    stop: watch::Receiver<bool>,
) -> Result<pontoon_mgr::http::Server> {
    use pontoon_mgr::http::start;
    if let Some(addr) = asked {
        return Ok(start(addr, store.clone(), name, stop).await?);
    }
    let last = previous
        .and_then(|u| u.strip_prefix("http://"))
        .and_then(|a| a.parse::<SocketAddr>().ok());
    if let Some(addr) = last
        && let Ok(server) = start(addr, store.clone(), name, stop.clone()).await
    {
        return Ok(server);
    }
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    Ok(start(any, store.clone(), name, stop).await?)
}

/// Finds etcd: `$PONTOON_ETCD_BIN`, `/usr/bin/etcd`, then `$PATH`.
fn etcd_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PONTOON_ETCD_BIN") {
        return Ok(PathBuf::from(p));
    }
    let debian = Path::new("/usr/bin/etcd");
    if debian.is_file() {
        return Ok(debian.to_path_buf());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("etcd");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(anyhow!(
        "etcd is not installed (looked at $PONTOON_ETCD_BIN, /usr/bin/etcd and $PATH): \
         install Debian's etcd-server (scripts/deps.sh does)"
    ))
}

/// `want` if that loopback port is free now, else a free one.
fn reuse_or_free_port(want: Option<u16>) -> Result<u16> {
    if let Some(p) = want.filter(|p| *p != 0)
        && TcpListener::bind(("127.0.0.1", p)).is_ok()
    {
        return Ok(p);
    }
    Ok(TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("cannot find a free port")?
        .port())
}

/// Whether etcd at `port` answers `/health` with `"health":"true"`.
fn etcd_healthy(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = Vec::new();
    let _ = s.take(64 * 1024).read_to_end(&mut body);
    String::from_utf8_lossy(&body).contains(r#""health":"true""#)
}
