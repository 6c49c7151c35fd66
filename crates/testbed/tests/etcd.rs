//! A three-member etcd across three hosts: healthy at start, healthy with
//! one member killed and whole again once it restarts, a new leader when
//! the leader's host is isolated and three healthy members once healed;
//! and what Pontoon's map store makes of a member lost either way.

use std::time::{Duration, Instant};

use pontoon_cluster::MapStore;
use pontoon_testbed::{EtcdCluster, Testbed, tokio_rt};

fn three_members(hint: &str) -> (Testbed, EtcdCluster) {
    let tb = Testbed::new(hint);
    let hosts = [tb.add_host("e1"), tb.add_host("e2"), tb.add_host("e3")];
    let etcd = tb.start_etcd(&[&hosts[0], &hosts[1], &hosts[2]]);
    (tb, etcd)
}

/// Connects a map store with every endpoint, as Pontoon's daemons do, and
/// loads the map through it, `rounds` times; every attempt must work.
fn connect_and_load(tb: &Testbed, etcd: &EtcdCluster, rounds: usize) {
    let eps = etcd.endpoint_list();
    tokio_rt().block_on(async {
        for round in 0..rounds {
            let store = MapStore::connect(&eps, "pontoon")
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "round {round}: connect with {eps:?}: {e}\n{}",
                        tb.logs_tail()
                    )
                });
            for _ in 0..3 {
                store
                    .load()
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: load through {eps:?}: {e}"));
            }
        }
    });
}

#[test]
fn a_three_member_etcd_stays_healthy_with_one_member_killed_and_restarted() {
    let (tb, etcd) = three_members("etcd-kill");
    assert_eq!(etcd.healthy_members(), vec![0, 1, 2]);
    assert_eq!(tb.etcd_endpoints(), etcd.endpoints());
    assert_eq!(etcd.endpoints().split(',').count(), 3);
    let leader = etcd.wait_leader(Duration::from_secs(10));
    connect_and_load(&tb, &etcd, 3);

    let victim = (leader + 1) % 3;
    etcd.kill9_member(victim);
    assert!(!etcd.member(victim).is_running());
    etcd.wait_healthy(Duration::from_secs(10));
    assert!(!etcd.healthy_members().contains(&victim));
    assert!(etcd.wait_leader(Duration::from_secs(10)) != victim);

    let p = etcd.restart_member(victim);
    assert!(p.is_running());
    etcd.wait_members_healthy(3, Duration::from_secs(20));
    assert_eq!(
        tb.log_count(&format!("etcd.{victim}"), "=== testbed: starting"),
        2,
        "one log per member, appended on restart"
    );
    connect_and_load(&tb, &etcd, 3);
}

/// With one member killed (its port refuses connections), a map store
/// given every endpoint connects and loads every time: it talks to one
/// member at a time and moves to the next when one fails (etcd-client's
/// balanced channel sent about half the connects and a quarter of the
/// loads to the dead member).
#[test]

fn a_map_store_with_every_endpoint_works_with_one_member_killed() {
    let (tb, etcd) = three_members("etcd-failover");
    etcd.kill9_member(0);
    etcd.wait_healthy(Duration::from_secs(10));
    connect_and_load(&tb, &etcd, 10);
}

#[test]
fn isolating_the_leaders_host_elects_a_new_leader_and_healing_restores_three_members() {
    let (tb, etcd) = three_members("etcd-isolate");
    let old = etcd.wait_leader(Duration::from_secs(10));
    tb.isolate(etcd.host(old));
    let t = Instant::now();
    let new = loop {
        match etcd.leader() {
            Some(l) if l != old => break l,
            _ => {}
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no new leader 10s after isolating member {old}: healthy {:?}\n{}",
            etcd.healthy_members(),
            tb.logs_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("member {new} took over from {old} in {:?}", t.elapsed());
    assert!(!etcd.is_healthy(old), "the isolated member is out of reach");
    // A silent member (packets dropped) does not bother the map store.
    connect_and_load(&tb, &etcd, 5);

    tb.heal_all();
    etcd.wait_members_healthy(3, Duration::from_secs(20));
    assert!(etcd.wait_leader(Duration::from_secs(10)) < 3);
}
