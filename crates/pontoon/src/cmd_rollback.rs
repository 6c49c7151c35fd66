//! `pontoon snap rollback VOL@SNAP [--force]`: returns a volume's data to
//! a snapshot, as `rbd snap rollback` does.
//!
//! Each object's primary lists where the head differs from the snapshot
//! (metadata only); only those extents are rewritten from the snapshot, or
//! discarded where the snapshot reads zeros, and whatever the head holds
//! past the snapshot's size is discarded. The volume's size returns to the
//! snapshot's (grown first if the snapshot is larger, cut after if it is
//! smaller). Newer snapshots are kept and still read what they read.
//!
//! A host reading the volume through a gateway would see its data change
//! underneath it, so the rollback is refused while any gateway publishes
//! the volume as open (see `pontoon_cluster::daemons`), naming it, unless
//! `--force`. That is a check, not a lock: a gateway that opens the volume
//! while the rollback runs is not stopped.

use anyhow::{Result, bail};
use clap::Args;
use futures::StreamExt;
use pontoon_client::Client;
use pontoon_cluster::daemons::kind;
use pontoon_cluster::parse_snap_spec;
use pontoon_types::format_size;

use crate::cluster_args::ClusterArgs;
use crate::volume_io::{IN_FLIGHT, data_runtime, find, progress, wait_for_size};

/// `pontoon snap rollback`.
#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// VOLUME@SNAPSHOT.
    spec: String,
    /// Roll back even while a gateway has the volume open.
    #[arg(long)]
    force: bool,
}

/// Runs `snap rollback`.
pub fn run(cluster: &ClusterArgs, a: &RollbackArgs) -> Result<()> {
    let (volume, snap) = parse_snap_spec(&a.spec)?;
    let rt = crate::runtime()?;
    let (store, _) = rt.block_on(cluster.connect())?;
    let map = rt.block_on(store.load())?;
    let (v, s) = find(&map, volume, Some(snap))?;
    let (head_size, snap_size) = (v.size_bytes, s.map_or(v.size_bytes, |s| s.size_bytes));
    let gateways = rt.block_on(store.daemons())?;
    let open: Vec<String> = gateways
        .iter()
        .filter(|d| [kind::NBD, kind::NVMF, kind::VHOST].contains(&d.kind.as_str()))
        .filter(|d| d.open_volumes.iter().any(|o| o == volume))
        .map(|d| format!("{} on {}", d.id(), d.host))
        .collect();
    if !open.is_empty() && !a.force {
        bail!(
            "volume {volume} is open on gateway {}: disconnect its hosts first, or pass --force",
            open.join(", ")
        );
    }
    if snap_size > head_size {
        rt.block_on(store.resize_volume(volume, snap_size, false))?;
    }
    let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
    wait_for_size(&feed, volume, snap_size)?;
    let span = head_size.max(snap_size);
    let bar = progress(&format!("rolling {volume} back to {snap}"), Some(span));
    let changed = data_runtime()?.block_on(async {
        let client = Client::new(feed.clone());
        let head = client.open(volume)?;
        let snapshot = client.open_snapshot(volume, snap)?;
        let (head, snapshot, bar) = (&head, &snapshot, &bar);
        let mut objects = futures::stream::iter(0..head.objects_in(span))
            .map(|i| async move {
                let n = head.rollback_object(snapshot, i).await?;
                bar.inc(head.object_size());
                Ok::<_, anyhow::Error>(n)
            })
            .buffer_unordered(IN_FLIGHT);
        let mut changed = 0u64;
        while let Some(n) = objects.next().await {
            changed += n?;
        }
        Ok::<_, anyhow::Error>(changed)
    })?;
    bar.finish_and_clear();
    feed.shutdown();
    if snap_size < head_size {
        // Everything past the snapshot's size was discarded above.
        rt.block_on(store.resize_volume(volume, snap_size, true))?;
    }
    println!(
        "volume {volume} rolled back to snapshot {snap} ({} rewritten or discarded, size {})",
        format_size(changed),
        format_size(snap_size)
    );
    Ok(())
}
