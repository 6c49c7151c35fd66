//! `pontoon volume clone VOL@SNAP NEW` and `pontoon volume flatten VOL`:
//! writable clones of protected snapshots, layered by the client library
//! (`pontoon_client`'s clone module), and their detaching.
//!
//! A clone is one map transaction (`pontoon_cluster::clones`). Flatten
//! copies the parent's data into the clone through the client library,
//! then detaches the parent in the map; interrupted, it is run again.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pontoon_client::Client;
use pontoon_cluster::{MapStore, is_valid_name, parse_snap_spec};
use pontoon_types::format_size;

use crate::cluster_args::ClusterArgs;

/// How often the flatten progress line is redrawn.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Checks `volume clone`'s names before connecting.
pub(crate) fn check_clone_args(spec: &str, name: &str) -> Result<()> {
    parse_snap_spec(spec)?;
    if !is_valid_name(name) {
        bail!(
            "volume name {name:?} must be 1-{} characters of [A-Za-z0-9._-]",
            pontoon_cluster::MAX_NAME_LEN
        );
    }
    Ok(())
}

/// `pontoon volume clone SPEC NAME [--pool P]`.
pub(crate) async fn clone(
    store: &MapStore,
    spec: &str,
    name: &str,
    pool: Option<&str>,
) -> Result<()> {
    let (volume, snap) = parse_snap_spec(spec)?;
    let v = store.clone_volume(volume, snap, name, pool).await?;
    let map = store.load().await?;
    let pool = map
        .pools
        .get(&v.pool)
        .map_or_else(|| v.pool.to_string(), |p| p.name.clone());
    println!(
        "volume {} cloned from {spec}: {} in pool {pool}",
        v.name,
        format_size(v.size_bytes)
    );
    Ok(())
}

/// `pontoon volume flatten NAME`.
pub(crate) fn flatten(cluster: &ClusterArgs, name: &str) -> Result<()> {
    if !is_valid_name(name) {
        bail!(
            "volume name {name:?} must be 1-{} characters of [A-Za-z0-9._-]",
            pontoon_cluster::MAX_NAME_LEN
        );
    }
    // One tokio runtime for both map steps: the etcd client's connections
    // live on the runtime that made them.
    let tokio_rt = crate::runtime()?;
    let (store, parent, spec) = tokio_rt.block_on(async {
        let (store, _) = cluster.connect().await?;
        let map = store.load().await?;
        let Some(v) = map.volume_by_name(name) else {
            bail!("volume {name} not found");
        };
        let parent = v.parent.clone();
        let spec = parent.as_ref().map(|p| map.parent_spec(p));
        Ok((store, parent, spec))
    })?;
    let (Some(parent), Some(spec)) = (parent, spec) else {
        println!("volume {name} is not a clone; nothing to flatten");
        return Ok(());
    };
    let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
    let rt = compio::runtime::Runtime::new().context("starting io_uring")?;
    let stats = rt.block_on(async {
        let vol = Client::new(feed).open(name)?;
        let mut bar = Bar::new(name);
        let stats = vol.flatten(|done, total| bar.show(done, total)).await;
        bar.finish();
        stats
    })?;
    tokio_rt.block_on(async { store.detach_parent(name, &parent).await })?;
    println!(
        "volume {name} flattened: {} copied from {spec} ({} objects); it no longer depends on it",
        format_size(stats.copied_bytes),
        stats.objects
    );
    Ok(())
}

/// A progress line on a terminal's stderr; nothing elsewhere.
struct Bar {
    name: String,
    on: bool,
    last: Option<Instant>,
}

impl Bar {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            on: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    fn show(&mut self, done: u64, total: u64) {
        if !self.on || (self.last.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) && done < total) {
            return;
        }
        self.last = Some(Instant::now());
        const WIDTH: u64 = 30;
        let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH) as usize;
        let pct = (done * 100).checked_div(total).unwrap_or(100);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\rflattening {} [{:<w$}] {done}/{total} objects {pct}%",
            self.name,
            "#".repeat(filled),
            w = WIDTH as usize
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.on && self.last.is_some() {
            eprintln!();
        }
    }
}
