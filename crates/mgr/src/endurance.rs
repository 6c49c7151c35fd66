//! Drive endurance per OSD: bytes the device wrote against the bytes its
//! users asked for (write amplification), drive writes per day over the
//! history, the journal's (write buffer's) share, NVMe SMART where the
//! device is NVMe, and a projected wear-out date against a rated DWPD.
//! Pure: from an OSD's history series, its latest report and its rating.
//!
//! * Written bytes come from the store's counters (journal records, data
//!   written in place, journaled data moved home, checkpoints), summed over
//!   the history with restarts accounted ([`crate::history::osd_increase`]).
//!   Before any history exists, the counters since the OSD started.
//! * DWPD = device bytes written per day ÷ capacity (the rated capacity if
//!   set, else the device size).
//! * Rated endurance: `rated DWPD × capacity × 365.25 × warranty years`
//!   bytes. Written so far: the NVMe "data units written" (×512,000) when
//!   the device reports it — the drive's whole life — else what the
//!   history counted. Years left = what remains ÷ the history's daily
//!   rate.
//! * The write buffer: today the journal shares the data device, so its
//!   writes are part of the device's and its share is shown; its "DWPD if
//!   it had a device of its own of the ring's size" is what an operator
//!   needs to size a separate write-buffer device (the cache-tier
//!   question).

use pontoon_cluster::OsdReport;
use pontoon_cluster::history::RatedEndurance;
use serde::Serialize;

use crate::history::{Series, osd, osd_increase};

/// Bytes in one NVMe "data unit" (1,000 × 512 bytes).
pub const NVME_DATA_UNIT: u64 = 512_000;
/// Days in a year, for ratings.
pub const YEAR_DAYS: f64 = 365.25;

/// What was written over a span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Written {
    /// Seconds the counts cover.
    pub secs: u64,
    /// Bytes the store's callers wrote.
    pub user_bytes: u64,
    /// Bytes the device wrote.
    pub device_bytes: u64,
    /// Of those, journal bytes.
    pub journal_bytes: u64,
}

/// What an OSD's history says was written, restarts accounted; `None`
/// with fewer than two points.
pub fn written_over(s: &Series) -> Option<Written> {
    if s.len() < 2 {
        return None;
    }
    let mut w = Written::default();
    let (first, _) = s.point(0);
    let mut prev = s.point(0).1;
    for i in 1..s.len() {
        let (_, cur) = s.point(i);
        w.user_bytes += osd_increase(prev, cur, osd::WRITTEN_BYTES);
        w.device_bytes += osd_increase(prev, cur, osd::DEVICE_WRITTEN);
        w.journal_bytes += osd_increase(prev, cur, osd::JOURNAL_WRITTEN);
        prev = cur;
    }
    w.secs = s.last().map_or(0, |(t, _)| t - first);
    Some(w)
}

/// The write buffer (journal) of an OSD.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WriteBuffer {
    /// Whether it is on a device of its own (else it shares the data device).
    pub separate_device: bool,
    /// Bytes of the journal rings.
    pub ring_bytes: u64,
    /// Bytes written to it over the span.
    pub written_bytes: u64,
    /// Its share of the device's writes.
    pub share_of_device_writes: Option<f64>,
    /// Writes per day over its own size: its DWPD on a device of that size.
    pub dwpd_if_own_device: Option<f64>,
}

/// The NVMe device's own account.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NvmeEndurance {
    /// The device.
    pub device: String,
    /// Bytes written over the device's life (data units × 512,000).
    pub lifetime_written_bytes: Option<u64>,
    /// Its "percentage used" estimate.
    pub percentage_used: Option<u8>,
    /// Why SMART could not be read, if it could not.
    pub error: Option<String>,
}

/// The rating and the projection.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RatedProjection {
    /// Rated drive writes per day.
    pub rated_dwpd: f64,
    /// Capacity the rating refers to.
    pub capacity_bytes: u64,
    /// Warranty years the rating holds for.
    pub warranty_years: f64,
    /// Rated bytes written over the warranty (TBW).
    pub rated_bytes: u64,
    /// Bytes written so far, and where that figure comes from.
    pub written_bytes: u64,
    /// `"nvme smart"` (the drive's life) or `"history"` (since sampling began).
    pub written_basis: &'static str,
    /// Fraction of the rating used.
    pub used_fraction: f64,
    /// Years until the rating is used up at the current rate; `None` if
    /// nothing is being written.
    pub years_left: Option<f64>,
    /// That date, Unix seconds.
    pub wearout_unix: Option<u64>,
}

/// One OSD's endurance.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OsdEndurance {
    /// The OSD.
    pub osd: u32,
    /// Device bytes.
    pub device_bytes: u64,
    /// Where the written figures come from: `"history"` or, before the
    /// history has two points, `"counters since the OSD started"`.
    pub basis: &'static str,
    /// Days the written figures cover.
    pub days: f64,
    /// Bytes the store's callers wrote over `days`.
    pub user_written_bytes: u64,
    /// Bytes the device wrote over `days`.
    pub device_written_bytes: u64,
    /// `device / user` written.
    pub write_amplification: Option<f64>,
    /// Device bytes written per day.
    pub device_written_per_day: Option<f64>,
    /// Drive writes per day (device written per day ÷ capacity).
    pub dwpd: Option<f64>,
    /// The capacity DWPD is measured against.
    pub dwpd_capacity_bytes: u64,
    /// The journal.
    pub write_buffer: WriteBuffer,
    /// `"nvme"` or `"not NVMe"`.
    pub device_kind: &'static str,
    /// SMART, when NVMe.
    pub nvme: Option<NvmeEndurance>,
    /// Against the rating, when one is set.
    pub rated: Option<RatedProjection>,
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Computes an OSD's endurance at `now` (Unix seconds) from its merged
/// history series, its latest report and its rating.
pub fn osd_endurance(
    id: u32,
    series: &Series,
    report: Option<&OsdReport>,
    device_bytes: u64,
    rated: Option<&RatedEndurance>,
    now: u64,
) -> OsdEndurance {
    let io = report.map(|r| r.io.clone()).unwrap_or_default();
    let (basis, w) = match written_over(series) {
        Some(w) if w.secs > 0 => ("history", w),
        _ => (
            "counters since the OSD started",
            Written {
                secs: now.saturating_sub(io.since_unix).max(1) * u64::from(io.since_unix > 0),
                user_bytes: io.written_bytes,
                device_bytes: io.device_written_bytes,
                journal_bytes: io.journal_written_bytes,
            },
        ),
    };
    let days = w.secs as f64 / 86_400.0;
    let per_day = (days > 0.0).then(|| w.device_bytes as f64 / days);
    let cap = rated.and_then(|r| r.capacity_bytes).unwrap_or(device_bytes);
    let ring = report.map_or(0, |r| r.journal_bytes);
    let write_buffer = WriteBuffer {
        separate_device: io.journal_separate,
        ring_bytes: ring,
        written_bytes: w.journal_bytes,
        share_of_device_writes: ratio(w.journal_bytes, w.device_bytes),
        dwpd_if_own_device: (days > 0.0 && ring > 0)
            .then(|| w.journal_bytes as f64 / days / ring as f64),
    };
    let nvme = io.nvme.as_ref().map(|n| NvmeEndurance {
        device: n.device.clone(),
        lifetime_written_bytes: n
            .data_units_written
            .map(|u| u.saturating_mul(NVME_DATA_UNIT)),
        percentage_used: n.percentage_used,
        error: n.error.clone(),
    });
    let rated = rated.map(|r| {
        let rated_bytes = (r.rated_dwpd * cap as f64 * YEAR_DAYS * r.warranty_years) as u64;
        let (written, basis) = match nvme.as_ref().and_then(|n| n.lifetime_written_bytes) {
            Some(b) => (b, "nvme smart"),
            None => (w.device_bytes, "history"),
        };
        let left = rated_bytes.saturating_sub(written) as f64;
        let years_left = per_day.filter(|d| *d > 0.0).map(|d| left / d / YEAR_DAYS);
        RatedProjection {
            rated_dwpd: r.rated_dwpd,
            capacity_bytes: cap,
            warranty_years: r.warranty_years,
            rated_bytes,
            written_bytes: written,
            written_basis: basis,
            used_fraction: ratio(written, rated_bytes).unwrap_or(0.0),
            years_left,
            wearout_unix: years_left
                .filter(|y| *y < 10_000.0)
                .map(|y| now + (y * YEAR_DAYS * 86_400.0) as u64),
        }
    });
    OsdEndurance {
        osd: id,
        device_bytes,
        basis,
        days,
        user_written_bytes: w.user_bytes,
        device_written_bytes: w.device_bytes,
        write_amplification: ratio(w.device_bytes, w.user_bytes),
        device_written_per_day: per_day,
        dwpd: per_day.filter(|_| cap > 0).map(|d| d / cap as f64),
        dwpd_capacity_bytes: cap,
        write_buffer,
        device_kind: if io.nvme.is_some() {
            "nvme"
        } else {
            "not NVMe"
        },
        nvme,
        rated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::SeriesId;
    use pontoon_cluster::{NvmeWear, OsdIo};

    const GIB: u64 = 1 << 30;
    const T0: u64 = 1_800_000_000;

    /// Ten days of hourly points of an OSD writing 100 GiB a day for its
    /// users and 250 a day to its device (40 of them to the journal),
    /// restarted on day 5.
    fn series() -> Series {
        let mut s = Series::of(SeriesId::Osd(0));
        let mut base = (0u64, T0);
        for h in 0..=240u64 {
            if h == 120 {
                // Restarted just after the point of hour 119.
                base = (119, T0 + 119 * 3600 + 1);
            }
            let n = h - base.0;
            let mut v = [0u64; 10];
            v[osd::SINCE] = base.1;
            v[osd::WRITTEN_BYTES] = n * 100 * GIB / 24;
            v[osd::DEVICE_WRITTEN] = n * 250 * GIB / 24;
            v[osd::JOURNAL_WRITTEN] = n * 40 * GIB / 24;
            s.push(T0 + h * 3600, &v);
        }
        s
    }

    fn report(nvme: Option<NvmeWear>) -> OsdReport {
        OsdReport {
            journal_bytes: 4 * GIB,
            io: OsdIo {
                since_unix: T0,
                nvme,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn amplification_dwpd_and_journal_share_come_from_the_history() {
        let now = T0 + 240 * 3600;
        let e = osd_endurance(0, &series(), Some(&report(None)), 1000 * GIB, None, now);
        assert_eq!(e.basis, "history");
        assert!(close(e.days, 10.0));
        // The restart on day 5 loses nothing: the counter restarted from 0
        // exactly at the point.
        assert!(close(e.device_written_bytes as f64, 2500.0 * GIB as f64));
        assert!(close(e.write_amplification.unwrap(), 2.5));
        assert!(close(e.dwpd.unwrap(), 0.25));
        assert!(close(e.write_buffer.share_of_device_writes.unwrap(), 0.16));
        assert!(close(e.write_buffer.dwpd_if_own_device.unwrap(), 10.0));
        assert_eq!(e.device_kind, "not NVMe");
        assert!(e.rated.is_none());
    }

    #[test]
    fn a_rating_projects_the_wearout_date() {
        let now = T0 + 240 * 3600;
        let rated = RatedEndurance {
            rated_dwpd: 1.0,
            capacity_bytes: None,
            warranty_years: 5.0,
        };
        let e = osd_endurance(
            0,
            &series(),
            Some(&report(None)),
            1000 * GIB,
            Some(&rated),
            now,
        );
        let r = e.rated.unwrap();
        assert_eq!(r.written_basis, "history");
        // 1 DWPD on 1000 GiB for 5 years, used at 250 GiB a day: 20 years
        // at that rate, less the 10 days written.
        let rated_bytes = 1000.0 * GIB as f64 * 365.25 * 5.0;
        assert!(close(r.rated_bytes as f64, rated_bytes));
        let left_days = (rated_bytes - 2500.0 * GIB as f64) / (250.0 * GIB as f64);
        assert!(close(r.years_left.unwrap(), left_days / 365.25));
        assert!(r.wearout_unix.unwrap() > now + 19 * 365 * 86_400);
        // With NVMe SMART, the drive's own lifetime count is the basis.
        let nvme = NvmeWear {
            device: "/dev/nvme0n1".into(),
            data_units_written: Some(1_000_000),
            percentage_used: Some(3),
            error: None,
        };
        let e = osd_endurance(
            0,
            &series(),
            Some(&report(Some(nvme))),
            1000 * GIB,
            Some(&rated),
            now,
        );
        assert_eq!(e.device_kind, "nvme");
        let r = e.rated.unwrap();
        assert_eq!(r.written_basis, "nvme smart");
        assert_eq!(r.written_bytes, 512_000_000_000);
    }

    #[test]
    fn without_history_the_counters_since_start_are_used() {
        let mut r = report(None);
        r.io.written_bytes = 10 * GIB;
        r.io.device_written_bytes = 30 * GIB;
        let e = osd_endurance(
            0,
            &Series::of(SeriesId::Osd(0)),
            Some(&r),
            100 * GIB,
            None,
            T0 + 86_400,
        );
        assert_eq!(e.basis, "counters since the OSD started");
        assert!(close(e.write_amplification.unwrap(), 3.0));
        assert!(close(e.dwpd.unwrap(), 0.3));
        // Nothing reported at all: no rates, no panic.
        let e = osd_endurance(0, &Series::of(SeriesId::Osd(0)), None, 0, None, T0);
        assert!(e.dwpd.is_none() && e.write_amplification.is_none());
    }
}
