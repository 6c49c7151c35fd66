//! When the cluster and its pools run out of space: a robust growth rate
//! from the capacity history, with an interval, turned into days until
//! nearfull and full. Pure.
//!
//! # Method
//!
//! 1. **Window.** The last [`Params::window_secs`] (14 days) of a usage
//!    series (hourly points, then the minute points of the last two days),
//!    resampled by linear interpolation onto at most
//!    [`Params::max_points`] (400) evenly spaced points.
//! 2. **One-off jumps.** The increments between neighbouring points are
//!    compared with their median `m` and robust spread `σ = 1.4826 · MAD`:
//!    an increment further than `max(6σ, 3|m|)` from `m` is a jump, and a
//!    run of jumps of one sign is one event (a bulk copy over a few hours
//!    is one burst). When a sign has at most [`Params::max_one_off`] (2)
//!    events in the window they are one-offs — a migration, a big cleanup
//!    — and their increments are replaced by `m`: they moved the level
//!    (which the room to fill already reflects) but say nothing of the
//!    rate. When they recur (3 or more, e.g. nightly deletes, a weekly
//!    load) they are how the space is used, and they stay: the trend is
//!    then the net rate.
//! 3. **Rate.** The Theil–Sen estimator on what remains: the median of the
//!    slopes between every pair of points. Half the points can be off
//!    (noise, a spike, a stray copy being reclaimed) before it moves, and
//!    over periodic deletes it lands on the net rate, where a least-squares
//!    line or a straight line through two points is pulled by wherever the
//!    window starts and ends.
//! 4. **Interval.** The 10th and 90th percentiles of the slopes of the
//!    pairs at least a third of the window apart (an 80% range of the rate
//!    over spans of several days; it is an empirical spread, not a formal
//!    confidence interval), widened if needed to contain the rate.
//! 5. **Days.** `room / rate`, with the earliest day from the high rate and
//!    the latest from the low one (none when the low rate is not
//!    positive). A rate that is zero or negative means "not filling": no
//!    date.
//!
//! The cluster's room is the raw space that can be written before the
//! first OSD taking data reaches the full (or nearfull) ratio, and its
//! usage is the raw bytes of data (every copy). Every pool is placed on
//! every OSD, so every pool fills when they do: a pool's room is its max
//! avail (logical), consumed at the cluster's raw rate divided by the
//! pool's replica count. Each pool's own growth is reported beside it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::history::{History, SeriesId, cluster, pool};

/// Seconds in a day.
pub const DAY: f64 = 86_400.0;

/// How the trend is estimated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// The recent window the rate is fitted on.
    pub window_secs: u64,
    /// Points the window is resampled to, at most (the estimator costs
    /// their square).
    pub max_points: usize,
    /// Fewer points than this: no trend.
    pub min_points: usize,
    /// Jumps of one sign are one-offs (ignored) up to this many events.
    pub max_one_off: usize,
    /// Lower quantile of the long-pair slopes for the interval (its upper
    /// is `1 - q`): 0.1 gives an 80% range.
    pub interval_quantile: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            window_secs: 14 * 86_400,
            max_points: 400,
            min_points: 5,
            max_one_off: 2,
            interval_quantile: 0.1,
        }
    }
}

/// A usage series' robust growth rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trend {
    /// Bytes per day (Theil–Sen, after one-off jumps are set aside).
    pub rate_per_day: f64,
    /// Low end of the 80% range.
    pub rate_low_per_day: f64,
    /// High end of the 80% range.
    pub rate_high_per_day: f64,
    /// Points the rate was fitted on (after resampling).
    pub points: usize,
    /// Days the window covers.
    pub span_days: f64,
    /// One-off jump events set aside (bursts, one-time cleanups).
    pub one_off_jumps: usize,
    /// Recurring jump events kept (periodic deletes or loads).
    pub recurring_jumps: usize,
}

/// When a room runs out at a trend.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Eta {
    /// Whether usage grows at all; no dates if not.
    pub filling: bool,
    /// Days until the room is used up at the rate (0: already).
    pub days: Option<f64>,
    /// At the high end of the rate's range.
    pub earliest_days: Option<f64>,
    /// At the low end; `None` when the low end does not grow.
    pub latest_days: Option<f64>,
}

fn median_of(v: &mut [f64]) -> f64 {
    quantile_of(v, 0.5)
}

/// The `q` quantile by linear interpolation between order statistics.
fn quantile_of(v: &mut [f64], q: f64) -> f64 {
    assert!(!v.is_empty());
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let (_, &mut a, right) = v.select_nth_unstable_by(lo, f64::total_cmp);
    let b = if hi == lo {
        a
    } else {
        // The smallest of the elements above `lo` is order statistic `lo + 1`.
        right.iter().copied().fold(f64::INFINITY, f64::min)
    };
    a + (b - a) * (pos - lo as f64)
}

/// Resamples `(t, y)` (ascending `t`) to `n` evenly spaced points by
/// linear interpolation.
fn resample(points: &[(u64, f64)], n: usize) -> Vec<(f64, f64)> {
    let t0 = points[0].0 as f64;
    let t1 = points[points.len() - 1].0 as f64;
    if n < 2 || t1 <= t0 {
        return points.iter().map(|&(t, y)| (t as f64, y)).collect();
    }
    let step = (t1 - t0) / (n - 1) as f64;
    let mut out = Vec::with_capacity(n);
    let mut j = 0;
    for i in 0..n {
        let t = if i == n - 1 { t1 } else { t0 + step * i as f64 };
        while j + 1 < points.len() - 1 && (points[j + 1].0 as f64) < t {
            j += 1;
        }
        let (ta, ya) = (points[j].0 as f64, points[j].1);
        let (tb, yb) = (points[j + 1].0 as f64, points[j + 1].1);
        let y = if tb > ta {
            ya + (yb - ya) * ((t - ta) / (tb - ta)).clamp(0.0, 1.0)
        } else {
            yb
        };
        out.push((t, y));
    }
    out
}

/// The robust growth rate of a usage series (`(unix seconds, bytes)`,
/// ascending), by the method in the module docs. `None` with fewer than
/// [`Params::min_points`] points in the window or no time between them.
pub fn trend(points: &[(u64, f64)], p: &Params) -> Option<Trend> {
    let end = points.last()?.0;
    let from = end.saturating_sub(p.window_secs);
    let window: Vec<(u64, f64)> = points
        .iter()
        .copied()
        .filter(|&(t, y)| t >= from && y.is_finite())
        .collect();
    if window.len() < p.min_points.max(2) || window[0].0 >= end {
        return None;
    }
    let n = window.len().min(p.max_points.max(p.min_points).max(2));
    let pts = resample(&window, n);
    let ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
    let mut d: Vec<f64> = ys.windows(2).map(|w| w[1] - w[0]).collect();
    let m = median_of(&mut d.clone());
    let mut dev: Vec<f64> = d.iter().map(|x| (x - m).abs()).collect();
    let sigma = 1.4826 * median_of(&mut dev);
    let scale = ys.iter().fold(0.0f64, |a, y| a.max(y.abs()));
    let tau = (6.0 * sigma).max(3.0 * m.abs()).max(1e-9 * scale + 1.0);
    // Jump events: runs of same-signed jumps.
    let flag: Vec<i8> = d
        .iter()
        .map(|x| {
            if x - m > tau {
                1
            } else if m - x > tau {
                -1
            } else {
                0
            }
        })
        .collect();
    let events = |sign: i8| {
        flag.iter()
            .enumerate()
            .filter(|&(i, &f)| f == sign && (i == 0 || flag[i - 1] != sign))
            .count()
    };
    let (mut one_off, mut recurring) = (0, 0);
    for sign in [1i8, -1] {
        let e = events(sign);
        if e == 0 {
            continue;
        }
        if e <= p.max_one_off {
            one_off += e;
            for (x, f) in d.iter_mut().zip(&flag) {
                if *f == sign {
                    *x = m;
                }
            }
        } else {
            recurring += e;
        }
    }
    let mut y = Vec::with_capacity(pts.len());
    y.push(ys[0]);
    for x in &d {
        y.push(y[y.len() - 1] + x);
    }
    let ts: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let span = ts[ts.len() - 1] - ts[0];
    let mut all = Vec::with_capacity(ts.len() * (ts.len() - 1) / 2);
    let mut long = Vec::new();
    for i in 0..ts.len() {
        for j in i + 1..ts.len() {
            let dt = ts[j] - ts[i];
            if dt <= 0.0 {
                continue;
            }
            let s = (y[j] - y[i]) / dt;
            all.push(s);
            if dt >= span / 3.0 {
                long.push(s);
            }
        }
    }
    if all.is_empty() {
        return None;
    }
    let rate = median_of(&mut all);
    let (mut lo, mut hi) = if long.is_empty() {
        (rate, rate)
    } else {
        (
            quantile_of(&mut long, p.interval_quantile),
            quantile_of(&mut long, 1.0 - p.interval_quantile),
        )
    };
    lo = lo.min(rate);
    hi = hi.max(rate);
    Some(Trend {
        rate_per_day: rate * DAY,
        rate_low_per_day: lo * DAY,
        rate_high_per_day: hi * DAY,
        points: ts.len(),
        span_days: span / DAY,
        one_off_jumps: one_off,
        recurring_jumps: recurring,
    })
}

/// When `room` bytes are used up at `rate` bytes/day and its range.
pub fn eta(room: f64, t: &Trend) -> Eta {
    eta_at(
        room,
        t.rate_per_day,
        t.rate_low_per_day,
        t.rate_high_per_day,
    )
}

/// [`eta`] from the three rates (bytes per day).
pub fn eta_at(room: f64, rate: f64, low: f64, high: f64) -> Eta {
    if rate <= 0.0 || !rate.is_finite() {
        return Eta {
            filling: false,
            days: None,
            earliest_days: None,
            latest_days: None,
        };
    }
    let days = |r: f64| (r > 0.0).then(|| (room.max(0.0) / r).max(0.0));
    Eta {
        filling: true,
        days: days(rate),
        earliest_days: days(high.max(rate)),
        latest_days: days(low.min(rate)),
    }
}

/// The cluster's outlook.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterOutlook {
    /// Raw bytes of data now (every copy).
    pub used_bytes: u64,
    /// Raw bytes that can still be written before an OSD is full.
    pub full_room_bytes: u64,
    /// ... before an OSD is nearfull.
    pub nearfull_room_bytes: u64,
    /// Growth of the raw bytes of data.
    pub trend: Trend,
    /// Until the first OSD is nearfull.
    pub until_nearfull: Eta,
    /// Until the first OSD is full (writes needing space fail).
    pub until_full: Eta,
}

/// One pool's outlook.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolOutlook {
    /// Pool id.
    pub id: u32,
    /// Logical bytes stored now.
    pub stored_bytes: u64,
    /// Logical bytes writable before an OSD is full.
    pub max_avail_bytes: u64,
    /// ... before an OSD is nearfull.
    pub nearfull_avail_bytes: u64,
    /// The pool's own growth (logical bytes), if enough history.
    pub growth: Option<Trend>,
    /// Until its OSDs are nearfull, at every pool's growth.
    pub until_nearfull: Eta,
    /// Until its OSDs are full, at every pool's growth.
    pub until_full: Eta,
}

/// The forecast of every pool and the cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Forecast {
    /// How it was computed, in one line.
    pub method: &'static str,
    /// The window fitted, in days.
    pub window_days: f64,
    /// The cluster; `None` without enough history.
    pub cluster: Option<ClusterOutlook>,
    /// Each pool with history (and known to the caller).
    pub pools: Vec<PoolOutlook>,
}

/// One-line description of the method, for output.
pub const METHOD: &str = "Theil-Sen slope of used bytes over the last 14 days (one-off jumps set aside, recurring ones kept); 80% range from the 10th-90th percentile of slopes of pairs at least a third of the window apart";

/// Forecasts from a history: `pool_sizes` gives each pool's replica count
/// (pools not in it are left out).
pub fn forecast(h: &History, pool_sizes: &BTreeMap<u32, u32>, p: &Params) -> Forecast {
    let c = h.merged(SeriesId::Cluster);
    let as_f = |s: &crate::history::Series, m: usize| -> Vec<(u64, f64)> {
        s.column(m)
            .into_iter()
            .map(|(t, v)| (t, v as f64))
            .collect()
    };
    let cluster_trend = trend(&as_f(&c, cluster::USED), p);
    let cluster = cluster_trend.as_ref().and_then(|t| {
        let (_, last) = c.last()?;
        Some(ClusterOutlook {
            used_bytes: last[cluster::USED],
            full_room_bytes: last[cluster::FULL_ROOM],
            nearfull_room_bytes: last[cluster::NEARFULL_ROOM],
            trend: t.clone(),
            until_nearfull: eta(last[cluster::NEARFULL_ROOM] as f64, t),
            until_full: eta(last[cluster::FULL_ROOM] as f64, t),
        })
    });
    let mut pools = Vec::new();
    for (&id, &size) in pool_sizes {
        let s = h.merged(SeriesId::Pool(id));
        let Some((_, last)) = s.last() else { continue };
        let growth = trend(&as_f(&s, pool::STORED), p);
        let per = f64::from(size.max(1));
        let (until_nearfull, until_full) = match &cluster_trend {
            Some(t) => {
                let at = |room: u64| {
                    eta_at(
                        room as f64,
                        t.rate_per_day / per,
                        t.rate_low_per_day / per,
                        t.rate_high_per_day / per,
                    )
                };
                (at(last[pool::NEARFULL_AVAIL]), at(last[pool::MAX_AVAIL]))
            }
            None => {
                let none = eta_at(0.0, 0.0, 0.0, 0.0);
                (none.clone(), none)
            }
        };
        pools.push(PoolOutlook {
            id,
            stored_bytes: last[pool::STORED],
            max_avail_bytes: last[pool::MAX_AVAIL],
            nearfull_avail_bytes: last[pool::NEARFULL_AVAIL],
            growth,
            until_nearfull,
            until_full,
        });
    }
    Forecast {
        method: METHOD,
        window_days: p.window_secs as f64 / DAY,
        cluster,
        pools,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;
    const H: u64 = 3600;
    const T0: u64 = 1_800_000_000;

    /// Hourly points over `days` days of `f(hour)`.
    fn hourly(days: u64, f: impl Fn(u64) -> f64) -> Vec<(u64, f64)> {
        (0..=days * 24).map(|h| (T0 + h * H, f(h))).collect()
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1.0)
    }

    /// A deterministic noise in [-1, 1].
    fn noise(i: u64) -> f64 {
        let x = (i
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407)
            >> 33) as f64;
        x / (1u64 << 31) as f64 * 2.0 - 1.0
    }

    #[test]
    fn steady_growth_gives_its_rate_and_a_tight_range() {
        let pts = hourly(14, |h| 100.0 * GIB + 10.0 * GIB * h as f64 / 24.0);
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 10.0 * GIB, 1e-6), "{t:?}");
        assert!(close(t.rate_low_per_day, 10.0 * GIB, 1e-6), "{t:?}");
        assert!(close(t.rate_high_per_day, 10.0 * GIB, 1e-6), "{t:?}");
        assert_eq!((t.one_off_jumps, t.recurring_jumps), (0, 0));
        let e = eta(200.0 * GIB, &t);
        assert!(e.filling);
        assert!(close(e.days.unwrap(), 20.0, 1e-6), "{e:?}");
        assert!(close(e.earliest_days.unwrap(), 20.0, 1e-6));
        assert!(close(e.latest_days.unwrap(), 20.0, 1e-6));
    }

    #[test]
    fn growth_with_nightly_deletes_gives_the_net_rate() {
        // 1 GiB an hour, 12 GiB deleted every night: 12 GiB a day net,
        // where the gross rate is 24.
        let pts = hourly(14, |h| {
            50.0 * GIB + h as f64 * GIB - 12.0 * GIB * (h / 24) as f64
        });
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 12.0 * GIB, 0.10), "{t:?}");
        assert!(t.recurring_jumps >= 10, "{t:?}");
        assert!(
            t.rate_low_per_day <= 12.0 * GIB && t.rate_high_per_day >= 12.0 * GIB,
            "{t:?}"
        );
        // Deletes every three days (4 in the window) are recurring too.
        let pts = hourly(14, |h| h as f64 * GIB - 36.0 * GIB * (h / 72) as f64);
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 12.0 * GIB, 0.15), "{t:?}");
    }

    #[test]
    fn a_single_burst_does_not_dominate() {
        // 10 GiB a day, and once, mid-window, 200 GiB copied in: a line
        // through the ends would say 24 GiB a day.
        let pts = hourly(14, |h| {
            10.0 * GIB * h as f64 / 24.0 + if h >= 7 * 24 { 200.0 * GIB } else { 0.0 }
        });
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 10.0 * GIB, 0.01), "{t:?}");
        assert_eq!(t.one_off_jumps, 1);
        assert!(t.rate_high_per_day < 11.0 * GIB, "{t:?}");
        // A burst spread over three hours is one event too; a one-time
        // cleanup likewise.
        let pts = hourly(14, |h| {
            10.0 * GIB * h as f64 / 24.0 + 70.0 * GIB * (h.clamp(100, 103) - 100) as f64
                - if h >= 250 { 150.0 * GIB } else { 0.0 }
        });
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 10.0 * GIB, 0.01), "{t:?}");
        assert_eq!(t.one_off_jumps, 2);
    }

    #[test]
    fn flat_and_shrinking_usage_is_not_filling() {
        let flat = hourly(14, |_| 300.0 * GIB);
        let t = trend(&flat, &Params::default()).unwrap();
        assert_eq!(t.rate_per_day, 0.0);
        let e = eta(100.0 * GIB, &t);
        assert!(!e.filling && e.days.is_none());
        // Flat with noise: a rate near zero either way.
        let noisy = hourly(14, |h| 300.0 * GIB + GIB * noise(h));
        let t = trend(&noisy, &Params::default()).unwrap();
        assert!(t.rate_per_day.abs() < 0.05 * GIB, "{t:?}");
        let shrinking = hourly(14, |h| 300.0 * GIB - 5.0 * GIB * h as f64 / 24.0);
        let t = trend(&shrinking, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, -5.0 * GIB, 1e-6), "{t:?}");
        assert!(!eta(100.0 * GIB, &t).filling);
    }

    #[test]
    fn noisy_growth_is_found_within_its_range() {
        let pts = hourly(14, |h| 10.0 * GIB * h as f64 / 24.0 + 2.0 * GIB * noise(h));
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 10.0 * GIB, 0.05), "{t:?}");
        assert!(t.rate_low_per_day < t.rate_per_day && t.rate_per_day < t.rate_high_per_day);
        let e = eta(100.0 * GIB, &t);
        assert!(e.earliest_days.unwrap() <= e.days.unwrap());
        assert!(e.days.unwrap() <= e.latest_days.unwrap());
    }

    #[test]
    fn uneven_points_and_a_long_history_use_the_recent_window() {
        // 60 days: slow growth at first, 10 GiB/day over the last 14, in
        // hourly points and then, for the last two days, minute points.
        let f = |t: u64| {
            let d = (t - T0) as f64 / 86_400.0;
            if d < 46.0 {
                d * GIB
            } else {
                46.0 * GIB + (d - 46.0) * 10.0 * GIB
            }
        };
        let mut pts: Vec<(u64, f64)> = (0..58 * 24).map(|h| (T0 + h * H, 0.0)).collect();
        pts.extend((0..2 * 1440).map(|m| (T0 + 58 * 86_400 + m * 60, 0.0)));
        for p in &mut pts {
            p.1 = f(p.0);
        }
        let t = trend(&pts, &Params::default()).unwrap();
        assert!(close(t.rate_per_day, 10.0 * GIB, 1e-3), "{t:?}");
        assert!(t.points <= 400 && t.span_days > 13.9);
        // Too little history: no trend.
        assert!(trend(&pts[..3], &Params::default()).is_none());
        assert!(trend(&[], &Params::default()).is_none());
    }

    #[test]
    fn a_room_already_used_up_is_zero_days_away() {
        let pts = hourly(2, |h| h as f64 * GIB);
        let t = trend(&pts, &Params::default()).unwrap();
        assert_eq!(eta(-5.0, &t).days, Some(0.0));
        assert!(close(eta(48.0 * GIB, &t).days.unwrap(), 2.0, 1e-6));
    }

    #[test]
    fn quantiles_interpolate() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile_of(&mut v, 0.5), 2.5);
        assert_eq!(quantile_of(&mut v, 0.0), 1.0);
        assert_eq!(quantile_of(&mut v, 1.0), 4.0);
        let mut one = vec![7.0];
        assert_eq!(median_of(&mut one), 7.0);
    }
}
