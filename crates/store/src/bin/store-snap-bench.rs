//! Snapshot cost benchmark: 4 KiB random writes on one store slice with 0,
//! 1 and 10 snapshots, each snapshot taken after a full overwrite of the
//! working set, measured right after the last snapshot (so the writes pay
//! the first-write-after-snapshot ownership transfer).
//!
//! Usage: store-snap-bench FILE|mem [WORKING_MIB] [SECONDS] [SNAPSHOT_COUNTS]
//! (defaults 128, 10, "0,1,10"). The file is created (and overwritten) at
//! each step; it needs (counts + 3) x the working set and 1 GiB more.
//! `mem` runs on the in-memory device instead: no device time, so the
//! figures are the store's own CPU cost per write.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_buf::AlignedBuf;
use pontoon_store::{BlockDevice, FileDevice, FormatOptions, MemDevice, Store};
use pontoon_types::{BLOCK_SIZE, ObjectId, Version, VolumeId, mix64};

const OBJECT_SIZE: u64 = 4 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: store-snap-bench FILE [WORKING_MIB] [SECONDS] [SNAPSHOT_COUNTS]");
        std::process::exit(2);
    }
    let path = std::path::PathBuf::from(&args[1]);
    let working: u64 = args.get(2).map_or(128, |s| s.parse().expect("working MiB")) << 20;
    let secs: u64 = args.get(3).map_or(10, |s| s.parse().expect("seconds"));
    let counts: Vec<u64> = args
        .get(4)
        .map_or("0,1,10", |s| s.as_str())
        .split(',')
        .map(|s| s.parse().expect("snapshot count"))
        .collect();
    let rt = compio::runtime::Runtime::new().expect("io_uring runtime");
    println!("snapshots  qd  IOPS      mean_us  p50_us  p99_us  p99.9_us  snap_MiB  wamp");
    let mem = args[1] == "mem";
    for &n in &counts {
        let size = working * (n + 3) + (1 << 30);
        if mem {
            rt.block_on(run(MemDevice::new(size), working, secs, n));
        } else {
            let _ = std::fs::remove_file(&path);
            FileDevice::create_file(&path, size).expect("create store file");
            let dev = FileDevice::open(&path).expect("open");
            rt.block_on(run(dev, working, secs, n));
        }
    }
    if !mem {
        let _ = std::fs::remove_file(&path);
    }
}

async fn run<D: BlockDevice + 'static>(dev: D, working: u64, secs: u64, n: u64) {
    {
        {
            let opts = FormatOptions {
                object_size: OBJECT_SIZE,
                ..Default::default()
            };
            Store::format(&dev, None, &opts).await.expect("format");
            let (store, bg) = Store::open(dev, None, 0).await.expect("open store");
            compio::runtime::spawn(bg).detach();
            let version = Rc::new(Cell::new(1u64));
            overwrite(&store, working, 0, &version).await;
            for seq in 1..=n {
                // Snapshot `seq` is taken here: later writes carry it.
                if seq < n {
                    overwrite(&store, working, seq, &version).await;
                }
            }
            store.checkpoint().await.expect("checkpoint");
            for qd in [32usize, 1] {
                store.reset_latency();
                let before = store.stats();
                let t = Duration::from_secs(if qd == 1 { secs.div_ceil(2) } else { secs });
                let ops = random_writes(&store, working, n, qd, t, &version).await;
                let st = store.stats();
                let l = &st.write_latency;
                let snap_blocks: u64 = store
                    .volume_usage()
                    .iter()
                    .map(|(_, u)| u.snap_blocks)
                    .sum();
                let dev = st.device_bytes_written - before.device_bytes_written;
                let user = st.user_bytes_written - before.user_bytes_written;
                println!(
                    "{n:>9}  {qd:>2}  {:>8.0}  {:>7.1}  {:>6.1}  {:>6.1}  {:>8.1}  {:>8}  {:.2}",
                    ops as f64 / t.as_secs_f64(),
                    l.mean_us,
                    l.p50_us,
                    l.p99_us,
                    l.p999_us,
                    (snap_blocks * BLOCK_SIZE as u64) >> 20,
                    dev as f64 / user.max(1) as f64,
                );
            }
            let u = store.snap_usage(VolumeId(1));
            if !u.is_empty() {
                let t0 = Instant::now();
                let live: Vec<u64> = Vec::new();
                let p = store
                    .trim_snaps(VolumeId(1), &live, n, usize::MAX)
                    .await
                    .expect("trim");
                let dt = t0.elapsed().as_secs_f64();
                println!(
                    "           trim of all {n} snapshots: {} objects, {} clones, {} MiB freed in {:.0} ms ({:.0} MiB/s)",
                    p.objects,
                    p.clones,
                    (p.freed_blocks * BLOCK_SIZE as u64) >> 20,
                    dt * 1e3,
                    ((p.freed_blocks * BLOCK_SIZE as u64) >> 20) as f64 / dt
                );
            }
            store.close().await.expect("close");
        }
    }
}

/// Writes the whole working set in 1 MiB writes under `seq`.
async fn overwrite<D: BlockDevice + 'static>(
    store: &Store<D>,
    working: u64,
    seq: u64,
    version: &Rc<Cell<u64>>,
) {
    let chunk: u64 = 1 << 20;
    let next = Rc::new(Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (store, next, version) = (store.clone(), next.clone(), version.clone());
        tasks.push(compio::runtime::spawn(async move {
            loop {
                let at = next.get();
                if at >= working {
                    return;
                }
                next.set(at + chunk);
                let mut data = AlignedBuf::for_read(chunk as usize);
                for (i, b) in data.chunks_mut(8).enumerate() {
                    b.copy_from_slice(&mix64(at ^ (seq << 40) ^ i as u64).to_le_bytes());
                }
                let v = version.get() + 1;
                version.set(v);
                let oid = ObjectId::new(1, at / OBJECT_SIZE);
                store
                    .write_snap(oid, at % OBJECT_SIZE, data, Version::new(1, v), seq)
                    .await
                    .expect("overwrite");
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// 4 KiB random writes at queue depth `qd` for `t`; returns operations.
async fn random_writes<D: BlockDevice + 'static>(
    store: &Store<D>,
    working: u64,
    seq: u64,
    qd: usize,
    t: Duration,
    version: &Rc<Cell<u64>>,
) -> u64 {
    let end = Instant::now() + t;
    let done = Rc::new(Cell::new(0u64));
    let blocks = working / BLOCK_SIZE as u64;
    let mut tasks = Vec::new();
    for w in 0..qd {
        let (store, done, version) = (store.clone(), done.clone(), version.clone());
        tasks.push(compio::runtime::spawn(async move {
            let mut x = mix64(w as u64 + 77);
            while Instant::now() < end {
                x = mix64(x);
                let b = x % blocks;
                let mut data = AlignedBuf::copy_from(&[0x5au8; BLOCK_SIZE]);
                data[..8].copy_from_slice(&x.to_le_bytes());
                let v = version.get() + 1;
                version.set(v);
                let oid = ObjectId::new(1, b * BLOCK_SIZE as u64 / OBJECT_SIZE);
                store
                    .write_snap(
                        oid,
                        b * BLOCK_SIZE as u64 % OBJECT_SIZE,
                        data,
                        Version::new(2, v),
                        seq,
                    )
                    .await
                    .expect("write");
                done.set(done.get() + 1);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    done.get()
}
