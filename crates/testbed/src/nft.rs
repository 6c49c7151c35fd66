//! Link faults as nftables rules on the testbed's switch.
//!
//! Every packet between two hosts (or a host and the test process) crosses
//! the bridge in the switch namespace, so one table there, in the `bridge`
//! family's forward hook, decides what gets through. A cut drops IPv4
//! packets silently — a partition looks like silence, not refusal — and
//! applies to established connections as much as to new ones, since it
//! matches every packet, not connection state. ARP still passes, so hosts
//! keep resolving each other: nobody sees "no route to host", only loss.
//!
//! The whole table is replaced atomically (`nft -f`) on every change, from
//! the set of faults kept here.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::process::Command;

use crate::netns;

/// The table this crate owns in the switch namespace.
pub(crate) const TABLE: &str = "pontoon_testbed";

/// The faults in force on a testbed's links.
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    /// (from, to): IPv4 packets from `from` to `to` are dropped.
    pub one_way: BTreeSet<(Ipv4Addr, Ipv4Addr)>,
    /// Addresses whose every packet, in or out, is dropped.
    pub isolated: BTreeSet<Ipv4Addr>,
}

impl Faults {
    /// The nft script that replaces the table with these faults.
    pub fn script(&self) -> String {
        let mut s = format!(
            "table bridge {TABLE}\ndelete table bridge {TABLE}\ntable bridge {TABLE} {{\n  \
             chain forward {{\n    type filter hook forward priority 0; policy accept;\n"
        );
        for ip in &self.isolated {
            let _ = writeln!(s, "    ip saddr {ip} counter drop");
            let _ = writeln!(s, "    ip daddr {ip} counter drop");
        }
        for (from, to) in &self.one_way {
            let _ = writeln!(s, "    ip saddr {from} ip daddr {to} counter drop");
        }
        s.push_str("  }\n}\n");
        s
    }

    /// Installs these faults in the switch namespace `ns`.
    pub fn apply(&self, ns: &str) {
        netns::must(
            Some(ns),
            Command::new("nft").args(["-f", "-"]),
            Some(&self.script()),
        );
    }
}

/// Packets the rules of the switch namespace `ns` dropped since they were
/// last replaced.
pub(crate) fn dropped_packets(ns: &str) -> u64 {
    let text = netns::must(
        Some(ns),
        Command::new("nft").args(["list", "table", "bridge", TABLE]),
        None,
    );
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(3)
        .filter(|w| w[0] == "counter" && w[1] == "packets")
        .filter_map(|w| w[2].parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_replaces_the_table_with_one_rule_per_fault() {
        let mut f = Faults::default();
        let a = Ipv4Addr::new(10, 64, 0, 1);
        let b = Ipv4Addr::new(10, 64, 0, 2);
        f.one_way.insert((a, b));
        f.isolated.insert(b);
        let s = f.script();
        assert!(
            s.starts_with("table bridge pontoon_testbed\ndelete table"),
            "{s}"
        );
        assert!(
            s.contains("ip saddr 10.64.0.1 ip daddr 10.64.0.2 counter drop"),
            "{s}"
        );
        assert!(s.contains("ip saddr 10.64.0.2 counter drop"), "{s}");
        assert!(s.contains("ip daddr 10.64.0.2 counter drop"), "{s}");
        assert!(!Faults::default().script().contains("drop"));
    }
}
