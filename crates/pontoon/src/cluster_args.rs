//! How every client command finds its cluster, the `cluster.toml` file a
//! local cluster (`pontoon up`) writes, and the argument parsers the
//! commands share.
//!
//! A command finds the cluster, in this order, through `--cluster DIR`
//! (reads `DIR/cluster.toml`), `--etcd URL` (with `--cluster-name`, default
//! `pontoon`), `$PONTOON_CLUSTER` (a directory) or `$PONTOON_ETCD` (a URL).
//! `--cluster-name` / `$PONTOON_CLUSTER_NAME` override the file's name.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use pontoon_cluster::MapStore;

/// The cluster name used when none is given.
pub const DEFAULT_CLUSTER_NAME: &str = "pontoon";
/// The file in a cluster directory that says how to reach the cluster.
pub const CLUSTER_FILE: &str = "cluster.toml";

/// Where a client command finds the cluster. Flatten into any command that
/// talks to one; the flags are global within that command's subtree.
#[derive(Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Directory of a local cluster started by `pontoon up`: reads
    /// DIR/cluster.toml [env: PONTOON_CLUSTER]
    #[arg(long, global = true, value_name = "DIR")]
    pub cluster: Option<PathBuf>,
    /// etcd endpoint(s), comma-separated, e.g. http://127.0.0.1:2379
    /// [env: PONTOON_ETCD]
    #[arg(long, global = true, value_name = "URL")]
    pub etcd: Option<String>,
    /// Cluster name, the etcd key prefix (default: from cluster.toml, else
    /// "pontoon") [env: PONTOON_CLUSTER_NAME]
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster_name: Option<String>,
}

/// A resolved cluster address.
#[derive(Clone, Debug)]
pub struct Target {
    /// etcd endpoints.
    pub endpoints: Vec<String>,
    /// Cluster name.
    pub name: String,
    /// The local cluster's directory, when found through one.
    pub dir: Option<PathBuf>,
    /// Its `cluster.toml`, when found through one.
    pub file: Option<ClusterFile>,
}

/// Reads a non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Splits a comma-separated endpoint list.
pub fn split_endpoints(s: &str) -> Result<Vec<String>> {
    let eps: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if eps.is_empty() {
        bail!("no etcd endpoint in {s:?}");
    }
    Ok(eps)
}

impl ClusterArgs {
    /// Resolves where the cluster is, without connecting.
    pub fn resolve(&self) -> Result<Target> {
        let name_override = self
            .cluster_name
            .clone()
            .or_else(|| env("PONTOON_CLUSTER_NAME"));
        let from_dir = |dir: PathBuf| -> Result<Target> {
            let file = ClusterFile::load(&dir)?;
            Ok(Target {
                endpoints: split_endpoints(&file.etcd)?,
                name: name_override
                    .clone()
                    .unwrap_or_else(|| file.cluster_name.clone()),
                dir: Some(dir),
                file: Some(file),
            })
        };
        let from_url = |url: &str| -> Result<Target> {
            Ok(Target {
                endpoints: split_endpoints(url)?,
                name: name_override
                    .clone()
                    .unwrap_or_else(|| DEFAULT_CLUSTER_NAME.to_string()),
                dir: None,
                file: None,
            })
        };
        if let Some(dir) = &self.cluster {
            return from_dir(dir.clone());
        }
        if let Some(url) = &self.etcd {
            return from_url(url);
        }
        if let Some(dir) = env("PONTOON_CLUSTER") {
            return from_dir(PathBuf::from(dir));
        }
        if let Some(url) = env("PONTOON_ETCD") {
            return from_url(&url);
        }
        bail!(
            "no cluster given: pass --cluster DIR (a `pontoon up` directory) or --etcd URL, \
             or set PONTOON_CLUSTER / PONTOON_ETCD"
        )
    }

    /// Resolves the cluster and connects to its etcd (bounded by the
    /// cluster crate's connect timeout).
    pub async fn connect(&self) -> Result<(MapStore, Target)> {
        let target = self.resolve()?;
        let store = MapStore::connect(&target.endpoints, &target.name)
            .await
            .map_err(|e| match &target.dir {
                Some(dir) => anyhow!("{e} (is `pontoon up --dir {}` running?)", dir.display()),
                None => anyhow!("{e}"),
            })?;
        Ok((store, target))
    }
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
}

impl ClusterFile {
    /// The path of the file in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(CLUSTER_FILE)
    }

    /// Reads `dir/cluster.toml`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = Self::path(dir);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow!(
                    "{} does not exist: is `pontoon up --dir {}` running?",
                    path.display(),
                    dir.display()
                )
            } else {
                anyhow!("cannot read {}: {e}", path.display())
            }
        })?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self> {
        let kv = parse_kv(text)?;
        let get = |k: &str| -> Result<&str> {
            kv.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
                .ok_or_else(|| anyhow!("missing key {k}"))
        };
        let num = |k: &str| -> Result<u64> {
            let v = get(k)?;
            v.parse()
                .map_err(|_| anyhow!("{k} = {v:?} is not a number"))
        };
        let dur = |k: &str| -> Result<Duration> {
            let v = get(k)?;
            parse_duration(v).map_err(|e| anyhow!("{k}: {e}"))
        };
        Ok(Self {
            cluster_name: get("cluster_name")?.to_string(),
            etcd: get("etcd")?.to_string(),
            etcd_peer_port: u16::try_from(num("etcd_peer_port")?)
                .map_err(|_| anyhow!("etcd_peer_port is not a port"))?,
            osds: u32::try_from(num("osds")?).map_err(|_| anyhow!("osds is too large"))?,
            osd_size: num("osd_size")?,
            shards: u32::try_from(num("shards")?).map_err(|_| anyhow!("shards is too large"))?,
            lease_ttl: dur("lease_ttl")?,
            out_after: dur("out_after")?,
            listen: get("listen")?
                .parse()
                .map_err(|_| anyhow!("listen is not an IP address"))?,
            host: get("host")?.to_string(),
            pid: u32::try_from(num("pid")?).map_err(|_| anyhow!("pid is too large"))?,
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
        s
    }

    /// Writes the file into `dir` atomically (a reader never sees half of it).
    pub fn store(&self, dir: &Path) -> Result<()> {
        write_atomic(&Self::path(dir), self.render().as_bytes())
    }
}

/// Writes `path` by writing a temporary file beside it and renaming it.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Parses `key = "value"` / `key = value` lines; `#` starts a comment line.
fn parse_kv(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| anyhow!("line {}: expected key = \"value\"", n + 1))?;
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
                        _ => bail!("line {}: bad escape in {k}", n + 1),
                    },
                    c => s.push(c),
                }
            }
            if !closed {
                bail!("line {}: unterminated string in {k}", n + 1);
            }
            s
        } else {
            v.to_string()
        };
        out.push((k.to_string(), value));
    }
    Ok(out)
}

/// Parses a size such as `10G`, `256M` or `4096` (binary multiples) into
/// bytes, with an error naming the argument.
pub fn parse_size_arg(what: &str, s: &str) -> Result<u64> {
    pontoon_types::parse_size(s).ok_or_else(|| {
        anyhow!("invalid {what} {s:?}: expected a size such as 10G, 256M, 64K or 4096")
    })
}

/// Parses a duration: a number with a unit `ms`, `s`, `m` or `h`
/// (`500ms`, `3s`, `2m`), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("invalid duration {s:?}: expected e.g. 500ms, 3s, 2m, 1h or 7d");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
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
        }
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

    #[test]
    fn sizes_give_clear_errors() {
        assert_eq!(parse_size_arg("size", "1G").unwrap(), 1 << 30);
        let e = parse_size_arg("volume size", "ten")
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid volume size \"ten\""), "{e}");
    }
}
