//! Where a cluster is: the `cluster.toml` file a local cluster (`pontoon
//! up`) writes into its directory, and the order in which a client (the
//! `pontoon` command, the C library) looks for one.
//!
//! [`resolve`] tries, in this order: a cluster directory given explicitly
//! (reads `DIR/cluster.toml`), etcd endpoints given explicitly,
//! `$PONTOON_CLUSTER` (a directory), `$PONTOON_ETCD` (comma-separated
//! URLs). The cluster name is, in this order: the one given explicitly,
//! `$PONTOON_CLUSTER_NAME`, the file's, [`DEFAULT_CLUSTER_NAME`].
//!
//! The file holds one `key = "value"` per line (`#` starts a comment line);
//! [`ClusterFile`] reads and writes it.
//!
//! etcd's TLS settings and user ([`EtcdAuth`]) come with the location: a
//! cluster directory's from its file (paths relative to the directory), an
//! endpoint list's from `$PONTOON_ETCD_CA_FILE`, `$PONTOON_ETCD_CERT_FILE`,
//! `$PONTOON_ETCD_KEY_FILE`, `$PONTOON_ETCD_USER`, `$PONTOON_ETCD_PASSWORD`
//! and `$PONTOON_ETCD_PASSWORD_FILE`.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pontoon_cluster::{EtcdAuth, Secret};

/// The cluster name used when none is given.
pub const DEFAULT_CLUSTER_NAME: &str = "pontoon";
/// The file in a cluster directory that says how to reach the cluster.
pub const CLUSTER_FILE: &str = "cluster.toml";

/// Why a cluster could not be located (nothing here connects).
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// The directory has no cluster file.
    #[error("{} does not exist: is `pontoon up --dir {}` running?", path.display(), dir.display())]
    NoClusterFile {
        /// The file looked for.
        path: PathBuf,
        /// The cluster directory.
        dir: PathBuf,
    },
    /// The cluster file exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid cluster file.
    #[error("{0}")]
    Parse(String),
    /// A cluster file with invalid contents.
    #[error("in {}: {msg}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// An endpoint list with no endpoint in it.
    #[error("no etcd endpoint in {0:?}")]
    NoEndpoint(String),
    /// Neither an argument nor the environment names a cluster.
    #[error(
        "no cluster given: set PONTOON_CLUSTER (a `pontoon up` directory) or PONTOON_ETCD (etcd URLs)"
    )]
    NoCluster,
}

/// A resolved cluster address.
#[derive(Clone, Debug)]
pub struct Location {
    /// etcd endpoints.
    pub endpoints: Vec<String>,
    /// Cluster name (the etcd key prefix).
    pub name: String,
    /// The local cluster's directory, when found through one.
    pub dir: Option<PathBuf>,
    /// Its `cluster.toml`, when found through one.
    pub file: Option<ClusterFile>,
    /// etcd's TLS settings and user.
    pub auth: EtcdAuth,
}

/// The etcd TLS settings and user given by the environment
/// (`$PONTOON_ETCD_CA_FILE` and the others the [module](self) names).
pub fn auth_from_env() -> EtcdAuth {
    EtcdAuth {
        ca_file: env("PONTOON_ETCD_CA_FILE").map(PathBuf::from),
        cert_file: env("PONTOON_ETCD_CERT_FILE").map(PathBuf::from),
        key_file: env("PONTOON_ETCD_KEY_FILE").map(PathBuf::from),
        user: env("PONTOON_ETCD_USER"),
        password: env("PONTOON_ETCD_PASSWORD").map(Secret::new),
        password_file: env("PONTOON_ETCD_PASSWORD_FILE").map(PathBuf::from),
    }
}

/// Reads a non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Splits a comma-separated endpoint list.
pub fn split_endpoints(s: &str) -> Result<Vec<String>, LocateError> {
    let eps: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if eps.is_empty() {
        return Err(LocateError::NoEndpoint(s.to_string()));
    }
    Ok(eps)
}

/// Finds the cluster from what the caller was given (`dir`, else `etcd`,
/// a comma-separated URL list), else from the environment, in the order
/// the [module](self) describes; `name` overrides the cluster name.
/// Reads the cluster file but does not connect.
pub fn resolve(
    dir: Option<&Path>,
    etcd: Option<&str>,
    name: Option<&str>,
) -> Result<Location, LocateError> {
    let name_override = name
        .map(str::to_string)
        .or_else(|| env("PONTOON_CLUSTER_NAME"));
    let from_dir = |dir: PathBuf| -> Result<Location, LocateError> {
        let file = ClusterFile::load(&dir)?;
        Ok(Location {
            endpoints: split_endpoints(&file.etcd)?,
            name: name_override
                .clone()
                .unwrap_or_else(|| file.cluster_name.clone()),
            auth: file.etcd_auth.clone().relative_to(&dir),
            dir: Some(dir),
            file: Some(file),
        })
    };
    let from_url = |url: &str| -> Result<Location, LocateError> {
        Ok(Location {
            endpoints: split_endpoints(url)?,
            name: name_override
                .clone()
                .unwrap_or_else(|| DEFAULT_CLUSTER_NAME.to_string()),
            dir: None,
            file: None,
            auth: auth_from_env(),
        })
    };
    if let Some(dir) = dir {
        return from_dir(dir.to_path_buf());
    }
    if let Some(url) = etcd {
        return from_url(url);
    }
    if let Some(dir) = env("PONTOON_CLUSTER") {
        return from_dir(PathBuf::from(dir));
    }
    if let Some(url) = env("PONTOON_ETCD") {
        return from_url(&url);
    }
    Err(LocateError::NoCluster)
}

/// What `pontoon up` writes to `DIR/cluster.toml`: how to reach the
/// cluster, and the settings it was started with (so a restart, and
/// `pontoon osd start`, use the same ones). One `key = "value"` per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFile {
    /// Cluster name (etcd key prefix).
    pub cluster_name: String,
    /// etcd client URL.
    pub etcd: String,
    /// etcd peer port (reused on restart when free).
    pub etcd_peer_port: u16,
    /// OSDs the cluster runs, ids `0..osds`.
    pub osds: u32,
    /// Size of each OSD's device file in bytes.
    pub osd_size: u64,
    /// Shards per OSD (when formatting).
    pub shards: u32,
    /// OSD liveness lease TTL.
    pub lease_ttl: Duration,
    /// How long an OSD may be down before the manager marks it out.
    pub out_after: Duration,
    /// Address the OSDs listen on.
    pub listen: IpAddr,
    /// Host name the OSDs register with.
    pub host: String,
    /// Process id of `pontoon up`.
    pub pid: u32,
    /// The manager's HTTP server (REST API, dashboard, `/metrics`),
    /// `http://ADDR`; absent in files written before it existed.
    pub http: Option<String>,
    /// The REST API token (`Authorization: Bearer TOKEN`); absent in
    /// files written before it existed. A file holding one is written
    /// readable by its owner only.
    pub api_token: Option<String>,
    /// How `pontoon` commands reach etcd: its CA, the client certificate
    /// and key, the admin user and its password file (paths relative to
    /// the directory); empty for a cluster whose etcd asks for nothing.
    /// Keys `etcd_ca_file`, `etcd_cert_file`, `etcd_key_file`,
    /// `etcd_user`, `etcd_password_file`; never a password itself.
    pub etcd_auth: EtcdAuth,
}

impl ClusterFile {
    /// The path of the file in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CLUSTER_FILE)
    }

    /// Reads `dir/cluster.toml`.
    pub fn load(dir: &Path) -> Result<Self, LocateError> {
        let path = Self::path(dir);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                LocateError::NoClusterFile {
                    path: path.clone(),
                    dir: dir.to_path_buf(),
                }
            } else {
                LocateError::Read {
                    path: path.clone(),
                    source: e,
                }
            }
        })?;
        Self::parse(&text).map_err(|e| LocateError::Malformed {
            path,
            msg: e.to_string(),
        })
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, LocateError> {
        let bad = |m: String| LocateError::Parse(m);
        let kv = parse_kv(text).map_err(bad)?;
        let get = |k: &str| -> Result<&str, LocateError> {
            kv.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
                .ok_or_else(|| bad(format!("missing key {k}")))
        };
        let num = |k: &str| -> Result<u64, LocateError> {
            let v = get(k)?;
            v.parse()
                .map_err(|_| bad(format!("{k} = {v:?} is not a number")))
        };
        let dur = |k: &str| -> Result<Duration, LocateError> {
            let v = get(k)?;
            parse_duration(v).map_err(|e| bad(format!("{k}: {e}")))
        };
        Ok(Self {
            cluster_name: get("cluster_name")?.to_string(),
            etcd: get("etcd")?.to_string(),
            etcd_peer_port: u16::try_from(num("etcd_peer_port")?)
                .map_err(|_| bad("etcd_peer_port is not a port".into()))?,
            osds: u32::try_from(num("osds")?).map_err(|_| bad("osds is too large".into()))?,
            osd_size: num("osd_size")?,
            shards: u32::try_from(num("shards")?).map_err(|_| bad("shards is too large".into()))?,
            lease_ttl: dur("lease_ttl")?,
            out_after: dur("out_after")?,
            listen: get("listen")?
                .parse()
                .map_err(|_| bad("listen is not an IP address".into()))?,
            host: get("host")?.to_string(),
            pid: u32::try_from(num("pid")?).map_err(|_| bad("pid is too large".into()))?,
            http: get("http").ok().map(str::to_string),
            api_token: get("api_token").ok().map(str::to_string),
            etcd_auth: EtcdAuth {
                ca_file: get("etcd_ca_file").ok().map(PathBuf::from),
                cert_file: get("etcd_cert_file").ok().map(PathBuf::from),
                key_file: get("etcd_key_file").ok().map(PathBuf::from),
                user: get("etcd_user").ok().map(str::to_string),
                password: None,
                password_file: get("etcd_password_file").ok().map(PathBuf::from),
            },
        })
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut s = String::from(
            "# Written by `pontoon up`: how to reach this cluster.\n\
             # Use it with `pontoon status --cluster DIR` (any cluster command) or PONTOON_CLUSTER=DIR.\n",
        );
        let mut line = |k: &str, v: &str| {
            let _ = writeln!(s, "{k} = \"{}\"", escape(v));
        };
        line("cluster_name", &self.cluster_name);
        line("etcd", &self.etcd);
        line("etcd_peer_port", &self.etcd_peer_port.to_string());
        line("osds", &self.osds.to_string());
        line("osd_size", &self.osd_size.to_string());
        line("shards", &self.shards.to_string());
        line("lease_ttl", &format_duration(self.lease_ttl));
        line("out_after", &format_duration(self.out_after));
        line("listen", &self.listen.to_string());
        line("host", &self.host);
        line("pid", &self.pid.to_string());
        if let Some(http) = &self.http {
            line("http", http);
        }
        if let Some(token) = &self.api_token {
            line("api_token", token);
        }
        let a = &self.etcd_auth;
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        for (k, v) in [
            ("etcd_ca_file", path(&a.ca_file)),
            ("etcd_cert_file", path(&a.cert_file)),
            ("etcd_key_file", path(&a.key_file)),
            ("etcd_user", a.user.clone()),
            ("etcd_password_file", path(&a.password_file)),
        ] {
            if let Some(v) = v {
                line(k, &v);
            }
        }
        s
    }

    /// Writes the file into `dir` atomically (a reader never sees half of it).
    pub fn store(&self, dir: &Path) -> Result<(), LocateError> {
        if self.api_token.is_some() {
            return write_atomic_private(&Self::path(dir), self.render().as_bytes());
        }
        write_atomic(&Self::path(dir), self.render().as_bytes())
    }
}

/// Writes `path` by writing a temporary file beside it and renaming it.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), LocateError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).map_err(|source| LocateError::Write {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| LocateError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// [`write_atomic`], the file readable and writable by its owner only
/// (from its creation on: the data is a secret).
fn write_atomic_private(path: &Path, data: &[u8]) -> Result<(), LocateError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(data))
        .map_err(|source| LocateError::Write {
            path: tmp.clone(),
            source,
        })?;
    std::fs::rename(&tmp, path).map_err(|source| LocateError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Parses `key = "value"` / `key = value` lines; `#` starts a comment line.
fn parse_kv(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: expected key = \"value\"", n + 1))?;
        let k = k.trim();
        let v = v.trim();
        let value = if let Some(inner) = v.strip_prefix('"') {
            let mut s = String::new();
            let mut chars = inner.chars();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some(e @ ('"' | '\\')) => s.push(e),
                        _ => return Err(format!("line {}: bad escape in {k}", n + 1)),
                    },
                    c => s.push(c),
                }
            }
            if !closed {
                return Err(format!("line {}: unterminated string in {k}", n + 1));
            }
            s
        } else {
            v.to_string()
        };
        out.push((k.to_string(), value));
    }
    Ok(out)
}

/// Parses a duration: a number with a unit `ms`, `s`, `m`, `h` or `d`
/// (`500ms`, `3s`, `2m`), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    pontoon_cluster::runtime_config::duration_value(s)
        .ok_or_else(|| format!("invalid duration {s:?}: expected e.g. 500ms, 3s, 2m, 1h or 7d"))
}

/// Formats a duration the way [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterFile {
        ClusterFile {
            cluster_name: "c1".into(),
            etcd: "http://127.0.0.1:2379".into(),
            etcd_peer_port: 2380,
            osds: 3,
            osd_size: 256 << 20,
            shards: 2,
            lease_ttl: Duration::from_secs(3),
            out_after: Duration::from_millis(1500),
            listen: "127.0.0.1".parse().unwrap(),
            host: "my-host".into(),
            pid: 42,
            http: None,
            api_token: None,
            etcd_auth: EtcdAuth::none(),
        }
    }

    #[test]
    fn etcd_credentials_are_paths_relative_to_the_directory() {
        let mut f = sample();
        f.etcd = "https://127.0.0.1:2379".into();
        f.etcd_auth = EtcdAuth {
            ca_file: Some("etcd-pki/ca.pem".into()),
            cert_file: Some("etcd-pki/client.pem".into()),
            key_file: Some("etcd-pki/client.key".into()),
            user: Some("admin".into()),
            password: None,
            password_file: Some("etcd-pki/admin.password".into()),
        };
        let text = f.render();
        assert!(text.contains("etcd_user = \"admin\""), "{text}");
        assert!(!text.contains("password = "), "{text}");
        assert_eq!(ClusterFile::parse(&text).unwrap(), f);
        let dir = tempfile::tempdir().unwrap();
        f.store(dir.path()).unwrap();
        let at = resolve(Some(dir.path()), None, None).unwrap();
        assert_eq!(
            at.auth.ca_file.as_deref(),
            Some(dir.path().join("etcd-pki/ca.pem").as_path())
        );
        assert_eq!(at.auth.user.as_deref(), Some("admin"));
        assert_eq!(
            at.auth.password_file,
            Some(dir.path().join("etcd-pki/admin.password"))
        );
        // A file without them (an older or an insecure cluster): none.
        assert!(
            ClusterFile::parse(&sample().render())
                .unwrap()
                .etcd_auth
                .is_empty()
        );
    }

    #[test]
    fn the_http_address_and_token_are_optional_and_kept_private() {
        let old = sample().render();
        assert!(!old.contains("\nhttp = "), "{old}");
        let mut f = ClusterFile::parse(&old).unwrap();
        assert_eq!((f.http.as_deref(), f.api_token.as_deref()), (None, None));
        f.http = Some("http://127.0.0.1:8080".into());
        f.api_token = Some("ab12".into());
        let text = f.render();
        assert!(text.contains("http = \"http://127.0.0.1:8080\""), "{text}");
        assert!(text.contains("api_token = \"ab12\""), "{text}");
        assert_eq!(ClusterFile::parse(&text).unwrap(), f);
        let dir = tempfile::tempdir().unwrap();
        f.store(dir.path()).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(ClusterFile::path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(ClusterFile::load(dir.path()).unwrap(), f);
    }

    #[test]
    fn cluster_file_round_trips() {
        let f = sample();
        let text = f.render();
        assert!(text.contains("etcd = \"http://127.0.0.1:2379\""), "{text}");
        assert_eq!(ClusterFile::parse(&text).unwrap(), f);
    }

    #[test]
    fn cluster_file_accepts_bare_values_and_comments_and_rejects_junk() {
        let text = sample()
            .render()
            .replace("osds = \"3\"", "osds = 3\n# note");
        assert_eq!(ClusterFile::parse(&text).unwrap().osds, 3);
        let missing = sample().render().replace("etcd = ", "etcdx = ");
        assert!(
            ClusterFile::parse(&missing)
                .unwrap_err()
                .to_string()
                .contains("missing key etcd")
        );
        assert!(ClusterFile::parse("what").is_err());
        assert!(ClusterFile::parse("a = \"open").is_err());
    }

    #[test]
    fn load_tells_a_missing_file_from_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = ClusterFile::load(dir.path()).unwrap_err();
        assert!(matches!(e, LocateError::NoClusterFile { .. }), "{e}");
        assert!(e.to_string().contains("is `pontoon up --dir"), "{e}");
        std::fs::write(dir.path().join(CLUSTER_FILE), "junk").unwrap();
        let e = ClusterFile::load(dir.path()).unwrap_err();
        assert!(matches!(e, LocateError::Malformed { .. }), "{e}");
        sample().store(dir.path()).unwrap();
        assert_eq!(ClusterFile::load(dir.path()).unwrap(), sample());
        let at = resolve(Some(dir.path()), Some("http://ignored:1"), Some("other")).unwrap();
        assert_eq!(at.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(at.name, "other");
        assert_eq!(at.file, Some(sample()));
    }

    #[test]
    fn endpoints_split_on_commas() {
        assert_eq!(
            split_endpoints(" http://a:1, http://b:2 ,").unwrap(),
            ["http://a:1", "http://b:2"]
        );
        assert!(matches!(
            split_endpoints(" , "),
            Err(LocateError::NoEndpoint(_))
        ));
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
