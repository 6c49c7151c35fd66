//! Capacity and performance history: what the active manager samples,
//! how it is downsampled and bounded, and how it is encoded for etcd
//! (`pontoon_cluster::history` stores the chunks). Pure: no I/O.
//!
//! # What is sampled
//!
//! Every `interval` (60 s by default) the manager takes one [`Sample`] of
//! the cluster, every pool, every OSD and every volume, from the map and
//! the OSDs' reports (the same numbers as `pontoon df`). Each
//! [`SeriesId`] has a fixed list of metrics ([`Kind::metrics`]), all
//! integers:
//!
//! * gauges (bytes used, free, ...), and
//! * counters (operations and bytes read and written, bytes the device
//!   wrote). An OSD's counters are stored as it reported them, with the
//!   time its process started (`since_unix`), so a restart (counters back
//!   to 0) is seen; the cluster's are totals the manager keeps rising
//!   across OSD restarts and manager failovers. A rate over any span is the
//!   [`increase`] between two points over their time apart: exact however
//!   coarse the points are.
//!
//! # Downsampling
//!
//! Every metric keeps the **last** value of its bucket, stamped with the
//! time it was sampled: for a gauge that is its level at the end of the
//! bucket, for a counter the total so far — so a coarse point is exactly
//! the fine point it ends with, rates over coarse points stay exact, and a
//! manager that takes over mid-bucket simply goes on overwriting it. (No
//! min/max: peaks within an hour are not kept.) Four tiers ([`TIERS`]):
//!
//! | tier | series | bucket | kept | chunk |
//! |---|---|---|---|---|
//! | `m` | cluster, pools, OSDs | interval (1 min) | 2,880 (2 days) | 15 buckets |
//! | `h` | cluster, pools, OSDs | 60 × interval (1 h) | 9,600 (400 days) | 24 buckets |
//! | `vh` | volumes | 60 × interval (1 h) | 336 (14 days) | 24 buckets |
//! | `vd` | volumes | 1,440 × interval (1 day) | 400 (400 days) | 30 buckets |
//!
//! # Storage and its bound
//!
//! Series are grouped (the cluster; pools and OSDs by 64 ids; volumes by
//! 256) and a group's points in one tier and one chunk period form one
//! etcd value under `history/<tier>/<start>/<group>` ([`Chunk`],
//! [`encode_chunk`]): per series its id, then the times as deltas, then
//! each metric as zigzag varint deltas. A point costs at most `4 + 10·k`
//! bytes for `k` metrics (cluster 12, pool 6, OSD 10, volume 1) and a
//! series 14 bytes per chunk, so a cluster of `N` OSDs, `P` pools and `V`
//! volumes stores at most
//!
//! ```text
//! 12,480 × (124 + 104·N + 64·P) + 736 × 14·V + 14 × (592·(1 + N + P) + 28·V)
//!   ≈ 1.56 MB + 1.31 MB·N + 0.81 MB·P + 10.7 kB·V
//! ```
//!
//! (12,480 = 2,880 minute + 9,600 hourly points; 736 = 336 hourly + 400
//! daily volume points). That is the worst case, every value changing by
//! a random 64-bit amount; a busy cluster costs about 41 bytes per OSD
//! point and 7 per volume point (`a_busy_cluster_costs_far_less_than_the_bound`):
//! about 0.5 MB per OSD and 5 kB per volume over the whole retention. The
//! largest value is a full hourly chunk of 64 OSDs, at most
//! 24 × 64 × 104 ≈ 160 kB, far under etcd's 1.5 MiB (the manager refuses
//! to write one above 1 MiB). The open `m` chunk is rewritten at each
//! sample; the others when a new bucket begins (closing the previous one)
//! or a new series (a new volume, pool or OSD) appears;
//! a chunk whose period has passed is never written again, and is deleted
//! once older than its tier keeps. The manager holds only the open chunks
//! in memory: at most 39 points per cluster, pool or OSD series and 54
//! per volume.

use std::collections::BTreeMap;
use std::fmt;

use pontoon_cluster::space::{self, SpaceReport};
use pontoon_cluster::{ClusterMap, OsdReport};

/// Default sample interval (`pontoon mgr --history-interval`).
pub const DEFAULT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// Longest sample interval accepted, in seconds.
pub const MAX_INTERVAL_SECS: u64 = 600;
/// Pools or OSDs per chunk group.
pub const GROUP: u64 = 64;
/// Volumes per chunk group.
pub const VOLUME_GROUP: u64 = 256;
/// Largest encoded chunk the manager writes (etcd accepts 1.5 MiB).
pub const MAX_CHUNK_BYTES: usize = pontoon_cluster::history::MAX_CHUNK_BYTES;

/// The cluster's metrics (indices into a point's values).
pub mod cluster {
    /// Raw bytes of every OSD's device.
    pub const SIZE: usize = 0;
    /// Raw bytes free for data.
    pub const AVAIL: usize = 1;
    /// Raw bytes holding data (every copy).
    pub const USED: usize = 2;
    /// `size - avail`: data plus journals and metadata.
    pub const RAW_USED: usize = 3;
    /// Logical bytes stored, over all pools (one copy).
    pub const STORED: usize = 4;
    /// Raw bytes that can still be written before the first OSD taking
    /// data reaches the full ratio (placement weights considered).
    pub const FULL_ROOM: usize = 5;
    /// The same, to the nearfull ratio.
    pub const NEARFULL_ROOM: usize = 6;
    /// Read operations of every store, a total kept across restarts.
    pub const READS: usize = 7;
    /// Write operations of every store (replica writes included).
    pub const WRITES: usize = 8;
    /// Bytes read.
    pub const READ_BYTES: usize = 9;
    /// Bytes written by the stores' callers.
    pub const WRITTEN_BYTES: usize = 10;
    /// Bytes written to the devices.
    pub const DEVICE_WRITTEN: usize = 11;
    /// Names, in order.
    pub const NAMES: [&str; 12] = [
        "size_bytes",
        "avail_bytes",
        "used_bytes",
        "raw_used_bytes",
        "stored_bytes",
        "full_room_bytes",
        "nearfull_room_bytes",
        "reads_total",
        "writes_total",
        "read_bytes_total",
        "written_bytes_total",
        "device_written_bytes_total",
    ];
    /// The counters.
    pub const COUNTERS: [usize; 5] = [READS, WRITES, READ_BYTES, WRITTEN_BYTES, DEVICE_WRITTEN];
}

/// A pool's metrics.
pub mod pool {
    /// Logical bytes stored (one copy).
    pub const STORED: usize = 0;
    /// Bytes on the OSDs, every copy.
    pub const RAW_USED: usize = 1;
    /// Logical objects.
    pub const OBJECTS: usize = 2;
    /// Logical bytes that can still be written before an OSD is full.
    pub const MAX_AVAIL: usize = 3;
    /// The same, before an OSD is nearfull.
    pub const NEARFULL_AVAIL: usize = 4;
    /// Provisioned bytes of its volumes.
    pub const PROVISIONED: usize = 5;
    /// Names, in order.
    pub const NAMES: [&str; 6] = [
        "stored_bytes",
        "raw_used_bytes",
        "objects",
        "max_avail_bytes",
        "nearfull_avail_bytes",
        "provisioned_bytes",
    ];
}

/// An OSD's metrics; its counters as the OSD reported them.
pub mod osd {
    /// Bytes of data held.
    pub const USED: usize = 0;
    /// Bytes free for data.
    pub const FREE: usize = 1;
    /// Bytes of the data areas.
    pub const CAPACITY: usize = 2;
    /// When the OSD process started: its counters count from then.
    pub const SINCE: usize = 3;
    /// Store read operations since `SINCE`.
    pub const READS: usize = 4;
    /// Store write operations since `SINCE`.
    pub const WRITES: usize = 5;
    /// Bytes read since `SINCE`.
    pub const READ_BYTES: usize = 6;
    /// Bytes the store's callers wrote since `SINCE`.
    pub const WRITTEN_BYTES: usize = 7;
    /// Bytes written to the device since `SINCE`.
    pub const DEVICE_WRITTEN: usize = 8;
    /// Of those, bytes written to the journal.
    pub const JOURNAL_WRITTEN: usize = 9;
    /// Names, in order.
    pub const NAMES: [&str; 10] = [
        "used_bytes",
        "free_bytes",
        "capacity_bytes",
        "since_unix",
        "reads_total",
        "writes_total",
        "read_bytes_total",
        "written_bytes_total",
        "device_written_bytes_total",
        "journal_written_bytes_total",
    ];
    /// The counters.
    pub const COUNTERS: [usize; 6] = [
        READS,
        WRITES,
        READ_BYTES,
        WRITTEN_BYTES,
        DEVICE_WRITTEN,
        JOURNAL_WRITTEN,
    ];
}

/// A volume's metrics.
pub mod volume {
    /// Logical bytes allocated (one copy).
    pub const USED: usize = 0;
    /// Names, in order.
    pub const NAMES: [&str; 1] = ["used_bytes"];
}

/// What a series describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// The whole cluster.
    Cluster,
    /// One pool.
    Pool,
    /// One OSD.
    Osd,
    /// One volume.
    Volume,
}

impl Kind {
    /// The metrics of a series of this kind, in order.
    pub fn metrics(self) -> &'static [&'static str] {
        match self {
            Kind::Cluster => &cluster::NAMES,
            Kind::Pool => &pool::NAMES,
            Kind::Osd => &osd::NAMES,
            Kind::Volume => &volume::NAMES,
        }
    }

    fn code(self) -> u8 {
        match self {
            Kind::Cluster => 0,
            Kind::Pool => 1,
            Kind::Osd => 2,
            Kind::Volume => 3,
        }
    }
}

/// One series: the cluster, a pool, an OSD or a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SeriesId {
    /// The whole cluster.
    Cluster,
    /// A pool, by id.
    Pool(u32),
    /// An OSD, by id.
    Osd(u32),
    /// A volume, by id.
    Volume(u64),
}

impl SeriesId {
    /// Its kind.
    pub fn kind(self) -> Kind {
        match self {
            SeriesId::Cluster => Kind::Cluster,
            SeriesId::Pool(_) => Kind::Pool,
            SeriesId::Osd(_) => Kind::Osd,
            SeriesId::Volume(_) => Kind::Volume,
        }
    }

    fn number(self) -> u64 {
        match self {
            SeriesId::Cluster => 0,
            SeriesId::Pool(id) | SeriesId::Osd(id) => u64::from(id),
            SeriesId::Volume(id) => id,
        }
    }

    fn from_code(kind: u8, n: u64) -> Option<Self> {
        Some(match kind {
            0 => SeriesId::Cluster,
            1 => SeriesId::Pool(u32::try_from(n).ok()?),
            2 => SeriesId::Osd(u32::try_from(n).ok()?),
            3 => SeriesId::Volume(n),
            _ => return None,
        })
    }

    /// The chunk group it is stored in: `c`, `p<k>`, `o<k>`, `v<k>`.
    pub fn group(self) -> String {
        match self {
            SeriesId::Cluster => "c".into(),
            SeriesId::Pool(id) => format!("p{}", u64::from(id) / GROUP),
            SeriesId::Osd(id) => format!("o{}", u64::from(id) / GROUP),
            SeriesId::Volume(id) => format!("v{}", id / VOLUME_GROUP),
        }
    }
}

impl fmt::Display for SeriesId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeriesId::Cluster => f.write_str("cluster"),
            SeriesId::Pool(id) => write!(f, "pool.{id}"),
            SeriesId::Osd(id) => write!(f, "osd.{id}"),
            SeriesId::Volume(id) => write!(f, "volume.{id}"),
        }
    }
}

/// One resolution of the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tier {
    /// Its name in keys.
    pub name: &'static str,
    /// Bucket length in sample intervals.
    pub factor: u64,
    /// Buckets kept.
    pub keep: u64,
    /// Buckets per chunk.
    pub chunk: u64,
    /// Whether it holds volumes (and only them) or the rest.
    pub volumes: bool,
}

impl Tier {
    /// Bucket length in seconds for a sample interval.
    pub fn bucket_secs(&self, interval: u64) -> u64 {
        interval.max(1) * self.factor
    }

    /// Start of the chunk period holding time `t`.
    pub fn chunk_start(&self, interval: u64, t: u64) -> u64 {
        let span = self.bucket_secs(interval) * self.chunk;
        t - t % span
    }

    /// Seconds of history kept.
    pub fn keep_secs(&self, interval: u64) -> u64 {
        self.bucket_secs(interval) * self.keep
    }

    /// Whether series `id` is kept in this tier.
    pub fn holds(&self, id: SeriesId) -> bool {
        self.volumes == (id.kind() == Kind::Volume)
    }
}

/// Fine points of the cluster, pools and OSDs.
pub const FINE: Tier = Tier {
    name: "m",
    factor: 1,
    keep: 2880,
    chunk: 15,
    volumes: false,
};
/// Hourly points of the cluster, pools and OSDs.
pub const HOURLY: Tier = Tier {
    name: "h",
    factor: 60,
    keep: 9600,
    chunk: 24,
    volumes: false,
};
/// Hourly points of volumes.
pub const VOLUME_HOURLY: Tier = Tier {
    name: "vh",
    factor: 60,
    keep: 336,
    chunk: 24,
    volumes: true,
};
/// Daily points of volumes.
pub const VOLUME_DAILY: Tier = Tier {
    name: "vd",
    factor: 1440,
    keep: 400,
    chunk: 30,
    volumes: true,
};
/// Every tier, finest first within each set of series.
pub const TIERS: [Tier; 4] = [FINE, HOURLY, VOLUME_HOURLY, VOLUME_DAILY];

/// The tier called `name`.
pub fn tier(name: &str) -> Option<Tier> {
    TIERS.into_iter().find(|t| t.name == name)
}

/// The points of one series: times (Unix seconds, ascending) and, per
/// point, one value per metric of its kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    k: usize,
    t: Vec<u64>,
    v: Vec<u64>,
}

impl Series {
    /// An empty series of `k` metrics.
    pub fn new(k: usize) -> Self {
        Self {
            k: k.max(1),
            t: Vec::new(),
            v: Vec::new(),
        }
    }

    /// An empty series for `id`.
    pub fn of(id: SeriesId) -> Self {
        Self::new(id.kind().metrics().len())
    }

    /// Points held.
    pub fn len(&self) -> usize {
        self.t.len()
    }

    /// Whether it holds no point.
    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }

    /// Metrics per point.
    pub fn metrics(&self) -> usize {
        self.k
    }

    /// The times.
    pub fn times(&self) -> &[u64] {
        &self.t
    }

    /// Point `i`: its time and values.
    pub fn point(&self, i: usize) -> (u64, &[u64]) {
        (self.t[i], &self.v[i * self.k..(i + 1) * self.k])
    }

    /// The last point.
    pub fn last(&self) -> Option<(u64, &[u64])> {
        (!self.is_empty()).then(|| self.point(self.len() - 1))
    }

    /// Every point.
    pub fn points(&self) -> impl Iterator<Item = (u64, &[u64])> + '_ {
        self.t.iter().copied().zip(self.v.chunks(self.k))
    }

    /// `(time, value)` of one metric.
    pub fn column(&self, metric: usize) -> Vec<(u64, u64)> {
        self.points().map(|(t, v)| (t, v[metric])).collect()
    }

    /// Records a sample taken at `t` in buckets of `bucket` seconds: it
    /// replaces the last point if that is in the same bucket (the last
    /// value of a bucket is kept), else follows it. Samples older than the
    /// last point are ignored. `values` shorter than the series' metrics
    /// are padded with 0.
    pub fn record(&mut self, bucket: u64, t: u64, values: &[u64]) {
        let bucket = bucket.max(1);
        let mut row = values.to_vec();
        row.resize(self.k, 0);
        match self.t.last().copied() {
            Some(last) if t < last => {}
            Some(last) if last / bucket == t / bucket => {
                let i = self.len() - 1;
                self.t[i] = t;
                self.v[i * self.k..].copy_from_slice(&row);
            }
            _ => {
                self.t.push(t);
                self.v.extend_from_slice(&row);
            }
        }
    }

    /// Appends a point (times must ascend; a point not after the last is
    /// dropped). For decoding and merging.
    pub fn push(&mut self, t: u64, values: &[u64]) {
        if self.t.last().is_some_and(|&last| t <= last) {
            return;
        }
        let mut row = values.to_vec();
        row.resize(self.k, 0);
        self.t.push(t);
        self.v.extend_from_slice(&row);
    }

    /// Drops the points before `t`.
    pub fn retain_from(&mut self, t: u64) {
        let n = self.t.partition_point(|&x| x < t);
        self.t.drain(..n);
        self.v.drain(..n * self.k);
    }
}

/// How much a counter grew from `prev` to `cur`: the difference, or, when
/// it went back (a restart began it again at 0), `cur` — what was counted
/// since the restart, as Prometheus' `increase` does.
pub fn increase(prev: u64, cur: u64) -> u64 {
    if cur >= prev { cur - prev } else { cur }
}

/// How much an OSD counter (`metric`) grew between two of its points,
/// with a restart (a new `since_unix`) counted from 0.
pub fn osd_increase(prev: &[u64], cur: &[u64], metric: usize) -> u64 {
    if prev[osd::SINCE] != cur[osd::SINCE] {
        cur[metric]
    } else {
        increase(prev[metric], cur[metric])
    }
}

/// One sample of the whole cluster (counters of the cluster excluded:
/// the [`Recorder`] keeps those).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// The cluster's gauges ([`cluster`] indices; counters left 0).
    pub cluster: [u64; 12],
    /// Each pool.
    pub pools: Vec<(u32, [u64; 6])>,
    /// Each OSD that has reported.
    pub osds: Vec<(u32, [u64; 10])>,
    /// Each volume's used bytes.
    pub volumes: Vec<(u64, u64)>,
}

/// Raw bytes every pool can still write before the first OSD taking data
/// reaches `ratio` of its data area: each OSD receives its weight's share
/// of new data, so the one with the least room per unit of share runs out
/// first (as `pontoon_cluster::space` computes max avail).
pub fn raw_room(map: &ClusterMap, reports: &[OsdReport], ratio: f64) -> u64 {
    let by_osd: BTreeMap<_, _> = reports.iter().map(|r| (r.osd, r)).collect();
    pontoon_cluster::space::pool_raw_avail(map, &by_osd, ratio)
}

/// Takes a sample from the map and the OSDs' reports.
pub fn sample(map: &ClusterMap, reports: &[OsdReport]) -> Sample {
    let s: SpaceReport = space::space_report(map, reports);
    let ratios = map.settings.full_ratios;
    let full_room = raw_room(map, reports, ratios.full);
    let near_room = raw_room(map, reports, ratios.nearfull);
    let mut out = Sample::default();
    let c = &mut out.cluster;
    c[cluster::SIZE] = s.raw.size_bytes;
    c[cluster::AVAIL] = s.raw.avail_bytes;
    c[cluster::USED] = s.raw.used_bytes;
    c[cluster::RAW_USED] = s.raw.raw_used_bytes;
    c[cluster::STORED] = s.pools.iter().map(|p| p.stored_bytes).sum();
    c[cluster::FULL_ROOM] = full_room;
    c[cluster::NEARFULL_ROOM] = near_room;
    for p in &s.pools {
        let size = u64::from(p.size.max(1));
        let mut v = [0u64; 6];
        v[pool::STORED] = p.stored_bytes;
        v[pool::RAW_USED] = p.raw_used_bytes;
        v[pool::OBJECTS] = p.objects;
        v[pool::MAX_AVAIL] = p.max_avail_bytes;
        v[pool::NEARFULL_AVAIL] = near_room / size;
        v[pool::PROVISIONED] = p.provisioned_bytes;
        out.pools.push((p.id, v));
    }
    for r in reports {
        if !map.osds.contains_key(&r.osd) {
            continue;
        }
        let mut v = [0u64; 10];
        v[osd::USED] = r.used_bytes;
        v[osd::FREE] = r.free_bytes;
        v[osd::CAPACITY] = r.capacity_bytes;
        v[osd::SINCE] = r.io.since_unix;
        v[osd::READS] = r.io.reads;
        v[osd::WRITES] = r.io.writes;
        v[osd::READ_BYTES] = r.io.read_bytes;
        v[osd::WRITTEN_BYTES] = r.io.written_bytes;
        v[osd::DEVICE_WRITTEN] = r.io.device_written_bytes;
        v[osd::JOURNAL_WRITTEN] = r.io.journal_written_bytes;
        out.osds.push((r.osd.0, v));
    }
    out.volumes = s.volumes.iter().map(|v| (v.id, v.used_bytes)).collect();
    out
}

/// The points of one group of series in one tier and one chunk period:
/// one etcd value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Start of its period (Unix seconds).
    pub start: u64,
    /// Its series.
    pub series: BTreeMap<SeriesId, Series>,
}

/// Why a chunk could not be decoded.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad history chunk: {0}")]
pub struct DecodeError(pub &'static str);

/// Format version of [`encode_chunk`].
const CHUNK_MAGIC: &[u8; 4] = b"PHC1";

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn get_varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first().ok_or(DecodeError("truncated"))?;
        *buf = rest;
        x |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(x);
        }
    }
    Err(DecodeError("varint too long"))
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Encodes a chunk: magic, start, series count; per series its kind, id,
/// metric count, point count, the times as deltas (the first from
/// `start`), then metric by metric the values as zigzag deltas (the first
/// from 0). Values wrap in 64 bits, so any u64 round-trips.
pub fn encode_chunk(c: &Chunk) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(CHUNK_MAGIC);
    put_varint(&mut out, c.start);
    put_varint(&mut out, c.series.len() as u64);
    for (id, s) in &c.series {
        out.push(id.kind().code());
        put_varint(&mut out, id.number());
        put_varint(&mut out, s.k as u64);
        put_varint(&mut out, s.len() as u64);
        let mut prev = c.start;
        for &t in &s.t {
            put_varint(&mut out, t.wrapping_sub(prev));
            prev = t;
        }
        for m in 0..s.k {
            let mut prev = 0u64;
            for i in 0..s.len() {
                let v = s.v[i * s.k + m];
                put_varint(&mut out, zigzag(v.wrapping_sub(prev) as i64));
                prev = v;
            }
        }
    }
    out
}

/// Decodes a chunk written by [`encode_chunk`]. A series with more
/// metrics than this version knows keeps the ones it knows; with fewer,
/// the missing read as 0.
pub fn decode_chunk(mut buf: &[u8]) -> Result<Chunk, DecodeError> {
    let b = &mut buf;
    if b.len() < 4 || &b[..4] != CHUNK_MAGIC {
        return Err(DecodeError("unknown format"));
    }
    *b = &b[4..];
    let start = get_varint(b)?;
    let n = get_varint(b)?;
    let mut series = BTreeMap::new();
    for _ in 0..n {
        let (&kind, rest) = b.split_first().ok_or(DecodeError("truncated"))?;
        *b = rest;
        let number = get_varint(b)?;
        let id = SeriesId::from_code(kind, number).ok_or(DecodeError("unknown series"))?;
        let k = usize::try_from(get_varint(b)?).map_err(|_| DecodeError("metrics"))?;
        let len = usize::try_from(get_varint(b)?).map_err(|_| DecodeError("points"))?;
        // Each point costs at least one byte per metric and one for its time.
        if k == 0 || k > 64 || len > b.len() {
            return Err(DecodeError("implausible sizes"));
        }
        let mut t = Vec::with_capacity(len);
        let mut prev = start;
        for _ in 0..len {
            prev = prev.wrapping_add(get_varint(b)?);
            t.push(prev);
        }
        if t.windows(2).any(|w| w[0] >= w[1]) {
            return Err(DecodeError("times do not ascend"));
        }
        let mut raw = vec![0u64; len * k];
        for m in 0..k {
            let mut prev = 0u64;
            for i in 0..len {
                prev = prev.wrapping_add(unzigzag(get_varint(b)?) as u64);
                raw[i * k + m] = prev;
            }
        }
        let want = id.kind().metrics().len();
        let mut s = Series::new(want);
        for i in 0..len {
            s.push(t[i], &raw[i * k..i * k + k.min(want)]);
        }
        series.insert(id, s);
    }
    if !b.is_empty() {
        return Err(DecodeError("trailing bytes"));
    }
    Ok(Chunk { start, series })
}

/// The whole history (or the part loaded), decoded: per tier, per series.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The sample interval the fine tier was written with, in seconds
    /// (0 if unknown).
    pub interval_secs: u64,
    /// Points by tier name, then series.
    pub tiers: BTreeMap<&'static str, BTreeMap<SeriesId, Series>>,
}

impl History {
    /// Adds the points of a decoded chunk of tier `tier`.
    pub fn add_chunk(&mut self, tier: Tier, chunk: Chunk) {
        let series = self.tiers.entry(tier.name).or_default();
        for (id, s) in chunk.series {
            let into = series.entry(id).or_insert_with(|| Series::of(id));
            if into
                .t
                .last()
                .is_none_or(|&l| s.t.first().is_some_and(|&f| f > l))
            {
                into.t.extend_from_slice(&s.t);
                into.v.extend_from_slice(&s.v);
            } else {
                // Out of order (should not happen: chunks are read in key
                // order): merge point by point.
                let mut merged = Series::of(id);
                let mut all: Vec<(u64, Vec<u64>)> = into
                    .points()
                    .chain(s.points())
                    .map(|(t, v)| (t, v.to_vec()))
                    .collect();
                all.sort_by_key(|(t, _)| *t);
                for (t, v) in all {
                    merged.push(t, &v);
                }
                *into = merged;
            }
        }
    }

    /// Builds the history from etcd's chunks (relative key, value), as
    /// `MapStore::history_chunks` returns them; undecodable ones are
    /// skipped and counted.
    pub fn from_chunks(
        chunks: impl IntoIterator<Item = (String, Vec<u8>)>,
        interval_secs: u64,
    ) -> (History, usize) {
        let mut h = History {
            interval_secs,
            ..Default::default()
        };
        let mut bad = 0;
        for (key, value) in chunks {
            let Some((name, _, _)) = pontoon_cluster::history::parse_chunk_key(&key) else {
                bad += 1;
                continue;
            };
            let (Some(t), Ok(c)) = (tier(name), decode_chunk(&value)) else {
                bad += 1;
                continue;
            };
            h.add_chunk(t, c);
        }
        (h, bad)
    }

    /// The series of a tier.
    pub fn tier(&self, name: &str) -> Option<&BTreeMap<SeriesId, Series>> {
        self.tiers.get(name)
    }

    /// Every series id present in any tier.
    pub fn ids(&self) -> Vec<SeriesId> {
        let mut ids: Vec<SeriesId> = self
            .tiers
            .values()
            .flat_map(|m| m.keys().copied())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// One series over its whole history: the coarse tier's points before
    /// the fine tier's first, then the fine tier's (hourly + minutes; for
    /// volumes daily + hourly).
    pub fn merged(&self, id: SeriesId) -> Series {
        let (fine, coarse) = if id.kind() == Kind::Volume {
            (VOLUME_HOURLY.name, VOLUME_DAILY.name)
        } else {
            (FINE.name, HOURLY.name)
        };
        let get = |name: &str| self.tiers.get(name).and_then(|m| m.get(&id));
        let mut out = Series::of(id);
        let first_fine = get(fine).and_then(|s| s.t.first().copied());
        if let Some(c) = get(coarse) {
            for (t, v) in c.points() {
                if first_fine.is_none_or(|f| t < f) {
                    out.push(t, v);
                }
            }
        }
        if let Some(f) = get(fine) {
            for (t, v) in f.points() {
                out.push(t, v);
            }
        }
        out
    }
}

/// An open chunk of the recorder: the one being filled for a group.
#[derive(Clone, Debug)]
struct Open {
    chunk: Chunk,
    /// Changed since last written.
    dirty: bool,
}

/// What one recording asks to write to etcd.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Writes {
    /// Chunks to put: relative key and encoded value.
    pub puts: Vec<(String, Vec<u8>)>,
    /// Per tier, delete the chunks that start before this time.
    pub expire: Vec<(String, u64)>,
}

impl Writes {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.expire.is_empty()
    }

    /// Bytes of the keys and values to put.
    pub fn bytes(&self) -> usize {
        self.puts.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// The manager's side of the history: the open chunks of every tier and
/// group, and the baselines that keep the cluster's counters rising.
/// Fed one [`Sample`] per interval, it says what to write.
#[derive(Clone, Debug)]
pub struct Recorder {
    interval: u64,
    /// Per tier (index into [`TIERS`]), per group.
    open: Vec<BTreeMap<String, Open>>,
    /// Chunks whose period ended before they were written, per tier.
    closed: Vec<Vec<(String, Chunk)>>,
    /// The last bucket recorded, per tier.
    last_bucket: Vec<Option<u64>>,
    /// The chunk period last recorded, per tier.
    last_start: Vec<Option<u64>>,
    /// The last point of each OSD (to count the cluster's counters), with
    /// its time.
    osd_last: BTreeMap<u32, (u64, [u64; 10])>,
    /// The cluster's counters so far, and the time of the point they
    /// were last loaded from.
    totals: [u64; 12],
    totals_at: u64,
}

impl Recorder {
    /// A recorder sampling every `interval_secs`.
    pub fn new(interval_secs: u64) -> Self {
        Self {
            interval: interval_secs.max(1),
            open: vec![BTreeMap::new(); TIERS.len()],
            closed: vec![Vec::new(); TIERS.len()],
            last_bucket: vec![None; TIERS.len()],
            last_start: vec![None; TIERS.len()],
            osd_last: BTreeMap::new(),
            totals: [0; 12],
            totals_at: 0,
        }
    }

    /// The sample interval.
    pub fn interval_secs(&self) -> u64 {
        self.interval
    }

    /// Time from which a manager taking over should load the chunks of
    /// `tier` to continue its open chunks and counters: the previous
    /// chunk period and the current one.
    pub fn load_from(&self, tier: Tier, now: u64) -> u64 {
        let start = tier.chunk_start(self.interval, now);
        start.saturating_sub(tier.bucket_secs(self.interval) * tier.chunk)
    }

    /// Takes over chunks of `tier` written before (by this or another
    /// manager), as `(group, chunk)`: those of the current period become
    /// the open chunks; the newest points give the baselines of the
    /// counters. (Chunks written with another interval do not align with
    /// the current period, so they only give baselines.)
    pub fn load(&mut self, tier: Tier, chunks: Vec<(String, Chunk)>, now: u64) {
        let Some(ti) = TIERS.iter().position(|t| *t == tier) else {
            return;
        };
        let current = tier.chunk_start(self.interval, now);
        for (group, chunk) in chunks {
            for (id, s) in &chunk.series {
                let Some((t, v)) = s.last() else { continue };
                match id {
                    SeriesId::Cluster if t >= self.totals_at => {
                        self.totals_at = t;
                        for m in cluster::COUNTERS {
                            self.totals[m] = v[m];
                        }
                    }
                    SeriesId::Osd(o) if self.osd_last.get(o).is_none_or(|(at, _)| *at <= t) => {
                        let mut row = [0u64; 10];
                        row.copy_from_slice(&v[..10]);
                        self.osd_last.insert(*o, (t, row));
                    }
                    _ => {}
                }
            }
            if chunk.start == current {
                self.open[ti].insert(
                    group,
                    Open {
                        chunk,
                        dirty: false,
                    },
                );
            }
        }
    }

    /// Whether a sample is due at `now`: the fine bucket of `now` has none.
    pub fn due(&self, now: u64) -> bool {
        let b = now / FINE.bucket_secs(self.interval);
        self.last_bucket[0].is_none_or(|last| b > last)
    }

    /// The cluster's counters so far.
    pub fn totals(&self) -> [u64; 12] {
        self.totals
    }

    /// Records a sample taken at `now` (Unix seconds) and returns what to
    /// write: the open fine chunks each time; the other tiers' chunks when
    /// a new bucket begins (its first value, and the last of the bucket
    /// before) or a new series appears (a new volume is in the history at
    /// once); the expired chunks of a tier when a new period begins.
    pub fn record(&mut self, now: u64, s: &Sample) -> Writes {
        for (o, row) in &s.osds {
            if let Some((_, prev)) = self.osd_last.get(o) {
                let pairs = [
                    (cluster::READS, osd::READS),
                    (cluster::WRITES, osd::WRITES),
                    (cluster::READ_BYTES, osd::READ_BYTES),
                    (cluster::WRITTEN_BYTES, osd::WRITTEN_BYTES),
                    (cluster::DEVICE_WRITTEN, osd::DEVICE_WRITTEN),
                ];
                for (c, m) in pairs {
                    self.totals[c] = self.totals[c].wrapping_add(osd_increase(prev, row, m));
                }
            }
            // An OSD seen for the first time adds nothing: what it counted
            // before may be counted already (a manager taking over without
            // its last point) or not, and an undercount is the safe side.
            self.osd_last.insert(*o, (now, *row));
        }
        let mut crow = s.cluster;
        for m in cluster::COUNTERS {
            crow[m] = self.totals[m];
        }
        let mut rows: Vec<(SeriesId, &[u64])> = vec![(SeriesId::Cluster, &crow[..])];
        rows.extend(s.pools.iter().map(|(id, v)| (SeriesId::Pool(*id), &v[..])));
        rows.extend(s.osds.iter().map(|(id, v)| (SeriesId::Osd(*id), &v[..])));
        let vols: Vec<(SeriesId, [u64; 1])> = s
            .volumes
            .iter()
            .map(|(id, used)| (SeriesId::Volume(*id), [*used]))
            .collect();
        rows.extend(vols.iter().map(|(id, v)| (*id, &v[..])));

        let mut w = Writes::default();
        for (ti, tier) in TIERS.iter().enumerate() {
            let bsecs = tier.bucket_secs(self.interval);
            let bucket = now / bsecs;
            let start = tier.chunk_start(self.interval, now);
            // Close the chunks of a period that ended.
            let ended: Vec<String> = self.open[ti]
                .iter()
                .filter(|(_, o)| o.chunk.start != start)
                .map(|(g, _)| g.clone())
                .collect();
            for g in ended {
                if let Some(o) = self.open[ti].remove(&g)
                    && o.dirty
                {
                    self.closed[ti].push((g, o.chunk));
                }
            }
            let mut new_series = false;
            for (id, vals) in rows.iter().filter(|(id, _)| tier.holds(*id)) {
                let open = self.open[ti].entry(id.group()).or_insert_with(|| Open {
                    chunk: Chunk {
                        start,
                        series: BTreeMap::new(),
                    },
                    dirty: false,
                });
                let series = &mut open.chunk.series;
                new_series |= !series.contains_key(id);
                series
                    .entry(*id)
                    .or_insert_with(|| Series::of(*id))
                    .record(bsecs, now, vals);
                open.dirty = true;
            }
            let new_bucket = self.last_bucket[ti] != Some(bucket);
            if ti == 0 || new_bucket || new_series {
                for (g, c) in self.closed[ti].drain(..) {
                    push_chunk(&mut w, tier, &g, &c);
                }
                for (g, o) in self.open[ti].iter_mut().filter(|(_, o)| o.dirty) {
                    push_chunk(&mut w, tier, g, &o.chunk);
                    o.dirty = false;
                }
            }
            if self.last_start[ti] != Some(start) {
                let before = tier.chunk_start(
                    self.interval,
                    now.saturating_sub(tier.keep_secs(self.interval)),
                );
                if before > 0 {
                    w.expire.push((tier.name.to_string(), before));
                }
            }
            self.last_bucket[ti] = Some(bucket);
            self.last_start[ti] = Some(start);
        }
        w
    }

    /// Every chunk changed and not yet written (for a manager stepping
    /// down cleanly).
    pub fn flush(&mut self) -> Writes {
        let mut w = Writes::default();
        for (ti, tier) in TIERS.iter().enumerate() {
            for (g, c) in self.closed[ti].drain(..) {
                push_chunk(&mut w, tier, &g, &c);
            }
            for (g, o) in self.open[ti].iter_mut().filter(|(_, o)| o.dirty) {
                push_chunk(&mut w, tier, g, &o.chunk);
                o.dirty = false;
            }
        }
        w
    }

    /// Points held in memory (the open chunks), over every series.
    pub fn points_held(&self) -> usize {
        self.open
            .iter()
            .flat_map(|m| m.values())
            .flat_map(|o| o.chunk.series.values())
            .map(Series::len)
            .sum()
    }
}

/// Encodes a chunk into `w`, unless it is larger than etcd should take
/// (which the group sizes rule out; logged if it happens).
fn push_chunk(w: &mut Writes, tier: &Tier, group: &str, c: &Chunk) {
    let value = encode_chunk(c);
    let key = pontoon_cluster::history::chunk_key(tier.name, c.start, group);
    if value.len() > MAX_CHUNK_BYTES {
        tracing::error!(
            key,
            bytes = value.len(),
            "history chunk too large; not written"
        );
        return;
    }
    w.puts.push((key, value));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd as a map of relative keys, applying [`Writes`] as
    /// `MapStore::history_write` does.
    #[derive(Default)]
    struct Kv(BTreeMap<String, Vec<u8>>);

    impl Kv {
        fn apply(&mut self, w: &Writes) {
            for (k, v) in &w.puts {
                assert!(v.len() <= MAX_CHUNK_BYTES, "{k}: {} bytes", v.len());
                self.0.insert(k.clone(), v.clone());
            }
            for (tier, before) in &w.expire {
                let cut = pontoon_cluster::history::chunk_key(tier, *before, "");
                let prefix = format!("history/{tier}/");
                self.0.retain(|k, _| !(k.starts_with(&prefix) && *k < cut));
            }
        }

        fn history(&self, interval: u64) -> History {
            let (h, bad) = History::from_chunks(self.0.clone(), interval);
            assert_eq!(bad, 0);
            h
        }

        fn chunks_of(&self, tier: Tier, from: u64) -> Vec<(String, Chunk)> {
            self.0
                .iter()
                .filter_map(|(k, v)| {
                    let (t, start, g) = pontoon_cluster::history::parse_chunk_key(k)?;
                    (t == tier.name && start >= from)
                        .then(|| (g.to_string(), decode_chunk(v).unwrap()))
                })
                .collect()
        }

        fn bytes(&self) -> usize {
            self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
        }
    }

    const T0: u64 = 1_800_000_000;
    const GIB: u64 = 1 << 30;

    /// A sample of a cluster with `osds` OSDs, 2 pools and `vols` volumes,
    /// `used` bytes used, each OSD having written `written` bytes since
    /// `since`.
    fn sample_at(osds: u32, vols: u64, used: u64, since: u64, written: u64) -> Sample {
        let mut s = Sample::default();
        s.cluster[cluster::SIZE] = 100 * GIB;
        s.cluster[cluster::USED] = used;
        s.cluster[cluster::FULL_ROOM] = 95 * GIB - used;
        s.pools = vec![(1, [used / 3, used, 10, 0, 0, 0]), (2, [0; 6])];
        for o in 0..osds {
            let mut v = [0u64; 10];
            v[osd::USED] = used / u64::from(osds);
            v[osd::SINCE] = since;
            v[osd::WRITES] = written / 4096;
            v[osd::WRITTEN_BYTES] = written;
            v[osd::DEVICE_WRITTEN] = written * 2;
            s.osds.push((o, v));
        }
        s.volumes = (0..vols).map(|v| (v, used / 3 / vols.max(1))).collect();
        s
    }

    #[test]
    fn chunks_round_trip_any_values() {
        let mut c = Chunk {
            start: T0,
            series: BTreeMap::new(),
        };
        let mut s = Series::of(SeriesId::Osd(7));
        s.push(T0 + 1, &[0, u64::MAX, 5, 1, 2, 3, 4, 5, 6, 7]);
        s.push(T0 + 61, &[u64::MAX, 0, 5, 1, 2, 3, 4, 5, 6, 8]);
        s.push(T0 + 3600, &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        c.series.insert(SeriesId::Osd(7), s);
        let mut v = Series::of(SeriesId::Volume(1 << 40));
        v.push(T0, &[12345]);
        c.series.insert(SeriesId::Volume(1 << 40), v);
        c.series
            .insert(SeriesId::Cluster, Series::of(SeriesId::Cluster));
        let bytes = encode_chunk(&c);
        assert_eq!(decode_chunk(&bytes).unwrap(), c);
        for cut in 0..bytes.len() {
            assert!(decode_chunk(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_chunk(&extra).is_err());
    }

    #[test]
    fn a_bucket_keeps_its_last_sample() {
        let mut s = Series::new(1);
        s.record(60, 120, &[1]);
        s.record(60, 150, &[2]);
        s.record(60, 179, &[3]);
        s.record(60, 100, &[9]); // older: ignored
        s.record(60, 180, &[4]);
        assert_eq!(s.column(0), vec![(179, 3), (180, 4)]);
        s.retain_from(180);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn counters_survive_restarts() {
        assert_eq!(increase(10, 15), 5);
        assert_eq!(increase(10, 3), 3);
        let mut a = [0u64; 10];
        let mut b = [0u64; 10];
        a[osd::SINCE] = 100;
        a[osd::WRITES] = 50;
        b[osd::SINCE] = 200;
        b[osd::WRITES] = 70;
        assert_eq!(osd_increase(&a, &b, osd::WRITES), 70);
        b[osd::SINCE] = 100;
        assert_eq!(osd_increase(&a, &b, osd::WRITES), 20);
    }

    #[test]
    fn three_days_of_minutes_keep_two_days_of_minutes_and_every_hour() {
        let mut kv = Kv::default();
        let mut r = Recorder::new(60);
        let mut writes = 0usize;
        let mut written_bytes = 0usize;
        let days = 3;
        for i in 0..days * 1440 {
            let now = T0 + i * 60 + 7;
            assert!(r.due(now));
            let w = r.record(now, &sample_at(3, 5, i * 1000, T0, i * 4096));
            assert!(!r.due(now + 1));
            writes += w.puts.len();
            written_bytes += w.bytes();
            kv.apply(&w);
        }
        let h = kv.history(60);
        let fine = &h.tier("m").unwrap()[&SeriesId::Cluster];
        // Two days are kept, plus at most one chunk period.
        assert!(
            fine.len() >= 2880 && fine.len() <= 2880 + 15,
            "{}",
            fine.len()
        );
        let hourly = &h.tier("h").unwrap()[&SeriesId::Cluster];
        assert_eq!(hourly.len(), (days * 24) as usize);
        // Each hourly point is the last minute of its hour.
        let (t, v) = hourly.point(5);
        assert_eq!((t - 7) % 3600, 3540);
        assert_eq!(v[cluster::USED], ((t - 7 - T0) / 60) * 1000);
        let vol = &h.tier("vh").unwrap()[&SeriesId::Volume(0)];
        assert_eq!(vol.len(), (days * 24) as usize);
        // T0 is not midnight: three days touch four.
        assert_eq!(h.tier("vd").unwrap()[&SeriesId::Volume(0)].len(), 4);
        // The merged series: hours before the first minute, then minutes.
        let m = h.merged(SeriesId::Cluster);
        assert!(m.len() > fine.len() && m.len() < fine.len() + 30);
        assert!(m.times().windows(2).all(|w| w[0] < w[1]));
        // Writes stay small: about one fine chunk per group per minute.
        let per_sample = written_bytes / (days * 1440) as usize;
        assert!(per_sample < 4096, "{per_sample} bytes per sample");
        assert!(writes < (days * 1440 * 6) as usize);
        // The cluster's counters rise with the OSDs' writes.
        let (_, last) = fine.last().unwrap();
        let expect = 3 * (days * 1440 - 1) * 4096 * 2;
        assert_eq!(last[cluster::DEVICE_WRITTEN], expect);
    }

    #[test]
    fn four_hundred_days_of_hours_are_kept_and_no_more() {
        let mut kv = Kv::default();
        let mut r = Recorder::new(60);
        for i in 0..420 * 24 {
            let now = T0 + i * 3600;
            kv.apply(&r.record(now, &sample_at(2, 2, i, T0, i)));
        }
        let h = kv.history(60);
        let hourly = &h.tier("h").unwrap()[&SeriesId::Osd(1)];
        assert!(
            hourly.len() >= 9600 && hourly.len() <= 9600 + 24,
            "{}",
            hourly.len()
        );
        let daily = &h.tier("vd").unwrap()[&SeriesId::Volume(1)];
        assert!(daily.len() >= 400 && daily.len() <= 430, "{}", daily.len());
        let vh = &h.tier("vh").unwrap()[&SeriesId::Volume(1)];
        assert!(vh.len() >= 336 && vh.len() <= 360, "{}", vh.len());
    }

    #[test]
    fn the_stored_size_stays_under_the_stated_bound() {
        // Worst case: every value changes by a random 64-bit amount.
        let mut kv = Kv::default();
        let mut r = Recorder::new(60);
        let (n, v) = (70u32, 300u64);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..3 * 1440 {
            let now = T0 + i * 60;
            let mut s = sample_at(n, v, rnd(), rnd(), rnd());
            for c in s.cluster.iter_mut() {
                *c = rnd();
            }
            for (_, p) in &mut s.osds {
                for c in p.iter_mut() {
                    *c = rnd();
                }
            }
            for (_, u) in &mut s.volumes {
                *u = rnd();
            }
            kv.apply(&r.record(now, &s));
        }
        // The largest chunk: a full hourly chunk of 64 OSDs.
        let biggest = kv.0.values().map(Vec::len).max().unwrap();
        assert!(biggest <= 24 * 64 * 104 + 64 * 14 + 24, "{biggest}");
        // Each point costs at most 4 + 10 bytes per metric, each series
        // 14 bytes per chunk, each chunk 4 + 10 + 10.
        let mut b = 0u64;
        for v in kv.0.values() {
            let c = decode_chunk(v).unwrap();
            b += 24;
            for (id, s) in &c.series {
                b += 14 + s.len() as u64 * (4 + 10 * id.kind().metrics().len() as u64);
            }
        }
        let values: usize = kv.0.values().map(Vec::len).sum();
        assert!((values as u64) <= b, "{values} > {b}");
    }

    #[test]
    fn a_busy_cluster_costs_far_less_than_the_bound() {
        // 64 OSDs and 1,000 volumes for 3 days at 60 s: usage growing
        // with noise, 2,000 writes and 80 MB a second per OSD.
        let mut kv = Kv::default();
        let mut r = Recorder::new(60);
        let mut x = 1u64;
        let mut rnd = |m: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % m.max(1)
        };
        let days = 3;
        for i in 0..days * 1440 {
            let mut s = sample_at(64, 1000, 0, T0, 0);
            s.cluster[cluster::USED] = 10 * GIB + ((i * 40) << 20);
            for (_, v) in &mut s.osds {
                v[osd::USED] = GIB + i * (1 << 20) + rnd(1 << 20) * 4096;
                v[osd::FREE] = 100 * GIB - v[osd::USED];
                v[osd::CAPACITY] = 100 * GIB;
                v[osd::WRITES] = i * 120_000 + rnd(10_000);
                v[osd::READS] = i * 60_000 + rnd(10_000);
                v[osd::WRITTEN_BYTES] = i * 4_800_000_000 + rnd(1 << 30);
                v[osd::READ_BYTES] = i * 2_400_000_000 + rnd(1 << 30);
                v[osd::DEVICE_WRITTEN] = 2 * v[osd::WRITTEN_BYTES];
                v[osd::JOURNAL_WRITTEN] = v[osd::WRITTEN_BYTES] / 2;
            }
            for (_, u) in &mut s.volumes {
                *u += i * 4096 * rnd(100);
            }
            kv.apply(&r.record(T0 + i * 60, &s));
        }
        let osd_bytes: usize =
            kv.0.iter()
                .filter(|(k, _)| k.ends_with("/o0"))
                .map(|(_, v)| v.len())
                .sum();
        let vol_bytes: usize =
            kv.0.iter()
                .filter(|(k, _)| k.contains("/v"))
                .map(|(_, v)| v.len())
                .sum();
        // Per OSD per fine point, and per volume per hourly point.
        let per_osd_point = osd_bytes as f64 / 64.0 / (2880.0 + 72.0);
        let per_vol_point = vol_bytes as f64 / 1000.0 / (72.0 + 4.0);
        println!(
            "busy cluster: {per_osd_point:.1} bytes per OSD point, {per_vol_point:.1} per volume point, {} bytes in all",
            kv.bytes()
        );
        assert!(per_osd_point < 48.0, "{per_osd_point}");
        assert!(per_vol_point < 10.0, "{per_vol_point}");
    }

    #[test]
    fn a_new_manager_continues_the_history_and_its_counters() {
        let mut kv = Kv::default();
        let mut a = Recorder::new(60);
        let mut now = T0 + 13;
        for i in 0..100u64 {
            kv.apply(&a.record(now, &sample_at(2, 3, i * GIB, T0, i * 1000)));
            now += 60;
        }
        let before = a.totals()[cluster::WRITTEN_BYTES];
        // Manager A dies; B takes over 30 s later, loading the current and
        // previous chunk periods.
        now += 30;
        let mut b = Recorder::new(60);
        for tier in TIERS {
            let from = b.load_from(tier, now);
            b.load(tier, kv.chunks_of(tier, from), now);
        }
        assert_eq!(b.totals()[cluster::WRITTEN_BYTES], before);
        for i in 100..200u64 {
            kv.apply(&b.record(now, &sample_at(2, 3, i * GIB, T0, i * 1000)));
            now += 60;
        }
        let h = kv.history(60);
        let c = h.merged(SeriesId::Cluster);
        assert_eq!(c.len(), 200);
        let written: Vec<u64> = c
            .column(cluster::WRITTEN_BYTES)
            .iter()
            .map(|p| p.1)
            .collect();
        assert!(written.windows(2).all(|w| w[0] <= w[1]));
        // Nothing lost across the takeover: B counted from A's last point.
        assert_eq!(*written.last().unwrap(), 2 * 199 * 1000);
        let used: Vec<u64> = c.column(cluster::USED).iter().map(|p| p.1).collect();
        assert_eq!(used, (0..200).map(|i| i * GIB).collect::<Vec<_>>());
        // An OSD restart (new since, counters from 0) keeps the total rising.
        let mut s = sample_at(2, 3, 0, T0 + 999, 500);
        s.osds.truncate(1);
        let w = b.record(now, &s);
        kv.apply(&w);
        assert_eq!(b.totals()[cluster::WRITTEN_BYTES], 2 * 199 * 1000 + 500);
    }

    #[test]
    fn the_manager_holds_only_open_chunks() {
        let mut r = Recorder::new(60);
        for i in 0..2 * 1440u64 {
            let _ = r.record(T0 + i * 60, &sample_at(4, 1000, i, T0, i));
        }
        // At most a chunk of each tier per series.
        let bound = 1000 * (24 + 30) + 7 * (15 + 24);
        assert!(r.points_held() <= bound, "{}", r.points_held());
    }
}
