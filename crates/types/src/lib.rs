//! Identifiers and units shared by every Pontoon crate.
//!
//! Each id is a newtype so that an OSD id can never be passed where a volume
//! id is expected. This crate owns no behaviour beyond ordering, formatting
//! and fixed-width little-endian encoding ([`codec`]); it must never depend on
//! any other Pontoon crate.

use std::fmt;

pub mod codec;
pub mod wire_mode;

pub use wire_mode::WireMode;

/// Size of one data block: the unit of allocation, checksumming and O_DIRECT I/O.
pub const BLOCK_SIZE: usize = 4096;
/// [`BLOCK_SIZE`] as a `u64`, for offset arithmetic.
pub const BLOCK_SIZE_U64: u64 = BLOCK_SIZE as u64;

/// Identifies a volume cluster-wide; allocated by the manager, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct VolumeId(pub u64);

impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vol{}", self.0)
    }
}

/// One object: the `index`-th fixed-size piece of a volume. The unit of
/// placement, versioning and recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ObjectId {
    /// Volume the object belongs to.
    pub volume: VolumeId,
    /// Position of the object inside the volume (offset / object size).
    pub index: u64,
}

impl ObjectId {
    /// Builds an object id from raw parts.
    pub const fn new(volume: u64, index: u64) -> Self {
        Self {
            volume: VolumeId(volume),
            index,
        }
    }

    /// A stable 64-bit hash used for placement (object -> PG). It must never
    /// change: data placement on disk depends on it.
    pub fn placement_hash(&self) -> u64 {
        mix64(self.volume.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ mix64(self.index))
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.volume, self.index)
    }
}

/// Version of an object: the interval epoch in which the primary stamped it,
/// then a counter within that interval. Ordered lexicographically, so any
/// write stamped in a later interval supersedes every write of an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    /// Map epoch at which the stamping primary's interval began.
    pub epoch: u64,
    /// Counter within the interval.
    pub seq: u64,
}

impl Version {
    /// The version of an object that was never written.
    pub const ZERO: Version = Version { epoch: 0, seq: 0 };

    /// Builds a version from its parts.
    pub const fn new(epoch: u64, seq: u64) -> Self {
        Self { epoch, seq }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}'{}", self.epoch, self.seq)
    }
}

/// Cluster map epoch: bumped by every change that moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// Identifies an OSD (one per data device) cluster-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OsdId(pub u32);

impl fmt::Display for OsdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "osd.{}", self.0)
    }
}

/// Identifies a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PoolId(pub u32);

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pool{}", self.0)
    }
}

/// Identifies a placement group: a pool and an index below the pool's PG count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PgId {
    /// Pool the PG belongs to.
    pub pool: PoolId,
    /// Index within the pool, `0..pg_count`.
    pub index: u32,
}

impl PgId {
    /// Builds a PG id from raw parts.
    pub const fn new(pool: u32, index: u32) -> Self {
        Self {
            pool: PoolId(pool),
            index,
        }
    }
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool.0, self.index)
    }
}

/// A finaliser with good avalanche (splitmix64's), used for stable hashing.
pub const fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Parses a human size such as `512`, `4k`, `64KiB`, `10G` or `1.5T` into bytes
/// (binary multiples). Returns `None` for anything else.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return None;
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        "p" | "pb" | "pib" => 1 << 50,
        _ => return None,
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    let f: f64 = num.parse().ok()?;
    let v = f * mult as f64;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return None;
    }
    Some(v as u64)
}

/// UTC calendar time of a Unix time in seconds: (year, month 1-12, day
/// 1-31, hour, minute, second), by H. Hinnant's days-to-civil algorithm.
pub fn civil_time(unix_secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (unix_secs / 86_400) as i64;
    let rem = (unix_secs % 86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

/// Formats a byte count with a binary unit, e.g. `1.50 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_time_matches_the_calendar() {
        assert_eq!(civil_time(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil_time(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(civil_time(1_795_000_000), (2026, 11, 18, 11, 6, 40));
        assert_eq!(civil_time(4_102_444_799), (2099, 12, 31, 23, 59, 59));
    }

    #[test]
    fn versions_order_by_epoch_then_seq() {
        assert!(Version::new(2, 0) > Version::new(1, 999));
        assert!(Version::new(2, 5) > Version::new(2, 4));
        assert_eq!(Version::ZERO, Version::default());
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size("1.5M"), Some(3 << 19));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("5 parsecs"), None);
        assert_eq!(parse_size("99999999999P"), None);
    }

    #[test]
    fn placement_hash_is_stable() {
        // Placement on disk depends on this value never changing.
        assert_eq!(
            ObjectId::new(1, 2).placement_hash(),
            ObjectId::new(1, 2).placement_hash()
        );
        assert_ne!(
            ObjectId::new(1, 2).placement_hash(),
            ObjectId::new(2, 1).placement_hash()
        );
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161D_100B_05E5);
    }
}
