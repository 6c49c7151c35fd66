//! `pontoon volume export-diff VOL@SNAP2 [--from-snap SNAP1] FILE|-` and
//! `pontoon volume import-diff FILE|- VOL`: what changed between two
//! snapshots (or since the volume was created), in the stream format of
//! `pontoon_client::diff_stream` (docs/operator-guide.md, "Diff stream
//! format").
//!
//! Export-diff asks each object's primary for the extents that changed,
//! from metadata alone, and reads only the changed data. Import-diff, as
//! rbd does, checks that the target's newest snapshot is the diff's
//! from-snapshot (unless `--force`), applies the records, and then takes
//! the to-snapshot on the target. A file is checked whole before anything
//! is applied; standard input is checked record by record, and a stream
//! that turns out truncated or corrupt is reported with how much of it was
//! applied (the to-snapshot is then not taken).

use std::io::{BufReader, BufWriter};

use anyhow::{Result, anyhow, bail};
use clap::Args;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use pontoon_client::Client;
use pontoon_client::DiffView;
use pontoon_client::diff_stream::{DiffHeader, DiffReader, DiffRecord, DiffWriter, verify};
use pontoon_cluster::check_snap_name;
use pontoon_types::format_size;

use crate::cluster_args::ClusterArgs;
use crate::volume_io::{
    CHUNK, IN_FLIGHT, Output, check_volume, data_runtime, find, open_input, or_remove, progress,
    report, wait_for_size,
};

/// `pontoon volume export-diff`.
#[derive(Args, Debug)]
pub struct ExportDiffArgs {
    /// VOLUME@SNAPSHOT: the snapshot the diff leads to.
    spec: String,
    /// The older snapshot the diff starts from (default: the volume's
    /// creation, a full diff).
    #[arg(long, value_name = "SNAPSHOT")]
    from_snap: Option<String>,
    /// Output file, or `-` for standard output.
    file: String,
}

/// `pontoon volume import-diff`.
#[derive(Args, Debug)]
pub struct ImportDiffArgs {
    /// A diff stream file, or `-` for standard input.
    file: String,
    /// The volume to apply it to.
    volume: String,
    /// Apply even if the volume's newest snapshot is not the diff's
    /// from-snapshot.
    #[arg(long)]
    force: bool,
}

/// Runs `volume export-diff`.
pub fn export_diff(cluster: &ClusterArgs, a: ExportDiffArgs) -> Result<()> {
    let (volume, to) = pontoon_cluster::parse_snap_spec(&a.spec)?;
    if let Some(f) = &a.from_snap {
        check_snap_name(f)?;
    }
    let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
    let (size, from) = {
        let map = feed.current();
        let (_, s) = find(&map, volume, Some(to))?;
        let s = s.ok_or_else(|| anyhow!("snapshot {volume}@{to} not found"))?;
        let from = match &a.from_snap {
            None => DiffView::Nothing,
            Some(f) => {
                let (_, fs) = find(&map, volume, Some(f))?;
                let fs = fs.ok_or_else(|| anyhow!("snapshot {volume}@{f} not found"))?;
                if fs.id >= s.id {
                    bail!("--from-snap {f} is not older than {to}");
                }
                DiffView::Snap(fs.id)
            }
        };
        (s.size_bytes, from)
    };
    let out = Output::open(&a.file)?;
    let to_stdout = out.is_stdout();
    let header = DiffHeader {
        size,
        from: a.from_snap.clone(),
        to: to.to_string(),
    };
    let out: Box<dyn std::io::Write> = match out {
        Output::File(f) => Box::new(f),
        Output::Stdout(s) => Box::new(s),
    };
    let bar = progress(&format!("exporting the diff of {}", a.spec), Some(size));
    let written = (|| {
        let mut w = DiffWriter::new(BufWriter::with_capacity(1 << 20, out), &header)?;
        data_runtime()?.block_on(async {
            let vol = Client::new(feed.clone()).open(&a.spec)?;
            let vol = &vol;
            let mut objects = futures::stream::iter(0..vol.objects_in(size))
                .map(|i| vol.read_changes(i, from))
                .buffered(IN_FLIGHT);
            while let Some(changes) = objects.next().await {
                for c in changes? {
                    if !c.extent.data {
                        w.zero(c.extent.offset, c.extent.len)?;
                    }
                    for (at, d) in c.data {
                        w.data(at, &d)?;
                    }
                }
                bar.inc(vol.object_size());
            }
            Ok::<_, anyhow::Error>(())
        })?;
        Ok::<_, anyhow::Error>(w.finish()?.1)
    })();
    let totals = or_remove(&a.file, written)?;
    bar.finish_and_clear();
    feed.shutdown();
    let msg = format!(
        "exported the diff {}{} to {}: {} record(s), {} of data",
        a.from_snap
            .as_deref()
            .map_or_else(String::new, |f| format!("{volume}@{f} -> ")),
        a.spec,
        a.file,
        totals.records,
        format_size(totals.data_bytes)
    );
    report(to_stdout, &msg);
    Ok(())
}

/// Runs `volume import-diff`.
pub fn import_diff(cluster: &ClusterArgs, a: ImportDiffArgs) -> Result<()> {
    check_volume(&a.volume)?;
    let (input, file_size) = open_input(&a.file)?;
    let input = match file_size {
        Some(_) => {
            // A file is checked whole before anything is applied, then
            // read again to apply.
            verify(BufReader::new(input))
                .map_err(|e| anyhow!("{}: {e}; nothing applied", a.file))?;
            open_input(&a.file)?.0
        }
        None => input,
    };
    let mut reader = DiffReader::new(BufReader::with_capacity(1 << 20, input))
        .map_err(|e| anyhow!("{}: {e}; nothing applied", a.file))?;
    let h = reader.header().clone();
    let name = a.volume.as_str();
    let rt = crate::runtime()?;
    let (store, _) = rt.block_on(cluster.connect())?;
    let map = rt.block_on(store.load())?;
    let (v, _) = find(&map, name, None)?;
    if v.snapshot_by_name(&h.to).is_some() {
        bail!("snapshot {name}@{} already exists; nothing applied", h.to);
    }
    if let Some(from) = &h.from
        && !a.force
    {
        let newest = v.snapshots.iter().max_by_key(|s| s.id);
        match newest {
            Some(s) if s.name == *from => {}
            Some(s) => bail!(
                "the diff starts from snapshot {from}, but {name}'s newest snapshot is {}; nothing applied (--force applies it anyway)",
                s.name
            ),
            None => bail!(
                "the diff starts from snapshot {from}, but {name} has no snapshots; nothing applied (--force applies it anyway)"
            ),
        }
    }
    let old_size = v.size_bytes;
    if h.size > old_size {
        rt.block_on(store.resize_volume(name, h.size, false))?;
    }
    let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
    wait_for_size(&feed, name, h.size)?;
    let bar = progress(&format!("applying {} to {name}", a.file), file_size);
    let applied = data_runtime()?.block_on(async {
        let vol = Client::new(feed.clone()).open(name)?;
        let (vol, bar) = (&vol, &bar);
        let mut inflight = FuturesUnordered::new();
        let mut applied = 0u64;
        let outcome: Result<()> = async {
            loop {
                while inflight.len() >= IN_FLIGHT {
                    if let Some(r) = inflight.next().await {
                        r?;
                        applied += 1;
                    }
                }
                let Some(rec) = reader.next_record()? else {
                    break;
                };
                inflight.push(async move {
                    match rec {
                        DiffRecord::Data { offset, data } => {
                            let n = data.len() as u64;
                            vol.write_buf(offset, data).await?;
                            bar.inc(n);
                        }
                        DiffRecord::Zero { offset, len } => {
                            let mut at = offset;
                            while at < offset + len {
                                let n = (CHUNK * IN_FLIGHT as u64).min(offset + len - at);
                                vol.discard_at(at, n).await?;
                                at += n;
                            }
                        }
                    }
                    Ok::<_, anyhow::Error>(())
                });
            }
            while let Some(r) = inflight.next().await {
                r?;
                applied += 1;
            }
            Ok(())
        }
        .await;
        outcome.map(|()| applied).map_err(|e| {
            anyhow!(
                "{}: {e}; at least {applied} record(s) were applied to {name} and snapshot {name}@{} was not created",
                a.file,
                h.to
            )
        })
    })?;
    bar.finish_and_clear();
    feed.shutdown();
    if h.size < old_size {
        // The to-snapshot is smaller: what lies past it reads nothing.
        data_runtime()?.block_on(async {
            let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
            let vol = Client::new(feed.clone()).open(name)?;
            let mut at = h.size;
            while at < old_size {
                let n = CHUNK.min(old_size - at);
                vol.discard_at(at, n).await?;
                at += n;
            }
            feed.shutdown();
            Ok::<_, anyhow::Error>(())
        })?;
        rt.block_on(store.resize_volume(name, h.size, true))?;
    }
    let rec = rt.block_on(crate::cmd_snap::create_confirmed(&store, name, &h.to))?;
    println!(
        "applied {applied} record(s) of {} to volume {name}; snapshot {name}@{} created (id {})",
        a.file, h.to, rec.id
    );
    Ok(())
}
