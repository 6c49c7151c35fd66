//! `pontoon bench`: a closed-loop load generator over the client library
//! (or, with `--nvmf`, through an NVMe/TCP target: see
//! [`crate::nvmf_bench`]), with live progress and HDR-histogram latency
//! percentiles. Beside the client's own CPU per I/O it reports the OSD
//! processes' (and the gateway's) when the cluster is a local one whose pid
//! files it can read.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use pontoon_client::Client;
use pontoon_types::parse_size;
use serde::Serialize;

use crate::cluster_args::{ClusterArgs, parse_duration};
use crate::load::{self, Progress, ProgressLine};
use crate::nvmf_bench;

/// The access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Uniformly random reads.
    Randread,
    /// Uniformly random writes.
    Randwrite,
    /// Random reads and writes, `--rwmix` percent reads.
    Randrw,
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
}

/// Arguments of `pontoon bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Where to find the cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Volume to load (through the client library).
    #[arg(long, required_unless_present = "nvmf")]
    pub volume: Option<String>,
    /// Instead of the client library: an NVMe/TCP target's address.
    #[arg(long, requires = "nqn", conflicts_with_all = ["volume", "fill"])]
    pub nvmf: Option<std::net::SocketAddr>,
    /// With --nvmf: the subsystem NQN.
    #[arg(long)]
    pub nqn: Option<String>,
    /// With --nvmf: our host NQN (must be on the subsystem's allow-list).
    #[arg(long, default_value = "nqn.2026-11.io.pontoon:bench")]
    pub hostnqn: String,
    /// With --nvmf: the namespace id.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// With --nvmf: I/O queues (one thread each), sharing --qd.
    #[arg(long, default_value_t = 1)]
    pub queues: usize,
    /// Access pattern.
    #[arg(long, value_enum, default_value = "randread")]
    pub rw: Rw,
    /// Block size (multiple of 4 KiB).
    #[arg(long, default_value = "4k")]
    pub bs: String,
    /// Requests in flight.
    #[arg(long, default_value_t = 32)]
    pub qd: usize,
    /// How long to run, e.g. 20s.
    #[arg(long, default_value = "20s")]
    pub time: String,
    /// Percent reads for randrw.
    #[arg(long, default_value_t = 70)]
    pub rwmix: u64,
    /// Limit the I/O to the first SIZE bytes of the volume.
    #[arg(long)]
    pub span: Option<String>,
    /// Instead of a timed run: write every block of the span once
    /// (sequentially, `--qd` at a time) and stop, e.g. to prefill a volume.
    #[arg(long)]
    pub fill: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    volume: String,
    rw: Rw,
    bs: u64,
    qd: usize,
    seconds: f64,
    iops: f64,
    mb_per_s: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    client_cpu_us_per_io: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    osd_cpu_us_per_io: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway_cpu_us_per_io: Option<f64>,
}

/// Runs the benchmark.
pub fn run(args: BenchArgs) -> Result<()> {
    let bs = parse_size(&args.bs).with_context(|| format!("bad --bs {:?}", args.bs))?;
    if bs == 0 || bs % 4096 != 0 || bs > 16 << 20 {
        bail!("--bs must be a multiple of 4k up to 16M, not {}", args.bs);
    }
    if args.qd == 0 || args.qd > 1024 {
        bail!("--qd must be between 1 and 1024");
    }
    if args.rwmix > 100 {
        bail!("--rwmix is a percentage (0-100)");
    }
    let duration = parse_duration(&args.time).map_err(|e| anyhow::anyhow!("bad --time: {e}"))?;
    if let Some(addr) = args.nvmf {
        return run_nvmf(&args, addr, bs, duration);
    }
    let volume = args.volume.clone().unwrap_or_default();
    let (feed, target) = args.cluster.feed(pontoon_cluster::auth::ADMIN_ENTITY)?;
    let osd_pids = target.dir.as_deref().map(osd_pids).unwrap_or_default();
    let rt = compio::runtime::Runtime::new().context("starting io_uring")?;
    let result = rt.block_on(async {
        let client = Client::new(feed.clone());
        let vol = client.open(&volume)?;
        let size = vol.current_size();
        let span = match &args.span {
            Some(s) => parse_size(s)
                .with_context(|| format!("bad --span {s:?}"))?
                .min(size),
            None => size,
        };
        let blocks = span / bs;
        if blocks == 0 {
            bail!("volume {volume} ({size} bytes) is smaller than one {bs}-byte block");
        }
        let data = Rc::new(vec![0x5au8; bs as usize]);
        if args.fill {
            let t0 = Instant::now();
            fill(&vol, blocks, bs, args.qd, &data).await?;
            let secs = t0.elapsed().as_secs_f64();
            if !args.json {
                eprintln!(
                    "filled {} of {} in {secs:.1} s ({:.0} MB/s)",
                    pontoon_types::format_size(blocks * bs),
                    volume,
                    (blocks * bs) as f64 / secs / 1e6
                );
            }
            return Ok(None);
        }
        let next_seq = Rc::new(Cell::new(0u64));
        let progress = Rc::new(Progress::default());
        let reporter = (!args.json).then(|| {
            let progress = progress.clone();
            compio::runtime::spawn(async move {
                let mut line = ProgressLine::new(bs);
                loop {
                    compio::time::sleep(Duration::from_millis(500)).await;
                    line.update(progress.ios.get());
                }
            })
        });
        let cpu0 = cpu_seconds(&osd_pids);
        let rw = args.rw;
        let rwmix = args.rwmix;
        let (m, hist) = load::run(args.qd, duration, bs, progress, move |rng| {
            let (vol, data, next_seq) = (vol.clone(), data.clone(), next_seq.clone());
            async move {
                let (block, read) = {
                    let mut r = rng.borrow_mut();
                    match rw {
                        Rw::Randread => (r.below(blocks), true),
                        Rw::Randwrite => (r.below(blocks), false),
                        Rw::Randrw => (r.below(blocks), r.below(100) < rwmix),
                        Rw::Read | Rw::Write => {
                            let s = next_seq.get();
                            next_seq.set(s + 1);
                            (s % blocks, rw == Rw::Read)
                        }
                    }
                };
                if read {
                    vol.read_at(block * bs, bs).await?;
                } else {
                    vol.write_at(block * bs, &data).await?;
                }
                Ok(())
            }
        })
        .await?;
        drop(reporter);
        let osd_cpu = cpu_us_per_io(cpu0, cpu_seconds(&osd_pids), m.ios);
        Ok(Some((m, hist.max() as f64 / 1000.0, osd_cpu)))
    })?;
    let Some((m, max_us, osd_cpu)) = result else {
        feed.shutdown();
        return Ok(());
    };
    if !args.json {
        eprintln!();
    }
    feed.shutdown();
    let r = Report {
        volume,
        rw: args.rw,
        bs,
        qd: args.qd,
        seconds: duration.as_secs_f64(),
        iops: m.iops,
        mb_per_s: m.iops * bs as f64 / 1e6,
        mean_us: m.mean_us,
        p50_us: m.p50_us,
        p99_us: m.p99_us,
        p999_us: m.p999_us,
        max_us,
        client_cpu_us_per_io: m.cpu_us_per_io,
        osd_cpu_us_per_io: osd_cpu,
        gateway_cpu_us_per_io: None,
    };
    print_report(&r, args.json)
}

/// `--nvmf`: the load through an NVMe/TCP target.
fn run_nvmf(
    args: &BenchArgs,
    addr: std::net::SocketAddr,
    bs: u64,
    duration: Duration,
) -> Result<()> {
    let nqn = args.nqn.as_deref().unwrap_or_default();
    let span = match &args.span {
        Some(s) => Some(parse_size(s).with_context(|| format!("bad --span {s:?}"))?),
        None => None,
    };
    // A local cluster (if one is named) tells whose CPU to count.
    let dir = args.cluster.resolve().ok().and_then(|t| t.dir);
    let osd = dir.as_deref().map(osd_pids).unwrap_or_default();
    let gateway: Vec<u32> = dir
        .as_deref()
        .and_then(nvmf_bench::gateway_pid)
        .into_iter()
        .collect();
    let (osd0, gw0) = (cpu_seconds(&osd), cpu_seconds(&gateway));
    let progress = std::sync::atomic::AtomicU64::new(0);
    let plan = nvmf_bench::Plan {
        addr,
        nqn,
        hostnqn: &args.hostnqn,
        nsid: args.nsid,
        queues: args.queues,
        qd: args.qd,
        rw: args.rw,
        rwmix: args.rwmix,
        bs,
        span,
        duration,
    };
    let running = std::sync::atomic::AtomicBool::new(true);
    let m = std::thread::scope(|s| {
        let reporter = (!args.json).then(|| {
            s.spawn(|| {
                let mut line = ProgressLine::new(bs);
                while running.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(500));
                    line.update(progress.load(std::sync::atomic::Ordering::Relaxed));
                }
            })
        });
        let m = nvmf_bench::run(&plan, &progress);
        running.store(false, std::sync::atomic::Ordering::Release);
        if let Some(r) = reporter {
            let _ = r.join();
            eprintln!();
        }
        m
    })?;
    let h = &m.hist;
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    let iops = m.ios as f64 / m.seconds;
    let r = Report {
        volume: format!("{nqn} ns {}", args.nsid),
        rw: args.rw,
        bs,
        qd: args.qd,
        seconds: m.seconds,
        iops,
        mb_per_s: iops * bs as f64 / 1e6,
        mean_us: h.mean() / 1000.0,
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: h.max() as f64 / 1000.0,
        client_cpu_us_per_io: m.client_cpu_us_per_io,
        osd_cpu_us_per_io: cpu_us_per_io(osd0, cpu_seconds(&osd), m.ios),
        gateway_cpu_us_per_io: cpu_us_per_io(gw0, cpu_seconds(&gateway), m.ios),
    };
    print_report(&r, args.json)
}

fn print_report(r: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    println!(
        "{} {:?} bs={} qd={} {:.0}s: {:.0} IOPS, {:.1} MB/s",
        r.volume, r.rw, r.bs, r.qd, r.seconds, r.iops, r.mb_per_s
    );
    println!(
        "latency µs: mean {:.0}  p50 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}",
        r.mean_us, r.p50_us, r.p99_us, r.p999_us, r.max_us
    );
    let mut cpu = format!("CPU µs per I/O: client {:.1}", r.client_cpu_us_per_io);
    if let Some(o) = r.osd_cpu_us_per_io {
        cpu += &format!(", OSDs {o:.1}");
    }
    if let Some(g) = r.gateway_cpu_us_per_io {
        cpu += &format!(", gateway {g:.1}");
    }
    println!("{cpu}");
    Ok(())
}

/// Writes blocks `0..blocks` once each, `qd` at a time.
async fn fill(
    vol: &pontoon_client::Volume,
    blocks: u64,
    bs: u64,
    qd: usize,
    data: &Rc<Vec<u8>>,
) -> Result<()> {
    let next = Rc::new(Cell::new(0u64));
    let workers = (0..qd).map(|_| {
        let (vol, next, data) = (vol.clone(), next.clone(), data.clone());
        async move {
            loop {
                let b = next.get();
                if b >= blocks {
                    return Ok::<(), anyhow::Error>(());
                }
                next.set(b + 1);
                vol.write_at(b * bs, &data).await?;
            }
        }
    });
    futures::future::try_join_all(workers).await?;
    Ok(())
}

/// Pids of a local cluster's OSDs, from DIR/run/osd.<id>.pid.
fn osd_pids(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir.join("run")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("osd.") && n.ends_with(".pid")
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// CPU microseconds per I/O from two [`cpu_seconds`] readings.
fn cpu_us_per_io(before: Option<f64>, after: Option<f64>, ios: u64) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if ios > 0 => Some((b - a) * 1e6 / ios as f64),
        _ => None,
    }
}

/// User+system seconds of all `pids` (None if any is unreadable or none
/// given): the OSDs' or the gateway's CPU time.
fn cpu_seconds(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut total = 0.0;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) in parentheses.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = f.get(11)?.parse().ok()?;
        let stime: f64 = f.get(12)?.parse().ok()?;
        total += (utime + stime) / hz;
    }
    Some(total)
}
