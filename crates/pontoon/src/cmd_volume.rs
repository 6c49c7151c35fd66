//! `pontoon volume create|ls|info|resize|rm|clone|flatten` (clones in
//! `cmd_clone`), and moving a volume's data in and out: `export|import`
//! (`cmd_export`), `export-diff|import-diff` (`cmd_diff`).

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::space::space_report;
use pontoon_mgr::admin;
use pontoon_mgr::listings::{VolumeView, volume_view, volume_views};
use pontoon_types::format_size;

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
    /// Remove a volume (refused while it has snapshots or clones).
    Rm {
        /// Volume name.
        name: String,
    },
    /// Write a volume or snapshot (VOL@SNAP) to a raw image file.
    Export(crate::cmd_export::ExportArgs),
    /// Create a volume from a raw image file (all-zero blocks are skipped).
    Import(crate::cmd_export::ImportArgs),
    /// Write what changed between two snapshots as a diff stream.
    ExportDiff(crate::cmd_diff::ExportDiffArgs),
    /// Apply a diff stream to a volume and take its to-snapshot.
    ImportDiff(crate::cmd_diff::ImportDiffArgs),
    /// Make a writable clone of a protected snapshot.
    Clone {
        /// The parent snapshot, VOLUME@SNAPSHOT (protected).
        spec: String,
        /// The new volume's name.
        name: String,
        /// Pool for the clone (default: the parent's).
        #[arg(long, value_name = "POOL")]
        pool: Option<String>,
    },
    /// Copy a clone's parent data into it and detach it from its parent.
    Flatten {
        /// The clone's name.
        name: String,
    },
}

/// Runs `pontoon volume ...`.
pub fn run(args: VolumeArgs) -> Result<()> {
    let cluster = &args.cluster;
    match args.cmd {
        VolumeCmd::Export(a) => return crate::cmd_export::export(cluster, a),
        VolumeCmd::Import(a) => return crate::cmd_export::import(cluster, a),
        VolumeCmd::ExportDiff(a) => return crate::cmd_diff::export_diff(cluster, a),
        VolumeCmd::ImportDiff(a) => return crate::cmd_diff::import_diff(cluster, a),
        _ => {}
    }
    // Sizes are checked before connecting: a typo fails fast.
    let size = match &args.cmd {
        VolumeCmd::Create { size, .. } => Some(parse_size_arg("volume size", size)?),
        VolumeCmd::Resize { size, .. } => Some(parse_size_arg("volume size", size)?),
        VolumeCmd::Clone { spec, name, .. } => {
            crate::cmd_clone::check_clone_args(spec, name)?;
            None
        }
        VolumeCmd::Flatten { name } => return crate::cmd_clone::flatten(&args.cluster, name),
        _ => None,
    };
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match args.cmd {
            VolumeCmd::Create { name, pool, .. } => {
                let size = size.unwrap_or_default();
                let (v, pool) =
                    admin::create_volume(&store, &name, size, pool.as_deref(), "--pool").await?;
                println!(
                    "volume {} created: {} in pool {pool}",
                    v.name,
                    format_size(v.size_bytes)
                );
            }
            VolumeCmd::Ls { json } => {
                let map = store.load().await?;
                let space = space_report(&map, &store.reports().await?);
                let vols: Vec<VolumeView> = volume_views(&map, &space);
                if json {
                    println!("{}", serde_json::to_string_pretty(&vols)?);
                } else if vols.is_empty() {
                    println!("no volumes");
                } else {
                    println!(
                        "{:<24} {:>5} {:<16} {:>12} {:>12} PARENT",
                        "NAME", "ID", "POOL", "SIZE", "USED"
                    );
                    for v in vols {
                        let used = v.used_bytes.map_or_else(|| "-".into(), format_size);
                        println!(
                            "{:<24} {:>5} {:<16} {:>12} {:>12} {}",
                            v.name,
                            v.id,
                            v.pool,
                            v.size,
                            used,
                            v.parent.as_deref().unwrap_or("-")
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
                let v = volume_view(&map, v, &space);
                if json {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                } else {
                    println!("volume      {}", v.name);
                    println!("id          {}", v.id);
                    println!("pool        {}", v.pool);
                    println!("size        {} ({} bytes)", v.size, v.size_bytes);
                    println!("object size {}", format_size(v.object_size));
                    if let Some(p) = &v.parent {
                        println!("parent      {p} (overlap {})", format_size(v.overlap_bytes));
                    }
                    if let Some(u) = v.used_bytes {
                        println!("used        {}", format_size(u));
                    }
                }
            }
            VolumeCmd::Resize { name, .. } => {
                let size = size.unwrap_or_default();
                let v = admin::resize_volume(&store, &name, size).await?;
                println!("volume {} is now {}", v.name, format_size(v.size_bytes));
            }
            VolumeCmd::Rm { name } => {
                let v = store.remove_volume(&name).await?;
                println!("volume {} removed", v.name);
            }
            VolumeCmd::Clone { spec, name, pool } => {
                crate::cmd_clone::clone(&store, &spec, &name, pool.as_deref()).await?;
            }
            VolumeCmd::Export(_)
            | VolumeCmd::Import(_)
            | VolumeCmd::ExportDiff(_)
            | VolumeCmd::ImportDiff(_)
            | VolumeCmd::Flatten { .. } => unreachable!("handled before connecting"),
        }
        Ok(())
    })
}
