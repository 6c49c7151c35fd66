//! `pontoon pool create|ls|rm|scrub|deep-scrub`.

use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::FailureDomain;
use pontoon_mgr::admin::{self, DEFAULT_PGS, PoolSpec};
use pontoon_mgr::listings::{PoolView, pool_views};

use crate::cluster_args::ClusterArgs;

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
                if let Some(min_size) = min_size
                    && min_size > size
                {
                    bail!("--min-size {min_size} is larger than --size {size}");
                }
                let failure_domain = failure_domain
                    .map(|d| d.parse::<FailureDomain>().map_err(|e| anyhow!(e)))
                    .transpose()?;
                let spec = PoolSpec {
                    name,
                    size,
                    min_size,
                    pgs: Some(pgs),
                    failure_domain,
                };
                let (p, note) = admin::create_pool(&store, spec).await?;
                if let Some(note) = note {
                    eprintln!("note: {note}");
                }
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
                let pools: Vec<PoolView> = pool_views(&map);
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
