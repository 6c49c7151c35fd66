//! `pontoon pool create|ls|rm|scrub|deep-scrub`.

use std::collections::BTreeSet;

use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::{ClusterMap, FailureDomain, PoolRecord};
use serde::Serialize;

use crate::cluster_args::ClusterArgs;

/// Default PG count of a new pool.
pub const DEFAULT_PGS: u32 = 64;

/// `pontoon pool ...`.
#[derive(Args, Debug)]
pub struct PoolArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: PoolCmd,
}

#[derive(Subcommand, Debug)]
enum PoolCmd {
    /// Create a replicated pool.
    Create {
        /// Pool name ([A-Za-z0-9._-]).
        name: String,
        /// Replicas of every object.
        #[arg(long, value_name = "N")]
        size: u32,
        /// Fewest replicas up with which writes are still accepted
        /// (default size/2+1).
        #[arg(long, value_name = "M")]
        min_size: Option<u32>,
        /// Placement groups (fixed for the pool's life).
        #[arg(long, value_name = "P", default_value_t = DEFAULT_PGS)]
        pgs: u32,
        /// Unit no two replicas share: osd or host (default: host when the
        /// cluster has at least `size` hosts, else osd).
        #[arg(long, value_name = "osd|host")]
        failure_domain: Option<String>,
    },
    /// List pools.
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an empty pool.
    Rm {
        /// Pool name.
        name: String,
    },
    /// Ask for a light scrub of every PG of the pool.
    Scrub {
        /// Pool name.
        name: String,
    },
    /// Ask for a deep scrub of every PG of the pool.
    DeepScrub {
        /// Pool name.
        name: String,
    },
}

/// A pool as `pool ls --json` prints it.
#[derive(Serialize)]
struct PoolView {
    id: u32,
    name: String,
    size: u32,
    min_size: u32,
    pgs: u32,
    failure_domain: String,
    volumes: usize,
}

fn view(map: &ClusterMap, p: &PoolRecord) -> PoolView {
    PoolView {
        id: p.id.0,
        name: p.name.clone(),
        size: p.size,
        min_size: p.min_size,
        pgs: p.pgs,
        failure_domain: p.failure_domain.to_string(),
        volumes: map.volumes.values().filter(|v| v.pool == p.id).count(),
    }
}

/// The default min_size of a pool of `size` replicas: a majority.
pub fn default_min_size(size: u32) -> u32 {
    (size / 2 + 1).min(size)
}

/// Runs `pontoon pool ...`.
pub fn run(args: PoolArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match args.cmd {
            PoolCmd::Create {
                name,
                size,
                min_size,
                pgs,
                failure_domain,
            } => {
                let min_size = min_size.unwrap_or_else(|| default_min_size(size));
                if min_size > size {
                    bail!("--min-size {min_size} is larger than --size {size}");
                }
                let domain = match failure_domain {
                    Some(d) => d.parse::<FailureDomain>().map_err(|e| anyhow!(e))?,
                    None => {
                        let map = store.load().await?;
                        let hosts: BTreeSet<&str> = map
                            .osds
                            .values()
                            .filter(|o| o.in_cluster)
                            .map(|o| o.host.as_str())
                            .collect();
                        if hosts.len() >= size as usize {
                            FailureDomain::Host
                        } else {
                            eprintln!(
                                "note: {} host(s) for {size} replicas: replicas go on distinct OSDs \
                                 (pass --failure-domain host to require distinct hosts)",
                                hosts.len()
                            );
                            FailureDomain::Osd
                        }
                    }
                };
                let p = store.create_pool(&name, size, min_size, pgs, domain).await?;
                println!(
                    "pool {} created: {} replica{} (writes need {}), {} PGs, failure domain {}",
                    p.name,
                    p.size,
                    if p.size == 1 { "" } else { "s" },
                    p.min_size,
                    p.pgs,
                    p.failure_domain
                );
            }
            PoolCmd::Ls { json } => {
                let map = store.load().await?;
                let pools: Vec<PoolView> = map.pools.values().map(|p| view(&map, p)).collect();
                if json {
                    println!("{}", serde_json::to_string_pretty(&pools)?);
                } else if pools.is_empty() {
                    println!("no pools");
                } else {
                    println!(
                        "{:<20} {:>4} {:>5} {:>8} {:>6} {:<15} {:>7}",
                        "NAME", "ID", "SIZE", "MIN_SIZE", "PGS", "FAILURE_DOMAIN", "VOLUMES"
                    );
                    for p in pools {
                        println!(
                            "{:<20} {:>4} {:>5} {:>8} {:>6} {:<15} {:>7}",
                            p.name, p.id, p.size, p.min_size, p.pgs, p.failure_domain, p.volumes
                        );
                    }
                }
            }
            PoolCmd::Rm { name } => {
                let p = store.remove_pool(&name).await?;
                println!("pool {} removed", p.name);
            }
            PoolCmd::Scrub { name } => crate::cmd_pg::request(&store, &name, &[], false).await?,
            PoolCmd::DeepScrub { name } => crate::cmd_pg::request(&store, &name, &[], true).await?,
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_size_defaults_to_a_majority() {
        assert_eq!(default_min_size(1), 1);
        assert_eq!(default_min_size(2), 2);
        assert_eq!(default_min_size(3), 2);
        assert_eq!(default_min_size(4), 3);
        assert_eq!(default_min_size(5), 3);
    }
}
