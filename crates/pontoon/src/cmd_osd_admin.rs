//! OSD life cycle and maintenance, with Ceph's words: `pontoon osd ls`,
//! `reweight`, `rm`, `purge`, `destroy`, `replace` and `set|unset FLAG`.
//! The rules (what is refused, and why) are in
//! [`pontoon_cluster::osd_admin`]; this file parses, applies them in one
//! map update each, and prints the outcome.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use pontoon_cluster::osd_admin::{self, AdminError, OsdFlag};
use pontoon_cluster::{ClusterMap, MapStore};
use pontoon_osd::device_lock::DeviceLock;
use pontoon_osd::identity::{self, NewDevice};
use pontoon_types::{OsdId, format_size};
use serde::Serialize;

use crate::cluster_args::ClusterArgs;
use crate::cmd_osd_create::{probe_device, ready_to_format, with_device};

fn parse_osd_id(s: &str) -> Result<OsdId, String> {
    pontoon_mgr::listings::parse_osd_id(s)
}

/// Arguments of `pontoon osd ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `pontoon osd reweight`.
#[derive(Args, Debug)]
pub struct ReweightArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The OSD's id (`3` or `osd.3`).
    #[arg(value_parser = parse_osd_id)]
    id: OsdId,
    /// Its share of its device's weight, 0.0 to 1.0 (1.0: full weight;
    /// 0: no PGs).
    weight: f64,
}

/// An OSD to remove, purge or destroy.
#[derive(Args, Debug)]
pub struct RemoveArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The OSD's id (`3` or `osd.3`).
    #[arg(value_parser = parse_osd_id)]
    id: OsdId,
    /// Go ahead even if PGs may still need the OSD's data (they may lose
    /// writes only it held, or stay inactive until it returns).
    #[arg(long = "yes-i-really-mean-it")]
    force: bool,
}

/// An OSD to remove (`osd rm`).
#[derive(Args, Debug)]
pub struct RmArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The OSD's id (`3` or `osd.3`).
    #[arg(value_parser = parse_osd_id)]
    id: OsdId,
}

/// Arguments of `pontoon osd replace`.
#[derive(Args, Debug)]
pub struct ReplaceArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The destroyed OSD's id (`3` or `osd.3`).
    #[arg(value_parser = parse_osd_id)]
    id: OsdId,
    /// The new data device (or file).
    #[arg(long, value_name = "PATH")]
    device: PathBuf,
    /// Create the device as a file of this size if it does not exist, or
    /// extend a smaller file (e.g. 10G).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Shards (one thread each, each with its own slice of the device).
    #[arg(long, value_name = "K", default_value_t = 1)]
    shards: u32,
    /// Write-buffer device for the journal, instead of the data device
    /// (default: the configuration file's [osd.journal] entry for
    /// --device; give it to `osd run` too).
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Format the device even if it holds a filesystem, a partition table
    /// or another cluster's data, destroying it.
    #[arg(long)]
    force: bool,
}

/// Arguments of `pontoon osd set|unset`.
#[derive(Args, Debug)]
pub struct FlagArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// noout (down OSDs are not marked out), norebalance (misplaced PGs
    /// are not backfilled) or norecover (recovery and backfill pause).
    #[arg(value_parser = parse_flag)]
    flag: OsdFlag,
}

fn parse_flag(s: &str) -> Result<OsdFlag, String> {
    s.parse()
}

/// One OSD as `osd ls --json` prints it.
#[derive(Serialize, Debug)]
struct OsdRow {
    id: u32,
    host: String,
    /// Holds its liveness lease.
    up: bool,
    /// Receives PGs.
    r#in: bool,
    /// Placement weight (MiB of device by convention).
    weight: u64,
    /// `weight` as a share of the device's MiB (Ceph's reweight).
    reweight: Option<f64>,
    device_bytes: u64,
    addrs: Vec<String>,
    destroyed: bool,
    /// Why it is not marked out while down (noout, host maintenance).
    noout: Option<String>,
    down_since_unix: Option<u64>,
    /// Formatted by `osd create` (or `osd replace`), not registered yet.
    new: bool,
}

fn rows(map: &ClusterMap) -> Vec<OsdRow> {
    let mut rows: Vec<OsdRow> = map
        .osds
        .values()
        .map(|o| OsdRow {
            id: o.id.0,
            host: o.host.clone(),
            up: map.is_alive(o.id),
            r#in: o.in_cluster,
            weight: o.weight,
            reweight: ClusterMap::reweight_of(o),
            device_bytes: o.device_bytes,
            addrs: o.addrs.iter().map(ToString::to_string).collect(),
            destroyed: map.is_destroyed(o.id),
            noout: map.noout_reason(o.id),
            down_since_unix: o.down_since_unix,
            new: false,
        })
        .chain(
            map.created_osds
                .iter()
                .filter(|id| !map.osds.contains_key(id))
                .map(|id| OsdRow {
                    id: id.0,
                    host: "-".into(),
                    up: false,
                    r#in: false,
                    weight: 0,
                    reweight: None,
                    device_bytes: 0,
                    addrs: Vec::new(),
                    destroyed: false,
                    noout: None,
                    down_since_unix: None,
                    new: true,
                }),
        )
        .collect();
    rows.sort_by_key(|r| r.id);
    rows
}

fn render(rows: &[OsdRow]) -> String {
    let head = [
        "ID",
        "HOST",
        "STATE",
        "IN",
        "WEIGHT",
        "REWEIGHT",
        "SIZE",
        "ADDRESSES",
        "FLAGS",
    ];
    let mut table: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        let mut flags = Vec::new();
        if r.new {
            flags.push("new");
        }
        if r.destroyed {
            flags.push("destroyed");
        }
        if r.noout.is_some() {
            flags.push("noout");
        }
        table.push(vec![
            format!("osd.{}", r.id),
            r.host.clone(),
            if r.up { "up" } else { "down" }.into(),
            if r.r#in { "in" } else { "out" }.into(),
            r.weight.to_string(),
            r.reweight.map_or("-".into(), |w| format!("{w:.2}")),
            format_size(r.device_bytes),
            r.addrs.join(","),
            flags.join(","),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    table
        .iter()
        .map(|row| {
            row.iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `pontoon osd ls`.
pub fn ls(a: LsArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let map = store.load().await?;
        let rows = rows(&map);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else if rows.is_empty() {
            println!("no OSDs");
        } else {
            println!("{}", render(&rows));
        }
        Ok(())
    })
}

/// Runs one map update applying `f`, which says whether it changed anything.
async fn apply<T>(
    store: &MapStore,
    mut f: impl FnMut(&mut ClusterMap) -> Result<(bool, T), AdminError>,
) -> Result<T> {
    let mut out = None;
    store
        .update::<_, AdminError>(|m| {
            let (changed, v) = f(m)?;
            out = Some(v);
            Ok(changed)
        })
        .await?;
    out.ok_or_else(|| anyhow!("the map update did not run"))
}

/// Runs `pontoon osd reweight`.
pub fn reweight(a: ReweightArgs) -> Result<()> {
    if !(a.weight.is_finite() && (0.0..=1.0).contains(&a.weight)) {
        bail!("reweight {} is not between 0.0 and 1.0", a.weight);
    }
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let (old, new) = apply(&store, |m| {
            let (old, new) = osd_admin::reweight(m, a.id, a.weight)?;
            Ok((old != new, (old, new)))
        })
        .await?;
        println!(
            "reweighted {} to {} (weight {new}, was {old})",
            a.id, a.weight
        );
        Ok(())
    })
}

/// Runs `pontoon osd rm`.
pub fn rm(a: RmArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let rec = apply(&store, |m| Ok((true, osd_admin::remove(m, a.id)?))).await?;
        store.remove_osd_report(a.id).await?;
        println!("removed {} (host {})", rec.id, rec.host);
        Ok(())
    })
}

/// Runs `pontoon osd purge`.
pub fn purge(a: RemoveArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let rec = apply(&store, |m| Ok((true, osd_admin::purge(m, a.id, a.force)?))).await?;
        store.remove_osd_traces(a.id).await?;
        println!(
            "purged {} (host {}): removed from the map and from placement, with its report, rating and registry entry",
            rec.id, rec.host
        );
        Ok(())
    })
}

/// Runs `pontoon osd destroy`.
pub fn destroy(a: RemoveArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let changed = apply(&store, |m| {
            let c = osd_admin::destroy(m, a.id, a.force)?;
            Ok((c, c))
        })
        .await?;
        if changed {
            println!(
                "destroyed {}: its id is kept for a new device (`pontoon osd replace {} --device DEV`)",
                a.id, a.id.0
            );
        } else {
            println!("{} is already destroyed", a.id);
        }
        Ok(())
    })
}

/// Runs `pontoon osd set|unset FLAG`.
pub fn set_flag(a: FlagArgs, on: bool) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        apply(&store, |m| Ok((osd_admin::set_flag(m, a.flag, on), ()))).await?;
        println!("{} is {}", a.flag, if on { "set" } else { "unset" });
        Ok(())
    })
}

/// Runs `pontoon osd replace`: formats the new device for the destroyed
/// OSD's id (as `osd create` formats a new one), then lets it take the
/// OSD's place; `osd run --device NEW` runs it and backfill fills it.
pub fn replace(a: ReplaceArgs) -> Result<()> {
    with_device(&a.device, a.shards, a.size.as_deref(), |lock, size| {
        replace_on(&a, lock, size)
    })
}

fn replace_on(a: &ReplaceArgs, lock: &DeviceLock, size: Option<u64>) -> Result<()> {
    let dev = a.device.display();
    let contents = probe_device(&a.device, lock, size, a.force)?;
    crate::runtime()?.block_on(async {
        let (store, target) = a.cluster.connect().await?;
        // Refuse before formatting anything: the id must await a device.
        let mut map = store.load().await?;
        map.epoch.0 += 1;
        osd_admin::prepare_replacement(&mut map, a.id, 1 << 30)?;
        let fsid = store.fsid().await?;
        ready_to_format(&a.device, lock, &contents, fsid, size, a.force)?;
        let (journal, _journal_lock) =
            crate::cmd_osd_create::journal_for(&a.device, a.journal.as_deref(), a.force)?;
        let layout = NewDevice {
            slices: a.shards,
            journal: journal.as_deref(),
        };
        let (id, h) = identity::create(&store, lock, fsid, &target.name, Some(a.id), layout)
            .await
            .map_err(|e| anyhow!("device {dev}: {e}"))?;
        if id != a.id {
            bail!("the cluster handed out {id} instead of {}", a.id);
        }
        let bytes = lock.size()?;
        apply(&store, |m| {
            osd_admin::prepare_replacement(m, id, bytes)?;
            Ok((true, ()))
        })
        .await?;
        println!(
            "{dev} is now {id}: {}, {} shard{}; run it with `pontoon osd run --device {dev}` \
             (it knows its id), and backfill fills it",
            format_size(bytes),
            h.slices,
            if h.slices == 1 { "" } else { "s" },
        );
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_and_shows_flags() {
        let rows = vec![
            OsdRow {
                id: 0,
                host: "node1".into(),
                up: true,
                r#in: true,
                weight: 1024,
                reweight: Some(1.0),
                device_bytes: 1 << 30,
                addrs: vec!["10.0.0.1:6800".into()],
                destroyed: false,
                noout: None,
                down_since_unix: None,
                new: false,
            },
            OsdRow {
                id: 12,
                host: "n2".into(),
                up: false,
                r#in: true,
                weight: 512,
                reweight: Some(0.5),
                device_bytes: 1 << 30,
                addrs: vec!["10.0.0.2:6800".into()],
                destroyed: true,
                noout: Some("the noout flag is set".into()),
                down_since_unix: Some(1),
                new: false,
            },
        ];
        let text = render(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("ID      HOST   STATE  IN  WEIGHT"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("osd.0   node1  up     in  1024    1.00"),
            "{text}"
        );
        assert!(lines[2].ends_with("destroyed,noout"), "{text}");
    }
}
