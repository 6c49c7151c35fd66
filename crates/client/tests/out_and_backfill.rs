//! An OSD that dies and stays dead is marked out, and its data is
//! re-replicated elsewhere: four OSDs (`pontoon up --osds 4 --out-after 5s
//! --lease-ttl 3s`), a pool of size 3 (min 2) with 32 PGs, writers through
//! the client library; one OSD killed with SIGKILL and left dead. The
//! manager marks it down a lease later and out `out_after` after that; its
//! PGs get the fourth OSD instead, which is backfilled until every PG is
//! active+clean with three members, none of them the dead one. Writes go on
//! the whole time; every acknowledged write must read back, and all three
//! copies of every object must be identical.

mod common;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::{Cluster, Model, Opts, all_clean, replicas_identical, verify, write_load};
use pontoon_client::Client;
use pontoon_cluster::ClusterMap;
use pontoon_types::OsdId;

const DEAD: u32 = 1;

/// Every PG has a full acting set of three without the dead OSD, and its
/// primary reports it active+clean.
fn backfilled(map: &ClusterMap, reports: &[pontoon_cluster::OsdReport]) -> Result<(), String> {
    let dead = OsdId(DEAD);
    if map.osds[&dead].in_cluster {
        return Err(format!("{dead} is not out yet"));
    }
    if let Some(rec) = map.pgs.values().find(|r| r.acting.contains(&dead)) {
        return Err(format!("{} still has {dead}: {:?}", rec.pg, rec.acting));
    }
    all_clean(map, reports)
}

#[test]
fn a_dead_osd_is_marked_out_and_its_pgs_backfilled_elsewhere() {
    let mut c = Cluster::up(Opts {
        osds: 4,
        osd_size: "512M",
        lease_ttl: Duration::from_secs(3),
        out_after: Duration::from_secs(5),
        ..Opts::default()
    });
    let before = c.three_replica_volume(32, "256M");
    let others: BTreeSet<OsdId> = (0..4).filter(|i| *i != DEAD).map(OsdId).collect();
    let with_dead: Vec<_> = before
        .pgs
        .values()
        .filter(|r| r.acting.contains(&OsdId(DEAD)))
        .map(|r| r.pg)
        .collect();
    assert!(
        with_dead.len() >= 8,
        "osd.{DEAD} serves {} PGs of 32: too few to move",
        with_dead.len()
    );

    let feed = c.feed();
    let rt = compio::runtime::Runtime::new().unwrap();
    let model = Rc::new(RefCell::new(Model::default()));
    let client = Client::new(feed.clone());
    let vol = client.open("v").expect("open volume");
    rt.block_on(write_load(&vol, Duration::from_secs(3), model.clone(), 1));

    // Kill it for good, and keep writing while the manager notices it down,
    // marks it out, and the PGs move and backfill.
    c.kill9_osd(DEAD);
    let killed = Instant::now();
    model.borrow_mut().reset_gap();
    let mut out_after = None;
    let mut round = 2;
    loop {
        rt.block_on(write_load(
            &vol,
            Duration::from_secs(1),
            model.clone(),
            round,
        ));
        round += 1;
        let map = feed.current();
        if out_after.is_none() && !map.osds[&OsdId(DEAD)].in_cluster {
            out_after = Some(killed.elapsed());
        }
        let reports = c.with_store(|s| async move { s.reports().await.expect("reports") });
        if out_after.is_some() && backfilled(&map, &reports).is_ok() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "not backfilled 60 s after the kill: {:?}\n{}",
            backfilled(&map, &reports),
            c.log()
        );
    }
    let settled = killed.elapsed();
    let out_after = out_after.expect("marked out");
    // Down after a lease (3 s), out 5 s later; the manager works in whole
    // seconds and passes at least every second.
    assert!(
        out_after >= Duration::from_secs(5) && out_after < Duration::from_secs(15),
        "osd.{DEAD} was marked out {out_after:?} after its death (lease 3 s, out after 5 s)"
    );
    let gap = model.borrow().longest_gap;
    assert!(
        gap < Duration::from_secs(10),
        "writes stalled for {gap:?} after the kill"
    );

    // Still so without load: every PG on the three survivors, clean.
    let map = c.wait_for("backfilled", Duration::from_secs(30), backfilled);
    for rec in map.pgs.values() {
        let members: BTreeSet<OsdId> = rec.acting.iter().copied().collect();
        assert_eq!(members, others, "{} has {:?}", rec.pg, rec.acting);
    }
    let reports = c.with_store(|s| async move { s.reports().await.expect("reports") });
    let recovered: u64 = reports
        .iter()
        .flat_map(|r| &r.pgs)
        .map(|p| p.recovered_objects)
        .sum();

    rt.block_on(verify(&vol, &model.borrow(), "after backfill"));
    let objects = replicas_identical(&feed, "v");
    // A client that starts now sees the same data.
    let fresh = Client::new(feed.clone()).open("v").expect("open volume");
    rt.block_on(verify(&fresh, &model.borrow(), "through a new client"));

    let m = model.borrow();
    eprintln!(
        "osd.{DEAD} out {out_after:?} after the kill, all clean after {settled:?}; \
         {} PGs moved, {recovered} objects recovered, {objects} objects compared on 3 replicas; \
         acknowledged writes {}, failed {}, read-backs {} ({} failed), longest gap {gap:?}",
        with_dead.len(),
        m.acks,
        m.failures,
        m.reads,
        m.read_failures
    );
    assert!(m.acks > 1000, "the load made progress: {} acks", m.acks);
    assert!(recovered > 0, "nothing was backfilled");
    drop(m);
    feed.shutdown();
}
