//! `pontoon balancer status|on|off|eval`: the manager's upmap balancer,
//! with Ceph's words. The balancer itself runs in the active manager
//! ([`pontoon_mgr::balancer`]); these commands switch it through the map's
//! settings and read what it did and would do.

use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use pontoon_cluster::balancer::BalancerStatus;
use pontoon_mgr::balancer::{self, Eval, Score};
use serde::Serialize;

use crate::cluster_args::{ClusterArgs, format_duration, parse_duration};

/// `pontoon balancer ...`.
#[derive(Args, Debug)]
pub struct BalancerArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: BalancerCmd,
}

#[derive(Subcommand, Debug)]
enum BalancerCmd {
    /// Show whether the balancer is on, its limits, the upmap exceptions
    /// in force and the outcome of its latest round.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Switch the balancer on (the default), optionally changing its limits.
    On {
        /// Most PG replicas one round may move, as a fraction of all PG
        /// replicas (default 0.05, Ceph's target_max_misplaced_ratio).
        #[arg(long, value_name = "RATIO")]
        max_misplaced: Option<f64>,
        /// Time between rounds (default 60s).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        interval: Option<Duration>,
    },
    /// Switch the balancer off: the exceptions in force stay, no new ones
    /// are added.
    Off,
    /// Score the PG distribution (each OSD's PG replicas against its
    /// weight share) now and after what the balancer would do.
    Eval {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// What `balancer status --json` prints.
#[derive(Serialize)]
struct StatusView {
    active: bool,
    mode: &'static str,
    max_misplaced: f64,
    interval_secs: u64,
    round_budget: u32,
    upmaps: usize,
    last: Option<BalancerStatus>,
}

/// Runs `pontoon balancer ...`.
pub fn run(args: BalancerArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match args.cmd {
            BalancerCmd::Status { json } => {
                let (map, last) = tokio::try_join!(store.load(), store.balancer_status())?;
                let s = map.settings.balancer;
                let view = StatusView {
                    active: s.active,
                    mode: "upmap",
                    max_misplaced: s.max_misplaced,
                    interval_secs: s.interval_secs,
                    round_budget: balancer::round_budget(&map),
                    upmaps: balancer::upmap_count(&map),
                    last,
                };
                if json {
                    println!("{}", serde_json::to_string_pretty(&view)?);
                } else {
                    print!("{}", render_status(&view, unix_now()));
                }
            }
            BalancerCmd::On {
                max_misplaced,
                interval,
            } => {
                let s = store
                    .set_balancer(|b| {
                        b.active = true;
                        if let Some(r) = max_misplaced {
                            b.max_misplaced = r;
                        }
                        if let Some(i) = interval {
                            b.interval_secs = i.as_secs();
                        }
                    })
                    .await?;
                println!(
                    "balancer on: a round every {}, moving at most {} of PG replicas each",
                    format_duration(Duration::from_secs(s.interval_secs)),
                    percent(s.max_misplaced * 100.0)
                );
            }
            BalancerCmd::Off => {
                store.set_balancer(|b| b.active = false).await?;
                println!("balancer off");
            }
            BalancerCmd::Eval { json } => {
                let map = store.load().await?;
                let eval = balancer::evaluate(&map).map_err(|e| anyhow!("{e}"))?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&eval)?);
                } else {
                    print!("{}", render_eval(&eval));
                }
            }
        }
        Ok(())
    })
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `x` percent with one decimal.
fn percent(x: f64) -> String {
    format!("{x:.1}%")
}

fn render_status(v: &StatusView, now: u64) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "active: {}\nmode: {}\nround: every {}, at most {} PG replicas ({} of all)\nupmap exceptions: {}\n",
        if v.active { "yes" } else { "no" },
        v.mode,
        format_duration(Duration::from_secs(v.interval_secs)),
        v.round_budget,
        percent(v.max_misplaced * 100.0),
        v.upmaps
    ));
    match &v.last {
        None => out.push_str("last round: none yet\n"),
        Some(l) => {
            let ago = now.saturating_sub(l.last_run_unix);
            out.push_str(&format!(
                "last round: {} ago ({}, {} ms): {}\n",
                format_duration(Duration::from_secs(ago)),
                l.result,
                l.duration_ms,
                l.message
            ));
            out.push_str(&format!(
                "moved since {} took over: {} PG replicas",
                l.manager, l.moved_total
            ));
            if let Some(t) = l.last_move_unix {
                out.push_str(&format!(
                    ", last {} ago",
                    format_duration(Duration::from_secs(now.saturating_sub(t)))
                ));
            }
            out.push('\n');
        }
    }
    out
}

fn score_line(s: &Score) -> String {
    format!(
        "max deviation {}, stddev {:.2} PGs, {} upmap exceptions",
        percent(s.max_deviation_pct),
        s.stddev,
        s.upmaps
    )
}

fn render_eval(e: &Eval) -> String {
    let mut out = format!(
        "{:<8} {:>6} {:>8} {:>9} {:>6} {:>8} {:>9}\n",
        "OSD", "PGS", "SHARE", "DEV", "AFTER", "SHARE", "DEV"
    );
    for b in &e.before.osds {
        let a = e.after.osds.iter().find(|a| a.osd == b.osd);
        out.push_str(&format!(
            "{:<8} {:>6} {:>8.1} {:>9} {:>6} {:>8} {:>9}\n",
            format!("osd.{}", b.osd),
            b.pgs,
            b.target,
            format!("{:+.1}%", b.deviation_pct),
            a.map_or("-".into(), |a| a.pgs.to_string()),
            a.map_or("-".into(), |a| format!("{:.1}", a.target)),
            a.map_or("-".into(), |a| format!("{:+.1}%", a.deviation_pct)),
        ));
    }
    out.push_str(&format!("now:   {}\n", score_line(&e.before)));
    out.push_str(&format!(
        "after: {} ({} replica moves in {} rounds of at most {})\n",
        score_line(&e.after),
        e.moves,
        e.rounds,
        e.round_budget
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_well() {
        let v = StatusView {
            active: true,
            mode: "upmap",
            max_misplaced: 0.05,
            interval_secs: 60,
            round_budget: 19,
            upmaps: 7,
            last: Some(BalancerStatus {
                manager: "node1-42".into(),
                last_run_unix: 1000,
                duration_ms: 3,
                result: "balanced".into(),
                message: "every OSD is within its share".into(),
                moved: 0,
                moved_total: 7,
                last_move_unix: Some(900),
            }),
        };
        let text = render_status(&v, 1030);
        assert!(text.contains("active: yes\nmode: upmap\n"), "{text}");
        assert!(
            text.contains("at most 19 PG replicas (5.0% of all)"),
            "{text}"
        );
        assert!(text.contains("upmap exceptions: 7"), "{text}");
        assert!(
            text.contains("last round: 30s ago (balanced, 3 ms)"),
            "{text}"
        );
        assert!(text.contains("7 PG replicas, last 130s ago"), "{text}");
        let none = StatusView { last: None, ..v };
        assert!(render_status(&none, 0).contains("last round: none yet"));
    }
}
