//! OSD processes frozen and killed under load (issue 14), on the scenario
//! rig (see `pontoon_testbed::scenario`):
//!
//! - an OSD frozen with SIGSTOP for 30 s: its peers report it, the manager
//!   holds it down, its lease lapses and its PGs move on; thawed, it finds
//!   its lease gone (it must not serve what it had queued), is released
//!   once its peers hear it again, and rejoins;
//! - two OSDs of the size-3 pool killed at the same moment and restarted
//!   10 s later: with min_size 2, I/O stops, and resumes once they are
//!   back; no acknowledged write is lost.
//!
//! Every scenario runs the load throughout and ends with the verdict of
//! `Scenario::finish`. Timings are printed, not asserted.

use std::time::Duration;

use pontoon_testbed::scenario::{EXPECT, Scenario};

#[test]
fn an_osd_frozen_for_30_s_is_held_down_and_rejoins_once_thawed() {
    let mut s = Scenario::start("sigstop");
    let fault = s.inject("osd.0 frozen (SIGSTOP) for 30 s", &[0], |r| {
        r.osd(0).sigstop()
    });
    let affected = s.affected();
    s.rig.wait_mgr_log("osd.0 is unreachable from");
    s.note("the manager holds osd.0 down");
    s.expect_routed_around(0, &affected, fault, "I/O on osd.0's PGs resumed");
    s.hold(fault, Duration::from_secs(30));
    let thawed = s.heal("osd.0 thawed (SIGCONT)", |r| r.osd(0).sigcont());
    s.rig.wait_log(&["osd.0"], "fenced=true", 1, EXPECT);
    s.note("osd.0 noticed it is fenced");
    s.rig
        .wait_mgr_log("osd.0 is reachable from its peers again: released");
    s.note("osd.0 released");
    s.rig.wait_log(&["osd.0"], "fenced=false", 2, EXPECT);
    s.note("osd.0 serves again");
    s.expect_writes(&affected, thawed, "I/O after the thaw");
    s.finish();
}

#[test]
fn two_osds_killed_at_once_stop_io_until_they_return_and_lose_no_acknowledged_write() {
    let mut s = Scenario::start("two-killed");
    let fault = s.inject("osd.1 and osd.2 killed (SIGKILL) at once", &[1, 2], |r| {
        let (a, b) = (r.osd(1), r.osd(2));
        // Both signals first, then the reaping: the same moment.
        a.send_sigkill();
        b.send_sigkill();
        a.kill9();
        b.kill9();
    });
    let affected = s.affected();
    s.rig.wait_mgr_log("osd.1 is down");
    s.rig.wait_mgr_log("osd.2 is down");
    s.note("the manager sees osd.1 and osd.2 down");
    s.hold(fault, Duration::from_secs(10));
    let writes_while_down = s
        .load
        .ops()
        .iter()
        .filter(|o| {
            o.invoke >= fault
                && matches!(o.kind, pontoon_sim::workload::Kind::Write(_))
                && matches!(o.outcome, pontoon_sim::workload::Outcome::Ok(_))
        })
        .count();
    let back = s.heal("osd.1 and osd.2 restarted", |r| {
        r.restart_osd(1);
        r.restart_osd(2);
    });
    s.rig.wait_log(&["osd.1"], "fenced=false", 2, EXPECT);
    s.rig.wait_log(&["osd.2"], "fenced=false", 2, EXPECT);
    s.note("osd.1 and osd.2 serve again");
    s.expect_writes(&affected, back, "I/O after the restarts");
    eprintln!(
        "scenario two-killed: {writes_while_down} writes invoked after the kill were acknowledged before the restarts"
    );
    s.finish();
}
