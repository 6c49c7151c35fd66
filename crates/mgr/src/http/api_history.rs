//! The REST endpoints of the capacity history, its forecast and the
//! drives' endurance (the dashboard's capacity, OSD and endurance pages
//! read them):
//!
//! * `GET /api/v1/df/history` — the stored history ([`crate::history`]),
//!   column by column, with the counters' latest rates and the forecast
//!   ([`crate::forecast`]). Query: `series` (comma-separated: `cluster`,
//!   `pools`, `osds`, `volumes`, or one series such as `osd.3`; default
//!   `cluster,pools,osds`), `since` (Unix seconds: only points from then)
//!   and `last` (only each series' last N points). The rates and the
//!   forecast always come from the whole history.
//! * `GET /api/v1/endurance` — every OSD's endurance
//!   ([`crate::endurance::osd_endurance`]) against its rating, as
//!   `pontoon osd endurance --json` prints it.
//!
//! The history's JSON here is column by column (what a chart plots);
//! `pontoon df --history --json` prints rows of points.
//!
//! Both read the whole history from etcd at each request
//! ([`crate::sampler::load_history`]; no cache: a few hundred keys per 64
//! OSDs, and the dashboard asks every few seconds).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::Method;
use pontoon_cluster::{ClusterMap, OsdReport};
use pontoon_types::{PoolId, VolumeId};
use serde::{Deserialize, Serialize};

use super::api::Route;
use super::{ApiError, Shared};
use crate::endurance::{OsdEndurance, osd_endurance};
use crate::forecast::{Forecast, Params, forecast};
use crate::history::{self, History, Kind, SeriesId, cluster, increase, osd, osd_increase};
use crate::sampler::load_history;

/// The history endpoint.
pub const HISTORY_PATH: &str = "/api/v1/df/history";
/// The endurance endpoint.
pub const ENDURANCE_PATH: &str = "/api/v1/endurance";

/// The endpoints of this module (behind the token, like every `/api/`
/// route but the OpenAPI description).
pub fn routes() -> Vec<Route> {
    vec![
        Route {
            method: Method::GET,
            path: HISTORY_PATH,
            public: false,
            handler: axum::routing::get(get_history),
        },
        Route {
            method: Method::GET,
            path: ENDURANCE_PATH,
            public: false,
            handler: axum::routing::get(get_endurance),
        },
    ]
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The query of `GET /api/v1/df/history`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Which series, comma-separated.
    pub series: Option<String>,
    /// Only points at or after (Unix seconds).
    pub since: Option<u64>,
    /// Only each series' last N points.
    pub last: Option<usize>,
}

/// One series, column by column.
#[derive(Debug, Serialize, PartialEq)]
pub struct SeriesView {
    /// `cluster`, `pool.1`, `osd.3`, `volume.7`.
    pub id: String,
    /// `cluster`, `pool`, `osd` or `volume`.
    pub kind: &'static str,
    /// The pool's or volume's name, when the map still has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Times of the points (Unix seconds, ascending).
    pub t: Vec<u64>,
    /// Each metric's values, one per time.
    pub values: BTreeMap<&'static str, Vec<u64>>,
}

/// Rates of the counters over the end of a series ([`RATE_SPAN_SECS`]).
#[derive(Debug, Serialize, PartialEq)]
pub struct Rates {
    /// `cluster` or `osd.N`.
    pub id: String,
    /// Seconds the rates are measured over.
    pub over_secs: u64,
    /// When the later point was taken (Unix seconds).
    pub at_unix: u64,
    /// Store read operations per second.
    pub reads_per_sec: f64,
    /// Store write operations per second (replica writes included).
    pub writes_per_sec: f64,
    /// Bytes read per second.
    pub read_bytes_per_sec: f64,
    /// Bytes the stores' callers wrote per second.
    pub written_bytes_per_sec: f64,
    /// Bytes written to the devices per second.
    pub device_written_bytes_per_sec: f64,
}

/// What `GET /api/v1/df/history` answers.
#[derive(Debug, Serialize)]
pub struct HistoryView {
    /// The manager's clock (Unix seconds).
    pub now_unix: u64,
    /// The sample interval, estimated from the points (0: unknown yet).
    pub interval_secs: u64,
    /// The series asked for.
    pub series: Vec<SeriesView>,
    /// The cluster's and each OSD's counter rates over the last
    /// [`RATE_SPAN_SECS`] (at least the last sample interval).
    pub rates: Vec<Rates>,
    /// When the cluster and the pools fill.
    pub forecast: Forecast,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Cluster => "cluster",
        Kind::Pool => "pool",
        Kind::Osd => "osd",
        Kind::Volume => "volume",
    }
}

/// Which series a `series` query names.
fn wanted(spec: &str, id: SeriesId) -> Result<bool, ApiError> {
    let mut any = false;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        any = match part {
            "cluster" | "pools" | "osds" | "volumes" => {
                any || kind_name(id.kind()) == part.trim_end_matches('s')
            }
            one => {
                let (kind, n) = one.split_once('.').ok_or_else(|| bad_series(one))?;
                if !["cluster", "pool", "osd", "volume"].contains(&kind)
                    || n.parse::<u64>().is_err()
                {
                    return Err(bad_series(one));
                }
                any || id.to_string() == one
            }
        };
    }
    Ok(any)
}

fn bad_series(part: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unknown series {part:?}: use cluster, pools, osds, volumes or one series such as osd.3"
    ))
}

/// The span rates are measured over, at least (the OSDs' counters reach
/// the manager with their reports, which may lag by 10 s: over a shorter
/// span a fast sample interval would show bursts and zeros).
pub const RATE_SPAN_SECS: u64 = 30;

/// The rates over the last [`RATE_SPAN_SECS`] of `s` (an OSD's or the
/// cluster's series), at least over its last two points; counters that
/// restarted in between are counted from 0.
fn rates(id: SeriesId, s: &history::Series) -> Option<Rates> {
    if s.len() < 2 {
        return None;
    }
    let last = s.len() - 1;
    let t1 = s.times()[last];
    let first = s
        .times()
        .partition_point(|&t| t < t1.saturating_sub(RATE_SPAN_SECS))
        .min(last - 1);
    let secs = t1.checked_sub(s.times()[first]).filter(|d| *d > 0)?;
    let grew = |m: usize| {
        let total: u64 = (first..last)
            .map(|i| {
                let (prev, cur) = (s.point(i).1, s.point(i + 1).1);
                match id {
                    SeriesId::Osd(_) => osd_increase(prev, cur, m),
                    _ => increase(prev[m], cur[m]),
                }
            })
            .sum();
        total as f64 / secs as f64
    };
    let m = match id {
        SeriesId::Osd(_) => [
            osd::READS,
            osd::WRITES,
            osd::READ_BYTES,
            osd::WRITTEN_BYTES,
            osd::DEVICE_WRITTEN,
        ],
        _ => [
            cluster::READS,
            cluster::WRITES,
            cluster::READ_BYTES,
            cluster::WRITTEN_BYTES,
            cluster::DEVICE_WRITTEN,
        ],
    };
    Some(Rates {
        id: id.to_string(),
        over_secs: secs,
        at_unix: t1,
        reads_per_sec: grew(m[0]),
        writes_per_sec: grew(m[1]),
        read_bytes_per_sec: grew(m[2]),
        written_bytes_per_sec: grew(m[3]),
        device_written_bytes_per_sec: grew(m[4]),
    })
}

/// The view of `h` for query `q`, names from `map`.
pub fn history_view(
    h: &History,
    map: &ClusterMap,
    q: &HistoryQuery,
    now: u64,
) -> Result<HistoryView, ApiError> {
    let spec = q.series.as_deref().unwrap_or("cluster,pools,osds");
    let mut series = Vec::new();
    let mut all_rates = Vec::new();
    for id in h.ids() {
        let merged = h.merged(id);
        if matches!(id, SeriesId::Cluster | SeriesId::Osd(_))
            && let Some(r) = rates(id, &merged)
        {
            all_rates.push(r);
        }
        if !wanted(spec, id)? {
            continue;
        }
        let mut s = merged;
        if let Some(since) = q.since {
            s.retain_from(since);
        }
        let mut t = s.times().to_vec();
        let skip = q.last.map_or(0, |n| t.len().saturating_sub(n));
        t.drain(..skip);
        let names = id.kind().metrics();
        let values = names
            .iter()
            .enumerate()
            .map(|(m, name)| {
                (
                    *name,
                    s.column(m).into_iter().skip(skip).map(|(_, v)| v).collect(),
                )
            })
            .collect();
        let name = match id {
            SeriesId::Pool(p) => map.pools.get(&PoolId(p)).map(|r| r.name.clone()),
            SeriesId::Volume(v) => map.volumes.get(&VolumeId(v)).map(|r| r.name.clone()),
            _ => None,
        };
        series.push(SeriesView {
            id: id.to_string(),
            kind: kind_name(id.kind()),
            name,
            t,
            values,
        });
    }
    let sizes: BTreeMap<u32, u32> = map.pools.values().map(|p| (p.id.0, p.size)).collect();
    Ok(HistoryView {
        now_unix: now,
        interval_secs: h.interval_secs,
        series,
        rates: all_rates,
        forecast: forecast(h, &sizes, &Params::default()),
    })
}

async fn get_history(
    State(s): State<Shared>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<HistoryView>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let volumes = q
        .series
        .as_deref()
        .is_some_and(|spec| spec.contains("volume"));
    // The whole history: the rates and the forecast need it.
    let (h, map) = tokio::try_join!(load_history(&s.store, 0, volumes), s.store.load())?;
    Ok(Json(history_view(&h, &map, &q, unix_now())?))
}

/// Every OSD's endurance from the history, the reports and the ratings:
/// what `GET /api/v1/endurance` answers (as `pontoon osd endurance
/// --json` prints it).
pub fn endurance_view(
    h: &History,
    map: &ClusterMap,
    reports: &[OsdReport],
    rated: &BTreeMap<pontoon_types::OsdId, pontoon_cluster::history::RatedEndurance>,
    now: u64,
) -> Vec<OsdEndurance> {
    map.osds
        .values()
        .map(|o| {
            let report = reports.iter().find(|r| r.osd == o.id);
            let device = report.map_or(o.device_bytes, |r| r.device_bytes.max(o.device_bytes));
            osd_endurance(
                o.id.0,
                &h.merged(SeriesId::Osd(o.id.0)),
                report,
                device,
                rated.get(&o.id),
                now,
            )
        })
        .collect()
}

async fn get_endurance(State(s): State<Shared>) -> Result<Json<Vec<OsdEndurance>>, ApiError> {
    let (h, map, reports, rated) = tokio::try_join!(
        load_history(&s.store, 0, false),
        s.store.load(),
        s.store.reports(),
        s.store.rated_endurance()
    )?;
    Ok(Json(endurance_view(&h, &map, &reports, &rated, unix_now())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Series;

    const T0: u64 = 1_800_000_000;

    /// Ten fine points a minute apart: the cluster filling 1 GiB a
    /// minute, one OSD writing 100 ops a second.
    fn hist() -> History {
        let mut h = History::default();
        let mut c = Series::of(SeriesId::Cluster);
        let mut o = Series::of(SeriesId::Osd(2));
        for i in 0..10u64 {
            let mut v = [0u64; 12];
            v[cluster::SIZE] = 100 << 30;
            v[cluster::USED] = i << 30;
            v[cluster::FULL_ROOM] = (90 - i) << 30;
            v[cluster::NEARFULL_ROOM] = (80 - i) << 30;
            v[cluster::WRITES] = i * 6000;
            c.push(T0 + 60 * i, &v);
            let mut w = [0u64; 10];
            w[osd::SINCE] = T0 - 5;
            w[osd::WRITES] = i * 6000;
            o.push(T0 + 60 * i, &w);
        }
        let fine = h.tiers.entry(history::FINE.name).or_default();
        fine.insert(SeriesId::Cluster, c);
        fine.insert(SeriesId::Osd(2), o);
        h.interval_secs = 60;
        h
    }

    #[test]
    fn the_view_has_columns_rates_and_a_forecast() {
        let h = hist();
        let map = ClusterMap::default();
        let q = HistoryQuery {
            series: Some("cluster".into()),
            since: Some(T0 + 60),
            last: Some(5),
        };
        let v = history_view(&h, &map, &q, T0 + 600).unwrap();
        assert_eq!(v.series.len(), 1);
        let c = &v.series[0];
        assert_eq!((c.id.as_str(), c.kind), ("cluster", "cluster"));
        assert_eq!(c.t, (5..10).map(|i| T0 + 60 * i).collect::<Vec<_>>());
        assert_eq!(
            c.values["used_bytes"],
            (5..10).map(|i| i << 30).collect::<Vec<u64>>()
        );
        // Rates of every OSD and the cluster, whatever was asked.
        assert_eq!(v.rates.len(), 2);
        let osd = v.rates.iter().find(|r| r.id == "osd.2").unwrap();
        assert_eq!(osd.over_secs, 60);
        assert!((osd.writes_per_sec - 100.0).abs() < 1e-9);
        // 1 GiB a minute, 81 GiB of room left: 81 minutes.
        let c = v.forecast.cluster.as_ref().expect("a cluster forecast");
        let days = c.until_full.days.unwrap();
        assert!((days * 1440.0 - 81.0).abs() < 0.5, "{days}");
    }

    #[test]
    fn rates_span_thirty_seconds_of_fast_samples() {
        // Sampled every second; the counters move every 10 s (reports).
        let mut o = Series::of(SeriesId::Osd(1));
        for i in 0..=60u64 {
            let mut w = [0u64; 10];
            w[osd::SINCE] = T0;
            w[osd::WRITES] = (i / 10) * 1000;
            o.push(T0 + i, &w);
        }
        let r = rates(SeriesId::Osd(1), &o).unwrap();
        assert_eq!((r.over_secs, r.at_unix), (30, T0 + 60));
        assert!((r.writes_per_sec - 100.0).abs() < 1e-9, "{r:?}");
        // A restart within the span counts from 0.
        let mut o = Series::of(SeriesId::Osd(1));
        for (i, (since, writes)) in [(T0, 500u64), (T0, 1000), (T0 + 5, 300)].iter().enumerate() {
            let mut w = [0u64; 10];
            w[osd::SINCE] = *since;
            w[osd::WRITES] = *writes;
            o.push(T0 + 10 * i as u64, &w);
        }
        let r = rates(SeriesId::Osd(1), &o).unwrap();
        assert_eq!(r.over_secs, 20);
        assert!((r.writes_per_sec - 40.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn series_selection_and_its_errors() {
        assert!(wanted("cluster,osds", SeriesId::Osd(3)).unwrap());
        assert!(!wanted("cluster,osds", SeriesId::Pool(1)).unwrap());
        assert!(wanted("pool.1", SeriesId::Pool(1)).unwrap());
        assert!(!wanted("pool.1", SeriesId::Pool(2)).unwrap());
        assert!(wanted("volumes", SeriesId::Volume(9)).unwrap());
        assert!(wanted("disks", SeriesId::Cluster).is_err());
        assert!(wanted("osd.x", SeriesId::Cluster).is_err());
    }

    #[test]
    fn an_empty_history_gives_empty_views() {
        let h = History::default();
        let v = history_view(&h, &ClusterMap::default(), &HistoryQuery::default(), T0).unwrap();
        assert!(v.series.is_empty() && v.rates.is_empty());
        assert!(v.forecast.cluster.is_none());
        assert_eq!(v.interval_secs, 0);
        let e = endurance_view(&h, &ClusterMap::default(), &[], &BTreeMap::new(), T0);
        assert!(e.is_empty());
    }
}
