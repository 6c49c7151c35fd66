//! A multi-host Pontoon cluster on one machine, for failure tests with real
//! processes. This crate owns a private L2 network per [`Testbed`]: a
//! switch (a Linux bridge in a network namespace of its own), one network
//! namespace per [`Host`] plugged into it, and a port for the test process
//! itself (the root namespace holds `.254` of the testbed's /24), so the
//! test's client library reaches every host directly. It owns the link
//! faults between them (nftables rules on the switch: [`Testbed::cut`],
//! [`Testbed::cut_one_way`], [`Testbed::isolate`], ...), the processes it
//! starts in the hosts ([`Proc`]: etcd members, OSDs, managers, gateways)
//! and a temporary directory with their data and logs. Dropping the testbed
//! kills its processes and deletes its namespaces, links and rules.
//!
//! It must never touch anything it did not create: no firewall rules,
//! routes or addresses of the root namespace except its own veth and /24,
//! no process it did not start, no namespace but its own and the leftovers
//! of testbeds whose process is dead. Every wait is bounded and panics with
//! the tail of the logs; nothing fails silently.
//!
//! On top of it, [`load`] runs a load through the client library from
//! the test process and keeps the history of every operation for the
//! simulator's consistency checker, and [`scenario`] is the cluster the
//! failure scenarios share (three etcd hosts, three OSD hosts, two
//! managers, a size-3 pool) with the verdict they end on: clean again,
//! checker clean, replicas identical, processes running.
//!
//! Needs root (network namespaces, veth, bridges, nftables), `ip`
//! (iproute2), `nft` (nftables), Debian's etcd-server for
//! [`Testbed::start_etcd`], and the `pontoon` binary built beside the test
//! executable for the Pontoon daemons. Set `PONTOON_TEST_KEEP=1` to keep
//! the testbed's directory (logs, data) after a test.
//!
//! ```no_run
//! use std::time::Duration;
//! use pontoon_testbed::{MgrOpts, OsdOpts, Testbed};
//!
//! let tb = Testbed::new("partition");
//! let e: Vec<_> = ["e1", "e2", "e3"].iter().map(|n| tb.add_host(n)).collect();
//! let o: Vec<_> = ["o1", "o2", "o3"].iter().map(|n| tb.add_host(n)).collect();
//! let etcd = tb.start_etcd(&[&e[0], &e[1], &e[2]]);
//! for (i, h) in o.iter().enumerate() {
//!     tb.start_osd_alive(h, i as u32, &OsdOpts::default(), Duration::from_secs(60));
//! }
//! let m = tb.add_host("m1");
//! tb.start_mgr(&m, "m1", &MgrOpts::default());
//! tb.cli(&["pool", "create", "p", "--size", "3", "--pgs", "16", "--failure-domain", "host"]);
//! tb.cli(&["volume", "create", "v", "--size", "64M"]);
//! tb.wait_clean("new pool");
//! tb.cut(&o[0], &o[1]); // both ways, established connections too
//! tb.isolate(etcd.host(etcd.leader().expect("leader")));
//! tb.heal_all();
//! ```

#![warn(missing_docs)]

mod cluster;
mod etcd;
pub mod load;
mod netns;
mod nft;
mod proc;
pub mod scenario;
mod testbed;

pub use cluster::{MgrOpts, OsdOpts, all_clean, poll_map, pontoon_bin, tokio_rt};
pub use etcd::{ETCD_CLIENT_PORT, ETCD_PEER_PORT, EtcdCluster, etcd_bin};
pub use load::{Figures, Load, LoadShape};
pub use proc::Proc;
pub use scenario::{Rig, Scenario};
pub use testbed::{Host, Node, TestNode, Testbed};
