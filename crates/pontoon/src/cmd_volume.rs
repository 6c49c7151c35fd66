//! `pontoon volume create|ls|info|resize|rm`.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::space::{SpaceReport, space_report};
use pontoon_cluster::{ClusterMap, VolumeRecord};
use pontoon_types::format_size;
use serde::Serialize;

use crate::cluster_args::{ClusterArgs, parse_size_arg};

/// `pontoon volume ...`.
#[derive(Args, Debug)]
pub struct VolumeArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: VolumeCmd,
}

#[derive(Subcommand, Debug)]
enum VolumeCmd {
    /// Create a thin-provisioned volume.
    Create {
        /// Volume name ([A-Za-z0-9._-]).
        name: String,
        /// Size, e.g. 10G (a multiple of 4 KiB).
        #[arg(long, value_name = "SIZE")]
        size: String,
        /// Pool (default: the only pool, if there is exactly one).
        #[arg(long, value_name = "POOL")]
        pool: Option<String>,
    },
    /// List volumes.
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one volume.
    Info {
        /// Volume name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Grow a volume (shrinking is refused: it would discard data).
    Resize {
        /// Volume name.
        name: String,
        /// New size, e.g. 20G.
        #[arg(long, value_name = "SIZE")]
        size: String,
    },
    /// Remove a volume.
    Rm {
        /// Volume name.
        name: String,
    },
}

/// A volume as the JSON listings print it.
#[derive(Serialize)]
struct VolumeView {
    id: u64,
    name: String,
    pool: String,
    size_bytes: u64,
    size: String,
    object_size: u64,
    /// Objects covering the volume's size (not how many exist).
    max_objects: u64,
    /// Logical bytes allocated (see `pontoon du`), when reports are in.
    used_bytes: Option<u64>,
}

fn view(map: &ClusterMap, v: &VolumeRecord, space: &SpaceReport) -> VolumeView {
    VolumeView {
        id: v.id.0,
        name: v.name.clone(),
        pool: map
            .pools
            .get(&v.pool)
            .map_or_else(|| v.pool.to_string(), |p| p.name.clone()),
        size_bytes: v.size_bytes,
        size: format_size(v.size_bytes),
        object_size: v.object_size,
        max_objects: v.object_count(),
        used_bytes: space
            .volumes
            .iter()
            .find(|u| u.id == v.id.0)
            .map(|u| u.used_bytes),
    }
}

/// The pool a new volume goes to: the one named, else the only one.
fn choose_pool(map: &ClusterMap, pool: Option<String>) -> Result<String> {
    if let Some(p) = pool {
        return Ok(p);
    }
    let mut pools = map.pools.values();
    match (pools.next(), pools.next()) {
        (Some(only), None) => Ok(only.name.clone()),
        (None, _) => bail!("there is no pool: create one with `pontoon pool create`"),
        (Some(_), Some(_)) => bail!(
            "there are {} pools: pass --pool to choose one",
            map.pools.len()
        ),
    }
}

/// Runs `pontoon volume ...`.
pub fn run(args: VolumeArgs) -> Result<()> {
    // Sizes are checked before connecting: a typo fails fast.
    let size = match &args.cmd {
        VolumeCmd::Create { size, .. } => Some(parse_size_arg("volume size", size)?),
        VolumeCmd::Resize { size, .. } => Some(parse_size_arg("volume size", size)?),
        _ => None,
    };
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match args.cmd {
            VolumeCmd::Create { name, pool, .. } => {
                let size = size.unwrap_or_default();
                let map = store.load().await?;
                let pool = choose_pool(&map, pool)?;
                let v = store.create_volume(&name, &pool, size).await?;
                println!(
                    "volume {} created: {} in pool {pool}",
                    v.name,
                    format_size(v.size_bytes)
                );
            }
            VolumeCmd::Ls { json } => {
                let map = store.load().await?;
                let space = space_report(&map, &store.reports().await?);
                let vols: Vec<VolumeView> = map
                    .volumes
                    .values()
                    .map(|v| view(&map, v, &space))
                    .collect();
                if json {
                    println!("{}", serde_json::to_string_pretty(&vols)?);
                } else if vols.is_empty() {
                    println!("no volumes");
                } else {
                    println!(
                        "{:<24} {:>5} {:<16} {:>12} {:>12}",
                        "NAME", "ID", "POOL", "SIZE", "USED"
                    );
                    for v in vols {
                        let used = v.used_bytes.map_or_else(|| "-".into(), format_size);
                        println!(
                            "{:<24} {:>5} {:<16} {:>12} {:>12}",
                            v.name, v.id, v.pool, v.size, used
                        );
                    }
                }
            }
            VolumeCmd::Info { name, json } => {
                let map = store.load().await?;
                let Some(v) = map.volume_by_name(&name) else {
                    bail!("volume {name} not found");
                };
                let space = space_report(&map, &store.reports().await?);
                let v = view(&map, v, &space);
                if json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    println!("volume      {}", v.name);
                    println!("id          {}", v.id);
                    println!("pool        {}", v.pool);
                    println!("size        {} ({} bytes)", v.size, v.size_bytes);
                    println!("object size {}", format_size(v.object_size));
                    if let Some(u) = v.used_bytes {
                        println!("used        {}", format_size(u));
                    }
                }
            }
            VolumeCmd::Resize { name, .. } => {
                let size = size.unwrap_or_default();
                let map = store.load().await?;
                let Some(cur) = map.volume_by_name(&name) else {
                    bail!("volume {name} not found");
                };
                if size < cur.size_bytes {
                    bail!(
                        "volume {name} is {}: shrinking it to {} would discard data and is refused",
                        format_size(cur.size_bytes),
                        format_size(size)
                    );
                }
                let v = store.resize_volume(&name, size, false).await?;
                println!("volume {} is now {}", v.name, format_size(v.size_bytes));
            }
            VolumeCmd::Rm { name } => {
                let v = store.remove_volume(&name).await?;
                println!("volume {} removed", v.name);
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::{FailureDomain, PoolRecord};
    use pontoon_types::PoolId;

    fn pool(id: u32, name: &str) -> PoolRecord {
        PoolRecord {
            id: PoolId(id),
            name: name.into(),
            size: 3,
            min_size: 2,
            pgs: 8,
            failure_domain: FailureDomain::Osd,
        }
    }

    #[test]
    fn the_only_pool_is_the_default_and_otherwise_pool_must_be_given() {
        let mut m = ClusterMap::new("c");
        assert!(
            choose_pool(&m, None)
                .unwrap_err()
                .to_string()
                .contains("no pool")
        );
        m.pools.insert(PoolId(1), pool(1, "a"));
        assert_eq!(choose_pool(&m, None).unwrap(), "a");
        m.pools.insert(PoolId(2), pool(2, "b"));
        let e = choose_pool(&m, None).unwrap_err().to_string();
        assert!(e.contains("pass --pool"), "{e}");
        assert_eq!(choose_pool(&m, Some("b".into())).unwrap(), "b");
    }
}
