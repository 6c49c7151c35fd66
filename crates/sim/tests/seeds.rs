//! The simulation in the test suite: hundreds of seeds of the real shard,
//! manager decisions and client under injected faults, each checked for
//! consistency and for healing; exact replay; and proof that the checker
//! fails a deliberately broken replication.

use std::collections::BTreeMap;
use std::time::Duration;

use pontoon_sim::{Outcome, Profile, RunOptions, run_seed};

/// Runs `seeds`, prints statistics, and fails with every failing seed's
/// verdict and trace tail.
fn run_all(seeds: std::ops::Range<u64>) {
    run_profile(Profile::Mixed, seeds);
}

fn run_profile(profile: Profile, seeds: std::ops::Range<u64>) {
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let (mut ops, mut sim, mut wall) = (0, Duration::ZERO, Duration::ZERO);
    let (mut snaps, mut images, mut judged, mut rejected) = (0, 0, 0, 0);
    let mut failed: Vec<Outcome> = Vec::new();
    let n = seeds.end - seeds.start;
    for seed in seeds {
        let mut opts = RunOptions::new(seed);
        opts.profile = profile;
        let out = run_seed(&opts);
        ops += out.ops;
        snaps += out.snapshots;
        images += out.snapshot_images;
        judged += out.shifted.0;
        rejected += out.shifted.1;
        sim += out.sim_time;
        wall += out.wall_time;
        for (k, c) in &out.faults {
            *faults.entry(k.to_string()).or_default() += c;
        }
        if out.failure.is_some() {
            failed.push(out);
        }
    }
    eprintln!(
        "{profile:?}: {n} schedules, {ops} operations checked, {snaps} snapshots taken, {images} read back as cuts ({rejected} of {judged} rejected by the previous snapshot's times), faults {faults:?}, {} failed, {:.0} s simulated in {:.1} s",
        failed.len(),
        sim.as_secs_f64(),
        wall.as_secs_f64()
    );
    assert!(
        ops > n as usize * 50,
        "too few operations were checked: {ops}"
    );
    assert!(
        images >= n as usize * 2,
        "only {images} snapshot images were checked in {n} runs ({snaps} taken)"
    );
    // The checker has teeth on the run's own data: a snapshot's image
    // judged by the times of the snapshot before it is mostly wrong.
    assert!(
        rejected * 2 > judged && judged > 0,
        "the cut checker rejected only {rejected} of {judged} images judged by the previous snapshot's times"
    );
    let crashes = faults.get("Crash").copied().unwrap_or(0);
    assert!(
        crashes > n,
        "the injector crashed only {crashes} OSDs in {n} runs"
    );
    if let Some(f) = failed.first() {
        panic!(
            "{} seeds failed: {:?}\nfirst, seed {}:\n{}\n--- last events ---\n{}\nreplay: cargo run -p pontoon-sim -- --seed {} --trace",
            failed.len(),
            failed.iter().map(|f| f.seed).collect::<Vec<_>>(),
            f.seed,
            f.failure.as_deref().unwrap_or_default(),
            f.trace_tail,
            f.seed
        );
    }
}

#[test]
fn seeds_0_to_199_are_consistent_and_heal() {
    run_all(0..200);
}

#[test]
fn seeds_200_to_399_are_consistent_and_heal() {
    run_all(200..400);
}

#[test]
fn seeds_400_to_599_are_consistent_and_heal() {
    run_all(400..600);
}

#[test]
fn seeds_600_to_799_are_consistent_and_heal() {
    run_all(600..800);
}

#[test]
fn seeds_800_to_999_are_consistent_and_heal() {
    run_all(800..1000);
}

#[test]
fn churn_seeds_0_to_299_are_consistent_and_heal() {
    run_profile(Profile::Churn, 0..300);
}

/// A seed with the faults it was found with (client crashes came later).
fn original(seed: u64) -> RunOptions {
    let mut opts = RunOptions::new(seed);
    opts.client_crashes = false;
    opts
}

/// Seeds that found protocol bugs, kept after the fix.
#[test]
fn regression_seeds() {
    // 60, 87: a replica applied a late copy of an older sub-operation over
    // a newer one (version and bytes went back on one replica while the
    // primary counted it as current); fixed in `replica_subop`.
    // 1235, 1847: a read waited for an object lock across the end of its
    // interval, and was then served from the new primary's copy while that
    // PG was incomplete (it returned zeros for acknowledged writes); fixed
    // by `still_serving` checks after every wait in `client_ops`.
    // 2471: a write failed half way (on the primary, not on a replica that
    // had died), a read then returned it from the primary, and a later
    // interval that peered from the replica rolled it back; fixed: a read
    // of an object some member lacks recovers it on every member first.
    // 91, 260: a bit flipped in a journal record; when that OSD restarted
    // (before its lease lapsed) its journal ended at the bad record and it
    // came back without later acknowledged writes, in the same intervals,
    // so no primary looked at it again (a stale read, replicas that
    // differ). Fixed: a restarted OSD still in some acting set waits until
    // the manager has seen it down, so it returns in new intervals that
    // peer afresh (`daemon::wait_to_be_seen_down`).
    for seed in [60, 87, 91, 260, 1235, 1847, 2471] {
        let out = run_seed(&original(seed));
        assert!(out.failure.is_none(), "seed {seed}: {:?}", out.failure);
    }
    // Churn 23: a write half failed, the next interval had one member
    // (below min_size) and served a read of it, and the interval after
    // skipped that one (it could not have accepted writes) and peered from
    // a replica without it: the value read was rolled back. Fixed: no I/O
    // below min_size.
    //
    // Churn 274, 634, 748: a bit rotted in a journal record and, on
    // restart, the store replayed up to that record and dropped every
    // acknowledged write after it without a word; when the other replicas
    // were down, peering took that copy as the truth. Fixed: a bad record
    // with complete records chained after it is corruption, not a torn
    // tail, and the store refuses to open (the OSD is then replaced).
    for seed in [23, 274, 634, 748] {
        let mut opts = original(seed);
        opts.profile = Profile::Churn;
        let out = run_seed(&opts);
        assert!(
            out.failure.is_none(),
            "churn seed {seed}: {:?}",
            out.failure
        );
    }
    // With client crashes, mixed 161, 454, 687 and churn 147, 244: a write
    // that reached only some members after background recovery had
    // finished was recorded as missing but never recovered unless a client
    // touched the object again, so the PG stayed degraded for good (a
    // liveness failure). Fixed: recording a missing object starts
    // background recovery if it is not running.
    //
    // Mixed 7234: a sub-operation of an ended interval passed the replica's
    // interval check, then waited for the object lock (added for 60/87)
    // into the next interval and was applied there: a replica held the
    // same version as the others with different bytes. Fixed: the interval
    // is checked after the lock is taken.
    //
    // Mixed 478, 489 and churn 24, 267 (snapshots and a clone): a new
    // primary that lacked a clone's object answered the client's
    // allocation query from its stale copy before recovering it, so the
    // clone's client read the parent snapshot's data (zeros, or an older
    // value) for a block the clone had written and was acknowledged.
    // Fixed: an allocation query waits for recovery as a read does.
    //
    // Mixed 372: snap trim lost a request that arrived during the last
    // call of a pass over the same volume. Mixed 386, 562: a write stamped
    // with a removed snapshot's sequence landed after its object was
    // trimmed and made a clone nothing trimmed again. Fixed: a volume
    // scheduled while trim runs gets another pass; a stale-sequence write
    // that left a dead clone schedules trim. (The reclaim step fails on
    // clones no live snapshot reads.)
    for (profile, seed) in [
        (Profile::Mixed, 372),
        (Profile::Mixed, 386),
        (Profile::Mixed, 562),
        (Profile::Mixed, 478),
        (Profile::Mixed, 489),
        (Profile::Churn, 24),
        (Profile::Churn, 267),
        (Profile::Mixed, 7234),
        (Profile::Mixed, 161),
        (Profile::Mixed, 454),
        (Profile::Mixed, 687),
        (Profile::Churn, 147),
        (Profile::Churn, 244),
    ] {
        let mut opts = RunOptions::new(seed);
        opts.profile = profile;
        let out = run_seed(&opts);
        assert!(
            out.failure.is_none(),
            "{profile:?} seed {seed}: {:?}",
            out.failure
        );
    }
}

#[test]
fn a_seed_replays_exactly() {
    let a = run_seed(&RunOptions::new(7));
    let b = run_seed(&RunOptions::new(7));
    assert!(a.ops > 50, "seed 7 checked only {} operations", a.ops);
    assert_eq!(
        (a.digest, a.ops, a.sim_time, a.polls, &a.faults),
        (b.digest, b.ops, b.sim_time, b.polls, &b.faults)
    );
    let c = run_seed(&RunOptions::new(8));
    assert_ne!(a.digest, c.digest, "different seeds took the same path");
}

#[test]
fn broken_replication_is_caught_in_several_of_20_seeds() {
    let mut caught = Vec::new();
    for seed in 0..20 {
        let mut opts = original(seed);
        opts.broken = true;
        if let Some(f) = run_seed(&opts).failure {
            caught.push((seed, f));
        }
    }
    eprintln!(
        "broken replication: {} of 20 seeds failed: {:?}",
        caught.len(),
        caught.iter().map(|c| c.0).collect::<Vec<_>>()
    );
    assert!(
        caught.len() >= 3,
        "acknowledging after the primary alone went unnoticed in {} of 20 seeds",
        20 - caught.len()
    );
    // A lost acknowledged write also shows in the snapshots taken after
    // it: one that misses it, or a read of one that went back.
    for (seed, why) in &caught {
        assert!(
            why.contains("stale read")
                || why.contains("replicas differ")
                || why.contains("went back")
                || why.contains("before the create started")
                || why.contains("is not a cut")
                || why.contains("under the faults returned"),
            "seed {seed} failed for another reason: {why}"
        );
    }
}

/// The known gap of several writers: a client that has not seen the map
/// with a new snapshot yet lands a write in it after another client's
/// write, stamped with the new sequence, was acknowledged outside it. The
/// volume two clients write is judged by the start and end rules only
/// (seeds 0-999 above pass so); judged by the whole cut rule
/// (`--cross-client-cuts`) about one seed in two hundred breaks it, and for
/// no other reason. Seeds found on this build are tried first; a seed's
/// interleaving depends on the build, so if none of them shows the gap any
/// more the search goes on from seed 0 (bounded).
#[test]
fn several_writers_break_the_cut_rule_that_one_writer_keeps() {
    const KNOWN: [u64; 3] = [218, 595, 734];
    const SEARCH: u64 = 1000;
    let mut tried = 0;
    for seed in KNOWN
        .into_iter()
        .chain((0..SEARCH).filter(|s| !KNOWN.contains(s)))
    {
        let mut opts = RunOptions::new(seed);
        opts.cross_client_cuts = true;
        tried += 1;
        let Some(f) = run_seed(&opts).failure else {
            continue;
        };
        for line in f.lines() {
            assert!(
                line.starts_with("simvol@") && line.contains("is not a cut"),
                "seed {seed} failed for another reason: {line}"
            );
            // A client's own writes are cut consistently: a write with an
            // old snap context is refused on an object a newer one wrote.
            assert!(
                line.contains("(only of other clients)"),
                "seed {seed}: a snapshot misses a write its own client had acknowledged \
                 before issuing one it holds: {line}"
            );
        }
        eprintln!("seed {seed} shows the several-writer gap ({tried} seeds tried):\n{f}");
        return;
    }
    panic!("no seed of {tried} showed the several-writer gap under --cross-client-cuts");
}
