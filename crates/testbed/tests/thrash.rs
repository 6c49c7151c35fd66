//! Thrashing (issue 14): random faults, one at a time, under the load, on
//! the scenario rig (see `pontoon_testbed::scenario`), for 60 s
//! (`PONTOON_THRASH_SECS=N` for N s; 600 s with `PONTOON_LONG=1`), then
//! heal everything and give the verdict of `Scenario::finish`: clean
//! cluster, checker clean (no acknowledged write lost, no stale read),
//! replicas identical, processes running.
//!
//! Each round waits until the cluster is whole (every etcd member healthy,
//! every OSD alive, not held down, every PG active+clean), then injects
//! one fault, keeps it 2-8 s, and undoes it. So at most one OSD is
//! impaired at a time and the pool (size 3, min_size 2) stays writable,
//! except where the fault itself stalls writes without taking an OSD out
//! (a cut between two OSD hosts has only one reporter per side, fewer
//! than the manager needs to hold anyone down: writes of the PGs spanning
//! both wait until it heals). The kinds:
//!
//! - `kill-osd`: SIGKILL an OSD, restart it after the hold;
//! - `freeze-osd`: SIGSTOP an OSD, SIGCONT it after the hold;
//! - `cut-osds`: cut two OSD hosts from each other, both ways;
//! - `cut-osds-one-way`: drop what one OSD host sends another;
//! - `cut-osd-from-etcd`: cut an OSD host from the three etcd hosts;
//! - `isolate-osd-host`: cut an OSD host from everyone (the client too);
//! - `kill-etcd`: SIGKILL an etcd member, restart it after the hold;
//! - `isolate-mgr`: isolate the active manager's host.
//!
//! The seed (time-based, or `PONTOON_THRASH_SEED`) is printed; the
//! schedule it draws is not replayable exactly (real processes, real
//! time), but the kinds, targets and holds are.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pontoon_testbed::Node;
use pontoon_testbed::load::Rng;
use pontoon_testbed::scenario::{Rig, Scenario};

/// Longest wait for the cluster to be whole again between rounds.
const SETTLE: Duration = Duration::from_secs(120);

const KINDS: [&str; 8] = [
    "kill-osd",
    "freeze-osd",
    "cut-osds",
    "cut-osds-one-way",
    "cut-osd-from-etcd",
    "isolate-osd-host",
    "kill-etcd",
    "isolate-mgr",
];

fn thrash_time() -> Duration {
    if let Some(s) = std::env::var("PONTOON_THRASH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return Duration::from_secs(s);
    }
    if std::env::var("PONTOON_LONG").is_ok_and(|v| v == "1") {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(60)
    }
}

/// One fault, undone by the closure it returns.
type Undo = Box<dyn FnOnce(&Rig)>;

/// Injects a fault of `kind`; returns what it did and how to undo it.
fn inject(rig: &Rig, kind: &str, rng: &mut Rng) -> (String, Undo) {
    let osd = rng.next_u64() % 3;
    let id = osd as u32;
    let (a, b) = rng.two(3);
    match kind {
        "kill-osd" => {
            rig.kill_osd(id);
            (
                format!("osd.{id} killed"),
                Box::new(move |r: &Rig| {
                    r.restart_osd(id);
                }),
            )
        }
        "freeze-osd" => {
            rig.osd(id).sigstop();
            (
                format!("osd.{id} frozen"),
                Box::new(move |r: &Rig| r.osd(id).sigcont()),
            )
        }
        "cut-osds" => {
            rig.tb.cut(&rig.o[a], &rig.o[b]);
            (
                format!("o{} and o{} cut both ways", a + 1, b + 1),
                Box::new(|r: &Rig| r.tb.heal_all()),
            )
        }
        "cut-osds-one-way" => {
            rig.tb.cut_one_way(&rig.o[a], &rig.o[b]);
            (
                format!("o{} to o{} cut one way", a + 1, b + 1),
                Box::new(|r: &Rig| r.tb.heal_all()),
            )
        }
        "cut-osd-from-etcd" => {
            let h = &rig.o[osd as usize];
            rig.tb
                .partition(&[h as &dyn Node], &[&rig.e[0], &rig.e[1], &rig.e[2]]);
            (
                format!("o{} cut from etcd", osd + 1),
                Box::new(|r: &Rig| r.tb.heal_all()),
            )
        }
        "isolate-osd-host" => {
            rig.tb.isolate(&rig.o[osd as usize]);
            (
                format!("o{} isolated", osd + 1),
                Box::new(|r: &Rig| r.tb.heal_all()),
            )
        }
        "kill-etcd" => {
            let m = a;
            rig.etcd.kill9_member(m);
            (
                format!("etcd member e{} killed", m + 1),
                Box::new(move |r: &Rig| {
                    r.etcd.restart_member(m);
                }),
            )
        }
        "isolate-mgr" => {
            let i = rig.active_mgr_index();
            rig.tb.isolate(&rig.m[i]);
            (
                format!("active manager's host m{} isolated", i + 1),
                Box::new(|r: &Rig| r.tb.heal_all()),
            )
        }
        _ => unreachable!("unknown fault kind {kind}"),
    }
}

#[test]
fn thrashing_with_random_faults_loses_no_acknowledged_write() {
    let length = thrash_time();
    let seed = std::env::var("PONTOON_THRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!(
        "thrash: seed {seed} (PONTOON_THRASH_SEED={seed} draws the same faults), {} s",
        length.as_secs()
    );
    let mut rng = Rng(seed);
    let mut s = Scenario::start("thrash");
    let start = s.inject("thrashing", &[], |_| {});
    let until = Instant::now() + length;
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rounds = 0;
    while Instant::now() < until {
        s.rig.wait_settled(
            &format!("thrash round {}: the cluster whole again", rounds + 1),
            SETTLE,
        );
        if Instant::now() >= until {
            break;
        }
        rounds += 1;
        let kind = KINDS[(rng.next_u64() % KINDS.len() as u64) as usize];
        let hold = Duration::from_millis(rng.range(2_000, 8_000));
        let (what, undo) = inject(&s.rig, kind, &mut rng);
        s.note(&format!(
            "round {rounds}: {kind}: {what}, for {:.1} s",
            hold.as_secs_f64()
        ));
        *by_kind.entry(kind).or_default() += 1;
        std::thread::sleep(hold);
        undo(&s.rig);
        s.note(&format!("round {rounds}: undone"));
        std::thread::sleep(Duration::from_millis(rng.range(500, 2_000)));
    }
    s.heal("everything", |r| r.tb.heal_all());
    s.rig
        .wait_settled("the cluster whole after thrashing", SETTLE);
    let took = s.load.elapsed().saturating_sub(start);
    let figures = s.finish();
    let f = &figures[0];
    eprintln!(
        "thrash: seed {seed}, {rounds} rounds in {:.0} s, faults by kind {by_kind:?}, {} ops, {} failed, longest stall {:.1} s (from +{:.1} s)",
        took.as_secs_f64(),
        f.ops,
        f.failed,
        f.longest_stall.as_secs_f64(),
        f.stall_from.saturating_sub(start).as_secs_f64()
    );
}
