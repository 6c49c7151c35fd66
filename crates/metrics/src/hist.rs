//! Operation counters and latency histograms made of atomics.
//!
//! One [`OpStats`] per data-path thread (an OSD shard, a gateway worker's
//! volume): recording an operation is a handful of relaxed atomic adds on
//! memory only that thread writes, with no lock and no allocation. A
//! scrape reads every thread's set and sums them ([`HistogramSnapshot::merge`]).
//!
//! [`OpStats::record_single_writer`] goes one step further for threads that
//! are the only writer of their set (the OSD shards): a relaxed load and
//! store instead of a locked read-modify-write. Readers on other threads
//! still see whole values, never torn ones.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency buckets, in nanoseconds: 25 µs to 10 s.
pub const LATENCY_BOUNDS_NS: [u64; 17] = [
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

const SLOTS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// Adds `v` to `a`; only correct while one thread alone writes `a`.
#[inline]
fn add_single_writer(a: &AtomicU64, v: u64) {
    a.store(a.load(Relaxed).wrapping_add(v), Relaxed);
}

/// The bucket of a latency.
#[inline]
fn slot(ns: u64) -> usize {
    LATENCY_BOUNDS_NS.partition_point(|b| *b < ns)
}

/// A fixed-bucket latency histogram (buckets of [`LATENCY_BOUNDS_NS`] and
/// one above them), with the sum of the latencies.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; SLOTS],
    sum_ns: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    /// Records one latency (any number of threads may record).
    #[inline]
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[slot(ns)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// Records one latency; only while one thread alone records here.
    #[inline]
    pub fn record_single_writer(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        add_single_writer(&self.buckets[slot(ns)], 1);
        add_single_writer(&self.sum_ns, ns);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = Vec::with_capacity(SLOTS);
        let mut count = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            let n = b.load(Relaxed);
            count += n;
            let bound = LATENCY_BOUNDS_NS
                .get(i)
                .map_or(f64::INFINITY, |ns| *ns as f64 / 1e9);
            buckets.push((bound, n));
        }
        HistogramSnapshot {
            buckets,
            count,
            sum: self.sum_ns.load(Relaxed) as f64 / 1e9,
        }
    }
}

/// A histogram's counts at one moment: per bucket (upper bound in
/// seconds, observations in that bucket alone, not cumulative), the total
/// count and the sum in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, count in this bucket)`; the last bound is +Inf.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observations, in seconds.
    pub sum: f64,
}

impl HistogramSnapshot {
    /// Adds another snapshot with the same buckets (or an empty one).
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        if self.buckets.is_empty() {
            *self = other.clone();
            return;
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            mine.1 += theirs.1;
        }
        self.count += other.count;
        self.sum += other.sum;
    }
}

/// An operation as the metrics name it (label `op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A read.
    Read = 0,
    /// A write.
    Write = 1,
    /// A discard (deallocation, NBD TRIM, NVMe deallocate).
    Discard = 2,
    /// A flush.
    Flush = 3,
    /// A write of zeroes.
    WriteZeroes = 4,
}

impl Op {
    /// Every operation, in label order.
    pub const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Discard, Op::Flush, Op::WriteZeroes];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Discard => "discard",
            Op::Flush => "flush",
            Op::WriteZeroes => "write_zeroes",
        }
    }
}

/// Counters and a latency histogram per [`Op`]: operations completed,
/// bytes they moved (or covered, for discards), failures.
#[derive(Debug, Default)]
pub struct OpStats {
    ops: [AtomicU64; 5],
    bytes: [AtomicU64; 5],
    errors: [AtomicU64; 5],
    latency: [LatencyHistogram; 5],
}

/// What an [`OpStats`] holds for one operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpSnapshot {
    /// Operations completed (failed ones included).
    pub ops: u64,
    /// Bytes of the successful ones.
    pub bytes: u64,
    /// Failed ones.
    pub errors: u64,
    /// Their latency.
    pub latency: HistogramSnapshot,
}

impl OpSnapshot {
    /// Adds another thread's counts.
    pub fn merge(&mut self, o: &OpSnapshot) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.latency.merge(&o.latency);
    }
}

impl OpStats {
    /// Records one operation (any number of threads may record).
    #[inline]
    pub fn record(&self, op: Op, bytes: u64, ok: bool, took: Duration) {
        let i = op as usize;
        self.ops[i].fetch_add(1, Relaxed);
        if ok {
            self.bytes[i].fetch_add(bytes, Relaxed);
        } else {
            self.errors[i].fetch_add(1, Relaxed);
        }
        self.latency[i].record(took);
    }

    /// Records one operation; only while one thread alone records here.
    #[inline]
    pub fn record_single_writer(&self, op: Op, bytes: u64, ok: bool, took: Duration) {
        let i = op as usize;
        add_single_writer(&self.ops[i], 1);
        if ok {
            add_single_writer(&self.bytes[i], bytes);
        } else {
            add_single_writer(&self.errors[i], 1);
        }
        self.latency[i].record_single_writer(took);
    }

    /// The counts of `op`.
    pub fn snapshot(&self, op: Op) -> OpSnapshot {
        let i = op as usize;
        OpSnapshot {
            ops: self.ops[i].load(Relaxed),
            bytes: self.bytes[i].load(Relaxed),
            errors: self.errors[i].load(Relaxed),
            latency: self.latency[i].snapshot(),
        }
    }
}

/// A counter only one thread adds to (relaxed load and store, no locked
/// instruction); any thread may read it.
#[derive(Debug, Default)]
pub struct LocalCounter(AtomicU64);

impl LocalCounter {
    /// Adds `v`; only from the one writing thread.
    #[inline]
    pub fn add(&self, v: u64) {
        add_single_writer(&self.0, v);
    }

    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What counting one operation costs on the data path (two clock
    /// reads and the single-writer adds), in nanoseconds:
    /// `cargo test --profile ci -p pontoon-metrics -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cost_of_recording_one_operation() {
        let s = OpStats::default();
        let n = 10_000_000u64;
        let t0 = std::time::Instant::now();
        for i in 0..n {
            let start = std::time::Instant::now();
            let op = if i % 3 == 0 { Op::Write } else { Op::Read };
            s.record_single_writer(op, 4096, true, start.elapsed());
        }
        let ns = t0.elapsed().as_nanos() as f64 / n as f64;
        let total = s.snapshot(Op::Read).ops + s.snapshot(Op::Write).ops;
        assert_eq!(total, n);
        eprintln!("{ns:.1} ns per recorded operation (clock reads included)");
    }

    #[test]
    fn buckets_take_latencies_up_to_their_bound() {
        assert_eq!(slot(0), 0);
        assert_eq!(slot(25_000), 0);
        assert_eq!(slot(25_001), 1);
        assert_eq!(slot(10_000_000_000), 16);
        assert_eq!(slot(u64::MAX), 17);
        let s = OpStats::default();
        s.record(Op::Write, 4096, true, Duration::from_micros(80));
        s.record_single_writer(Op::Write, 4096, false, Duration::from_secs(20));
        let w = s.snapshot(Op::Write);
        assert_eq!((w.ops, w.bytes, w.errors), (2, 4096, 1));
        assert_eq!(w.latency.count, 2);
        assert_eq!(w.latency.buckets[2], (1e-4, 1));
        assert_eq!(w.latency.buckets[17].1, 1);
        assert!(w.latency.buckets[17].0.is_infinite());
        let mut sum = OpSnapshot::default();
        sum.merge(&w);
        sum.merge(&w);
        assert_eq!((sum.ops, sum.latency.count), (4, 4));
        assert_eq!(
            s.snapshot(Op::Read),
            OpSnapshot {
                latency: LatencyHistogram::default().snapshot(),
                ..Default::default()
            }
        );
    }
}
