//! `pontoon config ...`: `show`, this node's effective settings (the
//! configuration file, environment and flags; see
//! [`crate::cmd_config_show`]); `set`, `get`, `rm` and `ls`, the runtime
//! settings the whole cluster shares in its map (see
//! [`crate::cmd_config_cluster`]).

use anyhow::Result;
use clap::{Args, Subcommand};

/// `pontoon config ...`.
#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    cmd: ConfigCmd,
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Print this node's effective settings (configuration file,
    /// environment, flags, defaults) and where each came from.
    Show(crate::cmd_config_show::ShowArgs),
    /// Set a runtime setting the whole cluster shares (kept in the map;
    /// daemons apply it live).
    Set(crate::cmd_config_cluster::SetArgs),
    /// Print a runtime setting's value.
    Get(crate::cmd_config_cluster::GetArgs),
    /// Return a runtime setting to its default.
    Rm(crate::cmd_config_cluster::RmArgs),
    /// List the runtime settings with their values and defaults.
    Ls(crate::cmd_config_cluster::LsArgs),
}

/// Runs `pontoon config ...`.
pub fn run(args: ConfigArgs) -> Result<()> {
    match args.cmd {
        ConfigCmd::Show(a) => crate::cmd_config_show::run(a),
        ConfigCmd::Set(a) => crate::cmd_config_cluster::set(a),
        ConfigCmd::Get(a) => crate::cmd_config_cluster::get(a),
        ConfigCmd::Rm(a) => crate::cmd_config_cluster::rm(a),
        ConfigCmd::Ls(a) => crate::cmd_config_cluster::ls(a),
    }
}
