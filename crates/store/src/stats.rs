//! Counters and latency histograms of one store slice.
//!
//! User bytes against device bytes give write amplification; the device
//! bytes are split by cause so that amplification can be explained.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Latency percentiles of one operation type, in microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Operations recorded.
    pub count: u64,
    /// Mean latency.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarises a histogram recorded in nanoseconds.
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Self {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// A latency histogram from 1 ns to 60 s with 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds are valid")
}

pub(crate) struct Counters {
    pub user_bytes_written: u64,
    pub user_bytes_read: u64,
    pub journal_bytes: u64,
    pub row_bytes: u64,
    pub moved_bytes: u64,
    pub checkpoint_bytes: u64,
    pub writes: u64,
    pub reads: u64,
    pub discards: u64,
    pub deletes: u64,
    pub records: u64,
    pub device_flushes: u64,
    pub checkpoints: u64,
    pub checksum_errors: u64,
    pub read_lat: Histogram<u64>,
    pub write_lat: Histogram<u64>,
    pub open_duration: Duration,
    pub replayed_records: u64,
    pub journal_full_waits: u64,
    pub journal_full_wait: Duration,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            user_bytes_written: 0,
            user_bytes_read: 0,
            journal_bytes: 0,
            row_bytes: 0,
            moved_bytes: 0,
            checkpoint_bytes: 0,
            writes: 0,
            reads: 0,
            discards: 0,
            deletes: 0,
            records: 0,
            device_flushes: 0,
            checkpoints: 0,
            checksum_errors: 0,
            read_lat: latency_histogram(),
            write_lat: latency_histogram(),
            open_duration: Duration::ZERO,
            replayed_records: 0,
            journal_full_waits: 0,
            journal_full_wait: Duration::ZERO,
        }
    }
}

/// What one volume holds in a slice: kept up to date on every write,
/// discard and delete, so reporting it costs no scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeUsage {
    /// Objects of the volume held.
    pub objects: u64,
    /// Allocated 4 KiB blocks of those objects' heads (after discards).
    pub blocks: u64,
    /// 4 KiB blocks that only snapshots still hold (owned by clones).
    pub snap_blocks: u64,
}

/// A snapshot of a slice's counters and space.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreStats {
    /// Objects held.
    pub objects: u64,
    /// Bytes of the data area.
    pub capacity_bytes: u64,
    /// Bytes holding user data (data area plus journaled blocks not yet moved).
    pub used_bytes: u64,
    /// Bytes still available for new data.
    pub free_bytes: u64,
    /// Of `used_bytes`, bytes only snapshots still hold (owned by clones).
    pub snapshot_bytes: u64,
    /// Checkpoint bytes of snapshot metadata (clones and holes beyond
    /// their blocks): it shares the checkpoint slot with the object table,
    /// and changes that would overflow the slot are refused (`NoSpace`).
    pub snapshot_meta_bytes: u64,
    /// Journal ring size in bytes.
    pub journal_bytes: u64,
    /// Journal bytes not yet trimmed.
    pub journal_used_bytes: u64,
    /// Bytes the callers asked to write.
    pub user_bytes_written: u64,
    /// Bytes returned to readers.
    pub user_bytes_read: u64,
    /// All bytes written to the device(s).
    pub device_bytes_written: u64,
    /// ... of which journal records (headers and inline data).
    pub journal_bytes_written: u64,
    /// ... of which redirect-on-write data.
    pub row_bytes_written: u64,
    /// ... of which journaled data moved to the data area.
    pub moved_bytes_written: u64,
    /// ... of which checkpoints.
    pub checkpoint_bytes_written: u64,
    /// Write operations completed.
    pub writes: u64,
    /// Read operations completed.
    pub reads: u64,
    /// Discards completed.
    pub discards: u64,
    /// Deletes completed.
    pub deletes: u64,
    /// Journal records written (group commits).
    pub records: u64,
    /// Explicit device flushes issued.
    pub device_flushes: u64,
    /// Checkpoints completed.
    pub checkpoints: u64,
    /// Reads that found a block not matching its checksum.
    pub checksum_errors: u64,
    /// Read latency.
    pub read_latency: LatencySummary,
    /// Write latency (until durable).
    pub write_latency: LatencySummary,
    /// How long opening (checkpoint load and journal replay) took.
    pub open_duration: Duration,
    /// Journal records replayed at open.
    pub replayed_records: u64,
    /// Group commits that had to wait for the flusher to free journal space.
    pub journal_full_waits: u64,
    /// Total time group commits waited for journal space.
    pub journal_full_wait: Duration,
}

impl StoreStats {
    /// Device bytes written per user byte written.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes_written == 0 {
            0.0
        } else {
            self.device_bytes_written as f64 / self.user_bytes_written as f64
        }
    }
}
