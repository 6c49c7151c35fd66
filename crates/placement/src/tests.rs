//! Unit tests of placement proper; the balancer and statistics have their
//! own, and `tests/simulation.rs` runs clusters of a thousand OSDs.

use std::collections::BTreeSet;

use pontoon_types::{OsdId, PoolId};

use crate::hash::{ln_unit, osd_salt, pg_seed, unit_k};
use crate::*;

fn osd(id: u32, weight: u64, host: &str) -> OsdSpec {
    OsdSpec {
        id: OsdId(id),
        weight,
        host: host.to_owned(),
        in_cluster: true,
    }
}

/// `hosts` hosts of `per_host` OSDs of equal weight; OSD ids are
/// `host * per_host + i`.
fn cluster(hosts: u32, per_host: u32, weight: u64) -> Vec<OsdSpec> {
    (0..hosts * per_host)
        .map(|i| osd(i, weight, &format!("host{}", i / per_host)))
        .collect()
}

fn rule(size: u32, failure_domain: FailureDomain) -> PoolRule {
    PoolRule {
        pool: PoolId(1),
        size,
        failure_domain,
    }
}

/// Straw2 the slow, obvious way: every eligible OSD's draw, sorted best
/// first; walk down the list taking each OSD whose failure domain is new.
fn naive(osds: &[OsdSpec], rule: &PoolRule, pg: u32) -> Vec<OsdId> {
    let seed = pg_seed(rule.pool, pg);
    let mut draws: Vec<(f64, &OsdSpec)> = osds
        .iter()
        .filter(|o| o.is_eligible())
        .map(|o| {
            let draw = ln_unit(unit_k(seed, osd_salt(o.id.0))) * (1.0 / o.weight as f64);
            (draw, o)
        })
        .collect();
    draws.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    let mut hosts = BTreeSet::new();
    let mut out = Vec::new();
    for (_, o) in draws {
        if out.len() == rule.size as usize {
            break;
        }
        if rule.failure_domain == FailureDomain::Host && !hosts.insert(o.host.as_str()) {
            continue;
        }
        out.push(o.id);
    }
    out
}

fn hosts_of(osds: &[OsdSpec], set: &[OsdId]) -> Vec<String> {
    set.iter()
        .map(|id| {
            osds.iter()
                .find(|o| o.id == *id)
                .map(|o| o.host.clone())
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn ranking_matches_naive_straw2() {
    // Mixed weights, uneven hosts, some out and weightless OSDs.
    let mut osds = Vec::new();
    for i in 0..60u32 {
        let mut o = osd(
            i,
            [100, 250, 400, 1000][i as usize % 4],
            &format!("h{}", i % 7),
        );
        o.in_cluster = i % 11 != 3;
        if i % 13 == 5 {
            o.weight = 0;
        }
        osds.push(o);
    }
    let map = PlacementMap::new(&osds).unwrap();
    for domain in [FailureDomain::Osd, FailureDomain::Host] {
        for size in [1, 2, 3, 5, 7, 9] {
            let r = rule(size, domain);
            for pg in 0..300 {
                assert_eq!(
                    map.place(&r, pg).unwrap(),
                    naive(&osds, &r, pg),
                    "{domain:?} size {size} pg {pg}"
                );
            }
        }
    }
}

#[test]
fn placement_results_are_pinned() {
    // These exact sets are on-disk state in a running cluster: if this test
    // fails, the change moves data and must not ship.
    let mut osds = cluster(10, 4, 1 << 20);
    for o in &mut osds {
        o.weight += u64::from(o.id.0) * 40_000;
    }
    let map = PlacementMap::new(&osds).unwrap();
    let host = rule(3, FailureDomain::Host);
    let flat = rule(3, FailureDomain::Osd);
    let got: Vec<Vec<u32>> = [0, 1, 2, 1000]
        .iter()
        .map(|&pg| map.place(&host, pg).unwrap().iter().map(|o| o.0).collect())
        .chain(
            [0, 1]
                .iter()
                .map(|&pg| map.place(&flat, pg).unwrap().iter().map(|o| o.0).collect()),
        )
        .collect();
    let pinned: Vec<Vec<u32>> = PINNED.iter().map(|s| s.to_vec()).collect();
    assert_eq!(got, pinned);
}

/// Host domain PGs 0, 1, 2, 1000, then OSD domain PGs 0, 1.
const PINNED: &[&[u32]] = &[
    &[34, 24, 13],
    &[14, 23, 33],
    &[8, 28, 39],
    &[19, 22, 36],
    &[34, 24, 13],
    &[14, 23, 33],
];

#[test]
fn same_inputs_give_same_sets_whatever_the_osd_order() {
    let osds = cluster(12, 5, 1000);
    let mut reversed = osds.clone();
    reversed.reverse();
    // A deterministic shuffle.
    let mut shuffled = osds.clone();
    for i in (1..shuffled.len()).rev() {
        let j = (pontoon_types::mix64(i as u64) % (i as u64 + 1)) as usize;
        shuffled.swap(i, j);
    }
    let a = PlacementMap::new(&osds).unwrap();
    let b = PlacementMap::new(&reversed).unwrap();
    let c = PlacementMap::new(&shuffled).unwrap();
    for domain in [FailureDomain::Osd, FailureDomain::Host] {
        let r = rule(3, domain);
        let first = a.place_pool(&r, 500).unwrap();
        assert_eq!(first, a.place_pool(&r, 500).unwrap());
        assert_eq!(first, b.place_pool(&r, 500).unwrap());
        assert_eq!(first, c.place_pool(&r, 500).unwrap());
        assert_eq!(first[7], place(&shuffled, &r, 7).unwrap());
    }
}

#[test]
fn sets_are_distinct_osds_on_distinct_hosts() {
    let osds = cluster(8, 6, 1000);
    let map = PlacementMap::new(&osds).unwrap();
    for size in 1..=8 {
        for pg in 0..400 {
            let set = map.place(&rule(size, FailureDomain::Host), pg).unwrap();
            assert_eq!(set.len(), size as usize);
            let hosts: BTreeSet<String> = hosts_of(&osds, &set).into_iter().collect();
            assert_eq!(hosts.len(), set.len(), "pg {pg}: {set:?} shares a host");
        }
    }
}

#[test]
fn osd_domain_allows_shared_hosts_but_never_repeats_an_osd() {
    let osds = cluster(2, 5, 1000);
    let map = PlacementMap::new(&osds).unwrap();
    let mut shared_host_seen = false;
    for pg in 0..400 {
        let set = map.place(&rule(4, FailureDomain::Osd), pg).unwrap();
        let distinct: BTreeSet<OsdId> = set.iter().copied().collect();
        assert_eq!(distinct.len(), 4);
        let hosts: BTreeSet<String> = hosts_of(&osds, &set).into_iter().collect();
        shared_host_seen |= hosts.len() < set.len();
    }
    assert!(shared_host_seen);
}

#[test]
fn out_and_weightless_osds_receive_nothing() {
    let mut osds = cluster(6, 4, 1000);
    osds[0].in_cluster = false;
    osds[5].weight = 0;
    // A host whose only OSDs are out or weightless is not a host at all.
    osds[20].in_cluster = false;
    osds[21].in_cluster = false;
    osds[22].weight = 0;
    osds[23].weight = 0;
    let map = PlacementMap::new(&osds).unwrap();
    assert_eq!(map.eligible_count(), 24 - 6);
    assert_eq!(map.host_count(), 5);
    for domain in [FailureDomain::Osd, FailureDomain::Host] {
        let sets = map.place_pool(&rule(3, domain), 2000).unwrap();
        let counts = replica_counts(&sets);
        for id in [0, 5, 20, 21, 22, 23] {
            assert!(
                !counts.contains_key(&OsdId(id)),
                "{domain:?}: osd.{id} got PGs"
            );
        }
        assert_eq!(counts.len(), 18, "every eligible OSD gets something");
    }
}

#[test]
fn weights_are_honoured() {
    // 40 hosts of 4 OSDs; on every host one OSD has twice the weight.
    let mut osds = cluster(40, 4, 1000);
    for o in osds.iter_mut().filter(|o| o.id.0 % 4 == 0) {
        o.weight = 2000;
    }
    let map = PlacementMap::new(&osds).unwrap();
    for domain in [FailureDomain::Osd, FailureDomain::Host] {
        let sets = map.place_pool(&rule(3, domain), 20_000).unwrap();
        let counts = replica_counts(&sets);
        let mean = |heavy: bool| {
            let v: Vec<u64> = osds
                .iter()
                .filter(|o| (o.weight == 2000) == heavy)
                .map(|o| counts.get(&o.id).copied().unwrap_or(0))
                .collect();
            v.iter().sum::<u64>() as f64 / v.len() as f64
        };
        let ratio = mean(true) / mean(false);
        println!("{domain:?}: heavy/light replicas = {ratio:.3}");
        assert!((1.9..2.05).contains(&ratio), "{domain:?}: ratio {ratio}");
    }
}

#[test]
fn primaries_follow_weight_too() {
    let osds = cluster(20, 5, 1000);
    let map = PlacementMap::new(&osds).unwrap();
    let sets = map
        .place_pool(&rule(3, FailureDomain::Host), 20_000)
        .unwrap();
    let u = map.utilization(&sets);
    let (lo, hi) = u.loads.iter().fold((u64::MAX, 0), |(lo, hi), l| {
        (lo.min(l.primaries), hi.max(l.primaries))
    });
    // 200 primaries each on average; Poisson spread.
    assert!(lo > 140 && hi < 260, "primaries per OSD in {lo}..={hi}");
}

#[test]
fn too_few_hosts_give_shorter_sets() {
    let osds = cluster(2, 3, 1000);
    let map = PlacementMap::new(&osds).unwrap();
    for pg in 0..100 {
        let set = map.place(&rule(3, FailureDomain::Host), pg).unwrap();
        assert_eq!(set.len(), 2);
        assert_ne!(hosts_of(&osds, &set)[0], hosts_of(&osds, &set)[1]);
        assert_eq!(
            map.place(&rule(3, FailureDomain::Osd), pg).unwrap().len(),
            3
        );
        assert_eq!(
            map.place(&rule(9, FailureDomain::Osd), pg).unwrap().len(),
            6
        );
    }
    let single = [osd(7, 1, "only")];
    let r = rule(3, FailureDomain::Host);
    assert_eq!(place(&single, &r, 0).unwrap(), vec![OsdId(7)]);
}

#[test]
fn bad_inputs_are_errors() {
    let r = rule(3, FailureDomain::Host);
    assert_eq!(
        PlacementMap::new(&[]).unwrap_err(),
        PlacementError::EmptyCluster
    );
    let dup = [osd(1, 1, "a"), osd(2, 1, "b"), osd(1, 1, "c")];
    assert_eq!(
        PlacementMap::new(&dup).unwrap_err(),
        PlacementError::DuplicateOsd(OsdId(1))
    );
    let map = PlacementMap::new(&cluster(3, 1, 1)).unwrap();
    assert_eq!(
        map.place(&rule(0, FailureDomain::Host), 0).unwrap_err(),
        PlacementError::ZeroSize { pool: PoolId(1) }
    );
    assert_eq!(
        map.place_pool(&rule(MAX_POOL_SIZE + 1, FailureDomain::Osd), 4)
            .unwrap_err(),
        PlacementError::SizeTooLarge {
            pool: PoolId(1),
            size: MAX_POOL_SIZE + 1
        }
    );
    let mut all_out = cluster(3, 1, 1);
    all_out[0].in_cluster = false;
    all_out[1].weight = 0;
    all_out[2].in_cluster = false;
    let map = PlacementMap::new(&all_out).unwrap();
    assert_eq!(map.place(&r, 0).unwrap_err(), PlacementError::NoEligibleOsd);
    assert_eq!(
        map.place_pool(&r, 0).unwrap_err(),
        PlacementError::NoEligibleOsd
    );
}

#[test]
fn pools_are_placed_independently() {
    let map = PlacementMap::new(&cluster(10, 4, 1000)).unwrap();
    let a = map.place_pool(&rule(3, FailureDomain::Host), 200).unwrap();
    let mut other = rule(3, FailureDomain::Host);
    other.pool = PoolId(2);
    let b = map.place_pool(&other, 200).unwrap();
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    assert!(same < 5, "{same} of 200 PGs identical across pools");
}

#[test]
fn renaming_a_host_or_scaling_all_weights_by_four_moves_nothing() {
    let osds = cluster(10, 4, 1000);
    let mut renamed = osds.clone();
    for o in renamed.iter_mut().filter(|o| o.host == "host3") {
        o.host = "rack9-host3".to_owned();
    }
    let r = rule(3, FailureDomain::Host);
    let a = PlacementMap::new(&osds)
        .unwrap()
        .place_pool(&r, 1000)
        .unwrap();
    let b = PlacementMap::new(&renamed)
        .unwrap()
        .place_pool(&r, 1000)
        .unwrap();
    assert_eq!(a, b);
    // Scaling every weight by a power of two scales every draw exactly.
    let scaled = cluster(10, 4, 4000);
    let c = PlacementMap::new(&scaled)
        .unwrap()
        .place_pool(&r, 1000)
        .unwrap();
    assert_eq!(a, c);
}

#[test]
fn adding_an_osd_moves_replicas_only_onto_it() {
    let mut osds = cluster(10, 4, 1000);
    let pgs = 4000;
    for domain in [FailureDomain::Osd, FailureDomain::Host] {
        let r = rule(3, domain);
        let before = PlacementMap::new(&osds)
            .unwrap()
            .place_pool(&r, pgs)
            .unwrap();
        // Into an existing host, and as a new host.
        for host in ["host2", "host-new"] {
            let mut grown = osds.clone();
            grown.push(osd(100, 1000, host));
            let after = PlacementMap::new(&grown)
                .unwrap()
                .place_pool(&r, pgs)
                .unwrap();
            let mut landed = 0;
            for (b, a) in before.iter().zip(&after) {
                let new: Vec<&OsdId> = a.iter().filter(|o| !b.contains(o)).collect();
                assert!(
                    new.is_empty() || new == [&OsdId(100)],
                    "{domain:?} {host}: {b:?} -> {a:?}"
                );
                landed += new.len();
            }
            let m = movement(&before, &after).unwrap();
            assert_eq!(m.replicas_moved, landed as u64);
            let fair = f64::from(pgs * 3) / 41.0;
            println!("{domain:?} add to {host}: moved {landed}, fair share {fair:.0}");
            assert!((landed as f64) < fair * 1.25 && (landed as f64) > fair * 0.75);
        }
    }
    // And taking one out moves exactly its replicas.
    let r = rule(3, FailureDomain::Host);
    let before = PlacementMap::new(&osds)
        .unwrap()
        .place_pool(&r, pgs)
        .unwrap();
    osds[13].in_cluster = false;
    let after = PlacementMap::new(&osds)
        .unwrap()
        .place_pool(&r, pgs)
        .unwrap();
    let held = replica_counts(&before)[&OsdId(13)];
    assert_eq!(movement(&before, &after).unwrap().replicas_moved, held);
    for (b, a) in before.iter().zip(&after) {
        if !b.contains(&OsdId(13)) {
            assert_eq!(b, a);
        }
    }
}

#[test]
fn replica_counts_and_movement_count_what_they_say() {
    let p = |v: &[u32]| v.iter().map(|&i| OsdId(i)).collect::<Vec<_>>();
    let before = vec![p(&[1, 2, 3]), p(&[4, 5, 6]), p(&[7, 8])];
    let after = vec![p(&[2, 1, 3]), p(&[4, 9, 6]), p(&[7, 8, 1])];
    let m = movement(&before, &after).unwrap();
    assert_eq!(
        m,
        Movement {
            pgs: 3,
            pgs_changed: 3,
            slot_changes: 2 + 1 + 1,
            replicas_moved: 2,
            primaries_changed: 1,
        }
    );
    let counts = replica_counts(&after);
    assert_eq!(counts[&OsdId(1)], 2);
    assert_eq!(counts.len(), 8);
    assert_eq!(
        movement(&before, &after[..2]).unwrap_err(),
        PlacementError::PgCountMismatch { left: 3, right: 2 }
    );
}
