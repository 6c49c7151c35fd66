//! `pontoon bench --nvmf ADDR --nqn NQN`: the same closed-loop benchmark
//! through an NVMe/TCP target, driven by the crate's test initiator (one
//! blocking thread per I/O queue, each keeping its share of the queue
//! depth in flight). Reports IOPS, latency percentiles, our own CPU per
//! I/O and, for a local cluster, the target's (gateway plus OSDs).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use pontoon_nvmf::command::io_op;
use pontoon_nvmf::initiator::{Controller, ControllerOptions, Queue, check, rw_sqe};
use pontoon_store::latency_histogram;

use crate::cmd_bench::Rw;
use crate::cpu;
use crate::load::Rng;

/// LBA size the target reports.
const LBA: u64 = 4096;

/// What the NVMe/TCP run measured.
pub struct Measured {
    /// Completed I/Os.
    pub ios: u64,
    /// Seconds the load ran.
    pub seconds: f64,
    /// Latencies in nanoseconds.
    pub hist: Histogram<u64>,
    /// Our process's CPU per I/O, µs.
    pub client_cpu_us_per_io: f64,
}

/// What to run.
pub struct Plan<'a> {
    /// Target address.
    pub addr: SocketAddr,
    /// Subsystem.
    pub nqn: &'a str,
    /// Our host NQN (must be allowed unless the target allows any host).
    pub hostnqn: &'a str,
    /// Namespace.
    pub nsid: u32,
    /// I/O queues (threads).
    pub queues: usize,
    /// Total commands in flight.
    pub qd: usize,
    /// Access pattern.
    pub rw: Rw,
    /// Percent reads for randrw.
    pub rwmix: u64,
    /// Bytes per I/O.
    pub bs: u64,
    /// Limit to the first `span` bytes (None: the whole namespace).
    pub span: Option<u64>,
    /// Run time.
    pub duration: Duration,
}

/// Connects, runs the load and disconnects.
pub fn run(plan: &Plan<'_>, progress: &AtomicU64) -> Result<Measured> {
    if plan.queues == 0 || plan.queues > plan.qd {
        bail!("--queues must be between 1 and --qd");
    }
    let mut opts = ControllerOptions::new(plan.nqn, plan.hostnqn);
    opts.io_queues = plan.queues;
    opts.queue_size = u16::try_from(plan.qd.div_ceil(plan.queues) + 1)
        .context("queue depth too large")?
        .max(2);
    let mut ctrl = Controller::connect_with(plan.addr, opts)
        .with_context(|| format!("connecting to {} at {}", plan.nqn, plan.addr))?;
    let ns = ctrl
        .identify_namespace(plan.nsid)
        .with_context(|| format!("identifying namespace {}", plan.nsid))?;
    if ns.block_size() != Some(LBA) {
        bail!("namespace {} does not have 4 KiB blocks", plan.nsid);
    }
    let size = ns.nsze * LBA;
    let span = plan.span.map_or(size, |s| s.min(size));
    let blocks = span / plan.bs;
    if blocks == 0 {
        bail!(
            "namespace {} ({size} bytes) is smaller than one I/O",
            plan.nsid
        );
    }
    let queues = ctrl.take_io_queues();
    if queues.len() < plan.queues {
        bail!(
            "the target granted {} I/O queues of the {} asked for",
            queues.len(),
            plan.queues
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cpu0 = cpu::process_cpu();
    let t0 = Instant::now();
    let deadline = t0 + plan.duration;
    let results: Vec<Result<Histogram<u64>>> = thread::scope(|s| {
        let handles: Vec<_> = queues
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let qd = plan.qd / plan.queues + usize::from(i < plan.qd % plan.queues);
                let stop = stop.clone();
                let job = Job {
                    nsid: plan.nsid,
                    rw: plan.rw,
                    rwmix: plan.rwmix,
                    bs: plan.bs,
                    blocks,
                    qd,
                    seq_start: blocks / plan.queues as u64 * i as u64,
                    seed: i as u64 + 1,
                };
                s.spawn(move || {
                    let r = job.run(q, deadline, &stop, progress);
                    if r.is_err() {
                        stop.store(true, Ordering::Release);
                    }
                    r
                })
            })
            .collect();
        // The admin queue keeps the controller alive meanwhile.
        while Instant::now() < deadline && !stop.load(Ordering::Acquire) {
            thread::sleep(Duration::from_millis(200));
            if let Err(e) = ctrl.keep_alive() {
                stop.store(true, Ordering::Release);
                return vec![Err(anyhow!("keep alive: {e}"))];
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("benchmark thread panicked")))
            })
            .collect()
    });
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu::process_cpu() - cpu0;
    let mut hist = latency_histogram();
    for r in results {
        hist.add(r?).context("merging histograms")?;
    }
    let _ = ctrl.shutdown();
    let ios = hist.len();
    Ok(Measured {
        ios,
        seconds,
        hist,
        client_cpu_us_per_io: if ios == 0 {
            0.0
        } else {
            cpu.as_secs_f64() * 1e6 / ios as f64
        },
    })
}

/// One queue's share of the load.
struct Job {
    nsid: u32,
    rw: Rw,
    rwmix: u64,
    bs: u64,
    blocks: u64,
    qd: usize,
    seq_start: u64,
    seed: u64,
}

impl Job {
    fn run(
        &self,
        mut q: Queue,
        deadline: Instant,
        stop: &AtomicBool,
        progress: &AtomicU64,
    ) -> Result<Histogram<u64>> {
        let mut hist = latency_histogram();
        let mut rng = Rng::new(self.seed);
        let data = vec![0x5au8; self.bs as usize];
        let nlb = (self.bs / LBA) as u32;
        let mut seq = self.seq_start;
        let mut started: HashMap<u16, Instant> = HashMap::with_capacity(self.qd);
        let mut issue =
            |q: &mut Queue, rng: &mut Rng, started: &mut HashMap<u16, Instant>| -> Result<()> {
                let (block, read) = match self.rw {
                    Rw::Randread => (rng.below(self.blocks), true),
                    Rw::Randwrite => (rng.below(self.blocks), false),
                    Rw::Randrw => (rng.below(self.blocks), rng.below(100) < self.rwmix),
                    Rw::Read | Rw::Write => {
                        seq += 1;
                        (seq % self.blocks, self.rw == Rw::Read)
                    }
                };
                let slba = block * u64::from(nlb);
                let (op, out, inlen) = if read {
                    (io_op::READ, None, self.bs as usize)
                } else {
                    (io_op::WRITE, Some(&data[..]), 0)
                };
                let cid = q.submit(rw_sqe(op, self.nsid, slba, nlb, false)?, out, inlen)?;
                started.insert(cid, Instant::now());
                Ok(())
            };
        for _ in 0..self.qd {
            issue(&mut q, &mut rng, &mut started)?;
        }
        while !started.is_empty() {
            let c = q.reap()?;
            let t = started
                .remove(&c.cqe.cid)
                .ok_or_else(|| anyhow!("completion for unknown command {}", c.cqe.cid))?;
            check(&c.cqe).map_err(|e| anyhow!("I/O failed: {e}"))?;
            let _ = hist.record(t.elapsed().as_nanos() as u64);
            progress.fetch_add(1, Ordering::Relaxed);
            if Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                issue(&mut q, &mut rng, &mut started)?;
            }
        }
        Ok(hist)
    }
}

/// The pid of a local cluster's NVMe/TCP gateway, from DIR/run/nvmf.pid.
pub fn gateway_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("run").join("nvmf.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
