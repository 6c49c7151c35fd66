//! `pontoon-sim`: runs many seeds of the deterministic simulation and
//! prints statistics; for a failing seed, its trace. `--seed S --trace`
//! replays one seed and prints every event.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use pontoon_sim::{Profile, RunOptions, run_seed};

#[derive(Parser)]
#[command(about = "Deterministic simulation of Pontoon's replication, peering and recovery")]
struct Args {
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Run just this seed (replay).
    #[arg(long)]
    seed: Option<u64>,
    /// Print every event of each run as it happens.
    #[arg(long)]
    trace: bool,
    /// Virtual seconds of workload under faults per seed.
    #[arg(long, default_value_t = 30)]
    fault_secs: u64,
    /// Run the deliberately broken replication (acknowledge after the
    /// primary alone): the checker should fail it.
    #[arg(long)]
    broken: bool,
    /// Family of fault schedules.
    #[arg(long, value_enum, default_value = "mixed")]
    profile: Profile,
    /// Never crash clients (replays seeds found before that fault existed).
    #[arg(long)]
    no_client_crashes: bool,
    /// Judge the snapshots of the volume two clients write by the whole
    /// cut rule, which only a single writer is promised (shows the known
    /// gap of several writers).
    #[arg(long)]
    cross_client_cuts: bool,
    /// Stop at the first failing seed.
    #[arg(long)]
    fail_fast: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.start..args.start.saturating_add(args.seeds)).collect(),
    };
    let wall = Instant::now();
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let (mut ops, mut sim, mut failures) = (0usize, Duration::ZERO, Vec::new());
    let (mut snaps, mut images, mut blocks, mut late) = (0usize, 0usize, 0usize, 0usize);
    let (mut judged, mut rejected, mut clones, mut under) = (0usize, 0usize, 0usize, 0usize);
    for (i, seed) in seeds.iter().enumerate() {
        let mut opts = RunOptions::new(*seed);
        opts.fault_time = Duration::from_secs(args.fault_secs);
        opts.broken = args.broken;
        opts.profile = args.profile;
        opts.client_crashes = !args.no_client_crashes;
        opts.echo = args.trace;
        opts.cross_client_cuts = args.cross_client_cuts;
        let out = run_seed(&opts);
        ops += out.ops;
        snaps += out.snapshots;
        images += out.snapshot_images;
        blocks += out.snapshot_blocks;
        late += out.snapshots_late;
        judged += out.shifted.0;
        under += out.snapshot_reads_under_faults;
        clones += usize::from(out.clone_blocks > 0);
        rejected += out.shifted.1;
        sim += out.sim_time;
        for (k, n) in &out.faults {
            *faults.entry(k.to_string()).or_default() += n;
        }
        if let Some(f) = &out.failure {
            println!(
                "\nFAILED seed {seed}:\n{f}\n--- last events of seed {seed} ---\n{}--- replay: pontoon-sim --seed {seed} --trace --profile {}{}{} ---\n",
                out.trace_tail,
                if args.profile == Profile::Churn {
                    "churn"
                } else {
                    "mixed"
                },
                if args.broken { " --broken" } else { "" },
                if args.cross_client_cuts {
                    " --cross-client-cuts"
                } else {
                    ""
                }
            );
            failures.push(*seed);
            if args.fail_fast {
                break;
            }
        }
        if (i + 1) % 50 == 0 {
            eprintln!(
                "{} seeds, {} failed, {:.0} s",
                i + 1,
                failures.len(),
                wall.elapsed().as_secs_f64()
            );
        }
    }
    let wall = wall.elapsed();
    println!(
        "schedules run:     {}",
        seeds.len().min(if args.fail_fast && !failures.is_empty() {
            seeds
                .iter()
                .position(|s| Some(s) == failures.last())
                .map_or(seeds.len(), |p| p + 1)
        } else {
            seeds.len()
        })
    );
    println!("operations checked: {ops}");
    println!("snapshots taken:   {snaps} ({late} confirmed by the OSDs only after 15 s)");
    println!("snapshots checked: {images} images, {blocks} blocks read after healing");
    println!("snapshot reads under the faults checked: {under}");
    println!(
        "clones checked:    {clones} (written under the faults, read against their parent snapshot)"
    );
    println!(
        "checker self-test: {rejected} of {judged} images judged by the previous snapshot's times rejected"
    );
    println!("faults injected:   {}", faults.values().sum::<u64>());
    for (k, n) in &faults {
        println!("  {k:<12} {n}");
    }
    println!("failures:          {} {:?}", failures.len(), failures);
    println!(
        "simulated time:    {:.0} s in {:.1} s of wall-clock time ({:.0}x)",
        sim.as_secs_f64(),
        wall.as_secs_f64(),
        sim.as_secs_f64() / wall.as_secs_f64().max(1e-9)
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
