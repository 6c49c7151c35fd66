//! Network partitions under load (issue 14), on the scenario rig (three
//! etcd hosts, OSD hosts o1..o3 with osd.0..osd.2, managers on m1 and m2,
//! a size-3 pool with failure domain host; see `pontoon_testbed::scenario`):
//!
//! - an OSD host cut from the other OSD hosts, but not from etcd or the
//!   client: a split-brain attempt. Its peers report it, the manager holds
//!   it down, it fences and its PGs move on; healed, it is released and
//!   rejoins;
//! - an OSD host cut from etcd, but not from its peers or the client: its
//!   lease lapses, it fences, its PGs move on; healed, it takes a new
//!   lease and rejoins;
//! - the active manager's host isolated: the standby takes over, I/O goes
//!   on, and the new manager handles an OSD killed meanwhile.
//!
//! Every scenario runs the load throughout and ends with the verdict of
//! `Scenario::finish`: clean cluster, checker clean, replicas identical,
//! processes running. Timings are printed, not asserted.

use std::time::Duration;

use pontoon_testbed::Node;
use pontoon_testbed::scenario::{EXPECT, Scenario};

#[test]
fn an_osd_host_cut_from_its_peers_is_held_down_then_released_and_rejoins() {
    let mut s = Scenario::start("cut-from-peers");
    let fault = s.inject("o1 cut from o2 and o3, both ways, for 20 s", &[0], |r| {
        r.tb.partition(&[&r.o[0] as &dyn Node], &[&r.o[1], &r.o[2]])
    });
    let affected = s.affected();
    s.rig.wait_mgr_log("osd.0 is unreachable from");
    s.note("the manager holds osd.0 down");
    s.rig.wait_log(&["osd.0"], "fenced=true", 1, EXPECT);
    s.note("osd.0 fenced");
    s.expect_routed_around(0, &affected, fault, "I/O on osd.0's PGs resumed");
    s.hold(fault, Duration::from_secs(20));
    let healed = s.heal("the cut", |r| r.tb.heal_all());
    s.rig
        .wait_mgr_log("osd.0 is reachable from its peers again: released");
    s.note("osd.0 released");
    s.rig.wait_log(&["osd.0"], "fenced=false", 2, EXPECT);
    s.note("osd.0 serves again");
    s.expect_writes(&affected, healed, "I/O after the heal");
    s.finish();
}

#[test]
fn an_osd_host_cut_from_etcd_fences_and_rejoins_with_a_new_lease() {
    let mut s = Scenario::start("cut-from-etcd");
    let fault = s.inject(
        "o1 cut from e1, e2 and e3, both ways, for 20 s",
        &[0],
        |r| {
            r.tb.partition(&[&r.o[0] as &dyn Node], &[&r.e[0], &r.e[1], &r.e[2]])
        },
    );
    let affected = s.affected();
    s.rig.wait_log(&["osd.0"], "fenced=true", 1, EXPECT);
    s.note("osd.0 fenced");
    s.rig.wait_mgr_log("osd.0 is down");
    s.note("the manager sees osd.0 down");
    s.expect_routed_around(0, &affected, fault, "I/O on osd.0's PGs resumed");
    s.hold(fault, Duration::from_secs(20));
    let healed = s.heal("the cut", |r| r.tb.heal_all());
    s.rig.wait_mgr_log("osd.0 is alive again");
    s.note("osd.0 holds a new lease");
    s.rig.wait_log(&["osd.0"], "fenced=false", 2, EXPECT);
    s.note("osd.0 serves again");
    s.expect_writes(&affected, healed, "I/O after the heal");
    s.finish();
}

#[test]
fn the_standby_manager_takes_over_from_an_isolated_one_and_handles_an_osd_killed_meanwhile() {
    let mut s = Scenario::start("mgr-isolated");
    let active = s.rig.active_mgr_index();
    assert_eq!(active, 0, "m1 started first and leads");
    let fault = s.inject("m1 (the active manager) isolated", &[], |r| {
        r.tb.isolate(&r.m[0])
    });
    s.rig
        .wait_log(&["mgr.m2"], "became manager leader", 1, EXPECT);
    s.note("m2 became the manager leader");
    s.expect_writes(&s.load.pgs(), fault, "I/O with m1 isolated");
    let fences_before = s.rig.fences();
    s.hold(fault, Duration::from_secs(5));

    // The new manager handles an OSD killed while the old one is still cut.
    let killed = s.inject("osd.1 killed (SIGKILL) while m1 is isolated", &[1], |r| {
        r.kill_osd(1)
    });
    let affected = s.affected();
    s.rig.wait_log(&["mgr.m2"], "osd.1 is down", 1, EXPECT);
    s.note("m2 sees osd.1 down");
    s.expect_routed_around(1, &affected, killed, "I/O on osd.1's PGs resumed");
    s.rig.restart_osd(1);
    s.note("osd.1 restarted");
    s.rig
        .wait_log(&["mgr.m2"], "osd.1 is alive again", 1, EXPECT);
    s.note("osd.1 is alive again");
    s.hold(fault, Duration::from_secs(20));
    s.heal("m1's isolation", |r| r.tb.heal_all());
    // The old manager stands by again rather than acting.
    s.rig
        .wait_log(&["mgr.m1"], "campaigning for manager leader", 2, EXPECT);
    s.note("m1 campaigns again (standby)");
    assert_eq!(s.rig.active_mgr_index(), 1, "m2 stays the active manager");
    let fences_after = s.rig.fences();
    eprintln!(
        "scenario mgr-isolated: fences before the kill {fences_before:?}, after {fences_after:?} (the manager's isolation alone fenced {} OSDs)",
        fences_before.values().sum::<usize>()
    );
    s.finish();
    assert_eq!(
        fences_before.values().sum::<usize>(),
        0,
        "no OSD fences because the manager's host is cut off"
    );
}
