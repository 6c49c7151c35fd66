//! `pontoon store-bench`: the device store against raw fio on the same
//! filesystem, in one run: 4 KiB random read and durable random write at
//! queue depth 1 and 32, with IOPS, latency percentiles, CPU per I/O and
//! the ratios.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use pontoon_buf::AlignedBuf;
use pontoon_store::{FileDevice, FormatOptions, Store, StoreStats};
use pontoon_types::{ObjectId, Version, format_size, parse_size};
use serde::Serialize;

use crate::fio::{self, Measured};
use crate::load::{self, Progress};

/// Arguments of `pontoon store-bench`.
#[derive(clap::Args, Debug)]
pub struct StoreBenchArgs {
    /// Store file to create; the raw fio file is created beside it as FILE.fio.
    #[arg(long)]
    pub path: PathBuf,
    /// Size of the store file (the raw file and working set are half of it).
    #[arg(long, default_value = "2G")]
    pub size: String,
    /// Put the store's journal on this file or device (the write-buffer tier).
    #[arg(long)]
    pub journal: Option<PathBuf>,
    /// Size of the journal file when --journal names a new file.
    #[arg(long, default_value = "256M")]
    pub journal_size: String,
    /// Measured time per test, e.g. 10s or 1m.
    #[arg(long, default_value = "10s")]
    pub runtime: String,
    /// Tests to run (comma separated): randread-qd1, randread-qd32, randwrite-qd1, randwrite-qd32.
    #[arg(long, value_delimiter = ',')]
    pub tests: Option<Vec<String>>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Keep the benchmark files afterwards.
    #[arg(long)]
    pub keep: bool,
}

/// Parses a duration such as `10s`, `500ms`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .parse()
        .with_context(|| format!("bad duration {s:?} (try 10s, 500ms, 2m)"))?;
    if !(v > 0.0 && v < 1e7) {
        bail!("duration {s:?} out of range");
    }
    Ok(Duration::from_secs_f64(v * mult))
}

#[derive(Serialize)]
struct TestResult {
    name: &'static str,
    queue_depth: usize,
    raw: Measured,
    store: Measured,
    /// Raw fio without O_DSYNC, for writes (what the device does without durability).
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_nosync: Option<Measured>,
    iops_ratio: f64,
    mean_latency_ratio: f64,
    cpu_ratio: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    write_amplification: Option<f64>,
    /// Group commits that waited for the flusher to free journal space, and for how long.
    journal_full_waits: u64,
    journal_full_wait_ms: f64,
}

#[derive(Serialize)]
struct Report {
    store_file: String,
    raw_file: String,
    journal: Option<String>,
    size_bytes: u64,
    working_set_bytes: u64,
    runtime_s: f64,
    tests: Vec<TestResult>,
    store_open_ms: f64,
}

const TESTS: [(&str, bool, usize); 4] = [
    ("randread-qd1", false, 1),
    ("randread-qd32", false, 32),
    ("randwrite-qd1", true, 1),
    ("randwrite-qd32", true, 32),
];

/// Runs the benchmark.
pub fn run(args: StoreBenchArgs) -> Result<()> {
    fio::ensure_tool("fio", "fio")?;
    let size = parse_size(&args.size).with_context(|| format!("bad --size {:?}", args.size))?;
    let runtime = parse_duration(&args.runtime)?;
    let object_size: u64 = 4 << 20;
    let working = (size / 2) / object_size * object_size;
    if working < object_size * 4 {
        bail!(
            "--size {} is too small for a meaningful benchmark (use at least 64M)",
            args.size
        );
    }
    let selected: Vec<(&str, bool, usize)> = match &args.tests {
        None => TESTS.to_vec(),
        Some(names) => {
            let mut v = Vec::new();
            for n in names {
                match TESTS.iter().find(|t| t.0 == n) {
                    Some(t) => v.push(*t),
                    None => bail!(
                        "unknown test {n:?}; choose from randread-qd1, randread-qd32, randwrite-qd1, randwrite-qd32"
                    ),
                }
            }
            v
        }
    };
    let raw_path = PathBuf::from(format!("{}.fio", args.path.display()));
    if let Some(dir) = args.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let say = |m: &str| {
        if !args.json {
            eprintln!("{m}");
        }
    };

    say(&format!(
        "laying out the raw file {} ({}) and the store file {} ({})",
        raw_path.display(),
        format_size(working),
        args.path.display(),
        format_size(size)
    ));
    let fio_base = |rw: &str, qd: usize, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--name=raw",
            &format!("--filename={}", raw_path.display()),
            &format!("--size={working}"),
            "--ioengine=io_uring",
            "--direct=1",
            &format!("--rw={rw}"),
            "--bs=4k",
            &format!("--iodepth={qd}"),
            "--norandommap",
            "--randrepeat=0",
            "--time_based",
            &format!("--runtime={}ms", runtime.as_millis()),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    // Lay the raw file out with real data, as the store is prefilled.
    fio::run(
        &[
            "--name=layout".to_string(),
            format!("--filename={}", raw_path.display()),
            format!("--size={working}"),
            "--ioengine=io_uring".into(),
            "--direct=1".into(),
            "--rw=write".into(),
            "--bs=1M".into(),
            "--iodepth=8".into(),
        ],
        true,
    )?;
    FileDevice::create_file(&args.path, size).context("creating the store file")?;
    let journal_size = parse_size(&args.journal_size).context("bad --journal-size")?;
    if let Some(j) = &args.journal {
        let is_file = std::fs::metadata(j).map(|m| m.is_file()).unwrap_or(true);
        if is_file {
            FileDevice::create_file(j, journal_size).context("creating the journal file")?;
        }
    }

    let rt = compio::runtime::Runtime::new().context("starting io_uring (is io_uring enabled?)")?;
    let report = rt.block_on(async {
        let dev = FileDevice::open(&args.path)?;
        let jdev = args.journal.as_deref().map(FileDevice::open).transpose()?;
        Store::format(&dev, jdev.as_ref(), &FormatOptions::default()).await?;
        drop((dev, jdev));
        let (store, open_ms) = open_store(&args.path, args.journal.as_deref()).await?;
        say(&format!("prefilling {} of the store", format_size(working)));
        prefill(&store, working, object_size).await?;
        store.checkpoint().await?;
        let objects = working / object_size;
        let version = Rc::new(Cell::new(1u64));
        let mut tests = Vec::new();
        for (name, write, qd) in selected {
            say(&format!("{name}: raw fio..."));
            let raw = if write {
                fio::run(&fio_base("randwrite", qd, &["--sync=dsync"]), true)?
            } else {
                fio::run(&fio_base("randread", qd, &[]), false)?
            };
            let raw_nosync = if write {
                say(&format!("{name}: raw fio without sync..."));
                Some(fio::run(&fio_base("randwrite", qd, &[]), true)?)
            } else {
                None
            };
            say(&format!("{name}: store..."));
            let before: StoreStats = store.stats();
            let store_m = store_load(
                &store,
                write,
                qd,
                runtime,
                objects,
                object_size,
                version.clone(),
            )
            .await?;
            let after = store.stats();
            let wa = write.then(|| {
                let user = after.user_bytes_written - before.user_bytes_written;
                let dev = after.device_bytes_written - before.device_bytes_written;
                dev as f64 / user.max(1) as f64
            });
            tests.push(TestResult {
                name,
                queue_depth: qd,
                iops_ratio: store_m.iops / raw.iops,
                mean_latency_ratio: store_m.mean_us / raw.mean_us,
                cpu_ratio: store_m.cpu_us_per_io / raw.cpu_us_per_io,
                raw,
                store: store_m,
                raw_nosync,
                write_amplification: wa,
                journal_full_waits: after.journal_full_waits - before.journal_full_waits,
                journal_full_wait_ms: (after.journal_full_wait - before.journal_full_wait)
                    .as_secs_f64()
                    * 1000.0,
            });
        }
        store.close().await?;
        anyhow::Ok(Report {
            store_file: args.path.display().to_string(),
            raw_file: raw_path.display().to_string(),
            journal: args.journal.as_ref().map(|p| p.display().to_string()),
            size_bytes: size,
            working_set_bytes: working,
            runtime_s: runtime.as_secs_f64(),
            tests,
            store_open_ms: open_ms,
        })
    })?;
    if !args.keep {
        let _ = std::fs::remove_file(&raw_path);
        let _ = std::fs::remove_file(&args.path);
        if let Some(j) = &args.journal
            && std::fs::metadata(j).map(|m| m.is_file()).unwrap_or(false)
        {
            let _ = std::fs::remove_file(j);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

async fn open_store(path: &Path, journal: Option<&Path>) -> Result<(Store<FileDevice>, f64)> {
    let dev = FileDevice::open(path)?;
    let jdev = journal.map(FileDevice::open).transpose()?;
    let (store, bg) = Store::open(dev, jdev, 0).await?;
    compio::runtime::spawn(bg).detach();
    let ms = store.stats().open_duration.as_secs_f64() * 1000.0;
    Ok((store, ms))
}

async fn prefill(store: &Store<FileDevice>, working: u64, object_size: u64) -> Result<()> {
    let chunk: u64 = 1 << 20;
    let next = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(compio::runtime::spawn(async move {
            loop {
                let at = next.get();
                if at >= working {
                    return anyhow::Ok(());
                }
                next.set(at + chunk);
                let oid = ObjectId::new(1, at / object_size);
                let mut data = AlignedBuf::for_read(chunk as usize);
                for (i, b) in data.chunks_mut(8).enumerate() {
                    b.copy_from_slice(&pontoon_types::mix64(at + i as u64).to_le_bytes());
                }
                store
                    .write(oid, at % object_size, data, Version::new(1, 0))
                    .await?;
            }
        }));
    }
    for t in tasks {
        t.await
            .map_err(|_| anyhow::anyhow!("prefill task panicked"))??;
    }
    Ok(())
}

async fn store_load(
    store: &Store<FileDevice>,
    write: bool,
    qd: usize,
    runtime: Duration,
    objects: u64,
    object_size: u64,
    version: Rc<Cell<u64>>,
) -> Result<Measured> {
    let blocks_per_object = object_size / 4096;
    let store = store.clone();
    let pattern = Rc::new(AlignedBuf::copy_from(&[0x5au8; 4096]));
    let (m, _) = load::run(
        qd,
        runtime,
        4096,
        Rc::new(Progress::default()),
        move |rng| {
            let store = store.clone();
            let version = version.clone();
            let pattern = pattern.clone();
            async move {
                let (obj, blk) = {
                    let mut r = rng.borrow_mut();
                    (r.below(objects), r.below(blocks_per_object))
                };
                let oid = ObjectId::new(1, obj);
                if write {
                    let v = version.get() + 1;
                    version.set(v);
                    let mut data = AlignedBuf::copy_from(&pattern);
                    data[..8].copy_from_slice(&v.to_le_bytes());
                    store
                        .write(oid, blk * 4096, data, Version::new(2, v))
                        .await?;
                } else {
                    store.read(oid, blk * 4096, 4096).await?;
                }
                Ok(())
            }
        },
    )
    .await?;
    Ok(m)
}

fn print_report(r: &Report) {
    println!();
    println!(
        "Pontoon store vs raw fio — 4 KiB random I/O, {} s per test, working set {}, same filesystem",
        r.runtime_s,
        format_size(r.working_set_bytes)
    );
    println!(
        "store: {}  raw: {}  journal: {}",
        r.store_file,
        r.raw_file,
        r.journal.as_deref().unwrap_or("on the data device")
    );
    println!();
    println!(
        "{:<16} {:>10} {:>10} {:>6}  {:>28}  {:>28}  {:>8} {:>8} {:>6}",
        "test",
        "raw IOPS",
        "store IOPS",
        "ratio",
        "raw lat µs mean/p50/p99/p99.9",
        "store lat µs mean/p50/p99/p99.9",
        "raw CPU",
        "store CPU",
        "ratio"
    );
    for t in &r.tests {
        let lat = |m: &Measured| {
            format!(
                "{:.0}/{:.0}/{:.0}/{:.0}",
                m.mean_us, m.p50_us, m.p99_us, m.p999_us
            )
        };
        println!(
            "{:<16} {:>10.0} {:>10.0} {:>6.2}  {:>28}  {:>28}  {:>8.1} {:>8.1} {:>6.2}",
            t.name,
            t.raw.iops,
            t.store.iops,
            t.iops_ratio,
            lat(&t.raw),
            lat(&t.store),
            t.raw.cpu_us_per_io,
            t.store.cpu_us_per_io,
            t.cpu_ratio
        );
    }
    println!();
    println!(
        "raw = fio io_uring direct=1 (writes with --sync=dsync: each write durable, as the store's are);"
    );
    println!("CPU = user+system µs per I/O of the fio process / of the store process.");
    for t in r.tests.iter().filter(|t| t.raw_nosync.is_some()) {
        let ns = t.raw_nosync.as_ref().map(|m| m.iops).unwrap_or(0.0);
        println!(
            "{}: against raw fio without sync ({:.0} IOPS, not durable) the store reaches {:.2}x; write amplification {:.2}; journal-full waits {} ({:.0} ms)",
            t.name,
            ns,
            t.store.iops / ns.max(1.0),
            t.write_amplification.unwrap_or(0.0),
            t.journal_full_waits,
            t.journal_full_wait_ms
        );
    }
    println!(
        "store open (checkpoint load + journal replay): {:.1} ms",
        r.store_open_ms
    );
}
