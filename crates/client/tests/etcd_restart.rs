//! etcd dies under load and comes back. The data path never touches etcd:
//! while the OSDs' liveness leases are still valid by their own clocks they
//! keep acknowledging writes and serving reads. A lease they cannot renew
//! turns invalid `TTL - TTL/5` after its last renewal, and then each OSD
//! fences itself (refuses I/O), because it cannot tell a dead etcd from
//! being cut off from a live one whose manager is about to hand its PGs to
//! others. When etcd is back the OSDs renew, unfence and serve again, map
//! changes work again, and the cluster is active+clean with every
//! acknowledged write intact.
//!
//! The cluster's processes are started by the test rather than by `pontoon
//! up` (which stops the whole cluster when its etcd exits); etcd is
//! restarted with the arguments `pontoon up` gives it, on the same data
//! directory and ports. With a lease TTL of 12 s an OSD's lease is valid
//! for 10.8 s after its last renewal, which came at most 1.2 s (TTL/10)
//! before the outage: a 4 s outage must not stop the data path, nor fence
//! any OSD once etcd is back (renewals resume at once, on fresh
//! connections); a 13 s one must fence them.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::{Cluster, Model, Opts, replicas_identical, verify, write_load};
use pontoon_client::Client;

const TTL: Duration = Duration::from_secs(12);
/// An outage the OSDs' leases outlive.
const SHORT: Duration = Duration::from_secs(4);
/// An outage past every OSD's lease validity.
const LONG: Duration = Duration::from_secs(13);
/// By then every OSD has fenced itself: a lease is valid 9/10 of its TTL
/// after its last renewal (before the outage); half a second of slack.
const FENCED_BY: Duration = Duration::from_millis(12_000 * 9 / 10 + 500);
/// What an OSD logs when it fences itself.
const FENCED: &str = "fenced=true";
/// What the manager logs when it is elected.
const ELECTED: &str = "became manager leader";

fn fences(c: &Cluster) -> usize {
    (0..3)
        .map(|i| c.log_count(&format!("osd.{i}"), FENCED))
        .sum()
}

/// Waits until the client's map has volume `name`, then opens it.
fn open_when_mapped(client: &Client, name: &str) -> pontoon_client::Volume {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(v) = client.open(name) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "volume {name} never reached the client's map"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A volume created through the CLI (a map change in etcd) can be opened
/// and written through the client.
fn create_and_use(c: &Cluster, rt: &compio::runtime::Runtime, client: &Client, name: &str) {
    c.cli(&["volume", "create", name, "--size", "64M"]);
    let v = open_when_mapped(client, name);
    rt.block_on(async {
        let data = common::block(0x5eed);
        v.write_at(4096, &data)
            .await
            .unwrap_or_else(|e| panic!("writing new volume {name}: {e}"));
        let got = v.read_at(4096, 4096).await.expect("read back");
        assert!(got[..] == data[..], "{name} reads back what was written");
    });
}

#[test]
fn the_data_path_outlives_a_short_etcd_outage_fences_in_a_long_one_and_recovers() {
    let mut c = Cluster::own(Opts {
        osds: 3,
        osd_size: "256M",
        lease_ttl: TTL,
        out_after: Duration::from_secs(30),
        ..Opts::default()
    });
    c.three_replica_volume(16, "256M");
    let feed = c.feed();
    let rt = compio::runtime::Runtime::new().unwrap();
    let model = Rc::new(RefCell::new(Model::default()));
    let client = Client::new(feed.clone());
    let vol = client.open("v").expect("open volume");
    rt.block_on(write_load(&vol, Duration::from_secs(2), model.clone(), 1));
    let first = c.map();

    // 1. A short outage: writes and reads go on throughout.
    assert_eq!(fences(&c), 0, "no OSD fenced itself yet");
    c.kill9_etcd();
    let down = Instant::now();
    model.borrow_mut().reset_gap();
    let reads_before = model.borrow().reads;
    rt.block_on(write_load(&vol, SHORT, model.clone(), 2));
    let back = Instant::now();
    c.start_etcd();
    {
        let m = model.borrow();
        let gap = m.longest_gap;
        let during = m.acks_between(down, back);
        eprintln!("short outage: {during} acks, longest gap {gap:?}");
        assert!(
            gap < Duration::from_secs(2),
            "writes stalled {gap:?} while etcd was down"
        );
        for s in 0..SHORT.as_secs() {
            let from = down + Duration::from_secs(s);
            assert!(
                m.acks_between(from, from + Duration::from_secs(1)) > 0,
                "no write acknowledged in second {s} of the outage"
            );
        }
        assert!(m.reads > reads_before, "reads went on too");
        assert_eq!(m.failures + m.read_failures, 0, "nothing failed");
    }
    // Map changes work again, and the outage changed nothing else: no OSD
    // was seen down, so no PG started a new interval.
    create_and_use(&c, &rt, &client, "v2");
    rt.block_on(write_load(&vol, Duration::from_secs(1), model.clone(), 3));
    let map = c.wait_clean("after the short outage");
    assert_eq!(
        fences(&c),
        0,
        "an OSD fenced itself during a 4 s outage or after it (leases renewed too late)\n{}",
        c.log()
    );
    assert_eq!(map.epoch.0, first.epoch.0 + 1, "only the volume was added");
    assert_eq!(map.pgs, first.pgs, "no PG changed");
    rt.block_on(verify(&vol, &model.borrow(), "after the short outage"));

    // 2. A long outage: the OSDs fence themselves once their leases may
    // have expired — no write is acknowledged after that — and serve
    // again when etcd is back.
    c.kill9_etcd();
    let down = Instant::now();
    let elected = c.log_count("mgr", ELECTED);
    let (back, healthy) = rt.block_on(async {
        let restart = async {
            compio::time::sleep(LONG).await;
            let back = Instant::now();
            c.start_etcd();
            (back, Instant::now())
        };
        let load = write_load(&vol, LONG, model.clone(), 4);
        futures::join!(restart, load).0
    });
    let resumed = {
        let m = model.borrow();
        let fenced_from = down + FENCED_BY;
        let late = m.acks_between(fenced_from, back);
        let first_after = m.ack_times.iter().find(|t| **t >= back).copied();
        eprintln!(
            "long outage: {} acks before the leases ran out, {late} after; etcd healthy {:?} after its restart, first ack {:?} after that",
            m.acks_between(down, fenced_from),
            healthy - back,
            first_after.map(|t| t.saturating_duration_since(healthy))
        );
        assert_eq!(
            late, 0,
            "writes were acknowledged {FENCED_BY:?} after etcd died, when no lease is valid"
        );
        assert!(
            m.acks_between(down, down + SHORT) > 0,
            "the data path served while the leases were valid"
        );
        first_after.map(|t| t.saturating_duration_since(healthy))
    };
    rt.block_on(write_load(&vol, Duration::from_secs(2), model.clone(), 5));
    let resumed = resumed
        .or_else(|| {
            let m = model.borrow();
            m.ack_times
                .iter()
                .find(|t| **t >= back)
                .map(|t| t.saturating_duration_since(healthy))
        })
        .expect("writes resumed after etcd came back");
    assert!(
        resumed < Duration::from_secs(5),
        "writes resumed only {resumed:?} after etcd was healthy again"
    );

    assert_eq!(fences(&c), 3, "every OSD fenced itself once\n{}", c.log());

    create_and_use(&c, &rt, &client, "v3");
    let map = c.wait_clean("after the long outage");
    // The manager is elected again. It lost its lease in the outage and
    // could not resign (etcd was down), and etcd renews every lease when it
    // restarts: it has to wait for its old leader key to expire first.
    let deadline = healthy + Duration::from_secs(20);
    while c.log_count("mgr", ELECTED) == elected {
        assert!(
            Instant::now() < deadline,
            "no manager elected 20 s after the outage\n{}",
            c.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "manager elected again {:?} after etcd was back",
        healthy.elapsed()
    );
    for (id, o) in &map.osds {
        assert!(
            o.in_cluster && map.is_alive(*id),
            "{id} is alive and in after the outage"
        );
    }
    rt.block_on(verify(&vol, &model.borrow(), "after the long outage"));
    let objects = replicas_identical(&feed, "v");
    let m = model.borrow();
    eprintln!(
        "acknowledged writes {}, failed {}, read-backs {} ({} failed), {objects} objects identical on 3 replicas",
        m.acks, m.failures, m.reads, m.read_failures
    );
    drop(m);
    feed.shutdown();
}
