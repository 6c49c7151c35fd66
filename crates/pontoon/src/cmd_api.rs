//! `pontoon api token`: the REST API's token, for `Authorization: Bearer
//! TOKEN` (see [`pontoon_mgr::http`]).

use anyhow::Result;
use clap::{Args, Subcommand};

use crate::cluster_args::ClusterArgs;

/// `pontoon api ...`.
#[derive(Args, Debug)]
pub struct ApiArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: ApiCmd,
}

#[derive(Subcommand, Debug)]
enum ApiCmd {
    /// Print the REST API token (managers create it when the cluster has
    /// none; this command does too).
    Token,
}

/// Runs `pontoon api ...`.
pub fn run(args: ApiArgs) -> Result<()> {
    crate::runtime()?.block_on(async move {
        let (store, _) = args.cluster.connect().await?;
        match args.cmd {
            ApiCmd::Token => println!("{}", pontoon_mgr::http::ensure_token(&store).await?),
        }
        Ok(())
    })
}
