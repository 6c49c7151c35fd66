//! `pontoon df --history`: the capacity history the manager keeps in etcd
//! (`pontoon_mgr::history`) as sparklines or JSON points, with the
//! forecast of when the cluster and each pool reach nearfull and full
//! (`pontoon_mgr::forecast`).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Result, anyhow, bail};
use pontoon_cluster::ClusterMap;
use pontoon_mgr::forecast::{self, Eta, Forecast, Params, Trend};
use pontoon_mgr::history::{self, History, Series, SeriesId, cluster, osd, pool};
use pontoon_types::format_size;
use serde_json::{Value, json};

use crate::cluster_args::{ClusterArgs, parse_duration};

/// What `pontoon df --history` was asked for.
pub struct HistoryOptions {
    /// Where the cluster is.
    pub cluster: ClusterArgs,
    /// JSON instead of text.
    pub json: bool,
    /// Only this pool.
    pub pool: Option<String>,
    /// Only points this recent (a duration).
    pub since: Option<String>,
    /// Also the OSDs.
    pub osds: bool,
    /// Also the volumes.
    pub volumes: bool,
}

/// Width of a sparkline, in characters.
const SPARK: usize = 48;

/// Parses `--history-interval`: whole seconds from 1 s to 10 min.
pub fn parse_interval(s: &str) -> Result<std::time::Duration> {
    let d = parse_duration(s).map_err(|e| anyhow!("--history-interval: {e}"))?;
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || !(1..=history::MAX_INTERVAL_SECS).contains(&secs) {
        bail!(
            "--history-interval must be whole seconds from 1s to {}s",
            history::MAX_INTERVAL_SECS
        );
    }
    Ok(d)
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs `pontoon df --history`.
pub fn run(o: HistoryOptions) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = o.cluster.connect().await?;
        let map = store.load().await?;
        let now = unix_now();
        let since = match &o.since {
            Some(s) => now.saturating_sub(
                parse_duration(s)
                    .map_err(|e| anyhow!("--since: {e}"))?
                    .as_secs(),
            ),
            None => 0,
        };
        if let Some(p) = &o.pool
            && map.pool_by_name(p).is_none()
        {
            bail!("pool {p} not found");
        }
        // The forecast fits its own window, whatever --since shows.
        let params = Params::default();
        let load_from = since.min(now.saturating_sub(params.window_secs));
        let mut h = pontoon_mgr::sampler::load_history(&store, load_from, o.volumes).await?;
        let sizes: BTreeMap<u32, u32> = map
            .pools
            .values()
            .filter(|p| o.pool.as_ref().is_none_or(|n| *n == p.name))
            .map(|p| (p.id.0, p.size))
            .collect();
        let fc = forecast::forecast(&h, &sizes, &params);
        for series in h.tiers.values_mut() {
            for s in series.values_mut() {
                s.retain_from(since);
            }
        }
        if o.json {
            // Compact: thousands of points.
            println!(
                "{}",
                serde_json::to_string(&to_json(&h, &map, &fc, &o, now))?
            );
        } else {
            println!("{}", render(&h, &map, &fc, &o));
        }
        Ok(())
    })
}

/// The pools shown: those of the map (and only `--pool` if given).
fn pools<'a>(map: &'a ClusterMap, o: &HistoryOptions) -> Vec<(u32, &'a str)> {
    map.pools
        .values()
        .filter(|p| o.pool.as_ref().is_none_or(|n| *n == p.name))
        .map(|p| (p.id.0, p.name.as_str()))
        .collect()
}

/// Counter rates between successive points, per second: for the cluster
/// and OSDs. `None` for the first point.
fn rates(id: SeriesId, s: &Series) -> Vec<Option<[f64; 5]>> {
    let pick: [usize; 5] = match id {
        SeriesId::Cluster => [
            cluster::READS,
            cluster::WRITES,
            cluster::READ_BYTES,
            cluster::WRITTEN_BYTES,
            cluster::DEVICE_WRITTEN,
        ],
        _ => [
            osd::READS,
            osd::WRITES,
            osd::READ_BYTES,
            osd::WRITTEN_BYTES,
            osd::DEVICE_WRITTEN,
        ],
    };
    let mut out = Vec::with_capacity(s.len());
    for i in 0..s.len() {
        if i == 0 {
            out.push(None);
            continue;
        }
        let (t0, a) = s.point(i - 1);
        let (t1, b) = s.point(i);
        let dt = (t1 - t0).max(1) as f64;
        let mut r = [0.0; 5];
        for (k, &m) in pick.iter().enumerate() {
            let inc = match id {
                SeriesId::Osd(_) => history::osd_increase(a, b, m),
                _ => history::increase(a[m], b[m]),
            };
            r[k] = inc as f64 / dt;
        }
        out.push(Some(r));
    }
    out
}

/// The cluster's average rates over (at most) the last `secs` seconds of
/// its points, and the seconds they cover.
fn recent_rates(c: &Series, secs: u64) -> Option<(u64, [f64; 5])> {
    let (end, _) = c.last()?;
    let from = c.times().partition_point(|&t| t < end.saturating_sub(secs));
    let (start, _) = c.point(from.min(c.len() - 1));
    let span = end.checked_sub(start).filter(|s| *s > 0)?;
    let r = rates(SeriesId::Cluster, c);
    let mut sum = [0.0; 5];
    let times = c.times();
    for (w, x) in times[from..].windows(2).zip(&r[from + 1..]) {
        let dt = (w[1] - w[0]) as f64;
        if let Some(x) = x {
            for (s, v) in sum.iter_mut().zip(x) {
                *s += v * dt;
            }
        }
    }
    Some((span, sum.map(|s| s / span as f64)))
}

const RATE_NAMES: [&str; 5] = [
    "read_ops_per_sec",
    "write_ops_per_sec",
    "read_bytes_per_sec",
    "written_bytes_per_sec",
    "device_written_bytes_per_sec",
];

/// A series as `{"metrics": [...], "points": [[t, v...], ...]}`, with
/// rates appended for the cluster and OSDs.
fn series_json(id: SeriesId, s: &Series) -> Value {
    let with_rates = matches!(id, SeriesId::Cluster | SeriesId::Osd(_));
    let mut metrics: Vec<&str> = vec!["time_unix"];
    metrics.extend(id.kind().metrics());
    if with_rates {
        metrics.extend(RATE_NAMES);
    }
    let r = if with_rates { rates(id, s) } else { Vec::new() };
    let points: Vec<Value> = s
        .points()
        .enumerate()
        .map(|(i, (t, v))| {
            let mut row: Vec<Value> = vec![json!(t)];
            row.extend(v.iter().map(|x| json!(x)));
            if with_rates {
                match r[i] {
                    Some(rs) => row.extend(rs.iter().map(|x| json!(x))),
                    None => row.extend(std::iter::repeat_n(Value::Null, 5)),
                }
            }
            Value::Array(row)
        })
        .collect();
    json!({ "metrics": metrics, "points": points })
}

fn to_json(h: &History, map: &ClusterMap, fc: &Forecast, o: &HistoryOptions, now: u64) -> Value {
    let mut cluster = series_json(SeriesId::Cluster, &h.merged(SeriesId::Cluster));
    cluster["name"] = json!("cluster");
    let pools: Vec<Value> = pools(map, o)
        .into_iter()
        .map(|(id, name)| {
            let mut v = series_json(SeriesId::Pool(id), &h.merged(SeriesId::Pool(id)));
            v["id"] = json!(id);
            v["name"] = json!(name);
            v
        })
        .collect();
    let mut out = json!({
        "now_unix": now,
        "interval_secs": h.interval_secs,
        "cluster": cluster,
        "pools": pools,
    });
    if o.osds {
        out["osds"] = Value::Array(
            map.osds
                .keys()
                .map(|id| {
                    let sid = SeriesId::Osd(id.0);
                    let mut v = series_json(sid, &h.merged(sid));
                    v["id"] = json!(id.0);
                    v
                })
                .collect(),
        );
    }
    if o.volumes {
        out["volumes"] = Value::Array(
            map.volumes
                .values()
                .filter(|v| {
                    o.pool
                        .as_ref()
                        .is_none_or(|n| map.pools.get(&v.pool).is_some_and(|p| p.name == *n))
                })
                .map(|vol| {
                    let sid = SeriesId::Volume(vol.id.0);
                    let mut v = series_json(sid, &h.merged(sid));
                    v["id"] = json!(vol.id.0);
                    v["name"] = json!(vol.name);
                    v
                })
                .collect(),
        );
    }
    let mut f = serde_json::to_value(fc).unwrap_or(Value::Null);
    if let Some(arr) = f.get_mut("pools").and_then(Value::as_array_mut) {
        for p in arr {
            let id = p["id"].as_u64().unwrap_or(u64::MAX);
            if let Some(rec) = map.pools.values().find(|r| u64::from(r.id.0) == id) {
                p["name"] = json!(rec.name);
            }
        }
    }
    out["forecast"] = f;
    out
}

/// A sparkline of one metric over `[from, to]`: each column shows the
/// last value at or before its end, scaled between the minimum and the
/// maximum.
pub fn sparkline(points: &[(u64, u64)], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let (Some(&(from, _)), Some(&(to, _))) = (points.first(), points.last()) else {
        return String::new();
    };
    let cols = width.min(points.len()).max(1);
    let span = (to - from).max(1) as f64;
    let mut vals = Vec::with_capacity(cols);
    let mut j = 0;
    for c in 0..cols {
        let end = from as f64 + span * (c + 1) as f64 / cols as f64;
        while j + 1 < points.len() && points[j + 1].0 as f64 <= end {
            j += 1;
        }
        vals.push(points[j].1);
    }
    let lo = *vals.iter().min().unwrap_or(&0);
    let hi = *vals.iter().max().unwrap_or(&0);
    vals.iter()
        .map(|&v| {
            if hi == lo {
                BARS[0]
            } else {
                let k = ((v - lo) as f64 / (hi - lo) as f64 * 7.0).round() as usize;
                BARS[k.min(7)]
            }
        })
        .collect()
}

/// `days` as text: minutes, hours, days, or "> 10 y".
pub fn fmt_days(d: f64) -> String {
    if d < 1.0 / 24.0 {
        format!("{:.0} min", (d * 1440.0).max(0.0))
    } else if d < 1.0 {
        format!("{:.1} h", d * 24.0)
    } else if d < 3650.0 {
        format!("{d:.1} d")
    } else {
        "> 10 y".into()
    }
}

fn fmt_eta(e: &Eta) -> String {
    if !e.filling {
        return "not filling".into();
    }
    let d = e.days.map_or("-".into(), fmt_days);
    let lo = e.earliest_days.map_or("-".into(), fmt_days);
    let hi = e.latest_days.map_or("never".into(), fmt_days);
    format!("{d} ({lo} - {hi})")
}

fn signed_size(x: f64) -> String {
    let s = format_size(x.abs() as u64);
    if x < 0.0 { format!("-{s}") } else { s }
}

fn fmt_growth(t: Option<&Trend>) -> String {
    match t {
        None => "(too little history)".into(),
        Some(t) => format!(
            "{} ({} - {})",
            signed_size(t.rate_per_day),
            signed_size(t.rate_low_per_day),
            signed_size(t.rate_high_per_day)
        ),
    }
}

/// Unix seconds as `YYYY-MM-DD HH:MM` UTC.
pub fn fmt_time(t: u64) -> String {
    let (y, m, d, h, min, _) = pontoon_types::civil_time(t);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}")
}

fn row(label: &str, s: &Series, metric: usize, what: &str) -> String {
    let col = s.column(metric);
    match (col.first(), col.last()) {
        (Some(&(from, _)), Some(&(_, now))) => format!(
            "{label:<16} {:>6}  {}  {}  {} {what}",
            col.len(),
            fmt_time(from),
            pad(&sparkline(&col, SPARK), SPARK),
            format_size(now)
        ),
        _ => format!("{label:<16} {:>6}  (no points yet)", 0),
    }
}

fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(width.saturating_sub(n)))
}

fn render(h: &History, map: &ClusterMap, fc: &Forecast, o: &HistoryOptions) -> String {
    let mut out = Vec::new();
    let c = h.merged(SeriesId::Cluster);
    let fine = h
        .tier(history::FINE.name)
        .and_then(|m| m.get(&SeriesId::Cluster))
        .map_or(0, Series::len);
    let hourly = c.len().saturating_sub(fine);
    out.push(format!(
        "--- CAPACITY HISTORY --- {fine} points every {}s, {hourly} hourly points before them",
        h.interval_secs
    ));
    out.push(format!(
        "{:<16} {:>6}  {:<16}  {}  NOW",
        "SERIES",
        "POINTS",
        "FROM (UTC)",
        pad("USED", SPARK)
    ));
    out.push(row("cluster", &c, cluster::USED, "raw used"));
    for (id, name) in pools(map, o) {
        let s = h.merged(SeriesId::Pool(id));
        out.push(row(&format!("pool {name}"), &s, pool::STORED, "stored"));
    }
    if o.osds {
        for id in map.osds.keys() {
            let s = h.merged(SeriesId::Osd(id.0));
            out.push(row(&format!("{id}"), &s, osd::USED, "used"));
        }
    }
    if o.volumes {
        for v in map.volumes.values() {
            if o.pool
                .as_ref()
                .is_some_and(|n| map.pools.get(&v.pool).is_none_or(|p| p.name != *n))
            {
                continue;
            }
            let s = h.merged(SeriesId::Volume(v.id.0));
            out.push(row(&format!("volume {}", v.name), &s, 0, "used"));
        }
    }
    if let Some((secs, r)) = recent_rates(&c, 3600) {
        out.push(String::new());
        out.push(format!(
            "I/O over the last {} (every store, replicas included): {:.0} reads/s, {:.0} writes/s, read {}/s, written {}/s, device {}/s",
            fmt_days(secs as f64 / 86_400.0),
            r[0],
            r[1],
            format_size(r[2] as u64),
            format_size(r[3] as u64),
            format_size(r[4] as u64)
        ));
    }
    out.push(String::new());
    out.push(format!(
        "--- FORECAST --- over the last {:.0} days; ranges are 80%",
        fc.window_days
    ));
    out.push(format!(
        "{:<16} {:<40} {:<30} {}",
        "SERIES", "GROWTH/DAY", "NEARFULL IN", "FULL IN"
    ));
    match &fc.cluster {
        Some(cl) => out.push(format!(
            "{:<16} {:<40} {:<30} {}",
            "cluster (raw)",
            fmt_growth(Some(&cl.trend)),
            fmt_eta(&cl.until_nearfull),
            fmt_eta(&cl.until_full)
        )),
        None => out.push(format!("{:<16} (too little history)", "cluster (raw)")),
    }
    for p in &fc.pools {
        let name = map
            .pools
            .values()
            .find(|r| r.id.0 == p.id)
            .map_or_else(|| format!("pool.{}", p.id), |r| r.name.clone());
        out.push(format!(
            "{:<16} {:<40} {:<30} {}",
            format!("pool {name}"),
            fmt_growth(p.growth.as_ref()),
            fmt_eta(&p.until_nearfull),
            fmt_eta(&p.until_full)
        ));
    }
    out.push(format!("method: {}", fc.method));
    out.push(
        "pools share every OSD, so each fills when the OSDs do: its dates follow every pool's growth; GROWTH/DAY is its own"
            .into(),
    );
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_between_min_and_max() {
        let pts: Vec<(u64, u64)> = (0..8).map(|i| (i, i)).collect();
        assert_eq!(sparkline(&pts, 8), "▁▂▃▄▅▆▇█");
        assert_eq!(sparkline(&[(0, 5), (1, 5)], 8), "▁▁");
        assert_eq!(sparkline(&[], 8), "");
        assert_eq!(sparkline(&pts, 4).chars().count(), 4);
    }

    #[test]
    fn times_and_durations_read_well() {
        assert_eq!(fmt_time(0), "1970-01-01 00:00");
        assert_eq!(fmt_time(1_800_000_000), "2027-01-15 08:00");
        assert_eq!(fmt_time(951_782_400), "2000-02-29 00:00");
        assert_eq!(fmt_days(0.01), "14 min");
        assert_eq!(fmt_days(0.5), "12.0 h");
        assert_eq!(fmt_days(250.0), "250.0 d");
        assert_eq!(fmt_days(5000.0), "> 10 y");
    }
}
