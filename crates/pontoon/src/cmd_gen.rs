//! `pontoon completion SHELL` (shell completion scripts) and the hidden
//! `pontoon manpages DIR` (one man page per command), both generated from
//! the command-line definition, so they never drift from `--help`. The
//! Debian package (scripts/build-deb.sh) ships their output.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use clap_complete::Shell;

/// Arguments of `pontoon completion`.
#[derive(Args, Debug)]
pub struct CompletionArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Arguments of `pontoon manpages`.
#[derive(Args, Debug)]
pub struct ManpagesArgs {
    /// Directory to write pontoon.1 and pontoon-COMMAND.1 into (created if
    /// missing).
    dir: PathBuf,
}

/// Prints the completion script of `cmd` for a shell.
pub fn completion(a: CompletionArgs, cmd: clap::Command) -> Result<()> {
    use clap_complete::Generator as _;
    let mut cmd = cmd.bin_name("pontoon");
    cmd.build();
    // A closed pipe (`| head`) is an error, not a panic.
    let mut out = std::io::stdout().lock();
    a.shell
        .try_generate(&cmd, &mut out)
        .context("writing the completion script")
}

/// Writes the man pages of `cmd` and its (visible) subcommands.
pub fn manpages(a: ManpagesArgs, cmd: clap::Command) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    clap_mangen::generate_to(cmd, &a.dir)
        .with_context(|| format!("writing man pages to {}", a.dir.display()))
}
