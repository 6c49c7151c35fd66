//! `pontoon config show`: this node's effective settings (see
//! [`crate::config_file`]) and where each came from: `default`, `file
//! PATH`, `env VAR` or `flag --NAME`. Nothing here connects to the cluster.

use std::collections::BTreeMap;

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::cluster_args::ClusterArgs;
use crate::config_file::{self, Setting, Source};

/// Arguments of `pontoon config show`.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// Where to find the cluster: shown as `etcd.endpoints` and
    /// `cluster_name` (a `pontoon up` directory's cluster.toml wins over
    /// the configuration file, as for every cluster command).
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `pontoon config show`.
pub fn run(a: ShowArgs) -> Result<()> {
    let cfg = config_file::get();
    let settings = effective(cfg, &a.cluster)?;
    if a.json {
        let v = json!({
            "config_file": {
                "path": cfg.path.display().to_string(),
                "chosen_by": cfg.path_source.to_string(),
                "loaded": cfg.file_loaded(),
            },
            "settings": settings,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "configuration file: {} ({}{})",
        cfg.path.display(),
        cfg.path_source,
        if cfg.file_loaded() { "" } else { "; not found" }
    );
    let w = settings
        .iter()
        .map(|s| s.key.len())
        .max()
        .unwrap_or(3)
        .max(3);
    let vw = settings
        .iter()
        .map(|s| s.value.as_deref().map_or(7, str::len))
        .max()
        .unwrap_or(5)
        .clamp(5, 60);
    println!("{:<w$}  {:<vw$}  SOURCE", "KEY", "VALUE");
    for s in &settings {
        println!(
            "{:<w$}  {:<vw$}  {}",
            s.key,
            s.value.as_deref().unwrap_or("(unset)"),
            s.source
        );
    }
    Ok(())
}

/// Every setting, the cluster ones as the cluster commands resolve them.
fn effective(cfg: &config_file::Config, cluster: &ClusterArgs) -> Result<Vec<Setting>> {
    let mut flags: BTreeMap<&str, (&str, String)> = BTreeMap::new();
    if let Some(f) = &cluster.etcd {
        flags.insert("etcd.endpoints", ("--etcd", f.clone()));
    }
    if let Some(f) = &cluster.cluster_name {
        flags.insert("cluster_name", ("--cluster-name", f.clone()));
    }
    let a = &cluster.etcd_auth;
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    for (key, flag, v) in [
        ("etcd.ca_file", "--etcd-ca-file", path(&a.etcd_ca_file)),
        (
            "etcd.cert_file",
            "--etcd-cert-file",
            path(&a.etcd_cert_file),
        ),
        ("etcd.key_file", "--etcd-key-file", path(&a.etcd_key_file)),
        ("etcd.user", "--etcd-user", a.etcd_user.clone()),
        (
            "etcd.password_file",
            "--etcd-password-file",
            path(&a.etcd_password_file),
        ),
    ] {
        if let Some(v) = v {
            flags.insert(key, (flag, v));
        }
    }
    let mut settings = cfg.all(&flags)?;
    // A local cluster's directory (--cluster or $PONTOON_CLUSTER) beats
    // the file and $PONTOON_ETCD: say so.
    if let Ok(loc) = config_file::locate(
        cfg,
        cluster.cluster.as_deref(),
        cluster.etcd.as_deref(),
        cluster.cluster_name.as_deref(),
    ) && let Some(dir) = &loc.dir
    {
        let file = Source::File(pontoon_client::locate::ClusterFile::path(dir));
        for s in &mut settings {
            match s.key.as_str() {
                "etcd.endpoints" => {
                    s.value = Some(loc.endpoints.join(","));
                    s.source = file.clone();
                }
                "cluster_name" if !matches!(s.source, Source::Flag(_) | Source::Env(_)) => {
                    s.value = Some(loc.name.clone());
                    s.source = file.clone();
                }
                // The directory's etcd credentials (a flag still wins).
                k if k.starts_with("etcd.") && !matches!(s.source, Source::Flag(_)) => {
                    let path = |p: &Option<std::path::PathBuf>| {
                        p.as_ref().map(|p| p.display().to_string())
                    };
                    let a = &loc.auth;
                    s.value = match k {
                        "etcd.ca_file" => path(&a.ca_file),
                        "etcd.cert_file" => path(&a.cert_file),
                        "etcd.key_file" => path(&a.key_file),
                        "etcd.user" => a.user.clone(),
                        "etcd.password_file" => path(&a.password_file),
                        "etcd.password" => a
                            .password
                            .as_ref()
                            .map(|_| config_file::REDACTED.to_string()),
                        _ => continue,
                    };
                    s.source = file.clone();
                }
                _ => {}
            }
        }
    }
    for s in &mut settings {
        if s.key == "osd.host" && s.value.is_none() {
            s.value = Some(crate::cmd_osd::local_host_name());
        }
    }
    Ok(settings)
}
