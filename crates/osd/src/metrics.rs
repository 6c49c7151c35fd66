//! The OSD's Prometheus series.
//!
//! Each shard counts what it does in its own [`ShardMetrics`]: the client
//! operations it serves as primary (count, bytes, failures and a latency
//! histogram per operation), replica sub-operations, recovery and scrub.
//! Only the shard's thread writes them, with relaxed loads and stores (no
//! lock, no locked instruction, no allocation per I/O); a scrape reads
//! them from the metrics task, together with each shard's report (store
//! counters and space, PG states), and [`render`]s the OSD's series.
//!
//! `--metrics off` (or `PONTOON_OSD_OP_METRICS=0`) turns the per-I/O
//! counting off, for measuring what it costs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pontoon_cluster::PgState;
use pontoon_metrics::hist::{LocalCounter, OpSnapshot};
use pontoon_metrics::{Exposition, Op, OpStats, labels};
use pontoon_proto::{Message, Status};
use pontoon_types::OsdId;

use crate::daemon::pg_reports;
use crate::shard::ShardReport;

/// What one shard counts (written by the shard's thread alone).
#[derive(Debug, Default)]
pub struct ShardMetrics {
    enabled: bool,
    /// Client operations served as primary.
    ops: OpStats,
    /// Replica sub-operations applied (writes, discards, recovery pushes).
    subops: LocalCounter,
    /// Bytes those carried.
    subop_bytes: LocalCounter,
    /// Objects whose recovery completed here as primary.
    recovery_objects: LocalCounter,
    /// Bytes of object copies recovery installed (pushed or pulled).
    recovery_bytes: LocalCounter,
    /// Object copies refused as too large or malformed (per attempt).
    recovery_refused: LocalCounter,
    /// Objects scrub compared.
    scrub_objects: LocalCounter,
    /// Of those, objects whose copies differed.
    scrub_inconsistent: LocalCounter,
    /// Objects scrub repaired.
    scrub_repaired: LocalCounter,
    /// Requests refused for the peer's entity, key or caps.
    denied: LocalCounter,
}

impl ShardMetrics {
    /// Counters that count (unless `PONTOON_OSD_OP_METRICS=0`).
    pub fn new() -> Arc<Self> {
        let off = std::env::var("PONTOON_OSD_OP_METRICS").is_ok_and(|v| v == "0");
        Arc::new(Self {
            enabled: !off,
            ..Self::default()
        })
    }

    /// Counters that count nothing (`--metrics off`, tests).
    pub fn disabled() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Whether this counts.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The start of a client operation (`None` when not counting).
    #[inline]
    pub(crate) fn begin(&self) -> Option<Instant> {
        self.enabled.then(Instant::now)
    }

    /// The end of a client operation begun at `t0`, with its answer.
    #[inline]
    pub(crate) fn end(&self, t0: Option<Instant>, op: Op, bytes: u64, answer: &Message) {
        if let Some(t0) = t0 {
            let ok = matches!(answer, Message::Reply(r) if r.status == Status::Ok);
            self.ops.record_single_writer(op, bytes, ok, t0.elapsed());
        }
    }

    /// A replica sub-operation carrying `bytes`.
    #[inline]
    pub(crate) fn subop(&self, bytes: u64) {
        if self.enabled {
            self.subops.add(1);
            self.subop_bytes.add(bytes);
        }
    }

    /// A request was refused for its peer's entity, key or caps (counted
    /// even with per-op metrics off: it is rare and an operator wants it).
    /// Returns how many this shard has refused, this one included.
    pub(crate) fn denied(&self) -> u64 {
        self.denied.add(1);
        self.denied.get()
    }

    /// Recovery of an object finished (`objects` is 0 or 1) after
    /// installing `bytes` of copies.
    pub(crate) fn recovery(&self, objects: u64, bytes: u64) {
        self.recovery_objects.add(objects);
        self.recovery_bytes.add(bytes);
    }

    /// An object copy could not be sent or installed (over
    /// [`crate::copies::MAX_COPY_BYTES`], a layer's fields over one
    /// message, an install over a quarter of the journal, or malformed).
    pub(crate) fn recovery_refused(&self) {
        self.recovery_refused.add(1);
    }

    /// Scrub compared an object: whether its copies differed, whether it
    /// was repaired.
    pub(crate) fn scrubbed(&self, inconsistent: bool, repaired: bool) {
        self.scrub_objects.add(1);
        self.scrub_inconsistent.add(u64::from(inconsistent));
        self.scrub_repaired.add(u64::from(repaired));
    }
}

/// The operations an OSD serves as primary.
const OSD_OPS: [Op; 3] = [Op::Read, Op::Write, Op::Discard];

/// Adds the series of OSD `osd` from its shards' reports and counters.
pub fn add_osd_metrics(
    e: &mut Exposition,
    osd: OsdId,
    device_bytes: u64,
    reports: &[ShardReport],
    shards: &[Arc<ShardMetrics>],
) {
    let id = osd.0.to_string();
    let l = || labels(&[("osd", &id)]);
    let with = |k: &str, v: &str| labels(&[("osd", &id), (k, v)]);
    for op in OSD_OPS {
        let mut s = OpSnapshot::default();
        for m in shards {
            s.merge(&m.ops.snapshot(op));
        }
        let o = op.as_str();
        e.counter(
            "pontoon_osd_ops_total",
            "Client operations the OSD served as primary, by operation (failed ones included).",
            with("op", o),
            s.ops,
        );
        e.counter(
            "pontoon_osd_bytes_total",
            "Bytes of the client operations the OSD served successfully as primary, by operation.",
            with("op", o),
            s.bytes,
        );
        e.counter(
            "pontoon_osd_op_errors_total",
            "Client operations the OSD answered with an error (retries, fencing, no space, ...).",
            with("op", o),
            s.errors,
        );
        e.histogram(
            "pontoon_osd_op_duration_seconds",
            "Time from a client operation's dispatch on the primary until its answer \
             (replication to every member included).",
            with("op", o),
            s.latency,
        );
    }
    let sum = |f: &dyn Fn(&ShardMetrics) -> u64| shards.iter().map(|m| f(m)).sum::<u64>();
    e.counter(
        "pontoon_osd_subops_total",
        "Replica sub-operations the OSD applied for other primaries.",
        l(),
        sum(&|m| m.subops.get()),
    );
    e.counter(
        "pontoon_osd_subop_bytes_total",
        "Bytes of the replica sub-operations the OSD applied.",
        l(),
        sum(&|m| m.subop_bytes.get()),
    );
    {
        use pontoon_net::auth::counters as c;
        use std::sync::atomic::Ordering::Relaxed;
        e.counter(
            "pontoon_osd_connections_authenticated_total",
            "Connections that proved their entity's key (the cluster's ms_mode is not none).",
            l(),
            c::AUTHENTICATED.load(Relaxed),
        );
        for (reason, n) in [
            ("unknown_entity", &c::UNKNOWN_ENTITY),
            ("bad_proof", &c::BAD_PROOF),
            ("timeout", &c::TIMED_OUT),
            ("other", &c::REFUSED_OTHER),
            ("too_many_connections", &c::REFUSED_CONNECTIONS),
        ] {
            e.counter(
                "pontoon_osd_connections_refused_total",
                "Connections refused before any request: unknown or removed entity, a proof \
                 matching no key, no handshake in time, a wrong mode or claim, or the listener full.",
                with("reason", reason),
                n.load(Relaxed),
            );
        }
        e.counter(
            "pontoon_osd_frame_integrity_failures_total",
            "Frames that failed their integrity check (tampered or corrupted; the connection closed).",
            l(),
            c::INTEGRITY_FAILURES.load(Relaxed),
        );
    }
    e.counter(
        "pontoon_osd_requests_denied_total",
        "Requests the OSD refused because the peer's entity, key or caps did not allow them.",
        l(),
        sum(&|m| m.denied.get()),
    );
    e.counter(
        "pontoon_osd_recovery_objects_total",
        "Objects the OSD recovered as primary (every stale copy brought up to date).",
        l(),
        sum(&|m| m.recovery_objects.get()),
    );
    e.counter(
        "pontoon_osd_recovery_bytes_total",
        "Bytes of object copies the OSD's recovery installed on stale members.",
        l(),
        sum(&|m| m.recovery_bytes.get()),
    );
    e.counter(
        "pontoon_osd_recovery_refused_total",
        "Whole object copies (head and snapshot clones) recovery could not send or install: \
         over 256 MiB of data, a layer's fields over one message, an install over a quarter of \
         the journal, or malformed. The object stays missing on its stale members and is tried \
         again every recovery pass.",
        l(),
        sum(&|m| m.recovery_refused.get()),
    );
    e.counter(
        "pontoon_osd_scrub_objects_total",
        "Objects the OSD's scrubs compared across the acting set.",
        l(),
        sum(&|m| m.scrub_objects.get()),
    );
    e.counter(
        "pontoon_osd_scrub_inconsistent_objects_total",
        "Objects whose copies scrub found to differ.",
        l(),
        sum(&|m| m.scrub_inconsistent.get()),
    );
    e.counter(
        "pontoon_osd_scrub_repaired_objects_total",
        "Objects scrub repaired.",
        l(),
        sum(&|m| m.scrub_repaired.get()),
    );
    add_store_metrics(e, &id, device_bytes, reports);
}

fn add_store_metrics(e: &mut Exposition, id: &str, device_bytes: u64, reports: &[ShardReport]) {
    let l = || labels(&[("osd", id)]);
    let total = |f: &dyn Fn(&ShardReport) -> u64| reports.iter().map(f).sum::<u64>();
    let user_written = total(&|r| r.stats.user_bytes_written);
    let device_written = total(&|r| r.stats.device_bytes_written);
    let counters: [(&str, &str, u64); 12] = [
        (
            "pontoon_osd_user_written_bytes_total",
            "Bytes the OSD's stores were asked to write (client, replica and recovery writes).",
            user_written,
        ),
        (
            "pontoon_osd_user_read_bytes_total",
            "Bytes the OSD's stores returned to readers.",
            total(&|r| r.stats.user_bytes_read),
        ),
        (
            "pontoon_osd_device_written_bytes_total",
            "Bytes the OSD's stores wrote to their devices (journal, data, moves, checkpoints); \
             divided by pontoon_osd_user_written_bytes_total it is the write amplification.",
            device_written,
        ),
        (
            "pontoon_osd_journal_records_total",
            "Journal records (group commits) written.",
            total(&|r| r.stats.records),
        ),
        (
            "pontoon_osd_journal_full_waits_total",
            "Group commits that waited for the flusher to free journal space.",
            total(&|r| r.stats.journal_full_waits),
        ),
        (
            "pontoon_osd_device_flushes_total",
            "Explicit device flushes issued.",
            total(&|r| r.stats.device_flushes),
        ),
        (
            "pontoon_osd_checkpoints_total",
            "Checkpoints of the object map completed.",
            total(&|r| r.stats.checkpoints),
        ),
        (
            "pontoon_osd_checksum_errors_total",
            "Blocks read that did not match their checksum.",
            total(&|r| r.stats.checksum_errors),
        ),
        (
            "pontoon_osd_reclaimed_objects_total",
            "Objects of removed volumes and stray copies deleted.",
            total(&|r| r.reclaim.deleted_objects),
        ),
        (
            "pontoon_osd_snap_trim_objects_total",
            "Objects whose clones of removed snapshots snap trim removed.",
            total(&|r| r.snap_trim.trimmed_objects),
        ),
        (
            "pontoon_osd_snap_trim_clones_total",
            "Clones of removed snapshots snap trim removed.",
            total(&|r| r.snap_trim.trimmed_clones),
        ),
        (
            "pontoon_osd_snap_trim_freed_bytes_total",
            "Bytes of data blocks snap trim freed (held only by removed snapshots).",
            total(&|r| r.snap_trim.freed_blocks) * pontoon_types::BLOCK_SIZE_U64,
        ),
    ];
    for (name, help, v) in counters {
        e.counter(name, help, l(), v);
    }
    for (cause, v) in [
        ("journal", total(&|r| r.stats.journal_bytes_written)),
        ("redirect", total(&|r| r.stats.row_bytes_written)),
        ("move", total(&|r| r.stats.moved_bytes_written)),
        ("checkpoint", total(&|r| r.stats.checkpoint_bytes_written)),
    ] {
        e.counter(
            "pontoon_osd_device_written_cause_bytes_total",
            "Bytes written to the devices, by cause: journal records, redirect-on-write data, \
             journaled data moved to the data area, checkpoints.",
            labels(&[("osd", id), ("cause", cause)]),
            v,
        );
    }
    e.gauge(
        "pontoon_osd_write_amplification_ratio",
        "Device bytes written per user byte written since the OSD started (0 before any write).",
        l(),
        if user_written == 0 {
            0.0
        } else {
            device_written as f64 / user_written as f64
        },
    );
    let journal = total(&|r| r.stats.journal_bytes);
    let journal_used = total(&|r| r.stats.journal_used_bytes);
    let gauges: [(&str, &str, u64); 10] = [
        (
            "pontoon_osd_device_size_bytes",
            "Size of the OSD's data device.",
            device_bytes,
        ),
        (
            "pontoon_osd_data_size_bytes",
            "Bytes of the device's data areas.",
            total(&|r| r.stats.capacity_bytes),
        ),
        (
            "pontoon_osd_data_used_bytes",
            "Bytes holding data (data areas plus journaled blocks not yet moved).",
            total(&|r| r.stats.used_bytes),
        ),
        (
            "pontoon_osd_data_free_bytes",
            "Bytes still available for new data.",
            total(&|r| r.stats.free_bytes),
        ),
        (
            "pontoon_osd_journal_size_bytes",
            "Size of the journal rings.",
            journal,
        ),
        (
            "pontoon_osd_journal_used_bytes",
            "Journal bytes not yet trimmed.",
            journal_used,
        ),
        (
            "pontoon_osd_objects",
            "Objects the OSD's stores hold (primary and replica copies).",
            total(&|r| r.stats.objects),
        ),
        (
            "pontoon_osd_reclaim_pending_objects",
            "Objects of removed volumes and stray copies still to delete.",
            total(&|r| r.reclaim.pending_objects),
        ),
        (
            "pontoon_osd_snap_trim_pending_volumes",
            "Volumes snap trim still has to look at, summed over the OSD's shards.",
            total(&|r| r.snap_trim.pending_volumes),
        ),
        (
            "pontoon_osd_shards",
            "Shards (threads, store slices) of the OSD.",
            reports.len() as u64,
        ),
    ];
    for (name, help, v) in gauges {
        e.gauge_u64(name, help, l(), v);
    }
    e.gauge(
        "pontoon_osd_journal_fill_ratio",
        "Part of the journal rings not yet trimmed (the flusher starts at a quarter).",
        l(),
        if journal == 0 {
            0.0
        } else {
            journal_used as f64 / journal as f64
        },
    );
    // PGs this OSD leads, by state; and their recovery and scrub state.
    let mut states: Vec<(PgState, u64)> = Vec::new();
    let (mut degraded, mut missing, mut scrubbing, mut unrecoverable) = (0, 0, 0, 0);
    for r in reports {
        for p in pg_reports(&r.pgs) {
            match states.iter_mut().find(|(s, _)| *s == p.state) {
                Some((_, n)) => *n += 1,
                None => states.push((p.state, 1)),
            }
            degraded += p.degraded_objects;
            missing += p.missing_objects;
            scrubbing += u64::from(p.scrub.progress.is_some());
            unrecoverable += p.scrub.unrecoverable_objects;
        }
    }
    // Every state, so a state that empties shows 0 rather than vanishing.
    for state in PgState::ALL {
        let n = states
            .iter()
            .find(|(s, _)| *s == state)
            .map_or(0, |(_, n)| *n);
        e.gauge_u64(
            "pontoon_osd_primary_pgs",
            "PGs the OSD is the primary of, by state.",
            labels(&[("osd", id), ("state", state.as_str())]),
            n,
        );
    }
    let more: [(&str, &str, u64); 4] = [
        (
            "pontoon_osd_degraded_objects",
            "Objects of the OSD's primary PGs with fewer up-to-date copies than the pool's size.",
            degraded,
        ),
        (
            "pontoon_osd_missing_objects",
            "Objects of the OSD's primary PGs that some acting member still lacks.",
            missing,
        ),
        (
            "pontoon_osd_scrubbing_pgs",
            "Primary PGs being scrubbed now.",
            scrubbing,
        ),
        (
            "pontoon_osd_scrub_unrecoverable_objects",
            "Objects the last scrubs of the OSD's primary PGs found no good copy of.",
            unrecoverable,
        ),
    ];
    for (name, help, v) in more {
        e.gauge_u64(name, help, l(), v);
    }
    let unreachable: std::collections::BTreeSet<OsdId> = reports
        .iter()
        .flat_map(|r| r.unreachable.iter().copied())
        .collect();
    e.gauge_u64(
        "pontoon_osd_unreachable_peers",
        "Peers that have not answered the OSD's heartbeats within the grace.",
        l(),
        unreachable.len() as u64,
    );
}

/// How long a scrape waits for a shard's report before showing the OSD
/// without it.
pub const SCRAPE_SHARD_TIMEOUT: Duration = Duration::from_secs(2);
