//! `pontoon snap create|ls|rm|protect|unprotect|rollback`: a volume's
//! snapshots, addressed as `VOLUME@SNAPSHOT` (rollback: `cmd_rollback`).
//!
//! Every change is one map transaction on the volume's record (see
//! `pontoon_cluster::snapshots`); bad input is refused before anything
//! changes, with one line.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::auth::format_unix;
use pontoon_cluster::space::space_report;
use pontoon_cluster::{MapStore, SnapshotRecord, is_valid_name, parse_snap_spec};
use pontoon_types::format_size;

use crate::cluster_args::ClusterArgs;

/// How long `snap create` waits for every live OSD to confirm the map that
/// holds the new snapshot.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(15);

/// `pontoon snap ...`.
#[derive(Args, Debug)]
pub struct SnapArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: SnapCmd,
}

#[derive(Subcommand, Debug)]
enum SnapCmd {
    /// Take a snapshot of a volume.
    Create {
        /// VOLUME@SNAPSHOT (the snapshot name as a volume name: [A-Za-z0-9._-]).
        spec: String,
    },
    /// List a volume's snapshots.
    Ls {
        /// Volume name.
        volume: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a snapshot (refused while it is protected).
    Rm {
        /// VOLUME@SNAPSHOT.
        spec: String,
    },
    /// Protect a snapshot from removal.
    Protect {
        /// VOLUME@SNAPSHOT.
        spec: String,
    },
    /// Allow a snapshot to be removed again.
    Unprotect {
        /// VOLUME@SNAPSHOT.
        spec: String,
    },
    /// Return a volume's data (and size) to a snapshot. Refused while a
    /// gateway has the volume open, unless --force.
    Rollback(crate::cmd_rollback::RollbackArgs),
}

/// One line of `snap ls --json`: the snapshot's record and its space.
#[derive(serde::Serialize)]
struct SnapshotRow<'a> {
    #[serde(flatten)]
    record: &'a SnapshotRecord,
    /// Logical bytes removing this snapshot alone would free, from the
    /// OSDs' latest reports.
    exclusive_bytes: u64,
}

/// Creates snapshot `snap` of `volume` and waits (bounded) until every
/// live OSD has the map that holds it, warning about those that did not.
pub async fn create_confirmed(
    store: &MapStore,
    volume: &str,
    snap: &str,
) -> Result<SnapshotRecord> {
    let (rec, epoch) = store.create_snapshot(volume, snap).await?;
    let behind = store.osds_behind(epoch, CONFIRM_TIMEOUT).await?;
    if !behind.is_empty() {
        let names: Vec<String> = behind.iter().map(|o| o.to_string()).collect();
        eprintln!(
            "warning: {} did not confirm map {epoch} within {}s; writes they accept under the old sequence may still land in the snapshot",
            names.join(", "),
            CONFIRM_TIMEOUT.as_secs()
        );
    }
    Ok(rec)
}

/// Runs `pontoon snap ...`.
pub fn run(args: SnapArgs) -> Result<()> {
    // Names are checked before connecting: a typo fails fast.
    match &args.cmd {
        SnapCmd::Create { spec }
        | SnapCmd::Rm { spec }
        | SnapCmd::Protect { spec }
        | SnapCmd::Unprotect { spec } => {
            parse_snap_spec(spec)?;
        }
        SnapCmd::Rollback(a) => return crate::cmd_rollback::run(&args.cluster, a),
        SnapCmd::Ls { volume, .. } => {
            if !is_valid_name(volume) {
                bail!(
                    "volume name {volume:?} must be 1-{} characters of [A-Za-z0-9._-]",
                    pontoon_cluster::MAX_NAME_LEN
                );
            }
        }
    }
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match args.cmd {
            SnapCmd::Create { spec } => {
                let (volume, snap) = parse_snap_spec(&spec)?;
                let rec = create_confirmed(&store, volume, snap).await?;
                println!(
                    "snapshot {volume}@{} created (id {}, {})",
                    rec.name,
                    rec.id,
                    format_size(rec.size_bytes)
                );
            }
            SnapCmd::Ls { volume, json } => {
                let map = store.load().await?;
                let Some(v) = map.volume_by_name(&volume) else {
                    bail!("volume {volume} not found");
                };
                let space = space_report(&map, &store.reports().await?);
                let usage = space.volumes.iter().find(|u| u.id == v.id.0);
                let exclusive = |id: u64| {
                    usage
                        .and_then(|u| u.snapshots.iter().find(|s| s.id == id))
                        .map_or(0, |s| s.exclusive_bytes)
                };
                let rows: Vec<SnapshotRow> = v
                    .snapshots
                    .iter()
                    .map(|s| SnapshotRow {
                        record: s,
                        exclusive_bytes: exclusive(s.id),
                    })
                    .collect();
                if json {
                    println!("{}", serde_json::to_string_pretty(&rows)?);
                } else if v.snapshots.is_empty() {
                    println!("volume {volume} has no snapshots");
                } else {
                    println!(
                        "{:>5} {:<24} {:>12} {:>12} {:<21} PROTECTED",
                        "ID", "NAME", "SIZE", "EXCLUSIVE", "CREATED"
                    );
                    for r in &rows {
                        let s = r.record;
                        println!(
                            "{:>5} {:<24} {:>12} {:>12} {:<21} {}",
                            s.id,
                            s.name,
                            format_size(s.size_bytes),
                            format_size(r.exclusive_bytes),
                            format_unix(s.created_unix),
                            if s.protected { "yes" } else { "no" }
                        );
                    }
                    if let Some(u) = usage {
                        println!(
                            "volume {volume}: {} used, {} held only by snapshots, {} in all",
                            format_size(u.used_bytes),
                            format_size(u.snapshot_bytes),
                            format_size(u.total_bytes)
                        );
                    }
                }
            }
            SnapCmd::Rm { spec } => {
                let (volume, snap) = parse_snap_spec(&spec)?;
                let rec = store.remove_snapshot(volume, snap).await?;
                println!("snapshot {volume}@{} removed", rec.name);
            }
            SnapCmd::Protect { spec } => {
                let (volume, snap) = parse_snap_spec(&spec)?;
                let changed = store.set_snapshot_protected(volume, snap, true).await?;
                let already = if changed { "" } else { "already " };
                println!("snapshot {volume}@{snap} is {already}protected");
            }
            SnapCmd::Unprotect { spec } => {
                let (volume, snap) = parse_snap_spec(&spec)?;
                let changed = store.set_snapshot_protected(volume, snap, false).await?;
                let already = if changed { "" } else { "already " };
                println!("snapshot {volume}@{snap} is {already}unprotected");
            }
            SnapCmd::Rollback(_) => unreachable!("handled before connecting"),
        }
        Ok(())
    })
}
