//! How every client command finds its cluster, the `cluster.toml` file a
//! local cluster (`pontoon up`) writes, and the argument parsers the
//! commands share.
//!
//! A command finds the cluster, in this order, through `--cluster DIR`
//! (reads `DIR/cluster.toml`), `--etcd URL` (with `--cluster-name`, default
//! `pontoon`), `$PONTOON_CLUSTER` (a directory) or `$PONTOON_ETCD` (a URL).
//! `--cluster-name` / `$PONTOON_CLUSTER_NAME` override the file's name.
//! The file format and that order live in the client library
//! ([`pontoon_client::locate`]), which the C library shares. Last, the
//! node's configuration file gives `etcd.endpoints` and `cluster_name`
//! ([`crate::config_file::locate`]).
//!
//! etcd's TLS settings and user come with the cluster: a `pontoon up`
//! directory's from its `cluster.toml`; otherwise each from its
//! `--etcd-*` flag ([`EtcdAuthArgs`]), `$PONTOON_ETCD_*` or the
//! configuration file's `[etcd]` keys. A flag always wins.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use clap::Args;
use pontoon_client::MapFeed;
use pontoon_client::locate::{self, LocateError};
use pontoon_cluster::{EtcdAuth, MapStore};

pub use pontoon_client::locate::{
    ClusterFile, DEFAULT_CLUSTER_NAME, format_duration, parse_duration, split_endpoints,
};

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
    /// etcd's TLS settings and user.
    #[command(flatten)]
    pub etcd_auth: EtcdAuthArgs,
    /// Who this command is to the cluster (`--name`, `--keyring`).
    #[command(flatten)]
    pub identity: crate::cmd_auth::IdentityArgs,
}

/// How to reach a secured etcd: TLS with a client certificate, and an
/// etcd user. Each overrides its `etcd.*` key of the configuration file
/// and its environment variable. No flag takes a password itself (a
/// process's arguments are visible to every user of the host).
#[derive(Args, Debug, Clone, Default)]
pub struct EtcdAuthArgs {
    /// CA certificate (PEM) of etcd's server certificate; given, etcd is
    /// reached over TLS (https://) [env: PONTOON_ETCD_CA_FILE]
    #[arg(long, global = true, value_name = "FILE")]
    pub etcd_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd [env: PONTOON_ETCD_CERT_FILE]
    #[arg(long, global = true, value_name = "FILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM) [env: PONTOON_ETCD_KEY_FILE]
    #[arg(long, global = true, value_name = "FILE")]
    pub etcd_key_file: Option<PathBuf>,
    /// etcd user [env: PONTOON_ETCD_USER]
    #[arg(long, global = true, value_name = "NAME")]
    pub etcd_user: Option<String>,
    /// File whose first line is the etcd user's password
    /// [env: PONTOON_ETCD_PASSWORD_FILE; or PONTOON_ETCD_PASSWORD]
    #[arg(long, global = true, value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
}

impl EtcdAuthArgs {
    /// The flags as the configuration module takes them.
    pub fn flags(&self) -> crate::config_file::EtcdAuthFlags<'_> {
        crate::config_file::EtcdAuthFlags {
            ca_file: self.etcd_ca_file.as_deref(),
            cert_file: self.etcd_cert_file.as_deref(),
            key_file: self.etcd_key_file.as_deref(),
            user: self.etcd_user.as_deref(),
            password_file: self.etcd_password_file.as_deref(),
        }
    }

    /// The settings of a daemon that reaches etcd by its endpoints (`osd
    /// run`, `mgr`): each flag, else its variable, else the file's key.
    pub fn resolve(&self) -> Result<EtcdAuth> {
        crate::config_file::etcd_auth(&self.flags())
    }
}

/// A resolved cluster address (endpoints, name, and the directory and
/// `cluster.toml` when found through one).
pub type Target = locate::Location;

impl ClusterArgs {
    /// Resolves where the cluster is (and how to reach its etcd), without
    /// connecting.
    pub fn resolve(&self) -> Result<Target> {
        let mut target = self.locate()?;
        target.auth = self.etcd_auth.flags().given().or(target.auth);
        target.auth.check().map_err(|e| anyhow!("{e}"))?;
        Ok(target)
    }

    fn locate(&self) -> Result<Target> {
        crate::config_file::locate(
            crate::config_file::get(),
            self.cluster.as_deref(),
            self.etcd.as_deref(),
            self.cluster_name.as_deref(),
        )
        .map_err(|e| match e {
            LocateError::NoCluster => anyhow!(
                "no cluster given: pass --cluster DIR (a `pontoon up` directory) or --etcd URL, \
                 set PONTOON_CLUSTER / PONTOON_ETCD, or set etcd.endpoints in {}",
                crate::config_file::get().path.display()
            ),
            e => e.into(),
        })
    }

    /// Resolves the cluster, loads its map into a feed kept current by a
    /// watch, and gives the feed the identity its clients prove to the
    /// OSDs (`default_entity` unless `--name` or the config names one).
    pub fn feed(&self, default_entity: &str) -> Result<(Arc<MapFeed>, Target)> {
        let target = self.resolve()?;
        let feed = MapFeed::connect_with(&target.endpoints, &target.name, &target.auth)
            .with_context(|| format!("loading the map of cluster {:?}", target.name))?;
        if let Some((id, path)) =
            crate::cmd_auth::client_identity(&self.identity, &target, default_entity)?
        {
            let entity = pontoon_cluster::auth::EntityName::parse(&id.entity)?;
            feed.set_identity(id);
            crate::cmd_auth::follow_keyring(&feed, entity, path)?;
        }
        Ok((feed, target))
    }

    /// Resolves the cluster and connects to its etcd (bounded by the
    /// cluster crate's connect timeout).
    pub async fn connect(&self) -> Result<(MapStore, Target)> {
        let target = self.resolve()?;
        let store = MapStore::connect_with(&target.endpoints, &target.name, &target.auth)
            .await
            .map_err(|e| match &target.dir {
                Some(dir) => anyhow!("{e} (is `pontoon up --dir {}` running?)", dir.display()),
                None => anyhow!("{e}"),
            })?;
        Ok((store, target))
    }
}

/// Writes `path` by writing a temporary file beside it and renaming it.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    Ok(locate::write_atomic(path, data)?)
}

/// Parses a size such as `10G`, `256M` or `4096` (binary multiples) into
/// bytes, with an error naming the argument.
pub fn parse_size_arg(what: &str, s: &str) -> Result<u64> {
    pontoon_mgr::admin::parse_size(what, s).map_err(|e| anyhow!(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_give_clear_errors() {
        assert_eq!(parse_size_arg("size", "1G").unwrap(), 1 << 30);
        let e = parse_size_arg("volume size", "ten")
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid volume size \"ten\""), "{e}");
    }

    #[test]
    fn no_cluster_names_the_flags() {
        if std::env::var_os("PONTOON_CLUSTER").is_some()
            || std::env::var_os("PONTOON_ETCD").is_some()
        {
            return;
        }
        let e = ClusterArgs::default().resolve().unwrap_err().to_string();
        assert!(e.contains("--cluster DIR"), "{e}");
    }
}
