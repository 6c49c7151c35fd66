//! etcd members lost under load (issue 14), on the scenario rig (see
//! `pontoon_testbed::scenario`). Every daemon and the test's client start
//! on the first endpoint, e1, and move to another member when it fails;
//! each scenario takes e1 away:
//!
//! - e1 killed (SIGKILL) while e2 leads, restarted 15 s later: I/O goes on
//!   and no OSD fences;
//! - e1 made the leader, then its host isolated for 15 s: the other two
//!   elect a leader, the daemons move to them, I/O goes on and no OSD
//!   fences (an etcd outage must stay well inside 8/10 of the 7 s lease).
//!
//! Every scenario runs the load throughout and ends with the verdict of
//! `Scenario::finish`. Timings are printed, not asserted.

use std::time::Duration;

use pontoon_testbed::scenario::{EXPECT, Scenario};

#[test]
fn an_etcd_member_killed_under_load_and_restarted_stops_nothing() {
    let mut s = Scenario::start("etcd-member-killed");
    s.rig.etcd.move_leader(1, Duration::from_secs(20));
    let before = s.rig.fences();
    let fault = s.inject(
        "etcd member e1 (not the leader) killed (SIGKILL)",
        &[],
        |r| r.etcd.kill9_member(0),
    );
    s.rig.etcd.wait_healthy(EXPECT);
    s.expect_writes(&s.load.pgs(), fault, "I/O with e1 dead");
    s.hold(fault, Duration::from_secs(15));
    let during = s.rig.fences();
    s.heal("e1 restarted", |r| {
        r.etcd.restart_member(0);
        r.etcd.wait_members_healthy(3, EXPECT);
    });
    s.hold(fault, Duration::from_secs(20));
    let fenced: usize = during.values().sum::<usize>() - before.values().sum::<usize>();
    eprintln!(
        "scenario etcd-member-killed: {fenced} fences while e1 was dead ({during:?}); etcd member moves per OSD {:?}",
        s.rig.etcd_moves()
    );
    s.finish();
    assert_eq!(
        fenced, 0,
        "no OSD fences while one etcd member of three is dead"
    );
}

#[test]
fn the_etcd_leaders_host_isolated_under_load_fences_no_osd() {
    let mut s = Scenario::start("etcd-leader-isolated");
    // e1 is the member every daemon talks to: make it the leader too.
    s.rig.etcd.move_leader(0, Duration::from_secs(20));
    let before = s.rig.fences();
    let fault = s.inject("etcd leader e1's host isolated for 15 s", &[], |r| {
        r.tb.isolate(&r.e[0])
    });
    let deadline = std::time::Instant::now() + EXPECT;
    let leader = loop {
        match s.rig.etcd.leader() {
            Some(l) if l != 0 => break l,
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new etcd leader\n{}",
            s.rig.tb.logs_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    s.note(&format!("e{} leads", leader + 1));
    s.expect_writes(&s.load.pgs(), fault, "I/O with e1 isolated");
    s.hold(fault, Duration::from_secs(15));
    let during = s.rig.fences();
    s.heal("e1's isolation", |r| {
        r.tb.heal_all();
        r.etcd.wait_members_healthy(3, EXPECT);
    });
    s.hold(fault, Duration::from_secs(20));
    let fenced: usize = during.values().sum::<usize>() - before.values().sum::<usize>();
    eprintln!(
        "scenario etcd-leader-isolated: {fenced} fences while e1 was isolated ({during:?}); etcd member moves per OSD {:?}",
        s.rig.etcd_moves()
    );
    s.finish();
    assert_eq!(
        fenced, 0,
        "no OSD fences while the etcd leader's host is isolated"
    );
}
