//! `pontoon store-startup`: how long a store holding many objects takes to
//! open, after a clean close (checkpoint load) and after a crash (checkpoint
//! load plus journal replay).

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use pontoon_buf::AlignedBuf;
use pontoon_store::{FileDevice, FormatOptions, Store};
use pontoon_types::{BLOCK_SIZE_U64, ObjectId, Version, format_size};
use serde::Serialize;

/// Arguments of `pontoon store-startup`.
#[derive(Args, Debug)]
pub struct StoreStartupArgs {
    /// Store file to create (overwritten).
    #[arg(long)]
    pub path: PathBuf,
    /// Objects to create, one 4 KiB block each.
    #[arg(long, default_value_t = 1_000_000)]
    pub objects: u64,
    /// Objects written after the last checkpoint before the simulated crash.
    #[arg(long, default_value_t = 20_000)]
    pub unflushed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Keep the store file afterwards.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Serialize)]
struct Report {
    objects: u64,
    store_bytes: u64,
    fill_seconds: f64,
    clean_open_ms: f64,
    crash_open_ms: f64,
    crash_replayed_records: u64,
    crash_journal_bytes: u64,
    objects_after_crash: u64,
}

const WRITERS: usize = 32;

/// Runs the measurement.
pub fn run(args: StoreStartupArgs) -> Result<()> {
    if args.objects == 0 {
        bail!("--objects must be at least 1");
    }
    // Data for every object twice over (the flusher needs room to move
    // journaled blocks home), plus the journal and checkpoints.
    let size = (args.objects * BLOCK_SIZE_U64 * 2 + (1 << 30)).next_multiple_of(1 << 20);
    if let Some(dir) = args.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let say = |m: &str| {
        if !args.json {
            eprintln!("{m}");
        }
    };
    say(&format!(
        "creating {} ({}) for {} one-block objects",
        args.path.display(),
        format_size(size),
        args.objects
    ));
    FileDevice::create_file(&args.path, size).context("creating the store file")?;
    let rt = compio::runtime::Runtime::new().context("starting io_uring (is io_uring enabled?)")?;
    let report = rt.block_on(async {
        let dev = FileDevice::open(&args.path)?;
        Store::format(&dev, None, &FormatOptions::default()).await?;
        let (store, bg) = Store::open(dev, None, 0).await?;
        compio::runtime::spawn(bg).detach();

        let started = Instant::now();
        fill(&store, 1, args.objects, &say).await?;
        let fill_seconds = started.elapsed().as_secs_f64();
        store.close().await?;

        say("reopening after a clean close...");
        let (store, bg) = Store::open(FileDevice::open(&args.path)?, None, 0).await?;
        compio::runtime::spawn(bg).detach();
        let clean = store.stats();
        if clean.objects != args.objects {
            bail!(
                "reopened store holds {} objects, expected {}",
                clean.objects,
                args.objects
            );
        }
        store.checkpoint().await?;
        // Overwrite some objects after the checkpoint and stop without
        // closing: the next open must replay them from the journal.
        let unflushed = args.unflushed.min(args.objects);
        fill(&store, 2, unflushed, &|_: &str| {}).await?;
        let journal_bytes = store.stats().journal_used_bytes;
        drop(store);

        say("reopening after a crash (journal replay)...");
        let (store, bg) = Store::open(FileDevice::open(&args.path)?, None, 0).await?;
        compio::runtime::spawn(bg).detach();
        let crash = store.stats();
        store.close().await?;
        anyhow::Ok(Report {
            objects: args.objects,
            store_bytes: size,
            fill_seconds,
            clean_open_ms: clean.open_duration.as_secs_f64() * 1e3,
            crash_open_ms: crash.open_duration.as_secs_f64() * 1e3,
            crash_replayed_records: crash.replayed_records,
            crash_journal_bytes: journal_bytes,
            objects_after_crash: crash.objects,
        })
    })?;
    if !args.keep {
        let _ = std::fs::remove_file(&args.path);
    }
    if report.objects_after_crash != report.objects {
        bail!(
            "after the crash the store holds {} objects, expected {}",
            report.objects_after_crash,
            report.objects
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "store with {} objects ({}): filled in {:.1} s",
            report.objects,
            format_size(report.store_bytes),
            report.fill_seconds
        );
        println!(
            "open after clean close (checkpoint load):            {:8.1} ms",
            report.clean_open_ms
        );
        println!(
            "open after crash (checkpoint + {:6} records, {}): {:8.1} ms",
            report.crash_replayed_records,
            format_size(report.crash_journal_bytes),
            report.crash_open_ms
        );
    }
    Ok(())
}

/// Writes one block to objects `0..count` at versions of `epoch`, `WRITERS` at a time.
async fn fill(store: &Store<FileDevice>, epoch: u64, count: u64, say: &dyn Fn(&str)) -> Result<()> {
    let next = Rc::new(Cell::new(0));
    let end = count;
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(compio::runtime::spawn(async move {
            loop {
                let i = next.get();
                if i >= end {
                    return anyhow::Ok(());
                }
                next.set(i + 1);
                let data =
                    AlignedBuf::copy_from(&pontoon_types::mix64(i).to_le_bytes().repeat(512));
                store
                    .write(ObjectId::new(7, i), 0, data, Version::new(epoch, i))
                    .await?;
            }
        }));
    }
    let mut last = Instant::now();
    loop {
        if next.get() >= end {
            break;
        }
        compio::time::sleep(std::time::Duration::from_millis(200)).await;
        if last.elapsed().as_secs() >= 5 {
            say(&format!("  {} / {count} objects written", next.get()));
            last = Instant::now();
        }
    }
    for t in tasks {
        t.await
            .map_err(|_| anyhow::anyhow!("writer task panicked"))??;
    }
    Ok(())
}
