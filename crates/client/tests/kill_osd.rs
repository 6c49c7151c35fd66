//! Data safety with real processes: a local cluster (`pontoon up`: etcd, a
//! manager, three OSD processes), writers going through the client library,
//! one OSD killed with SIGKILL under load, restarted, recovered; then
//! another killed. Every acknowledged write must read back exactly at each
//! step, and the cluster must come back to active+clean.
//!
//! Needs the `pontoon` binary built beside the test (the suite's script
//! builds it first) and Debian's etcd-server.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::{Cluster, Model, replicas_identical, verify, write_load};
use pontoon_client::Client;

#[test]
fn acknowledged_writes_survive_sigkill_of_osds_under_load() {
    let mut c = Cluster::start();
    c.three_replica_volume(16, "256M");
    let feed = c.feed();
    let rt = compio::runtime::Runtime::new().unwrap();
    let model = Rc::new(RefCell::new(Model::default()));
    let client = Client::new(feed.clone());
    let vol = client.open("v").expect("open volume");

    // Load, kill -9 osd.1 in the middle, keep writing through the failover.
    rt.block_on(write_load(&vol, Duration::from_secs(2), model.clone(), 1));
    c.kill9_osd(1);
    rt.block_on(write_load(&vol, Duration::from_secs(8), model.clone(), 2));
    rt.block_on(verify(&vol, &model.borrow(), "after kill -9 of osd.1"));
    let gap = model.borrow().longest_gap;
    assert!(
        gap < Duration::from_secs(10),
        "writes stalled for {gap:?} after the kill"
    );

    // Bring it back: recovery must make it complete again.
    c.cli(&["osd", "start", "1"]);
    rt.block_on(write_load(&vol, Duration::from_secs(3), model.clone(), 3));
    c.wait_clean("after osd.1 returned");
    rt.block_on(verify(&vol, &model.borrow(), "after recovery"));
    replicas_identical(&feed, "v");

    // Now lose another OSD: what osd.1 recovered must be there.
    c.kill9_osd(0);
    rt.block_on(write_load(&vol, Duration::from_secs(2), model.clone(), 4));
    rt.block_on(verify(&vol, &model.borrow(), "after kill -9 of osd.0"));
    let m = model.borrow();
    eprintln!("acknowledged writes: {}, failed: {}", m.acks, m.failures);
    assert!(m.acks > 1000, "the load made progress: {} acks", m.acks);
    drop(m);
    feed.shutdown();
}
