//! `pontoon pg ls|scrub|deep-scrub` and `pontoon pool scrub|deep-scrub`:
//! PGs with their states and scrub findings, and scrubs on request.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::{ClusterMap, MapStore, OsdReport, PgScrubReport};
use pontoon_types::PgId;
use serde::Serialize;

use crate::cluster_args::{ClusterArgs, format_duration, parse_duration};
use crate::cmd_status::PrimaryReports;

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

/// One PG as `pg ls --json` prints it.
#[derive(Serialize, Debug)]
pub struct PgView {
    /// `pool.index` (index in hex).
    pub pgid: String,
    /// Pool name.
    pub pool: String,
    /// State from its primary, or `unknown`.
    pub state: String,
    /// Acting set, primary first.
    pub acting: Vec<u32>,
    /// Objects, from the primary.
    pub objects: u64,
    /// Scrub stamps and findings, from the primary.
    pub scrub: PgScrubReport,
    /// Why it is incomplete or waits.
    pub note: Option<String>,
}

/// Parses `1.1f` (pool id, dot, PG index in hex).
pub fn parse_pgid(s: &str) -> Result<PgId> {
    let parsed = s
        .split_once('.')
        .and_then(|(p, i)| Some(PgId::new(p.parse().ok()?, u32::from_str_radix(i, 16).ok()?)));
    match parsed {
        Some(pg) => Ok(pg),
        None => bail!("{s:?} is not a PG id (pool id, a dot, the index in hex: e.g. 1.1f)"),
    }
}

/// Every PG (of `pool`, if given) with what its primary reports.
pub fn pg_views(map: &ClusterMap, reports: &[OsdReport], pool: Option<&str>) -> Vec<PgView> {
    let primaries = PrimaryReports::new(reports);
    map.pgs
        .values()
        .filter_map(|rec| {
            let pool_name = map.pools.get(&rec.pg.pool)?.name.clone();
            if pool.is_some_and(|p| p != pool_name) {
                return None;
            }
            let (report, state) = primaries.of(rec);
            Some(PgView {
                pgid: rec.pg.to_string(),
                pool: pool_name,
                state: state.to_string(),
                acting: rec.acting.iter().map(|o| o.0).collect(),
                objects: report.map_or(0, |r| r.objects),
                scrub: report.map(|r| r.scrub.clone()).unwrap_or_default(),
                note: report.and_then(|r| r.note.clone()),
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_ids_are_pool_dot_hex_index() {
        assert_eq!(parse_pgid("1.1f").unwrap(), PgId::new(1, 31));
        assert_eq!(parse_pgid("1.1f").unwrap().to_string(), "1.1f");
        for bad in ["1", "x.1", "1.g", "", "1.-1"] {
            assert!(parse_pgid(bad).is_err(), "{bad}");
        }
    }
}
