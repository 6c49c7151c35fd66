//! `pontoon health [detail] [--json]`: HEALTH_OK / HEALTH_WARN / HEALTH_ERR
//! and every reason (see [`pontoon_mgr::health`]).

use anyhow::Result;
use clap::Args;
use pontoon_mgr::health::{render_detail, summary_line};

use crate::cluster_args::ClusterArgs;

/// Arguments of `pontoon health`.
#[derive(Args, Debug)]
pub struct HealthArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// `detail`: every check with the OSDs, PGs and daemons it concerns.
    #[arg(value_parser = ["detail"])]
    detail: Option<String>,
    /// Print JSON (every check with its detail).
    #[arg(long)]
    json: bool,
}

/// Runs `pontoon health`.
pub fn run(args: HealthArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        let health = pontoon_mgr::status::load(&store).await?.health;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&health)?);
        } else if args.detail.is_some() {
            println!("{}", render_detail(&health));
        } else {
            println!("{}", summary_line(&health));
        }
        Ok(())
    })
}
