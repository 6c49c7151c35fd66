//! A closed-loop load generator on the current (compio) thread: `qd`
//! workers each issue one operation at a time for a fixed duration; the
//! result carries IOPS, latency percentiles and our process's CPU per op.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use pontoon_store::latency_histogram;

use crate::cpu;
use crate::fio::Measured;

/// A tiny, fast per-worker random source (xorshift64*).
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Self(pontoon_types::mix64(seed) | 1)
    }

    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Live progress, read by a reporter while the load runs.
#[derive(Default)]
pub struct Progress {
    /// Operations completed so far.
    pub ios: Cell<u64>,
    /// Bytes moved so far.
    pub bytes: Cell<u64>,
}

/// Runs `qd` workers calling `op(worker_rng)` for `duration`; the first
/// error stops the run and is returned.
pub async fn run<F, Fut>(
    qd: usize,
    duration: Duration,
    bytes_per_op: u64,
    progress: Rc<Progress>,
    op: F,
) -> Result<(Measured, Histogram<u64>)>
where
    F: Fn(Rc<RefCell<Rng>>) -> Fut + 'static,
    Fut: Future<Output = Result<()>> + 'static,
{
    let op = Rc::new(op);
    let hist = Rc::new(RefCell::new(latency_histogram()));
    let stop = Rc::new(Cell::new(false));
    let error: Rc<RefCell<Option<anyhow::Error>>> = Rc::default();
    let cpu0 = cpu::process_cpu();
    let t0 = Instant::now();
    let mut workers = Vec::with_capacity(qd);
    for w in 0..qd {
        let (op, hist, stop, error, progress) = (
            op.clone(),
            hist.clone(),
            stop.clone(),
            error.clone(),
            progress.clone(),
        );
        let rng = Rc::new(RefCell::new(Rng::new(w as u64 + 1)));
        workers.push(compio::runtime::spawn(async move {
            while !stop.get() {
                let t = Instant::now();
                if let Err(e) = op(rng.clone()).await {
                    error.borrow_mut().get_or_insert(e);
                    stop.set(true);
                    break;
                }
                let _ = hist.borrow_mut().record(t.elapsed().as_nanos() as u64);
                progress.ios.set(progress.ios.get() + 1);
                progress.bytes.set(progress.bytes.get() + bytes_per_op);
            }
        }));
    }
    let deadline = t0 + duration;
    while Instant::now() < deadline && !stop.get() {
        compio::time::sleep(
            Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
    }
    stop.set(true);
    for w in workers {
        let _ = w.await;
    }
    let elapsed = t0.elapsed();
    let cpu = cpu::process_cpu() - cpu0;
    if let Some(e) = error.borrow_mut().take() {
        return Err(e);
    }
    let h = hist.borrow().clone();
    let ios = h.len();
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    let m = Measured {
        iops: ios as f64 / elapsed.as_secs_f64(),
        mean_us: h.mean() / 1000.0,
        p50_us: q(0.5),
        p99_us: q(0.99),
        p999_us: q(0.999),
        cpu_us_per_io: if ios == 0 {
            0.0
        } else {
            cpu.as_secs_f64() * 1e6 / ios as f64
        },
        ios,
    };
    Ok((m, h))
}

/// The live progress line a benchmark rewrites every half second.
pub struct ProgressLine {
    t0: Instant,
    last_ios: u64,
    last_t: Instant,
    bytes_per_op: u64,
}

impl ProgressLine {
    /// Starts the clock.
    pub fn new(bytes_per_op: u64) -> Self {
        let now = Instant::now();
        Self {
            t0: now,
            last_ios: 0,
            last_t: now,
            bytes_per_op,
        }
    }

    /// Prints the rate since the last call, given the operations done so far.
    pub fn update(&mut self, ios: u64) {
        let now = Instant::now();
        let rate = (ios - self.last_ios) as f64 / (now - self.last_t).as_secs_f64();
        eprint!(
            "\r  {:5.1}s  {:>9.0} IOPS  {:>8.1} MB/s  {:>10} ops",
            (now - self.t0).as_secs_f64(),
            rate,
            rate * self.bytes_per_op as f64 / 1e6,
            ios
        );
        (self.last_ios, self.last_t) = (ios, now);
    }
}
