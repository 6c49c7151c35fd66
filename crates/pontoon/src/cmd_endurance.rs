//! `pontoon osd endurance` (drive writes, write amplification, the
//! journal's share, NVMe SMART and the projected wear-out per OSD; see
//! `pontoon_mgr::endurance`) and `pontoon osd set-rated-dwpd` (the rating
//! it is judged against).

use anyhow::{Result, bail};
use clap::Args;
use pontoon_cluster::history::{RatedEndurance, default_warranty_years};
use pontoon_mgr::endurance::{OsdEndurance, osd_endurance};
use pontoon_mgr::history::SeriesId;
use pontoon_types::{OsdId, format_size};

use crate::cluster_args::{ClusterArgs, parse_size_arg};
use crate::cmd_history::{fmt_days, fmt_time, unix_now};

/// Arguments of `pontoon osd endurance`.
#[derive(Args, Debug)]
pub struct EnduranceArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `pontoon osd set-rated-dwpd`.
#[derive(Args, Debug)]
pub struct RatedDwpdArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The OSD's id number (`3` or `osd.3`).
    #[arg(value_parser = parse_osd)]
    id: OsdId,
    /// The drive's rated drive writes per day (e.g. 3); 0 clears the rating.
    dwpd: f64,
    /// The capacity the rating refers to (default: the OSD's device size).
    #[arg(long, value_name = "SIZE")]
    capacity: Option<String>,
    /// The warranty period the rating holds for, in years.
    #[arg(long, value_name = "YEARS", default_value_t = default_warranty_years())]
    warranty_years: f64,
}

fn parse_osd(s: &str) -> Result<OsdId, String> {
    s.strip_prefix("osd.")
        .unwrap_or(s)
        .parse()
        .map(OsdId)
        .map_err(|_| format!("{s:?} is not an OSD id (a number, or osd.N)"))
}

/// Runs `pontoon osd set-rated-dwpd`.
pub fn set_rated(a: RatedDwpdArgs) -> Result<()> {
    let capacity = a
        .capacity
        .as_deref()
        .map(|s| parse_size_arg("--capacity", s))
        .transpose()?;
    if !a.dwpd.is_finite() || a.dwpd < 0.0 {
        bail!("the rated DWPD must be a positive number (0 clears it)");
    }
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        if a.dwpd == 0.0 {
            store.set_rated_endurance(a.id, None).await?;
            println!("cleared the rated endurance of {}", a.id);
            return Ok(());
        }
        let r = RatedEndurance {
            rated_dwpd: a.dwpd,
            capacity_bytes: capacity,
            warranty_years: a.warranty_years,
        };
        store.set_rated_endurance(a.id, Some(&r)).await?;
        println!(
            "{} rated {} DWPD{} for {} years",
            a.id,
            r.rated_dwpd,
            capacity.map_or(String::new(), |c| format!(" of {}", format_size(c))),
            r.warranty_years
        );
        Ok(())
    })
}

/// Sets the same rating on OSDs `ids` (for `pontoon up --rated-dwpd`).
pub async fn rate_all(
    store: &pontoon_cluster::MapStore,
    ids: impl IntoIterator<Item = u32>,
    dwpd: f64,
) -> Result<()> {
    let r = RatedEndurance {
        rated_dwpd: dwpd,
        capacity_bytes: None,
        warranty_years: default_warranty_years(),
    };
    for id in ids {
        store.set_rated_endurance(OsdId(id), Some(&r)).await?;
    }
    Ok(())
}

/// Every OSD's endurance, from the map, the reports, the ratings and the
/// history.
pub async fn load(store: &pontoon_cluster::MapStore) -> Result<Vec<OsdEndurance>> {
    let map = store.load().await?;
    let reports = store.reports().await?;
    let rated = store.rated_endurance().await?;
    let h = pontoon_mgr::sampler::load_history(store, 0, false).await?;
    let now = unix_now();
    Ok(map
        .osds
        .values()
        .map(|o| {
            let r = reports.iter().find(|r| r.osd == o.id);
            let device = r.map_or(o.device_bytes, |r| r.device_bytes.max(o.device_bytes));
            osd_endurance(
                o.id.0,
                &h.merged(SeriesId::Osd(o.id.0)),
                r,
                device,
                rated.get(&o.id),
                now,
            )
        })
        .collect())
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or("-".into(), f)
}

/// `pontoon osd endurance` as text.
pub fn render(list: &[OsdEndurance]) -> String {
    let mut out = vec![format!(
        "{:<8} {:>10} {:>8} {:>12} {:>12} {:>6} {:>8}  {:>8} {:>10}  {:<10} {:>6} {:>7}  {}",
        "OSD",
        "DEVICE",
        "DAYS",
        "USER WRITE",
        "DEVICE WRITE",
        "WA",
        "DWPD",
        "JOURNAL",
        "JRNL DWPD*",
        "NVME",
        "RATED",
        "USED",
        "WEAR-OUT"
    )];
    for e in list {
        let nvme = match &e.nvme {
            None => "not NVMe".to_string(),
            Some(n) => match (n.lifetime_written_bytes, &n.error) {
                (Some(b), _) => format!("{} {}%", format_size(b), n.percentage_used.unwrap_or(0)),
                (None, Some(_)) => "unreadable".into(),
                (None, None) => "-".into(),
            },
        };
        let (rated, used, wear) = match &e.rated {
            None => ("-".into(), "-".into(), "(no rating)".into()),
            Some(r) => (
                format!("{}", r.rated_dwpd),
                format!("{:.3}%", r.used_fraction * 100.0),
                match (r.years_left, r.wearout_unix) {
                    (Some(y), Some(t)) if y < 1.0 => {
                        format!("{} ({})", fmt_days(y * 365.25), &fmt_time(t)[..10])
                    }
                    (Some(y), Some(t)) => format!("{y:.1} y ({})", &fmt_time(t)[..10]),
                    (Some(_), None) => "> 10,000 y".into(),
                    _ => "not wearing".into(),
                },
            ),
        };
        out.push(format!(
            "{:<8} {:>10} {:>8.2} {:>12} {:>12} {:>6} {:>8}  {:>8} {:>10}  {:<10} {:>6} {:>7}  {}",
            format!("osd.{}", e.osd),
            format_size(e.device_bytes),
            e.days,
            format_size(e.user_written_bytes),
            format_size(e.device_written_bytes),
            opt(e.write_amplification, |x| format!("{x:.2}")),
            opt(e.dwpd, |x| format!("{x:.3}")),
            opt(e.write_buffer.share_of_device_writes, |x| format!(
                "{:.0}%",
                x * 100.0
            )),
            opt(e.write_buffer.dwpd_if_own_device, |x| format!("{x:.2}")),
            nvme,
            rated,
            used,
            wear
        ));
    }
    out.push(String::new());
    out.push(
        "Written bytes over the history (counters since start when there is none yet). WA = device / user bytes written by the store; \
         JOURNAL = the journal's share of the device's writes (it shares the data device: no OSD has a separate write-buffer device yet); \
         JRNL DWPD* = its writes per day over the ring's size, i.e. the DWPD a separate write-buffer device of that size would see. \
         WEAR-OUT at the history's average rate against rated DWPD x capacity x warranty years, less what the drive wrote (NVMe SMART when present)."
            .into(),
    );
    out.join("\n")
}

/// Runs `pontoon osd endurance`.
pub fn run(a: EnduranceArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = a.cluster.connect().await?;
        let list = load(&store).await?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&list)?);
        } else if list.is_empty() {
            println!("no OSDs");
        } else {
            println!("{}", render(&list));
        }
        Ok(())
    })
}
