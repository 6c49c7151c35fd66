//! `pontoon volume export VOL[@SNAP] FILE|-` and `pontoon volume import
//! FILE|- VOL`: a volume or snapshot as a raw image, and back.
//!
//! Export asks each object's primary which ranges hold data (the
//! changed-extents query from nothing: metadata only) and reads only
//! those; a file is written sparsely, standard output gets the zeros.
//! Import creates the volume (the file's size rounded up to 4 KiB; from
//! standard input it grows as data arrives and is cut to size at the end),
//! skips all-zero blocks so the volume stays thin, and removes the volume
//! again if the import fails. Both keep at most [`IN_FLIGHT`] objects of
//! [`CHUNK`] bytes in flight.

use std::rc::Rc;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use pontoon_buf::AlignedBuf;
use pontoon_client::DiffView;
use pontoon_client::{Client, Volume};
use pontoon_cluster::MapStore;
use pontoon_types::{BLOCK_SIZE, format_size};

use crate::cluster_args::ClusterArgs;
use crate::volume_io::{
    CHUNK, IN_FLIGHT, ImageWriter, Output, check_volume, data_runtime, find, open_input, or_remove,
    parse_spec, progress, read_full, report, wait_for_size,
};

/// Size a volume imported from standard input starts at (it doubles as
/// data arrives, and is cut to the data's size at the end).
const STDIN_START: u64 = 1 << 30;

/// `pontoon volume export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// VOLUME or VOLUME@SNAPSHOT.
    spec: String,
    /// Output file, or `-` for standard output.
    file: String,
}

/// `pontoon volume import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Input file (a raw image), or `-` for standard input.
    file: String,
    /// Name of the volume to create (it must not exist).
    volume: String,
    /// Pool (default: the only pool, if there is exactly one).
    #[arg(long, value_name = "POOL")]
    pool: Option<String>,
}

/// Runs `volume export`.
pub fn export(cluster: &ClusterArgs, a: ExportArgs) -> Result<()> {
    let (volume, snap) = parse_spec(&a.spec)?;
    let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
    let size = {
        let map = feed.current();
        let (v, s) = find(&map, volume, snap)?;
        s.map_or(v.size_bytes, |s| s.size_bytes)
    };
    let out = Output::open(&a.file)?;
    let to_stdout = out.is_stdout();
    let bar = progress(&format!("exporting {}", a.spec), Some(size));
    let written = (|| {
        let mut writer = ImageWriter::new(out, size)?;
        data_runtime()?.block_on(async {
            let vol = Client::new(feed.clone()).open(&a.spec)?;
            let vol = &vol;
            let mut objects = futures::stream::iter(0..vol.objects_in(size))
                .map(|i| vol.read_changes(i, DiffView::Nothing))
                .buffered(IN_FLIGHT);
            while let Some(changes) = objects.next().await {
                for (offset, data) in changes?.into_iter().flat_map(|c| c.data) {
                    writer.write_at(offset, &data)?;
                }
                bar.inc(vol.object_size());
            }
            Ok::<_, anyhow::Error>(())
        })?;
        writer.finish(size)
    })();
    or_remove(&a.file, written)?;
    bar.finish_and_clear();
    feed.shutdown();
    report(
        to_stdout,
        &format!("exported {} ({}) to {}", a.spec, format_size(size), a.file),
    );
    Ok(())
}

/// Runs `volume import`.
pub fn import(cluster: &ClusterArgs, a: ImportArgs) -> Result<()> {
    check_volume(&a.volume)?;
    let (mut input, file_size) = open_input(&a.file)?;
    if file_size == Some(0) {
        bail!("{} is empty: a volume needs at least 4 KiB", a.file);
    }
    let rt = crate::runtime()?;
    let (store, _) = rt.block_on(cluster.connect())?;
    let start = file_size.map_or(STDIN_START, |s| s.next_multiple_of(BLOCK_SIZE as u64));
    let (rec, pool) = rt.block_on(pontoon_mgr::admin::create_volume(
        &store,
        &a.volume,
        start,
        a.pool.as_deref(),
        "--pool",
    ))?;
    let done = (|| {
        let (feed, _) = cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
        let r = copy_in(
            &rt,
            &store,
            &feed,
            &a,
            &mut *input,
            file_size,
            rec.size_bytes,
        );
        feed.shutdown();
        r
    })();
    match done {
        Ok(size) => {
            println!(
                "imported {} into volume {} ({} in pool {pool})",
                a.file,
                a.volume,
                format_size(size)
            );
            Ok(())
        }
        Err(e) => {
            let removed = match rt.block_on(store.remove_volume(&a.volume)) {
                Ok(_) => "removed again".to_string(),
                Err(r) => format!("could not be removed ({r}): remove it by hand"),
            };
            Err(anyhow!(
                "import failed: {e:#}; volume {} {removed}",
                a.volume
            ))
        }
    }
}

/// Copies the input into the new volume; returns its final size.
fn copy_in(
    rt: &tokio::runtime::Runtime,
    store: &MapStore,
    feed: &std::sync::Arc<pontoon_client::MapFeed>,
    a: &ImportArgs,
    input: &mut dyn std::io::Read,
    file_size: Option<u64>,
    created: u64,
) -> Result<u64> {
    let name = a.volume.as_str();
    wait_for_size(feed, name, created)?;
    let bar = progress(&format!("importing {}", a.file), file_size);
    let mut size = created;
    let end = data_runtime()?.block_on(async {
        let vol = Rc::new(Client::new(feed.clone()).open(name)?);
        let mut inflight = FuturesUnordered::new();
        let mut offset = 0u64;
        loop {
            while inflight.len() >= IN_FLIGHT {
                if let Some(r) = inflight.next().await {
                    r?;
                }
            }
            let mut chunk = AlignedBuf::zeroed(CHUNK as usize);
            let n = read_full(input, &mut chunk)?;
            if n == 0 {
                break;
            }
            let len = (n as u64).next_multiple_of(BLOCK_SIZE as u64);
            chunk.set_len(len as usize);
            if offset + len > size {
                // Standard input outgrew the volume: wait for what is in
                // flight, then double it.
                while let Some(r) = inflight.next().await {
                    r?;
                }
                size = (size * 2).max(offset + len);
                rt.block_on(store.resize_volume(name, size, false))?;
                wait_for_size(feed, name, size)?;
            }
            bar.inc(n as u64);
            let vol = vol.clone();
            inflight.push(async move { write_nonzero(&vol, offset, &chunk).await });
            offset += len;
        }
        while let Some(r) = inflight.next().await {
            r?;
        }
        Ok::<_, anyhow::Error>(offset)
    })?;
    bar.finish_and_clear();
    if end == 0 {
        bail!("the input is empty: a volume needs at least 4 KiB");
    }
    if end < size {
        // Only ever written below `end`: nothing is lost.
        rt.block_on(store.resize_volume(name, end, true))
            .context("cutting the volume to the data's size")?;
    }
    Ok(end)
}

/// Writes the runs of `data` (at `offset`) that are not all zeros.
async fn write_nonzero(vol: &Volume, offset: u64, data: &[u8]) -> Result<()> {
    for (start, end) in nonzero_runs(data) {
        vol.write_at(offset + start as u64, &data[start..end])
            .await?;
    }
    Ok(())
}

/// Byte ranges of `data`'s 4 KiB blocks that hold a non-zero byte, merged.
pub fn nonzero_runs(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, block) in data.chunks(BLOCK_SIZE).enumerate() {
        if block.iter().all(|b| *b == 0) {
            continue;
        }
        let s = i * BLOCK_SIZE;
        let e = s + block.len();
        match out.last_mut() {
            Some(r) if r.1 == s => r.1 = e,
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blocks_with_data_are_written() {
        let mut d = vec![0u8; 5 * BLOCK_SIZE];
        d[BLOCK_SIZE + 7] = 1;
        d[2 * BLOCK_SIZE] = 2;
        d[5 * BLOCK_SIZE - 1] = 3;
        assert_eq!(
            nonzero_runs(&d),
            vec![
                (BLOCK_SIZE, 3 * BLOCK_SIZE),
                (4 * BLOCK_SIZE, 5 * BLOCK_SIZE)
            ]
        );
        assert!(nonzero_runs(&[0u8; 8192]).is_empty());
    }
}
