//! One simulation from a seed: boot the cluster, run the workload under
//! faults, heal, wait for the cluster to settle, read everything back,
//! compare replicas, and check the history.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pontoon_client::{Client, Wire};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checker;
use crate::ctx::{Ctx, Fault, FaultRates};
use crate::cuts::{Scope, check_cut};
use crate::executor::{ProcId, Stall, WORLD};
use crate::nemesis::{Plan, heal, nemesis};
use crate::net::ClientWire;
use crate::snaps::{
    CloneLog, SnapLog, check_clone, check_snap_reads, clone_worker, read_image, snap_reader,
    take_snapshots,
};
use crate::workload::{
    BLOCK, History, Outcome as OpOutcome, Shape, describe_difference, encode, offset_of, read_one,
    worker,
};
use crate::world::{CLONE, Config, SCRATCH, SNAPVOL, VOLUME, World};

/// A family of fault schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Every fault kind at the rates the seed draws; OSDs stay down 0.2–15 s.
    Mixed,
    /// Churn: OSDs come back within 0.05–1.5 s (often before their lease
    /// lapses), and 5–10 % of OSD-to-OSD requests are delivered again late.
    Churn,
}

/// How to run one seed.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Which family of schedules the seed draws from.
    pub profile: Profile,
    /// The seed: it decides the fault rates, the fault schedule and every
    /// interleaving.
    pub seed: u64,
    /// Faults and the workload run this long (virtual).
    pub fault_time: Duration,
    /// Run the deliberately broken replication.
    pub broken: bool,
    /// Print events as they happen.
    pub echo: bool,
    /// Allow client crashes (seeds found before that fault existed replay
    /// their original schedule with it off).
    pub client_crashes: bool,
    /// Judge the snapshots of the volume that several clients write by
    /// the whole cut rule, which only a single writer is promised (shows
    /// the known gap; see [`crate::cuts`]).
    pub cross_client_cuts: bool,
}

impl RunOptions {
    /// Defaults for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            profile: Profile::Mixed,
            seed,
            fault_time: Duration::from_secs(30),
            broken: false,
            echo: false,
            client_crashes: true,
            cross_client_cuts: false,
        }
    }
}

/// What one seed did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Why it failed (`None`: passed).
    pub failure: Option<String>,
    /// Client operations checked.
    pub ops: usize,
    /// Snapshots taken (of every volume).
    pub snapshots: usize,
    /// Snapshot images read back and checked as cuts after healing.
    pub snapshot_images: usize,
    /// Blocks read from those images.
    pub snapshot_blocks: usize,
    /// Snapshots whose create waited over 15 s for the OSDs.
    pub snapshots_late: usize,
    /// Blocks of the clone read back and checked (0: no clone made).
    pub clone_blocks: usize,

    /// Snapshot reads made under the faults and checked against the
    /// snapshot's image after healing.
    pub snapshot_reads_under_faults: usize,
    /// Self-test: images judged by the previous snapshot's times, and how
    /// many of those the checker rejected.
    pub shifted: (usize, usize),
    /// Faults injected by kind.
    pub faults: BTreeMap<Fault, u64>,
    /// Virtual time simulated.
    pub sim_time: Duration,
    /// Real time it took.
    pub wall_time: Duration,
    /// Tasks polled.
    pub polls: u64,
    /// The last events before the end.
    pub trace_tail: String,
    /// Digest of the whole trace (equal for a replay of the same seed).
    pub digest: u32,
}

/// Longest a healed cluster may take to settle.
const SETTLE: Duration = Duration::from_secs(180);
const CLIENTS: u32 = 2;
const WORKERS_PER_CLIENT: u32 = 2;
const BLOCKS_PER_OBJECT: u32 = 4;
/// The client process that alone writes [`SNAPVOL`] (in its history).
const SNAP_WRITER: u32 = 2;
/// How many times longer the snapshot volume's workers pause.
const SNAP_THINK: u32 = 4;
/// The client process that reads snapshots under the faults.
const SNAP_READER: u32 = 4;
/// The client process that writes the clone.
const CLONE_WRITER: u32 = 3;
/// The clone's write values start above this (apart from its parent's).
const CLONE_VALUES: u64 = 1 << 40;

/// The fault rates and schedule a seed picks.
fn draw(seed: u64, fault_time: Duration, profile: Profile) -> (FaultRates, Plan) {
    let churn = profile == Profile::Churn;
    let mut r = StdRng::seed_from_u64(seed ^ 0x5eed_f00d_cafe_d00d);
    let mut one_of = |xs: &[f64]| xs[r.random_range(0..xs.len())];
    let rates = FaultRates {
        loss: one_of(&[0.0, 0.001, 0.005, 0.02]),
        duplicate: if churn {
            one_of(&[0.05, 0.1])
        } else {
            one_of(&[0.0, 0.002, 0.01])
        },
        delay: one_of(&[0.0, 0.01, 0.05]),
        map_delay: one_of(&[0.0, 0.05, 0.3]),
    };
    let gap = one_of(&[300.0, 1000.0, 3000.0]) as u64;
    let special = r.random_range(0..10);
    let plan = Plan {
        until: fault_time,
        mean_gap: Duration::from_millis(gap),
        weights: [
            r.random_range(1..5),
            r.random_range(0..4),
            r.random_range(0..3),
            r.random_range(0..3),
            r.random_range(0..3),
        ],
        corrupt: special < 3,
        replace: (3..6).contains(&special),
        disk_failure: (6..8).contains(&special),
        max_down: r.random_range(1..3),
        down_ms: if churn { (50, 1_500) } else { (200, 15_000) },
        client_crashes: r.random_range(0..2) == 1,
    };
    (rates, plan)
}

/// Runs one seed to its verdict.
pub fn run_seed(opts: &RunOptions) -> Outcome {
    let wall = Instant::now();
    let (rates, mut plan) = draw(opts.seed, opts.fault_time, opts.profile);
    plan.client_crashes &= opts.client_crashes;
    let ctx = Ctx::new(opts.seed, rates, opts.echo);
    let _rt = pontoon_rt::install(ctx.exec.runtime());
    let _logs = crate::ctx::capture_logs(&ctx);
    ctx.log(format!("seed {}: {rates:?} {plan:?}", opts.seed));
    let world = World::new(ctx.clone(), Config::default(), opts.broken);
    let snaps = Rc::new(SnapLog::default());
    let failure = drive(&world, &plan, opts, &snaps);
    let out = Outcome {
        seed: opts.seed,
        failure,
        ops: 0,
        snapshots: snaps.taken.borrow().len(),
        snapshot_images: snaps.images_checked.get(),
        snapshot_blocks: snaps.blocks_read.get(),
        snapshots_late: snaps.late(),
        clone_blocks: snaps.clone_blocks.get(),

        snapshot_reads_under_faults: snaps.reads_checked.get(),
        shifted: (snaps.shifted_judged.get(), snaps.shifted_rejected.get()),
        faults: ctx.counts(),
        sim_time: ctx.exec.elapsed(),
        wall_time: Duration::ZERO,
        polls: ctx.exec.polls(),
        trace_tail: ctx.trace_tail(250),
        digest: ctx.trace_digest(),
    };
    let done = |h: &Rc<History>| {
        h.ops()
            .iter()
            .filter(|o| o.outcome != OpOutcome::Pending)
            .count()
    };
    let ops = world.history.borrow().as_ref().map_or(0, done)
        + world.snap_history.borrow().as_ref().map_or(0, done);
    ctx.exec.shutdown();
    world.teardown();
    Outcome {
        ops,
        wall_time: wall.elapsed(),
        ..out
    }
}

fn drive(world: &Rc<World>, plan: &Plan, opts: &RunOptions, snaps: &Rc<SnapLog>) -> Option<String> {
    let fault_time = opts.fault_time;
    let ctx = world.ctx.clone();
    let cfg = world.cfg.clone();
    let hist = Rc::new(History::default());
    *world.history.borrow_mut() = Some(hist.clone());
    let snap_hist = Rc::new(History::default());
    *world.snap_history.borrow_mut() = Some(snap_hist.clone());
    world.boot();
    let shape = Shape {
        blocks: cfg.objects as u32 * BLOCKS_PER_OBJECT,
        blocks_per_object: BLOCKS_PER_OBJECT,
        object_size: cfg.object_size,
        max_think: Duration::from_millis(40),
    };
    // The snapshot volume's writer pauses longer: its history needs
    // fewer operations than the linearizability workload's, and each
    // costs simulation time.
    let snap_shape = Shape {
        blocks: cfg.snap_objects as u32 * BLOCKS_PER_OBJECT,
        max_think: shape.max_think * SNAP_THINK,
        ..shape
    };
    let mut procs = Vec::new();
    for c in 0..CLIENTS {
        match start_client(world, &hist, c, shape, fault_time, VOLUME) {
            Ok(p) => procs.push(p),
            Err(e) => return Some(e),
        }
    }
    if let Err(e) = start_client(
        world,
        &snap_hist,
        SNAP_WRITER,
        snap_shape,
        fault_time,
        SNAPVOL,
    ) {
        return Some(e);
    }
    ctx.exec.spawn_on(
        WORLD,
        take_snapshots(
            world.clone(),
            snaps.clone(),
            vec![SNAPVOL, VOLUME],
            fault_time,
        ),
    );
    let third = fault_time.as_millis() as u64 / 3;
    let reader = new_client(world, SNAP_READER);
    ctx.exec.spawn_on(
        reader.1,
        snap_reader(
            ctx.clone(),
            reader.0,
            snaps.clone(),
            SNAPVOL,
            snap_shape,
            fault_time,
        ),
    );
    let clone_hist = Rc::new(History::starting_at(CLONE_VALUES));
    let clone = Rc::new(CloneLog::default());
    let clone_at = Duration::from_millis(ctx.range(third, 2 * third));
    ctx.exec.spawn_on(
        WORLD,
        make_clone(
            world.clone(),
            snaps.clone(),
            clone.clone(),
            clone_hist.clone(),
            snap_shape,
            clone_at,
            fault_time,
        ),
    );
    let remove_at = Duration::from_millis(ctx.range(third, 2 * third));
    if let Err(e) = start_scratch(world, shape, remove_at) {
        return Some(e);
    }
    if plan.client_crashes {
        let (w, h) = (world.clone(), hist.clone());
        ctx.exec.spawn_on(WORLD, async move {
            crash_clients(w, h, procs, shape, fault_time).await;
        });
    }
    ctx.exec
        .spawn_on(WORLD, nemesis(world.clone(), plan.clone()));
    match ctx.exec.run_until(fault_time, || false) {
        Err(Stall::Deadline) => {}
        Err(s) => return Some(format!("the simulation stalled under faults: {s:?}")),
        Ok(()) => {}
    }
    heal(world);
    let settle_by = fault_time + SETTLE;
    let settled = ctx.exec.run_until(settle_by, || {
        hist.pending() == 0
            && snap_hist.pending() == 0
            && clone_hist.pending() == 0
            && world.is_clean()
    });
    if settled.is_err() {
        return Some(format!(
            "liveness: {} s after the faults stopped the cluster is not settled ({:?}): {} client operations pending; {}",
            SETTLE.as_secs(),
            settled.err(),
            hist.pending() + snap_hist.pending() + clone_hist.pending(),
            world.unclean_summary()
        ));
    }
    ctx.log("settled: every PG active+clean, no client operation pending");
    for (h, s, v) in [(&hist, shape, VOLUME), (&snap_hist, snap_shape, SNAPVOL)] {
        if let Some(f) = final_reads(world, h, s, v) {
            return Some(f);
        }
    }
    let mut problems: Vec<String> = world.problems.borrow().clone();
    problems.extend(check_clone_volume(
        world,
        snaps,
        &clone,
        &clone_hist,
        snap_shape,
    ));
    problems.extend(checker::check(&hist.ops()));
    problems.extend(checker::check(&snap_hist.ops()));
    let several = if opts.cross_client_cuts {
        Scope::AllWrites
    } else {
        Scope::StartAndEnd
    };
    problems.extend(check_snapshots(
        world,
        snaps,
        &[
            (VOLUME, &hist, shape, several),
            (SNAPVOL, &snap_hist, snap_shape, Scope::AllWrites),
        ],
    ));
    problems.extend(compare_settled(world));
    problems.extend(reclaimed(world));
    if problems.is_empty() {
        None
    } else {
        Some(problems.join("\n"))
    }
}

/// Starts client process `c` with its workers; returns the process.
/// Writes to the scratch volume until `remove_at`, then removes it: its
/// objects, and the stray copies the faults left, must all be deleted.
fn start_scratch(world: &Rc<World>, shape: Shape, remove_at: Duration) -> Result<(), String> {
    let (vol, proc) = open_volume(world, 98, SCRATCH)?;
    let ctx = world.ctx.clone();
    world.ctx.exec.spawn_on(proc, async move {
        while ctx.exec.elapsed() < remove_at {
            let block = ctx.pick(shape.blocks as usize) as u32;
            let at = offset_of(block, shape.blocks_per_object, shape.object_size);
            let _ = vol.write_at(at, &encode(u64::from(block))).await;
            pontoon_rt::sleep(Duration::from_millis(ctx.range(0, 20))).await;
        }
    });
    let w = world.clone();
    world.ctx.exec.spawn_on(WORLD, async move {
        pontoon_rt::sleep(remove_at).await;
        w.remove_volume(SCRATCH);
    });
    Ok(())
}

/// Waits for every running OSD to delete what nobody needs, and for snap
/// trim to free every clone no live snapshot reads; what is left after a
/// minute is a failure.
fn reclaimed(world: &Rc<World>) -> Vec<String> {
    let deadline = world.ctx.exec.elapsed() + Duration::from_secs(60);
    let done = || world.garbage().is_empty() && world.untrimmed().1 == 0;
    match world.ctx.exec.run_until(deadline, done) {
        Ok(()) => Vec::new(),
        Err(_) => world
            .garbage()
            .into_iter()
            .chain(world.untrimmed().0)
            .map(|g| format!("reclaim: 60 s after settling, {g}"))
            .collect(),
    }
}

fn start_client(
    world: &Rc<World>,
    hist: &Rc<History>,
    c: u32,
    shape: Shape,
    until: Duration,
    volume: &str,
) -> Result<ProcId, String> {
    let (vol, proc) = open_volume(world, c, volume)?;
    for _ in 0..WORKERS_PER_CLIENT {
        let (ctx, h, v) = (world.ctx.clone(), hist.clone(), vol.clone());
        world
            .ctx
            .exec
            .spawn_on(proc, worker(ctx, h, v, c, shape, until));
    }
    Ok(proc)
}

/// Now and then kills a client process with its operations in flight and
/// starts it again a moment later.
async fn crash_clients(
    world: Rc<World>,
    hist: Rc<History>,
    mut procs: Vec<ProcId>,
    shape: Shape,
    until: Duration,
) {
    let ctx = world.ctx.clone();
    loop {
        pontoon_rt::sleep(Duration::from_millis(ctx.range(2_000, 10_000))).await;
        if ctx.exec.elapsed() >= until {
            return;
        }
        let c = ctx.pick(procs.len());
        ctx.exec.kill(procs[c]);
        world.remove_client(procs[c]);
        hist.abandon(&ctx, c as u32);
        ctx.note(Fault::ClientCrash);
        ctx.log(format!("CRASH client.{c}"));
        pontoon_rt::sleep(Duration::from_millis(ctx.range(100, 2_000))).await;
        match start_client(&world, &hist, c as u32, shape, until, VOLUME) {
            Ok(p) => procs[c] = p,
            Err(e) => {
                ctx.log(format!("client.{c} could not start again: {e}"));
                return;
            }
        }
        ctx.log(format!("RESTART client.{c}"));
    }
}

/// A client process `c` (its process and its client library).
fn new_client(world: &Rc<World>, c: u32) -> (Client, ProcId) {
    let proc = world.new_proc();
    let feed = world.add_client(proc);
    let wire = ClientWire {
        me: c,
        net: world.net.clone(),
    };
    (Client::with_wire(feed, Wire::Custom(Rc::new(wire))), proc)
}

fn open_volume(
    world: &Rc<World>,
    c: u32,
    name: &str,
) -> Result<(pontoon_client::Volume, ProcId), String> {
    let proc = world.new_proc();
    let feed = world.add_client(proc);
    let wire = ClientWire {
        me: c,
        net: world.net.clone(),
    };
    let client = Client::with_wire(feed, Wire::Custom(Rc::new(wire)));
    client
        .open(name)
        .map(|v| (v, proc))
        .map_err(|e| format!("opening the volume: {e}"))
}

/// Reads every block of `volume` once more, fault-free, after the
/// cluster settled.
fn final_reads(
    world: &Rc<World>,
    hist: &Rc<History>,
    shape: Shape,
    volume: &str,
) -> Option<String> {
    let ctx = world.ctx.clone();
    let (vol, proc) = match open_volume(world, 99, volume) {
        Ok(v) => v,
        Err(e) => return Some(e),
    };
    let done = Rc::new(std::cell::Cell::new(false));
    let (d, h, c) = (done.clone(), hist.clone(), ctx.clone());
    ctx.exec.spawn_on(proc, async move {
        for b in 0..shape.blocks {
            let at = offset_of(b, shape.blocks_per_object, shape.object_size);
            read_one(&c, &h, &vol, 99, b, at).await;
        }
        d.set(true);
    });
    let deadline = ctx.exec.elapsed() + Duration::from_secs(120);
    if ctx.exec.run_until(deadline, || done.get()).is_err() {
        return Some("liveness: the final reads did not finish in 120 s".into());
    }
    let failed: Vec<String> = hist
        .ops()
        .iter()
        .filter(|o| o.client == 99)
        .filter_map(|o| match &o.outcome {
            OpOutcome::Failed(e) => Some(format!("block {}: {e}", o.block)),
            _ => None,
        })
        .collect();
    if failed.is_empty() {
        None
    } else {
        Some(format!(
            "after healing, reads failed: {}",
            failed.join("; ")
        ))
    }
}

/// At `at`, protects the newest confirmed snapshot of [`SNAPVOL`], clones
/// it, and starts the clone's writer (until `until`).
async fn make_clone(
    world: Rc<World>,
    snaps: Rc<SnapLog>,
    clone: Rc<CloneLog>,
    hist: Rc<History>,
    shape: Shape,
    at: Duration,
    until: Duration,
) {
    pontoon_rt::sleep(at).await;
    let newest = snaps
        .taken
        .borrow()
        .iter()
        .rposition(|t| t.volume == SNAPVOL && !t.removed && t.cut.end.is_some());
    let Some(k) = newest else {
        world
            .ctx
            .log("no confirmed snapshot to clone yet".to_string());
        return;
    };
    let name = {
        let mut taken = snaps.taken.borrow_mut();
        taken[k].protected = true;
        taken[k].name.clone()
    };
    if !world.clone_snapshot(SNAPVOL, &name, CLONE) {
        return;
    }
    clone.parent.set(Some(k));
    match open_volume(&world, CLONE_WRITER, CLONE) {
        Ok((vol, proc)) => {
            let ctx = world.ctx.clone();
            world.ctx.exec.spawn_on(
                proc,
                clone_worker(ctx, hist, vol, CLONE_WRITER, shape, until, clone),
            );
        }
        Err(e) => world
            .ctx
            .log(format!("PROBLEM the clone does not open: {e}")),
    }
}

/// After healing: reads back the blocks the clone owns (for the
/// linearizability checker), then the clone's whole image and its parent
/// snapshot's, which must agree wherever the clone did not write.
fn check_clone_volume(
    world: &Rc<World>,
    snaps: &Rc<SnapLog>,
    clone: &Rc<CloneLog>,
    hist: &Rc<History>,
    shape: Shape,
) -> Vec<String> {
    let Some(k) = clone.parent.get() else {
        return Vec::new();
    };
    let Some(parent) = snaps.taken.borrow().get(k).map(|t| t.cut.name.clone()) else {
        return Vec::new();
    };
    let ctx = world.ctx.clone();
    let (vol, proc) = match open_volume(world, 99, CLONE) {
        Ok(v) => v,
        Err(e) => return vec![e],
    };
    let feed = world.add_client(proc);
    let reader = Client::with_wire(
        feed,
        Wire::Custom(Rc::new(ClientWire {
            me: 99,
            net: world.net.clone(),
        })),
    );
    let owned: Vec<u32> = clone.owned.borrow().iter().copied().collect();
    let out = Rc::new(RefCell::new(None));
    let (o, c, h) = (out.clone(), ctx.clone(), hist.clone());
    ctx.exec.spawn_on(proc, async move {
        for b in owned {
            let at = offset_of(b, shape.blocks_per_object, shape.object_size);
            read_one(&c, &h, &vol, 99, b, at).await;
        }
        let images = (
            read_image(&reader, CLONE, shape).await,
            read_image(&reader, &parent, shape).await,
        );
        *o.borrow_mut() = Some(images);
    });
    let deadline = ctx.exec.elapsed() + Duration::from_secs(120);
    if ctx
        .exec
        .run_until(deadline, || out.borrow().is_some())
        .is_err()
    {
        return vec!["liveness: reading the clone did not finish in 120 s".into()];
    }
    let mut problems = checker::check(&hist.ops());
    problems.extend(hist.ops().iter().filter(|o| o.client == 99).filter_map(
        |o| match &o.outcome {
            OpOutcome::Failed(e) => Some(format!(
                "after healing, a clone read failed: block {}: {e}",
                o.block
            )),
            _ => None,
        },
    ));
    match out.borrow_mut().take() {
        Some((Ok(c), Ok(p))) => {
            snaps.clone_blocks.set(c.len());
            problems.extend(check_clone(hist, clone, &c, &p));
        }
        Some((c, p)) => problems.push(format!(
            "after healing, reading the clone or its parent failed: {:?} / {:?}",
            c.err(),
            p.err()
        )),
        None => {}
    }
    problems
}

/// Reads every snapshot still in the map, with a fresh client, and
/// checks each is one cut of its volume's history (`volumes`: each
/// volume's name, history, shape and the cut rule that applies to it).
fn check_snapshots(
    world: &Rc<World>,
    snaps: &Rc<SnapLog>,
    volumes: &[(&str, &Rc<History>, Shape, Scope)],
) -> Vec<String> {
    let ctx = world.ctx.clone();
    let (client, proc) = new_client(world, 97);
    let live = snaps.live();
    let out = Rc::new(RefCell::new(
        None::<Vec<(usize, Result<Vec<Result<u64, String>>, String>)>>,
    ));
    let jobs: Vec<(usize, String, Shape)> = live
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let (_, _, shape, _) = volumes.iter().find(|v| v.0 == t.volume)?;
            Some((i, t.cut.name.clone(), *shape))
        })
        .collect();
    let o = out.clone();
    ctx.exec.spawn_on(proc, async move {
        let mut images = Vec::new();
        for (i, spec, shape) in jobs {
            images.push((i, read_image(&client, &spec, shape).await));
        }
        *o.borrow_mut() = Some(images);
    });
    let deadline = ctx.exec.elapsed() + Duration::from_secs(120);
    if ctx
        .exec
        .run_until(deadline, || out.borrow().is_some())
        .is_err()
    {
        return vec!["liveness: reading the snapshots did not finish in 120 s".into()];
    }
    let images = out.borrow_mut().take().unwrap_or_default();
    let mut problems = Vec::new();
    let mut read = Vec::new();
    for (i, image) in images {
        let t = &live[i];
        let Some((_, hist, _, scope)) = volumes.iter().find(|v| v.0 == t.volume) else {
            continue;
        };
        match image {
            Err(e) => problems.push(format!("after healing, a snapshot read failed: {e}")),
            Ok(image) => {
                snaps.images_checked.set(snaps.images_checked.get() + 1);
                snaps.blocks_read.set(snaps.blocks_read.get() + image.len());
                let mut found = check_cut(&hist.ops(), &t.cut, &image, *scope);
                let k = snaps
                    .taken
                    .borrow()
                    .iter()
                    .position(|x| x.cut.name == t.cut.name);
                if let Some(k) = k {
                    let reads = snaps.reads.borrow().iter().filter(|r| r.snap == k).count();
                    snaps.reads_checked.set(snaps.reads_checked.get() + reads);
                    found.extend(check_snap_reads(&hist.ops(), snaps, k, &image));
                }
                ctx.log(format!(
                    "{} (id {}, created {:?}..{:?}): {} blocks, {}",
                    t.cut.name,
                    t.id,
                    t.cut.start,
                    t.cut.end,
                    image.len(),
                    if found.is_empty() {
                        "a cut"
                    } else {
                        "NOT a cut"
                    }
                ));
                problems.extend(found);
                read.push((i, image));
            }
        }
    }
    // The checker's teeth on this run's own data: an image judged by the
    // previous snapshot's times should mostly be rejected.
    for (j, (b, ib)) in read.iter().enumerate() {
        let tb = &live[*b];
        let earlier = read[..j]
            .iter()
            .rev()
            .find(|(a, _)| live[*a].volume == tb.volume);
        let Some((a, ia)) = earlier else { continue };
        let ta = &live[*a];
        let Some((_, hist, _, scope)) = volumes.iter().find(|v| v.0 == tb.volume) else {
            continue;
        };
        if ia == ib {
            continue;
        }
        snaps.shifted_judged.set(snaps.shifted_judged.get() + 1);
        if !check_cut(&hist.ops(), &ta.cut, ib, *scope).is_empty() {
            snaps.shifted_rejected.set(snaps.shifted_rejected.get() + 1);
        }
    }
    problems
}

/// [`compare_replicas`] in a map in which the cluster is clean. The map
/// can move after the cluster settled (an OSD that was out takes a lease
/// again and is marked in, so its PGs start new intervals and recover):
/// wait until clean again, and compare again if the map moved meanwhile.
fn compare_settled(world: &Rc<World>) -> Vec<String> {
    const TRIES: u32 = 5;
    for _ in 0..TRIES {
        let deadline = world.ctx.exec.elapsed() + SETTLE;
        if world
            .ctx
            .exec
            .run_until(deadline, || world.is_clean())
            .is_err()
        {
            return vec![format!(
                "liveness: the map moved after settling and the cluster did not settle again in {} s: {}",
                SETTLE.as_secs(),
                world.unclean_summary()
            )];
        }
        let epoch = world.map.borrow().epoch;
        let found = compare_replicas(world);
        if world.map.borrow().epoch == epoch {
            return found;
        }
        world.ctx.log(format!(
            "the map moved from {epoch} while replicas were compared: again"
        ));
    }
    vec![format!(
        "the map moved during each of {TRIES} comparisons of the replicas"
    )]
}

/// Every acting member of every PG holds the same version and bytes of
/// each object (a latent corrupt block on an OSD the injector corrupted
/// is reported only in the trace: no scrub runs to find it).
fn compare_replicas(world: &Rc<World>) -> Vec<String> {
    let ctx = world.ctx.clone();
    let out = Rc::new(RefCell::new(None::<Vec<String>>));
    let (w, o) = (world.clone(), out.clone());
    ctx.exec.spawn_on(WORLD, async move {
        let mut found = Vec::new();
        let map = w.map.borrow().clone();
        let clone = map.volume_by_name(CLONE).is_some().then_some(CLONE);
        for name in [VOLUME, SNAPVOL].into_iter().chain(clone) {
            let Some(vol) = map.volume_by_name(name).cloned() else {
                found.push(format!("volume {name} vanished from the map"));
                continue;
            };
            let len = u64::from(BLOCKS_PER_OBJECT) * BLOCK as u64;
            // The head, then every live snapshot (data only: a member that
            // has not trimmed yet may keep more clones, which read alike).
            let views: Vec<Option<u64>> = std::iter::once(None)
                .chain(vol.snapshots.iter().map(|s| Some(s.id)))
                .collect();
            for index in 0..vol.object_count() {
                let oid = pontoon_types::ObjectId::new(vol.id.0, index);
                let Some(pg) = map.pg_of_object(&oid) else { continue };
                let Some(rec) = map.pgs.get(&pg) else { continue };
                for view in &views {
                    let mut copies = Vec::new();
                    for osd in &rec.acting {
                        let shard = w.osds.borrow().get(osd).and_then(|s| s.shard.clone());
                        let Some(shard) = shard else {
                            found.push(format!("{oid}: acting member {osd} is not running"));
                            continue;
                        };
                        let (version, read) = match view {
                            None => (
                                shard.store().version(oid),
                                shard.store().read(oid, 0, len).await,
                            ),
                            Some(s) => (None, shard.store().read_snap(oid, *s, 0, len).await),
                        };
                        match read {
                            Ok(r) => copies.push((*osd, version, r.data.to_vec())),
                            Err(e) if w.corrupted.borrow().contains(osd) => {
                                w.ctx.log(format!(
                                    "latent corruption left on {osd} for {oid}: {e}"
                                ));
                            }
                            Err(e) => found.push(format!("{oid} on {osd}: {e}")),
                        }
                    }
                    let what = view.map_or(String::new(), |s| format!(" at snapshot {s}"));
                    if let Some((first, v0, d0)) = copies.first() {
                        for (osd, v, d) in &copies[1..] {
                            if v != v0 || d != d0 {
                                found.push(format!(
                                    "{oid}{what} (pg {pg}, acting {:?}, interval {}): replicas differ after settling: {first} has {v0:?}, {osd} has {v:?}{}",
                                    rec.acting.iter().map(|o| o.0).collect::<Vec<_>>(),
                                    rec.interval,
                                    describe_difference(d0, d)
                                ));
                            }
                        }
                    }
                }
            }
        }
        *o.borrow_mut() = Some(found);
    });
    let deadline = ctx.exec.elapsed() + Duration::from_secs(60);
    let _ = ctx.exec.run_until(deadline, || out.borrow().is_some());
    out.borrow_mut()
        .take()
        .unwrap_or_else(|| vec!["comparing replicas did not finish".into()])
}
