//! `pontoon`: the one command-line binary of Pontoon, a scale-out block
//! storage system for NVMe.

mod cpu;
mod fio;
mod load;
mod store_bench;
mod store_startup;

use clap::{Parser, Subcommand};

/// Pontoon: scale-out block storage that keeps up with NVMe.
#[derive(Parser)]
#[command(name = "pontoon", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmark the device store against raw fio on the same filesystem.
    StoreBench(store_bench::StoreBenchArgs),
    /// Measure how long a store holding many objects takes to open.
    StoreStartup(store_startup::StoreStartupArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PONTOON_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::StoreBench(a) => store_bench::run(a),
        Command::StoreStartup(a) => store_startup::run(a),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
