//! `pontoon df` (raw storage, OSDs and pools, like `ceph df`) and
//! `pontoon du` (provisioned and used per volume, like `rbd du`), from the
//! map and the OSDs' reports (see `pontoon_cluster::space`); `pontoon df
//! --history` shows the capacity history the manager keeps and the
//! forecast of when space runs out (`pontoon_mgr::history`, `forecast`).

use anyhow::{Result, bail};
use clap::Args;
use pontoon_cluster::space::{SpaceReport, VolumeUsage, space_report};
use pontoon_types::format_size;

use crate::cluster_args::ClusterArgs;

/// Arguments of `pontoon df`.
#[derive(Args, Debug)]
pub struct DfArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Show the capacity history and the forecast instead.
    #[arg(long)]
    history: bool,
    /// With --history: only this pool.
    #[arg(long, value_name = "POOL", requires = "history")]
    pool: Option<String>,
    /// With --history: only points of the last DURATION (e.g. 1h, 7d).
    #[arg(long, value_name = "DURATION", requires = "history")]
    since: Option<String>,
    /// With --history: also every OSD's series.
    #[arg(long, requires = "history")]
    osds: bool,
    /// With --history: also every volume's series (hourly and daily).
    #[arg(long, requires = "history")]
    volumes: bool,
}

/// Arguments of `pontoon du`.
#[derive(Args, Debug)]
pub struct DuArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Only this volume.
    volume: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Loads the map and the reports and computes the space report.
pub async fn load_space(cluster: &ClusterArgs) -> Result<SpaceReport> {
    let (store, _) = cluster.connect().await?;
    let map = store.load().await?;
    let reports = store.reports().await?;
    Ok(space_report(&map, &reports))
}

fn pct(r: f64) -> String {
    format!("{:.2}", r * 100.0)
}

/// `pontoon df` as text.
pub fn render_df(s: &SpaceReport) -> String {
    let mut out = Vec::new();
    let r = &s.raw;
    out.push("--- RAW STORAGE ---".to_string());
    out.push(format!(
        "{:>12} {:>12} {:>12} {:>12} {:>9}",
        "SIZE", "AVAIL", "USED", "RAW USED", "%RAW USED"
    ));
    out.push(format!(
        "{:>12} {:>12} {:>12} {:>12} {:>9}",
        format_size(r.size_bytes),
        format_size(r.avail_bytes),
        format_size(r.used_bytes),
        format_size(r.raw_used_bytes),
        pct(r.raw_used_ratio)
    ));
    if r.reclaim_pending_objects > 0 {
        out.push(format!(
            "reclaiming: {} objects of removed volumes and stray copies still to delete",
            r.reclaim_pending_objects
        ));
    }
    out.push(String::new());
    out.push("--- OSDS ---".to_string());
    out.push(format!(
        "{:<8} {:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>7}  {}",
        "OSD", "STATUS", "SIZE", "DATA", "USED", "AVAIL", "JOURNAL", "META", "%USED", "STATE"
    ));
    for o in &s.osds {
        let status = format!(
            "{}/{}",
            if o.up { "up" } else { "down" },
            if o.r#in { "in" } else { "out" }
        );
        if !o.reported {
            out.push(format!("osd.{:<4} {status:<8} (no report)", o.id));
            continue;
        }
        out.push(format!(
            "osd.{:<4} {status:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>7}  {}",
            o.id,
            format_size(o.device_bytes),
            format_size(o.data_bytes),
            format_size(o.used_bytes),
            format_size(o.free_bytes),
            format_size(o.journal_bytes),
            format_size(o.metadata_bytes),
            pct(o.used_ratio),
            o.state
        ));
    }
    out.push(String::new());
    out.push("--- POOLS ---".to_string());
    out.push(format!(
        "{:<16} {:>4} {:>4} {:>12} {:>12} {:>9} {:>12} {:>7} {:>12} {:>12}",
        "POOL",
        "ID",
        "SIZE",
        "STORED",
        "SNAPSHOTS",
        "OBJECTS",
        "USED",
        "%USED",
        "MAX AVAIL",
        "PROVISIONED"
    ));
    for p in &s.pools {
        out.push(format!(
            "{:<16} {:>4} {:>4} {:>12} {:>12} {:>9} {:>12} {:>7} {:>12} {:>12}",
            p.name,
            p.id,
            p.size,
            format_size(p.stored_bytes),
            format_size(p.snapshot_bytes),
            p.objects,
            format_size(p.raw_used_bytes),
            pct(p.used_ratio),
            format_size(p.max_avail_bytes),
            format_size(p.provisioned_bytes)
        ));
    }
    let f = &s.full_ratios;
    out.push(String::new());
    out.push(format!(
        "full ratios: nearfull {}, backfillfull {}, full {}",
        f.nearfull, f.backfillfull, f.full
    ));
    out.join("\n")
}

/// `pontoon du` as text.
pub fn render_du(vols: &[VolumeUsage]) -> String {
    let line = |name: &str, pool: &str, cols: [u64; 5]| {
        format!(
            "{name:<24} {pool:<16} {:>12} {:>12} {:>12} {:>12} {:>12}",
            format_size(cols[0]),
            format_size(cols[1]),
            format_size(cols[2]),
            format_size(cols[3]),
            format_size(cols[4])
        )
    };
    let mut out = vec![format!(
        "{:<24} {:<16} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "NAME", "POOL", "PROVISIONED", "USED", "SNAPSHOTS", "TOTAL", "RAW USED"
    )];
    for v in vols {
        out.push(line(
            &v.name,
            &v.pool,
            [
                v.provisioned_bytes,
                v.used_bytes,
                v.snapshot_bytes,
                v.total_bytes,
                v.raw_used_bytes,
            ],
        ));
        for s in &v.snapshots {
            out.push(format!(
                "  @{:<21} {:<16} {:>12} {:>12}",
                s.name,
                "",
                "",
                format_size(s.exclusive_bytes)
            ));
        }
    }
    if vols.len() > 1 {
        let sum = |f: fn(&VolumeUsage) -> u64| vols.iter().map(f).sum::<u64>();
        out.push(line(
            "<TOTAL>",
            "",
            [
                sum(|v| v.provisioned_bytes),
                sum(|v| v.used_bytes),
                sum(|v| v.snapshot_bytes),
                sum(|v| v.total_bytes),
                sum(|v| v.raw_used_bytes),
            ],
        ));
    }
    out.join("\n")
}

/// Runs `pontoon df`.
pub fn run_df(args: DfArgs) -> Result<()> {
    if args.history {
        return crate::cmd_history::run(crate::cmd_history::HistoryOptions {
            cluster: args.cluster,
            json: args.json,
            pool: args.pool,
            since: args.since,
            osds: args.osds,
            volumes: args.volumes,
        });
    }
    crate::runtime()?.block_on(async move {
        let s = load_space(&args.cluster).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&s)?);
        } else {
            println!("{}", render_df(&s));
        }
        Ok(())
    })
}

/// Runs `pontoon du`.
pub fn run_du(args: DuArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let s = load_space(&args.cluster).await?;
        let vols: Vec<VolumeUsage> = match &args.volume {
            None => s.volumes,
            Some(name) => {
                let v: Vec<VolumeUsage> =
                    s.volumes.into_iter().filter(|v| v.name == *name).collect();
                if v.is_empty() {
                    bail!("volume {name} not found");
                }
                v
            }
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&vols)?);
        } else if vols.is_empty() {
            println!("no volumes");
        } else {
            println!("{}", render_du(&vols));
        }
        Ok(())
    })
}
