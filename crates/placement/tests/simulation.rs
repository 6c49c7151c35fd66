//! Cluster-scale simulations: a thousand OSDs (100 hosts of 10), equal and
//! mixed weights, 3 replicas on distinct hosts. Each prints its figures
//! (`cargo test --release -p pontoon-placement -- --nocapture`) and asserts
//! the targets: fullest OSD within 10% of its share, and no more than 1.2x
//! the minimum data moved when one OSD joins or leaves.
//!
//! `PONTOON_LONG=1` runs bigger PG counts (and the straw2-only sweep up to
//! the PG count where it meets the balance target on its own).

use std::time::Instant;

use pontoon_placement::{
    BalanceOptions, Balanced, FailureDomain, OsdSpec, PlacementMap, PoolRule, Utilization, movement,
};
use pontoon_types::{OsdId, PoolId};

fn long() -> bool {
    std::env::var("PONTOON_LONG").is_ok_and(|v| v == "1")
}

const HOSTS: u32 = 100;
const PER_HOST: u32 = 10;
const SIZE: u32 = 3;

/// Drive capacities in MiB: 0.96, 1.92, 3.84 and 7.68 TB.
const MODELS: [u64; 4] = [915_527, 1_831_055, 3_662_109, 7_324_219];

fn osd(id: u32, weight: u64, host: u32) -> OsdSpec {
    OsdSpec {
        id: OsdId(id),
        weight,
        host: format!("host{host:03}"),
        in_cluster: true,
    }
}

/// 100 hosts x 10 OSDs of 3.84 TB.
fn equal_cluster() -> Vec<OsdSpec> {
    (0..HOSTS * PER_HOST)
        .map(|i| osd(i, MODELS[2], i / PER_HOST))
        .collect()
}

/// 100 hosts x 10 OSDs; each host has two drive models, five of each, so
/// OSD weights span 8x and host weights span 6x.
fn mixed_cluster() -> Vec<OsdSpec> {
    (0..HOSTS * PER_HOST)
        .map(|i| {
            let h = i / PER_HOST;
            let model = (h as usize + (i % PER_HOST) as usize / 5) % MODELS.len();
            osd(i, MODELS[model], h)
        })
        .collect()
}

fn rule() -> PoolRule {
    PoolRule {
        pool: PoolId(1),
        size: SIZE,
        failure_domain: FailureDomain::Host,
    }
}

fn check_domains(osds: &[OsdSpec], acting: &[Vec<OsdId>]) {
    for (pg, set) in acting.iter().enumerate() {
        assert_eq!(set.len(), SIZE as usize, "pg {pg}");
        let mut hosts: Vec<&str> = set
            .iter()
            .map(|id| {
                let o = osds.iter().find(|o| o.id == *id);
                assert!(o.is_some_and(OsdSpec::is_eligible), "pg {pg} on {id}");
                o.map_or("", |o| o.host.as_str())
            })
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        assert_eq!(hosts.len(), set.len(), "pg {pg} shares a host: {set:?}");
    }
}

fn describe(u: &Utilization) -> String {
    format!(
        "max/target {:.3}, min/target {:.3} (mean {:.1}, max {}, min {})",
        u.max_ratio, u.min_ratio, u.mean, u.max, u.min
    )
}

/// The state of a pool: straw2's sets, the exceptions, the acting sets.
struct Pool {
    map: PlacementMap,
    raw: Vec<Vec<OsdId>>,
    balanced: Balanced,
}

fn initial(osds: &[OsdSpec], pgs: u32) -> Pool {
    let map = PlacementMap::new(osds).unwrap();
    let raw = map.place_pool(&rule(), pgs).unwrap();
    let balanced = map
        .balance(&rule(), &raw, &[], None, &BalanceOptions::tight())
        .unwrap();
    Pool { map, raw, balanced }
}

/// Recomputes the pool on a changed OSD list, keeping the exceptions and
/// rebalancing with the default (hysteresis) options.
fn evolve(before: &Pool, osds: &[OsdSpec], pgs: u32) -> Pool {
    let map = PlacementMap::new(osds).unwrap();
    let raw = map.place_pool(&rule(), pgs).unwrap();
    let balanced = map
        .balance(
            &rule(),
            &raw,
            &before.balanced.upmaps,
            Some(&before.balanced.acting),
            &BalanceOptions::default(),
        )
        .unwrap();
    Pool { map, raw, balanced }
}

/// One change to the OSD list.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A new OSD of this weight joins this host.
    Add { id: u32, weight: u64, host: u32 },
    /// An OSD is marked out.
    Out(u32),
    /// An OSD that was out is marked in again.
    In(u32),
    /// An OSD is deleted from the list.
    Remove(u32),
}

/// The changes every simulation goes through, in order, each applied to
/// the state the previous one left.
const CHANGES: [Change; 7] = [
    Change::Add {
        id: 1000,
        weight: MODELS[2],
        host: 42,
    },
    Change::Add {
        id: 1001,
        weight: MODELS[2],
        host: HOSTS, // a new host
    },
    Change::Out(517),
    Change::In(517),
    Change::Remove(3),
    Change::Add {
        id: 1002,
        weight: MODELS[3],
        host: 7,
    },
    Change::Out(250),
];

fn eligible_weight(osds: &[OsdSpec]) -> f64 {
    osds.iter()
        .filter(|o| o.is_eligible())
        .map(|o| o.weight as f64)
        .sum()
}

/// Applies a change; returns the new list and the minimum data it must
/// move: the fair share of all replicas of the OSD that joins or leaves.
fn apply(osds: &[OsdSpec], change: Change, replicas: f64) -> (Vec<OsdSpec>, f64) {
    let mut next = osds.to_vec();
    let find = |next: &[OsdSpec], id: u32| next.iter().position(|o| o.id == OsdId(id)).unwrap();
    match change {
        Change::Add { id, weight, host } => {
            next.push(osd(id, weight, host));
            let fair = replicas * weight as f64 / eligible_weight(&next);
            (next, fair)
        }
        Change::In(id) => {
            let i = find(&next, id);
            next[i].in_cluster = true;
            let fair = replicas * next[i].weight as f64 / eligible_weight(&next);
            (next, fair)
        }
        Change::Out(id) | Change::Remove(id) => {
            let i = find(&next, id);
            let fair = replicas * next[i].weight as f64 / eligible_weight(&next);
            if matches!(change, Change::Out(_)) {
                next[i].in_cluster = false;
            } else {
                next.remove(i);
            }
            (next, fair)
        }
    }
}

/// Runs one cluster through its initial placement and balance, then the
/// [`CHANGES`] one after another, checking balance, failure domains and
/// movement after each. Returns the worst movement ratio seen.
fn simulate(label: &str, osds: Vec<OsdSpec>, pgs: u32) -> f64 {
    let replicas = f64::from(pgs * SIZE);
    println!(
        "== {label}: {} OSDs on {HOSTS} hosts, {pgs} PGs x {SIZE} replicas ({:.1} per OSD)",
        osds.len(),
        replicas / osds.len() as f64
    );
    let t = Instant::now();
    let mut state = initial(&osds, pgs);
    let raw_u = state.map.utilization(&state.raw);
    let bal_u = state.map.utilization(&state.balanced.acting);
    println!(
        "  straw2 alone:  {}\n  balanced:      {} with {} exceptions ({:.2}% of replicas) [{:.2?}]",
        describe(&raw_u),
        describe(&bal_u),
        state.balanced.upmaps.len(),
        100.0 * state.balanced.upmaps.len() as f64 / replicas,
        t.elapsed()
    );
    check_domains(&osds, &state.balanced.acting);
    assert!(
        bal_u.max_ratio <= 1.10,
        "{label}: balanced max/target {}",
        bal_u.max_ratio
    );

    let mut osds = osds;
    let mut worst: f64 = 0.0;
    for change in CHANGES {
        let t = Instant::now();
        let (next_osds, fair) = apply(&osds, change, replicas);
        let next = evolve(&state, &next_osds, pgs);
        let raw_m = movement(&state.raw, &next.raw).unwrap();
        let m = movement(&state.balanced.acting, &next.balanced.acting).unwrap();
        let u = next.map.utilization(&next.balanced.acting);
        let ratio = m.replicas_moved as f64 / fair;
        println!(
            "  {change:?}: minimum {fair:.0} replicas; straw2 alone moves {} ({:.3}x); \
             with balancer {} ({ratio:.3}x; {} slot changes, {} primaries changed; \
             {} new moves, {} exceptions dropped, {} rebased); then {} [{:.2?}]",
            raw_m.replicas_moved,
            raw_m.replicas_moved as f64 / fair,
            m.replicas_moved,
            m.slot_changes,
            m.primaries_changed,
            next.balanced.moves,
            next.balanced.dropped.len(),
            next.balanced.rebased,
            describe(&u),
            t.elapsed()
        );
        check_domains(&next_osds, &next.balanced.acting);
        // The stored exceptions alone reproduce the acting sets.
        let reapplied = next
            .map
            .apply_upmaps(&rule(), &next.raw, &next.balanced.upmaps)
            .unwrap();
        assert_eq!(reapplied.acting, next.balanced.acting);
        assert!(
            u.max_ratio <= 1.10,
            "{label} {change:?}: max/target {}",
            u.max_ratio
        );
        assert!(
            ratio <= 1.2,
            "{label} {change:?}: moved {ratio:.3}x the minimum"
        );
        worst = worst.max(ratio);
        osds = next_osds;
        state = next;
    }
    worst
}

/// Replicas per OSD the main simulations use: about 100, Ceph's usual
/// target, where straw2 alone is ~30% off and the balancer is needed.
fn pgs() -> u32 {
    if long() { 131_072 } else { 32_768 }
}

#[test]
fn thousand_equal_osds_balance_and_move_minimally() {
    let worst = simulate("equal weights", equal_cluster(), pgs());
    println!("  worst movement: {worst:.3}x the minimum");
}

#[test]
fn thousand_mixed_weight_osds_balance_and_move_minimally() {
    let worst = simulate("mixed weights", mixed_cluster(), pgs());
    println!("  worst movement: {worst:.3}x the minimum");
}

/// How many replicas per OSD straw2 needs, without the balancer, before
/// the fullest of 1,000 equal OSDs is within 10% of the mean. Theory
/// (max of 1,000 Poisson(λ) draws ≈ λ + 3.2√λ) says about a thousand.
#[test]
fn straw2_alone_needs_about_a_thousand_replicas_per_osd() {
    let osds = equal_cluster();
    let map = PlacementMap::new(&osds).unwrap();
    let per_osd: &[u32] = if long() {
        &[100, 250, 500, 1000, 1250, 1500, 2000]
    } else {
        &[100, 300, 1000]
    };
    let mut met_at = None;
    for &lambda in per_osd {
        let pgs = lambda * HOSTS * PER_HOST / SIZE;
        let t = Instant::now();
        let raw = map.place_pool(&rule(), pgs).unwrap();
        let u = map.utilization(&raw);
        let var = u
            .loads
            .iter()
            .map(|l| (l.replicas as f64 - u.mean).powi(2))
            .sum::<f64>()
            / u.loads.len() as f64;
        let expect = 1.0 + 3.2 / u.mean.sqrt();
        println!(
            "straw2 alone, {lambda:>4} replicas/OSD ({pgs} PGs): {} ; variance/mean {:.3}; \
             Poisson predicts max/mean ~{expect:.3} [{:.2?}]",
            describe(&u),
            var / u.mean,
            t.elapsed()
        );
        // Straw2 must behave like independent weighted draws: spread close
        // to Poisson, and the fullest OSD where Poisson puts it.
        assert!(
            (0.8..1.2).contains(&(var / u.mean)),
            "variance/mean {}",
            var / u.mean
        );
        assert!(
            (u.max_ratio - expect).abs() < 0.6 * (expect - 1.0),
            "max/mean {}",
            u.max_ratio
        );
        if u.max_ratio <= 1.10 && met_at.is_none() {
            met_at = Some(lambda);
        }
    }
    match met_at {
        Some(l) => println!("straw2 alone meets max/mean <= 1.10 from {l} replicas per OSD"),
        None => println!("straw2 alone never met max/mean <= 1.10 in this sweep"),
    }
    if long() {
        assert!(met_at.is_some_and(|l| l <= 1500));
    }
}
