//! The fault injector: at random moments chosen by the seed, crash and
//! restart OSDs, cut the network, let leases lapse, slow disks down,
//! corrupt a block, replace an OSD. Then [`heal`] undoes everything.

use std::rc::Rc;
use std::time::Duration;

use pontoon_types::OsdId;

use crate::ctx::Fault;
use crate::executor::WORLD;
use crate::net::Node;
use crate::workload::{BLOCK, decode};
use crate::world::World;

/// What the injector does in one run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// No new fault after this virtual time.
    pub until: Duration,
    /// Mean pause between faults.
    pub mean_gap: Duration,
    /// Relative weights of crash, partition, lease expiry, slow disk, freeze.
    pub weights: [u32; 5],
    /// Corrupt one block once (exclusive with `replace`: two faults on
    /// the same data are more than replication promises to survive).
    pub corrupt: bool,
    /// Replace one OSD once.
    pub replace: bool,
    /// Kill one OSD's drive once (the OSD exits; an operator replaces it).
    pub disk_failure: bool,
    /// Most OSDs down at once.
    pub max_down: usize,
    /// How long a crashed OSD stays down (milliseconds, range).
    pub down_ms: (u64, u64),
    /// Crash and restart client processes too.
    pub client_crashes: bool,
}

/// Runs the injector until `plan.until`.
pub async fn nemesis(world: Rc<World>, plan: Plan) {
    let ctx = world.ctx.clone();
    let (mut corrupted, mut replaced, mut disk_failed) = (false, false, false);
    let gap_ms = plan.mean_gap.as_millis() as u64;
    loop {
        pontoon_rt::sleep(Duration::from_millis(ctx.range(gap_ms / 4, gap_ms * 2))).await;
        if ctx.exec.elapsed() >= plan.until {
            return;
        }
        if plan.corrupt && !corrupted && ctx.range(0, 20) == 0 && world.impaired() == 0 {
            corrupted = corrupt_block(&world);
            continue;
        }
        if plan.replace && !replaced && ctx.range(0, 20) == 0 && world.impaired() == 0 {
            if let Some(victim) = pick_running(&world) {
                world.replace_osd(victim);
            }
            replaced = true;
            continue;
        }
        if plan.disk_failure && !disk_failed && ctx.range(0, 20) == 0 && world.impaired() == 0 {
            if let Some(victim) = pick_running(&world) {
                world.kill_disk(victim);
                ctx.note(Fault::DiskFailure);
                ctx.log(format!(
                    "DISK FAILURE {victim}: every write fails from now on"
                ));
            }
            disk_failed = true;
            continue;
        }
        let total: u32 = plan.weights.iter().sum();
        let mut roll = ctx.range(0, u64::from(total.max(1))) as u32;
        let kind = plan
            .weights
            .iter()
            .position(|w| {
                if roll < *w {
                    true
                } else {
                    roll -= w;
                    false
                }
            })
            .unwrap_or(0);
        match kind {
            0 => crash_one(&world, &plan),
            1 => partition(&world),
            2 => lapse_lease(&world),
            3 => slow_disk(&world),
            _ => freeze(&world, &plan),
        }
    }
}

fn crash_one(world: &Rc<World>, plan: &Plan) {
    let ctx = &world.ctx;
    if world.impaired() >= plan.max_down {
        return;
    }
    let Some(id) = pick_running(world) else {
        return;
    };
    world.crash_osd(id);
    let back = Duration::from_millis(ctx.range(plan.down_ms.0, plan.down_ms.1));
    let (w, until) = (world.clone(), plan.until);
    ctx.exec.spawn_on(WORLD, async move {
        pontoon_rt::sleep(back).await;
        if w.ctx.exec.elapsed() < until {
            restart(&w, id);
        }
    });
}

fn restart(world: &Rc<World>, id: OsdId) {
    if world.stopped().contains(&id) {
        world.ctx.note(Fault::Restart);
        world.ctx.log(format!("RESTART {id}"));
        world.start_osd(id);
    }
}

fn partition(world: &Rc<World>) {
    let ctx = &world.ctx;
    let mut nodes: Vec<Node> = world.running().into_iter().map(Node::Osd).collect();
    nodes.extend([Node::Client(0), Node::Client(1)]);
    let a = nodes[ctx.pick(nodes.len())];
    let b = nodes[ctx.pick(nodes.len())];
    if a == b || matches!((a, b), (Node::Client(_), Node::Client(_))) {
        return;
    }
    let one_way = ctx.range(0, 3) == 0;
    let mut cuts = vec![(a, b)];
    if !one_way {
        cuts.push((b, a));
    }
    let dur = Duration::from_millis(ctx.range(100, 12_000));
    ctx.note(Fault::Partition);
    ctx.log(format!(
        "PARTITION {a} {} {b} for {dur:?}",
        if one_way { "-/->" } else { "<-/->" }
    ));
    world.net.cuts.borrow_mut().extend(cuts.iter().copied());
    let w = world.clone();
    ctx.exec.spawn_on(WORLD, async move {
        pontoon_rt::sleep(dur).await;
        let mut c = w.net.cuts.borrow_mut();
        for cut in &cuts {
            c.remove(cut);
        }
        drop(c);
        w.ctx.log(format!("healed {a} / {b}"));
    });
}

/// A running OSD chosen by the seed.
fn pick_running(world: &World) -> Option<OsdId> {
    let running = world.running();
    (!running.is_empty()).then(|| running[world.ctx.pick(running.len())])
}

fn lapse_lease(world: &Rc<World>) {
    let ctx = &world.ctx;
    let Some(id) = pick_running(world) else {
        return;
    };
    let dur = Duration::from_millis(ctx.range(1_000, 10_000));
    ctx.note(Fault::LeaseExpiry);
    ctx.log(format!("ETCD CUT {id} for {dur:?}"));
    world.cut_etcd(id, dur);
}

/// Stops a running OSD as SIGSTOP does, and lets it go on 0.5–20 s later.
fn freeze(world: &Rc<World>, plan: &Plan) {
    let ctx = &world.ctx;
    if world.impaired() >= plan.max_down {
        return;
    }
    let Some(id) = pick_running(world) else {
        return;
    };
    if !world.freeze_osd(id) {
        return;
    }
    let dur = Duration::from_millis(ctx.range(500, 20_000));
    ctx.note(Fault::Freeze);
    ctx.log(format!("FREEZE {id} for {dur:?}"));
    let w = world.clone();
    ctx.exec.spawn_on(WORLD, async move {
        pontoon_rt::sleep(dur).await;
        w.thaw_osd(id);
        w.ctx.log(format!("THAW {id}"));
    });
}

fn slow_disk(world: &Rc<World>) {
    let ctx = &world.ctx;
    let Some(id) = pick_running(world) else {
        return;
    };
    let extra = Duration::from_micros(ctx.range(1_000, 300_000));
    let dur = Duration::from_millis(ctx.range(500, 10_000));
    ctx.note(Fault::SlowDisk);
    ctx.log(format!("SLOW DISK {id}: +{extra:?} per I/O for {dur:?}"));
    let until = world.slow_disk(id, extra, dur);
    let w = world.clone();
    ctx.exec.spawn_on(WORLD, async move {
        pontoon_rt::sleep(until.saturating_sub(w.ctx.exec.elapsed())).await;
        w.slow_disk_expire(id);
    });
}

/// Flips a bit in a block of a running OSD's disk that holds a workload
/// value (in the data area or in a journal record). Returns whether one
/// was found.
fn corrupt_block(world: &Rc<World>) -> bool {
    let ctx = &world.ctx;
    let Some(id) = pick_running(world) else {
        return false;
    };
    let mem = {
        let osds = world.osds.borrow();
        let Some(s) = osds.get(&id) else { return false };
        if s.shard.is_none() {
            return false;
        }
        s.mem.clone()
    };
    let img = mem.image();
    // Anywhere past the device header: a block moved home to the data
    // area, or one still in a journal record.
    let start = BLOCK;
    let candidates: Vec<usize> = (start..img.len().saturating_sub(BLOCK - 1))
        .step_by(BLOCK)
        .filter(|at| matches!(decode(&img[*at..*at + BLOCK]), Ok(v) if v != 0))
        .collect();
    if candidates.is_empty() {
        return false;
    }
    let at = candidates[ctx.pick(candidates.len())];
    let held = decode(&img[at..at + BLOCK]).unwrap_or(0);
    let byte = img[at + 100] ^ 0x10;
    mem.corrupt((at + 100) as u64, &[byte]);
    world.corrupted.borrow_mut().insert(id);
    ctx.note(Fault::Corruption);
    ctx.log(format!(
        "CORRUPT {id}: flipped a bit in the block at byte {at} (holding #{held})"
    ));
    true
}

/// Ends every fault: cuts healed, leases and disks back to normal, message
/// faults off, every stopped OSD started.
pub fn heal(world: &Rc<World>) {
    world.ctx.stop_faults();
    world.net.cuts.borrow_mut().clear();
    let ids: Vec<OsdId> = world.osds.borrow().keys().copied().collect();
    for id in ids {
        world.cut_etcd(id, Duration::ZERO);
        world.slow_disk(id, Duration::ZERO, Duration::ZERO);
        world.thaw_osd(id);
    }
    world.ctx.log("HEAL: faults stop, every stopped OSD starts");
    for id in world.stopped() {
        restart(world, id);
    }
}
