//! The OSD's control loop: runs the life cycle ([`crate::life`]) against a
//! source of maps and leases and a set of shards. The daemon gives it etcd
//! and its shard threads; the simulator its own map, leases and shards.
//! The loop does the I/O the life cycle asks for and nothing else, so what
//! the simulator proves of the rules holds for the daemon.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pontoon_cluster::{ClusterMap, OsdIo, OsdReport, SnapSpaceReport, VolumeSpace};
use pontoon_types::{BLOCK_SIZE_U64, Epoch, OsdId, VolumeId};

use crate::daemon::{in_any_interval, pg_reports};
use crate::life::{Action, Input, Life, State};
use crate::shard::ShardReport;

/// How often the loop looks at the lease, ticks the life cycle and reports.
pub const TICK: Duration = Duration::from_millis(500);
/// Longest time between two writes of an unchanged report.
pub const REPORT_REFRESH: Duration = Duration::from_secs(10);

/// Where an OSD gets its maps and its lease, and sends its reports: etcd
/// for the daemon, the simulated cluster for the simulator.
pub trait MapSource {
    /// The newest map, if one newer than the last returned arrives before
    /// `until`; `Ok(None)` when `until` passes first. An error ends the loop.
    fn next_map(
        &mut self,
        until: Instant,
    ) -> impl Future<Output = Result<Option<Arc<ClusterMap>>, String>>;
    /// Revokes the lease a previous life of this OSD left behind.
    fn clear_previous_life(&mut self) -> impl Future<Output = Result<bool, String>>;
    /// Takes a new lease (then drops the one held, if any), marks the OSD
    /// alive with it, and returns the map epoch read after that with the
    /// lease's validity.
    fn take_lease(&mut self) -> impl Future<Output = Result<(Epoch, Instant), String>>;
    /// End of the held lease's validity; `None` if none is held or it was lost.
    fn lease_valid_until(&self) -> Option<Instant>;
    /// Revokes the held lease.
    fn give_up_lease(&mut self) -> impl Future<Output = ()>;
    /// Publishes a report.
    fn put_report(&mut self, report: &OsdReport) -> impl Future<Output = Result<(), String>>;
    /// The time now (virtual under the simulator).
    fn now(&self) -> Instant;
}

/// The OSD's shards as the control loop drives them.
pub trait ShardSet {
    /// Installs `map` on every shard.
    fn apply_map(&self, map: &Arc<ClusterMap>);
    /// Moves every shard's serving deadline, before returning.
    fn set_deadline(&self, until: Option<Instant>);
    /// Every shard's report; an error names a shard whose store failed or
    /// that did not answer.
    fn reports(&self) -> impl Future<Output = Result<Vec<ShardReport>, String>>;
}

/// How the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Exit {
    /// Stopped on request, lease given up.
    Stopped,
    /// A shard failed: the lease was given up; the process must end.
    Failed(String),
    /// The map source failed for good.
    SourceLost(String),
}

/// Runs OSD `me`'s life until it stops or fails. `may_follow_a_life`:
/// see [`Life::new`]. `first` is the map the source had at the start.
pub async fn run<S: MapSource, H: ShardSet>(
    me: OsdId,
    may_follow_a_life: bool,
    mut map: Arc<ClusterMap>,
    source: &mut S,
    shards: &H,
    stop: impl Fn() -> bool,
) -> Exit {
    let mut life = Life::new(may_follow_a_life);
    let mut todo: VecDeque<Action> = life.start().into();
    todo.extend(life.step(map_input(&map, me)));
    if *life.state() == State::WaitingSeenDown {
        tracing::info!(osd = %me, "waiting for the cluster to see this OSD's previous life down");
    }
    let mut last_report: Option<(OsdReport, Instant)> = None;
    let mut was_live = false;
    loop {
        while let Some(action) = todo.pop_front() {
            match action {
                Action::ClearPreviousLife => match source.clear_previous_life().await {
                    Ok(true) => {
                        tracing::info!(osd = %me, "revoked the lease of this OSD's previous life")
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(osd = %me, "revoking the previous life's lease: {e}"),
                },
                Action::TakeLease => {
                    let input = match source.take_lease().await {
                        Ok((epoch, valid_until)) => Input::LeaseGranted { epoch, valid_until },
                        Err(why) => {
                            tracing::debug!(osd = %me, "taking a lease: {why}");
                            Input::LeaseRefused { why }
                        }
                    };
                    todo.extend(life.step(input));
                }
                Action::GiveUpLease => source.give_up_lease().await,
                Action::ApplyMap => shards.apply_map(&map),
                Action::Deadline(until) => shards.set_deadline(until),
                Action::Report => match shards.reports().await {
                    Ok(r) => report(me, &map, &r, source, &mut last_report).await,
                    Err(why) => todo.extend(life.step(Input::ShardTrouble { why })),
                },
                Action::Exit { why } => {
                    return if matches!(life.state(), State::Stopping) {
                        tracing::info!(osd = %me, "stopped");
                        Exit::Stopped
                    } else {
                        Exit::Failed(why)
                    };
                }
            }
            log_change(me, &life, &mut was_live);
        }
        if stop() {
            todo.extend(life.step(Input::Stop));
            continue;
        }
        let until = source.now() + TICK;
        match source.next_map(until).await {
            Ok(Some(m)) if m.epoch > map.epoch => {
                tracing::debug!(osd = %me, epoch = %m.epoch, "new map");
                map = m;
                todo.extend(life.step(map_input(&map, me)));
            }
            Ok(_) => {}
            Err(why) => return Exit::SourceLost(why),
        }
        todo.extend(life.step(Input::Lease {
            valid_until: source.lease_valid_until(),
        }));
        todo.extend(life.step(Input::Tick { now: source.now() }));
    }
}

/// What the life cycle needs of a map.
fn map_input(map: &ClusterMap, me: OsdId) -> Input {
    Input::Map {
        epoch: map.epoch,
        in_acting: in_any_interval(map, me),
        held_down: map.osds.get(&me).is_some_and(|o| o.reported_down),
    }
}

/// Logs entering and leaving service, once each.
fn log_change(me: OsdId, life: &Life, was_live: &mut bool) {
    let live = life.is_live();
    if live == *was_live {
        return;
    }
    *was_live = live;
    match life.state() {
        State::Fenced { why, .. } => tracing::warn!(osd = %me, fenced = true, "fenced: {why}"),
        State::Live { .. } => tracing::warn!(osd = %me, fenced = false, "serving"),
        _ => {}
    }
}

/// Builds the OSD's report from its shards' and publishes it if it
/// changed or the last one is getting old (etcd keeps every revision
/// until compaction).
async fn report<S: MapSource>(
    me: OsdId,
    map: &ClusterMap,
    shards: &[ShardReport],
    source: &mut S,
    last: &mut Option<(OsdReport, Instant)>,
) {
    let mut pgs = Vec::new();
    let mut unreachable = BTreeSet::new();
    let mut volumes: BTreeMap<VolumeId, VolumeSpace> = BTreeMap::new();
    let mut snaps: BTreeMap<(VolumeId, u64), u64> = BTreeMap::new();
    let mut r = OsdReport {
        osd: me,
        epoch: map.epoch,
        pgs: Vec::new(),
        used_bytes: 0,
        capacity_bytes: 0,
        device_bytes: map.osds.get(&me).map_or(0, |o| o.device_bytes),
        free_bytes: 0,
        journal_bytes: 0,
        volumes: Vec::new(),
        snapshots: Vec::new(),
        reclaim_pending: 0,
        reclaimed_objects: 0,
        checksum_errors: 0,
        store_failure: None,
        unreachable: Vec::new(),
        io: OsdIo {
            since_unix: process_start_unix(),
            ..OsdIo::default()
        },
    };
    for s in shards {
        r.used_bytes += s.stats.used_bytes;
        r.capacity_bytes += s.stats.capacity_bytes;
        r.free_bytes += s.stats.free_bytes;
        r.journal_bytes += s.stats.journal_bytes;
        r.reclaim_pending += s.reclaim.pending_objects;
        r.reclaimed_objects += s.reclaim.deleted_objects;
        r.checksum_errors += s.stats.checksum_errors;
        add_io(&mut r.io, &s.stats);
        if r.store_failure.is_none() {
            r.store_failure.clone_from(&s.store_failure);
        }
        pgs.extend(pg_reports(&s.pgs));
        unreachable.extend(s.unreachable.iter().copied());
        for (volume, u) in &s.volumes {
            let v = volumes.entry(*volume).or_insert(VolumeSpace {
                volume: *volume,
                objects: 0,
                bytes: 0,
                snap_bytes: 0,
            });
            v.objects += u.objects;
            v.bytes += u.blocks * BLOCK_SIZE_U64;
            v.snap_bytes += u.snap_blocks * BLOCK_SIZE_U64;
        }
        for (volume, spaces) in &s.snaps {
            for sp in spaces {
                *snaps.entry((*volume, sp.id)).or_default() += sp.exclusive_blocks * BLOCK_SIZE_U64;
            }
        }
    }
    r.pgs = pgs;
    r.unreachable = unreachable.into_iter().collect();
    r.volumes = volumes.into_values().collect();
    r.snapshots = snaps
        .into_iter()
        .map(|((volume, snap), exclusive_bytes)| SnapSpaceReport {
            volume,
            snap,
            exclusive_bytes,
        })
        .collect();
    let now = source.now();
    let due = last.as_ref().is_none_or(|(prev, at)| {
        differs_beyond_io(prev, &r) || now.saturating_duration_since(*at) >= REPORT_REFRESH
    });
    if !due {
        return;
    }
    match source.put_report(&r).await {
        Ok(()) => *last = Some((r, now)),
        Err(e) => tracing::debug!(osd = %me, "report: {e}"),
    }
}

/// Adds a slice's I/O counters to the OSD's.
fn add_io(io: &mut OsdIo, s: &pontoon_store::StoreStats) {
    io.reads += s.reads;
    io.writes += s.writes;
    io.read_bytes += s.user_bytes_read;
    io.written_bytes += s.user_bytes_written;
    io.device_written_bytes += s.device_bytes_written;
    io.journal_written_bytes += s.journal_bytes_written;
}

/// Whether two reports differ in more than their I/O counters, which
/// move with every I/O: alone they wait for the refresh, so that they add
/// no etcd writes.
fn differs_beyond_io(prev: &OsdReport, r: &OsdReport) -> bool {
    let mut a = prev.clone();
    a.io.clone_from(&r.io);
    a != *r
}

/// When this process started, Unix seconds (the I/O counters' origin).
fn process_start_unix() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    })
}

/// Checks a shard's report for trouble that must end the OSD.
pub fn trouble(index: usize, r: &ShardReport) -> Option<String> {
    r.store_failure
        .as_ref()
        .map(|why| format!("shard {index}: the store failed: {why}"))
}
