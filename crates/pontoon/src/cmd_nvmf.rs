//! `pontoon nvmf`: NVMe-oF subsystems in the cluster map (`subsystem`,
//! `ns`, `host`), and, with no subcommand, the NVMe/TCP gateway that
//! exports them.
//!
//! The map holds the configuration (one record per subsystem, see
//! `pontoon_cluster::NvmfSubsystemRecord`); every gateway follows it, so
//! a namespace added or a host allowed here takes effect on every gateway
//! within about a second, without restarting them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::{Args, Subcommand};
use pontoon_client::{Client, ClusterCatalog};
use pontoon_cluster::ClusterMap;
use pontoon_cluster::model::{
    NvmfHostAuthRecord, NvmfSubsystemRecord, format_uuid, redact_dhchap_secret,
};
use pontoon_nvmf::auth::{DhGroup, DhchapSecret, HashId, HostAuth};
use pontoon_nvmf::{NamespaceConfig, SubsystemConfig, Subsystems, TargetConfig, check_nqn};
use pontoon_types::format_size;
use serde::Serialize;

use crate::cluster_args::ClusterArgs;

/// Longest the gateway waits for a map change before looking at its stop
/// flag again. Changes themselves arrive at once ([`MapFeed::wait_newer`]),
/// so a host can connect right after `nvmf ns add` / `host allow` returns.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// Arguments of `pontoon nvmf`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NvmfArgs {
    /// Where to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Run the gateway (no subcommand) with these settings.
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[command(subcommand)]
    cmd: Option<NvmfCmd>,
}

impl NvmfArgs {
    /// Whether this runs the gateway (a daemon) rather than a one-shot command.
    pub fn is_gateway(&self) -> bool {
        self.cmd.is_none()
    }
}

/// Settings of the gateway (`pontoon nvmf` with no subcommand).
#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// Address to listen on (NVMe/TCP's port is 4420; default:
    /// nvmf.listen of the configuration file, else 127.0.0.1:4420).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Worker threads (each with its own io_uring runtime and connections).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub workers: usize,
    /// Let any host connect to every subsystem, ignoring the allow-lists
    /// (for tests and closed networks).
    #[arg(long)]
    pub allow_any_host: bool,
    /// Where to serve Prometheus metrics (`GET /metrics`): IP:PORT (port 0
    /// for a free one) or `off` (default: nvmf.metrics of the
    /// configuration file, else 127.0.0.1:0).
    #[arg(long, value_name = "ADDR|off")]
    pub metrics: Option<String>,
}

#[derive(Subcommand, Debug)]
enum NvmfCmd {
    /// Create, list and remove NVMe-oF subsystems.
    #[command(subcommand, alias = "subsys")]
    Subsystem(SubsystemCmd),
    /// Export volumes as namespaces of a subsystem.
    #[command(subcommand, alias = "namespace")]
    Ns(NsCmd),
    /// Manage a subsystem's allow-list of host NQNs.
    #[command(subcommand)]
    Host(HostCmd),
}

#[derive(Subcommand, Debug)]
enum SubsystemCmd {
    /// Create a subsystem (no namespaces, no hosts allowed yet).
    Add {
        /// Its NQN, e.g. nqn.2024-01.io.pontoon:db1.
        nqn: String,
    },
    /// List subsystems.
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a subsystem with its namespaces and allow-list (the volumes
    /// stay).
    Rm {
        /// Its NQN.
        nqn: String,
    },
}

#[derive(Subcommand, Debug)]
enum NsCmd {
    /// Export a volume (or, as `VOLUME@SNAPSHOT`, a snapshot, read-only)
    /// as a namespace of a subsystem; prints the namespace id.
    Add {
        /// The subsystem's NQN.
        nqn: String,
        /// The volume's name, or `VOLUME@SNAPSHOT`.
        volume: String,
        /// Namespace id (default: the lowest free one).
        #[arg(long, value_name = "N")]
        nsid: Option<u32>,
    },
    /// List a subsystem's namespaces.
    Ls {
        /// The subsystem's NQN.
        nqn: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop exporting a namespace (the volume stays).
    Rm {
        /// The subsystem's NQN.
        nqn: String,
        /// The namespace id.
        nsid: u32,
    },
}

/// DH-HMAC-CHAP settings of `host allow` and `host set-keys`. A secret is
/// read from the option's value, from a file, or from the environment, so
/// that it need not appear in the process list; it is never printed.
#[derive(Args, Debug, Default)]
struct DhchapArgs {
    /// Require DH-HMAC-CHAP with this host secret (`DHHC-1:..:...:`, as
    /// `nvme gen-dhchap-key` makes; the host passes it to `nvme connect
    /// --dhchap-secret`). Visible in the process list while the command
    /// runs: prefer --dhchap-secret-file or PONTOON_DHCHAP_SECRET.
    #[arg(
        long,
        value_name = "SECRET",
        env = "PONTOON_DHCHAP_SECRET",
        hide_env_values = true
    )]
    dhchap_secret: Option<String>,
    /// Read the host secret from FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "dhchap_secret")]
    dhchap_secret_file: Option<std::path::PathBuf>,
    /// Also authenticate the gateway to the host (bidirectional) with this
    /// controller secret (the host's `--dhchap-ctrl-secret`).
    #[arg(
        long,
        value_name = "SECRET",
        env = "PONTOON_DHCHAP_CTRL_SECRET",
        hide_env_values = true
    )]
    dhchap_ctrl_secret: Option<String>,
    /// Read the controller secret from FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "dhchap_ctrl_secret")]
    dhchap_ctrl_secret_file: Option<std::path::PathBuf>,
    /// Hash the gateway picks: sha256, sha384 or sha512 (default: the
    /// host's first choice; Linux offers sha256 first).
    #[arg(long, value_name = "HASH")]
    dhchap_hash: Option<String>,
    /// DH group the gateway picks: null, ffdhe2048, ffdhe3072, ffdhe4096,
    /// ffdhe6144 or ffdhe8192 (default: ffdhe2048 if the host offers it).
    #[arg(long, value_name = "GROUP")]
    dhchap_dhgroup: Option<String>,
}

/// A secret from `value` or `file`, checked; `what` names it in errors
/// (which never quote the secret).
fn read_secret(
    what: &str,
    value: Option<&String>,
    file: Option<&std::path::Path>,
) -> Result<Option<DhchapSecret>> {
    let text = match (value, file) {
        (Some(v), _) => v.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading the {what} from {}", f.display()))?,
        (None, None) => return Ok(None),
    };
    DhchapSecret::parse(&text)
        .map(Some)
        .map_err(|e| anyhow!("invalid {what}: {e}"))
}

impl DhchapArgs {
    /// The map record these options ask for (`None`: no secret given).
    fn record(&self) -> Result<Option<NvmfHostAuthRecord>> {
        let secret = read_secret(
            "host secret",
            self.dhchap_secret.as_ref(),
            self.dhchap_secret_file.as_deref(),
        )?;
        let ctrl = read_secret(
            "controller secret",
            self.dhchap_ctrl_secret.as_ref(),
            self.dhchap_ctrl_secret_file.as_deref(),
        )?;
        let hash = self
            .dhchap_hash
            .as_deref()
            .map(|h| {
                HashId::parse(h).ok_or_else(|| {
                    anyhow!("unknown DH-HMAC-CHAP hash {h:?} (sha256, sha384, sha512)")
                })
            })
            .transpose()?;
        let dhgroup = self
            .dhchap_dhgroup
            .as_deref()
            .map(|g| {
                DhGroup::parse(g).ok_or_else(|| {
                    anyhow!("unknown DH group {g:?} (null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192)")
                })
            })
            .transpose()?;
        let Some(secret) = secret else {
            if ctrl.is_some() || hash.is_some() || dhgroup.is_some() {
                return Err(anyhow!(
                    "--dhchap-ctrl-secret, --dhchap-hash and --dhchap-dhgroup need a host secret (--dhchap-secret)"
                ));
            }
            return Ok(None);
        };
        if ctrl.as_ref() == Some(&secret) {
            return Err(anyhow!(
                "the controller secret must differ from the host secret"
            ));
        }
        Ok(Some(NvmfHostAuthRecord {
            secret: secret.expose().to_string(),
            ctrl_secret: ctrl.map(|c| c.expose().to_string()),
            hash: hash.map(|h| h.name().to_string()),
            dhgroup: dhgroup.map(|g| g.name().to_string()),
        }))
    }
}

#[derive(Subcommand, Debug)]
enum HostCmd {
    /// Allow a host NQN to connect to a subsystem, optionally requiring
    /// DH-HMAC-CHAP authentication.
    #[command(alias = "add")]
    Allow {
        /// The subsystem's NQN.
        nqn: String,
        /// The host's NQN (Linux: /etc/nvme/hostnqn).
        host: String,
        #[command(flatten)]
        dhchap: DhchapArgs,
    },
    /// Set, change (rotate) or clear the DH-HMAC-CHAP secrets of an
    /// allowed host.
    SetKeys {
        /// The subsystem's NQN.
        nqn: String,
        /// The host's NQN.
        host: String,
        #[command(flatten)]
        dhchap: DhchapArgs,
        /// Remove the secrets: the host connects without authenticating.
        #[arg(long, conflicts_with_all = ["dhchap_secret", "dhchap_secret_file"])]
        clear: bool,
    },
    /// List the hosts allowed to connect to a subsystem.
    Ls {
        /// The subsystem's NQN.
        nqn: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a host from a subsystem's allow-list.
    #[command(alias = "disallow")]
    Rm {
        /// The subsystem's NQN.
        nqn: String,
        /// The host's NQN.
        host: String,
    },
}

/// A namespace as the listings print it.
#[derive(Serialize)]
struct NamespaceView {
    nsid: u32,
    volume: String,
    uuid: String,
    /// The volume's size (`None` if the volume is missing from the map).
    size_bytes: Option<u64>,
}

/// A host of a subsystem as `host ls --json` prints it (secrets redacted).
#[derive(Serialize)]
struct HostView {
    nqn: String,
    /// DH-HMAC-CHAP, when the host must authenticate.
    dhchap: Option<DhchapView>,
}

/// A host's DH-HMAC-CHAP settings, secrets redacted.
#[derive(Serialize)]
struct DhchapView {
    secret: String,
    ctrl_secret: Option<String>,
    hash: Option<String>,
    dhgroup: Option<String>,
}

fn hosts_view(s: &NvmfSubsystemRecord) -> Vec<HostView> {
    s.hosts
        .iter()
        .map(|h| HostView {
            nqn: h.clone(),
            dhchap: s.dhchap.get(h).map(|a| DhchapView {
                secret: redact_dhchap_secret(&a.secret),
                ctrl_secret: a.ctrl_secret.as_deref().map(redact_dhchap_secret),
                hash: a.hash.clone(),
                dhgroup: a.dhgroup.clone(),
            }),
        })
        .collect()
}

/// A subsystem as `subsystem ls --json` prints it.
#[derive(Serialize)]
struct SubsystemView {
    nqn: String,
    namespaces: Vec<NamespaceView>,
    hosts: Vec<String>,
}

fn namespaces_view(map: &ClusterMap, s: &NvmfSubsystemRecord) -> Vec<NamespaceView> {
    s.namespaces
        .iter()
        .map(|(id, ns)| NamespaceView {
            nsid: *id,
            volume: ns.volume.clone(),
            uuid: ns
                .uuid_bytes()
                .map_or_else(|| ns.uuid.clone(), |b| format_uuid(&b)),
            size_bytes: map.image_size(&ns.volume),
        })
        .collect()
}

fn subsystem_view(map: &ClusterMap, s: &NvmfSubsystemRecord) -> SubsystemView {
    SubsystemView {
        nqn: s.nqn.clone(),
        namespaces: namespaces_view(map, s),
        hosts: s.hosts.iter().cloned().collect(),
    }
}

/// The subsystem `nqn` of `map`, or a "not found" error.
fn subsystem<'m>(map: &'m ClusterMap, nqn: &str) -> Result<&'m NvmfSubsystemRecord> {
    map.nvmf
        .get(nqn)
        .ok_or_else(|| anyhow!("subsystem {nqn} not found"))
}

/// Checks an NQN given on the command line (subsystem or host).
fn valid_nqn(what: &str, nqn: &str) -> Result<()> {
    check_nqn(nqn).map_err(|e| anyhow!("invalid {what} NQN: {e}"))
}

/// Runs `pontoon nvmf ...`.
pub fn run(args: NvmfArgs) -> Result<()> {
    let Some(cmd) = args.cmd else {
        return run_gateway(&args.cluster, &args.gateway);
    };
    // NQNs are checked before connecting: a typo fails fast. Only where one
    // is created; an existing one is simply looked up.
    // Secrets too: a bad one fails before the cluster is asked.
    let mut auth = None;
    match &cmd {
        NvmfCmd::Subsystem(SubsystemCmd::Add { nqn }) => valid_nqn("subsystem", nqn)?,
        NvmfCmd::Host(HostCmd::Allow { host, dhchap, .. }) => {
            valid_nqn("host", host)?;
            auth = dhchap.record()?;
        }
        NvmfCmd::Host(HostCmd::SetKeys { dhchap, clear, .. }) => {
            auth = dhchap.record()?;
            if auth.is_none() && !clear {
                return Err(anyhow!(
                    "give the new secrets (--dhchap-secret, optionally --dhchap-ctrl-secret) or --clear"
                ));
            }
        }
        _ => {}
    }
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match cmd {
            NvmfCmd::Subsystem(SubsystemCmd::Add { nqn }) => {
                store.nvmf_add_subsystem(&nqn).await?;
                println!("subsystem {nqn} created");
            }
            NvmfCmd::Subsystem(SubsystemCmd::Ls { json }) => {
                let map = store.load().await?;
                let subs: Vec<SubsystemView> =
                    map.nvmf.values().map(|s| subsystem_view(&map, s)).collect();
                if json {
                    println!("{}", serde_json::to_string_pretty(&subs)?);
                } else if subs.is_empty() {
                    println!("no subsystems");
                } else {
                    println!("{:<48} {:>10} {:>6}", "NQN", "NAMESPACES", "HOSTS");
                    for s in subs {
                        println!(
                            "{:<48} {:>10} {:>6}",
                            s.nqn,
                            s.namespaces.len(),
                            s.hosts.len()
                        );
                    }
                }
            }
            NvmfCmd::Subsystem(SubsystemCmd::Rm { nqn }) => {
                let rec = store.nvmf_remove_subsystem(&nqn).await?;
                println!(
                    "subsystem {nqn} removed ({} namespace(s) no longer exported)",
                    rec.namespaces.len()
                );
            }
            NvmfCmd::Ns(NsCmd::Add { nqn, volume, nsid }) => {
                let id = store.nvmf_add_namespace(&nqn, &volume, nsid).await?;
                // Only the id, as SPDK's nvmf_subsystem_add_ns prints it:
                // `NSID=$(pontoon nvmf ns add ...)`.
                println!("{id}");
            }
            NvmfCmd::Ns(NsCmd::Ls { nqn, json }) => {
                let map = store.load().await?;
                let list = namespaces_view(&map, subsystem(&map, &nqn)?);
                if json {
                    println!("{}", serde_json::to_string_pretty(&list)?);
                } else if list.is_empty() {
                    println!("subsystem {nqn} has no namespaces");
                } else {
                    println!("{:>5} {:<24} {:>12} UUID", "NSID", "VOLUME", "SIZE");
                    for ns in list {
                        let size = ns.size_bytes.map_or_else(|| "-".into(), format_size);
                        println!("{:>5} {:<24} {size:>12} {}", ns.nsid, ns.volume, ns.uuid);
                    }
                }
            }
            NvmfCmd::Ns(NsCmd::Rm { nqn, nsid }) => {
                let ns = store.nvmf_remove_namespace(&nqn, nsid).await?;
                println!(
                    "namespace {nsid} of subsystem {nqn} removed (volume {} is no longer exported there)",
                    ns.volume
                );
            }
            NvmfCmd::Host(HostCmd::Allow { nqn, host, .. }) => {
                let how = auth.as_ref().map_or("", |a| {
                    if a.ctrl_secret.is_some() {
                        " with DH-HMAC-CHAP (host and controller secrets)"
                    } else {
                        " with DH-HMAC-CHAP (host secret)"
                    }
                });
                store.nvmf_allow_host_with(&nqn, &host, auth).await?;
                println!("host {host} may connect to subsystem {nqn}{how}");
            }
            NvmfCmd::Host(HostCmd::SetKeys { nqn, host, .. }) => {
                let set = auth.is_some();
                store.nvmf_set_host_auth(&nqn, &host, auth).await?;
                if set {
                    println!(
                        "host {host} must authenticate to subsystem {nqn} with the new DH-HMAC-CHAP secrets from its next connection or re-authentication on"
                    );
                } else {
                    println!("host {host} connects to subsystem {nqn} without DH-HMAC-CHAP");
                }
            }
            NvmfCmd::Host(HostCmd::Ls { nqn, json }) => {
                let map = store.load().await?;
                let hosts = hosts_view(subsystem(&map, &nqn)?);
                if json {
                    println!("{}", serde_json::to_string_pretty(&hosts)?);
                } else if hosts.is_empty() {
                    println!(
                        "no hosts may connect to subsystem {nqn} (unless a gateway runs with --allow-any-host)"
                    );
                } else {
                    for h in hosts {
                        match h.dhchap {
                            None => println!("{}", h.nqn),
                            Some(a) => println!(
                                "{}  dhchap: host secret {}{}",
                                h.nqn,
                                a.secret,
                                a.ctrl_secret
                                    .map(|c| format!(", controller secret {c}"))
                                    .unwrap_or_default()
                            ),
                        }
                    }
                }
            }
            NvmfCmd::Host(HostCmd::Rm { nqn, host }) => {
                store.nvmf_disallow_host(&nqn, &host).await?;
                println!(
                    "host {host} removed from the allow-list of subsystem {nqn} (new connections are refused; existing ones stay until they close)"
                );
            }
        }
        Ok(())
    })
}

/// What the target serves for `nvmf`, the map's subsystem table. A
/// namespace whose UUID does not parse (the map load refuses such records,
/// so only a hand-edited map could hold one) is left out with a warning.
pub fn target_config(nvmf: &BTreeMap<String, NvmfSubsystemRecord>) -> Vec<SubsystemConfig> {
    nvmf.values()
        .map(|s| SubsystemConfig {
            nqn: s.nqn.clone(),
            namespaces: s
                .namespaces
                .iter()
                .filter_map(|(id, ns)| match ns.uuid_bytes() {
                    Some(uuid) => Some(NamespaceConfig {
                        nsid: *id,
                        volume: ns.volume.clone(),
                        uuid,
                    }),
                    None => {
                        tracing::warn!(
                            subsystem = %s.nqn,
                            nsid = id,
                            uuid = %ns.uuid,
                            "namespace left out: its UUID is malformed"
                        );
                        None
                    }
                })
                .collect(),
            allowed_hosts: s
                .hosts
                .iter()
                .filter(|h| {
                    !s.dhchap.contains_key(*h) || host_auth(&s.nqn, h, &s.dhchap[*h]).is_some()
                })
                .cloned()
                .collect(),
            auth: s
                .dhchap
                .iter()
                .filter(|(h, _)| s.hosts.contains(*h))
                .filter_map(|(h, a)| Some((h.clone(), host_auth(&s.nqn, h, a)?)))
                .collect(),
        })
        .collect()
}

/// The target's form of a host's DH-HMAC-CHAP record. A record that does
/// not parse (the CLI checks secrets, so only a hand-edited map could
/// hold one) gives `None`: the host is then left off the allow-list, not
/// let in without authentication. Nothing logged quotes a secret.
fn host_auth(nqn: &str, host: &str, a: &NvmfHostAuthRecord) -> Option<HostAuth> {
    let refuse = |why: String| {
        tracing::warn!(subsystem = %nqn, %host, "host refused: its DH-HMAC-CHAP settings are invalid ({why})");
        None
    };
    let secret = match DhchapSecret::parse(&a.secret) {
        Ok(s) => s,
        Err(e) => return refuse(format!("host secret: {e}")),
    };
    let ctrl_secret = match a
        .ctrl_secret
        .as_deref()
        .map(DhchapSecret::parse)
        .transpose()
    {
        Ok(c) => c,
        Err(e) => return refuse(format!("controller secret: {e}")),
    };
    let hash = match a
        .hash
        .as_deref()
        .map(|h| HashId::parse(h).ok_or(h))
        .transpose()
    {
        Ok(h) => h,
        Err(h) => return refuse(format!("unknown hash {h:?}")),
    };
    let dhgroup = match a
        .dhgroup
        .as_deref()
        .map(|g| DhGroup::parse(g).ok_or(g))
        .transpose()
    {
        Ok(g) => g,
        Err(g) => return refuse(format!("unknown DH group {g:?}")),
    };
    Some(HostAuth {
        secret,
        ctrl_secret,
        hash,
        dhgroup,
    })
}

/// Logs subsystems that no host may connect to.
fn warn_closed(nvmf: &BTreeMap<String, NvmfSubsystemRecord>, allow_any_host: bool) {
    if allow_any_host {
        return;
    }
    for s in nvmf.values().filter(|s| s.hosts.is_empty()) {
        tracing::warn!(
            "subsystem {} allows no host yet: `pontoon nvmf host allow {} HOSTNQN`",
            s.nqn,
            s.nqn
        );
    }
}

/// Runs the gateway until SIGINT or SIGTERM.
fn run_gateway(cluster: &ClusterArgs, args: &GatewayArgs) -> Result<()> {
    let listen = crate::config_file::socket_addr("nvmf.listen", "--listen", args.listen)?;
    let metrics_addr = crate::config_file::metrics_addr("nvmf.metrics", args.metrics.as_deref())?;
    let stop = crate::cmd_osd::stop_flag()?;
    let (feed, target) = cluster.feed("gateway.nvmf")?;
    let mut served = feed.current().nvmf.clone();
    let subsystems = Subsystems::new(target_config(&served));
    let config = TargetConfig {
        listen,
        workers: args.workers.max(1),
        allow_any_host: args.allow_any_host,
        ..Default::default()
    };
    let factory_feed = feed.clone();
    let counters = pontoon_metrics::GatewayMetrics::new(pontoon_cluster::daemons::kind::NVMF);
    let catalog_counters = counters.clone();
    let server = match pontoon_nvmf::start(
        config,
        subsystems.clone(),
        Arc::new(move || {
            pontoon_metrics::MeteredCatalog::new(
                ClusterCatalog::new(Client::new(factory_feed.clone())),
                catalog_counters.clone(),
            )
        }),
    ) {
        Ok(s) => s,
        Err(e) => {
            feed.shutdown();
            return Err(anyhow!("starting the NVMe/TCP target on {listen}: {e}"));
        }
    };
    println!(
        "nvmf: serving the {} NVMe-oF subsystem(s) of cluster {:?} on nvme-tcp://{}{}",
        served.len(),
        target.name,
        server.local_addr(),
        if args.allow_any_host {
            " to any host"
        } else {
            ""
        }
    );
    warn_closed(&served, args.allow_any_host);
    let metrics = match crate::daemon_metrics::start_gateway(
        &target.endpoints,
        &target.name,
        &target.auth,
        pontoon_cluster::daemons::kind::NVMF,
        metrics_addr,
        counters,
    ) {
        Ok(m) => m,
        Err(e) => {
            let _ = server.stop();
            feed.shutdown();
            return Err(e);
        }
    };
    let mut seen_epoch = feed.epoch();
    crate::notify::ready(&format!("serving NVMe/TCP on {}", server.local_addr()));
    while !stop.load(Ordering::Relaxed) {
        let map = feed.wait_newer(seen_epoch, STOP_CHECK);
        if map.epoch.0 == seen_epoch {
            continue;
        }
        seen_epoch = map.epoch.0;
        if map.nvmf != served {
            served = map.nvmf.clone();
            subsystems.set(target_config(&served));
            tracing::info!(
                epoch = map.epoch.0,
                subsystems = served.len(),
                namespaces = served.values().map(|s| s.namespaces.len()).sum::<usize>(),
                "NVMe-oF configuration changed"
            );
            warn_closed(&served, args.allow_any_host);
        }
    }
    drop(metrics);
    let stopped = server.stop();
    feed.shutdown();
    stopped.map_err(|e| anyhow!("stopping the NVMe/TCP target: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::model::NvmfNamespaceRecord;

    #[test]
    fn the_discovery_nqn_is_the_same_in_the_map_and_the_target() {
        assert_eq!(
            pontoon_cluster::model::NVMF_DISCOVERY_NQN,
            pontoon_nvmf::DISCOVERY_NQN
        );
        assert_eq!(
            pontoon_cluster::model::NVMF_MAX_NQN_LEN,
            pontoon_nvmf::MAX_NQN_LEN
        );
    }

    #[test]
    fn map_records_become_target_subsystems() {
        let mut rec = NvmfSubsystemRecord {
            nqn: "nqn.x:a".into(),
            ..Default::default()
        };
        rec.namespaces.insert(
            3,
            NvmfNamespaceRecord {
                volume: "v".into(),
                uuid: "00112233-4455-6677-8899-aabbccddeeff".into(),
            },
        );
        rec.namespaces.insert(
            1,
            NvmfNamespaceRecord {
                volume: "w".into(),
                uuid: "ffeeddccbbaa99887766554433221100".into(),
            },
        );
        rec.namespaces.insert(
            2,
            NvmfNamespaceRecord {
                volume: "broken".into(),
                uuid: "nope".into(),
            },
        );
        rec.hosts.insert("nqn.h".into());
        let table = BTreeMap::from([(rec.nqn.clone(), rec)]);
        let cfg = target_config(&table);
        assert_eq!(cfg.len(), 1);
        assert_eq!(cfg[0].nqn, "nqn.x:a");
        assert_eq!(cfg[0].allowed_hosts, vec!["nqn.h".to_string()]);
        let ids: Vec<u32> = cfg[0].namespaces.iter().map(|n| n.nsid).collect();
        assert_eq!(ids, vec![1, 3], "the malformed one is left out");
        assert_eq!(cfg[0].namespaces[1].volume, "v");
        assert_eq!(
            cfg[0].namespaces[1].uuid,
            [
                0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
                0xee, 0xff
            ]
        );
        assert_eq!(cfg[0].namespaces[0].uuid[0], 0xff);
    }

    #[test]
    fn dhchap_records_become_target_auth_and_bad_ones_shut_the_host_out() {
        let good = "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:";
        let mut rec = NvmfSubsystemRecord {
            nqn: "nqn.x:a".into(),
            ..Default::default()
        };
        for h in ["nqn.plain", "nqn.auth", "nqn.broken"] {
            rec.hosts.insert(h.into());
        }
        rec.dhchap.insert(
            "nqn.auth".into(),
            NvmfHostAuthRecord {
                secret: good.into(),
                ctrl_secret: None,
                hash: Some("sha512".into()),
                dhgroup: Some("ffdhe3072".into()),
            },
        );
        rec.dhchap.insert(
            "nqn.broken".into(),
            NvmfHostAuthRecord {
                secret: good.replace("Fm2C", "Fm2D"),
                ..Default::default()
            },
        );
        let cfg = target_config(&BTreeMap::from([(rec.nqn.clone(), rec)]));
        assert_eq!(cfg[0].allowed_hosts, vec!["nqn.auth", "nqn.plain"]);
        let a = cfg[0].auth_for("nqn.auth").expect("auth for nqn.auth");
        assert_eq!(a.hash, Some(HashId::Sha512));
        assert_eq!(a.dhgroup, Some(DhGroup::Ffdhe3072));
        assert_eq!(a.secret, DhchapSecret::parse(good).unwrap());
        assert!(cfg[0].auth_for("nqn.plain").is_none());
        assert!(cfg[0].auth_for("nqn.broken").is_none());
    }

    #[test]
    fn dhchap_options_check_secrets_and_refuse_half_settings() {
        let good = "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:";
        let other = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let args = |s: Option<&str>, c: Option<&str>| DhchapArgs {
            dhchap_secret: s.map(String::from),
            dhchap_ctrl_secret: c.map(String::from),
            ..Default::default()
        };
        assert_eq!(args(None, None).record().unwrap(), None);
        let r = args(Some(good), Some(other)).record().unwrap().unwrap();
        assert_eq!(
            (r.secret.as_str(), r.ctrl_secret.as_deref()),
            (good, Some(other))
        );
        let e = args(Some(&good.replace("Fm2C", "Fm2D")), None)
            .record()
            .unwrap_err()
            .to_string();
        assert!(e.contains("CRC") && !e.contains("Fm2"), "{e}");
        assert!(args(None, Some(other)).record().is_err());
        assert!(args(Some(good), Some(good)).record().is_err());
        let mut a = args(Some(good), None);
        a.dhchap_hash = Some("md5".into());
        assert!(a.record().is_err());
    }

    #[test]
    fn bad_nqns_are_refused_with_the_reason() {
        let e = valid_nqn("subsystem", "iqn.x").unwrap_err().to_string();
        assert!(e.starts_with("invalid subsystem NQN: "), "{e}");
        assert!(e.contains("nqn."), "{e}");
        assert!(valid_nqn("host", "nqn.2014-08.org.nvmexpress:uuid:1").is_ok());
    }
}
