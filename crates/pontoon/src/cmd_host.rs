//! `pontoon host ...`: the hosts OSDs run on, and their maintenance mode.
//! A host in maintenance keeps its OSDs in while they are down (`noout`
//! for that host's OSDs only), so a reboot or a firmware update does not
//! start a re-replication of its data; health warns while it lasts
//! (`HOST_IN_MAINTENANCE`). Stopping and starting the daemons is the
//! operator's (or systemd's) part.

use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use pontoon_cluster::osd_admin;
use serde::Serialize;

use crate::cluster_args::ClusterArgs;

/// `pontoon host ...`.
#[derive(Args, Debug)]
pub struct HostArgs {
    #[command(subcommand)]
    cmd: HostCmd,
}

#[derive(Subcommand, Debug)]
enum HostCmd {
    /// List the hosts OSDs run on, with their OSDs and maintenance state.
    Ls(LsArgs),
    /// Put a host in maintenance mode (`enter`) or take it out (`exit`):
    /// while in it, its OSDs are not marked out when down.
    Maintenance(MaintenanceArgs),
}

/// Arguments of `pontoon host ls`.
#[derive(Args, Debug)]
struct LsArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `pontoon host maintenance`.
#[derive(Args, Debug)]
struct MaintenanceArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// `enter` or `exit`.
    #[arg(value_parser = ["enter", "exit"])]
    action: String,
    /// The host, as OSDs register it (`pontoon host ls`).
    host: String,
}

/// One host as `host ls --json` prints it.
#[derive(Serialize, Debug, Default)]
struct HostRow {
    host: String,
    osds: Vec<u32>,
    up: usize,
    r#in: usize,
    maintenance: bool,
}

/// Runs `pontoon host ...`.
pub fn run(args: HostArgs) -> Result<()> {
    match args.cmd {
        HostCmd::Ls(a) => ls(a),
        HostCmd::Maintenance(a) => maintenance(a),
    }
}

fn ls(a: LsArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let map = store.load().await?;
        let mut hosts: BTreeMap<String, HostRow> = BTreeMap::new();
        for o in map.osds.values() {
            let h = hosts.entry(o.host.clone()).or_insert_with(|| HostRow {
                host: o.host.clone(),
                ..Default::default()
            });
            h.osds.push(o.id.0);
            h.up += usize::from(map.is_alive(o.id));
            h.r#in += usize::from(o.in_cluster);
        }
        for h in &map.settings.osd.maintenance_hosts {
            hosts
                .entry(h.clone())
                .or_insert_with(|| HostRow {
                    host: h.clone(),
                    ..Default::default()
                })
                .maintenance = true;
        }
        let rows: Vec<HostRow> = hosts.into_values().collect();
        if a.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
            return Ok(());
        }
        if rows.is_empty() {
            println!("no hosts (no OSD is registered)");
        }
        for r in rows {
            let osds: Vec<String> = r.osds.iter().map(|i| format!("osd.{i}")).collect();
            println!(
                "{}  {} osds ({} up, {} in){}: {}",
                r.host,
                r.osds.len(),
                r.up,
                r.r#in,
                if r.maintenance {
                    ", in maintenance"
                } else {
                    ""
                },
                osds.join(", ")
            );
        }
        Ok(())
    })
}

fn maintenance(a: MaintenanceArgs) -> Result<()> {
    if !pontoon_cluster::is_valid_name(&a.host) {
        bail!(
            "host name {:?} must be 1-128 characters of [A-Za-z0-9._-]",
            a.host
        );
    }
    let enter = a.action == "enter";
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let mut osds = Vec::new();
        let mut changed = false;
        store
            .update::<_, osd_admin::AdminError>(|m| {
                if enter {
                    (changed, osds) = osd_admin::enter_maintenance(m, &a.host)?;
                } else {
                    osd_admin::exit_maintenance(m, &a.host)?;
                    changed = true;
                }
                Ok(changed)
            })
            .await
            .map_err(|e| anyhow!("{e}"))?;
        if !enter {
            println!(
                "host {} left maintenance: its OSDs are marked out again when down too long",
                a.host
            );
        } else {
            let names: Vec<String> = osds.iter().map(ToString::to_string).collect();
            println!(
                "host {} {} maintenance: {} will not be marked out while down",
                a.host,
                if changed { "entered" } else { "is already in" },
                names.join(", ")
            );
        }
        Ok(())
    })
}
