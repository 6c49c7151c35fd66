//! A small Pontoon cluster across namespaces: three etcd hosts, three OSD
//! hosts and a manager host; a three-replica pool with failure domain host
//! gets clean, its PGs span the three OSD hosts, and the test process
//! writes and reads a volume straight to the OSDs through the bridge.

use std::collections::BTreeSet;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pontoon_client::{Client, MapFeed};
use pontoon_testbed::{MgrOpts, OsdOpts, Proc, Testbed};

/// The first 16 bytes an NBD server sends, once it listens (up to 20s).
fn wait_greeting(addr: SocketAddr, p: &Proc, tb: &Testbed) -> [u8; 16] {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut buf = [0u8; 16];
            s.read_exact(&mut buf).expect("greeting");
            return buf;
        }
        assert!(
            p.is_running() && Instant::now() < deadline,
            "the gateway does not listen on {addr}\n{}",
            tb.logs_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_pool_with_failure_domain_host_gets_clean_across_three_osd_hosts() {
    let tb = Testbed::new("cluster");
    let e: Vec<_> = ["e1", "e2", "e3"].iter().map(|n| tb.add_host(n)).collect();
    let o: Vec<_> = ["o1", "o2", "o3"].iter().map(|n| tb.add_host(n)).collect();
    let m = tb.add_host("m1");
    let etcd = tb.start_etcd(&[&e[0], &e[1], &e[2]]);

    // In id order, each registered before the next (ids are handed out in order).
    let osds: Vec<_> = o
        .iter()
        .enumerate()
        .map(|(i, h)| tb.start_osd_alive(h, i as u32, &OsdOpts::default(), Duration::from_secs(60)))
        .collect();
    let map = tb.wait_osds_alive(&[0, 1, 2], Duration::from_secs(10));
    for (i, h) in o.iter().enumerate() {
        let rec = &map.osds[&pontoon_types::OsdId(i as u32)];
        assert_eq!(rec.host, h.name());
        assert!(
            rec.addrs.iter().all(|a| a.ip() == h.ip()),
            "osd.{i} listens on its host's address: {:?}",
            rec.addrs
        );
    }
    let mgr = tb.start_mgr(&m, "m1", &MgrOpts::default());

    let map = tb.three_host_volume(16, "v", "64M");
    assert_eq!(map.pgs.len(), 16);
    for (pg, rec) in &map.pgs {
        let hosts: BTreeSet<&str> = rec
            .acting
            .iter()
            .map(|id| map.osds[id].host.as_str())
            .collect();
        assert_eq!(hosts.len(), 3, "{pg} spans three hosts: {:?}", rec.acting);
    }

    // The test process reaches every primary directly.
    let feed = MapFeed::connect(&etcd.endpoint_list(), tb.cluster_name()).expect("map feed");
    let rt = compio::runtime::Runtime::new().expect("compio runtime");
    rt.block_on(async {
        let client = Client::new(feed.clone());
        let vol = client.open("v").expect("open volume");
        let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        // 64 KiB at 16 places: objects of several PGs.
        for k in 0..16u64 {
            vol.write_at(k * (4 << 20), &data).await.expect("write");
        }
        for k in 0..16u64 {
            let got = vol
                .read_at(k * (4 << 20), data.len() as u64)
                .await
                .expect("read");
            assert!(got[..] == data[..], "read back at {k}");
        }
    });
    let status = tb.cli(&["status"]);
    assert!(!status.is_empty());

    // A gateway in a host of its own greets the test process.
    let gw = tb.add_host("g1");
    let nbd = tb.start_nbd(&gw, 10809);
    let greeting = wait_greeting((gw.ip(), 10809).into(), &nbd, &tb);
    assert_eq!(&greeting[..8], b"NBDMAGIC");

    for p in osds.iter().chain([&mgr, &nbd]) {
        assert!(p.is_running(), "{} exited\n{}", p.name(), tb.logs_tail());
    }
}
