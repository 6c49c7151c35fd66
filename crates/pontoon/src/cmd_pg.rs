//! `pontoon pg ls|scrub|deep-scrub` and `pontoon pool scrub|deep-scrub`:
//! PGs with their states and scrub findings, and scrubs on request.

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::MapStore;
use pontoon_mgr::listings::pg_views;
use pontoon_types::PgId;

use crate::cluster_args::{ClusterArgs, format_duration, parse_duration};

/// `pontoon pg ...`.
#[derive(Args, Debug)]
pub struct PgArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: PgCmd,
}

#[derive(Subcommand, Debug)]
enum PgCmd {
    /// List PGs: state, acting set, objects, scrub stamps and findings.
    Ls {
        /// Only PGs of this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ask a PG's primary for a light scrub (object lists and versions).
    Scrub {
        /// The PG, as `pontoon pg ls` names it (pool id, dot, hex index).
        pgid: String,
    },
    /// Ask a PG's primary for a deep scrub (every block read and compared).
    DeepScrub {
        /// The PG.
        pgid: String,
    },
    /// Set how often every PG is deep-scrubbed, for the whole cluster
    /// (default 7d; 0 scrubs only on request).
    SetDeepScrubInterval {
        /// e.g. 7d, 12h, 0.
        #[arg(value_parser = parse_duration)]
        interval: Duration,
    },
}

/// Parses `1.1f` (pool id, dot, PG index in hex).
pub fn parse_pgid(s: &str) -> Result<PgId> {
    pontoon_mgr::listings::parse_pgid(s).map_err(|e| anyhow!(e))
}

fn stamp(unix: Option<u64>) -> String {
    unix.map_or_else(|| "never".into(), |t| format!("@{t}"))
}

/// Runs `pontoon pg ...`.
pub fn run(args: PgArgs) -> Result<()> {
    let cmd = args.cmd;
    let (pgid, deep) = match &cmd {
        PgCmd::Scrub { pgid } => (Some(parse_pgid(pgid)?), false),
        PgCmd::DeepScrub { pgid } => (Some(parse_pgid(pgid)?), true),
        PgCmd::Ls { .. } | PgCmd::SetDeepScrubInterval { .. } => (None, false),
    };
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        let map = store.load().await?;
        if let Some(pg) = pgid {
            let Some(pool) = map.pools.get(&pg.pool) else {
                bail!("no pool has id {}", pg.pool.0);
            };
            return request(&store, &pool.name, &[pg.index], deep).await;
        }
        let (pool, json) = match cmd {
            PgCmd::Ls { pool, json } => (pool, json),
            PgCmd::SetDeepScrubInterval { interval } => {
                store.set_deep_scrub_interval(interval.as_secs()).await?;
                match interval.as_secs() {
                    0 => println!("deep scrubs only on request"),
                    s => println!(
                        "every PG is deep-scrubbed every {}",
                        format_duration(Duration::from_secs(s))
                    ),
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        if let Some(p) = &pool
            && map.pool_by_name(p).is_none()
        {
            bail!("pool {p} not found");
        }
        let views = pg_views(&map, &store.reports().await?, pool.as_deref());
        if json {
            println!("{}", serde_json::to_string_pretty(&views)?);
            return Ok(());
        }
        println!(
            "{:<8} {:<20} {:<12} {:>8} {:>14} {:>14} {:>6} {:>8}",
            "PG", "STATE", "ACTING", "OBJECTS", "SCRUBBED", "DEEP SCRUBBED", "ERRORS", "REPAIRED"
        );
        for v in views {
            let acting: Vec<String> = v.acting.iter().map(ToString::to_string).collect();
            let mut line = format!(
                "{:<8} {:<20} {:<12} {:>8} {:>14} {:>14} {:>6} {:>8}",
                v.pgid,
                v.state,
                format!("[{}]", acting.join(",")),
                v.objects,
                stamp(v.scrub.last_scrub_unix),
                stamp(v.scrub.last_deep_scrub_unix),
                v.scrub.inconsistent_objects,
                v.scrub.repaired_objects,
            );
            if !v.upmap.is_empty() {
                let pairs: Vec<String> = v.upmap.iter().map(|[f, t]| format!("{f}->{t}")).collect();
                line.push_str(&format!("  upmap {}", pairs.join(",")));
            }
            if let Some((done, all)) = v.scrub.progress {
                line.push_str(&format!("  scrubbing {done}/{all}"));
            }
            if v.scrub.unrecoverable_objects > 0 {
                line.push_str(&format!(
                    "  UNRECOVERABLE {}: {}",
                    v.scrub.unrecoverable_objects,
                    v.scrub.unrecoverable.join(", ")
                ));
            }
            println!("{line}");
        }
        Ok(())
    })
}

/// Asks for a scrub of `pgs` of `pool` (all of them if empty) and says so.
pub async fn request(store: &MapStore, pool: &str, pgs: &[u32], deep: bool) -> Result<()> {
    let (chosen, epoch) = store.request_scrub(pool, pgs, deep).await?;
    let kind = if deep { "deep scrub" } else { "scrub" };
    match chosen.as_slice() {
        [one] => println!("{kind} of pg {one} requested (epoch {epoch})"),
        all => println!(
            "{kind} of the {} PGs of pool {pool} requested (epoch {epoch})",
            all.len()
        ),
    }
    Ok(())
}
