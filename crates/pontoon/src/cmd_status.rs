//! `pontoon status`: the cluster's status (see [`pontoon_mgr::status`]).

use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use pontoon_mgr::status::{recovery_rate, render, render_recovery};

use crate::cluster_args::{ClusterArgs, parse_duration};

/// Arguments of `pontoon status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Print the status again every --interval until interrupted, with the
    /// recovery rate and time left measured between prints.
    #[arg(long)]
    watch: bool,
    /// Time between prints with --watch (and between the two samples that
    /// measure a recovery in progress).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    interval: String,
}

/// Runs `pontoon status`.
pub fn run(args: StatusArgs) -> Result<()> {
    let interval = parse_duration(&args.interval).map_err(|e| anyhow!("--interval: {e}"))?;
    if interval.is_zero() {
        bail!("--interval must be more than 0");
    }
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        let sample = || async {
            let status = pontoon_mgr::status::load(&store).await?;
            anyhow::Ok((status, Instant::now()))
        };
        let (mut status, mut at) = sample().await?;
        let mut rate = None;
        // A recovery in progress is measured over one interval, so the
        // one-shot status can say how long it has left.
        if !args.watch && status.objects.missing.max(status.objects.degraded) > 0 {
            tokio::time::sleep(interval).await;
            let (next, next_at) = sample().await?;
            rate = recovery_rate(&status.objects, &next.objects, (next_at - at).as_secs_f64());
            (status, at) = (next, next_at);
        }
        loop {
            if args.json {
                let mut v = serde_json::to_value(&status)?;
                v["recovery"] = serde_json::to_value(rate)?;
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut text = render(&status);
                if let Some(r) = &rate {
                    text.push('\n');
                    text.push_str(&render_recovery(r));
                }
                if args.watch {
                    // Clear the screen and go home, as `watch` does.
                    print!("\x1b[2J\x1b[H");
                }
                println!("{text}");
            }
            if !args.watch {
                return Ok(());
            }
            tokio::time::sleep(interval).await;
            let (next, next_at) = sample().await?;
            rate = recovery_rate(&status.objects, &next.objects, (next_at - at).as_secs_f64());
            (status, at) = (next, next_at);
        }
    })
}
