//! A multi-member etcd cluster, one member per host, on the hosts' own
//! addresses, asked about its health and leader over plain HTTP (etcd's
//! `/health` and its gRPC gateway), so no etcd client is needed here.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::proc::Proc;
use crate::testbed::{Host, Inner, Testbed, lock};

/// The port every member serves clients on (each host has its own namespace).
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// The port members talk to each other on.
pub const ETCD_PEER_PORT: u16 = 2380;
/// How long [`Testbed::start_etcd`] waits for a healthy majority.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one HTTP exchange with a member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const IO_TIMEOUT: Duration = Duration::from_millis(1000);

/// etcd, found as `pontoon up` finds it: `$PONTOON_ETCD_BIN`,
/// `/usr/bin/etcd` (Debian's etcd-server), then `$PATH`.
pub fn etcd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PONTOON_ETCD_BIN") {
        return PathBuf::from(p);
    }
    let paths = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(PathBuf::from("/usr/bin"))
        .chain(std::env::split_paths(&paths))
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
        .expect("etcd is not installed (Debian's etcd-server; scripts/deps.sh installs it)")
}

/// One HTTP/1.0 exchange with `ip:port`; the response body if any answer
/// came within the timeouts.
fn http(ip: Ipv4Addr, port: u16, method: &str, path: &str, body: &str) -> Option<String> {
    let addr = SocketAddr::from((ip, port));
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).ok()?;
    s.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(IO_TIMEOUT)).ok()?;
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = Vec::new();
    let _ = s.take(1 << 20).read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// A uint64 of etcd's gateway JSON (a string, or a number).
fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
}

/// What a member says of itself: its own id and the leader's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Status {
    member_id: u64,
    leader: u64,
}

/// Asks the member at `ip` for its status (`/v3/maintenance/status`).
fn status(ip: Ipv4Addr) -> Option<Status> {
    let body = http(ip, ETCD_CLIENT_PORT, "POST", "/v3/maintenance/status", "{}")?;
    parse_status(&body)
}

fn parse_status(body: &str) -> Option<Status> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    Some(Status {
        member_id: json_u64(&v["header"]["member_id"])?,
        leader: json_u64(&v["leader"])?,
    })
}

/// Whether the member at `ip` answers `/health` with `"health":"true"`.
fn healthy(ip: Ipv4Addr) -> bool {
    http(ip, ETCD_CLIENT_PORT, "GET", "/health", "")
        .is_some_and(|b| b.contains(r#""health":"true""#))
}

/// An etcd cluster of one member per host, started by [`Testbed::start_etcd`].
/// Member `i` runs on `hosts()[i]` as process `etcd.<i>`.
pub struct EtcdCluster {
    tb: Arc<Inner>,
    hosts: Vec<Host>,
    args: Vec<Vec<String>>,
    members: Mutex<Vec<Proc>>,
    /// Member ids, learnt at start (a restart keeps them).
    ids: Mutex<Vec<Option<u64>>>,
}

impl std::fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl Testbed {
    /// Starts one etcd member on each of `hosts` (on the host's address,
    /// ports [`ETCD_CLIENT_PORT`] and [`ETCD_PEER_PORT`]) as one cluster,
    /// with fresh data directories and test-speed elections (heartbeat
    /// 100ms, election timeout 1s); waits until every member is healthy
    /// and has told its member id. Pontoon helpers of the testbed use its
    /// endpoints from then on.
    pub fn start_etcd(&self, hosts: &[&Host]) -> EtcdCluster {
        assert!(!hosts.is_empty(), "etcd needs at least one member");
        let peer = |h: &Host| format!("http://{}:{ETCD_PEER_PORT}", h.ip());
        let initial: Vec<String> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| format!("e{i}={}", peer(h)))
            .collect();
        let initial = initial.join(",");
        let args: Vec<Vec<String>> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let client = format!("http://{}:{ETCD_CLIENT_PORT}", h.ip());
                let data = self.dir().join("etcd").join(format!("e{i}"));
                vec![
                    format!("--name=e{i}"),
                    format!("--data-dir={}", data.display()),
                    format!("--listen-client-urls={client}"),
                    format!("--advertise-client-urls={client}"),
                    format!("--listen-peer-urls={}", peer(h)),
                    format!("--initial-advertise-peer-urls={}", peer(h)),
                    format!("--initial-cluster={initial}"),
                    format!("--initial-cluster-token={}", self.inner.names.tag),
                    "--initial-cluster-state=new".into(),
                    "--heartbeat-interval=100".into(),
                    "--election-timeout=1000".into(),
                    "--auto-compaction-retention=1".into(),
                    "--logger=zap".into(),
                    "--log-outputs=stderr".into(),
                    "--log-level=warn".into(),
                ]
            })
            .collect();
        let bin = etcd_bin();
        let members = hosts
            .iter()
            .zip(&args)
            .enumerate()
            .map(|(i, (h, a))| h.spawn(&format!("etcd.{i}"), &bin, a))
            .collect();
        let etcd = EtcdCluster {
            tb: self.inner.clone(),
            hosts: hosts.iter().map(|h| (*h).clone()).collect(),
            args,
            members: Mutex::new(members),
            ids: Mutex::new(vec![None; hosts.len()]),
        };
        etcd.wait_members_healthy(hosts.len(), START_TIMEOUT);
        let deadline = Instant::now() + START_TIMEOUT;
        while etcd.learn_ids() < hosts.len() {
            etcd.check(deadline, "every etcd member to tell its id");
            std::thread::sleep(Duration::from_millis(100));
        }
        *lock(&self.inner.etcd) = Some(etcd.endpoints());
        etcd
    }
}

impl EtcdCluster {
    /// Members.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether it has no members (never: [`Testbed::start_etcd`] needs one).
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Members that make a majority.
    pub fn majority(&self) -> usize {
        self.len() / 2 + 1
    }

    /// The client URLs of every member, comma-separated (what `pontoon
    /// --etcd` takes).
    pub fn endpoints(&self) -> String {
        self.endpoint_list().join(",")
    }

    /// The client URLs of every member.
    pub fn endpoint_list(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.endpoint(i)).collect()
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://{}:{ETCD_CLIENT_PORT}", self.host(i).ip())
    }

    /// The host member `i` runs on.
    pub fn host(&self, i: usize) -> &Host {
        self.hosts
            .get(i)
            .unwrap_or_else(|| panic!("etcd has {} members, not member {i}", self.len()))
    }

    /// The process of member `i` (its latest start).
    pub fn member(&self, i: usize) -> Proc {
        self.host(i);
        lock(&self.members)[i].clone()
    }

    /// SIGKILLs member `i`.
    pub fn kill9_member(&self, i: usize) {
        self.member(i).kill9();
    }

    /// Starts member `i` again on its data directory (after a kill);
    /// returns without waiting for it to be healthy.
    pub fn restart_member(&self, i: usize) -> Proc {
        let old = self.member(i);
        assert!(
            !old.is_running(),
            "etcd member {i} (pid {}) is still running: kill it first",
            old.pid()
        );
        let args: Vec<String> = self.args[i]
            .iter()
            .map(|a| match a.as_str() {
                "--initial-cluster-state=new" => "--initial-cluster-state=existing".into(),
                _ => a.clone(),
            })
            .collect();
        let p = self.host(i).spawn(&format!("etcd.{i}"), etcd_bin(), &args);
        lock(&self.members)[i] = p.clone();
        p
    }

    /// Whether member `i` answers that it is healthy (it has a leader).
    pub fn is_healthy(&self, i: usize) -> bool {
        healthy(self.host(i).ip())
    }

    /// The members that answer that they are healthy.
    pub fn healthy_members(&self) -> Vec<usize> {
        (0..self.len()).filter(|i| self.is_healthy(*i)).collect()
    }

    /// Member `i`'s etcd member id, once learnt.
    pub fn member_id(&self, i: usize) -> Option<u64> {
        self.host(i);
        lock(&self.ids)[i]
    }

    /// Asks every member for its id; returns how many are known.
    fn learn_ids(&self) -> usize {
        for i in 0..self.len() {
            if self.member_id(i).is_none()
                && let Some(st) = status(self.host(i).ip())
            {
                lock(&self.ids)[i] = Some(st.member_id);
            }
        }
        lock(&self.ids).iter().flatten().count()
    }

    /// The leader a majority of members agree on (asking each one it can
    /// reach from the test process), or `None` if there is none right now.
    pub fn leader(&self) -> Option<usize> {
        self.learn_ids();
        let said: Vec<u64> = (0..self.len())
            .filter_map(|i| status(self.host(i).ip()))
            .map(|s| s.leader)
            .filter(|l| *l != 0)
            .collect();
        let ids = lock(&self.ids).clone();
        ids.iter().position(|id| {
            id.is_some_and(|id| said.iter().filter(|l| **l == id).count() >= self.majority())
        })
    }

    /// Makes member `to` the leader: asks the current leader to hand over
    /// (etcd's `MoveLeader`, through its gateway) until a majority agrees
    /// `to` leads, for up to `timeout`.
    pub fn move_leader(&self, to: usize, timeout: Duration) {
        self.host(to);
        let deadline = Instant::now() + timeout;
        loop {
            match self.leader() {
                Some(l) if l == to => return,
                Some(l) => {
                    if let Some(id) = self.member_id(to) {
                        let body = format!(r#"{{"targetID":"{id}"}}"#);
                        let _ = http(
                            self.host(l).ip(),
                            ETCD_CLIENT_PORT,
                            "POST",
                            "/v3/maintenance/transfer-leadership",
                            &body,
                        );
                    }
                }
                None => {}
            }
            self.check(deadline, &format!("etcd member {to} to lead"));
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits up to `timeout` for a leader a majority agrees on.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return l;
            }
            self.check(deadline, "an etcd leader");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits up to `timeout` until a majority of members is healthy.
    pub fn wait_healthy(&self, timeout: Duration) {
        self.wait_members_healthy(self.majority(), timeout);
    }

    /// Waits up to `timeout` until at least `n` members are healthy.
    pub fn wait_members_healthy(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.healthy_members().len() >= n {
                return;
            }
            self.check(deadline, &format!("{n} healthy etcd members"));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Panics, with the logs, if the deadline passed.
    fn check(&self, deadline: Instant, what: &str) {
        if Instant::now() < deadline {
            return;
        }
        let running: Vec<String> = lock(&self.members)
            .iter()
            .map(|p| format!("{}: {:?}", p.name(), p.exit_status()))
            .collect();
        panic!(
            "timed out waiting for {what}: healthy members {:?}, processes (exit status) {running:?}\n{}",
            self.healthy_members(),
            self.tb.logs_tail()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parses_the_gateway_json() {
        let body = r#"{"header":{"cluster_id":"1","member_id":"10501334649042878790","revision":"1","raft_term":"2"},"version":"3.4.23","dbSize":"20480","leader":"10501334649042878790","raftIndex":"4","raftTerm":"2"}"#;
        assert_eq!(
            parse_status(body),
            Some(Status {
                member_id: 10501334649042878790,
                leader: 10501334649042878790
            })
        );
        assert_eq!(parse_status("{}"), None);
        assert_eq!(parse_status("garbage"), None);
    }
}
