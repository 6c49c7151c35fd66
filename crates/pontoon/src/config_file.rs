//! The node's configuration file, `/etc/pontoon/pontoon.toml`, read by
//! every daemon and by the CLI.
//!
//! Which file: `--config PATH` (any command), else `$PONTOON_CONFIG`, else
//! [`DEFAULT_PATH`]. A file given by flag or environment must exist; the
//! default one may be missing (every setting then has its default).
//!
//! Every setting has a key ([`KEYS`]), an environment variable and, on the
//! commands that use it, a flag. The effective value is, from strongest to
//! weakest: the flag, the environment variable, the file, the built-in
//! default; `pontoon config show` prints each with where it came from.
//!
//! The file is TOML:
//!
//! ```toml
//! cluster_name = "prod"
//! log_format = "json"
//! [etcd]
//! endpoints = ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
//! [osd]
//! listen = "10.0.0.11"
//! shard_ports = "6800-7300"
//! [osd.journal]
//! "/dev/nvme0n1" = "/dev/nvme2n1p1"
//! ```
//!
//! A key the program does not know, or a value it cannot use, is refused
//! with a one-line error naming the file and the line.
//!
//! How a client command finds the cluster ([`locate`]) keeps the order of
//! [`pontoon_client::locate`] (`--cluster DIR`, `--etcd`, `$PONTOON_CLUSTER`,
//! `$PONTOON_ETCD`: a local cluster's `cluster.toml` still wins) and falls
//! back to this file's `etcd.endpoints` and `cluster_name`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Result, anyhow, bail};
use pontoon_client::locate::{self, LocateError, Location};
use serde::Serialize;

/// Where the configuration file is when neither `--config` nor
/// `$PONTOON_CONFIG` names one.
pub const DEFAULT_PATH: &str = "/etc/pontoon/pontoon.toml";
/// The environment variable naming the configuration file.
pub const ENV_CONFIG: &str = "PONTOON_CONFIG";

/// One setting the file, the environment and flags can give.
#[derive(Debug)]
pub struct KeyDef {
    /// The key (`section.name`, or `name` at the top).
    pub name: &'static str,
    /// The environment variable that overrides the file.
    pub env: &'static str,
    /// The built-in default (`None`: unset unless given).
    pub default: Option<&'static str>,
    /// Checks a value; the error says what is wrong with it.
    pub check: fn(&str) -> Result<(), String>,
    /// One line of help (`config show --json` gives it).
    pub help: &'static str,
}

/// Every key of the file except the `[osd.journal]` table (see
/// [`Config::journal`]).
pub const KEYS: &[KeyDef] = &[
    KeyDef {
        name: "cluster_name",
        env: "PONTOON_CLUSTER_NAME",
        default: Some(locate::DEFAULT_CLUSTER_NAME),
        check: check_name,
        help: "the cluster's name, its etcd key prefix (flag --cluster-name)",
    },
    KeyDef {
        name: "log_format",
        env: "PONTOON_LOG_FORMAT",
        default: Some("text"),
        check: check_log_format,
        help: "log lines on stderr: text or json (flag --log-format)",
    },
    KeyDef {
        name: "auth.keyring",
        env: "PONTOON_KEYRING",
        default: None,
        check: check_keyring_path,
        help: "the keyring file of this node's CLI identity; unset: DIR/keys/<name>.keyring of a `pontoon up` cluster (flag --keyring)",
    },
    KeyDef {
        name: "auth.name",
        env: "PONTOON_NAME",
        default: Some(pontoon_cluster::auth::ADMIN_ENTITY),
        check: check_entity,
        help: "the entity the CLI acts as, e.g. client.admin (flag --name)",
    },
    KeyDef {
        name: "etcd.endpoints",
        env: "PONTOON_ETCD",
        default: None,
        check: check_endpoints,
        help: "etcd client URLs, comma-separated or a list (flag --etcd)",
    },
    KeyDef {
        name: "etcd.ca_file",
        env: "PONTOON_ETCD_CA_FILE",
        default: None,
        check: check_path,
        help: "CA (PEM) of etcd's server certificate; set: etcd is reached over TLS, https:// (flag --etcd-ca-file)",
    },
    KeyDef {
        name: "etcd.cert_file",
        env: "PONTOON_ETCD_CERT_FILE",
        default: None,
        check: check_path,
        help: "client certificate (PEM) presented to etcd (flag --etcd-cert-file)",
    },
    KeyDef {
        name: "etcd.key_file",
        env: "PONTOON_ETCD_KEY_FILE",
        default: None,
        check: check_path,
        help: "the client certificate's private key (PEM) (flag --etcd-key-file)",
    },
    KeyDef {
        name: "etcd.user",
        env: "PONTOON_ETCD_USER",
        default: None,
        check: check_etcd_user,
        help: "etcd user (etcd's own authentication) (flag --etcd-user)",
    },
    KeyDef {
        name: "etcd.password_file",
        env: "PONTOON_ETCD_PASSWORD_FILE",
        default: None,
        check: check_path,
        help: "file whose first line is the etcd user's password (flag --etcd-password-file)",
    },
    KeyDef {
        name: "etcd.password",
        env: "PONTOON_ETCD_PASSWORD",
        default: None,
        check: check_password,
        help: "the etcd user's password itself (prefer etcd.password_file); shown redacted",
    },
    KeyDef {
        name: "osd.listen",
        env: "PONTOON_OSD_LISTEN",
        default: Some("127.0.0.1"),
        check: check_ip,
        help: "IP address the OSDs' shards listen on (osd run --listen)",
    },
    KeyDef {
        name: "osd.shard_ports",
        env: "PONTOON_OSD_SHARD_PORTS",
        default: None,
        check: check_port_range,
        help: "TCP ports the shards take, e.g. 6800-7300 (the next free one each); unset: any free port (osd run --shard-ports)",
    },
    KeyDef {
        name: "osd.metrics",
        env: "PONTOON_OSD_METRICS",
        default: Some("127.0.0.1:0"),
        check: check_metrics,
        help: "the OSD's /metrics address, IP:PORT (port 0: any free one) or off (osd run --metrics)",
    },
    KeyDef {
        name: "osd.host",
        env: "PONTOON_OSD_HOST",
        default: None,
        check: check_name,
        help: "host name of the host failure domain; unset: this machine's name (osd run --host)",
    },
    KeyDef {
        name: "osd.lease_ttl",
        env: "PONTOON_OSD_LEASE_TTL",
        default: Some("7s"),
        check: check_lease_ttl,
        help: "liveness lease: how soon a dead OSD is seen down (osd run --lease-ttl)",
    },
    KeyDef {
        name: "mgr.http",
        env: "PONTOON_MGR_HTTP",
        default: Some("127.0.0.1:0"),
        check: check_socket_addr,
        help: "the manager's REST API and dashboard, IP:PORT (mgr --http)",
    },
    KeyDef {
        name: "mgr.metrics",
        env: "PONTOON_MGR_METRICS",
        default: Some("127.0.0.1:0"),
        check: check_metrics,
        help: "the manager's /metrics address, IP:PORT or off (mgr --metrics)",
    },
    KeyDef {
        name: "nbd.listen",
        env: "PONTOON_NBD_LISTEN",
        default: Some("127.0.0.1:10809"),
        check: check_socket_addr,
        help: "the NBD gateway's address (nbd --listen)",
    },
    KeyDef {
        name: "nbd.metrics",
        env: "PONTOON_NBD_METRICS",
        default: Some("127.0.0.1:0"),
        check: check_metrics,
        help: "the NBD gateway's /metrics address, IP:PORT or off (nbd --metrics)",
    },
    KeyDef {
        name: "nbd.tls",
        env: "PONTOON_NBD_TLS",
        default: None,
        check: check_nbd_tls,
        help: "NBD TLS: off, on or require; unset: require with credentials or off loopback, else off (nbd --tls)",
    },
    KeyDef {
        name: "nbd.insecure",
        env: "PONTOON_NBD_INSECURE",
        default: Some("false"),
        check: check_bool,
        help: "allow plain NBD on an address that is not loopback (nbd --insecure)",
    },
    KeyDef {
        name: "nbd.tls_cert",
        env: "PONTOON_NBD_TLS_CERT",
        default: None,
        check: check_path,
        help: "the NBD gateway's certificate chain, PEM (nbd --tls-cert)",
    },
    KeyDef {
        name: "nbd.tls_key",
        env: "PONTOON_NBD_TLS_KEY",
        default: None,
        check: check_path,
        help: "the private key of nbd.tls_cert, PEM (nbd --tls-key)",
    },
    KeyDef {
        name: "nbd.tls_ca",
        env: "PONTOON_NBD_TLS_CA",
        default: None,
        check: check_path,
        help: "CA of NBD client certificates; set: clients must present one, its CN is their identity (nbd --tls-ca)",
    },
    KeyDef {
        name: "nbd.tls_psk_file",
        env: "PONTOON_NBD_TLS_PSK_FILE",
        default: None,
        check: check_path,
        help: "NBD pre-shared keys, username:hexkey lines as psktool writes them (nbd --tls-psk-file)",
    },
    KeyDef {
        name: NBD_EXPORTS_TABLE,
        env: "PONTOON_NBD_EXPORTS",
        default: None,
        check: check_nbd_exports,
        help: "volumes each NBD client identity may see: a table of identity = [volume, \"pool/*\", \"*\"]; as a string ID=V,V;ID=V (nbd --export)",
    },
    KeyDef {
        name: "nvmf.listen",
        env: "PONTOON_NVMF_LISTEN",
        default: Some("127.0.0.1:4420"),
        check: check_socket_addr,
        help: "the NVMe/TCP gateway's address (nvmf --listen)",
    },
    KeyDef {
        name: "nvmf.metrics",
        env: "PONTOON_NVMF_METRICS",
        default: Some("127.0.0.1:0"),
        check: check_metrics,
        help: "the NVMe/TCP gateway's /metrics address, IP:PORT or off (nvmf --metrics)",
    },
];

/// The table of NBD export lists: identity → volumes (`*`, `POOL/*`, names).
pub const NBD_EXPORTS_TABLE: &str = "nbd.exports";

/// The table of write-buffer (journal) devices: data device → journal device.
pub const JOURNAL_TABLE: &str = "osd.journal";

/// Keys whose values are secrets: `config show` prints them redacted.
pub const SECRET_KEYS: &[&str] = &["etcd.password"];

/// What `config show` prints instead of a secret's value.
pub const REDACTED: &str = "(redacted)";

fn key_def(name: &str) -> &'static KeyDef {
    KEYS.iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("unknown configuration key {name}"))
}

/// Where an effective value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// A configuration file (or a local cluster's `cluster.toml`).
    File(PathBuf),
    /// An environment variable.
    Env(String),
    /// A command-line flag.
    Flag(String),
}

impl Source {
    /// `default`, `file`, `env` or `flag`.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::File(_) => "file",
            Source::Env(_) => "env",
            Source::Flag(_) => "flag",
        }
    }

    /// The file, variable or flag (none for a default).
    pub fn origin(&self) -> Option<String> {
        match self {
            Source::Default => None,
            Source::File(p) => Some(p.display().to_string()),
            Source::Env(v) | Source::Flag(v) => Some(v.clone()),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.origin() {
            Some(o) => write!(f, "{} {o}", self.kind()),
            None => f.write_str(self.kind()),
        }
    }
}

/// An effective setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// Its key.
    pub key: String,
    /// Its value (`None`: unset).
    pub value: Option<String>,
    /// Where the value came from.
    pub source: Source,
}

impl Serialize for Setting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let help = KEYS
            .iter()
            .find(|k| k.name == self.key)
            .map_or("write-buffer (journal) device of this data device", |k| {
                k.help
            });
        let mut st = s.serialize_struct("Setting", 5)?;
        st.serialize_field("key", &self.key)?;
        st.serialize_field("value", &self.value)?;
        st.serialize_field("source", self.source.kind())?;
        st.serialize_field("origin", &self.source.origin())?;
        st.serialize_field("help", help)?;
        st.end()
    }
}

/// A value read from the file, with its line (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileValue {
    value: String,
    line: usize,
}

/// The parsed configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSettings {
    values: BTreeMap<String, FileValue>,
    journals: BTreeMap<String, FileValue>,
}

/// The configuration: the file (if any), how it was chosen, and the
/// environment variables of [`KEYS`] as they were at load.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file looked for.
    pub path: PathBuf,
    /// How that path was chosen.
    pub path_source: Source,
    /// The file's settings; `None` when the default file does not exist.
    file: Option<FileSettings>,
    env: BTreeMap<String, String>,
    /// Flags every command takes (`--log-format`): key → (flag, value).
    global_flags: BTreeMap<String, (String, String)>,
}

static GLOBAL: OnceLock<Config> = OnceLock::new();

/// Loads the configuration for this process (`flag`: `--config`;
/// `log_format`: `--log-format`). Call once, before [`get`]; fails on a
/// missing named file or a bad file.
pub fn init(flag: Option<PathBuf>, log_format: Option<String>) -> Result<&'static Config> {
    let mut cfg = Config::load(flag)?;
    if let Some(f) = log_format {
        cfg.global_flags
            .insert("log_format".into(), ("--log-format".into(), f));
    }
    Ok(GLOBAL.get_or_init(|| cfg))
}

/// The process's configuration ([`init`]'s; the default file's, errors
/// ignored, if `init` was not called, as in unit tests).
pub fn get() -> &'static Config {
    GLOBAL.get_or_init(|| {
        Config::load(None)
            .unwrap_or_else(|_| Config::from_parts(DEFAULT_PATH, None, env_snapshot()))
    })
}

/// Reads a non-empty environment variable.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The environment variables of [`KEYS`] that are set.
fn env_snapshot() -> BTreeMap<String, String> {
    KEYS.iter()
        .filter_map(|k| env_var(k.env).map(|v| (k.env.to_string(), v)))
        .collect()
}

impl Config {
    /// Finds and reads the file: `flag`, else `$PONTOON_CONFIG`, else
    /// [`DEFAULT_PATH`] (which may be missing).
    pub fn load(flag: Option<PathBuf>) -> Result<Self> {
        let (path, path_source) = match (flag, env_var(ENV_CONFIG)) {
            (Some(p), _) => (p, Source::Flag("--config".into())),
            (None, Some(p)) => (PathBuf::from(p), Source::Env(ENV_CONFIG.into())),
            (None, None) => (PathBuf::from(DEFAULT_PATH), Source::Default),
        };
        let file = match std::fs::read_to_string(&path) {
            Ok(text) => Some(parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound && path_source == Source::Default =>
            {
                None
            }
            Err(e) => bail!(
                "cannot read the configuration file {} (from {path_source}): {e}",
                path.display()
            ),
        };
        let mut cfg = Self::from_parts(path, None, env_snapshot());
        cfg.file = file;
        cfg.path_source = path_source;
        Ok(cfg)
    }

    /// A configuration from its parts (for tests): the file's path and
    /// settings, and the environment.
    pub fn from_parts(
        path: impl Into<PathBuf>,
        file: Option<FileSettings>,
        env: BTreeMap<String, String>,
    ) -> Self {
        Self {
            path: path.into(),
            path_source: Source::Default,
            file,
            env,
            global_flags: BTreeMap::new(),
        }
    }

    /// Whether a file was read.
    pub fn file_loaded(&self) -> bool {
        self.file.is_some()
    }

    /// The file's value of `key`, if it has one.
    pub fn file_value(&self, key: &str) -> Option<&str> {
        self.file
            .as_ref()
            .and_then(|f| f.values.get(key))
            .map(|v| v.value.as_str())
    }

    /// The effective value of `key`: `flag` (its name and value, if given
    /// on the command line), else the environment, else the file, else
    /// the default. A flag's or variable's value is checked here (the
    /// file's were checked at load).
    pub fn setting(&self, key: &str, flag: Option<(&str, &str)>) -> Result<Setting> {
        let def = key_def(key);
        let setting = |value: &str, source: Source| Setting {
            key: key.to_string(),
            value: Some(value.to_string()),
            source,
        };
        let global = self
            .global_flags
            .get(key)
            .map(|(f, v)| (f.as_str(), v.as_str()));
        if let Some((name, value)) = flag.or(global) {
            (def.check)(value).map_err(|e| anyhow!("{name}: {e}"))?;
            return Ok(setting(value, Source::Flag(name.to_string())));
        }
        if let Some(value) = self.env.get(def.env) {
            (def.check)(value).map_err(|e| anyhow!("${}: {e}", def.env))?;
            return Ok(setting(value, Source::Env(def.env.to_string())));
        }
        if let Some(value) = self.file_value(key) {
            return Ok(setting(value, Source::File(self.path.clone())));
        }
        Ok(Setting {
            key: key.to_string(),
            value: def.default.map(str::to_string),
            source: Source::Default,
        })
    }

    /// The write-buffer (journal) device of the OSD on `device`: `flag`
    /// (`--journal`), else the file's `[osd.journal]` entry for it (the
    /// path as given, or the same file by its canonical path).
    pub fn journal(&self, device: &Path, flag: Option<&Path>) -> Setting {
        let key = format!("{JOURNAL_TABLE}.\"{}\"", device.display());
        if let Some(j) = flag {
            return Setting {
                key,
                value: Some(j.display().to_string()),
                source: Source::Flag("--journal".into()),
            };
        }
        let canon = |p: &Path| p.canonicalize().ok();
        let found = self.file.as_ref().and_then(|f| {
            f.journals.iter().find(|(dev, _)| {
                Path::new(dev.as_str()) == device
                    || canon(Path::new(dev.as_str())).is_some_and(|c| Some(c) == canon(device))
            })
        });
        match found {
            Some((_, v)) => Setting {
                key,
                value: Some(v.value.clone()),
                source: Source::File(self.path.clone()),
            },
            None => Setting {
                key,
                value: None,
                source: Source::Default,
            },
        }
    }

    /// Every setting, for `config show`: [`KEYS`] in order (with the flags
    /// given in `flags`, key → (flag, value)), then the file's journals.
    pub fn all(&self, flags: &BTreeMap<&str, (&str, String)>) -> Result<Vec<Setting>> {
        let mut out = Vec::new();
        for k in KEYS {
            let flag = flags.get(k.name).map(|(f, v)| (*f, v.as_str()));
            let mut s = self.setting(k.name, flag)?;
            if SECRET_KEYS.contains(&k.name) && s.value.is_some() {
                s.value = Some(REDACTED.to_string());
            }
            out.push(s);
        }
        if let Some(f) = &self.file {
            for (dev, j) in &f.journals {
                out.push(Setting {
                    key: format!("{JOURNAL_TABLE}.\"{dev}\""),
                    value: Some(j.value.clone()),
                    source: Source::File(self.path.clone()),
                });
            }
        }
        Ok(out)
    }
}

/// The effective value of `key` in the process's configuration (see
/// [`Config::setting`]); `flag` is the flag's name and its value if given.
pub fn value(key: &str, flag_name: &str, flag: Option<&str>) -> Result<Option<String>> {
    Ok(get().setting(key, flag.map(|v| (flag_name, v)))?.value)
}

/// Like [`value`], for a key that must be set: the error names the flag,
/// the variable and the file key.
pub fn required(key: &str, flag_name: &str, flag: Option<&str>) -> Result<String> {
    value(key, flag_name, flag)?.ok_or_else(|| {
        let def = key_def(key);
        let cfg = get();
        anyhow!(
            "no {key} given: pass {flag_name}, set ${} or set {key} in {}",
            def.env,
            cfg.path.display()
        )
    })
}

/// An `IP:PORT` setting (`key`, a key with a default): the flag, else
/// the environment, the file, the default.
pub fn socket_addr(key: &str, flag_name: &str, flag: Option<SocketAddr>) -> Result<SocketAddr> {
    let flag = flag.map(|a| a.to_string());
    let v = required(key, flag_name, flag.as_deref())?;
    v.parse()
        .map_err(|_| anyhow!("{key}: {v:?} is not an IP:PORT address"))
}

/// A `/metrics` address setting (`IP:PORT` or `off`, `None` for off):
/// `--metrics`, else the environment, the file, the default.
pub fn metrics_addr(key: &str, flag: Option<&str>) -> Result<Option<SocketAddr>> {
    let v = required(key, "--metrics", flag)?;
    pontoon_metrics::parse_metrics_addr(&v).map_err(|e| anyhow!("{key}: {e}"))
}

/// Finds the cluster for a client command: [`locate::resolve`]'s order
/// (`dir`, `etcd`, `$PONTOON_CLUSTER`, `$PONTOON_ETCD`), then the
/// configuration's `etcd.endpoints`. The name is `name`, else
/// `$PONTOON_CLUSTER_NAME`, else a local cluster's `cluster.toml`, else
/// the configuration's `cluster_name`, else the default.
pub fn locate(
    cfg: &Config,
    dir: Option<&Path>,
    etcd: Option<&str>,
    name: Option<&str>,
) -> Result<Location, LocateError> {
    let name_given = name.is_some() || env_var("PONTOON_CLUSTER_NAME").is_some();
    let from_file = |key: &str| cfg.file_value(key).map(str::to_string);
    let file_auth = pontoon_cluster::EtcdAuth {
        ca_file: from_file("etcd.ca_file").map(PathBuf::from),
        cert_file: from_file("etcd.cert_file").map(PathBuf::from),
        key_file: from_file("etcd.key_file").map(PathBuf::from),
        user: from_file("etcd.user"),
        password: from_file("etcd.password").map(pontoon_cluster::Secret::new),
        password_file: from_file("etcd.password_file").map(PathBuf::from),
    };
    match locate::resolve(dir, etcd, name) {
        Ok(mut loc) => {
            // A local cluster's directory brings its own credentials; an
            // endpoint list takes the environment's, then the file's.
            if loc.dir.is_none() {
                loc.auth = loc.auth.or(file_auth);
            }
            if loc.dir.is_none()
                && !name_given
                && let Some(n) = cfg.file_value("cluster_name")
            {
                loc.name = n.to_string();
            }
            Ok(loc)
        }
        Err(LocateError::NoCluster) => match cfg.file_value("etcd.endpoints") {
            Some(eps) => Ok(Location {
                endpoints: locate::split_endpoints(eps)?,
                name: name
                    .map(str::to_string)
                    .or_else(|| env_var("PONTOON_CLUSTER_NAME"))
                    .or_else(|| cfg.file_value("cluster_name").map(str::to_string))
                    .unwrap_or_else(|| locate::DEFAULT_CLUSTER_NAME.to_string()),
                dir: None,
                file: None,
                auth: locate::auth_from_env().or(file_auth),
            }),
            None => Err(LocateError::NoCluster),
        },
        Err(e) => Err(e),
    }
}

/// What `pontoon osd run` was given on its command line for the settings
/// the configuration can also give.
#[derive(Debug)]
pub struct OsdRunFlags<'a> {
    /// The data device (`--device`): picks its `[osd.journal]` entry.
    pub device: &'a Path,
    /// `--etcd`.
    pub etcd: Option<&'a str>,
    /// `--cluster-name`.
    pub cluster_name: Option<&'a str>,
    /// `--listen`.
    pub listen: Option<IpAddr>,
    /// `--host`.
    pub host: Option<&'a str>,
    /// `--lease-ttl`.
    pub lease_ttl: Option<&'a str>,
    /// `--metrics`.
    pub metrics: Option<&'a str>,
    /// `--shard-ports`.
    pub shard_ports: Option<&'a str>,
    /// `--journal`.
    pub journal: Option<&'a Path>,
    /// The `--etcd-*` flags.
    pub etcd_auth: EtcdAuthFlags<'a>,
}

/// The effective settings of `pontoon osd run`.
#[derive(Debug)]
pub struct OsdRunSettings {
    /// etcd endpoints.
    pub etcd: Vec<String>,
    /// Cluster name.
    pub cluster_name: String,
    /// Address the shards listen on.
    pub listen: IpAddr,
    /// Host name (`None`: this machine's).
    pub host: Option<String>,
    /// Liveness lease TTL.
    pub lease_ttl: std::time::Duration,
    /// `/metrics` address (`None`: off).
    pub metrics: Option<SocketAddr>,
    /// Shard port range.
    pub shard_ports: Option<RangeInclusive<u16>>,
    /// Write-buffer (journal) device.
    pub journal: Option<PathBuf>,
    /// etcd's TLS settings and user.
    pub etcd_auth: pontoon_cluster::EtcdAuth,
}

/// Resolves `osd run`'s settings: flags, then the environment, the file,
/// the defaults.
pub fn osd_run(f: &OsdRunFlags<'_>) -> Result<OsdRunSettings> {
    let listen = f.listen.map(|l| l.to_string());
    let val = |key: &str, flag: &str, v: Option<&str>| value(key, flag, v);
    let must = |v: Option<String>| v.expect("a key with a default");
    Ok(OsdRunSettings {
        etcd: locate::split_endpoints(&required("etcd.endpoints", "--etcd", f.etcd)?)?,
        cluster_name: must(val("cluster_name", "--cluster-name", f.cluster_name)?),
        listen: must(val("osd.listen", "--listen", listen.as_deref())?)
            .parse()
            .map_err(|_| anyhow!("osd.listen: not an IP address"))?,
        host: val("osd.host", "--host", f.host)?,
        lease_ttl: locate::parse_duration(&must(val("osd.lease_ttl", "--lease-ttl", f.lease_ttl)?))
            .map_err(|e| anyhow!("osd.lease_ttl: {e}"))?,
        metrics: pontoon_metrics::parse_metrics_addr(&must(val(
            "osd.metrics",
            "--metrics",
            f.metrics,
        )?))
        .map_err(|e| anyhow!("osd.metrics: {e}"))?,
        shard_ports: val("osd.shard_ports", "--shard-ports", f.shard_ports)?
            .map(|r| parse_port_range(&r).map_err(|e| anyhow!("osd.shard_ports: {e}")))
            .transpose()?,
        journal: get().journal(f.device, f.journal).value.map(PathBuf::from),
        etcd_auth: etcd_auth(&f.etcd_auth)?,
    })
}

/// Parses a port range `A-B` (or one port `A`), ports 1 to 65535.
pub fn parse_port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let bad = || format!("invalid port range {s:?}: expected e.g. 6800-7300");
    let (a, b) = s.trim().split_once('-').unwrap_or((s.trim(), s.trim()));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || b < a {
        return Err(bad());
    }
    Ok(a..=b)
}

fn check_keyring_path(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        Err("expected a keyring file path".into())
    } else {
        Ok(())
    }
}

fn check_entity(v: &str) -> Result<(), String> {
    pontoon_cluster::auth::EntityName::parse(v)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn check_name(v: &str) -> Result<(), String> {
    if pontoon_cluster::is_valid_name(v) {
        Ok(())
    } else {
        Err(format!("{v:?} must be 1-128 characters of [A-Za-z0-9._-]"))
    }
}

fn check_log_format(v: &str) -> Result<(), String> {
    match v {
        "text" | "json" => Ok(()),
        _ => Err(format!("log format {v:?} must be text or json")),
    }
}

fn check_endpoints(v: &str) -> Result<(), String> {
    let eps = locate::split_endpoints(v).map_err(|e| e.to_string())?;
    for e in eps {
        if e.contains(char::is_whitespace) {
            return Err(format!("etcd endpoint {e:?} contains a space"));
        }
    }
    Ok(())
}

fn check_nbd_tls(v: &str) -> Result<(), String> {
    v.parse::<pontoon_nbd::TlsMode>().map(|_| ())
}

fn check_bool(v: &str) -> Result<(), String> {
    match v {
        "true" | "false" => Ok(()),
        _ => Err(format!("{v:?}: expected true or false")),
    }
}

fn check_nbd_exports(v: &str) -> Result<(), String> {
    pontoon_nbd::ExportAccess::parse(v, None).map(|_| ())
}

fn check_path(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        Err("expected a file path".into())
    } else {
        Ok(())
    }
}

fn check_etcd_user(v: &str) -> Result<(), String> {
    if v.is_empty() || v.contains(char::is_whitespace) {
        Err(format!("etcd user {v:?} must be a name without spaces"))
    } else {
        Ok(())
    }
}

fn check_password(v: &str) -> Result<(), String> {
    if v.is_empty() || v.contains('\n') {
        // Never echo the value: it is a secret.
        Err("the etcd password must be one non-empty line".into())
    } else {
        Ok(())
    }
}

/// The `--etcd-*` flags a command was given for etcd's TLS settings and
/// user (see [`etcd_auth`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct EtcdAuthFlags<'a> {
    /// `--etcd-ca-file`.
    pub ca_file: Option<&'a Path>,
    /// `--etcd-cert-file`.
    pub cert_file: Option<&'a Path>,
    /// `--etcd-key-file`.
    pub key_file: Option<&'a Path>,
    /// `--etcd-user`.
    pub user: Option<&'a str>,
    /// `--etcd-password-file`.
    pub password_file: Option<&'a Path>,
}

impl EtcdAuthFlags<'_> {
    /// The flags given, as settings (unset fields stay unset).
    pub fn given(&self) -> pontoon_cluster::EtcdAuth {
        pontoon_cluster::EtcdAuth {
            ca_file: self.ca_file.map(Path::to_path_buf),
            cert_file: self.cert_file.map(Path::to_path_buf),
            key_file: self.key_file.map(Path::to_path_buf),
            user: self.user.map(str::to_string),
            password: None,
            password_file: self.password_file.map(Path::to_path_buf),
        }
    }
}

/// etcd's TLS settings and user for a daemon or a command that reaches
/// etcd by its endpoints: each `etcd.*` key from its flag, else the
/// environment, the file. Checked (a certificate needs its key, a user a
/// password), not read.
pub fn etcd_auth(f: &EtcdAuthFlags<'_>) -> Result<pontoon_cluster::EtcdAuth> {
    let path = |key: &str, flag: &str, v: Option<&Path>| -> Result<Option<PathBuf>> {
        let v = v.map(|p| p.display().to_string());
        Ok(value(key, flag, v.as_deref())?.map(PathBuf::from))
    };
    let auth = pontoon_cluster::EtcdAuth {
        ca_file: path("etcd.ca_file", "--etcd-ca-file", f.ca_file)?,
        cert_file: path("etcd.cert_file", "--etcd-cert-file", f.cert_file)?,
        key_file: path("etcd.key_file", "--etcd-key-file", f.key_file)?,
        user: value("etcd.user", "--etcd-user", f.user)?,
        password: value("etcd.password", "--etcd-password", None)?
            .map(pontoon_cluster::Secret::new),
        password_file: path(
            "etcd.password_file",
            "--etcd-password-file",
            f.password_file,
        )?,
    };
    auth.check().map_err(|e| anyhow!("{e}"))?;
    Ok(auth)
}

fn check_ip(v: &str) -> Result<(), String> {
    v.parse::<IpAddr>()
        .map(|_| ())
        .map_err(|_| format!("{v:?} is not an IP address"))
}

fn check_socket_addr(v: &str) -> Result<(), String> {
    v.parse::<SocketAddr>()
        .map(|_| ())
        .map_err(|_| format!("{v:?} is not an IP:PORT address"))
}

fn check_metrics(v: &str) -> Result<(), String> {
    pontoon_metrics::parse_metrics_addr(v).map(|_| ())
}

fn check_port_range(v: &str) -> Result<(), String> {
    parse_port_range(v).map(|_| ())
}

fn check_lease_ttl(v: &str) -> Result<(), String> {
    let d = locate::parse_duration(v)?;
    if d < std::time::Duration::from_secs(1) {
        return Err("the lease TTL must be at least 1s".into());
    }
    Ok(())
}

/// `[nbd.exports]` (identity = ["vol", "pool/*"] or one string) in the
/// `ID=V,V;ID=V` form the flag and the environment variable take.
fn nbd_exports_table(text: &str, t: &toml::de::DeTable<'_>) -> Result<String, String> {
    use toml::de::DeValue;
    let mut entries = Vec::new();
    for (id, rules) in t.iter() {
        let line = line_of(text, id.span().start);
        let bad = || {
            format!(
                "line {line}: {NBD_EXPORTS_TABLE}.{}: expected a list of volume names, \"POOL/*\" or \"*\"",
                id.get_ref()
            )
        };
        let mut list = Vec::new();
        match rules.get_ref() {
            DeValue::String(s) => list.push(s.to_string()),
            DeValue::Array(a) => {
                for item in a.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => list.push(s.to_string()),
                        _ => return Err(bad()),
                    }
                }
            }
            _ => return Err(bad()),
        }
        if list.iter().any(|r| r.contains([',', ';', '='])) {
            return Err(bad());
        }
        entries.push(format!("{}={}", id.get_ref(), list.join(",")));
    }
    Ok(entries.join(";"))
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at.min(text.len()))
        .map_or(1, |t| t.bytes().filter(|b| *b == b'\n').count() + 1)
}

/// Parses the file's text; the error is one line, `line N: what`.
pub fn parse(text: &str) -> Result<FileSettings, String> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
        format!("line {line}: {msg}")
    })?;
    let mut out = FileSettings::default();
    // A scalar (or a list of strings, for endpoints) as the string the
    // command line would take.
    let scalar = |key: &str, v: &DeValue<'_>, line: usize| -> Result<String, String> {
        match v {
            DeValue::String(s) => Ok(s.to_string()),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .map(|n| n.to_string())
                .map_err(|_| format!("line {line}: {key}: integer out of range")),
            DeValue::Float(f) => Ok(f.as_str().to_string()),
            DeValue::Boolean(b) => Ok(b.to_string()),
            DeValue::Array(a) if key == "etcd.endpoints" => {
                let mut items = Vec::new();
                for item in a.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => items.push(s.to_string()),
                        _ => return Err(format!("line {line}: {key}: expected a list of URLs")),
                    }
                }
                Ok(items.join(","))
            }
            _ => Err(format!("line {line}: {key}: expected a string")),
        }
    };
    fn walk<'a>(
        text: &str,
        prefix: &str,
        table: &'a DeTable<'a>,
        out: &mut Vec<(String, usize, &'a DeValue<'a>)>,
    ) {
        for (k, v) in table.iter() {
            let key = if prefix.is_empty() {
                k.get_ref().to_string()
            } else {
                format!("{prefix}.{}", k.get_ref())
            };
            let line = line_of(text, k.span().start);
            match v.get_ref() {
                DeValue::Table(t) if key != JOURNAL_TABLE && key != NBD_EXPORTS_TABLE => {
                    walk(text, &key, t, out)
                }
                other => out.push((key, line, other)),
            }
        }
    }
    let mut flat = Vec::new();
    walk(text, "", doc.get_ref(), &mut flat);
    for (key, line, v) in flat {
        if key == JOURNAL_TABLE {
            let DeValue::Table(t) = v else {
                return Err(format!(
                    "line {line}: {JOURNAL_TABLE} must be a table of \"data device\" = \"journal device\""
                ));
            };
            for (dev, j) in t.iter() {
                let jline = line_of(text, dev.span().start);
                let DeValue::String(path) = j.get_ref() else {
                    return Err(format!(
                        "line {jline}: {JOURNAL_TABLE}: the journal of {} must be a path string",
                        dev.get_ref()
                    ));
                };
                if path.is_empty() || dev.get_ref().is_empty() {
                    return Err(format!("line {jline}: {JOURNAL_TABLE}: empty device path"));
                }
                out.journals.insert(
                    dev.get_ref().to_string(),
                    FileValue {
                        value: path.to_string(),
                        line: jline,
                    },
                );
            }
            continue;
        }
        if key == NBD_EXPORTS_TABLE
            && let DeValue::Table(t) = v
        {
            let value = nbd_exports_table(text, t)?;
            check_nbd_exports(&value).map_err(|e| format!("line {line}: {key}: {e}"))?;
            out.values.insert(key, FileValue { value, line });
            continue;
        }
        let Some(def) = KEYS.iter().find(|k| k.name == key) else {
            let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
            return Err(format!(
                "line {line}: unknown key {key} (known: {}, {JOURNAL_TABLE})",
                known.join(", ")
            ));
        };
        let value = scalar(&key, v, line)?;
        (def.check)(&value).map_err(|e| format!("line {line}: {key}: {e}"))?;
        out.values.insert(key, FileValue { value, line });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const FILE: &str = r#"
# a comment
cluster_name = "prod"
log_format = "json"

[etcd]
endpoints = ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]

[osd]
listen = "10.0.0.11"
shard_ports = "6800-7300"

[osd.journal]
"/dev/nvme0n1" = "/dev/nvme2n1p1"

[nbd]
listen = "0.0.0.0:10809"
"#;

    #[test]
    fn the_file_parses_into_keys() {
        let f = parse(FILE).unwrap();
        let cfg = Config::from_parts("/etc/p.toml", Some(f), env(&[]));
        assert_eq!(cfg.file_value("cluster_name"), Some("prod"));
        assert_eq!(
            cfg.file_value("etcd.endpoints"),
            Some("http://10.0.0.1:2379,http://10.0.0.2:2379")
        );
        assert_eq!(cfg.file_value("osd.shard_ports"), Some("6800-7300"));
        let j = cfg.journal(Path::new("/dev/nvme0n1"), None);
        assert_eq!(j.value.as_deref(), Some("/dev/nvme2n1p1"));
        assert_eq!(j.source, Source::File("/etc/p.toml".into()));
        assert_eq!(cfg.journal(Path::new("/dev/sda"), None).value, None);
    }

    #[test]
    fn flag_beats_env_beats_file_beats_default() {
        let f = parse(FILE).unwrap();
        let cfg = Config::from_parts(
            "/etc/p.toml",
            Some(f),
            env(&[("PONTOON_OSD_LISTEN", "10.0.0.12")]),
        );
        let s = cfg
            .setting("osd.listen", Some(("--listen", "10.0.0.13")))
            .unwrap();
        assert_eq!(s.value.as_deref(), Some("10.0.0.13"));
        assert_eq!(s.source.to_string(), "flag --listen");
        let s = cfg.setting("osd.listen", None).unwrap();
        assert_eq!(s.value.as_deref(), Some("10.0.0.12"));
        assert_eq!(s.source.to_string(), "env PONTOON_OSD_LISTEN");
        let s = cfg.setting("cluster_name", None).unwrap();
        assert_eq!(s.value.as_deref(), Some("prod"));
        assert_eq!(s.source.to_string(), "file /etc/p.toml");
        let s = cfg.setting("mgr.http", None).unwrap();
        assert_eq!(s.value.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(s.source.to_string(), "default");
        let s = cfg.setting("osd.host", None).unwrap();
        assert_eq!((s.value, s.source), (None, Source::Default));
    }

    #[test]
    fn bad_values_name_their_source() {
        let cfg = Config::from_parts("/x", None, env(&[("PONTOON_OSD_LISTEN", "nowhere")]));
        let e = cfg.setting("osd.listen", None).unwrap_err().to_string();
        assert!(
            e.contains("$PONTOON_OSD_LISTEN") && e.contains("not an IP"),
            "{e}"
        );
        let e = cfg
            .setting("osd.shard_ports", Some(("--shard-ports", "9-1")))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--shard-ports: invalid port range"), "{e}");
    }

    #[test]
    fn errors_are_one_line_with_the_line_number() {
        for (text, want) in [
            (
                "cluster_name = \"a\"\n\n[osd]\nlisten = 10.0.0.1\n",
                "line 4:",
            ),
            (
                "cluster_name = \"a\"\ncolour = \"blue\"\n",
                "line 2: unknown key colour",
            ),
            (
                "[osd]\nshard_ports = \"7300-6800\"\n",
                "line 2: osd.shard_ports: invalid port range",
            ),
            ("[mgr]\n\nhttp = \"localhost\"\n", "line 3: mgr.http"),
            ("log_format = \"xml\"\n", "line 1: log_format"),
            (
                "[etcd]\nca_file = \"\"\n",
                "line 2: etcd.ca_file: expected a file path",
            ),
            ("[etcd]\nuser = \"a b\"\n", "line 2: etcd.user"),
            ("[osd.journal]\n\"/dev/a\" = 3\n", "line 2: osd.journal"),
            ("a = \"unterminated\n", "line 1:"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: {e}");
        }
    }

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("6800-7300").unwrap(), 6800..=7300);
        assert_eq!(parse_port_range("6800").unwrap(), 6800..=6800);
        assert!(parse_port_range("0-10").is_err());
        assert!(parse_port_range("10-70000").is_err());
        assert!(parse_port_range("x").is_err());
    }

    #[test]
    fn the_packaged_file_parses_and_names_every_key() {
        let text = include_str!("../../../packaging/pontoon.toml");
        assert_eq!(parse(text).unwrap(), FileSettings::default());
        for k in KEYS {
            let (_, name) = k.name.split_once('.').unwrap_or(("", k.name));
            assert!(text.contains(&format!("#{name} = ")), "{}", k.name);
            assert!(text.contains(k.env), "{}", k.env);
        }
        // Every commented-out `key = value` line is valid once uncommented.
        let live: String = text
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(rest) if rest.contains(" = ") && !rest.starts_with(' ') => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let f = parse(&live).unwrap_or_else(|e| panic!("{e}\n{live}"));
        assert!(f.values.contains_key("osd.shard_ports"), "{live}");
        assert!(f.values.contains_key("etcd.password_file"), "{live}");
    }

    #[test]
    fn etcd_credentials_parse_and_the_password_is_shown_redacted() {
        let text = "[etcd]\nendpoints = [\"https://10.0.0.1:2379\"]\nca_file = \"/etc/pontoon/etcd/ca.pem\"\n\
                    cert_file = \"/etc/pontoon/etcd/client.pem\"\nkey_file = \"/etc/pontoon/etcd/client.key\"\n\
                    user = \"osd\"\npassword_file = \"/etc/pontoon/etcd/osd.password\"\n";
        let cfg = Config::from_parts(
            "/etc/p.toml",
            Some(parse(text).unwrap()),
            env(&[("PONTOON_ETCD_PASSWORD", "hunter2-inline")]),
        );
        assert_eq!(cfg.file_value("etcd.user"), Some("osd"));
        assert_eq!(
            cfg.file_value("etcd.ca_file"),
            Some("/etc/pontoon/etcd/ca.pem")
        );
        // A flag beats the file for each key.
        let s = cfg
            .setting("etcd.user", Some(("--etcd-user", "admin")))
            .unwrap();
        assert_eq!(
            (s.value.as_deref(), s.source.to_string().as_str()),
            (Some("admin"), "flag --etcd-user")
        );
        let all = cfg.all(&BTreeMap::new()).unwrap();
        let pw = all.iter().find(|s| s.key == "etcd.password").unwrap();
        assert_eq!(pw.value.as_deref(), Some(REDACTED));
        assert_eq!(pw.source.to_string(), "env PONTOON_ETCD_PASSWORD");
        let shown = serde_json::to_string(&all).unwrap();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("/etc/pontoon/etcd/osd.password"), "{shown}");
        // The file's credentials come with its endpoints.
        let loc = locate(&cfg, None, None, None);
        if std::env::var_os("PONTOON_CLUSTER").is_none()
            && std::env::var_os("PONTOON_ETCD").is_none()
        {
            let loc = loc.unwrap();
            assert_eq!(loc.auth.user.as_deref(), Some("osd"));
            assert_eq!(
                loc.auth.password_file.as_deref(),
                Some(Path::new("/etc/pontoon/etcd/osd.password"))
            );
        }
        // A bad password is refused without echoing it.
        let e = parse("[etcd]\npassword = \"\"\n").unwrap_err();
        assert!(e.contains("etcd.password"), "{e}");
    }

    #[test]
    fn nbd_tls_keys_and_the_exports_table_parse() {
        let f = parse(
            "[nbd]\ntls = \"require\"\ntls_psk_file = \"/etc/pontoon/nbd/keys.psk\"\n\
             [nbd.exports]\nalice = [\"vm1\", \"fast/*\"]\n\"*\" = \"shared\"\n",
        )
        .unwrap();
        let cfg = Config::from_parts("/x.toml", Some(f), BTreeMap::new());
        assert_eq!(cfg.file_value("nbd.tls"), Some("require"));
        assert_eq!(
            cfg.file_value(NBD_EXPORTS_TABLE),
            Some("*=shared;alice=vm1,fast/*")
        );
        for bad in [
            "[nbd]\ntls = \"maybe\"\n",
            "[nbd.exports]\nalice = [\"a b\"]\n",
            "[nbd.exports]\nalice = [1]\n",
            "[nbd.exports]\n\"al ice\" = [\"v\"]\n",
            "[nbd.exports]\nalice = [\"v;bob=w\"]\n",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with("line "), "{bad:?}: {e}");
        }
    }
}
